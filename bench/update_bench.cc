// An update (run_once) at 64 gears per dimension with 10^6 events in the
// window. Target: <= 50 ms.
//   build/bench/update_bench
#include <benchmark/benchmark.h>

#include <random>

#include "gearbox/policy.h"
#include "gearbox/runtime.h"

namespace gearbox {
namespace {

std::vector<int64_t> SixtyFourGears(int64_t first, double ratio) {
  std::vector<int64_t> g;
  double v = static_cast<double>(first);
  while (g.size() < 64) {
    const int64_t x = static_cast<int64_t>(v);
    if (g.empty() || x > g.back()) g.push_back(x);
    v *= ratio;
  }
  return g;
}

struct Loaded {
  ManualClock clock{0.0};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;

  // `frozen`: options under which an update examines everything and changes
  // nothing (so repeated runs do the same work).
  explicit Loaded(bool frozen) {
    RuntimeOptions o;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    if (frozen) o.adaptive.recent_use_protect_seconds = 1e9;  // every gear protected; additions capped below
    runtime = *AdaptiveGearRuntime::Create({{"BATCHSIZE", SixtyFourGears(1, 1.06), true, false},
                                            {"SEQLEN", SixtyFourGears(16, 1.1), false, false}},
                                           o);
    std::mt19937_64 rng(9);
    SnapshotRef snap = runtime->GetSnapshot();
    const int64_t max_b = snap->max_gear(0), max_s = snap->max_gear(1);
    Plan plan;
    for (int i = 0; i < 1000000; ++i) {
      const int64_t raw[] = {1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_b)),
                             1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_s))};
      (void)MakePlan(*snap, raw, &plan);
      runtime->RecordPlan(plan, 300.0 * i / 1e6);  // 10^6 events over the 300 s window
    }
  }
};

void BM_RunOnce(benchmark::State& state) {
  Loaded l(/*frozen=*/true);
  double now = 300.0;
  for (auto _ : state) {
    auto r = l.runtime->RunOnce(now);
    benchmark::DoNotOptimize(r);
    now += 1e-3;
  }
  state.counters["gears_per_dim"] = 64;
  state.counters["events_in_window"] = 1e6;
}
BENCHMARK(BM_RunOnce)->Unit(benchmark::kMillisecond);

void BM_BuildStatsSnapshot(benchmark::State& state) {
  Loaded l(true);
  for (auto _ : state) benchmark::DoNotOptimize(l.runtime->BuildStatsSnapshot(300.0));
}
BENCHMARK(BM_BuildStatsSnapshot)->Unit(benchmark::kMillisecond);

void BM_DecideUpdate(benchmark::State& state) {
  Loaded l(false);
  const WindowStats stats = l.runtime->BuildStatsSnapshot(300.0);
  SnapshotRef snap = l.runtime->GetSnapshot();
  AdaptiveOptions o;
  o.recent_use_protect_seconds = 0;
  for (auto _ : state) benchmark::DoNotOptimize(DecideUpdate(*snap, stats, {}, o, 300.0));
}
BENCHMARK(BM_DecideUpdate)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
