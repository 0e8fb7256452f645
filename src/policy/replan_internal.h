// Internal to the replan policy (src/policy/replan*.cc): the steps
// DecideReplan (replan.cc) runs, one file each.
//   replan_distribution.cc  the window's size distribution and padding costs
//   replan_dimension.cc     one dimension: target, whole-target adoption, moves
//   replan_combinations.cc  joint and sparse sets: which grid cells to compile
//   replan_regime.cc        the stationary regime of a dimension's size history
//   replan_options.cc       ValidateReplanOptions
#ifndef GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_
#define GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <span>
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
  // The variance of the window's padding difference between the gear sets
  // `a` and `b` (ascending): sum over sizes of weight * (padding on a -
  // padding on b)^2. The window's weights read as Poisson counts, so a
  // gain read off n requests is uncertain by about gain / sqrt(n).
  double DifferenceVariance(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                            bool splittable) const;
  // Padding seconds of the sizes in (lo, hi] all running on `gear`.
  double Segment(int64_t lo, int64_t hi, int64_t gear) const;
  // The sizes up to `up_to` with their weights.
  SizeHistogram Histogram(int64_t up_to) const;
  // Number of sizes <= x.
  size_t Index(int64_t x) const;

 private:
  // Padding seconds of one request of `size` on `gears` (as Padding).
  double SizePadding(int64_t size, const std::vector<int64_t>& gears, bool splittable) const;

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

// The regime (docs/POLICY.md, "The regime"): the stretch of a dimension's
// size history (DimensionStats::size_history, bins of `bin_seconds`) that
// ends now and reaches back, at most `max_seconds`, while each window of
// `window_bins` bins at its start has sizes a two-sample Kolmogorov-Smirnov
// test cannot tell apart from the last window's; its sizes with their
// counts as weights. None when the stretch would be shorter than two
// windows, when the last window has fewer than kRegimeMinSamples requests,
// or when its newest kRegimeNewestBins bins differ from the rest of the
// shortest stretch in their sizes (the same test) or pad more per request on
// `gears` (the current gears, ascending; a one-sided z test). Every test is
// at the 0.1 % level. Pure.
inline constexpr double kRegimeMinSamples = 20;
inline constexpr int kRegimeNewestBins = 2;
inline constexpr double kRegimeTestCoefficient = 1.949;  // KS c(alpha), alpha = 0.001
inline constexpr double kRegimePaddingSigmas = 3.090;    // one-sided, 0.001
struct StationaryRegime {
  std::vector<WeightedSize> sizes;  // ascending; weights are request counts
  double seconds = 0.0;             // from the stretch's first bin to now
  int64_t start_bin = 0;
  // Of the tests run, the one nearest to rejecting: its statistic and the
  // value that would have rejected.
  double statistic = 0.0;
  double critical = 0.0;
};
std::optional<StationaryRegime> FindStationaryRegime(const std::vector<SizeHistoryBin>& history,
                                                     double bin_seconds, double now,
                                                     int window_bins, double max_seconds,
                                                     const std::vector<int64_t>& gears,
                                                     bool splittable);

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

// The graph budget (ReplanOptions::max_graphs) as gear caps for the
// independent scheme with several dimensions, whose every combination may
// compile: caps whose product is at most `budget`. cost_curves[d][k - 1] is
// dimension d's modelled cost (padding over the horizon plus compiles) with
// k gears, for k up to the gears its target wants (CostCurve). From one gear
// each, the dimension whose next gear saves most per unit of the budget's
// logarithm gets it, while the product fits; room left then goes to
// dimensions that hold more gears (`current`) than their cap, so that the
// hysteresis band keeps them, and what is left after that to the smallest
// cap, one gear at a time. Every cap is in [1, max_per_dimension]. With
// `shares`, also what the first step alone gives each dimension: the gears
// the budget's split plans for it, before any room for gears it holds. Pure.
std::vector<int> GearCaps(std::span<const std::vector<double>> cost_curves,
                          std::span<const int> current, int budget, int max_per_dimension,
                          std::vector<int>* shares = nullptr);

// Dimension d's cost curve for GearCaps: the modelled cost of its target
// at 1, 2, ... gears, up to what the target wants uncapped; {0} (one gear,
// no cost) when the window says nothing about it.
std::vector<double> CostCurve(const GearSet& gears, int d, const DimensionStats* ds,
                              const DimensionCost& cost, const AdaptiveOptions& adaptive,
                              const ReplanOptions& o);

// How many gears a dimension may hold in this update.
struct GearLimit {
  // Additions stop here: max_gears_per_type, or the dimension's share of
  // max_graphs (GearCaps).
  int max_gears = 64;
  // Above both this and max_gears, gears go (young ones too) until it holds:
  // max_gears_per_type, or with the independent scheme the most that fit
  // max_graphs beside the other dimensions' gears.
  int hard_max_gears = 64;
  // The gears the graph budget's split plans for this dimension (GearCaps'
  // shares; max_gears where no budget is split). At its addition cap a
  // dimension within this share may replace any gear its target lacks by a
  // target gear; one above it only shrinks toward it.
  int planned_share = 64;
};

void ReplanDimension(const GearSet& gears, int d, const DimensionStats* ds,
                     const DimensionCost& cost, const MemoryState& memory,
                     const AdaptiveOptions& adaptive, const ReplanOptions& o, GearLimit limit,
                     double now, UpdateDecision* out);

// Joint and sparse gear sets: which cells of the next grid
// (out->next_gears) are compiled combinations. Fills out->next_combinations
// and the record's changes and declined.
void DecideCombinations(const GearSet& current, const WindowStats& stats, const MemoryState& memory,
                        const AdaptiveOptions& adaptive, const ReplanOptions& o, double now,
                        UpdateDecision* out);

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_POLICY_REPLAN_INTERNAL_H_
