// The executor and the oneDNN backend.
//   OMP_NUM_THREADS=1 build/bench/executor_bench --benchmark_filter='Executor|DirectCall'
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true  (one command line)
// - BM_Executor/<case> vs BM_DirectCall/<case>: what the executor adds to a
//   request (target <= 2 us), on a backend whose executable does nothing:
//   0 exact gear (8 x 256 x 64 floats, zero copy), 1 padded (1 x 20 -> gear
//   1 x 32), 2 split (12 x 16 -> chunks 8 + 4), 3 2-D padded (3 x 20 -> 4 x 32);
//   cases 1-3 on 8 floats per token, staging, gather and scatter included.
//   BM_DirectCall runs the executable on gear-sized tensors as often as the
//   plan has variants.
// - BM_ExecutorThreads/threads:2: the exact case on two threads (no lock
//   or shared reference count on a hit).
// - BM_OneDnnCompile/<seq>: compiling one gear (primitives + workspace:
//   per-gear workspaces; with the arena the workspace comes at the first run).
// - BM_OneDnnRun/<seq>/<gear>: a request of <seq> tokens run on gear <gear>
//   (gear == seq: exact; gear > seq: padded).
// - BM_OneDnnRunBesideLargeGear/<gear>/<arena>: gear <gear> run while gear
//   1024 is live (and ran once), with the workspace arena (1: the slot is
//   gear 1024's size) or per-gear workspaces (0): what sharing costs a run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
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
  explicit NoopBackend(int64_t hidden = 64) {
    TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, hidden}, {{0, 0}, {1, 1}}};
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
    runtime = *AdaptiveGearRuntime::Create({{"BATCHSIZE", *MakeTimesGears(1, 8), true, false},
                                            {"SEQLEN", *MakeTimesGears(16, 4096), false, false}},
                                           o);
  }
};

struct Buffers {
  std::vector<float> x, y;
  int64_t shape[3];
  DLTensor in{}, out{};
  Buffers(int64_t b, int64_t s, int64_t h)
      : x(static_cast<size_t>(b * s * h), 0.5f), y(x.size()), shape{b, s, h} {
    in = DLTensor{x.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
    out = DLTensor{y.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  }
};

// The request of each case: raw sizes, hidden size, and the gears of its variants.
struct Case {
  int64_t batch, seq, hidden;
  std::vector<std::array<int64_t, 2>> variants;
};
Case BenchCase(int64_t index) {
  switch (index) {
    case 0:
      return {8, 256, 64, {{8, 256}}};  // exact gear: zero copy
    case 1:
      return {1, 20, 8, {{1, 32}}};  // padded
    case 2:
      return {12, 16, 8, {{8, 16}, {4, 16}}};  // split: two chunks
    default:
      return {3, 20, 8, {{4, 32}}};  // padded in both dimensions
  }
}
const char* CaseName(int64_t index) {
  static const char* names[] = {"exact", "padded", "split", "padded_2d"};
  return names[std::clamp<int64_t>(index, 0, 3)];
}

void BM_Executor(benchmark::State& state) {
  const Case c = BenchCase(state.range(0));
  Setup s;
  NoopBackend backend(c.hidden);
  auto executor = *GearedExecutor::Create(s.runtime.get(), &backend);
  Buffers buf(c.batch, c.seq, c.hidden);
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  if (!executor->Run(in, out).ok()) state.SkipWithError("run failed");  // compiles
  for (auto _ : state) {
    if (!executor->Run(in, out).ok()) state.SkipWithError("run failed");
  }
  const ExecutorStats st = executor->stats();
  state.SetLabel(CaseName(state.range(0)));
  state.counters["variants"] = static_cast<double>(st.variants) / static_cast<double>(st.requests);
  state.counters["zero_copy"] =
      static_cast<double>(st.zero_copy_requests) / static_cast<double>(st.requests);
}
BENCHMARK(BM_Executor)->DenseRange(0, 3);

void BM_DirectCall(benchmark::State& state) {
  const Case c = BenchCase(state.range(0));
  NoopBackend backend(c.hidden);
  std::vector<std::shared_ptr<Executable>> exes;
  std::vector<std::unique_ptr<Buffers>> bufs;
  for (const auto& g : c.variants) {
    exes.push_back(*backend.Compile(g));
    bufs.push_back(std::make_unique<Buffers>(g[0], g[1], c.hidden));
  }
  for (auto _ : state) {
    for (size_t v = 0; v < exes.size(); ++v) {
      const DLTensor in[] = {bufs[v]->in};
      const DLTensor out[] = {bufs[v]->out};
      benchmark::DoNotOptimize(
          exes[v]->Run(in, out, {2, c.variants[v].data(), c.variants[v].data()}));
    }
  }
  state.SetLabel(CaseName(state.range(0)));
}
BENCHMARK(BM_DirectCall)->DenseRange(0, 3);

void BM_ExecutorThreads(benchmark::State& state) {
  static Setup* s = new Setup();
  static NoopBackend* backend = new NoopBackend();
  static GearedExecutor* executor = GearedExecutor::Create(s->runtime.get(), backend)->release();
  Buffers buf(8, 256, 64);  // exact gear: zero copy
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  for (auto _ : state) {
    if (!executor->Run(in, out).ok()) state.SkipWithError("run failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExecutorThreads)->Threads(1)->Threads(2)->UseRealTime();

std::unique_ptr<Backend> OneDnn(bool shared_arena = true) {
  TransformerBlockOptions o;
  o.hidden = 64;
  o.heads = 4;
  o.batch_dimension = -1;
  o.seq_dimension = 0;
  o.shared_arena = shared_arena;
  return *MakeOneDnnTransformerBackend(o);
}

void BM_OneDnnCompile(benchmark::State& state) {
  auto backend = OneDnn(/*shared_arena=*/false);  // the compile allocates its workspace
  const int64_t gears[] = {state.range(0)};
  int64_t bytes = 0;
  for (auto _ : state) {
    auto exe = backend->Compile(gears);
    if (!exe.ok()) state.SkipWithError("compile failed");
    bytes = (*exe)->bytes() + (*exe)->arena_bytes();
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
    ->Args({256, 256})
    ->Args({257, 512})
    ->Args({384, 512})
    ->Args({512, 512})
    ->Args({1024, 1024})
    ->Args({600, 1024})
    ->Unit(benchmark::kMicrosecond);

void BM_OneDnnRunBesideLargeGear(benchmark::State& state) {
  auto backend = OneDnn(state.range(1) != 0);
  const int64_t large_gears[] = {1024}, gears[] = {state.range(0)};
  auto large = *backend->Compile(large_gears);
  auto exe = *backend->Compile(gears);
  Buffers large_buf(1, 1024, 64), buf(1, gears[0], 64);
  const DLTensor large_in[] = {large_buf.in}, large_out[] = {large_buf.out};
  if (!large->Run(large_in, large_out, {1, large_gears, large_gears}).ok())
    state.SkipWithError("run failed");
  const DLTensor in[] = {buf.in};
  const DLTensor out[] = {buf.out};
  for (auto _ : state) {
    if (!exe->Run(in, out, {1, gears, gears}).ok()) state.SkipWithError("run failed");
  }
  state.counters["workspace_bytes"] =
      static_cast<double>(large->bytes() + exe->bytes() + backend->arena_usage().held_bytes);
}
BENCHMARK(BM_OneDnnRunBesideLargeGear)
    ->Args({64, 0})
    ->Args({64, 1})
    ->Args({256, 0})
    ->Args({256, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
