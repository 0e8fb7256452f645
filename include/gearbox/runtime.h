// AdaptiveGearRuntime: the adaptive gear mechanism of the seed, whole.
//
// Request path (any thread; never blocks on the update path):
//   SnapshotRef snap = runtime.GetSnapshot();          // lock-free, no allocation
//   absl::StatusOr<Plan> plan = MakePlan(*snap, {batch, seq});
//   ... run each variant of the plan (compile on miss: Register in the pool,
//       ConsumeRecentKeys, AttachCleanupKeys) ...
//   runtime.RecordPlan(*plan, now);                     // one event per executed variant
//
// Update path: RunOnce(now) builds the window statistics, runs the policy
// (DecideUpdate), publishes the next snapshot, and hands the evicted gears'
// cleanup keys to the pool outside every lock. The GearUpdateWorker thread
// calls it on the seed's schedule; tests and replays call it directly.
//
// Thread-safety: all methods are safe to call concurrently. RunOnce and
// CommitUpdate serialize with each other (commit lock). The runtime must
// outlive every SnapshotRef it handed out.
#ifndef GEARBOX_RUNTIME_H_
#define GEARBOX_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/clock.h"
#include "gearbox/export.h"
#include "gearbox/gear_set.h"
#include "gearbox/log.h"
#include "gearbox/memory_probe.h"
#include "gearbox/options.h"
#include "gearbox/plan.h"
#include "gearbox/replan_policy.h"
#include "gearbox/resource_pool.h"
#include "gearbox/snapshot.h"
#include "gearbox/stats.h"
#include "gearbox/update_record.h"

namespace gearbox {

class GearUpdateWorker;

struct RuntimeOptions {
  AdaptiveOptions adaptive;
  // kDefaultUpdatePolicy (kReplan), as in replays and the CLI: on every real
  // trace we replayed it wastes a fraction of the seed policy's padding at a
  // bounded compile rate (docs/PERFORMANCE.md, "Choosing the default policy").
  UpdatePolicy policy = kDefaultUpdatePolicy;
  ReplanOptions replan;  // used with UpdatePolicy::kReplan
  // Which gear combinations are compiled graphs (gear_set.h, seeds/001
  // §17.5.3): the scheme, the initial combinations (empty: every cell of the
  // initial gears) and, for joint, how much larger than a cell its graph may
  // be. Joint and sparse need two dimensions and the replan policy (which
  // decides the combinations from the window's variant shapes).
  CombinationSpec combination_spec;
  // Time source; null means SystemClock::Default(). Not owned.
  Clock* clock = nullptr;
  // Memory usage source; null disables memory-pressure handling. Not owned.
  MemoryProbe* memory_probe = nullptr;
  // Pool the cleanup keys belong to; null means GraphResourcePool::GetPool(device_index).
  GraphResourcePool* pool = nullptr;
  int device_index = 0;
  // Start the GearUpdateWorker thread at creation (the seed's daemon).
  // Off: call RunOnce yourself (tests, replays).
  bool start_worker = true;
  // Called after each update with its record, on the updating thread. An
  // exception from it propagates out of RunOnce (the worker logs it).
  std::function<void(const UpdateRecord&)> on_update;
  // Fleet statistics (gearbox/fleet_stats.h: FleetStatsSync::Hook()):
  // called by RunOnce with the window statistics at `now` before the policy
  // runs; it may replace each dimension's `sizes` and `observed_seconds`
  // (what the replan policy plans from; the per-gear statistics the
  // adaptive policy reads stay local). With it set, the statistics carry
  // each dimension's per-slot sizes (DimensionStats::slot_sizes) for it to
  // share. Called on the updating thread under the runtime's commit lock
  // (updates stay serialized) but outside the stats lock and every lock the
  // request path takes: a slow store delays an update, never a request. It
  // must not call this runtime's RunOnce, CommitUpdate, CheckTrigger,
  // CheckIntervalSeconds or SetReplanCostModel (they take the commit lock).
  // An exception from it is logged and the update uses the local statistics.
  std::function<void(double now, WindowStats* stats)> merge_window_stats;
  // Where warnings go; null means stderr.
  LogSink log;
  // Events per recording thread's ring (rounded up to a power of two). The
  // worker's drain thread folds a ring into the window statistics when it is
  // half full; an event that finds its ring full is dropped and counted
  // (UpdateRecord::events_dropped). Without a worker the recording thread
  // folds the rings itself instead: nothing is dropped. Memory: this many
  // events x (2 + 2 x dimensions) x 8 bytes per recording thread (192 KiB
  // for two dimensions), allocated on the thread's first event.
  size_t event_buffer_events = 4096;
  // The most of one core the worker's drain thread spends folding events:
  // after a drain that took t it rests t x (1 / share - 1), at most 50 ms.
  // At rates above what that share folds (a fold is tens of ns an event:
  // about a million events a second at 0.1) events are sampled, i.e. dropped
  // and counted, instead of taking the request threads' cores. In (0, 1];
  // 1 means no rest.
  double drain_cpu_share = 0.1;
};

// An event as the seed's record_event takes it: per dimension the raw size
// and the gear that served it. pad ratio = (gear - raw) / gear when raw <=
// gear, split ratio = (raw - gear) / raw when raw > gear.
struct GearEvent {
  double time = 0.0;
  int64_t count = 1;  // identical executed variants this event stands for
  std::vector<int64_t> raw;
  std::vector<int64_t> gear;
  // Joint and sparse sets: the variant did not run on its own cell's
  // compiled combination (uncompiled, or on a larger one covering the cell;
  // RecordPlan tells from the plan). Only then is a look at the combinations
  // between updates due (replan.combination_interval_seconds).
  bool off_cell = false;
};

struct RuntimeCounters {
  uint64_t events_recorded = 0;  // events accepted on the request path
  uint64_t events_dropped = 0;   // events not recorded: the thread's ring was full (worker running)
  uint64_t events_folded = 0;    // ... of which folded into window statistics
  uint64_t events_for_evicted_gears = 0;  // ... dropped: their gear was evicted first
  uint64_t events_too_late = 0;           // ... dropped: older than the window ring
  uint64_t events_bad_time = 0;           // ... dropped: NaN, infinite or |t| > 1e15 s
  // Recorded but not folded yet (derived). With the worker running, a ring is
  // folded when it reaches half full and at every worker wake, so up to half a
  // ring per recording thread may wait here until then.
  uint64_t events_pending = 0;
  uint64_t updates = 0;               // RunOnce calls that completed
  uint64_t updates_changed = 0;       // ... that changed the gear set
  uint64_t keys_released = 0;         // cleanup keys handed to the pool
  uint64_t orphan_keys_released = 0;  // keys attached to a gear already evicted
  // Of keys_released, those of kept gears' idle graphs
  // (ReplanOptions::idle_graph_release_seconds).
  uint64_t idle_keys_released = 0;
  uint64_t stats_memory_bytes = 0;  // window statistics, all gears
};

class GEARBOX_EXPORT AdaptiveGearRuntime {
 public:
  static absl::StatusOr<std::unique_ptr<AdaptiveGearRuntime>> Create(
      std::vector<DimensionSpec> dimensions, RuntimeOptions options);
  ~AdaptiveGearRuntime();  // stops the worker; waits for it
  AdaptiveGearRuntime(const AdaptiveGearRuntime&) = delete;
  AdaptiveGearRuntime& operator=(const AdaptiveGearRuntime&) = delete;

  // ---- request path ----
  SnapshotRef GetSnapshot() const noexcept;
  // Records one event per executed variant of `plan` (planned on any
  // snapshot of this runtime). Lock-free with the worker running: appends
  // to this thread's ring, or drops the event (counted) when it is full.
  // Without a worker, a full ring is folded by this thread under the stats
  // lock (deterministic; nothing dropped).
  void RecordPlan(const Plan& plan, double now) noexcept;
  void RecordPlan(const Plan& plan) noexcept { RecordPlan(plan, Now()); }
  // The seed's record_event, with optional cleanup keys for the gears the
  // event hit. Errors name the bad field (sizes, gears, count).
  absl::Status RecordEvent(const GearEvent& event, std::span<const GraphKey> cleanup_keys = {});
  // Attaches the keys a variant's compile produced to every gear it hit
  // (`gears`: the variant's gear per dimension, as DimensionPlan::event_gear).
  // If one of those gears was evicted meanwhile, the keys are released at
  // once instead (returns false): the variant can never run again.
  bool AttachCleanupKeys(std::span<const int64_t> gears, std::span<const GraphKey> keys);
  double Now() const { return clock_->NowSeconds(); }

  // ---- update path ----
  // What the worker's check would do at `now`: nullopt, kInterval, kMemory,
  // or (replan, joint and sparse sets) kCombinations.
  std::optional<UpdateTrigger> CheckTrigger(double now);
  // Seconds from one check to the next: check_interval_seconds, or, with
  // the replan policy before its first plan (an update whose window held
  // replan.min_window_weight, or a CommitUpdate), replan.warmup_check_seconds
  // (so the first plan comes soon after enough traffic, not a minute later),
  // and after it on a joint or sparse set replan.combination_interval_seconds
  // (each at most check_interval_seconds).
  double CheckIntervalSeconds() const;
  // Seconds between two looks at the combinations (kCombinations): under
  // replan on a joint or sparse set, replan.combination_interval_seconds;
  // 0 when there are none. A look is due only once a variant ran off its
  // cell's combination since the last update or look (Plan::any_off_cell,
  // GearEvent::off_cell): a variant on its own cell's graph gains from no
  // compile.
  double LookIntervalSeconds() const;
  // One update at `now` (the seed's run_once). Always returns a record.
  // kCombinations: under the replan policy only the combinations of a joint
  // or sparse set may change (ReplanScope::kCombinations), and the next
  // update stays due where it was.
  absl::StatusOr<UpdateRecord> RunOnce(double now, UpdateTrigger trigger = UpdateTrigger::kManual);
  // Window statistics at `now` (folds pending events first).
  WindowStats BuildStatsSnapshot(double now);
  // Replaces the gear lists (one per dimension) at `now`, as an operator
  // would; evicted gears' keys go to the pool. Validated first: nothing
  // changes on error.
  absl::StatusOr<UpdateRecord> CommitUpdate(const std::vector<std::vector<int64_t>>& gears,
                                            double now);
  // Folds every recorded event into the window statistics (the worker calls it when woken).
  void FoldPendingEvents();
  // The replan policy's cost model (ReplanOptions::cost), replaced for the
  // next updates, e.g. with compile seconds measured by the caller. Validated
  // as ValidateReplanOptions does (errors name "replan.cost.<field>"):
  // nothing changes on error. Any thread; takes the update lock.
  absl::Status SetReplanCostModel(const GearCostModel& cost);
  GearCostModel ReplanCostModel() const;
  // The policy the next updates run, switched at run time: a fleet replica
  // plans (kReplan) while it holds the plan's lease and only adopts
  // (kStatic) while another does (gearbox/fleet_plan.h). Validated as Create
  // does (the replan options for kReplan; a joint or sparse set refuses
  // kAdaptive): nothing changes on error. Any thread; takes the update lock.
  absl::Status SetUpdatePolicy(UpdatePolicy policy);
  UpdatePolicy update_policy() const;

  // ---- release listeners ----
  // Layers that keep their own references to pooled graphs (the executor)
  // learn here which cleanup keys were just handed to the pool: after each
  // RunOnce and CommitUpdate (with no keys when none were), on the updating
  // thread, after the pool dropped its references and last_update() holds
  // the update's record, outside the runtime's other locks. Returns an id for
  // RemoveReleaseListener.
  using ReleaseListener = std::function<void(std::span<const GraphKey>)>;
  uint64_t AddReleaseListener(ReleaseListener listener);
  // Once it returns, the listener is not running and will not be called.
  void RemoveReleaseListener(uint64_t id);

  // ---- worker ----
  GearUpdateWorker* worker() const { return worker_.get(); }
  // Starts (or restarts after StopWorker) the worker thread.
  absl::Status StartWorker();
  void StopWorker();

  // ---- introspection ----
  const AdaptiveOptions& options() const { return options_.adaptive; }
  int num_dimensions() const { return num_dimensions_; }
  GraphResourcePool& pool() const { return *pool_; }
  Clock& clock() const { return *clock_; }
  RuntimeCounters counters() const;
  std::optional<UpdateRecord> last_update() const;
  // Reads the memory probe as the update path does, with the byte budget's
  // inputs (memory_budget_bytes, the predictor and its bytes in use).
  MemoryState ReadMemory();
  // The gear-bytes predictor the policies price gears with (null: none),
  // e.g. GearedExecutor::InstallGearBytesPredictor's. Any thread.
  void SetGearBytesPredictor(std::shared_ptr<const GearBytesPredictor> predictor);
  // A compile (stage kCompile) or a run (kRun: its workspace could not be
  // allocated) of the combination `gears` ran out of memory (the executor
  // calls it; any thread, a short lock, never blocks on an update). The next
  // update's record lists it (UpdateRecord::out_of_memory) and runs under
  // memory pressure; for adaptive.out_of_memory_cooldown_seconds the
  // policies do not add its gears again. Ignored when the gear count is not
  // the runtime's. `served`: the executor's fallback kind that served the
  // variant instead (OutOfMemoryEvent::served), none when its request failed.
  void ReportOutOfMemory(std::span<const int64_t> gears, std::optional<int64_t> bytes,
                         OutOfMemoryStage stage = OutOfMemoryStage::kCompile,
                         std::optional<OutOfMemoryFallback> served = std::nullopt);
  // Sends a message to the configured log sink.
  void Log(LogLevel level, std::string_view message) const;

 private:
  class Impl;
  AdaptiveGearRuntime(RuntimeOptions options, GearSet initial);
  void MergeWindowStats(double now, WindowStats* stats);

  RuntimeOptions options_;
  const int num_dimensions_;
  Clock* const clock_;
  GraphResourcePool* const pool_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<GearUpdateWorker> worker_;
};

}  // namespace gearbox

#endif  // GEARBOX_RUNTIME_H_
