// The request path: snapshot + plan + record for a 2-dimension request,
// next to its floor (BM_RequestPathFloor: the same work with nothing but an
// atomic snapshot pointer, two binary searches and a per-thread ring; a copy
// of /work/shared/tools/request_path_floor.cc). Read the ratio from one run:
//   build/bench/request_path_bench --benchmark_filter='BM_RequestPath(Floor)?/'
//       --benchmark_min_time=0.5 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// (one command line)
// Target: BM_RequestPath within 4x of BM_RequestPathFloor on 1 and 2 threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <random>
#include <utility>
#include <vector>

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

// ---- the floor (same work as /work/shared/tools/request_path_floor.cc) ----
struct FloorSnapshot {
  std::array<int32_t, 64> batch{}, seq{};
  int nb = 0, ns = 0;
};
struct FloorEvent {
  int32_t raw_b, raw_s, gear_b, gear_s;
  float pad_b, pad_s;
  double t;
};
std::atomic<const FloorSnapshot*> g_floor_snap{nullptr};
FloorSnapshot g_floor_storage;

void FloorInit() {
  int nb = 0, ns = 0;
  for (int g = 1; g <= 512; g *= 2) g_floor_storage.batch[static_cast<size_t>(nb++)] = g;
  for (int g = 16; g <= 131072; g *= 2) g_floor_storage.seq[static_cast<size_t>(ns++)] = g;
  g_floor_storage.nb = nb;
  g_floor_storage.ns = ns;
  g_floor_snap.store(&g_floor_storage, std::memory_order_release);
}

void BM_RequestPathFloor(benchmark::State& state) {
  if (state.thread_index() == 0) FloorInit();
  thread_local std::vector<FloorEvent> ring(1 << 16);
  thread_local size_t head = 0;
  std::mt19937 rng(42 + static_cast<unsigned>(state.thread_index()));
  std::vector<std::pair<int, int>> reqs(4096);
  for (auto& r : reqs)
    r = {static_cast<int>(rng() % 512) + 1, static_cast<int>(rng() % 100000) + 1};
  size_t i = 0;
  double t = 0;
  for (auto _ : state) {
    const FloorSnapshot* s = g_floor_snap.load(std::memory_order_acquire);
    auto [b, q] = reqs[i++ & 4095];
    const int gb = *std::lower_bound(s->batch.begin(), s->batch.begin() + s->nb, b);
    const int gs = *std::lower_bound(s->seq.begin(), s->seq.begin() + s->ns, q);
    FloorEvent& e = ring[head++ & (ring.size() - 1)];
    e = {b,
         q,
         gb,
         gs,
         static_cast<float>(gb - b) / static_cast<float>(gb),
         static_cast<float>(gs - q) / static_cast<float>(gs),
         t += 1e-3};
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RequestPathFloor)->Threads(1)->Threads(2)->UseRealTime();

void BM_RequestPath(benchmark::State& state) {
  AdaptiveGearRuntime* rt = SharedRuntime();
  const auto requests = Requests();
  const RuntimeCounters before = rt->counters();
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
  if (state.thread_index() == 0) {
    // Share of events the worker could not fold in time (dropped, counted).
    const RuntimeCounters after = rt->counters();
    const double recorded = static_cast<double>(after.events_recorded - before.events_recorded);
    const double dropped = static_cast<double>(after.events_dropped - before.events_dropped);
    state.counters["dropped"] = recorded + dropped > 0 ? dropped / (recorded + dropped) : 0.0;
  }
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

// Without a worker: the recording thread folds its full ring itself, so
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
