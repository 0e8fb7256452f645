// The "replan" policy: an online policy that approaches the offline optimum
// without churn (docs/POLICY.md, "The replan policy").
//
// At each update, per dimension, it plans the gears that minimise the cost
// model (compile + padding runtime + memory, planners.h) on the window's
// decay-weighted size distribution by exact dynamic programming, adds a tail
// ladder so sizes above anything recent never fall on an absurdly large
// gear, and then moves the current gears toward that target one change at a
// time, taking a change only when its modelled gain over the payback horizon
// exceeds its compile cost by the hysteresis ratio. Within the memory budget
// and the count cap; every change (and the best one declined) is explained
// in the update record.
#ifndef GEARBOX_REPLAN_POLICY_H_
#define GEARBOX_REPLAN_POLICY_H_

#include "absl/status/status.h"
#include "gearbox/export.h"
#include "gearbox/planners.h"
#include "gearbox/policy.h"

namespace gearbox {

struct ReplanOptions {
  // The cost model; compile_seconds is what one graph's compile costs, and
  // seconds_per_unit what one unit of size costs to run. With several
  // dimensions a gear of one dimension is charged one compile (and one held
  // graph, and its memory) per gear in use in each of the others: the
  // combinations it adds.
  GearCostModel cost{.compile_seconds = 2.0, .seconds_per_unit = 2e-5};
  // A change's padding gain is counted over this horizon, seconds.
  double payback_seconds = 3600.0;
  // Hysteresis band: a gear is added (or replaces another) only when its
  // gain over the payback horizon is at least this many times its compile
  // cost, and removed only when keeping it is worth less than
  // gear_holding_seconds (what keeping one compiled gear costs over the
  // horizon: its memory, its slot). Between the two, nothing moves.
  double min_gain_ratio = 1.5;
  double gear_holding_seconds = 1.0;
  // Evidence, on a gear set of one dimension (a prefill view): a gain read
  // off the window is uncertain (its requests read as Poisson counts: a gain
  // from n requests by about gain / sqrt(n)). An addition or replacement,
  // and a whole-target adoption, counts its gain less this many standard
  // errors against the hysteresis band, so a gear placed on a handful of
  // requests (a sparse tail of long prompts, the first seconds of traffic)
  // waits for the evidence. 0 (the gain as read): the policy suite's
  // leave-one-out choice over 0..2 on the draws of seeds 1-3 together
  // (docs/POLICY.md), since the cold-start review removes what the first
  // seconds' thin evidence planned; 1 or 2 hold gears back, for padding.
  // With several dimensions gains are taken as read (docs/POLICY.md,
  // rule 5).
  double gain_confidence_sigmas = 0.0;
  // A gear the policy added (that still carries traffic, or that came back
  // after an eviction: GearStats::readded; on a gear set of one dimension,
  // that carried traffic since it was added, its graph released while idle)
  // is not removed within this many seconds, unless memory is high: noise
  // cannot flap it (docs/POLICY.md, rule 6).
  // Two hours: the policy suite's leave-one-out choice over 600..7200 s on
  // the draws of seeds 1-3 together, prefill and decode views (docs/POLICY.md):
  // fewest traces over the churn targets (a gear planned in a cold start or
  // for a burst serves out its traffic instead of cycling), at a higher
  // padding ratio than shorter lifetimes on one-hour traces. Memory high,
  // an over-budget set and idle graph release (idle_graph_release_seconds)
  // are not held back by it.
  double min_gear_lifetime_seconds = 7200.0;
  // A gear removed within this many seconds comes back only at twice the gain.
  double readd_cooldown_seconds = 3600.0;
  // Above the planned gears, consecutive gears are at most this ratio apart
  // (non-splittable dimensions keep their largest gear).
  double tail_ratio = 2.0;
  // Most gear changes per dimension per update.
  int max_changes_per_update = 16;
  // Drift (docs/POLICY.md, "Following a drift"): when the sizes of a
  // dimension drift (DimensionStats::size_drift_*: at least drift_min_bins
  // one-fifth-window bins with a median, and at least drift_agreement of
  // their pairwise slopes agreeing with the trend in sign), the target is
  // planned for the window's sizes carried along the trend over the next
  // drift_lead_seconds instead of for the window as it was: gears go where
  // the traffic is moving. A burst or a step moves a few bins, not the sign
  // of most pairs, so it is not followed this way. 0 seconds: never.
  // Ten minutes: the policy suite's leave-one-out choice over 0..3600 s
  // on the draws of seeds 1-3 together (docs/POLICY.md, "The policy
  // suite"): a gear placed further along the path serves longer, so
  // following a drift compiles less, at more padding while it drifts.
  double drift_lead_seconds = 600.0;
  double drift_agreement = 0.9;
  int drift_min_bins = 15;
  // The regime (docs/POLICY.md, "The regime"): a gear set of one dimension
  // whose sizes do not drift is planned on the longest stretch of the last
  // regime_seconds (at most six windows: the drift's bins) whose sizes a
  // two-sample test cannot tell apart from the last window's, each request
  // counted once, instead of on the window alone: stationary traffic is
  // planned on up to six times the evidence, and a step or a burst falls
  // back to the window. 0: the window alone.
  double regime_seconds = 1800.0;
  // The cold-start review (docs/POLICY.md, rule 6): where a regime holds
  // all the size history (it began with the traffic: a fresh runtime), the
  // gears added in its first quarter were planned on at most a quarter of
  // the evidence it holds once it is this many seconds long (the first plan
  // comes after seconds of traffic). At the updates while the regime is
  // between this and a quarter more (or update_interval_seconds more, if
  // that is longer, so that an update falls within it) they are not
  // protected by min_gear_lifetime_seconds: each goes if keeping it is worth
  // less than gear_holding_seconds, its loss read off the regime plus
  // gain_confidence_sigmas standard errors; afterwards the lifetime holds
  // the survivors as before. A caller that updates by hand less often than
  // that may miss the review (the gears then stay, as with 0). The gears
  // reviewed: UpdateRecord::Regime::reviewed. A regime needs two windows of
  // sizes that agree and is at most regime_seconds long, so a review set
  // below two windows or above regime_seconds never comes (nor with
  // regime_seconds 0). 0: never. Ten minutes: the policy suite's
  // leave-one-out choice over 0..1200 s on the draws of seeds 1-3 together
  // (docs/POLICY.md).
  double cold_start_review_seconds = 600.0;
  // Decayed requests the window needs before the policy plans from it.
  double min_window_weight = 20.0;
  // With this policy the worker updates this often (its changes are
  // hysteresis-guarded, so it can look every check), seconds. The first
  // plan comes at the first check after min_window_weight requests whose
  // window holds min_window_weight of decayed weight (an update that finds
  // less is tried again at the next check once more requests came).
  double update_interval_seconds = 60.0;
  // Until its first plan the worker checks this often (seconds; capped by
  // check_interval_seconds): the initial gears are usually a guess, so the
  // first plan should not wait a whole check interval.
  double warmup_check_seconds = 10.0;
  // Joint and sparse gear sets (gear_set.h): at most this many compiled
  // combinations, and how many times slower a variant runs uncompiled than
  // on a graph of its exact size.
  int max_combinations = 256;
  double uncompiled_slowdown = 2.0;
  // Joint and sparse gear sets: between two updates (update_interval_seconds)
  // the worker looks at most this often at the combinations, once a variant
  // ran off its cell's own combination since the last look (uncompiled, or
  // padded onto a larger one: Plan::any_off_cell, GearEvent::off_cell), and
  // decides them on the current grid as an update would
  // (ReplanScope::kCombinations: no gear moves), so a cell that starts
  // carrying traffic runs uncompiled for a second, not a whole update
  // interval. 0: only at updates. Seconds, 0 or >= 0.001.
  double combination_interval_seconds = 1.0;
  // Joint and sparse gear sets: the most of the window's variants that may
  // run uncompiled where a graph could serve them, a share in [0, 1]. Past
  // the compiles that pay for themselves, combinations that serve
  // uncompiled variants compile, the one that gains most first (and no drop
  // leaves more uncompiled), until the share is at most this, within
  // max_graphs, max_combinations and memory. 0 (the default): every cell
  // with traffic runs on a graph while the budget allows, however thin its
  // traffic; 1: only what pays its compile.
  double max_uncompiled_share = 0.0;
  // The most compiled graphs the policy plans for one model, whatever the
  // scheme: independent, the product of the dimensions' gear counts (every
  // combination may compile); joint and sparse, the compiled combinations
  // (with max_combinations, the smaller of the two). A set above it (the
  // initial one, or an older, larger budget) shrinks to it at the next
  // update, young gears included. 100 is torchair's per-model cap; a CUDA
  // graph of an LLM's decode step holds tens of MiB.
  int max_graphs = 100;
  // Graph memory against recompiles: the runtime releases the compiled
  // graphs of a gear no request has run on for this many seconds (at an
  // update; the graph goes as an evicted gear's does, once no run holds it)
  // and keeps the gear, its window and its place in the plan. The gear's
  // next request compiles it again, as a new gear's first does (a compile
  // on that request's path). Which gears, per update:
  // UpdateRecord::graphs_released_idle. 0: never (every gear's graph stays
  // until its gear is evicted). Twenty minutes: the policy suite's
  // leave-one-out choice over 0..3600 s on the draws of seeds 1-3
  // together (docs/POLICY.md).
  double idle_graph_release_seconds = 1200.0;
};

GEARBOX_EXPORT absl::Status ValidateReplanOptions(const ReplanOptions& options);

// What one replan update may change: the gears and then the combinations
// (an update), or on a joint or sparse set only its combinations on the
// current grid (between updates: combination_interval_seconds).
enum class ReplanScope {
  kGearsAndCombinations,
  kCombinations,
};

// Pure, like DecideUpdate. `stats` must carry each dimension's weighted
// sizes (WindowStats::dimensions[d].sizes).
GEARBOX_EXPORT UpdateDecision DecideReplan(const GearSet& gears, const WindowStats& stats,
                                           const MemoryState& memory,
                                           const AdaptiveOptions& adaptive,
                                           const ReplanOptions& options, double now,
                                           ReplanScope scope = ReplanScope::kGearsAndCombinations);

}  // namespace gearbox

#endif  // GEARBOX_REPLAN_POLICY_H_
