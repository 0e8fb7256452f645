#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <vector>

#include "gearbox/backends/cuda_graph.h"
#include "src/backends/cuda/device_arena.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {
namespace {

using internal::Cat;

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(Cat(what, ": ", cudaGetErrorString(e)));
}

// What every gear of the model shares: its signature and launch sequence.
struct Model {
  ModelSignature signature;
  CudaLaunchSequence launch;
  int device = 0;
};

// One execution slot: a stream and a device buffer. Its fields belong to the
// run that checked it out, alone, or to the arena (under its mu) while it is
// free: ownership passes with Checkout and Return, which a lock annotation
// cannot express.
struct DeviceSlot {
  int index = 0;
  cudaStream_t stream = nullptr;  // created at the slot's first checkout
  void* base = nullptr;
  int64_t held = 0;         // bytes at base
  uint64_t generation = 0;  // bumped at every allocation of base
};

// The backend's execution slots and what sizes them (device_arena.h): one
// slot per concurrent run, each holding the largest live gear's buffers at
// most. A run checks a slot out, uses its stream and buffer alone and
// returns it, so runs on different slots proceed at once.
// Thread-safety: mu guards the sizer, the slot list and the free slots;
// device calls on a free slot (a shrink) are made under it, those on a
// checked-out slot (its growth, capture, run) by its holder outside it.
class DeviceArena {
 public:
  explicit DeviceArena(int device) : device_(device) {}
  ~DeviceArena() {
    MutexLock lock(&mu_);
    for (auto& slot : slots_) {
      (void)ResizeSlot(*slot, 0);
      if (slot->stream != nullptr) (void)cudaStreamDestroy(slot->stream);
    }
  }

  // A gear that needs `bytes` per run compiled.
  void AddNeed(int64_t bytes) {
    MutexLock lock(&mu_);
    (void)sizer_.Add(bytes);
  }
  // A gear that needed `bytes` is released: free slots larger than the
  // largest gear left are reallocated at its size (or freed, when none is
  // left), so each holds at most the largest live gear's buffers.
  absl::Status RemoveNeed(int64_t bytes) {
    MutexLock lock(&mu_);
    if (!sizer_.Remove(bytes)) return absl::OkStatus();
    absl::Status status;
    for (int index : list_.free()) {
      DeviceSlot& slot = *slots_[static_cast<size_t>(index)];
      if (!internal::SlotShrinks(slot.held, sizer_.capacity())) continue;
      if (auto s = ResizeSlot(slot, sizer_.capacity()); !s.ok() && status.ok()) status = s;
    }
    return status;
  }

  // A slot whose buffer holds at least `need` bytes (grown to the arena's
  // capacity, or to `need` alone when that finds no memory), its stream
  // created; ResourceExhausted when neither allocation succeeds (the slot
  // is returned, empty). Give it back with Return.
  absl::StatusOr<DeviceSlot*> Checkout(int64_t need) {
    DeviceSlot* slot = nullptr;
    int64_t capacity = 0;
    {
      MutexLock lock(&mu_);
      bool created = false;
      const int index = list_.Checkout(&created);
      if (created) {
        slots_.push_back(std::make_unique<DeviceSlot>());
        slots_.back()->index = index;
      }
      slot = slots_[static_cast<size_t>(index)].get();
      capacity = sizer_.capacity();
    }
    absl::Status status = Prepare(*slot, need, capacity);  // outside mu: the slot is ours
    if (!status.ok()) {
      Return(slot);
      return status;
    }
    return slot;
  }
  // Gives the slot back; one larger than the largest live gear shrinks to it.
  void Return(DeviceSlot* slot) {
    MutexLock lock(&mu_);
    if (internal::SlotShrinks(slot->held, sizer_.capacity()))
      (void)ResizeSlot(*slot, sizer_.capacity());
    list_.Return(slot->index);
  }

  ArenaUsage usage() const {
    MutexLock lock(&mu_);
    return {held_.load(std::memory_order_relaxed), sizer_.largest_need(), list_.count()};
  }

 private:
  absl::Status Prepare(DeviceSlot& slot, int64_t need, int64_t capacity) {
    if (auto s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    if (slot.stream == nullptr) {
      if (auto s = Check(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking),
                         "cudaStreamCreate");
          !s.ok()) {
        return s;
      }
    }
    const int64_t grow = internal::SlotGrowBytes(slot.held, need, capacity);
    if (grow == 0) return absl::OkStatus();
    absl::Status s = ResizeSlot(slot, grow);
    if (!s.ok() && need < grow) s = ResizeSlot(slot, need);
    return s;
  }
  // Makes the slot's buffer `bytes` (0: none): the old one goes first (its
  // graphs are captured again before their next run on it), so the peak is
  // the larger of the two, not their sum.
  absl::Status ResizeSlot(DeviceSlot& slot, int64_t bytes) {
    if (slot.stream != nullptr) (void)cudaStreamSynchronize(slot.stream);
    if (slot.base != nullptr) (void)cudaFree(slot.base);
    slot.base = nullptr;
    held_.fetch_sub(slot.held, std::memory_order_relaxed);
    slot.held = 0;
    if (bytes == 0) return absl::OkStatus();
    const cudaError_t e = cudaMalloc(&slot.base, static_cast<size_t>(bytes));
    if (e != cudaSuccess) {
      slot.base = nullptr;
      return absl::ResourceExhaustedError(
          Cat("growing a CUDA graph arena slot to ", bytes, " bytes: ", cudaGetErrorString(e)));
    }
    slot.held = bytes;
    held_.fetch_add(bytes, std::memory_order_relaxed);
    ++slot.generation;
    return absl::OkStatus();
  }

  const int device_;
  mutable Mutex mu_;
  internal::ArenaSizer sizer_ ABSL_GUARDED_BY(mu_);
  internal::SlotList list_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<DeviceSlot>> slots_ ABSL_GUARDED_BY(mu_);  // by index
  // Bytes of every slot's buffer (written by whoever resizes a slot;
  // relaxed: an atomic counter, read for reports).
  std::atomic<int64_t> held_{0};
};

// One gear's graphs, one per slot it ran on, each captured against that
// slot's buffer; captured again after the slot's buffer moved (a new
// generation of the slot).
// Thread-safety: Run from any threads at once (each on its own slot); mu_
// guards the table of graphs. Release must not overlap a Run (the pool
// releases an executable once no request holds it).
class CudaGraphExecutable final : public Executable {
 public:
  CudaGraphExecutable(std::shared_ptr<const Model> model, std::shared_ptr<DeviceArena> arena,
                      std::span<const int64_t> gears)
      : model_(std::move(model)),
        arena_(std::move(arena)),
        gears_(gears.begin(), gears.end()),
        layout_(internal::LayoutAt(model_->signature, gears)) {}
  ~CudaGraphExecutable() override { (void)Release(); }

  // Registers the gear's need and captures its graph on a slot (which grows
  // to hold it): a compile that finds no device memory is ResourceExhausted.
  absl::Status Init() {
    arena_->AddNeed(layout_.total_bytes);
    added_.store(true);
    absl::StatusOr<DeviceSlot*> slot = arena_->Checkout(layout_.total_bytes);
    absl::Status status = slot.status();
    if (slot.ok()) {
      status = ExecFor(**slot).status();
      arena_->Return(*slot);
    }
    if (!status.ok()) (void)Release();
    return status;
  }

  int64_t bytes() const override {
    return 0;
  }  // the graph's own nodes; its tensors are the arena's
  int64_t arena_bytes() const override { return layout_.total_bytes; }

  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                   const RunShape& shape) override {
    if (!added_.load()) return absl::FailedPreconditionError("the CUDA graph was released");
    absl::StatusOr<DeviceSlot*> slot = arena_->Checkout(layout_.total_bytes);
    if (!slot.ok()) return slot.status();
    absl::Status status = RunOn(**slot, inputs, outputs, shape);
    arena_->Return(*slot);
    return status;
  }

  // Destroys the graphs and gives the gear's need back to the arena, which
  // shrinks to the largest gear left. Idempotent.
  absl::Status Release() override {
    std::vector<Captured> graphs;
    {
      MutexLock lock(&mu_);
      graphs.swap(captured_);
    }
    absl::Status status;
    for (const Captured& c : graphs) {
      if (c.exec == nullptr) continue;
      if (auto s = Check(cudaGraphExecDestroy(c.exec), "cudaGraphExecDestroy");
          !s.ok() && status.ok())
        status = s;
    }
    if (added_.exchange(false)) {
      if (auto s = arena_->RemoveNeed(layout_.total_bytes); !s.ok() && status.ok()) status = s;
    }
    return status;
  }

 private:
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;  // the slot's generation it was captured in
  };

  absl::Status RunOn(DeviceSlot& slot, std::span<const DLTensor> inputs,
                     std::span<const DLTensor> outputs, const RunShape& shape) {
    absl::StatusOr<cudaGraphExec_t> exec = ExecFor(slot);
    if (!exec.ok()) return exec.status();
    char* base = static_cast<char*>(slot.base);
    cudaStream_t stream = slot.stream;
    for (size_t i = 0; i < inputs.size() && i < layout_.input_offset.size(); ++i) {
      const char* src = static_cast<const char*>(inputs[i].data) + inputs[i].byte_offset;
      if (auto s = Check(cudaMemcpyAsync(base + layout_.input_offset[i], src,
                                         static_cast<size_t>(layout_.input_bytes[i]),
                                         cudaMemcpyHostToDevice, stream),
                         "copying an input to the device");
          !s.ok()) {
        return s;
      }
    }
    if (auto s =
            Check(cudaMemcpyAsync(base + layout_.valid_offset, shape.extent,
                                  gears_.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream),
                  "copying the valid sizes");
        !s.ok()) {
      return s;
    }
    if (auto s = Check(cudaGraphLaunch(*exec, stream), "cudaGraphLaunch"); !s.ok()) return s;
    for (size_t i = 0; i < outputs.size() && i < layout_.output_offset.size(); ++i) {
      char* dst = static_cast<char*>(outputs[i].data) + outputs[i].byte_offset;
      if (auto s = Check(cudaMemcpyAsync(dst, base + layout_.output_offset[i],
                                         static_cast<size_t>(layout_.output_bytes[i]),
                                         cudaMemcpyDeviceToHost, stream),
                         "copying an output from the device");
          !s.ok()) {
        return s;
      }
    }
    return Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  // The graph for `slot` (checked out by the caller), captured now when it
  // has none or one from an older generation of the slot's buffer.
  absl::StatusOr<cudaGraphExec_t> ExecFor(DeviceSlot& slot) {
    const size_t index = static_cast<size_t>(slot.index);
    cudaGraphExec_t stale = nullptr;
    {
      MutexLock lock(&mu_);
      if (index < captured_.size() && captured_[index].exec != nullptr) {
        if (captured_[index].generation == slot.generation) return captured_[index].exec;
        stale = captured_[index].exec;
        captured_[index].exec = nullptr;
      }
    }
    if (stale != nullptr) (void)cudaGraphExecDestroy(stale);
    absl::StatusOr<cudaGraphExec_t> exec = Capture(slot);  // outside mu_: the slot is ours
    if (!exec.ok()) return exec;
    MutexLock lock(&mu_);
    if (captured_.size() <= index) captured_.resize(index + 1);
    captured_[index] = Captured{*exec, slot.generation};
    return exec;
  }

  // Captures the launch sequence on the slot's stream against its base.
  absl::StatusOr<cudaGraphExec_t> Capture(DeviceSlot& slot) {
    char* base = static_cast<char*>(slot.base);
    std::vector<void*> in, out;
    for (int64_t off : layout_.input_offset) in.push_back(base + off);
    for (int64_t off : layout_.output_offset) out.push_back(base + off);
    auto* valid = reinterpret_cast<int64_t*>(base + layout_.valid_offset);
    cudaGraph_t graph = nullptr;
    if (auto s = Check(cudaStreamBeginCapture(slot.stream, cudaStreamCaptureModeThreadLocal),
                       "cudaStreamBeginCapture");
        !s.ok()) {
      return s;
    }
    absl::Status launched = model_->launch(slot.stream, gears_, in, out, valid);
    const absl::Status ended =
        Check(cudaStreamEndCapture(slot.stream, &graph), "cudaStreamEndCapture");
    if (!launched.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return launched;
    }
    if (!ended.ok()) return ended;
    cudaGraphExec_t exec = nullptr;
    const absl::Status inst = Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    if (!inst.ok()) return inst;
    return exec;
  }

  const std::shared_ptr<const Model> model_;
  const std::shared_ptr<DeviceArena> arena_;
  const std::vector<int64_t> gears_;
  const internal::ArenaLayout layout_;
  Mutex mu_;
  std::vector<Captured> captured_ ABSL_GUARDED_BY(mu_);  // by slot index
  std::atomic<bool> added_{false};                       // its need is counted in the arena's sizer
};

class CudaGraphBackend final : public Backend {
 public:
  explicit CudaGraphBackend(CudaGraphOptions o)
      : model_(std::make_shared<const Model>(
            Model{std::move(o.signature), std::move(o.launch), o.device})),
        arena_(std::make_shared<DeviceArena>(model_->device)) {}
  std::string_view name() const override { return "cuda_graph"; }
  const ModelSignature& signature() const override { return model_->signature; }
  DLDevice device() const override { return {kDLCPU, 0}; }  // host tensors in and out
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears) override {
    auto exe = std::make_shared<CudaGraphExecutable>(model_, arena_, gears);
    if (auto s = exe->Init(); !s.ok()) return s;
    return std::shared_ptr<Executable>(std::move(exe));
  }
  ArenaUsage arena_usage() const override { return arena_->usage(); }

 private:
  const std::shared_ptr<const Model> model_;
  const std::shared_ptr<DeviceArena> arena_;  // executables share it, and may outlive the backend
};

}  // namespace

// The built-in model's kernels (cuda_graph_kernels.cu).
cudaError_t LaunchMaskedAffineMeanKernels(cudaStream_t stream, const int64_t* gears,
                                          void* const* inputs, void* const* outputs,
                                          const int64_t* valid, int batch_dim, int seq_dim,
                                          int64_t hidden);

bool CudaDeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaGraphBackend(CudaGraphOptions options) {
  if (!options.launch) return internal::InvalidField("launch", "empty", "a launch sequence");
  if (!CudaDeviceAvailable()) return absl::UnavailableError("no CUDA device is available");
  return std::unique_ptr<Backend>(new CudaGraphBackend(std::move(options)));
}

absl::Status RegisterCudaGraphBackend(BackendRegistry& registry) {
  return registry.Register(
      "cuda_graph", [](const BackendParams& params) -> absl::StatusOr<std::unique_ptr<Backend>> {
        auto hidden = IntParam(params, "hidden", 64, 1, 65536);
        auto batch = IntParam(params, "batch_dim", 0, -1, kMaxDimensions - 1);
        auto seq = IntParam(params, "seq_dim", 1, 0, kMaxDimensions - 1);
        auto device = IntParam(params, "device", 0, 0, 1024);
        for (const auto* s : {&hidden, &batch, &seq, &device}) {
          if (!s->ok()) return s->status();
        }
        CudaGraphOptions o;
        o.device = static_cast<int>(*device);
        TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, *hidden}, {}};
        if (*batch >= 0) x.bindings.push_back({0, static_cast<int>(*batch)});
        x.bindings.push_back({1, static_cast<int>(*seq)});
        TensorSpec y = x;
        y.name = "y";
        o.signature.inputs = {x};
        o.signature.outputs = {y};
        const int b = static_cast<int>(*batch), s = static_cast<int>(*seq);
        const int64_t h = *hidden;
        o.launch = [b, s, h](cudaStream_t stream, std::span<const int64_t> gears,
                             std::span<void* const> in, std::span<void* const> out,
                             const int64_t* valid) {
          return Check(LaunchMaskedAffineMeanKernels(stream, gears.data(), in.data(), out.data(),
                                                     valid, b, s, h),
                       "launching the built-in kernels");
        };
        return MakeCudaGraphBackend(std::move(o));
      });
}

absl::StatusOr<double> CudaMemoryProbe::UsageFraction() {
  if (auto s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
  size_t free_bytes = 0, total = 0;
  if (auto s = Check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo"); !s.ok()) return s;
  if (total == 0) return absl::InternalError("cudaMemGetInfo reported 0 bytes in all");
  return 1.0 - static_cast<double>(free_bytes) / static_cast<double>(total);
}

}  // namespace gearbox
