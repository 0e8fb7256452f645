#include "gearbox/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <new>
#include <optional>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fmt/ranges.h"
#include "gearbox/memory_model.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"
#include "src/runtime/epoch.h"
#include "src/stats/event_log.h"  // ThisThreadIndex

namespace gearbox {
namespace {

using internal::Cat;
using internal::InvalidField;

struct Combo {
  int n = 0;
  int64_t gear[kMaxDimensions] = {};
  bool operator<(const Combo& o) const {
    return std::lexicographical_compare(gear, gear + n, o.gear, o.gear + o.n);
  }
};

// A compile or run that failed for memory (ResourceExhausted).
bool IsOutOfMemory(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted;
}

// A backend arena in use: a gear's predicted memory is then its arena need.
bool ArenaInUse(const ArenaUsage& arena) {
  return arena.slots != 0 || arena.largest_need_bytes != 0;
}

// What a gear predicted at `predicted` bytes takes with no other gear held:
// with an arena, its need in every slot.
int64_t AloneBytesOf(int64_t predicted, const ArenaUsage& arena) {
  return ArenaInUse(arena) ? predicted * std::max(1, arena.slots) : predicted;
}

bool Compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// A host buffer with a DLTensor view, for staging a variant's chunk. Its
// storage is kept between requests (see Scratch), grown when too small.
struct Staged {
  std::unique_ptr<std::byte[]> bytes;
  size_t capacity = 0;
  std::vector<int64_t> shape;
  DLTensor tensor{};
};

// `zero`: clear it (outputs; an input is written whole by GatherChunk).
absl::Status Stage(const TensorSpec& spec, const Variant& v, bool zero, Staged* out) {
  out->shape = spec.shape;
  for (const AxisBinding& b : spec.bindings) out->shape[b.axis] = v.gear[b.dimension];
  int64_t elements = 1;
  for (int64_t s : out->shape) elements *= s;
  auto elem = ElementBytes(spec.dtype, spec.name);
  if (!elem.ok()) return elem.status();
  const size_t bytes = static_cast<size_t>(elements * *elem);
  if (bytes > out->capacity) {
    out->bytes.reset(new std::byte[bytes]);
    out->capacity = bytes;
  }
  if (zero) std::memset(out->bytes.get(), 0, bytes);
  out->tensor = DLTensor{out->bytes.get(),
                         {kDLCPU, 0},
                         static_cast<int>(out->shape.size()),
                         spec.dtype,
                         out->shape.data(),
                         nullptr,
                         0};
  return absl::OkStatus();
}

// Staging buffers and views, one set per thread, reused by its requests (no
// allocation once warm). A nested Run on the same thread (an executable
// that runs another executor) gets a fresh set.
struct Scratch {
  std::vector<Staged> in, out;
  std::vector<DLTensor> in_views, out_views;
  bool busy = false;
};

class ScratchLease {
 public:
  ScratchLease(size_t inputs, size_t outputs) {
    thread_local Scratch shared;
    scratch_ = shared.busy ? &own_ : &shared;
    scratch_->busy = true;
    if (scratch_->in.size() < inputs) scratch_->in.resize(inputs);
    if (scratch_->out.size() < outputs) scratch_->out.resize(outputs);
    scratch_->in_views.resize(inputs);
    scratch_->out_views.resize(outputs);
  }
  ~ScratchLease() { scratch_->busy = false; }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() const { return *scratch_; }

 private:
  Scratch own_;
  Scratch* scratch_;
};

}  // namespace

// The executor's own references to its compiled executables.
//
// Lookup (request threads, no lock): the live executables are an immutable
// Table, sorted by gear combination, published through an atomic pointer
// and reclaimed with the epoch scheme of the gear-set snapshots
// (src/runtime/epoch.h). A request pins the epoch with its SnapshotRef for
// the whole Run and loads the table once, so neither the table nor any
// executable in it can be freed while the request runs: a table superseded
// by an eviction is freed (dropping its references; the last one releases
// the graph through the pool's handle) only once no reader pinned before the
// eviction remains.
//
// Writers (misses, evictions, reclaims) serialize on mu, which also guards
// the single-flight set: one compile per combination, outside every lock;
// waiters sleep on `compiled`; failures are never cached.
// Lock order: runtime listeners -> mu -> pool.
class GearedExecutor::Cache {
 public:
  struct Slot {
    Combo combo;
    GraphKey key = 0;
    std::shared_ptr<Executable> exe;  // shares the pool's handle
  };
  struct Table {
    std::vector<Slot> slots;  // ascending by combo
    const Slot* Find(const Combo& combo) const {
      auto it = std::lower_bound(slots.begin(), slots.end(), combo,
                                 [](const Slot& s, const Combo& c) { return s.combo < c; });
      return it != slots.end() && !(combo < it->combo) ? &*it : nullptr;
    }
  };
  using Freeable = std::vector<std::unique_ptr<const Table>>;

  ~Cache() { delete table.load(std::memory_order_acquire); }

  // Makes `next` current and retires the previous table.
  void PublishLocked(std::unique_ptr<Table> next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Table* old = table.exchange(next.release(), std::memory_order_seq_cst);
    const uint64_t tag = internal::EpochDomain::Global().Advance();
    retired.emplace_back(tag, std::unique_ptr<const Table>(old));
    retired_count.store(retired.size(), std::memory_order_relaxed);
  }
  // Retired tables no reader can still use; the caller frees them outside mu.
  Freeable TakeFreeableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Freeable out;
    auto keep = retired.begin();
    for (auto it = retired.begin(); it != retired.end(); ++it) {
      if (internal::EpochDomain::Global().SafeToFree(it->first)) {
        out.push_back(std::move(it->second));
      } else {
        *keep++ = std::move(*it);
      }
    }
    retired.erase(keep, retired.end());
    retired_count.store(retired.size(), std::memory_order_relaxed);
    return out;
  }

  std::atomic<const Table*> table{new Table()};  // replaced only under mu
  std::atomic<size_t> retired_count{0};          // a hint for requests: something to reclaim
  Mutex mu;
  // Serializes the budget check with the pool registration that follows it
  // (graph_memory_budget_bytes). Taken alone, before the pool's lock.
  Mutex budget_mu;
  CondVar compiled;
  std::set<Combo> compiling ABSL_GUARDED_BY(mu);
  std::vector<std::pair<uint64_t, std::unique_ptr<const Table>>> retired ABSL_GUARDED_BY(mu);
  // The memory model (PredictGearBytes); taken alone.
  mutable Mutex model_mu;
  std::optional<GearMemoryModel> model ABSL_GUARDED_BY(model_mu);
};

GearedExecutor::GearedExecutor(AdaptiveGearRuntime* runtime, Backend* backend,
                               ExecutorOptions options)
    : runtime_(runtime), backend_(backend), options_(options), cache_(std::make_unique<Cache>()) {
  const int dims = runtime_->num_dimensions();
  const int q = backend_->quadratic_memory_dimension();
  auto model = GearMemoryModel::Create(
      {.num_dimensions = dims, .quadratic_dimension = q >= 0 && q < dims ? q : -1});
  if (model.ok()) {
    MutexLock lock(&cache_->model_mu);
    cache_->model = *std::move(model);
  }
  listener_ =
      runtime_->AddReleaseListener([this](std::span<const GraphKey> keys) { OnReleased(keys); });
}

// The runtime's GearBytesPredictor (InstallGearBytesPredictor): forwards to
// the executor until Detach, which waits for calls in flight.
class GearedExecutor::BytesPredictor final : public GearBytesPredictor {
 public:
  explicit BytesPredictor(const GearedExecutor* executor) : executor_(executor) {}
  std::optional<int64_t> AddedBytes(std::span<const int64_t> gears) const override {
    MutexLock lock(&mu_);
    if (executor_ == nullptr) return std::nullopt;
    absl::StatusOr<int64_t> added = executor_->PredictAddedBytes(gears);
    if (!added.ok()) return std::nullopt;
    return *added;
  }
  std::optional<int64_t> AloneBytes(std::span<const int64_t> gears) const override {
    MutexLock lock(&mu_);
    if (executor_ == nullptr) return std::nullopt;
    absl::StatusOr<int64_t> alone = executor_->PredictAloneBytes(gears);
    if (!alone.ok()) return std::nullopt;
    return *alone;
  }
  int64_t FreedBytes(std::span<const int64_t> gears) const override {
    MutexLock lock(&mu_);
    return executor_ != nullptr ? executor_->CachedGearBytes(gears) : 0;
  }
  int64_t InUseBytes() const override {
    MutexLock lock(&mu_);
    return executor_ != nullptr ? executor_->GearMemoryBytes() : 0;
  }
  void Detach() {
    MutexLock lock(&mu_);
    executor_ = nullptr;
  }

 private:
  mutable Mutex mu_;
  const GearedExecutor* executor_ ABSL_GUARDED_BY(mu_);
};

GearedExecutor::~GearedExecutor() {
  if (predictor_ != nullptr) {
    runtime_->SetGearBytesPredictor(nullptr);
    predictor_->Detach();
  }
  runtime_->RemoveReleaseListener(listener_);
}

void GearedExecutor::InstallGearBytesPredictor() {
  if (predictor_ == nullptr) predictor_ = std::make_shared<BytesPredictor>(this);
  runtime_->SetGearBytesPredictor(predictor_);
}

int64_t GearedExecutor::CachedGearBytes(std::span<const int64_t> gears) const {
  if (gears.size() > static_cast<size_t>(kMaxDimensions)) return 0;
  Combo combo;
  combo.n = static_cast<int>(gears.size());
  std::copy(gears.begin(), gears.end(), combo.gear);
  MutexLock lock(&cache_->mu);
  const Cache::Slot* slot = cache_->table.load(std::memory_order_relaxed)->Find(combo);
  return slot != nullptr ? slot->exe->bytes() : 0;
}

absl::StatusOr<int64_t> GearedExecutor::PredictAddedBytes(std::span<const int64_t> gears) const {
  if (CachedGearBytes(gears) > 0) return 0;
  const absl::StatusOr<int64_t> predicted = PredictGearBytes(gears);
  if (!predicted.ok()) return predicted.status();
  const ArenaUsage arena = backend_->arena_usage();
  if (!ArenaInUse(arena)) return *predicted;
  // An arena in use: the predicted memory is the gear's arena need.
  const int64_t bound = std::max(
      arena.held_bytes, std::max(arena.largest_need_bytes, *predicted) * std::max(1, arena.slots));
  return std::max<int64_t>(0, bound - arena.held_bytes);
}

void GearedExecutor::OnReleased(std::span<const GraphKey> keys) {
  Cache& c = *cache_;
  Cache::Freeable freeable;
  {
    MutexLock lock(&c.mu);
    const Cache::Table* current = c.table.load(std::memory_order_relaxed);
    const std::unordered_set<GraphKey> gone(keys.begin(), keys.end());
    auto evicted = [&](const Cache::Slot& slot) { return gone.count(slot.key) != 0; };
    if (std::any_of(current->slots.begin(), current->slots.end(), evicted)) {
      auto next = std::make_unique<Cache::Table>();
      std::copy_if(current->slots.begin(), current->slots.end(), std::back_inserter(next->slots),
                   [&](const Cache::Slot& slot) { return !evicted(slot); });
      c.PublishLocked(std::move(next));
    }
    freeable = c.TakeFreeableLocked();
  }
}  // freeable's references drop here, outside mu

void GearedExecutor::TryReclaim() {
  Cache& c = *cache_;
  if (!c.mu.TryLock()) return;  // a writer is at it; it reclaims too
  Cache::Freeable freeable = c.TakeFreeableLocked();
  c.mu.Unlock();
}

absl::StatusOr<std::unique_ptr<GearedExecutor>> GearedExecutor::Create(AdaptiveGearRuntime* runtime,
                                                                       Backend* backend,
                                                                       ExecutorOptions options) {
  if (runtime == nullptr || backend == nullptr) {
    return InvalidField("executor", "null runtime or backend", "both");
  }
  if (absl::Status s = ValidateOutOfMemoryFallbacks(options.out_of_memory_fallback,
                                                    "ExecutorOptions.out_of_memory_fallback");
      !s.ok())
    return s;
  const ModelSignature& sig = backend->signature();
  const int dims = runtime->num_dimensions();
  std::vector<bool> bound(static_cast<size_t>(dims), false);
  auto check = [&](const TensorSpec& t, bool input) -> absl::Status {
    if (auto e = ElementBytes(t.dtype, t.name); !e.ok()) return e.status();
    for (const AxisBinding& b : t.bindings) {
      if (b.axis < 0 || b.axis >= static_cast<int>(t.shape.size())) {
        return InvalidField(Cat(t.name, ".bindings.axis"), Cat(b.axis),
                            Cat("an axis of a rank-", t.shape.size(), " tensor"));
      }
      if (b.dimension < 0 || b.dimension >= dims) {
        return InvalidField(Cat(t.name, ".bindings.dimension"), Cat(b.dimension),
                            Cat("a dimension of the runtime (", dims, ")"));
      }
      if (input) bound[static_cast<size_t>(b.dimension)] = true;
    }
    return absl::OkStatus();
  };
  for (const TensorSpec& t : sig.inputs) {
    if (auto s = check(t, true); !s.ok()) return s;
  }
  for (const TensorSpec& t : sig.outputs) {
    if (auto s = check(t, false); !s.ok()) return s;
  }
  for (int d = 0; d < dims; ++d) {
    if (!bound[static_cast<size_t>(d)]) {
      SnapshotRef snap = runtime->GetSnapshot();
      return InvalidField("signature", Cat("dimension ", snap->dimension(d).name),
                          "every runtime dimension bound by an input axis");
    }
  }
  return std::unique_ptr<GearedExecutor>(new GearedExecutor(runtime, backend, options));
}

absl::Status GearedExecutor::CheckTensors(std::span<const DLTensor> inputs,
                                          std::span<const DLTensor> outputs, int64_t* raw) const {
  const ModelSignature& sig = backend_->signature();
  const int dims = runtime_->num_dimensions();
  for (int d = 0; d < dims; ++d) raw[d] = -1;
  auto check = [&](const DLTensor& t, const TensorSpec& spec, bool input) -> absl::Status {
    if (t.ndim != static_cast<int>(spec.shape.size())) {
      return InvalidField(Cat(spec.name, ".ndim"), Cat(t.ndim), Cat("rank ", spec.shape.size()));
    }
    if (t.dtype.code != spec.dtype.code || t.dtype.bits != spec.dtype.bits ||
        t.dtype.lanes != spec.dtype.lanes) {
      return InvalidField(
          Cat(spec.name, ".dtype"),
          Cat("code ", static_cast<int>(t.dtype.code), " bits ", static_cast<int>(t.dtype.bits)),
          Cat("code ", static_cast<int>(spec.dtype.code), " bits ",
              static_cast<int>(spec.dtype.bits)));
    }
    if (t.data == nullptr) return InvalidField(Cat(spec.name, ".data"), "null", "a buffer");
    for (int a = 0; a < t.ndim; ++a) {
      const AxisBinding* binding = nullptr;
      for (const AxisBinding& b : spec.bindings) {
        if (b.axis == a) binding = &b;
      }
      if (binding == nullptr) {
        if (t.shape[a] != spec.shape[static_cast<size_t>(a)]) {
          return InvalidField(Cat(spec.name, ".shape[", a, "]"), Cat(t.shape[a]),
                              Cat("the model's fixed size ", spec.shape[static_cast<size_t>(a)]));
        }
        continue;
      }
      int64_t& r = raw[binding->dimension];
      if (t.shape[a] < 1)
        return InvalidField(Cat(spec.name, ".shape[", a, "]"), Cat(t.shape[a]), "a size >= 1");
      if (input && r < 0) {
        r = t.shape[a];
      } else if (t.shape[a] != r) {
        return InvalidField(Cat(spec.name, ".shape[", a, "]"), Cat(t.shape[a]),
                            Cat(r, ", the size the inputs give this dimension"));
      }
    }
    return absl::OkStatus();
  };
  if (inputs.size() != sig.inputs.size()) {
    return InvalidField("inputs", Cat(inputs.size(), " tensors"),
                        Cat(sig.inputs.size(), " tensors"));
  }
  if (outputs.size() != sig.outputs.size()) {
    return InvalidField("outputs", Cat(outputs.size(), " tensors"),
                        Cat(sig.outputs.size(), " tensors"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto s = check(inputs[i], sig.inputs[i], true); !s.ok()) return s;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (auto s = check(outputs[i], sig.outputs[i], false); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Executable>> GearedExecutor::Compile(
    std::span<const int64_t> gears) {
  // Predicted from the gears compiled before; scored only for a combination
  // not compiled before (a recompile would find its own point).
  absl::StatusOr<int64_t> predicted = absl::FailedPreconditionError("seen");
  {
    MutexLock lock(&cache_->model_mu);
    if (cache_->model.has_value() && !cache_->model->Observed(gears)) {
      predicted = cache_->model->Predict(gears);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<Executable>> exe;
  try {
    exe = backend_->Compile(gears);
  } catch (const std::bad_alloc&) {
    exe = absl::ResourceExhaustedError("out of memory (compile threw std::bad_alloc)");
  } catch (const std::exception& e) {
    exe = absl::InternalError(Cat("compile threw: ", e.what()));
  } catch (...) {
    exe = absl::InternalError("compile threw an unknown exception");
  }
  compile_nanos_.fetch_add(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count()),
      std::memory_order_relaxed);
  if (exe.ok() && *exe == nullptr) exe = absl::InternalError("compile returned no executable");
  if (!exe.ok()) {
    compile_failures_.fetch_add(1, std::memory_order_relaxed);
    return absl::Status(exe.status().code(),
                        Cat("compiling gears (", fmt::format("{}", fmt::join(gears, ",")),
                            ") failed: ", internal::Message(exe.status())));
  }
  compiles_.fetch_add(1, std::memory_order_relaxed);
  const int64_t gear_bytes = (*exe)->bytes() + (*exe)->arena_bytes();
  int64_t largest = largest_gear_bytes_.load(std::memory_order_relaxed);
  while (gear_bytes > largest && !largest_gear_bytes_.compare_exchange_weak(
                                     largest, gear_bytes, std::memory_order_relaxed)) {
  }
  if (predicted.ok()) {
    const double error = std::fabs(static_cast<double>(*predicted - gear_bytes)) /
                         static_cast<double>(std::max<int64_t>(gear_bytes, 1));
    const auto ppm = static_cast<uint64_t>(std::llround(std::min(error, 1e6) * 1e6));
    predictions_.fetch_add(1, std::memory_order_relaxed);
    prediction_error_ppm_sum_.fetch_add(ppm, std::memory_order_relaxed);
    uint64_t max = prediction_error_ppm_max_.load(std::memory_order_relaxed);
    while (ppm > max &&
           !prediction_error_ppm_max_.compare_exchange_weak(max, ppm, std::memory_order_relaxed)) {
    }
  }
  {
    MutexLock lock(&cache_->model_mu);
    if (cache_->model.has_value()) (void)cache_->model->Observe(gears, gear_bytes);
  }
  return exe;
}

absl::StatusOr<int64_t> GearedExecutor::PredictAloneBytes(std::span<const int64_t> gears) const {
  const absl::StatusOr<int64_t> predicted = PredictGearBytes(gears);
  if (!predicted.ok()) return predicted.status();
  return AloneBytesOf(*predicted, backend_->arena_usage());
}

bool GearedExecutor::PredictedOverBudget(std::span<const int64_t> gears, int64_t* adds,
                                         bool* never_fits) const {
  const int64_t budget = options_.graph_memory_budget_bytes;
  if (budget <= 0) return false;
  const absl::StatusOr<int64_t> predicted = PredictGearBytes(gears);
  if (!predicted.ok()) return false;  // not yet predictable: compile, check after
  const ArenaUsage arena = backend_->arena_usage();
  const int64_t pool = runtime_->pool().bytes();
  *never_fits = AloneBytesOf(*predicted, arena) > budget;
  if (!ArenaInUse(arena)) {
    *adds = *predicted;
    return pool + *predicted > budget;
  }
  // An arena in use: the predicted memory is the gear's arena need.
  const int64_t bound = std::max(
      arena.held_bytes, std::max(arena.largest_need_bytes, *predicted) * std::max(1, arena.slots));
  *adds = std::max<int64_t>(0, bound - arena.held_bytes);
  return pool + bound > budget;
}

std::vector<GraphKey> GearedExecutor::RegisterWithinBudget(const std::shared_ptr<Executable>& exe) {
  GraphResourcePool& pool = runtime_->pool();
  const int64_t budget = options_.graph_memory_budget_bytes;
  if (budget <= 0) {
    pool.Register(exe);
    return pool.ConsumeRecentKeys();
  }
  MutexLock lock(&cache_->budget_mu);
  // The arena at its bound once this gear is live: its need is registered
  // (it is compiled), so largest_need_bytes already counts it.
  const ArenaUsage arena = backend_->arena_usage();
  const int64_t arena_bound =
      std::max(arena.held_bytes,
               std::max(arena.largest_need_bytes, exe->arena_bytes()) * std::max(1, arena.slots));
  if (pool.bytes() + exe->bytes() + arena_bound > budget) {
    over_budget_.fetch_add(1, std::memory_order_relaxed);
    // What caching it would have added (its own bytes and the arena's growth).
    over_budget_bytes_.store(exe->bytes() + std::max<int64_t>(0, arena_bound - arena.held_bytes));
    return {};
  }
  over_budget_bytes_.store(0);
  pool.Register(exe);
  return pool.ConsumeRecentKeys();
}

absl::StatusOr<std::shared_ptr<Executable>> GearedExecutor::CompileOnce(
    std::span<const int64_t> gears) {
  Combo combo;
  combo.n = static_cast<int>(gears.size());
  std::copy(gears.begin(), gears.end(), combo.gear);
  Cache& c = *cache_;
  {
    MutexLock lock(&c.mu);
    while (true) {
      // Under mu the current table cannot be retired: safe without a pin.
      if (const Cache::Slot* slot = c.table.load(std::memory_order_relaxed)->Find(combo))
        return slot->exe;
      if (c.compiling.insert(combo).second) break;  // this thread compiles
      c.compiled.Wait(&c.mu);  // another thread compiles it; wait and look again
    }
  }
  absl::StatusOr<std::shared_ptr<Executable>> exe = Compile(gears);  // outside every lock
  GraphKey key = 0;
  GraphResourcePool& pool = runtime_->pool();
  if (exe.ok()) {
    // Empty when caching it would pass the budget: it serves this variant only.
    const std::vector<GraphKey> keys = RegisterWithinBudget(*exe);
    if (!keys.empty()) {
      key = keys.back();
      // The pool's handle: its last holder releases the executable.
      std::shared_ptr<GraphResource> handle = pool.Acquire(key);
      if (!runtime_->AttachCleanupKeys(gears, keys))
        key = 0;  // gear evicted meanwhile: don't cache
      if (handle == nullptr) key = 0;
      exe = std::static_pointer_cast<Executable>(handle != nullptr ? handle : *exe);
    }
  }
  Cache::Freeable freeable;
  {
    MutexLock lock(&c.mu);
    // Still in the pool: an eviction after this check finds the slot (its
    // listener takes mu), one before it removed the key already.
    if (key != 0 && pool.Acquire(key) != nullptr) {
      const Cache::Table* current = c.table.load(std::memory_order_relaxed);
      auto next = std::make_unique<Cache::Table>(*current);
      auto at = std::lower_bound(next->slots.begin(), next->slots.end(), combo,
                                 [](const Cache::Slot& s, const Combo& k) { return s.combo < k; });
      next->slots.insert(at, Cache::Slot{combo, key, *exe});
      c.PublishLocked(std::move(next));
    }
    c.compiling.erase(combo);  // failures are never cached
    c.compiled.SignalAll();
    freeable = c.TakeFreeableLocked();
  }
  return exe;
}

void GearedExecutor::ReportOutOfMemory(std::span<const int64_t> gears, OutOfMemoryStage stage,
                                       std::optional<OutOfMemoryFallback> served) {
  const absl::StatusOr<int64_t> predicted = PredictGearBytes(gears);
  runtime_->ReportOutOfMemory(
      gears, predicted.ok() ? std::optional<int64_t>(*predicted) : std::nullopt, stage, served);
}

absl::StatusOr<std::shared_ptr<Executable>> GearedExecutor::CompileAtExactSizes(
    const Variant& v, std::optional<Variant>* exact) {
  const int dims = runtime_->num_dimensions();
  *exact = v;
  (*exact)->eager = true;
  std::copy(v.extent, v.extent + dims, (*exact)->gear);
  return Compile({(*exact)->gear, static_cast<size_t>(dims)});
}

absl::Status GearedExecutor::RunOutOfMemoryFallback(const Variant& v, const GearSet& set,
                                                    RunVariant run, absl::Status failure,
                                                    std::optional<OutOfMemoryFallback>* served) {
  for (const OutOfMemoryFallback kind : options_.out_of_memory_fallback) {
    std::optional<absl::Status> s;
    switch (kind) {
      case OutOfMemoryFallback::kLarger:
        s = RunOnLargerGear(v, run);
        break;
      case OutOfMemoryFallback::kSplit:
        s = RunSplit(v, set, run);
        break;
      case OutOfMemoryFallback::kExact:
        s = RunAtExactSizes(v, run);
        break;
    }
    if (!s.has_value()) continue;  // impossible for this variant
    if (s->ok()) {
      oom_served_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
      *served = kind;
      return absl::OkStatus();
    }
    if (!IsOutOfMemory(*s)) return *std::move(s);
    failure = *std::move(s);  // out of memory again: the next kind
  }
  return failure;
}

std::optional<absl::Status> GearedExecutor::RunOnLargerGear(const Variant& v,
                                                            RunVariant run) const {
  const int dims = runtime_->num_dimensions();
  const Cache::Table* table = cache_->table.load(std::memory_order_seq_cst);  // pinned
  // The cached combination at or above v's gears with the least volume.
  const Cache::Slot* best = nullptr;
  double best_volume = 0.0;
  for (const Cache::Slot& slot : table->slots) {
    const int64_t* g = slot.combo.gear;
    if (std::equal(g, g + dims, v.gear)) continue;
    bool covers = true;
    double volume = 1.0;
    for (int d = 0; d < dims; ++d) {
      covers = covers && g[d] >= v.gear[d];
      volume *= static_cast<double>(g[d]);
    }
    if (covers && (best == nullptr || volume < best_volume)) {
      best = &slot;
      best_volume = volume;
    }
  }
  if (best == nullptr) return std::nullopt;
  Variant larger = v;
  std::copy(best->combo.gear, best->combo.gear + dims, larger.gear);
  return run(*best->exe, larger);
}

std::optional<absl::Status> GearedExecutor::RunSplit(const Variant& v, const GearSet& set,
                                                     RunVariant run) const {
  const int dims = runtime_->num_dimensions();
  const Cache::Table* table = cache_->table.load(std::memory_order_seq_cst);  // pinned
  for (int d = 0; d < dims; ++d) {
    if (!set.dimension(d).splittable) continue;
    // Cached gears of d below v's, the other dimensions' gears v's: ascending
    // (the table is sorted by combination, and only gear d differs).
    std::vector<std::pair<int64_t, Executable*>> below;
    for (const Cache::Slot& slot : table->slots) {
      const int64_t* g = slot.combo.gear;
      bool same_others = g[d] < v.gear[d];
      for (int e = 0; e < dims && same_others; ++e) same_others = e == d || g[e] == v.gear[e];
      if (same_others) below.emplace_back(g[d], slot.exe.get());
    }
    if (below.empty()) continue;
    // Chunks of the largest, the remainder on the smallest that holds it.
    Variant chunk = v;
    for (int64_t done = 0; done < v.extent[d];) {
      const int64_t left = v.extent[d] - done;
      auto fit = std::lower_bound(below.begin(), below.end(), left,
                                  [](const auto& b, int64_t n) { return b.first < n; });
      if (fit == below.end()) --fit;
      chunk.gear[d] = fit->first;
      chunk.extent[d] = std::min(left, fit->first);
      chunk.offset[d] = v.offset[d] + done;
      if (absl::Status s = run(*fit->second, chunk); !s.ok()) return s;
      done += chunk.extent[d];
    }
    return absl::OkStatus();
  }
  return std::nullopt;
}

std::optional<absl::Status> GearedExecutor::RunAtExactSizes(const Variant& v, RunVariant run) {
  const int dims = runtime_->num_dimensions();
  if (std::equal(v.gear, v.gear + dims, v.extent)) return std::nullopt;  // nothing smaller
  std::optional<Variant> exact;
  absl::StatusOr<std::shared_ptr<Executable>> exe = CompileAtExactSizes(v, &exact);
  if (!exe.ok()) return exe.status();
  return run(**exe, *exact);  // the executable is dropped after its run
}

absl::Status GearedExecutor::Run(std::span<const DLTensor> inputs,
                                 std::span<const DLTensor> outputs) {
  RequestCounters& counters = Counters();
  counters.requests.fetch_add(1, std::memory_order_relaxed);
  const ModelSignature& sig = backend_->signature();
  const int dims = runtime_->num_dimensions();
  int64_t raw[kMaxDimensions];
  absl::Status status = CheckTensors(inputs, outputs, raw);
  Plan plan;
  // Pinned for the whole request: the gear set and the executables table
  // (loaded once, after the pin) outlive every variant's run.
  SnapshotRef snap;
  if (status.ok()) {
    snap = runtime_->GetSnapshot();
    status = MakePlan(*snap, {raw, static_cast<size_t>(dims)}, &plan);
  }
  if (!status.ok()) {
    counters.failed.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  const bool host = backend_->device().device_type == kDLCPU;
  // Zero copy: one variant exactly at the request's size, compact tensors.
  bool zero_copy = host && plan.exact();
  for (const DLTensor& t : inputs)
    zero_copy = zero_copy && Compact(t) && t.device.device_type == kDLCPU;
  for (const DLTensor& t : outputs)
    zero_copy = zero_copy && Compact(t) && t.device.device_type == kDLCPU;

  // Sized even for zero copy: an out-of-memory fallback may stage.
  const ScratchLease lease(sig.inputs.size(), sig.outputs.size());
  std::vector<Staged>& in_stage = (*lease).in;
  std::vector<Staged>& out_stage = (*lease).out;
  std::vector<DLTensor>& in_views = (*lease).in_views;
  std::vector<DLTensor>& out_views = (*lease).out_views;
  // Runs `exe` for variant `run`: on the caller's tensors (zero copy, when
  // it runs at the request's sizes), else gathered into staging tensors at
  // the run's gear and scattered back.
  auto execute = [&](Executable& exe, const Variant& run) -> absl::Status {
    RunShape shape{dims, run.gear, run.extent};
    if (zero_copy && std::equal(run.gear, run.gear + dims, raw) &&
        std::equal(run.extent, run.extent + dims, raw))
      return exe.Run(inputs, outputs, shape);
    absl::Status s;
    for (size_t i = 0; i < sig.inputs.size() && s.ok(); ++i) {
      s = Stage(sig.inputs[i], run, /*zero=*/false, &in_stage[i]);
      if (s.ok()) {
        s = GatherChunk(inputs[i], sig.inputs[i].bindings, run, options_.pad_value,
                        &in_stage[i].tensor);
      }
      in_views[i] = in_stage[i].tensor;
    }
    for (size_t i = 0; i < sig.outputs.size() && s.ok(); ++i) {
      s = Stage(sig.outputs[i], run, /*zero=*/true, &out_stage[i]);
      out_views[i] = out_stage[i].tensor;
    }
    if (s.ok()) s = exe.Run(in_views, out_views, shape);
    for (size_t i = 0; i < sig.outputs.size() && s.ok(); ++i) {
      s = ScatterChunk(out_stage[i].tensor, sig.outputs[i].bindings, run, &outputs[i]);
    }
    return s;
  };
  const Cache::Table* table = cache_->table.load(std::memory_order_seq_cst);  // after the pin
  plan.ForEachVariant([&](const Variant& planned) {
    if (!status.ok()) return;
    const Variant* run_as = &planned;
    std::optional<Variant> exact;  // the over-budget refusal's variant
    const Variant& v = planned;
    const std::span<const int64_t> gears(v.gear, static_cast<size_t>(dims));
    const bool exact_sizes = std::equal(v.gear, v.gear + dims, v.extent);
    // A hit: the pinned table's reference, no lock, no reference count.
    // Else (eager, miss): a reference of our own for this variant.
    Executable* exe = nullptr;
    std::shared_ptr<Executable> owned;
    if (!v.eager) {
      Combo combo;
      combo.n = dims;
      std::copy(v.gear, v.gear + dims, combo.gear);
      if (const Cache::Slot* slot = table->Find(combo)) exe = slot->exe.get();
    }
    if (exe == nullptr) {
      if (v.eager) eager_.fetch_add(1, std::memory_order_relaxed);
      // Predicted past the budget: the gear is not compiled; the variant
      // runs at its exact sizes (or, already there, at the gear), uncached.
      int64_t adds = 0;
      bool never_fits = false;
      const bool refused = !v.eager && PredictedOverBudget(gears, &adds, &never_fits);
      if (refused) {
        predicted_over_budget_.fetch_add(1, std::memory_order_relaxed);
        // Pressure, as a refusal after the compile, unless no eviction could
        // make room for it (the gear alone passes the budget).
        if (!never_fits) over_budget_bytes_.store(adds);
      }
      absl::StatusOr<std::shared_ptr<Executable>> compiled =
          absl::FailedPreconditionError("not compiled");
      if (!refused || exact_sizes)
        compiled = v.eager || refused ? Compile(gears) : CompileOnce(gears);
      // Out of memory compiling the gear: the configured fallback serves it.
      if (IsOutOfMemory(compiled.status()) && !v.eager) {
        std::optional<OutOfMemoryFallback> served;
        status = RunOutOfMemoryFallback(v, *snap, execute, compiled.status(), &served);
        ReportOutOfMemory(gears, OutOfMemoryStage::kCompile, served);
        table = cache_->table.load(std::memory_order_seq_cst);
        return;
      }
      // Refused: the variant runs at its exact sizes (padding off, smaller),
      // compiled for it alone, cached nowhere.
      if (refused && !compiled.ok() && !v.eager && !exact_sizes) {
        compiled = CompileAtExactSizes(v, &exact);
        run_as = &*exact;
      }
      if (!compiled.ok()) {
        status = compiled.status();
        return;
      }
      owned = *std::move(compiled);
      exe = owned.get();
      // Later variants (a split's chunks share a gear) find it without a lock.
      table = cache_->table.load(std::memory_order_seq_cst);
    }
    status = execute(*exe, *run_as);
    // Out of memory running the gear (its workspace could not be allocated):
    // the same fallback as for a compile.
    if (IsOutOfMemory(status) && run_as == &planned && !v.eager) {
      owned.reset();  // an uncached executable's memory is given back first
      std::optional<OutOfMemoryFallback> served;
      status = RunOutOfMemoryFallback(v, *snap, execute, status, &served);
      ReportOutOfMemory(gears, OutOfMemoryStage::kRun, served);
    }
  });
  if (status.ok()) {
    if (zero_copy) counters.zero_copy.fetch_add(1, std::memory_order_relaxed);
    counters.variants.fetch_add(static_cast<uint64_t>(plan.num_variants()),
                                std::memory_order_relaxed);
    runtime_->RecordPlan(plan);
  } else {
    counters.failed.fetch_add(1, std::memory_order_relaxed);
  }
  snap.Reset();
  // Superseded tables wait for the requests that pinned them: the last of
  // those frees them (releasing evicted graphs) without waiting for a lock.
  if (cache_->retired_count.load(std::memory_order_relaxed) != 0) TryReclaim();
  return status;
}

GearedExecutor::RequestCounters& GearedExecutor::Counters() {
  return counters_[internal::ThisThreadIndex() % kCounterStripes];
}

ExecutorStats GearedExecutor::stats() const {
  ExecutorStats s;
  for (const RequestCounters& c : counters_) {
    s.requests += c.requests.load(std::memory_order_relaxed);
    s.failed_requests += c.failed.load(std::memory_order_relaxed);
    s.variants += c.variants.load(std::memory_order_relaxed);
    s.zero_copy_requests += c.zero_copy.load(std::memory_order_relaxed);
  }
  s.compiles = compiles_.load(std::memory_order_relaxed);
  s.compile_failures = compile_failures_.load(std::memory_order_relaxed);
  s.compile_seconds = static_cast<double>(compile_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  s.eager_variants = eager_.load(std::memory_order_relaxed);
  s.over_budget_runs = over_budget_.load(std::memory_order_relaxed);
  s.largest_gear_bytes = largest_gear_bytes_.load(std::memory_order_relaxed);
  s.out_of_memory_larger = oom_served_[static_cast<size_t>(OutOfMemoryFallback::kLarger)].load(
      std::memory_order_relaxed);
  s.out_of_memory_split =
      oom_served_[static_cast<size_t>(OutOfMemoryFallback::kSplit)].load(std::memory_order_relaxed);
  s.out_of_memory_exact =
      oom_served_[static_cast<size_t>(OutOfMemoryFallback::kExact)].load(std::memory_order_relaxed);
  s.out_of_memory_fallbacks =
      s.out_of_memory_larger + s.out_of_memory_split + s.out_of_memory_exact;
  s.predicted_over_budget_runs = predicted_over_budget_.load(std::memory_order_relaxed);
  s.memory_predictions = predictions_.load(std::memory_order_relaxed);
  if (s.memory_predictions > 0) {
    s.memory_prediction_mean_error =
        static_cast<double>(prediction_error_ppm_sum_.load(std::memory_order_relaxed)) * 1e-6 /
        static_cast<double>(s.memory_predictions);
    s.memory_prediction_max_error =
        static_cast<double>(prediction_error_ppm_max_.load(std::memory_order_relaxed)) * 1e-6;
  }
  return s;
}

size_t GearedExecutor::cached_executables() const {
  MutexLock lock(&cache_->mu);
  return cache_->table.load(std::memory_order_relaxed)->slots.size();
}

std::vector<GearMemory> GearedExecutor::cached_gear_memory() const {
  std::vector<GearMemory> out;
  MutexLock lock(&cache_->mu);
  for (const Cache::Slot& slot : cache_->table.load(std::memory_order_relaxed)->slots) {
    out.push_back({std::vector<int64_t>(slot.combo.gear, slot.combo.gear + slot.combo.n),
                   slot.exe->bytes(), slot.exe->arena_bytes()});
  }
  return out;
}

absl::StatusOr<int64_t> GearedExecutor::PredictGearBytes(std::span<const int64_t> gears) const {
  MutexLock lock(&cache_->model_mu);
  if (!cache_->model.has_value()) {
    return absl::FailedPreconditionError("memory model: the runtime has no valid dimension count");
  }
  return cache_->model->Predict(gears);
}

int64_t GearedExecutor::GearMemoryBytes() const {
  return runtime_->pool().bytes() + backend_->arena_usage().held_bytes;
}

absl::StatusOr<double> PoolBudgetMemoryProbe::UsageFraction() {
  if (budget_ <= 0) return absl::FailedPreconditionError("memory budget must be > 0 bytes");
  const GearedExecutor* executor = executor_.load();
  const int64_t refused = executor != nullptr ? executor->OverBudgetBytes() : 0;
  const int64_t held = executor != nullptr ? executor->GearMemoryBytes() : pool_->bytes();
  // Over budget reads as full: pressure, not nonsense.
  return std::min(1.0, static_cast<double>(held + refused) / static_cast<double>(budget_));
}

}  // namespace gearbox
