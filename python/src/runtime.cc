// Runtime, Snapshot, Plan, Variant and Pool: thin wrappers over
// AdaptiveGearRuntime, GearSet, Plan and GraphResourcePool (include/gearbox/).
//
// GIL contract: every call that may wait for the update path (RunOnce,
// CommitUpdate, StopWorker, listener changes, recording) runs with the GIL
// released; C++ threads that call into Python (release listeners, the
// release of a pooled Python object) take it, and skip Python altogether
// once the interpreter is finalizing.
#include "gearbox/runtime.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "convert.h"
#include "gearbox/clock.h"
#include "gearbox/config.h"
#include "gearbox/host_memory_probe.h"
#include "gearbox/memory_probe.h"
#include "gearbox/plan.h"
#include "gearbox/resource_pool.h"
#include "gearbox/update_worker.h"
#include "runtime.h"

namespace gearbox::python {
namespace {

// Most Variant objects Plan.variants builds (Plan.variant_arrays has no limit).
constexpr int64_t kMaxVariantObjects = 1'000'000;

std::string TypeName(const py::handle& h) {
  return py::str(py::type::handle_of(h).attr("__name__"));
}

// ---------------------------------------------------------------- Variant

struct PyVariant {
  Variant v;
};

py::tuple Row(const int64_t* values, int n) {
  py::tuple t(n);
  for (int d = 0; d < n; ++d) t[static_cast<size_t>(d)] = py::int_(values[d]);
  return t;
}

// ---------------------------------------------------------------- Plan

struct PyPlan {
  Plan plan;
  uint64_t runtime_id = 0;  // the runtime whose snapshot planned it
};

py::dict DimensionDict(const DimensionPlan& d) {
  py::list groups;
  for (int g = 0; g < d.num_groups; ++g) {
    const ChunkGroup& c = d.groups[g];
    py::dict group;
    group["gear"] = c.gear;
    group["extent"] = c.extent;
    group["count"] = c.count;
    group["offset"] = c.offset;
    groups.append(group);
  }
  py::dict out;
  out["raw"] = d.raw;
  out["max_gear"] = d.max_gear;
  out["split"] = d.split;
  out["eager"] = d.eager;
  out["groups"] = groups;
  return out;
}

py::list PlanDimensions(const PyPlan& p) {
  py::list out;
  for (int d = 0; d < p.plan.num_dimensions(); ++d) out.append(DimensionDict(p.plan.dimension(d)));
  return out;
}

py::list PlanVariants(const PyPlan& p) {
  if (p.plan.num_variants() > kMaxVariantObjects) {
    throw py::value_error("variants: the plan has " + std::to_string(p.plan.num_variants()) +
                          " variants, more than " + std::to_string(kMaxVariantObjects) +
                          " objects; use variant_arrays()");
  }
  py::list out;
  p.plan.ForEachVariant([&](const Variant& v) { out.append(PyVariant{v}); });
  return out;
}

py::tuple PlanVariantArrays(const PyPlan& p) {
  const auto n = static_cast<py::ssize_t>(p.plan.num_variants());
  const int dims = p.plan.num_dimensions();
  py::array_t<int64_t> gear({n, static_cast<py::ssize_t>(dims)});
  py::array_t<int64_t> extent({n, static_cast<py::ssize_t>(dims)});
  py::array_t<int64_t> offset({n, static_cast<py::ssize_t>(dims)});
  int64_t* g = gear.mutable_data();
  int64_t* e = extent.mutable_data();
  int64_t* o = offset.mutable_data();
  {
    GilRelease release;
    p.plan.ForEachVariant([&](const Variant& v) {
      for (int d = 0; d < dims; ++d) {
        *g++ = v.gear[d];
        *e++ = v.extent[d];
        *o++ = v.offset[d];
      }
    });
  }
  return py::make_tuple(gear, extent, offset);
}

// ---------------------------------------------------------------- Snapshot

struct PySnapshot {
  std::shared_ptr<const GearSet> set;
  uint64_t runtime_id = 0;
};

PyPlan PlanOn(const GearSet& set, uint64_t runtime_id, const py::handle& sizes) {
  const std::vector<int64_t> raw = SizesFromPython(sizes, "sizes");
  PyPlan p;
  p.runtime_id = runtime_id;
  ThrowIfError(MakePlan(set, raw, &p.plan));
  return p;
}

py::list SnapshotGears(const GearSet& set) {
  py::list out;
  for (int d = 0; d < set.num_dimensions(); ++d) {
    const auto gears = set.gears(d);
    out.append(py::cast(std::vector<int64_t>(gears.begin(), gears.end())));
  }
  return out;
}

py::list SnapshotCombinations(const GearSet& set) {
  py::list out;
  for (const GearCombination& c : set.combinations()) out.append(py::make_tuple(c[0], c[1]));
  return out;
}

// ---------------------------------------------------------------- Pool

// A Python object kept alive by the pool until its key is released.
class PyResource final : public GraphResource {
 public:
  PyResource(py::object object, int64_t bytes) : object_(std::move(object)), bytes_(bytes) {}
  int64_t bytes() const override { return bytes_; }
  // Drops the pool's reference to the Python object (takes the GIL).
  absl::Status Release() override {
    object_.Reset();
    return absl::OkStatus();
  }
  // New reference, or None once released; call with the GIL held.
  py::object object() const {
    const py::handle h = object_.get();
    return h ? py::reinterpret_borrow<py::object>(h) : py::object(py::none());
  }

 private:
  GilSafeObject object_;
  const int64_t bytes_;
};

struct PyPool {
  std::shared_ptr<GraphResourcePool> pool;
};

uint64_t PoolRegister(PyPool& p, py::object object, int64_t bytes) {
  if (object.is_none()) {
    throw py::type_error("register: None is not allowed; the object to keep alive");
  }
  if (bytes < 0) {
    throw py::value_error("register: bytes " + std::to_string(bytes) +
                          " is not allowed; bytes >= 0");
  }
  auto resource = std::make_shared<PyResource>(std::move(object), bytes);
  return p.pool->Register(std::move(resource));
}

py::object PoolAcquire(const PyPool& p, uint64_t key) {
  std::shared_ptr<GraphResource> held;
  {
    GilRelease release;
    held = p.pool->Acquire(key);
  }
  const auto* resource = dynamic_cast<const PyResource*>(held.get());
  if (resource == nullptr) return py::none();
  py::object out = resource->object();
  // Dropping `held` may release the resource (its key removed meanwhile):
  // that takes the GIL, which this thread holds (re-entrant).
  return out;
}

size_t PoolRemove(PyPool& p, const std::vector<uint64_t>& keys) {
  GilRelease release;  // releases take the GIL themselves
  return p.pool->RemoveByKeys(keys);
}

// ---------------------------------------------------------------- Runtime

std::atomic<uint64_t> next_runtime_id{1};

// Depth of callbacks from a runtime's update path (release listeners, memory
// probes) on this thread. Inside one, the worker cannot be joined from here:
// it may be this very thread.
thread_local int callback_depth = 0;
struct CallbackScope {
  CallbackScope() { ++callback_depth; }
  ~CallbackScope() { --callback_depth; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};

// Calls that take the update path's locks (which the runtime holds while it
// runs a listener or reads the probe: they would wait on this very thread)
// are refused inside a callback with a RuntimeError naming the call.
void RefuseInCallback(const char* call) {
  if (callback_depth > 0) {
    throw std::runtime_error(std::string("Runtime.") + call +
                             ": called from a release listener or memory probe, which runs "
                             "inside an update; call it from another thread");
  }
}

// A Python callable () -> float as the runtime's memory probe, called on the
// updating thread with the GIL taken. An exception or a non-number is an
// "unknown" reading (no pressure), its message in the update record.
// "host": HostMemoryProbe (cgroup v2 limit, else /proc/meminfo), no Python.
std::unique_ptr<MemoryProbe> MakeMemoryProbe(const py::object& fn) {
  if (py::isinstance<py::str>(fn)) {
    const std::string name = fn.cast<std::string>();
    if (name == "host") return std::make_unique<HostMemoryProbe>();
    throw py::value_error("memory_probe: \"" + name +
                          "\" is not allowed; \"host\" or a callable returning the fraction of "
                          "memory in use");
  }
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error("memory_probe: " + TypeName(fn) +
                         " is not allowed; a callable returning the fraction of memory in use");
  }
  auto callable = std::make_shared<GilSafeObject>(fn);
  return std::make_unique<FunctionMemoryProbe>([callable]() -> absl::StatusOr<double> {
    if (!PythonAlive()) return absl::UnavailableError("the Python interpreter is finalizing");
    py::gil_scoped_acquire gil;
    const CallbackScope scope;
    try {
      return callable->get()().cast<double>();
    } catch (py::error_already_set& e) {
      return absl::InternalError(std::string("memory_probe raised ") + e.what());
    } catch (const py::cast_error&) {
      return absl::InvalidArgumentError("memory_probe returned something that is not a number");
    }
  });
}

// What a Runtime owns. Members are destroyed in reverse order: the runtime
// (which refers to the clock and the pool) first.
struct RuntimeState {
  std::unique_ptr<ManualClock> manual_clock;  // null: the system clock
  std::unique_ptr<MemoryProbe> memory_probe;  // null: no memory-pressure handling
  std::shared_ptr<GraphResourcePool> pool;
  std::shared_ptr<PyPool> py_pool;
  std::vector<std::string> dims;
  uint64_t id = 0;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
};

class PyRuntime;
// Live runtimes, whose workers stop at interpreter exit (atexit) while Python
// still runs listeners, so no worker thread calls into a finalizing
// interpreter.
std::mutex live_mu;
std::set<PyRuntime*>* live = new std::set<PyRuntime*>;  // never destroyed

class PyRuntime {
 public:
  PyRuntime(const py::handle& config, const std::string& policy, bool start_worker,
            const std::string& clock, double start_time, int64_t event_buffer_events,
            const py::object& memory_probe) {
    const RuntimeConfig parsed = ConfigFromPython(config);
    const UpdatePolicy update_policy = ValueOrThrow(ParseUpdatePolicy(policy, "policy"));
    auto state = std::make_shared<RuntimeState>();
    state->id = next_runtime_id.fetch_add(1);
    RuntimeOptions options = RuntimeOptionsFromConfig(parsed, update_policy);
    if (clock == "manual") {
      state->manual_clock = std::make_unique<ManualClock>(start_time);
      options.clock = state->manual_clock.get();
    } else if (clock != "system") {
      throw py::value_error("clock: \"" + clock + "\" is not allowed; \"system\" or \"manual\"");
    }
    if (event_buffer_events < 1) {
      throw py::value_error("event_buffer_events: " + std::to_string(event_buffer_events) +
                            " is not allowed; at least 1");
    }
    if (!memory_probe.is_none()) {
      state->memory_probe = MakeMemoryProbe(memory_probe);
      options.memory_probe = state->memory_probe.get();
    }
    state->pool = std::make_shared<GraphResourcePool>();
    state->py_pool = std::make_shared<PyPool>(PyPool{state->pool});
    options.pool = state->pool.get();
    options.start_worker = start_worker;
    options.event_buffer_events = static_cast<size_t>(event_buffer_events);
    for (const DimensionSpec& d : parsed.dims) state->dims.push_back(d.name);
    {
      GilRelease release;
      state->runtime = ValueOrThrow(AdaptiveGearRuntime::Create(parsed.dims, std::move(options)));
    }
    state_ = std::move(state);
    GilRelease release;  // live_mu is held while workers stop at exit
    std::lock_guard<std::mutex> lock(live_mu);
    live->insert(this);
  }

  ~PyRuntime() {
    {
      // Out of the live set first; waits (without the GIL, which a listener
      // on the worker may need) while StopLiveRuntimesAtExit stops its worker.
      std::optional<GilRelease> release;
      if (PythonAlive()) release.emplace();
      std::lock_guard<std::mutex> lock(live_mu);
      live->erase(this);
    }
    Close();
  }
  PyRuntime(const PyRuntime&) = delete;
  PyRuntime& operator=(const PyRuntime&) = delete;

  // The state, or RuntimeError naming the call when closed.
  std::shared_ptr<RuntimeState> Get(const char* call) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == nullptr) {
      throw std::runtime_error(std::string("Runtime.") + call +
                               ": runtime is closed (close() was called)");
    }
    return state_;
  }

  // Stops the worker and drops the runtime (idempotent). Calls in flight on
  // other threads keep the state alive until they return.
  void Close() {
    std::shared_ptr<RuntimeState> state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      state = std::move(state_);
    }
    if (state == nullptr) return;
    if (!PythonAlive()) {
      // Finalizing: a listener could not run; leak the runtime rather than
      // wait for a worker that may be blocked on the GIL.
      new std::shared_ptr<RuntimeState>(std::move(state));
      return;
    }
    GilRelease release;
    if (callback_depth > 0) {
      // Closed from a listener or probe, maybe on the worker thread itself:
      // another thread joins the worker once this callback has returned.
      std::thread([state = std::move(state)]() mutable {
        state->runtime->StopWorker();
        state.reset();
      }).detach();
      return;
    }
    state->runtime->StopWorker();
    state.reset();
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_ == nullptr;
  }

  // At interpreter exit (atexit, Python still running): stops the worker, so
  // no worker thread calls into the finalizing interpreter, and keeps the
  // runtime open. A thread still running then (a daemon thread) plans and
  // records on without a worker until the interpreter ends it, instead of
  // raising in its last moments: a traceback written while the interpreter
  // finalizes can abort the process. start_worker() is refused from then on.
  void StopAtExit() {
    std::shared_ptr<RuntimeState> state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      state = state_;
      exiting_ = true;
    }
    if (state == nullptr || !PythonAlive()) return;
    GilRelease release;  // the worker may be waiting for the GIL in a listener
    state->runtime->StopWorker();
  }

  double TimeOr(const RuntimeState& s, const std::optional<double>& now) const {
    return now.has_value() ? *now : s.runtime->Now();
  }

  PySnapshot Snapshot() const {
    auto s = Get("snapshot");
    SnapshotRef ref = s->runtime->GetSnapshot();
    return PySnapshot{std::make_shared<const GearSet>(*ref), s->id};
  }

  PyPlan MakeRequestPlan(const py::handle& sizes) const {
    auto s = Get("plan");
    const std::vector<int64_t> raw = SizesFromPython(sizes, "sizes");
    PyPlan p;
    p.runtime_id = s->id;
    absl::Status status;
    {
      SnapshotRef ref = s->runtime->GetSnapshot();
      status = MakePlan(*ref, raw, &p.plan);
    }
    ThrowIfError(status);
    return p;
  }

  void Record(const PyPlan& plan, const std::optional<double>& now) const {
    auto s = Get("record");
    if (plan.runtime_id != s->id) {
      throw py::value_error(
          "record: the plan was made on another runtime's snapshot; plan on this runtime");
    }
    const double t = TimeOr(*s, now);
    GilRelease release;
    s->runtime->RecordPlan(plan.plan, t);
  }

  py::object RunOnce(const std::optional<double>& now, const std::string& trigger) const {
    auto s = Get("run_once");
    RefuseInCallback("run_once");
    UpdateTrigger t = UpdateTrigger::kManual;
    if (trigger == "interval") {
      t = UpdateTrigger::kInterval;
    } else if (trigger == "memory") {
      t = UpdateTrigger::kMemory;
    } else if (trigger == "combinations") {
      t = UpdateTrigger::kCombinations;
    } else if (trigger != "manual") {
      throw py::value_error("trigger: \"" + trigger +
                            "\" is not allowed; \"manual\", \"interval\", \"memory\" or "
                            "\"combinations\"");
    }
    const double time = TimeOr(*s, now);
    absl::StatusOr<UpdateRecord> record;
    {
      GilRelease release;
      record = s->runtime->RunOnce(time, t);
    }
    ThrowIfError(record.status());
    return JsonToPython(UpdateRecordToJson(*record));
  }

  py::object CommitUpdate(const std::vector<std::vector<int64_t>>& gears,
                          const std::optional<double>& now) const {
    auto s = Get("commit_update");
    RefuseInCallback("commit_update");
    const double time = TimeOr(*s, now);
    absl::StatusOr<UpdateRecord> record;
    {
      GilRelease release;
      record = s->runtime->CommitUpdate(gears, time);
    }
    ThrowIfError(record.status());
    return JsonToPython(UpdateRecordToJson(*record));
  }

  void StartWorker() const {
    auto s = Get("start_worker");
    RefuseAtExit("start_worker");
    absl::Status status;
    {
      GilRelease release;
      status = s->runtime->StartWorker();
      // StopAtExit may have run meanwhile (it sets exiting_ before it stops
      // the worker): stop the worker this call started after it.
      if (Exiting()) s->runtime->StopWorker();
    }
    ThrowIfError(status);
    RefuseAtExit("start_worker");
  }

  bool Exiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return exiting_;
  }

  void RefuseAtExit(const char* call) const {
    if (Exiting()) {
      throw std::runtime_error(std::string("Runtime.") + call +
                               ": the interpreter is exiting (its atexit hook stopped the worker)");
    }
  }

  void StopWorker() const {
    auto s = Get("stop_worker");
    if (callback_depth > 0) {
      throw std::runtime_error(
          "Runtime.stop_worker: called from a release listener or memory probe, which may run on "
          "the worker thread itself; stop the worker from another thread (or call close())");
    }
    GilRelease release;  // the worker may be waiting for the GIL in a listener
    s->runtime->StopWorker();
  }

  bool WorkerRunning() const { return Get("worker_running")->runtime->worker()->running(); }

  double Now() const { return Get("now")->runtime->Now(); }

  ManualClock& Manual(const RuntimeState& s, const char* call) const {
    if (s.manual_clock == nullptr) {
      throw std::runtime_error(std::string("Runtime.") + call +
                               ": the runtime runs on the system clock; create it with "
                               "clock=\"manual\" to set the time");
    }
    return *s.manual_clock;
  }

  void SetTime(double t) const {
    auto s = Get("set_time");
    ManualClock& clock = Manual(*s, "set_time");
    GilRelease release;  // wakes the worker
    clock.Set(t);
  }

  void Advance(double dt) const {
    auto s = Get("advance");
    ManualClock& clock = Manual(*s, "advance");
    GilRelease release;
    clock.Advance(dt);
  }

  // GearCostModel's fields by their C++ (and JSON) names.
  static std::vector<std::pair<const char*, double GearCostModel::*>> CostFields() {
    return {{"compile_seconds", &GearCostModel::compile_seconds},
            {"seconds_per_unit", &GearCostModel::seconds_per_unit},
            {"runtime_exponent", &GearCostModel::runtime_exponent},
            {"memory_fixed_bytes", &GearCostModel::memory_fixed_bytes},
            {"memory_bytes_per_unit", &GearCostModel::memory_bytes_per_unit},
            {"memory_exponent", &GearCostModel::memory_exponent},
            {"alpha", &GearCostModel::alpha},
            {"beta", &GearCostModel::beta},
            {"gamma", &GearCostModel::gamma},
            {"seconds_per_run", &GearCostModel::seconds_per_run}};
  }

  py::dict ReplanCost() const {
    auto s = Get("replan_cost");
    RefuseInCallback("replan_cost");
    GearCostModel cost;
    {
      GilRelease release;  // waits for the update lock, whose holder may need the GIL
      cost = s->runtime->ReplanCostModel();
    }
    py::dict d;
    for (const auto& [name, field] : CostFields()) d[name] = cost.*field;
    return d;
  }

  // Replaces the named fields of the replan cost model; the others keep
  // their values. Unknown names and invalid values: ValueError, nothing changes.
  void SetReplanCost(const py::kwargs& fields) const {
    auto s = Get("set_replan_cost");
    RefuseInCallback("set_replan_cost");
    GearCostModel cost;
    {
      GilRelease release;  // waits for the update lock, whose holder may need the GIL
      cost = s->runtime->ReplanCostModel();
    }
    const auto known = CostFields();
    for (const auto& [key, value] : fields) {
      const std::string name = py::str(key);
      auto it =
          std::find_if(known.begin(), known.end(), [&](const auto& f) { return name == f.first; });
      if (it == known.end()) {
        std::string allowed;
        for (const auto& f : known) allowed += (allowed.empty() ? "" : ", ") + std::string(f.first);
        throw py::value_error("set_replan_cost: \"" + name + "\" is not allowed; one of " +
                              allowed);
      }
      if (!py::isinstance<py::int_>(value) && !py::isinstance<py::float_>(value)) {
        throw py::type_error("set_replan_cost: " + name + " must be a number, not " +
                             std::string(py::str(py::type::handle_of(value).attr("__name__"))));
      }
      cost.*(it->second) = value.cast<double>();
    }
    GilRelease release;
    ThrowIfError(s->runtime->SetReplanCostModel(cost));
  }

  py::dict Counters() const {
    auto s = Get("counters");
    const RuntimeCounters c = s->runtime->counters();
    py::dict d;
    d["events_recorded"] = c.events_recorded;
    d["events_dropped"] = c.events_dropped;
    d["events_folded"] = c.events_folded;
    d["events_for_evicted_gears"] = c.events_for_evicted_gears;
    d["events_too_late"] = c.events_too_late;
    d["events_bad_time"] = c.events_bad_time;
    d["events_pending"] = c.events_pending;
    d["updates"] = c.updates;
    d["updates_changed"] = c.updates_changed;
    d["keys_released"] = c.keys_released;
    d["orphan_keys_released"] = c.orphan_keys_released;
    d["idle_keys_released"] = c.idle_keys_released;
    d["stats_memory_bytes"] = c.stats_memory_bytes;
    return d;
  }

  py::object LastUpdate() const {
    auto s = Get("last_update");
    const std::optional<UpdateRecord> r = s->runtime->last_update();
    if (!r.has_value()) return py::none();
    return JsonToPython(UpdateRecordToJson(*r));
  }

  py::dict Stats(const std::optional<double>& now) const {
    auto s = Get("stats");
    const double time = TimeOr(*s, now);
    WindowStats w;
    {
      GilRelease release;
      w = s->runtime->BuildStatsSnapshot(time);
    }
    py::list dims;
    for (const DimensionStats& d : w.dimensions) {
      py::list gears;
      for (const GearStats& g : d.gears) {
        py::dict gd;
        gd["gear"] = g.gear;
        gd["weighted_hits"] = g.weighted_hits;
        gd["hit_rate"] = g.hit_rate;
        gd["avg_pad_ratio"] = g.avg_pad_ratio;
        gd["avg_split_ratio"] = g.avg_split_ratio;
        gd["samples"] = g.sample_count;
        gd["pad_samples"] = g.pad_sample_count;
        gd["split_samples"] = g.split_sample_count;
        gd["median_raw"] = g.raw_samples.Median();
        gd["created_ts"] = g.created_ts;
        gd["initial"] = g.initial;
        gd["readded"] = g.readded;
        gd["fleet_traffic"] = g.fleet_traffic;
        gd["last_hit_ts"] = g.last_hit_ts;
        gears.append(gd);
      }
      py::dict dd;
      dd["name"] = d.name;
      dd["total_weighted_hits"] = d.total_weighted_hits;
      dd["observed_seconds"] = d.observed_seconds;
      dd["gears"] = gears;
      dims.append(dd);
    }
    py::dict out;
    out["now"] = w.now;
    out["dimensions"] = dims;
    return out;
  }

  bool AttachCleanupKeys(const std::vector<int64_t>& gears,
                         const std::vector<uint64_t>& keys) const {
    auto s = Get("attach_cleanup_keys");
    if (gears.size() != s->dims.size()) {
      throw py::value_error("gears: " + std::to_string(gears.size()) +
                            " gears is not allowed; one per dimension (" +
                            std::to_string(s->dims.size()) + ")");
    }
    GilRelease release;  // an evicted gear releases the keys at once
    return s->runtime->AttachCleanupKeys(gears, keys);
  }

  uint64_t AddReleaseListener(py::object fn) const {
    auto s = Get("add_release_listener");
    RefuseInCallback("add_release_listener");
    if (!PyCallable_Check(fn.ptr())) {
      throw py::type_error("add_release_listener: " + TypeName(fn) +
                           " is not allowed; a callable taking a list of keys");
    }
    auto callable = std::make_shared<GilSafeObject>(std::move(fn));
    AdaptiveGearRuntime::ReleaseListener listener = [callable](std::span<const GraphKey> keys) {
      if (!PythonAlive()) return;
      py::gil_scoped_acquire gil;
      const CallbackScope scope;
      try {
        py::list list;
        for (GraphKey k : keys) list.append(py::int_(k));
        callable->get()(list);
      } catch (py::error_already_set& e) {
        // Never into the C++ thread: reported like an exception in __del__.
        e.discard_as_unraisable("gearbox release listener");
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        PyErr_WriteUnraisable(callable->get().ptr());
      }
    };
    GilRelease release;
    return s->runtime->AddReleaseListener(std::move(listener));
  }

  void RemoveReleaseListener(uint64_t id) const {
    auto s = Get("remove_release_listener");
    RefuseInCallback("remove_release_listener");
    GilRelease release;  // waits for a running listener, which takes the GIL
    s->runtime->RemoveReleaseListener(id);
  }

  std::shared_ptr<PyPool> Pool() const { return Get("pool")->py_pool; }
  std::vector<std::string> Dims() const { return Get("dims")->dims; }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<RuntimeState> state_;
  bool exiting_ = false;  // StopAtExit ran; guarded by mu_
};

void StopLiveRuntimesAtExit() {
  // Under live_mu: a runtime collected meanwhile on another thread waits in
  // its destructor until this is done with it.
  std::lock_guard<std::mutex> lock(live_mu);
  for (PyRuntime* r : *live) r->StopAtExit();
}

void BindVariantAndPlan(py::module_& m) {
  py::class_<PyVariant>(m, "Variant", "One executed shape of a plan: a chunk in every dimension.")
      .def_property_readonly(
          "gear", [](const PyVariant& v) { return Row(v.v.gear, v.v.num_dimensions); },
          "Compiled size per dimension (the exact size when eager).")
      .def_property_readonly(
          "extent", [](const PyVariant& v) { return Row(v.v.extent, v.v.num_dimensions); },
          "Valid (unpadded) size per dimension; gear - extent is padding.")
      .def_property_readonly(
          "offset", [](const PyVariant& v) { return Row(v.v.offset, v.v.num_dimensions); },
          "Where the chunk starts in the request, per dimension.")
      .def_property_readonly(
          "eager", [](const PyVariant& v) { return v.v.eager; },
          "True when the variant runs uncompiled at its exact size.")
      .def("__repr__", [](const PyVariant& v) {
        return "Variant(gear=" + std::string(py::repr(Row(v.v.gear, v.v.num_dimensions))) +
               ", extent=" + std::string(py::repr(Row(v.v.extent, v.v.num_dimensions))) +
               ", offset=" + std::string(py::repr(Row(v.v.offset, v.v.num_dimensions))) +
               ", eager=" + (v.v.eager ? "True" : "False") + ")";
      });

  py::class_<PyPlan>(m, "Plan",
                     "How one request runs on a snapshot's gears: per dimension which chunks run "
                     "on which gear. A value; record it with Runtime.record once executed.")
      .def_property_readonly(
          "snapshot_version", [](const PyPlan& p) { return p.plan.snapshot_version(); },
          "Version of the snapshot it was planned on.")
      .def_property_readonly(
          "exact", [](const PyPlan& p) { return p.plan.exact(); },
          "One compiled variant exactly at the request's sizes (no padding, no copy).")
      .def_property_readonly(
          "num_variants", [](const PyPlan& p) { return p.plan.num_variants(); },
          "Executed variants: the product over dimensions of their chunk counts.")
      .def_property_readonly(
          "any_split", [](const PyPlan& p) { return p.plan.any_split(); },
          "Some dimension is split into chunks of its largest gear.")
      .def_property_readonly(
          "any_eager", [](const PyPlan& p) { return p.plan.any_eager(); },
          "Some dimension runs above its largest gear at its exact size.")
      .def_property_readonly(
          "any_uncompiled", [](const PyPlan& p) { return p.plan.any_uncompiled(); },
          "Some variant runs uncompiled (eager, or a joint/sparse cell without a graph).")
      .def_property_readonly(
          "padded_volume", [](const PyPlan& p) { return p.plan.padded_volume(); },
          "Elements computed: product of gears, summed over variants.")
      .def_property_readonly(
          "raw_volume", [](const PyPlan& p) { return p.plan.raw_volume(); },
          "Elements requested: product of the raw sizes.")
      .def_property_readonly("dimensions", &PlanDimensions,
                             "Per dimension a dict: raw, max_gear, split, eager, groups (a list "
                             "of {gear, extent, count, offset}).")
      .def_property_readonly("variants", &PlanVariants,
                             "Every executed Variant, the last dimension varying fastest "
                             "(ValueError above 1e6 of them: use variant_arrays()).")
      .def("variant_arrays", &PlanVariantArrays,
           "The variants as three int64 numpy arrays (gear, extent, offset), each of shape "
           "[num_variants, dims], filled without Python objects per element.")
      .def("__repr__", [](const PyPlan& p) {
        return "Plan(snapshot_version=" + std::to_string(p.plan.snapshot_version()) +
               ", num_variants=" + std::to_string(p.plan.num_variants()) +
               ", exact=" + (p.plan.exact() ? "True" : "False") + ")";
      });
}

void BindSnapshotAndPool(py::module_& m) {
  py::class_<PySnapshot>(m, "Snapshot",
                         "An immutable copy of a runtime's gear set at one version; plan on it "
                         "from any thread, for as long as you like.")
      .def_property_readonly(
          "version", [](const PySnapshot& s) { return s.set->version(); },
          "Version: 1 for the initial gears, +1 per published update.")
      .def_property_readonly(
          "dims",
          [](const PySnapshot& s) {
            std::vector<std::string> out;
            for (const auto& d : s.set->dimensions()) out.push_back(d.name);
            return out;
          },
          "Dimension names, in order.")
      .def_property_readonly(
          "gears", [](const PySnapshot& s) { return SnapshotGears(*s.set); },
          "Gears per dimension, ascending.")
      .def_property_readonly(
          "scheme",
          [](const PySnapshot& s) { return std::string(GearSchemeName(s.set->scheme())); },
          "\"independent\", \"joint\" or \"sparse\".")
      .def_property_readonly(
          "combinations", [](const PySnapshot& s) { return SnapshotCombinations(*s.set); },
          "Compiled gear combinations of a joint or sparse set; [] for independent.")
      .def_property_readonly(
          "created_at", [](const PySnapshot& s) { return s.set->created_at(); },
          "Clock time the set was published at.")
      .def(
          "plan",
          [](const PySnapshot& s, const py::handle& sizes) {
            return PlanOn(*s.set, s.runtime_id, sizes);
          },
          py::arg("sizes"),
          "Plans a request with these sizes (one int per dimension) on this snapshot. "
          "ValueError when a size is < 1, above the largest gear of a dimension that neither "
          "splits nor falls back, or the count is wrong.")
      .def("__repr__", [](const PySnapshot& s) {
        return "Snapshot(version=" + std::to_string(s.set->version()) + ", " +
               s.set->DebugString() + ")";
      });

  py::class_<PyPool, std::shared_ptr<PyPool>>(
      m, "Pool",
      "A registry of compiled graphs (GraphResourcePool): keeps each registered Python object "
      "alive until its key is released (an eviction, or remove_by_keys) and no acquire() "
      "reference is held; then drops it (taking the GIL). Every Runtime has its own.")
      .def(py::init([] {
             return std::make_shared<PyPool>(PyPool{std::make_shared<GraphResourcePool>()});
           }),
           "A pool of your own (a Runtime's is Runtime.pool).")
      .def("register", &PoolRegister, py::arg("obj"), py::arg("bytes") = 0,
           "Keeps obj alive until its key is released; returns the key (never 0), also "
           "appended to this thread's recent keys (consume_recent_keys). bytes: memory it "
           "holds, for reports.")
      .def(
          "consume_recent_keys", [](PyPool& p) { return p.pool->ConsumeRecentKeys(); },
          "Returns and clears the keys this thread registered since its last call.")
      .def("acquire", &PoolAcquire, py::arg("key"),
           "The object registered under key, or None when the key was released (or never "
           "existed).")
      .def("remove_by_keys", &PoolRemove, py::arg("keys"),
           "Drops the pool's reference to each key's object (unknown keys skipped); returns "
           "how many entries it removed.")
      .def_property_readonly(
          "size", [](const PyPool& p) { return p.pool->size(); }, "Live entries.")
      .def_property_readonly(
          "bytes", [](const PyPool& p) { return p.pool->bytes(); },
          "Sum of the live entries' bytes.")
      .def_property_readonly(
          "registered", [](const PyPool& p) { return p.pool->registered(); },
          "Keys handed out in all.")
      .def_property_readonly(
          "released", [](const PyPool& p) { return p.pool->released(); },
          "Objects released (dropped) in all.")
      .def("__len__", [](const PyPool& p) { return p.pool->size(); });
}

void BindRuntimeClass(py::module_& m) {
  py::class_<PyRuntime>(
      m, "Runtime",
      "The adaptive gear runtime (AdaptiveGearRuntime): plan requests on the current gears, "
      "record what ran, and let updates (run_once, or the worker thread) evolve the gears.\n\n"
      "Thread-safe: every method may be called from any thread. Long calls release the GIL.\n"
      "Closing (close(), the with-block's end, or garbage collection) stops the worker; calls "
      "after it raise RuntimeError(\"... runtime is closed ...\").")
      .def(py::init<const py::handle&, const std::string&, bool, const std::string&, double,
                    int64_t, const py::object&>(),
           py::arg("config"), py::kw_only(), py::arg("policy") = "replan",
           py::arg("start_worker") = false, py::arg("clock") = "system",
           py::arg("start_time") = 0.0, py::arg("event_buffer_events") = 4096,
           py::arg("memory_probe") = py::none(),
           "config: JSON text (a str starting with '{'), a dict with the config file's keys, "
           "or a path (str or os.PathLike) to a config file. policy: \"static\", \"adaptive\" "
           "or \"replan\". start_worker: start the update worker thread now. clock: \"system\" "
           "(Unix seconds) or \"manual\" (virtual time from start_time, moved by set_time and "
           "advance). event_buffer_events: events per recording thread's ring. memory_probe: a "
           "callable returning the fraction of device memory in use (called on the updating "
           "thread; at or above adaptive.device_memory_usage_threshold_ratio an update runs at "
           "once and additions are limited), or \"host\": the process's cgroup v2 memory "
           "against its limit, else /proc/meminfo; None: no memory-pressure handling. "
           "ValueError on a bad config, naming the field (e.g. \"dims[0].gears\").")
      .def_property_readonly("dims", &PyRuntime::Dims, "Dimension names, in order.")
      .def("snapshot", &PyRuntime::Snapshot, "A copy of the current gear set (Snapshot).")
      .def("plan", &PyRuntime::MakeRequestPlan, py::arg("sizes"),
           "Plans a request (one size per dimension) on the current gears. ValueError on bad "
           "sizes, with the C++ message.")
      .def("record", &PyRuntime::Record, py::arg("plan"), py::arg("now") = py::none(),
           "Records one event per executed variant of plan (the runtime's clock when now is "
           "None).")
      .def("run_once", &PyRuntime::RunOnce, py::arg("now") = py::none(),
           py::arg("trigger") = "manual",
           "One update at now (default: the clock's time); returns the update record as a dict "
           "(the --decisions JSON line's keys). trigger: \"manual\", \"interval\", \"memory\" "
           "or \"combinations\" (replan, joint and sparse sets: only the combinations on the "
           "current grid may change).")
      .def("commit_update", &PyRuntime::CommitUpdate, py::arg("gears"), py::arg("now") = py::none(),
           "Replaces the gear lists (one list per dimension), as an operator would; returns "
           "the update record. ValueError on invalid gears (nothing changes).")
      .def("start_worker", &PyRuntime::StartWorker,
           "Starts (or restarts) the update worker thread.")
      .def("stop_worker", &PyRuntime::StopWorker,
           "Stops the worker thread and waits for it (a running release listener finishes "
           "first).")
      .def_property_readonly("worker_running", &PyRuntime::WorkerRunning,
                             "Whether the worker thread runs.")
      .def("now", &PyRuntime::Now, "The runtime clock's time, seconds.")
      .def("set_time", &PyRuntime::SetTime, py::arg("t"),
           "Sets the manual clock (clock=\"manual\" only; RuntimeError otherwise).")
      .def("advance", &PyRuntime::Advance, py::arg("dt"),
           "Moves the manual clock forward by dt seconds (clock=\"manual\" only).")
      .def("counters", &PyRuntime::Counters,
           "The RuntimeCounters as a dict (events_recorded, events_dropped, updates, ...).")
      .def("last_update", &PyRuntime::LastUpdate,
           "The latest update record (dict), or None. Inside a release listener: the update "
           "that called it.")
      .def("replan_cost", &PyRuntime::ReplanCost,
           "The replan policy's cost model (compile_seconds, seconds_per_unit, ...) as a dict.")
      .def("set_replan_cost", &PyRuntime::SetReplanCost,
           "set_replan_cost(**fields): replaces the named fields of the replan policy's cost "
           "model for the next updates (e.g. compile_seconds measured by the caller). "
           "ValueError naming the field on an unknown name or an invalid value; nothing "
           "changes then.")
      .def("stats", &PyRuntime::Stats, py::arg("now") = py::none(),
           "Window statistics at now: {\"now\", \"dimensions\": [{\"name\", "
           "\"total_weighted_hits\", \"observed_seconds\", \"gears\": [{\"gear\", "
           "\"weighted_hits\", \"hit_rate\", \"avg_pad_ratio\", \"avg_split_ratio\", "
           "\"samples\", ...}]}]}.")
      .def("attach_cleanup_keys", &PyRuntime::AttachCleanupKeys, py::arg("gears"), py::arg("keys"),
           "Attaches pool keys to the gears a variant hit (one gear per dimension); when one "
           "of them was evicted meanwhile the keys are released at once (returns False).")
      .def("add_release_listener", &PyRuntime::AddReleaseListener, py::arg("fn"),
           "Calls fn(list_of_keys) after each update with the keys handed to the pool, on the "
           "updating thread (the worker's, with the GIL taken). Exceptions are reported "
           "through sys.unraisablehook, never raised into the worker. Returns an id.")
      .def("remove_release_listener", &PyRuntime::RemoveReleaseListener, py::arg("id"),
           "Removes a listener; once it returns the listener is not running.")
      .def_property_readonly("pool", &PyRuntime::Pool, "This runtime's own Pool.")
      .def_property_readonly("closed", &PyRuntime::closed, "Whether close() was called.")
      .def("close", &PyRuntime::Close,
           "Stops the worker and frees the runtime; idempotent. Later calls raise "
           "RuntimeError.")
      .def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__",
          [](PyRuntime& r, const py::args&) {
            r.Close();
            return false;
          },
          "Closes the runtime.");
}

}  // namespace

void BindRuntime(py::module_& m) {
  BindVariantAndPlan(m);
  BindSnapshotAndPool(m);
  BindRuntimeClass(m);
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { StopLiveRuntimesAtExit(); }));
}

}  // namespace gearbox::python
