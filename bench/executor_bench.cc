// The executor and the oneDNN backend.
//   OMP_NUM_THREADS=1 build/bench/executor_bench
// - BM_ExecutorOverhead vs BM_DirectCall: what the executor adds to a
//   request that needs no padding (target <= 2 us), on a backend whose
//   executable does nothing.
// - BM_OneDnnCompile/<seq>: compiling one gear (primitives + workspace).
// - BM_OneDnnRun/<seq>/<gear>: a request of <seq> tokens run on gear <gear>
//   (gear == seq: exact; gear > seq: padded).
#include <benchmark/benchmark.h>

#include <random>

#include "gearbox/backends/onednn.h"
#include "gearbox/executor.h"

namespace gearbox {
namespace {

class NoopExecutable final : public Executable {
 public:
  absl::Status Run(std::span<const DLTensor>, std::span<const DLTensor>, const RunShape&) override {
    return absl::OkStatus();
  }
};

class NoopBackend final : public Backend {
 public:
  NoopBackend() {
    TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, 64}, {{0, 0}, {1, 1}}};
    TensorSpec y = x;
    y.name = "y";
    sig_.inputs = {x};
    sig_.outputs = {y};
  }
  std::string_view name() const override { return "noop"; }
  const ModelSignature& signature() const override { return sig_; }
  DLDevice device() const override { return {kDLCPU, 0}; }
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t>) override {
    return std::shared_ptr<Executable>(std::make_shared<NoopExecutable>());
  }

 private:
  ModelSignature sig_;
};

struct Setup {
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  Setup() {
    RuntimeOptions o;
    o.pool = &pool;
    o.start_worker = true;
    runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", *MakeTimesGears(1, 64), true, false}, {"SEQLEN", *MakeTimesGears(16, 4096), false, false}}, o);
  }
};

struct Buffers {
  std::vector<float> x, y;
  int64_t shape[3];
  DLTensor in{}, out{};
  Buffers(int64_t b, int64_t s, int64_t h) : x(static_cast<size_t>(b * s * h), 0.5f), y(x.size()), shape{b, s, h} {
    in = DLTensor{x.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
    out = DLTensor{y.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  }
};

void BM_ExecutorOverhead(benchmark::State& state) {
  Setup s;
  NoopBackend backend;
  auto executor = *GearedExecutor::Create(s.runtime.get(), &backend);
  Buffers buf(8, 256, 64);  // exactly gears 8 x 256: zero copy
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  for (auto _ : state) {
    if (!executor->Run(in, out).ok()) state.SkipWithError("run failed");
  }
  state.counters["zero_copy"] = static_cast<double>(executor->stats().zero_copy_requests) /
                                static_cast<double>(executor->stats().requests);
}
BENCHMARK(BM_ExecutorOverhead);

void BM_DirectCall(benchmark::State& state) {
  NoopBackend backend;
  const int64_t gears[] = {8, 256};
  auto exe = *backend.Compile(gears);
  Buffers buf(8, 256, 64);
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  for (auto _ : state) benchmark::DoNotOptimize(exe->Run(in, out, {2, gears, gears}));
}
BENCHMARK(BM_DirectCall);

std::unique_ptr<Backend> OneDnn() {
  TransformerBlockOptions o;
  o.hidden = 64;
  o.heads = 4;
  o.batch_dimension = -1;
  o.seq_dimension = 0;
  return *MakeOneDnnTransformerBackend(o);
}

void BM_OneDnnCompile(benchmark::State& state) {
  auto backend = OneDnn();
  const int64_t gears[] = {state.range(0)};
  int64_t bytes = 0;
  for (auto _ : state) {
    auto exe = backend->Compile(gears);
    if (!exe.ok()) state.SkipWithError("compile failed");
    bytes = (*exe)->bytes();
  }
  state.counters["gear_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_OneDnnCompile)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

void BM_OneDnnRun(benchmark::State& state) {
  auto backend = OneDnn();
  const int64_t seq = state.range(0), gear = state.range(1);
  const int64_t gears[] = {gear};
  const int64_t valid[] = {seq};
  auto exe = *backend->Compile(gears);
  Buffers buf(1, gear, 64);
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  for (auto _ : state) {
    if (!exe->Run(in, out, {1, gears, valid}).ok()) state.SkipWithError("run failed");
  }
  state.counters["useful_tokens"] = static_cast<double>(seq);
}
BENCHMARK(BM_OneDnnRun)
    ->Args({256, 256})->Args({257, 512})->Args({384, 512})->Args({512, 512})
    ->Args({1024, 1024})->Args({600, 1024})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
