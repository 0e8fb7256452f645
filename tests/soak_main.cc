// The soak program (run by hand): several request threads and an update every
// millisecond of real time, for as many requests as asked, then the
// invariants of docs/RELIABILITY.md.
//   build/tests/gearbox_soak [requests=10000000] [threads=4] [update_period_us=1000]
//   [policy=adaptive]
// policy: adaptive, replan, joint or sparse (the replan policy on that gear scheme).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/stress_harness.h"

int main(int argc, char** argv) {
  gearbox::testing::StressConfig config;
  const long long requests = argc > 1 ? std::atoll(argv[1]) : 10000000;
  config.threads = argc > 2 ? std::atoi(argv[2]) : 4;
  config.update_period_us = argc > 3 ? std::atoll(argv[3]) : 1000;
  const std::string policy = argc > 4 ? argv[4] : "adaptive";
  config.replan = policy != "adaptive";
  config.scheme = policy == "joint"    ? gearbox::GearScheme::kJoint
                  : policy == "sparse" ? gearbox::GearScheme::kSparse
                                       : gearbox::GearScheme::kIndependent;
  const bool known =
      policy == "adaptive" || policy == "replan" || policy == "joint" || policy == "sparse";
  if (requests < 1 || config.threads < 1 || config.update_period_us < 1 || !known) {
    std::fprintf(stderr,
                 "usage: gearbox_soak [requests >= 1] [threads >= 1] [update_period_us >= 1] "
                 "[adaptive|replan|joint|sparse]\n");
    return 2;
  }
  config.requests_per_thread = requests / config.threads;
  config.progress = true;
  const gearbox::testing::StressReport report = gearbox::testing::RunStress(config);
  std::printf("soak: %s\n", report.Summary().c_str());
  const auto violations = report.Violations(config);
  for (const auto& v : violations) std::printf("VIOLATION: %s\n", v.c_str());
  std::printf("%s\n", violations.empty() ? "all invariants held" : "FAILED");
  return violations.empty() ? 0 : 1;
}
