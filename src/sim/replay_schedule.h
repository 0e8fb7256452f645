// What the simulated replay (replay.cc) and the executed replay
// (executed_replay.cc) share: the input checks, the runtime options a
// config and a run's options give, and the worker's schedule in trace time.
// Internal to the library.
#ifndef GEARBOX_SRC_SIM_REPLAY_SCHEDULE_H_
#define GEARBOX_SRC_SIM_REPLAY_SCHEDULE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gearbox/clock.h"
#include "gearbox/config.h"
#include "gearbox/replay.h"
#include "gearbox/runtime.h"
#include "gearbox/trace.h"

namespace gearbox::internal {

// OK when the trace has one column per config dimension, in the config's
// order (as LoadTraceFile returns them), and at least one row, and every
// requested update time is finite; else the field, the value and what is
// allowed.
absl::Status CheckReplayInputs(const RuntimeConfig& config, const Trace& trace,
                               const ReplayRunOptions& options);

// At most options.max_updates (replay.h) update checks or requested updates:
// the worker's checks over the trace's span at the shortest interval the
// runtime may use (adaptive.check_interval_seconds, or
// replan.warmup_check_seconds with the replan policy), or the --update-at
// times. Else an error naming the span, the interval and the limit.
absl::Status CheckReplayUpdateCount(const RuntimeConfig& config, const Trace& trace,
                                    const ReplayRunOptions& options);

// "replan", or "replan/joint" when the run chose a scheme.
std::string ReplayRunName(const ReplayRunOptions& options);

// The runtime a replay runs: the config's policy options, gears and scheme
// (the run's scheme, when it chose one: then from every cell of the initial
// gears unless it is the config's own), on `clock` and `pool`, no worker
// thread, no log (probe errors are in the records), no memory probe.
RuntimeOptions ReplayRuntimeOptions(const RuntimeConfig& config, const ReplayRunOptions& options,
                                    ManualClock* clock, GraphResourcePool* pool);

// The updates of a replay, in trace time. The static policy runs none. With
// `update_at`, one manual update at exactly each of those times, wherever
// they fall (after the last row too: the virtual clock goes on), and nothing
// else. Otherwise the worker's checks (GearUpdateWorker::CheckOnce), the
// first one check interval after the first row, then one every interval (the
// runtime's, read after each check: shorter during the replan warm-up), up
// to and including the last row's time: the trace says nothing about the
// traffic after it.
class ReplaySchedule {
 public:
  // `runtime` and `clock` must outlive the schedule.
  ReplaySchedule(const ReplayRunOptions& options, double first_row, double last_row,
                 AdaptiveGearRuntime* runtime, ManualClock* clock);

  // Runs, in time order, every check or update due at or before `t`: for
  // each, `before(time)` when given (time averages), then the clock is set
  // to its time and it runs. Call before the row at `t` (a check at a row's
  // time sees the rows before it).
  absl::Status RunThrough(double t, const std::function<void(double)>& before = {});
  // After the last row: everything left (requested times after the last row).
  absl::Status RunRest(const std::function<void(double)>& before = {});

  // The time of the next check or requested update (+inf when none is left
  // at or before the last row's time, or with the static policy).
  double NextTime() const;

  // The latest of the last row's time and the last check or update run.
  double end() const { return end_; }

 private:
  AdaptiveGearRuntime* const runtime_;
  ManualClock* const clock_;
  const bool checks_;  // the worker's schedule (else update_at, or nothing)
  const size_t max_updates_;
  const double last_row_;
  std::vector<double> update_at_;  // sorted
  size_t next_update_ = 0;
  size_t checks_run_ = 0;
  double next_check_;
  double end_;
};

// Counts one update record in a replay's result: a look at the combinations
// (trigger "combinations") apart from the updates. Result: any replay result
// with updates, updates_changed, combination_looks, combination_looks_changed.
template <typename Result>
void CountUpdate(const UpdateRecord& r, Result* result) {
  const bool look = r.trigger == UpdateTrigger::kCombinations;
  ++(look ? result->combination_looks : result->updates);
  if (r.changed) ++(look ? result->combination_looks_changed : result->updates_changed);
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_SIM_REPLAY_SCHEDULE_H_
