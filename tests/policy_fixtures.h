// Hand-made policy inputs shared by the policy tests (policy_test,
// seed_conformance_test, replan_decide_test).
#ifndef GEARBOX_TESTS_POLICY_FIXTURES_H_
#define GEARBOX_TESTS_POLICY_FIXTURES_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
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

// A gear-bytes predictor by formula: a gear combination costs
// bytes_per_unit x the product of its sizes; those in `held` are compiled
// (adding one adds nothing, releasing it frees its bytes); the bytes in use
// are the held ones'. With `unpredictable`, AddedBytes knows nothing.
class ProductBytesPredictor final : public GearBytesPredictor {
 public:
  ProductBytesPredictor(int64_t bytes_per_unit, std::set<std::vector<int64_t>> held,
                        bool unpredictable = false)
      : per_unit_(bytes_per_unit), held_(std::move(held)), unpredictable_(unpredictable) {}
  int64_t Bytes(std::span<const int64_t> gears) const {
    int64_t p = per_unit_;
    for (int64_t g : gears) p *= g;
    return p;
  }
  std::optional<int64_t> AddedBytes(std::span<const int64_t> gears) const override {
    if (unpredictable_) return std::nullopt;
    return held_.count({gears.begin(), gears.end()}) ? 0 : Bytes(gears);
  }
  int64_t FreedBytes(std::span<const int64_t> gears) const override {
    return held_.count({gears.begin(), gears.end()}) ? Bytes(gears) : 0;
  }
  int64_t InUseBytes() const override {
    int64_t sum = 0;
    for (const auto& g : held_) sum += Bytes(g);
    return sum;
  }
  std::optional<int64_t> AloneBytes(std::span<const int64_t> gears) const override {
    if (unpredictable_) return std::nullopt;
    return Bytes(gears);
  }

 private:
  int64_t per_unit_;
  std::set<std::vector<int64_t>> held_;
  bool unpredictable_;
};

// The memory state of a byte budget over a one-dimensional set whose gears
// `held` are compiled, each costing bytes_per_unit x its size.
inline MemoryState ByteBudget(int64_t budget, const std::vector<int64_t>& held,
                              int64_t bytes_per_unit = 1000, bool unpredictable = false) {
  std::set<std::vector<int64_t>> combos;
  for (int64_t g : held) combos.insert({g});
  auto p = std::make_shared<ProductBytesPredictor>(bytes_per_unit, combos, unpredictable);
  MemoryState m;
  m.budget_bytes = budget;
  m.bytes_in_use = p->InUseBytes();
  m.predictor = p;
  return m;
}

}  // namespace gearbox::policy_fixtures

#endif  // GEARBOX_TESTS_POLICY_FIXTURES_H_
