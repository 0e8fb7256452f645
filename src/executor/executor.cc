#include "gearbox/executor.h"

#include <chrono>
#include <cstring>

#include "fmt/ranges.h"
#include "src/common/errors.h"

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

bool Compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// A host buffer with a DLTensor view, for staging a variant's chunk.
struct Staged {
  std::vector<std::byte> bytes;
  std::vector<int64_t> shape;
  DLTensor tensor{};
};

absl::Status Stage(const TensorSpec& spec, const Variant& v, Staged* out) {
  out->shape = spec.shape;
  for (const AxisBinding& b : spec.bindings) out->shape[b.axis] = v.gear[b.dimension];
  int64_t elements = 1;
  for (int64_t s : out->shape) elements *= s;
  auto elem = ElementBytes(spec.dtype, spec.name);
  if (!elem.ok()) return elem.status();
  out->bytes.assign(static_cast<size_t>(elements * *elem), std::byte{0});
  out->tensor = DLTensor{out->bytes.data(), {kDLCPU, 0}, static_cast<int>(out->shape.size()),
                         spec.dtype, out->shape.data(), nullptr, 0};
  return absl::OkStatus();
}

}  // namespace

// Single-flight compile cache: gear combination -> pool key.
// Thread-safety: mu_ guards entries_; compiles run outside it; waiters for
// an in-flight compile sleep on compiled_.
class GearedExecutor::Cache {
 public:
  struct Entry {
    bool compiling = true;
    GraphKey key = 0;
  };
  Mutex mu;
  CondVar compiled;
  std::map<Combo, Entry> entries ABSL_GUARDED_BY(mu);
};

GearedExecutor::GearedExecutor(AdaptiveGearRuntime* runtime, Backend* backend,
                               ExecutorOptions options)
    : runtime_(runtime), backend_(backend), options_(options), cache_(std::make_unique<Cache>()) {}

GearedExecutor::~GearedExecutor() = default;

absl::StatusOr<std::unique_ptr<GearedExecutor>> GearedExecutor::Create(AdaptiveGearRuntime* runtime,
                                                                      Backend* backend,
                                                                      ExecutorOptions options) {
  if (runtime == nullptr || backend == nullptr) {
    return InvalidField("executor", "null runtime or backend", "both");
  }
  const ModelSignature& sig = backend->signature();
  const int dims = runtime->num_dimensions();
  std::vector<bool> bound(static_cast<size_t>(dims), false);
  auto check = [&](const TensorSpec& t, bool input) -> absl::Status {
    if (auto e = ElementBytes(t.dtype, t.name); !e.ok()) return e.status();
    for (const AxisBinding& b : t.bindings) {
      if (b.axis < 0 || b.axis >= static_cast<int>(t.shape.size())) {
        return InvalidField(Cat(t.name, ".bindings.axis"), Cat(b.axis), Cat("an axis of a rank-", t.shape.size(), " tensor"));
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
    if (t.dtype.code != spec.dtype.code || t.dtype.bits != spec.dtype.bits || t.dtype.lanes != spec.dtype.lanes) {
      return InvalidField(Cat(spec.name, ".dtype"),
                          Cat("code ", static_cast<int>(t.dtype.code), " bits ", static_cast<int>(t.dtype.bits)),
                          Cat("code ", static_cast<int>(spec.dtype.code), " bits ", static_cast<int>(spec.dtype.bits)));
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
      if (t.shape[a] < 1) return InvalidField(Cat(spec.name, ".shape[", a, "]"), Cat(t.shape[a]), "a size >= 1");
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
    return InvalidField("inputs", Cat(inputs.size(), " tensors"), Cat(sig.inputs.size(), " tensors"));
  }
  if (outputs.size() != sig.outputs.size()) {
    return InvalidField("outputs", Cat(outputs.size(), " tensors"), Cat(sig.outputs.size(), " tensors"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto s = check(inputs[i], sig.inputs[i], true); !s.ok()) return s;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (auto s = check(outputs[i], sig.outputs[i], false); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Executable>> GearedExecutor::Acquire(std::span<const int64_t> gears,
                                                                   bool eager) {
  auto compile = [&]() -> absl::StatusOr<std::shared_ptr<Executable>> {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<Executable>> exe;
    try {
      exe = backend_->Compile(gears);
    } catch (const std::exception& e) {
      exe = absl::InternalError(Cat("compile threw: ", e.what()));
    } catch (...) {
      exe = absl::InternalError("compile threw an unknown exception");
    }
    compile_nanos_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                       std::chrono::steady_clock::now() - start)
                                                       .count()),
                             std::memory_order_relaxed);
    if (exe.ok() && *exe == nullptr) exe = absl::InternalError("compile returned no executable");
    if (!exe.ok()) {
      compile_failures_.fetch_add(1, std::memory_order_relaxed);
      return absl::Status(exe.status().code(),
                          Cat("compiling gears (", fmt::format("{}", fmt::join(gears, ",")), ") failed: ",
                              internal::Message(exe.status())));
    }
    compiles_.fetch_add(1, std::memory_order_relaxed);
    return exe;
  };
  if (eager) {
    eager_.fetch_add(1, std::memory_order_relaxed);
    return compile();
  }
  Combo combo;
  combo.n = static_cast<int>(gears.size());
  std::copy(gears.begin(), gears.end(), combo.gear);
  Cache& c = *cache_;
  c.mu.Lock();
  while (true) {
    auto it = c.entries.find(combo);
    if (it == c.entries.end()) break;  // miss: this thread compiles
    if (it->second.compiling) {
      c.compiled.Wait(&c.mu);  // another thread compiles it; wait and look again
      continue;
    }
    const GraphKey key = it->second.key;
    c.mu.Unlock();
    if (auto held = runtime_->pool().Acquire(key)) return std::static_pointer_cast<Executable>(held);
    c.mu.Lock();  // evicted since: forget it and compile again
    auto again = c.entries.find(combo);
    if (again != c.entries.end() && !again->second.compiling && again->second.key == key) {
      c.entries.erase(again);
    }
  }
  c.entries.emplace(combo, Cache::Entry{});
  c.mu.Unlock();

  absl::StatusOr<std::shared_ptr<Executable>> exe = compile();  // outside every lock
  GraphKey key = 0;
  if (exe.ok()) {
    GraphResourcePool& pool = runtime_->pool();
    pool.Register(*exe);
    const std::vector<GraphKey> keys = pool.ConsumeRecentKeys();
    key = keys.empty() ? 0 : keys.back();
    // The pool's handle: its last holder releases the executable.
    std::shared_ptr<GraphResource> handle = pool.Acquire(key);
    if (!runtime_->AttachCleanupKeys(gears, keys)) key = 0;  // gear evicted meanwhile: don't cache
    exe = std::static_pointer_cast<Executable>(handle != nullptr ? handle : *exe);
  }
  c.mu.Lock();
  if (key != 0) {
    c.entries[combo] = Cache::Entry{false, key};
  } else {
    c.entries.erase(combo);  // failures are never cached
  }
  c.compiled.SignalAll();
  c.mu.Unlock();
  return exe;
}

absl::Status GearedExecutor::Run(std::span<const DLTensor> inputs,
                                 std::span<const DLTensor> outputs) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  const ModelSignature& sig = backend_->signature();
  const int dims = runtime_->num_dimensions();
  int64_t raw[kMaxDimensions];
  absl::Status status = CheckTensors(inputs, outputs, raw);
  Plan plan;
  if (status.ok()) {
    SnapshotRef snap = runtime_->GetSnapshot();
    status = MakePlan(*snap, {raw, static_cast<size_t>(dims)}, &plan);
  }
  if (!status.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  const bool host = backend_->device().device_type == kDLCPU;
  // Zero copy: one variant exactly at the request's size, compact tensors.
  bool zero_copy = host && plan.exact();
  for (const DLTensor& t : inputs) zero_copy = zero_copy && Compact(t) && t.device.device_type == kDLCPU;
  for (const DLTensor& t : outputs) zero_copy = zero_copy && Compact(t) && t.device.device_type == kDLCPU;

  std::vector<Staged> in_stage(zero_copy ? 0 : sig.inputs.size());
  std::vector<Staged> out_stage(zero_copy ? 0 : sig.outputs.size());
  std::vector<DLTensor> in_views(sig.inputs.size()), out_views(sig.outputs.size());
  plan.ForEachVariant([&](const Variant& v) {
    if (!status.ok()) return;
    const std::span<const int64_t> gears(v.gear, static_cast<size_t>(dims));
    absl::StatusOr<std::shared_ptr<Executable>> exe = Acquire(gears, v.eager);
    if (!exe.ok()) {
      status = exe.status();
      return;
    }
    RunShape shape{dims, v.gear, v.extent};
    if (zero_copy) {
      status = (*exe)->Run(inputs, outputs, shape);
      return;
    }
    for (size_t i = 0; i < sig.inputs.size() && status.ok(); ++i) {
      status = Stage(sig.inputs[i], v, &in_stage[i]);
      if (status.ok()) {
        status = GatherChunk(inputs[i], sig.inputs[i].bindings, v, options_.pad_value, &in_stage[i].tensor);
      }
      in_views[i] = in_stage[i].tensor;
    }
    for (size_t i = 0; i < sig.outputs.size() && status.ok(); ++i) {
      status = Stage(sig.outputs[i], v, &out_stage[i]);
      out_views[i] = out_stage[i].tensor;
    }
    if (status.ok()) status = (*exe)->Run(in_views, out_views, shape);
    for (size_t i = 0; i < sig.outputs.size() && status.ok(); ++i) {
      status = ScatterChunk(out_stage[i].tensor, sig.outputs[i].bindings, v, &outputs[i]);
    }
  });  // executables are held only while their variant runs
  if (!status.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  if (zero_copy) zero_copy_.fetch_add(1, std::memory_order_relaxed);
  variants_.fetch_add(static_cast<uint64_t>(plan.num_variants()), std::memory_order_relaxed);
  runtime_->RecordPlan(plan);
  return absl::OkStatus();
}

ExecutorStats GearedExecutor::stats() const {
  ExecutorStats s;
  s.requests = requests_.load(std::memory_order_relaxed);
  s.failed_requests = failed_.load(std::memory_order_relaxed);
  s.variants = variants_.load(std::memory_order_relaxed);
  s.zero_copy_requests = zero_copy_.load(std::memory_order_relaxed);
  s.compiles = compiles_.load(std::memory_order_relaxed);
  s.compile_failures = compile_failures_.load(std::memory_order_relaxed);
  s.compile_seconds = static_cast<double>(compile_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  s.eager_variants = eager_.load(std::memory_order_relaxed);
  return s;
}

size_t GearedExecutor::cached_executables() const {
  MutexLock lock(&cache_->mu);
  return cache_->entries.size();
}

absl::StatusOr<double> PoolBudgetMemoryProbe::UsageFraction() {
  if (budget_ <= 0) return absl::FailedPreconditionError("memory budget must be > 0 bytes");
  // Over budget reads as full: pressure, not nonsense.
  return std::min(1.0, static_cast<double>(pool_->bytes()) / static_cast<double>(budget_));
}

}  // namespace gearbox
