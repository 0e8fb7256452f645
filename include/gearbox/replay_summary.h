// The figures of a `gearbox replay` run, one entry per (policy, scheme): the
// simulated replay, the offline optimum next to it (optional) and the
// executed replay (optional); and the summary file they make (README,
// "Replaying your traffic").
#ifndef GEARBOX_REPLAY_SUMMARY_H_
#define GEARBOX_REPLAY_SUMMARY_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/config.h"
#include "gearbox/executed_replay.h"
#include "gearbox/export.h"
#include "gearbox/planners.h"
#include "gearbox/replay.h"
#include "gearbox/trace.h"

namespace gearbox {

// One dimension's offline-optimal gears (OptimalGears on the trace's sizes
// of that dimension) next to a replayed policy.
struct DimensionOptimum {
  int gears = 0;  // the policy's average gear count, rounded (at least 1)
  GearPlan plan;  // the optimum at that count, covering the largest size
  // One-dimensional configs: the policy's time-weighted compiled-graph count,
  // rounded (at least 1), and the optimum at it; 0 with several dimensions.
  int graph_count = 0;
  GearPlan same_graph_count;
  // The same count read off half the trace and run on the other half
  // (OtherHalfWaste): what gears learnt from traffic can do on traffic they
  // were not planned on. Set with graph_count when both halves have rows.
  std::optional<double> other_half_waste;
  // Splittable dimensions: the optimum at `gears` with splitting allowed.
  std::optional<GearPlan> with_splitting;
};

// The other-half optimum of column `d` at `gears` gears: the rows split by
// alternate minutes of trace time (from the first row); each half's optimum
// (OptimalGears without splitting, planned with the trace's largest size
// among its sizes so that it covers the other half) pads the other half;
// the waste of the two together. The in-sample optimum also fits the noise
// of the very requests it is scored on (docs/POLICY.md, "The policy
// suite"). nullopt when a half has no rows.
GEARBOX_EXPORT absl::StatusOr<std::optional<double>> OtherHalfWaste(const Trace& trace, size_t d,
                                                                    int gears);

// Per result, per dimension (each plan computed once per gear count). The
// trace's columns are the config's dimensions, in order.
GEARBOX_EXPORT absl::StatusOr<std::vector<std::vector<DimensionOptimum>>> OfflineOptimum(
    const RuntimeConfig& config, const Trace& trace, std::span<const ReplayResult> results);

struct ReplaySummary {
  std::string trace;                                   // named when there are several runs
  std::vector<ReplayResult> results;                   // one per run
  std::vector<std::vector<DimensionOptimum>> optimum;  // per run, or empty
  std::vector<ExecutedReplayResult> executed;          // per run, or empty
  std::string backend;                                 // of the executed replays
  double size_scale = 1.0;                             // of the executed replays
  // The share of rejected requests a run may have (`--max-reject-ratio`);
  // when set, each run's object says "rejected_ratio", this limit as
  // "max_reject_ratio" and "rejected_ratio_exceeded".
  std::optional<double> max_reject_ratio;
};

// The summary file: one run's object (ReplayResultJson, then
// "offline_optimum" and "executed" when there are), or, with several runs,
// {"trace": ..., "policies": {"<run name>": object, ...}}.
GEARBOX_EXPORT std::string ReplaySummaryJson(const ReplaySummary& summary, int indent = 2);

}  // namespace gearbox

#endif  // GEARBOX_REPLAY_SUMMARY_H_
