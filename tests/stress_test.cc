// Bounded concurrency stress in CI (also under ThreadSanitizer): see
// tests/stress_harness.h for what runs and docs/RELIABILITY.md for the
// invariants. The long version is the soak program (tests/soak_main.cc).
#include <gtest/gtest.h>

#include "tests/stress_harness.h"

namespace gearbox::testing {
namespace {

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define GEARBOX_SANITIZED 1
#endif
#endif

// The update policy and gear scheme under test.
struct Variant {
  const char* name;
  bool replan;
  GearScheme scheme;
};

class Stress : public ::testing::TestWithParam<Variant> {};

TEST_P(Stress, RequestsUpdatesAndReleasesInterleaveSafely) {
  StressConfig config;
  config.replan = GetParam().replan;
  config.scheme = GetParam().scheme;
  config.threads = 3;
  // The replan variant (cheap compiles, no protection) changes the gears at
  // nearly every update and compiles far more per request: fewer requests.
#ifdef GEARBOX_SANITIZED
  config.requests_per_thread = config.replan ? 15000 : 150000;  // sanitizers run 5-15x slower
#else
  config.requests_per_thread = config.replan ? 60000 : 340000;  // 10^6 requests, 3,400 updates
#endif
  config.requests_per_update = 100;
  const StressReport report = RunStress(config);
  for (const std::string& v : report.Violations(config)) ADD_FAILURE() << v;
  EXPECT_GT(report.updates_changed, 10u) << "the test should churn gears";
  EXPECT_GT(report.keys_released, 10u) << "the test should evict compiled gears";
  std::printf("stress (%s): %s\n", GetParam().name, report.Summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(Policies, Stress,
                         ::testing::Values(Variant{"Adaptive", false, GearScheme::kIndependent},
                                           Variant{"Replan", true, GearScheme::kIndependent},
                                           Variant{"ReplanJoint", true, GearScheme::kJoint},
                                           Variant{"ReplanSparse", true, GearScheme::kSparse}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace gearbox::testing
