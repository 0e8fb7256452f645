// CUDA Graph backend: capture + instantiate per gear, and replay per run
// (host-to-device copy, graph launch, device-to-host copy, synchronize).
// Needs a GPU; tools/gpu_check.sh runs it.
//   build/bench/cuda_graph_bench
#include <benchmark/benchmark.h>

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

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
