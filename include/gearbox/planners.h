// Offline gear planners: given the sizes a dimension saw, which K gears
// would have wasted the least padding? Used by `gearbox plan` and as the
// yardstick replays are compared with.
#ifndef GEARBOX_PLANNERS_H_
#define GEARBOX_PLANNERS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/gear_set.h"

namespace gearbox {

// Sizes as sorted distinct values with their counts.
struct GEARBOX_EXPORT SizeHistogram {
  std::vector<int64_t> values;  // ascending, distinct, >= 1
  std::vector<double> counts;   // > 0

  static SizeHistogram FromSizes(std::span<const int64_t> sizes);
  double total_count() const;
  double total_size() const;  // sum of count * value
};

struct GearPlan {
  std::vector<int64_t> gears;  // ascending
  double padded = 0.0;         // sum over executed chunks of their gear
  double raw = 0.0;            // sum of the sizes
  double waste() const { return raw > 0 ? padded / raw - 1.0 : 0.0; }
  // How the largest gear was searched (splittable dimensions).
  std::string search;
};

// Padded total of `sizes` on `gears` (ascending) as the runtime plans them:
// pad up to the smallest gear >= size; above the largest gear, split into
// full chunks plus a padded remainder when `splittable`, else an error.
GEARBOX_EXPORT absl::StatusOr<double> PaddedTotal(const SizeHistogram& sizes,
                                                  std::span<const int64_t> gears, bool splittable);

// The K gears minimising total padding, by exact dynamic programming
// (O(K M log M) for M distinct sizes: the bucket cost is Monge, so the
// optimal split points are monotone and divide-and-conquer finds them).
// Non-splittable: the largest gear is the largest size. Splittable: every
// largest gear G from 1 to the largest size is tried (remainders of larger
// sizes join the sizes below G) when that is cheap enough, else every G
// among the distinct sizes; `search` says which.
GEARBOX_EXPORT absl::StatusOr<GearPlan> OptimalGears(const SizeHistogram& sizes, int k,
                                                     bool splittable);

// ---- Bucket-boundary algorithms (seeds/001 §17.5.2) and their cost model ----

enum class PlanMethod {
  kUniform,   // equal intervals between the smallest and the largest size
  kQuantile,  // the size distribution's i/K quantiles
  kKMeans,    // k-means++ seeding, then Lloyd iterations; a cluster's gear is its largest size
  kDp,        // exact dynamic programming (minimal padding, or minimal modelled cost)
};
GEARBOX_EXPORT std::string_view PlanMethodName(PlanMethod method);
GEARBOX_EXPORT absl::StatusOr<PlanMethod> ParsePlanMethod(std::string_view name);

// At most k gears for `sizes` by `method`, the largest covering the largest
// size (no splitting). kKMeans uses `seed`.
GEARBOX_EXPORT absl::StatusOr<std::vector<int64_t>> PlanGears(const SizeHistogram& sizes, int k,
                                                              PlanMethod method, uint64_t seed = 1);

// Cost = alpha * compile + beta * padding runtime + gamma * memory (§17.5.2):
//   compile        = gears * compile_seconds
//   padding runtime = sum over sizes of count * (run(gear) - run(size)),
//                    run(g) = seconds_per_run + seconds_per_unit * g^runtime_exponent
//   memory         = sum over gears of (memory_fixed_bytes +
//                    memory_bytes_per_unit * g^memory_exponent), in GiB
// An exponent of 2 models attention, whose work grows with the square of
// the sequence.
struct GEARBOX_EXPORT GearCostModel {
  double compile_seconds = 0.5;
  double seconds_per_unit = 1e-6;
  double runtime_exponent = 1.0;
  double memory_fixed_bytes = 0.0;
  double memory_bytes_per_unit = 0.0;
  double memory_exponent = 1.0;
  double alpha = 1.0;
  double beta = 1.0;
  double gamma = 0.0;
  // What every executed variant costs whatever its size (a launch, reading
  // the weights once): the price of splitting a request into more chunks.
  double seconds_per_run = 0.0;

  double Run(int64_t size) const;        // seconds
  double GearBytes(int64_t gear) const;  // bytes
};
GEARBOX_EXPORT absl::Status ValidateCostModel(const GearCostModel& model);

struct CostBreakdown {
  double compile_seconds = 0.0;
  double padding_seconds = 0.0;
  double memory_gib = 0.0;
  double total = 0.0;  // weighted
};
// The cost of serving `sizes` on `gears` (ascending; the largest must cover
// the largest size).
GEARBOX_EXPORT absl::StatusOr<CostBreakdown> EvaluateCost(const SizeHistogram& sizes,
                                                          std::span<const int64_t> gears,
                                                          const GearCostModel& model);

// The gear count (1..budget) and gears minimising the modelled cost:
// kDp solves the cost model exactly (one DP layer per count); the others
// plan each count with their own rule and keep the cheapest.
struct CostPlan {
  GearPlan plan;
  CostBreakdown cost;
};
GEARBOX_EXPORT absl::StatusOr<CostPlan> PlanWithCostModel(const SizeHistogram& sizes, int budget,
                                                          PlanMethod method,
                                                          const GearCostModel& model,
                                                          uint64_t seed = 1);

// As PlanWithCostModel with kDp, for a runtime that already holds `held`
// (any order) compiled: a held gear within the sizes' range is a candidate
// that costs `held_cost` (weighted seconds: what keeping it costs) instead
// of a compile (its memory still counts), so the plan keeps it unless
// another position saves more than the difference. The breakdown's compile
// seconds count only the gears it adds; its total includes held_cost.
// held_cost must be finite and >= 0 (an error names it).
GEARBOX_EXPORT absl::StatusOr<CostPlan> PlanWithHeldGears(const SizeHistogram& sizes, int budget,
                                                          const GearCostModel& model,
                                                          std::span<const int64_t> held,
                                                          double held_cost = 0.0);
// The gears PlanWithHeldGears plans within every budget 1..max_budget
// (element b - 1 for budget b), from one DP instead of one per budget.
GEARBOX_EXPORT absl::StatusOr<std::vector<std::vector<int64_t>>> PlanWithHeldGearsPerBudget(
    const SizeHistogram& sizes, int max_budget, const GearCostModel& model,
    std::span<const int64_t> held, double held_cost = 0.0);

// ---- Two-dimensional gears (seeds/001 §17.5.3) ----

// A two-dimensional request (e.g. decode batch x context length).
struct Size2D {
  int64_t a = 0;
  int64_t b = 0;
  double count = 1.0;
};

// Offline plans for the three gear schemes (gear_set.h): kIndependent, a gear
// list per dimension and a graph per combination used; kJoint, G combinations
// chosen together (k-means++ then Lloyd); kSparse, a fine independent grid
// compiling only the combinations that carry most traffic, the rest run
// uncompiled at their exact size.
struct JointPlan {
  GearScheme scheme = GearScheme::kIndependent;
  std::vector<GearCombination> graphs;  // compiled combinations
  double padded = 0.0;                  // sum of count x product of the combination served on
  double raw = 0.0;                     // sum of count x a x b
  double fallback_share = 0.0;          // share of requests run uncompiled (sparse)
  double waste() const { return raw > 0 ? padded / raw - 1.0 : 0.0; }
};

// Plans at most `max_graphs` compiled combinations for `sizes` (no
// splitting: every request is covered). Independent: the best per-dimension
// gear counts whose used combinations fit the budget (exact DP per
// dimension); joint: k-means++ seeding on log sizes, then Lloyd iterations
// assigning each request to its cheapest covering combination; sparse: a
// 32 x 32 independent grid, keeping the combinations that carry the most
// traffic.
GEARBOX_EXPORT absl::StatusOr<JointPlan> PlanJoint(const std::vector<Size2D>& sizes, int max_graphs,
                                                   GearScheme scheme, uint64_t seed = 1);

}  // namespace gearbox

#endif  // GEARBOX_PLANNERS_H_
