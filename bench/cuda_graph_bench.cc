// CUDA Graph backend: capture + instantiate per gear, and replay per run
// (host-to-device copy, graph launch, device-to-host copy, synchronize).
// Needs a GPU; tools/gpu_check.sh runs it.
//   build/bench/cuda_graph_bench
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "gearbox/backends/builtin.h"
#include "gearbox/backends/cuda_graph.h"

namespace gearbox {
namespace {

std::unique_ptr<Backend> Make() {
  if (!RegisterBuiltinBackends().ok()) return nullptr;
  auto b = BackendRegistry::Global().Create("cuda_graph", {{"hidden", "256"}});
  return b.ok() ? *std::move(b) : nullptr;
}

void BM_CaptureInstantiate(benchmark::State& state) {
  auto backend = Make();
  if (!backend) return state.SkipWithError("no CUDA device");
  const int64_t gears[] = {state.range(0), state.range(1)};
  for (auto _ : state) {
    auto exe = backend->Compile(gears);
    if (!exe.ok()) return state.SkipWithError("compile failed");
    benchmark::DoNotOptimize(exe);
  }
}
BENCHMARK(BM_CaptureInstantiate)
    ->Args({1, 128})
    ->Args({8, 512})
    ->Args({32, 2048})
    ->Unit(benchmark::kMicrosecond);

void BM_Replay(benchmark::State& state) {
  auto backend = Make();
  if (!backend) return state.SkipWithError("no CUDA device");
  const int64_t gears[] = {state.range(0), state.range(1)};
  auto exe = backend->Compile(gears);
  if (!exe.ok()) return state.SkipWithError("compile failed");
  std::vector<float> x(static_cast<size_t>(gears[0] * gears[1] * 256), 0.5f), y(x.size());
  int64_t shape[] = {gears[0], gears[1], 256};
  const DLTensor in[] = {{x.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0}};
  const DLTensor out[] = {{y.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0}};
  for (auto _ : state) {
    if (!(*exe)->Run(in, out, {2, gears, gears}).ok()) return state.SkipWithError("run failed");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.size() * sizeof(float) * 2));
}
BENCHMARK(BM_Replay)
    ->Args({1, 128})
    ->Args({8, 512})
    ->Args({32, 2048})
    ->Unit(benchmark::kMicrosecond);

// What BM_Replay's copies cost without gearbox: the same bytes to the device
// and back on one stream, then a synchronize, from pageable host memory (what
// the backend copies from: the caller's tensors) or from pinned memory
// (cudaHostAlloc), with no kernel. BM_Replay minus this is the graph's launch
// and the backend's own work.
void BM_CopyRoundTrip(benchmark::State& state) {
  if (!CudaDeviceAvailable()) return state.SkipWithError("no CUDA device");
  const size_t bytes = static_cast<size_t>(state.range(0) * state.range(1) * 256) * sizeof(float);
  const bool pinned = state.range(2) != 0;
  void* host = nullptr;
  std::vector<float> pageable;
  if (pinned) {
    if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess)
      return state.SkipWithError("cudaHostAlloc failed");
  } else {
    pageable.assign(bytes / sizeof(float), 0.5f);
    host = pageable.data();
  }
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaMalloc(&device, bytes) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return state.SkipWithError("cudaMalloc or cudaStreamCreate failed");
  for (auto _ : state) {
    cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) return state.SkipWithError("copy failed");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes * 2));
  cudaStreamDestroy(stream);
  cudaFree(device);
  if (pinned) cudaFreeHost(host);
}
BENCHMARK(BM_CopyRoundTrip)
    ->ArgNames({"batch", "seq", "pinned"})
    ->Args({1, 128, 0})
    ->Args({1, 128, 1})
    ->Args({8, 512, 0})
    ->Args({8, 512, 1})
    ->Args({32, 2048, 0})
    ->Args({32, 2048, 1})
    ->Unit(benchmark::kMicrosecond);

// One synchronize of an idle stream: the floor under every run's wait.
void BM_StreamSynchronize(benchmark::State& state) {
  if (!CudaDeviceAvailable()) return state.SkipWithError("no CUDA device");
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return state.SkipWithError("cudaStreamCreate failed");
  for (auto _ : state) cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}
BENCHMARK(BM_StreamSynchronize)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
