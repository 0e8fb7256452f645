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
  // Splittable dimensions: the optimum at `gears` with splitting allowed.
  std::optional<GearPlan> with_splitting;
};

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
