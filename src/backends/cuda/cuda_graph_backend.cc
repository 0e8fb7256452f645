#include <cuda_runtime_api.h>

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

// The backend's one execution slot: a stream, and the device arena every
// gear's graph is captured against (device_arena.h). Runs of all gears take
// turns on it (mu), so one arena of the largest live gear serves them all.
class DeviceArena {
 public:
  explicit DeviceArena(int device) : device_(device) {}
  ~DeviceArena() {
    MutexLock lock(&mu);
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    if (base != nullptr) (void)cudaFree(base);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  // The stream, created on first use.
  absl::Status EnsureStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (stream != nullptr) return absl::OkStatus();
    if (auto s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    return Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  // Makes `base` hold sizer.capacity() bytes: the old arena goes first (its
  // graphs are captured again before their next run), so the peak is the
  // larger of the two, not their sum.
  absl::Status ResizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (auto s = EnsureStreamLocked(); !s.ok()) return s;
    if (auto s = Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !s.ok()) return s;
    if (base != nullptr) (void)cudaFree(base);
    base = nullptr;
    held = 0;
    if (sizer.capacity() == 0) return absl::OkStatus();
    const cudaError_t e = cudaMalloc(&base, static_cast<size_t>(sizer.capacity()));
    if (e != cudaSuccess) {
      base = nullptr;
      return absl::ResourceExhaustedError(Cat("growing the CUDA graph arena to ", sizer.capacity(),
                                              " bytes: ", cudaGetErrorString(e)));
    }
    held = sizer.capacity();
    ++generation;
    return absl::OkStatus();
  }
  // An arena of sizer.capacity() bytes (one that a failed resize left
  // missing is allocated again).
  absl::Status EnsureHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return held == sizer.capacity() ? absl::OkStatus() : ResizeLocked();
  }

  Mutex mu;
  cudaStream_t stream ABSL_GUARDED_BY(mu) = nullptr;
  void* base ABSL_GUARDED_BY(mu) = nullptr;
  int64_t held ABSL_GUARDED_BY(mu) = 0;  // bytes at base
  // Bumped at every allocation of base: a graph captured in an older one
  // points at freed memory and is captured again before it runs.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  internal::ArenaSizer sizer ABSL_GUARDED_BY(mu);

 private:
  const int device_;
};

// One gear's graph, captured against the arena; captured again after the
// arena moved (a new generation).
class CudaGraphExecutable final : public Executable {
 public:
  CudaGraphExecutable(std::shared_ptr<const Model> model, std::shared_ptr<DeviceArena> arena,
                      std::span<const int64_t> gears)
      : model_(std::move(model)),
        arena_(std::move(arena)),
        gears_(gears.begin(), gears.end()),
        layout_(internal::LayoutAt(model_->signature, gears)) {}
  ~CudaGraphExecutable() override { (void)Release(); }

  absl::Status Init() {
    MutexLock lock(&arena_->mu);
    if (arena_->sizer.Add(layout_.total_bytes)) {
      if (auto s = arena_->ResizeLocked(); !s.ok()) {
        // Back to the arena the live gears had (or none, if even that fails).
        if (arena_->sizer.Remove(layout_.total_bytes)) (void)arena_->ResizeLocked();
        return s;
      }
    }
    added_ = true;
    if (auto s = arena_->EnsureHeldLocked(); !s.ok()) return s;
    return CaptureLocked();
  }

  int64_t bytes() const override {
    return 0;
  }  // the graph's own nodes; its tensors are the arena's
  int64_t arena_bytes() const override { return layout_.total_bytes; }

  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                   const RunShape& shape) override {
    MutexLock lock(&arena_->mu);  // one slot: runs of every gear take turns
    if (!added_) return absl::FailedPreconditionError("the CUDA graph was released");
    if (auto s = arena_->EnsureHeldLocked(); !s.ok()) return s;  // after a failed resize
    if (exec_ == nullptr || generation_ != arena_->generation) {
      if (auto s = CaptureLocked(); !s.ok()) return s;
    }
    char* base = static_cast<char*>(arena_->base);
    cudaStream_t stream = arena_->stream;
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
    if (auto s = Check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch"); !s.ok()) return s;
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

  // Destroys the graph and gives its need back to the arena, which shrinks
  // to the largest gear left. Idempotent.
  absl::Status Release() override {
    MutexLock lock(&arena_->mu);
    absl::Status status;
    if (exec_ != nullptr) status = Check(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy");
    exec_ = nullptr;
    if (added_) {
      added_ = false;
      if (arena_->sizer.Remove(layout_.total_bytes)) {
        if (auto s = arena_->ResizeLocked(); !s.ok() && status.ok()) status = s;
      }
    }
    return status;
  }

 private:
  // Captures the launch sequence on the arena's stream against the arena's
  // current base (replacing any older graph of this gear).
  absl::Status CaptureLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(arena_->mu) {
    if (auto s = arena_->EnsureStreamLocked(); !s.ok()) return s;
    char* base = static_cast<char*>(arena_->base);
    std::vector<void*> in, out;
    for (int64_t off : layout_.input_offset) in.push_back(base + off);
    for (int64_t off : layout_.output_offset) out.push_back(base + off);
    auto* valid = reinterpret_cast<int64_t*>(base + layout_.valid_offset);
    cudaGraph_t graph = nullptr;
    if (auto s = Check(cudaStreamBeginCapture(arena_->stream, cudaStreamCaptureModeThreadLocal),
                       "cudaStreamBeginCapture");
        !s.ok()) {
      return s;
    }
    absl::Status launched = model_->launch(arena_->stream, gears_, in, out, valid);
    const absl::Status ended =
        Check(cudaStreamEndCapture(arena_->stream, &graph), "cudaStreamEndCapture");
    if (!launched.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return launched;
    }
    if (!ended.ok()) return ended;
    cudaGraphExec_t exec = nullptr;
    const absl::Status inst = Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    if (!inst.ok()) return inst;
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    exec_ = exec;
    generation_ = arena_->generation;
    return absl::OkStatus();
  }

  const std::shared_ptr<const Model> model_;
  const std::shared_ptr<DeviceArena> arena_;
  const std::vector<int64_t> gears_;
  const internal::ArenaLayout layout_;
  // Under arena_->mu.
  cudaGraphExec_t exec_ = nullptr;
  uint64_t generation_ = 0;  // the arena's generation exec_ was captured in
  bool added_ = false;       // its need is counted in the arena's sizer
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
  ArenaUsage arena_usage() const override {
    MutexLock lock(&arena_->mu);
    return {arena_->held, arena_->sizer.largest_need(), arena_->stream != nullptr ? 1 : 0};
  }

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
