// The request path: snapshot + plan + record for a 2-dimension request.
// Target: <= 100 ns per request on one thread, near-linear scaling to 2.
//   build/bench/request_path_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <random>

#include "gearbox/runtime.h"

namespace gearbox {
namespace {

AdaptiveGearRuntime* SharedRuntime() {
  static AdaptiveGearRuntime* runtime = [] {
    RuntimeOptions o;
    o.start_worker = true;  // folds full event buffers in the background, as in production
    o.pool = new GraphResourcePool();
    auto r = AdaptiveGearRuntime::Create({{"BATCHSIZE", *MakeTimesGears(1, 256), true, false},
                                          {"SEQLEN", *MakeTimesGears(16, 8192), false, false}},
                                         o);
    return r->release();
  }();
  return runtime;
}

// Pre-drawn request sizes so the benchmark measures gearbox, not the RNG.
std::vector<std::array<int64_t, 2>> Requests() {
  std::mt19937_64 rng(42);
  std::vector<std::array<int64_t, 2>> out(4096);
  for (auto& r : out) {
    r[0] = 1 + static_cast<int64_t>(rng() % 200);
    r[1] = 1 + static_cast<int64_t>(rng() % 8000);
  }
  return out;
}

void BM_RequestPath(benchmark::State& state) {
  AdaptiveGearRuntime* rt = SharedRuntime();
  const auto requests = Requests();
  size_t i = static_cast<size_t>(state.thread_index()) * 997;
  for (auto _ : state) {
    const auto& raw = requests[i++ & 4095];
    SnapshotRef snap = rt->GetSnapshot();
    Plan plan;
    if (!MakePlan(*snap, raw, &plan).ok()) state.SkipWithError("plan failed");
    rt->RecordPlan(plan);  // stamps the time with the runtime's clock
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestPath)->Threads(1)->Threads(2)->UseRealTime();

void BM_SnapshotOnly(benchmark::State& state) {
  AdaptiveGearRuntime* rt = SharedRuntime();
  for (auto _ : state) {
    SnapshotRef snap = rt->GetSnapshot();
    benchmark::DoNotOptimize(snap.get());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SnapshotOnly)->Threads(1)->Threads(2)->UseRealTime();

void BM_PlanOnly(benchmark::State& state) {
  AdaptiveGearRuntime* rt = SharedRuntime();
  const auto requests = Requests();
  SnapshotRef snap = rt->GetSnapshot();
  size_t i = 0;
  for (auto _ : state) {
    Plan plan;
    benchmark::DoNotOptimize(MakePlan(*snap, requests[i++ & 4095], &plan));
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlanOnly);

// Without a worker: the recording thread folds each full buffer itself, so
// this is the whole cost of an event (record + fold into the window).
void BM_RequestPathWithFold(benchmark::State& state) {
  static AdaptiveGearRuntime* rt = [] {
    RuntimeOptions o;
    o.start_worker = false;
    o.pool = new GraphResourcePool();
    auto r = AdaptiveGearRuntime::Create({{"BATCHSIZE", *MakeTimesGears(1, 256), true, false},
                                          {"SEQLEN", *MakeTimesGears(16, 8192), false, false}},
                                         o);
    return r->release();
  }();
  const auto requests = Requests();
  size_t i = 0;
  for (auto _ : state) {
    SnapshotRef snap = rt->GetSnapshot();
    Plan plan;
    if (!MakePlan(*snap, requests[i++ & 4095], &plan).ok()) state.SkipWithError("plan failed");
    rt->RecordPlan(plan);
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestPathWithFold);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
