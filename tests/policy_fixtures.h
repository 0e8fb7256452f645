// Hand-made policy inputs shared by the policy tests (policy_test,
// seed_conformance_test, replan_decide_test).
#ifndef GEARBOX_TESTS_POLICY_FIXTURES_H_
#define GEARBOX_TESTS_POLICY_FIXTURES_H_

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "gearbox/gear_set.h"
#include "gearbox/options.h"
#include "gearbox/policy.h"
#include "gearbox/stats.h"

namespace gearbox::policy_fixtures {

inline constexpr double kHalfLife = 150.0;

// Events for one gear: `n` samples of size `raw`, spread evenly over [t0, t1].
inline std::vector<RawEvent> Spread(int64_t raw, int n, double t0, double t1) {
  std::vector<RawEvent> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({raw, n == 1 ? t0 : t0 + (t1 - t0) * i / (n - 1), 1});
  }
  return out;
}

// Window statistics of a one-dimensional set from per-gear events.
inline WindowStats OneDim(const GearSet& gears,
                          const std::map<int64_t, std::vector<RawEvent>>& events, double now,
                          double created = -1e9) {
  WindowStats stats;
  stats.now = now;
  DimensionStats& d = stats.dimensions.emplace_back();
  d.name = gears.dimension(0).name;
  for (int64_t g : gears.gears(0)) {
    auto it = events.find(g);
    d.gears.push_back(MakeGearStats(g, it == events.end() ? std::vector<RawEvent>{} : it->second,
                                    now, kHalfLife, created));
  }
  FinalizeDimensionStats(&d);
  return stats;
}

// A splittable BATCHSIZE dimension with gears `g`.
inline GearSet Batch(std::vector<int64_t> g) {
  return *GearSet::Create({{"BATCHSIZE", std::move(g), true, false}});
}

// The record of `gear` in a decision (a test failure when there is none).
inline const GearRecord& RecordOf(const UpdateDecision& d, int64_t gear) {
  for (const GearRecord& r : d.record.gears)
    if (r.gear == gear) return r;
  ADD_FAILURE() << "no record for gear " << gear;
  static GearRecord none;
  return none;
}

// The seed's options without recent-use protection.
inline AdaptiveOptions NoProtection() {
  AdaptiveOptions o;
  o.recent_use_protect_seconds = 0;
  return o;
}

// Memory above the seed's 0.90 threshold.
inline MemoryState High() {
  MemoryState m;
  m.usage = 0.95;
  m.threshold = 0.90;
  m.high = true;
  return m;
}

}  // namespace gearbox::policy_fixtures

#endif  // GEARBOX_TESTS_POLICY_FIXTURES_H_
