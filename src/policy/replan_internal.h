// Internal to the replan policy (src/policy/replan*.cc): the steps
// DecideReplan (replan.cc) runs, one file each.
//   replan_distribution.cc  the window's size distribution and padding costs
//   replan_dimension.cc     one dimension: target, whole-target adoption, moves
//   replan_combinations.cc  joint and sparse sets: which grid cells to compile
//   replan_options.cc       ValidateReplanOptions
#ifndef GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_
#define GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "gearbox/replan_policy.h"

namespace gearbox::internal {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The window's size distribution with prefix sums, so the padding cost of
// any gear set is O(gears * log sizes).
class Distribution {
 public:
  Distribution(const std::vector<WeightedSize>& sizes, const GearCostModel& m);
  bool empty() const { return value_.empty(); }
  double total_weight() const { return weight_.back(); }
  int64_t max_size() const { return value_.back(); }

  // Padding seconds of the window on `gears` (ascending): each size runs on
  // the smallest gear >= it; above the largest gear, a splittable dimension
  // pays its remainder's padding and one seconds_per_run per extra chunk, a
  // non-splittable one runs eagerly (none).
  double Padding(const std::vector<int64_t>& gears, bool splittable) const;
  // Padding seconds of the sizes in (lo, hi] all running on `gear`.
  double Segment(int64_t lo, int64_t hi, int64_t gear) const;
  // The sizes up to `up_to` with their weights.
  SizeHistogram Histogram(int64_t up_to) const;
  // Number of sizes <= x.
  size_t Index(int64_t x) const;

 private:
  const GearCostModel& m_;
  std::vector<int64_t> value_;
  std::vector<double> weight_;  // prefix sums
  std::vector<double> run_;     // prefix sums of weight * Run(size)
};

// The horizon factor: window padding times this is padding over the payback
// horizon (the window's decayed weights stand for only the part of it that
// has traffic yet).
double HorizonFactor(double observed_seconds, const AdaptiveOptions& adaptive,
                     const ReplanOptions& o);

// What one dimension's gears cost, seen from the others: with several
// dimensions a graph runs the product of its gears and is compiled per
// combination, so a gear of dimension d costs one compile (and one held
// graph) per gear in use in each other dimension, and its sizes run at
// seconds_per_unit times the mean of the others' gear^runtime_exponent.
struct DimensionCost {
  GearCostModel model;        // this dimension's view of the cost model
  double combinations = 1.0;  // graphs per gear of this dimension (at most)
  double compile = 0.0;       // weighted seconds to compile one gear
  double holding = 0.0;       // the most a removal may lose (one held graph, never a compile)
};
std::vector<DimensionCost> CostPerDimension(const GearSet& gears, const WindowStats& stats,
                                            const ReplanOptions& o);

// The statistics of dimension d of `gears`, or nullptr when the window has none.
const DimensionStats* StatsOf(const GearSet& gears, const WindowStats& stats, int d);

// One dimension: plans the target, adopts it whole when that pays, else
// moves toward it one change at a time. Fills out->next_gears[d],
// out->added[d], out->removed[d] and the record's targets, changes,
// declined and verdicts.
void ReplanDimension(const GearSet& gears, int d, const DimensionStats* ds,
                     const DimensionCost& cost, const MemoryState& memory,
                     const AdaptiveOptions& adaptive, const ReplanOptions& o, double now,
                     UpdateDecision* out);

// Joint and sparse gear sets: which cells of the next grid
// (out->next_gears) are compiled combinations. Fills out->next_combinations
// and the record's changes and declined.
void DecideCombinations(const GearSet& current, const WindowStats& stats, const MemoryState& memory,
                        const AdaptiveOptions& adaptive, const ReplanOptions& o, double now,
                        UpdateDecision* out);

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_
