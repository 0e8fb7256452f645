// Replay: runs the real runtime and policy on a recorded trace, on a virtual
// clock, and measures what a policy would have done.
//
// Events are processed in timestamp order. With the adaptive or replan
// policy, the worker's schedule is evaluated in trace time: a check every
// check_interval_seconds from the first request up to and including the last
// row's time (the trace says nothing after it), each running an update when
// update_interval_seconds have passed or memory is high (exactly
// GearUpdateWorker::CheckOnce); or, with `update_at`, updates run exactly at
// those times and nothing else, times after the last row included (the
// virtual clock goes on after the rows). A check or update at a row's time
// runs before that row. The static policy keeps the initial gears.
//
// A compile is counted each time a gear combination is first used, or used
// again after its eviction (the simulated graph is registered in the real
// GraphResourcePool and released by the real cleanup-key path). Memory comes
// from the trace's mem_usage column, else from the config's memory model,
// else there is no memory pressure.
#ifndef GEARBOX_REPLAY_H_
#define GEARBOX_REPLAY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/config.h"
#include "gearbox/export.h"
#include "gearbox/trace.h"
#include "gearbox/update_record.h"

namespace gearbox {

// The default most update checks or requested updates one replay runs (both
// replays; ReplayRunOptions::max_updates, `--max-updates`): the worker's
// checks over the trace's span, at the shortest check interval, or the
// --update-at times. More is an error before any work, naming the span and
// interval: raise adaptive.check_interval_seconds (or
// replan.warmup_check_seconds) or --max-updates, or check the trace's t
// column is in seconds.
inline constexpr size_t kMaxReplayUpdates = 1'000'000;
// Flapping (issue 13's target on stationary traffic: at most 2 gear-set
// changes in 25 updates after warm-up): the replay counts the updates that
// changed any dimension's gears among those at or after the trace's first
// kFlapWarmupSeconds, and reports the most within any kFlapUpdates
// consecutive ones (all of them, when fewer).
inline constexpr double kFlapWarmupSeconds = 900.0;
inline constexpr size_t kFlapUpdates = 25;
// The most padding-waste timeline buckets (trace span / bucket width).
inline constexpr size_t kMaxTimelineBuckets = 1'000'000;

// What both replays (this one and ExecutedReplay) take.
struct ReplayRunOptions {
  UpdatePolicy policy = kDefaultUpdatePolicy;
  // Overrides the config's gear scheme (then starting from every cell of the
  // initial gears unless it is the config's own scheme, whose combinations
  // are kept). Joint and sparse need the replan or static policy.
  std::optional<GearScheme> scheme;
  // Non-empty: run updates at exactly these trace times (seconds, the same
  // clock as the trace's t column), even after the last row, instead of the
  // worker's schedule.
  std::vector<double> update_at;
  // At most this many update checks or requested updates (see above).
  size_t max_updates = kMaxReplayUpdates;
  // Called with each update's record (the decisions file).
  std::function<void(const UpdateRecord&)> on_update;
  // Called about every 1% of the rows with (rows done, rows in all).
  std::function<void(size_t, size_t)> progress;
};

struct ReplayOptions : ReplayRunOptions {
  // Width of the padding-waste timeline buckets, seconds.
  double timeline_bucket_seconds = 60.0;
  // A gear evicted within this long of its addition counts as churn.
  double churn_window_seconds = 3600.0;
};

// Everything a replay of this run checks before its first row, without
// replaying: the trace against the config, the update count bound, and that
// the runtime accepts the run's policy and gear scheme.
GEARBOX_EXPORT absl::Status CheckReplayRun(const RuntimeConfig& config, const Trace& trace,
                                           const ReplayRunOptions& run);

// The gear set after an update (or at the start), for plots.
struct GearSetSample {
  double time = 0.0;
  std::vector<std::vector<int64_t>> gears;  // per dimension
};

struct WasteBucket {
  double start = 0.0;  // trace time the bucket starts at
  double padded = 0.0;
  double raw = 0.0;
  uint64_t requests = 0;
};

struct ReplayResult {
  std::string policy;  // "replan", or "replan/joint" when a scheme was chosen
  GearScheme scheme = GearScheme::kIndependent;
  std::vector<std::string> dimensions;
  uint64_t requests = 0;           // rows replayed
  uint64_t served_requests = 0;    // ... that could be planned
  uint64_t rejected_requests = 0;  // above the largest gear, not splittable, no eager fallback
  std::string first_rejection;     // why the first one was rejected
  uint64_t split_requests = 0;
  uint64_t eager_requests = 0;
  uint64_t variants = 0;       // executed variants (chunks)
  double padded_volume = 0.0;  // sum over variants of the product of gears
  double raw_volume = 0.0;     // sum over served requests of the product of sizes
  double padding_waste = 0.0;  // padded / raw - 1
  uint64_t compiles = 0;
  double compiles_per_hour = 0.0;  // compiles / trace hours (at least one hour)
  // Compiles per hour of traffic after the trace's first hour (the cold
  // start left out); 0 for a trace of an hour or less.
  double compiles_per_hour_after_first_hour = 0.0;
  // Churn: gears an update added and a later update evicted within
  // `churn_window_seconds` (3600), and the most add-then-evict cycles one
  // gear went through within any such window.
  uint64_t short_lived_gears = 0;
  uint64_t max_gear_cycles_per_hour = 0;
  // Flapping: the most updates that changed the gears within any
  // kFlapUpdates (25) consecutive updates after the first kFlapWarmupSeconds.
  uint64_t max_gear_set_changes_in_25_updates = 0;
  uint64_t updates = 0;
  uint64_t updates_changed = 0;
  // Joint and sparse sets: the looks at the combinations between updates
  // (trigger "combinations"; not counted in `updates`).
  uint64_t combination_looks = 0;
  uint64_t combination_looks_changed = 0;
  std::vector<double> avg_gears;  // time-weighted, per dimension
  // Per dimension alone: sum over variants of the gear, and of the valid
  // size (so dimension_waste = padded / raw - 1 compares with 1-D planners).
  std::vector<double> dimension_padded;
  std::vector<double> dimension_raw;
  double dimension_waste(int d) const {
    return dimension_raw[d] > 0 ? dimension_padded[d] / dimension_raw[d] - 1.0 : 0.0;
  }
  std::vector<std::vector<int64_t>> final_gears;
  uint64_t peak_graphs = 0;       // compiled graphs alive at once
  double avg_graphs = 0.0;        // time-weighted
  double peak_graph_bytes = 0.0;  // with a memory model
  double trace_seconds = 0.0;     // first row to last row
  // First row to the last row or the last update, whichever is later (an
  // update requested after the last row); avg_gears and avg_graphs are
  // weighted over this span.
  double replay_seconds = 0.0;
  double wall_seconds = 0.0;
  std::vector<GearSetSample> gear_timeline;  // the start, then one per update
  std::vector<WasteBucket> waste_timeline;
};

GEARBOX_EXPORT absl::StatusOr<ReplayResult> Replay(const RuntimeConfig& config, const Trace& trace,
                                                   const ReplayOptions& options);

// One policy's figures as a JSON object (the summary file format).
GEARBOX_EXPORT std::string ReplayResultJson(const ReplayResult& result, int indent = 2);

}  // namespace gearbox

#endif  // GEARBOX_REPLAY_H_
