// Executed replay: a trace through the GearedExecutor and a real backend,
// measuring what the user would see (requests/s, latency percentiles,
// compiles and their time, gear memory, padding waste). The policy runs on
// trace time exactly as in Replay (the worker's schedule up to the last
// replayed row, or updates at the given times, after the last row too);
// requests run back to back, as fast as the backend goes.
#ifndef GEARBOX_EXECUTED_REPLAY_H_
#define GEARBOX_EXECUTED_REPLAY_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/config.h"
#include "gearbox/export.h"
#include "gearbox/memory_probe.h"
#include "gearbox/replay.h"
#include "gearbox/trace.h"

namespace gearbox {

struct ExecutedReplayOptions : ReplayRunOptions {
  // Replay at most this many rows (0: all).
  size_t max_requests = 0;
  // Gear memory budget (0: none): the memory probe reads the gears' bytes
  // (the pool plus the backend's arena) against it (pressure for the
  // policy), and the executor caches no executable that would take them past
  // it, refusing a gear before its compile when its predicted memory would
  // (ExecutorOptions::graph_memory_budget_bytes), so peak_gear_bytes <= the
  // budget.
  int64_t memory_budget_bytes = 0;
  // Without a budget: makes the probe the runtime reads, for the replay's
  // backend (e.g. MakeMemoryProbeFor, gearbox/backends/builtin.h, which
  // `gearbox replay --execute` passes); an error fails the replay. Null: no
  // probe. Unused with a budget (the budget's probe is used).
  std::function<absl::StatusOr<std::unique_ptr<MemoryProbe>>(const Backend&)> make_memory_probe;
  uint64_t seed = 1;  // input data
};

struct ExecutedReplayResult {
  std::string policy;  // as ReplayResult::policy
  uint64_t requests = 0;
  uint64_t failed_requests = 0;
  std::string first_failure;
  double wall_seconds = 0.0;  // the rows (updates after the last row excluded)
  double requests_per_second = 0.0;
  double latency_p50_ms = 0.0;
  double latency_p99_ms = 0.0;
  double latency_mean_ms = 0.0;
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  double compile_seconds = 0.0;
  // Executables the pool released because an update evicted their gear.
  uint64_t released_executables = 0;
  // Gear memory, the largest after any request: the pool's per-gear bytes
  // plus the backend's workspace arena (peak_gear_bytes); each of the two
  // alone (their peaks need not fall after the same request).
  int64_t peak_gear_bytes = 0;
  int64_t peak_per_gear_bytes = 0;
  int64_t peak_arena_bytes = 0;
  int arena_slots = 0;  // the arena's execution slots at the end
  // The largest bytes + arena bytes of one compiled gear (ExecutorStats::
  // largest_gear_bytes): peak_arena_bytes / arena_slots against it is the
  // arena's overhead over one workspace of the largest gear.
  int64_t largest_gear_bytes = 0;
  // The process's peak resident set during this replay (VmHWM of
  // /proc/self/status, reset at the start through /proc/self/clear_refs
  // when that is allowed: peak_rss_reset), and its resident set when the
  // replay started (VmRSS): the gears' share is the difference. 0 where
  // /proc/self/status is unreadable.
  // Variants whose gear's compile or run ran out of memory and that a
  // fallback served instead (ExecutorStats::out_of_memory_fallbacks; the
  // order is the config's executor.out_of_memory_fallback).
  uint64_t out_of_memory_fallbacks = 0;
  // Of those, how many each kind served (ExecutorStats::out_of_memory_larger, ...).
  uint64_t out_of_memory_larger = 0;
  uint64_t out_of_memory_split = 0;
  uint64_t out_of_memory_exact = 0;
  // Variants whose gear was refused before its compile: its predicted
  // memory would have passed memory_budget_bytes (ExecutorStats::
  // predicted_over_budget_runs); they ran at their exact sizes, uncached.
  uint64_t predicted_over_budget_runs = 0;
  // The executor's memory predictions before each compile (ExecutorStats).
  uint64_t memory_predictions = 0;
  double memory_prediction_mean_error = 0.0;
  double memory_prediction_max_error = 0.0;
  int64_t peak_rss_bytes = 0;
  int64_t start_rss_bytes = 0;
  bool peak_rss_reset = false;
  // Variants that ran on an executable compiled for them alone because
  // caching it would have passed memory_budget_bytes.
  uint64_t over_budget_runs = 0;
  double padding_waste = 0.0;
  uint64_t updates = 0;
  uint64_t updates_changed = 0;
  // Joint and sparse sets: the looks at the combinations between updates
  // (trigger "combinations"; not counted in `updates`).
  uint64_t combination_looks = 0;
  uint64_t combination_looks_changed = 0;
  std::vector<std::vector<int64_t>> final_gears;
};

// The most elements one input or output tensor of an executed replay may
// have (at the largest trace size or initial gear of every dimension it
// follows): 2^28, 1 GiB of float32.
inline constexpr int64_t kMaxExecutedTensorElements = int64_t{1} << 28;

// OK when every tensor of `signature`, at the largest size the replay can
// give each dimension (its largest size among the first `rows` rows (0: all)
// or its largest initial gear), has at most kMaxExecutedTensorElements
// elements; else the tensor, the sizes and the limit (and --size-scale).
GEARBOX_EXPORT absl::Status CheckExecutedTensorSizes(const RuntimeConfig& config,
                                                     const Trace& trace,
                                                     const ModelSignature& signature, size_t rows);

// The trace's columns must be the config's dimensions, in order (as
// LoadTraceFile returns them). `make_backend` is called once (a fresh
// backend per replay, so each policy pays its own compiles).
GEARBOX_EXPORT absl::StatusOr<ExecutedReplayResult> ExecutedReplay(
    const RuntimeConfig& config, const Trace& trace,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>()>& make_backend,
    const ExecutedReplayOptions& options);

// Divides every size of the trace (rounding up, at least 1) by `factor`:
// scales a trace down so a real backend replays it quickly.
GEARBOX_EXPORT Trace ScaleTraceSizes(const Trace& trace, double factor);
// The same for the initial gears (de-duplicated) and combinations of a
// config; the replan cost model's per-unit costs grow by factor^exponent so
// that a request still costs what it did.
GEARBOX_EXPORT RuntimeConfig ScaleConfigGears(const RuntimeConfig& config, double factor);

GEARBOX_EXPORT std::string ExecutedReplayResultJson(const ExecutedReplayResult& result,
                                                    int indent = 2);

}  // namespace gearbox

#endif  // GEARBOX_EXECUTED_REPLAY_H_
