#include "gearbox/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <iterator>
#include <thread>

#include "gearbox/policy.h"
#include "gearbox/update_worker.h"
#include "src/common/errors.h"
#include "src/runtime/drain_pacing.h"
#include "src/runtime/snapshot_store.h"
#include "src/stats/event_log.h"
#include "src/stats/window_store.h"

namespace gearbox {
namespace {

// The record's view of the compiled combinations before and after.
void RecordCombinations(const GearSet& before, const GearSet& after, UpdateRecord* record) {
  record->scheme = after.scheme();
  if (after.scheme() == GearScheme::kIndependent) return;
  const std::vector<GearCombination>& b = before.combinations();
  const std::vector<GearCombination>& a = after.combinations();
  record->combinations_after = a;
  record->combinations_added.clear();
  record->combinations_removed.clear();
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(),
                      std::back_inserter(record->combinations_added));
  std::set_difference(b.begin(), b.end(), a.begin(), a.end(),
                      std::back_inserter(record->combinations_removed));
}

}  // namespace

// Shared state of the runtime.
//
// Who touches what:
//  - snapshots: read by any thread (lock-free); published under commit_mu.
//  - events: appended by request threads into their own ring (lock-free,
//    single producer each); drained only under stats_mu (single consumer).
//  - window, fold counters: under stats_mu.
//  - sequence, last_update_time, last_any_update_time, dropped_at_last_update:
//    under commit_mu.
//  - last_record: under record_mu (leaf lock).
// Lock order: commit_mu -> stats_mu; record_mu is a leaf; listeners_mu is
// taken outside the others (listeners may take their own locks and the pool's).
//
// Draining. With the worker running (worker_drains), a drain thread owned by
// the runtime folds the rings whenever a recording thread's ring reaches
// half full (the recording thread bumps drain_requests and wakes it with a
// futex, no lock); the update worker also folds on each wake. A recording
// thread whose ring is full then DROPS the event and counts it (the window
// statistics tolerate sampling; UpdateRecord::events_dropped). With no
// worker (tests, replays calling RunOnce), the recording thread whose ring
// is full takes stats_mu and folds every ring itself, then appends: nothing
// is dropped and a single-threaded replay folds in a deterministic order.
class AdaptiveGearRuntime::Impl {
 public:
  Impl(const GearSet& initial, const RuntimeOptions& options, double now)
      : snapshots(initial),
        events(initial.num_dimensions(), options.event_buffer_events),
        last_update_time(now),
        last_any_update_time(now),
        replan_cost(options.replan.cost),
        policy(options.policy),
        window(initial, options.adaptive, now),
        drain_cpu_share(options.drain_cpu_share) {}

  internal::SnapshotStore snapshots;
  internal::EventLog events;

  Mutex commit_mu;
  uint64_t sequence ABSL_GUARDED_BY(commit_mu) = 0;
  // Whether the gears were planned from traffic yet: an update of the replan
  // policy whose window held enough to plan from (a target in its record),
  // or a commit. Until then the worker checks every
  // replan.warmup_check_seconds and retries the first plan at a check once
  // requests came since the last update (appended_at_last_update): an
  // update that declined for too little traffic (the window's decayed
  // weight below min_window_weight, though as many requests came) does not
  // put the first plan off by a whole update interval. So traffic too thin
  // ever to plan from updates at most once a warm-up check, and only when a
  // request came.
  bool planned ABSL_GUARDED_BY(commit_mu) = false;
  uint64_t appended_at_last_update ABSL_GUARDED_BY(commit_mu) = 0;
  double last_update_time ABSL_GUARDED_BY(commit_mu);      // of the last update (not kCombinations)
  double last_any_update_time ABSL_GUARDED_BY(commit_mu);  // of the last update of any kind
  // Whether a plan or event was recorded, since the last update or look
  // started, with a variant that did not run on its own cell's combination
  // of a joint or sparse set (Plan::any_off_cell, GearEvent::off_cell). A
  // look at the combinations is due only then: a compile gains only on such
  // variants. The request path only reads it until it sets it (relaxed: a
  // hint for the schedule), so the line stays shared, never contended. A
  // set racing the clear at an update's start may be lost, as may the flag
  // of an update that fails: the next such plan, or the next update, looks.
  std::atomic<bool> off_cell_since_update{false};
  void NoteOffCell() noexcept {
    if (!off_cell_since_update.load(std::memory_order_relaxed))
      off_cell_since_update.store(true, std::memory_order_relaxed);
  }
  // The replan policy's cost model: options.replan.cost until
  // SetReplanCostModel replaces it (measured compile times, say).
  GearCostModel replan_cost ABSL_GUARDED_BY(commit_mu);
  // The policy updates run (RuntimeOptions::policy, then SetUpdatePolicy):
  // written under commit_mu, read by RunOnce under it and by the checks and
  // statistics without it (a switch takes effect at the next update).
  std::atomic<UpdatePolicy> policy;

  mutable Mutex stats_mu;
  internal::WindowStore window ABSL_GUARDED_BY(stats_mu);

  mutable Mutex record_mu;
  std::optional<UpdateRecord> last_record ABSL_GUARDED_BY(record_mu);

  // The policies' gear-bytes predictor (SetGearBytesPredictor); copied out
  // under the lock, called outside it.
  mutable Mutex predictor_mu;
  std::shared_ptr<const GearBytesPredictor> predictor ABSL_GUARDED_BY(predictor_mu);

  // Compiles that ran out of memory (ReportOutOfMemory): those since the
  // last update, and the latest per combination within the cooldown.
  Mutex oom_mu;
  std::vector<OutOfMemoryEvent> oom_new ABSL_GUARDED_BY(oom_mu);
  std::vector<OutOfMemoryEvent> oom_recent ABSL_GUARDED_BY(oom_mu);

  // Statistics only (relaxed): written by the update path and AttachCleanupKeys.
  std::atomic<uint64_t> updates{0};
  std::atomic<uint64_t> updates_changed{0};
  std::atomic<uint64_t> keys_released{0};
  std::atomic<uint64_t> orphan_keys_released{0};
  std::atomic<uint64_t> idle_keys_released{0};
  uint64_t dropped_at_last_update ABSL_GUARDED_BY(commit_mu) = 0;

  // Release listeners: called under listeners_mu (so removal waits for a call).
  Mutex listeners_mu;
  uint64_t next_listener ABSL_GUARDED_BY(listeners_mu) = 1;
  std::vector<std::pair<uint64_t, ReleaseListener>> listeners ABSL_GUARDED_BY(listeners_mu);
  void NotifyReleased(std::span<const GraphKey> keys) {
    MutexLock lock(&listeners_mu);
    for (auto& [id, listener] : listeners) listener(keys);
  }
  // Whether the worker drains the rings (then a full ring drops); release/acquire with Start/Stop.
  std::atomic<bool> worker_drains{false};
  // The drain thread: woken by a change of drain_requests (atomic wait/notify).
  std::thread drainer;
  std::atomic<uint32_t> drain_requests{0};
  std::atomic<bool> drain_wanted{false};  // a wake is pending: recording threads skip the notify
  std::atomic<bool> drainer_stop{false};

  void FoldAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu) {
    events.Drain([this](const int64_t* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { window.Fold(e); });
  }
  void FoldAll() {
    MutexLock lock(&stats_mu);
    FoldAllLocked();
  }
  // Recording side: asks the drain thread to fold (lock-free; one futex wake
  // per request at most, none while one is already pending).
  void RequestDrain() noexcept {
    // Pairs with the drain thread's fence: either it sees the event this
    // thread just published, or this thread sees drain_wanted cleared.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (drain_wanted.load(std::memory_order_relaxed) ||
        drain_wanted.exchange(true, std::memory_order_acq_rel)) {
      return;
    }
    drain_requests.fetch_add(1, std::memory_order_release);
    drain_requests.notify_one();
  }
  // The drain thread. After each drain it rests (DrainPause) so that it
  // uses at most drain_cpu_share of a core; requests that arrive meanwhile
  // change drain_requests, so the wait after the rest returns at once.
  void DrainLoop() {
    while (!drainer_stop.load(std::memory_order_acquire)) {
      drain_wanted.store(false, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);  // see RequestDrain
      const uint32_t seen = drain_requests.load(std::memory_order_acquire);
      const auto start = std::chrono::steady_clock::now();
      FoldAll();
      Rest(internal::DrainPause(std::chrono::steady_clock::now() - start, drain_cpu_share));
      // A stop that came before `seen` was read bumped the counter already:
      // waiting on it would never return.
      if (drainer_stop.load(std::memory_order_acquire)) break;
      drain_requests.wait(seen, std::memory_order_acquire);
    }
  }
  // Sleeps `pause`, in slices of at most 1 ms so that a stop is not delayed.
  void Rest(std::chrono::nanoseconds pause) const {
    const auto until = std::chrono::steady_clock::now() + pause;
    while (!drainer_stop.load(std::memory_order_acquire)) {
      const auto left = until - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) return;
      std::this_thread::sleep_for(
          std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(1)));
    }
  }
  const double drain_cpu_share;
  void StartDrainer() {
    if (drainer.joinable()) return;
    drainer_stop.store(false, std::memory_order_release);
    drainer = std::thread([this] { DrainLoop(); });
  }
  void StopDrainer() {
    if (!drainer.joinable()) return;
    drainer_stop.store(true, std::memory_order_release);
    drain_requests.fetch_add(1, std::memory_order_release);
    drain_requests.notify_all();
    drainer.join();
  }
  // Handles one append's outcome; returns true when the caller must append
  // again (no worker: the rings were just folded, so there is room now).
  bool AfterAppend(internal::EventLog::AppendResult r) {
    using R = internal::EventLog::AppendResult;
    if (r == R::kAppended) return false;
    if (worker_drains.load(std::memory_order_acquire)) {
      RequestDrain();
      if (r == R::kFull) events.CountDropped(1);
      return false;
    }
    if (r == R::kHalfFull) return false;
    FoldAll();
    return true;
  }
  template <typename AppendFn>
  void AppendWithPolicy(AppendFn&& append) {
    if (!AfterAppend(append())) return;
    // Without a worker the rings were just folded; a second kFull means this
    // thread has no ring (past EventLog::kMaxRings): count it as dropped.
    if (append() == internal::EventLog::AppendResult::kFull) events.CountDropped(1);
  }
};

absl::StatusOr<std::unique_ptr<AdaptiveGearRuntime>> AdaptiveGearRuntime::Create(
    std::vector<DimensionSpec> dimensions, RuntimeOptions options) {
  if (auto s = ValidateAdaptiveOptions(options.adaptive); !s.ok()) return s;
  if (options.policy == UpdatePolicy::kReplan) {
    if (auto s = ValidateReplanOptions(options.replan); !s.ok()) return s;
  }
  if (options.event_buffer_events < 1 || options.event_buffer_events > (1u << 20)) {
    return internal::InvalidFieldValue("event_buffer_events", options.event_buffer_events,
                                       "an integer in [1, 1048576]");
  }
  if (!(options.drain_cpu_share > 0.0 && options.drain_cpu_share <= 1.0)) {
    return internal::InvalidFieldValue("drain_cpu_share", options.drain_cpu_share,
                                       "a share of one core in (0, 1]");
  }
  Clock* clock = options.clock != nullptr ? options.clock : SystemClock::Default();
  const GearScheme scheme = options.combination_spec.scheme;
  if (scheme != GearScheme::kIndependent && options.policy == UpdatePolicy::kAdaptive) {
    return internal::InvalidField(
        "scheme", internal::Cat("\"", GearSchemeName(scheme), "\""),
        "joint and sparse gear sets need the replan or static policy (the "
        "adaptive policy plans each dimension alone)");
  }
  CombinationSpec combinations = InitialCombinations(dimensions, options.combination_spec);
  auto initial =
      GearSet::Create(std::move(dimensions), 1, clock->NowSeconds(), std::move(combinations));
  if (!initial.ok()) return initial.status();
  for (int d = 0; d < initial->num_dimensions(); ++d) {
    if (static_cast<int>(initial->gears(d).size()) > options.adaptive.max_gears_per_type) {
      return internal::InvalidField(
          internal::Cat("dims[", d, "].gears"), internal::Cat(initial->gears(d).size(), " gears"),
          internal::Cat("at most max_gears_per_type = ", options.adaptive.max_gears_per_type));
    }
  }
  const bool start = options.start_worker;
  std::unique_ptr<AdaptiveGearRuntime> runtime(
      new AdaptiveGearRuntime(std::move(options), *std::move(initial)));
  if (start) {
    if (auto s = runtime->StartWorker(); !s.ok()) return s;
  }
  return runtime;
}

AdaptiveGearRuntime::AdaptiveGearRuntime(RuntimeOptions options, GearSet initial)
    : options_(std::move(options)),
      num_dimensions_(initial.num_dimensions()),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Default()),
      pool_(options_.pool != nullptr ? options_.pool
                                     : &GraphResourcePool::GetPool(options_.device_index)),
      impl_(std::make_unique<Impl>(initial, options_, initial.created_at())),
      worker_(std::make_unique<GearUpdateWorker>(this)) {}

AdaptiveGearRuntime::~AdaptiveGearRuntime() { StopWorker(); }

absl::Status AdaptiveGearRuntime::StartWorker() {
  impl_->StartDrainer();
  impl_->worker_drains.store(true, std::memory_order_release);
  worker_->Start();
  return absl::OkStatus();
}

void AdaptiveGearRuntime::StopWorker() {
  worker_->Stop();
  impl_->worker_drains.store(false, std::memory_order_release);
  impl_->StopDrainer();
}

void AdaptiveGearRuntime::Log(LogLevel level, std::string_view message) const {
  if (options_.log) {
    options_.log(level, message);
  } else {
    StderrLogSink(level, message);
  }
}

SnapshotRef AdaptiveGearRuntime::GetSnapshot() const noexcept { return impl_->snapshots.Get(); }

void AdaptiveGearRuntime::RecordPlan(const Plan& plan, double now) noexcept {
  if (plan.num_dimensions() != num_dimensions_) return;  // not a plan of this runtime
  const int groups = plan.num_variant_groups();
  for (int g = 0; g < groups; ++g) {
    impl_->AppendWithPolicy([&] { return impl_->events.AppendPlanGroup(plan, g, now); });
  }
  if (plan.any_off_cell()) impl_->NoteOffCell();
}

absl::Status AdaptiveGearRuntime::RecordEvent(const GearEvent& event,
                                              std::span<const GraphKey> cleanup_keys) {
  if (static_cast<int>(event.raw.size()) != num_dimensions_) {
    return internal::InvalidField("raw", internal::Cat(event.raw.size(), " sizes"),
                                  internal::Cat("one per dimension (", num_dimensions_, ")"));
  }
  if (static_cast<int>(event.gear.size()) != num_dimensions_) {
    return internal::InvalidField("gear", internal::Cat(event.gear.size(), " gears"),
                                  internal::Cat("one per dimension (", num_dimensions_, ")"));
  }
  for (int d = 0; d < num_dimensions_; ++d) {
    if (event.raw[d] < 1) {
      return internal::InvalidFieldValue(internal::Cat("raw[", d, "]"), event.raw[d],
                                         "sizes must be >= 1");
    }
    if (event.gear[d] < 1) {
      return internal::InvalidFieldValue(internal::Cat("gear[", d, "]"), event.gear[d],
                                         "gears must be >= 1");
    }
  }
  if (event.count < 1) {
    return internal::InvalidFieldValue("count", event.count, "an integer >= 1");
  }
  if (!std::isfinite(event.time)) {
    return internal::InvalidFieldValue("time", event.time, "a finite number of seconds");
  }
  impl_->AppendWithPolicy([&] {
    return impl_->events.Append(event.time, event.count, event.raw.data(), event.gear.data());
  });
  if (event.off_cell) impl_->NoteOffCell();
  if (!cleanup_keys.empty()) AttachCleanupKeys(event.gear, cleanup_keys);
  return absl::OkStatus();
}

bool AdaptiveGearRuntime::AttachCleanupKeys(std::span<const int64_t> gears,
                                            std::span<const GraphKey> keys) {
  if (keys.empty()) return true;
  bool active;
  {
    MutexLock lock(&impl_->stats_mu);
    active = impl_->window.AttachKeys(gears, keys, Now());
  }
  if (!active) {
    const size_t removed = pool_->RemoveByKeys(keys);
    impl_->orphan_keys_released.fetch_add(removed, std::memory_order_relaxed);
  }
  return active;
}

void AdaptiveGearRuntime::FoldPendingEvents() { impl_->FoldAll(); }

uint64_t AdaptiveGearRuntime::AddReleaseListener(ReleaseListener listener) {
  MutexLock lock(&impl_->listeners_mu);
  const uint64_t id = impl_->next_listener++;
  impl_->listeners.emplace_back(id, std::move(listener));
  return id;
}

void AdaptiveGearRuntime::RemoveReleaseListener(uint64_t id) {
  MutexLock lock(&impl_->listeners_mu);
  std::erase_if(impl_->listeners, [id](const auto& l) { return l.first == id; });
}

void AdaptiveGearRuntime::SetGearBytesPredictor(
    std::shared_ptr<const GearBytesPredictor> predictor) {
  MutexLock lock(&impl_->predictor_mu);
  impl_->predictor = std::move(predictor);
}

namespace {
// Folds `e` into `list`: one event per combination and stage (the latest time).
void FoldOutOfMemory(std::vector<OutOfMemoryEvent>* list, const OutOfMemoryEvent& e) {
  for (OutOfMemoryEvent& x : *list) {
    if (x.gears == e.gears && x.stage == e.stage) {
      x.time = std::max(x.time, e.time);
      x.count += e.count;
      for (size_t k = 0; k < std::size(x.served); ++k) x.served[k] += e.served[k];
      if (e.bytes.has_value()) x.bytes = e.bytes;
      return;
    }
  }
  list->push_back(e);
}
}  // namespace

void AdaptiveGearRuntime::ReportOutOfMemory(std::span<const int64_t> gears,
                                            std::optional<int64_t> bytes, OutOfMemoryStage stage,
                                            std::optional<OutOfMemoryFallback> served) {
  if (static_cast<int>(gears.size()) != num_dimensions_) return;
  OutOfMemoryEvent e{{gears.begin(), gears.end()}, bytes, clock_->NowSeconds(), 1, stage};
  if (served.has_value()) e.served[static_cast<size_t>(*served)] = 1;
  MutexLock lock(&impl_->oom_mu);
  FoldOutOfMemory(&impl_->oom_new, e);
}

MemoryState AdaptiveGearRuntime::ReadMemory() {
  MemoryState m;
  m.budget_bytes = options_.adaptive.memory_budget_bytes;
  {
    MutexLock lock(&impl_->predictor_mu);
    m.predictor = impl_->predictor;
  }
  if (m.predictor != nullptr) m.bytes_in_use = m.predictor->InUseBytes();
  m.threshold = options_.adaptive.device_memory_usage_threshold_ratio;
  if (!m.threshold.has_value() || options_.memory_probe == nullptr) return m;
  try {
    absl::StatusOr<double> usage = options_.memory_probe->UsageFraction();
    if (!usage.ok()) {
      m.error = std::string(usage.status().message());
    } else if (!std::isfinite(*usage) || *usage < 0.0) {
      // Above 1 is over-committed memory: high pressure, not a probe error.
      m.error = internal::Cat("probe returned ", *usage,
                              "; expected a fraction >= 0 (above 1: over-committed)");
    } else {
      m.usage = *usage;
      m.high = *usage >= *m.threshold;
    }
  } catch (const std::exception& e) {
    m.error = internal::Cat("probe threw: ", e.what());
  } catch (...) {
    m.error = "probe threw an unknown exception";
  }
  if (!m.error.empty()) {
    Log(LogLevel::kWarning,
        internal::Cat("memory probe unusable (treated as no pressure): ", m.error));
  }
  return m;
}

std::optional<UpdateTrigger> AdaptiveGearRuntime::CheckTrigger(double now) {
  double last;
  double last_any;
  uint64_t sequence;
  bool planned;
  uint64_t appended_at_last_update;
  bool ran_off_cell;
  {
    MutexLock lock(&impl_->commit_mu);
    last = impl_->last_update_time;
    last_any = impl_->last_any_update_time;
    sequence = impl_->sequence;
    planned = impl_->planned;
    appended_at_last_update = impl_->appended_at_last_update;
    ran_off_cell = impl_->off_cell_since_update.load(std::memory_order_relaxed);
  }
  // The replan policy's first plan comes as soon as the window holds enough
  // requests to plan from (the initial gears are usually a guess), and is
  // tried again as more come while the window's decayed weight falls short.
  const UpdatePolicy policy = impl_->policy.load(std::memory_order_acquire);
  const uint64_t appended = impl_->events.appended();
  if (policy == UpdatePolicy::kReplan && !planned && appended > appended_at_last_update &&
      static_cast<double>(appended) >= options_.replan.min_window_weight) {
    return UpdateTrigger::kInterval;
  }
  const double interval = policy == UpdatePolicy::kReplan
                              ? options_.replan.update_interval_seconds
                              : options_.adaptive.update_interval_seconds;
  // Compared as the schedule is built (the check after an update at `last`
  // comes at last + interval): `now - last >= interval` is false by one ulp
  // for some values of `last` (10.016438 + 60 - 10.016438 < 60), which put
  // that update off by a whole check interval.
  if (now >= last + interval) return UpdateTrigger::kInterval;
  {
    MutexLock lock(&impl_->oom_mu);
    if (!impl_->oom_new.empty()) return UpdateTrigger::kMemory;  // a compile ran out of memory
  }
  const MemoryState memory = ReadMemory();
  // The probe's pressure, or the gears' memory past memory_budget_bytes.
  if (memory.high || (memory.budget_bytes > 0 && memory.bytes_in_use.has_value() &&
                      *memory.bytes_in_use > memory.budget_bytes)) {
    return UpdateTrigger::kMemory;
  }
  // Joint and sparse sets: a look at the combinations between updates, once
  // a variant ran off its cell's combination since the last one (a variant
  // on its own cell's graph gains from no compile; drops wait for updates).
  const double look = LookIntervalSeconds();
  if (sequence > 0 && look > 0 && ran_off_cell && now >= last_any + look)
    return UpdateTrigger::kCombinations;
  return std::nullopt;
}

double AdaptiveGearRuntime::LookIntervalSeconds() const {
  const double look = options_.replan.combination_interval_seconds;
  const bool looks = impl_->policy.load(std::memory_order_acquire) == UpdatePolicy::kReplan &&
                     look > 0 && GetSnapshot()->scheme() != GearScheme::kIndependent;
  return looks ? look : 0.0;
}

double AdaptiveGearRuntime::CheckIntervalSeconds() const {
  const double check = options_.adaptive.check_interval_seconds;
  if (impl_->policy.load(std::memory_order_acquire) == UpdatePolicy::kReplan) {
    {
      MutexLock lock(&impl_->commit_mu);
      if (!impl_->planned) return std::min(options_.replan.warmup_check_seconds, check);
    }
    if (const double look = LookIntervalSeconds(); look > 0) return std::min(look, check);
  }
  return check;
}

WindowStats AdaptiveGearRuntime::BuildStatsSnapshot(double now) {
  SnapshotRef current = GetSnapshot();
  MutexLock lock(&impl_->stats_mu);
  impl_->FoldAllLocked();
  return impl_->window.Summarize(
      now, *current,
      /*with_sizes=*/impl_->policy.load(std::memory_order_acquire) == UpdatePolicy::kReplan);
}

// RuntimeOptions::merge_window_stats, on a copy: a hook that throws halfway
// leaves the local statistics whole.
void AdaptiveGearRuntime::MergeWindowStats(double now, WindowStats* stats) {
  WindowStats merged = *stats;
  try {
    options_.merge_window_stats(now, &merged);
  } catch (const std::exception& e) {
    Log(LogLevel::kWarning,
        internal::Cat("merge_window_stats threw (local statistics used): ", e.what()));
    return;
  } catch (...) {
    Log(LogLevel::kWarning, "merge_window_stats threw (local statistics used)");
    return;
  }
  *stats = std::move(merged);
}

absl::StatusOr<UpdateRecord> AdaptiveGearRuntime::RunOnce(double now, UpdateTrigger trigger) {
  if (!std::isfinite(now)) {
    return internal::InvalidFieldValue("now", now, "a finite time in seconds");
  }
  UpdateRecord record;
  std::vector<GraphKey> released;  // evicted gears' keys, then idle graphs'
  size_t idle_keys = 0;
  {
    MutexLock commit(&impl_->commit_mu);
    // What is recorded off its cell from here on is for the next look.
    impl_->off_cell_since_update.store(false, std::memory_order_relaxed);
    const UpdatePolicy policy = impl_->policy.load(std::memory_order_acquire);
    SnapshotRef current = GetSnapshot();
    WindowStats stats;
    // The requests this update's window may hold (at least: more may come
    // while it folds).
    const uint64_t appended = impl_->events.appended();
    {
      MutexLock lock(&impl_->stats_mu);
      impl_->FoldAllLocked();
      stats =
          impl_->window.Summarize(now, *current,
                                  /*with_sizes=*/policy == UpdatePolicy::kReplan,
                                  /*with_slots=*/static_cast<bool>(options_.merge_window_stats));
    }
    MemoryState memory = ReadMemory();
    // Out of memory since the last update: listed in the record, pressure
    // now (room is made), and its gears held back for the cooldown.
    std::vector<OutOfMemoryEvent> out_of_memory;
    {
      MutexLock lock(&impl_->oom_mu);
      out_of_memory.swap(impl_->oom_new);
      for (const OutOfMemoryEvent& e : out_of_memory) FoldOutOfMemory(&impl_->oom_recent, e);
      std::erase_if(impl_->oom_recent, [&](const OutOfMemoryEvent& e) {
        return now - e.time >= options_.adaptive.out_of_memory_cooldown_seconds;
      });
      memory.recent_out_of_memory = impl_->oom_recent;
    }
    if (!out_of_memory.empty()) memory.high = true;
    UpdateDecision decision;
    // The replan policy's look at the combinations alone. Any other policy,
    // or memory pressure (a compile that ran out of memory since the last
    // update, say), makes it a whole update, recorded as such.
    const bool look =
        trigger == UpdateTrigger::kCombinations && policy == UpdatePolicy::kReplan && !memory.high;
    // A look reads the local window only (no fleet store call every few
    // seconds); a whole update merges the fleet's.
    if (options_.merge_window_stats && !look) MergeWindowStats(now, &stats);
    if (trigger == UpdateTrigger::kCombinations && !look)
      trigger = memory.high ? UpdateTrigger::kMemory : UpdateTrigger::kManual;
    switch (policy) {
      case UpdatePolicy::kStatic:
        decision = DecideStatic(*current, memory, now);
        break;
      case UpdatePolicy::kAdaptive:
        decision = DecideUpdate(*current, stats, memory, options_.adaptive, now);
        break;
      case UpdatePolicy::kReplan: {
        ReplanOptions replan = options_.replan;
        replan.cost = impl_->replan_cost;
        decision =
            DecideReplan(*current, stats, memory, options_.adaptive, replan, now,
                         look ? ReplanScope::kCombinations : ReplanScope::kGearsAndCombinations);
        break;
      }
    }
    record = std::move(decision.record);
    record.sequence = impl_->sequence + 1;
    record.trigger = trigger;
    const uint64_t dropped = impl_->events.dropped();
    record.events_dropped = dropped - impl_->dropped_at_last_update;
    record.out_of_memory = std::move(out_of_memory);
    impl_->dropped_at_last_update = dropped;
    record.version_before = current->version();
    record.version_after = current->version();
    std::optional<GearSet> next;
    const bool joint = current->scheme() != GearScheme::kIndependent;
    if (decision.changed) {
      auto built = current->WithGears(decision.next_gears, current->version() + 1, now,
                                      joint ? &decision.next_combinations : nullptr);
      if (!built.ok()) {  // nothing applied: the failures stay for the next update
        MutexLock lock(&impl_->oom_mu);
        for (const OutOfMemoryEvent& e : record.out_of_memory) FoldOutOfMemory(&impl_->oom_new, e);
        return built.status();
      }
      next = *std::move(built);
      record.version_after = next->version();
    }
    {
      MutexLock lock(&impl_->stats_mu);
      if (next.has_value()) {
        released = impl_->window.ApplyCommit(decision.removed, decision.added, now,
                                             joint ? &next->combinations() : nullptr);
      }
      for (const auto& [d, gear] : decision.protect) impl_->window.ExtendProtection(d, gear, now);
      if (policy == UpdatePolicy::kReplan && options_.replan.idle_graph_release_seconds > 0) {
        const size_t evicted = released.size();
        record.graphs_released_idle =
            impl_->window.TakeIdleKeys(now, options_.replan.idle_graph_release_seconds, &released);
        idle_keys = released.size() - evicted;
      }
    }
    RecordCombinations(*current, next.has_value() ? *next : *current, &record);
    if (!record.combinations_added.empty() || !record.combinations_removed.empty())
      record.changed = true;
    if (next.has_value()) impl_->snapshots.Publish(*std::move(next));
    record.cleanup_keys = released.size();
    impl_->sequence = record.sequence;
    impl_->appended_at_last_update = appended;
    if (policy == UpdatePolicy::kReplan &&
        std::any_of(record.targets.begin(), record.targets.end(),
                    [](const std::vector<int64_t>& t) { return !t.empty(); }))
      impl_->planned = true;
    // A look at the combinations leaves the next update where it was.
    if (!look) impl_->last_update_time = now;
    impl_->last_any_update_time = now;
  }
  // Outside every lock: release evicted graphs, free superseded snapshots.
  if (!released.empty()) {
    pool_->RemoveByKeys(released);
    impl_->keys_released.fetch_add(released.size(), std::memory_order_relaxed);
    impl_->idle_keys_released.fetch_add(idle_keys, std::memory_order_relaxed);
  }
  // The record and counters first: a listener sees this update in last_update().
  impl_->updates.fetch_add(1, std::memory_order_relaxed);
  if (record.changed) impl_->updates_changed.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(&impl_->record_mu);
    impl_->last_record = record;
  }
  impl_->NotifyReleased(released);
  impl_->snapshots.Reclaim();
  if (options_.on_update) options_.on_update(record);
  return record;
}

absl::StatusOr<UpdateRecord> AdaptiveGearRuntime::CommitUpdate(
    const std::vector<std::vector<int64_t>>& gears, double now) {
  if (!std::isfinite(now)) {
    return internal::InvalidFieldValue("now", now, "a finite time in seconds");
  }
  UpdateRecord record;
  std::vector<GraphKey> released;
  {
    MutexLock commit(&impl_->commit_mu);
    SnapshotRef current = GetSnapshot();
    auto next = current->WithGears(gears, current->version() + 1, now);
    if (!next.ok()) return next.status();
    for (int d = 0; d < next->num_dimensions(); ++d) {
      if (static_cast<int>(next->gears(d).size()) > options_.adaptive.max_gears_per_type) {
        return internal::InvalidField(
            internal::Cat("gears[", d, "]"), internal::Cat(next->gears(d).size(), " gears"),
            internal::Cat("at most max_gears_per_type = ", options_.adaptive.max_gears_per_type));
      }
    }
    record.sequence = impl_->sequence + 1;
    record.time = now;
    record.trigger = UpdateTrigger::kManual;
    record.version_before = current->version();
    record.removed.resize(num_dimensions_);
    record.added.resize(num_dimensions_);
    for (int d = 0; d < num_dimensions_; ++d) {
      record.dimensions.push_back(current->dimension(d).name);
      for (int64_t g : current->gears(d)) {
        if (!next->Contains(d, g)) record.removed[d].push_back(g);
      }
      for (int64_t g : next->gears(d)) {
        if (!current->Contains(d, g)) record.added[d].push_back(g);
      }
      if (!record.removed[d].empty() || !record.added[d].empty()) record.changed = true;
      record.gears_after.emplace_back(next->gears(d).begin(), next->gears(d).end());
    }
    RecordCombinations(*current, *next, &record);
    if (!record.combinations_added.empty() || !record.combinations_removed.empty())
      record.changed = true;
    if (!record.changed) {
      record.version_after = current->version();
    } else {
      record.version_after = next->version();
      {
        MutexLock lock(&impl_->stats_mu);
        impl_->FoldAllLocked();
        released = impl_->window.ApplyCommit(
            record.removed, record.added, now,
            next->scheme() != GearScheme::kIndependent ? &next->combinations() : nullptr);
      }
      impl_->snapshots.Publish(*std::move(next));
    }
    record.cleanup_keys = released.size();
    impl_->sequence = record.sequence;
    impl_->planned = true;
  }
  if (!released.empty()) {
    pool_->RemoveByKeys(released);
    impl_->keys_released.fetch_add(released.size(), std::memory_order_relaxed);
  }
  if (record.changed) impl_->updates_changed.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(&impl_->record_mu);
    impl_->last_record = record;
  }
  impl_->NotifyReleased(released);
  impl_->snapshots.Reclaim();
  return record;
}

RuntimeCounters AdaptiveGearRuntime::counters() const {
  RuntimeCounters c;
  c.events_recorded = impl_->events.appended();
  c.events_dropped = impl_->events.dropped();
  {
    MutexLock lock(&impl_->stats_mu);
    const internal::FoldCounters& f = impl_->window.counters();
    c.events_folded = f.events;
    c.events_for_evicted_gears = f.evicted_gear;
    c.events_too_late = f.too_late;
    c.events_bad_time = f.bad_time;
    c.stats_memory_bytes = impl_->window.MemoryBytes();
  }
  const uint64_t accounted =
      c.events_folded + c.events_for_evicted_gears + c.events_too_late + c.events_bad_time;
  c.events_pending = c.events_recorded > accounted ? c.events_recorded - accounted : 0;
  c.updates = impl_->updates.load(std::memory_order_relaxed);
  c.updates_changed = impl_->updates_changed.load(std::memory_order_relaxed);
  c.keys_released = impl_->keys_released.load(std::memory_order_relaxed);
  c.orphan_keys_released = impl_->orphan_keys_released.load(std::memory_order_relaxed);
  c.idle_keys_released = impl_->idle_keys_released.load(std::memory_order_relaxed);
  return c;
}

absl::Status AdaptiveGearRuntime::SetReplanCostModel(const GearCostModel& cost) {
  ReplanOptions checked = options_.replan;
  checked.cost = cost;
  if (auto s = ValidateReplanOptions(checked); !s.ok()) return s;
  MutexLock commit(&impl_->commit_mu);
  impl_->replan_cost = cost;
  return absl::OkStatus();
}

absl::Status AdaptiveGearRuntime::SetUpdatePolicy(UpdatePolicy policy) {
  if (policy == UpdatePolicy::kReplan) {
    ReplanOptions checked = options_.replan;
    checked.cost = ReplanCostModel();
    if (auto s = ValidateReplanOptions(checked); !s.ok()) return s;
  }
  MutexLock commit(&impl_->commit_mu);
  if (policy == UpdatePolicy::kAdaptive &&
      impl_->snapshots.Get()->scheme() != GearScheme::kIndependent) {
    return internal::InvalidField("policy", "\"adaptive\"",
                                  "the replan or static policy (a joint or sparse gear set)");
  }
  impl_->policy.store(policy, std::memory_order_release);
  return absl::OkStatus();
}

UpdatePolicy AdaptiveGearRuntime::update_policy() const {
  return impl_->policy.load(std::memory_order_acquire);
}

GearCostModel AdaptiveGearRuntime::ReplanCostModel() const {
  MutexLock commit(&impl_->commit_mu);
  return impl_->replan_cost;
}

std::optional<UpdateRecord> AdaptiveGearRuntime::last_update() const {
  MutexLock lock(&impl_->record_mu);
  return impl_->last_record;
}

}  // namespace gearbox
