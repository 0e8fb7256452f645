#include <cuda_runtime_api.h>

#include "gearbox/backends/cuda_graph.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {
namespace {

using internal::Cat;

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(Cat(what, ": ", cudaGetErrorString(e)));
}

int64_t TensorBytes(const TensorSpec& spec, std::span<const int64_t> gears) {
  int64_t n = spec.dtype.bits / 8;
  for (size_t a = 0; a < spec.shape.size(); ++a) {
    int64_t size = spec.shape[a];
    for (const AxisBinding& b : spec.bindings) {
      if (b.axis == static_cast<int>(a)) size = gears[static_cast<size_t>(b.dimension)];
    }
    n *= size;
  }
  return n;
}

class CudaGraphExecutable final : public Executable {
 public:
  ~CudaGraphExecutable() override { (void)Release(); }

  absl::Status Init(const CudaGraphOptions& o, std::span<const int64_t> gears) {
    device_ = o.device;
    if (auto s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    if (auto s =
            Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    auto alloc = [&](int64_t bytes, void** p) {
      bytes_ += bytes;
      return Check(cudaMalloc(p, static_cast<size_t>(std::max<int64_t>(bytes, 1))), "cudaMalloc");
    };
    for (const TensorSpec& t : o.signature.inputs) {
      in_bytes_.push_back(TensorBytes(t, gears));
      if (auto s = alloc(in_bytes_.back(), &in_.emplace_back()); !s.ok()) return s;
    }
    for (const TensorSpec& t : o.signature.outputs) {
      out_bytes_.push_back(TensorBytes(t, gears));
      if (auto s = alloc(out_bytes_.back(), &out_.emplace_back()); !s.ok()) return s;
    }
    dims_ = gears.size();
    if (auto s =
            alloc(static_cast<int64_t>(dims_ * sizeof(int64_t)), reinterpret_cast<void**>(&valid_));
        !s.ok()) {
      return s;
    }
    cudaGraph_t graph = nullptr;
    if (auto s = Check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                       "cudaStreamBeginCapture");
        !s.ok()) {
      return s;
    }
    absl::Status launched = o.launch(stream_, gears, in_, out_, valid_);
    const absl::Status ended = Check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    if (!launched.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return launched;
    }
    if (!ended.ok()) return ended;
    const absl::Status inst = Check(cudaGraphInstantiate(&exec_, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    return inst;
  }

  int64_t bytes() const override { return bytes_; }

  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                   const RunShape& shape) override {
    MutexLock lock(&mu_);  // one graph instance: runs of this gear take turns
    if (exec_ == nullptr) return absl::FailedPreconditionError("the CUDA graph was released");
    if (auto s = Check(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    for (size_t i = 0; i < inputs.size() && i < in_.size(); ++i) {
      const char* src = static_cast<const char*>(inputs[i].data) + inputs[i].byte_offset;
      if (auto s = Check(cudaMemcpyAsync(in_[i], src, static_cast<size_t>(in_bytes_[i]),
                                         cudaMemcpyHostToDevice, stream_),
                         "copying an input to the device");
          !s.ok()) {
        return s;
      }
    }
    if (auto s = Check(cudaMemcpyAsync(valid_, shape.extent, dims_ * sizeof(int64_t),
                                       cudaMemcpyHostToDevice, stream_),
                       "copying the valid sizes");
        !s.ok()) {
      return s;
    }
    if (auto s = Check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); !s.ok()) return s;
    for (size_t i = 0; i < outputs.size() && i < out_.size(); ++i) {
      char* dst = static_cast<char*>(outputs[i].data) + outputs[i].byte_offset;
      if (auto s = Check(cudaMemcpyAsync(dst, out_[i], static_cast<size_t>(out_bytes_[i]),
                                         cudaMemcpyDeviceToHost, stream_),
                         "copying an output from the device");
          !s.ok()) {
        return s;
      }
    }
    return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::Status Release() override {
    MutexLock lock(&mu_);
    absl::Status status;
    auto note = [&](cudaError_t e, const char* what) {
      if (status.ok()) status = Check(e, what);
    };
    if (stream_ != nullptr) note(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (exec_ != nullptr) note(cudaGraphExecDestroy(exec_), "cudaGraphExecDestroy");
    exec_ = nullptr;
    for (void* p : in_) note(cudaFree(p), "cudaFree");
    for (void* p : out_) note(cudaFree(p), "cudaFree");
    if (valid_ != nullptr) note(cudaFree(valid_), "cudaFree");
    in_.clear();
    out_.clear();
    valid_ = nullptr;
    if (stream_ != nullptr) note(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    stream_ = nullptr;
    return status;
  }

 private:
  Mutex mu_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<void*> in_, out_;
  std::vector<int64_t> in_bytes_, out_bytes_;
  int64_t* valid_ = nullptr;
  size_t dims_ = 0;
  int64_t bytes_ = 0;
};

class CudaGraphBackend final : public Backend {
 public:
  explicit CudaGraphBackend(CudaGraphOptions o) : options_(std::move(o)) {}
  std::string_view name() const override { return "cuda_graph"; }
  const ModelSignature& signature() const override { return options_.signature; }
  DLDevice device() const override { return {kDLCPU, 0}; }  // host tensors in and out
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears) override {
    auto exe = std::make_shared<CudaGraphExecutable>();
    if (auto s = exe->Init(options_, gears); !s.ok()) return s;
    return std::shared_ptr<Executable>(std::move(exe));
  }

 private:
  CudaGraphOptions options_;
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
