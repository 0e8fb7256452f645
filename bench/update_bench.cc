// An update (run_once) at 64 gears per dimension with 10^6 events in the
// window. Target: <= 50 ms.
//   build/bench/update_bench
#include <benchmark/benchmark.h>

#include <random>

#include "gearbox/policy.h"
#include "gearbox/replan_policy.h"
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
  explicit Loaded(bool frozen, bool replan = false, GearScheme scheme = GearScheme::kIndependent) {
    RuntimeOptions o;
    o.policy = replan ? UpdatePolicy::kReplan : UpdatePolicy::kAdaptive;
    o.combination_spec.scheme =
        scheme;  // joint: every cell of the 64 x 64 grid compiled to start with
    // Replan, frozen: compiles cost more than anything gains, so every run
    // plans (the DP over the window) and examines every move, and changes nothing.
    if (replan && frozen) o.replan.cost.compile_seconds = 1e9;
    if (replan && frozen) o.replan.gear_holding_seconds = 0;
    // 64 x 64 is far above the default graph budget (100), which the first
    // update would enforce: the benchmarks measure the work at that size.
    o.replan.max_graphs = 65536;
    o.replan.max_combinations = 4096;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    if (frozen)
      o.adaptive.recent_use_protect_seconds = 1e9;  // every gear protected; additions capped below
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

// The replan policy: window distribution, exact DP under the cost model,
// tail ladder, and every candidate move evaluated.
void BM_RunOnceReplan(benchmark::State& state) {
  Loaded l(/*frozen=*/true, /*replan=*/true);
  double now = 300.0;
  for (auto _ : state) {
    auto r = l.runtime->RunOnce(now);
    if (!r.ok() || r->changed) state.SkipWithError("the frozen replan run changed the gears");
    now += 1e-3;
  }
  state.counters["gears_per_dim"] = 64;
  state.counters["events_in_window"] = 1e6;
}
BENCHMARK(BM_RunOnceReplan)->Unit(benchmark::kMillisecond);

// The same with a joint gear set of 64 x 64 cells, all compiled: the
// window's variant shapes are summarized and every cell's combination
// weighed (frozen: nothing compiles or drops).
void BM_RunOnceReplanJoint(benchmark::State& state) {
  Loaded l(/*frozen=*/true, /*replan=*/true, GearScheme::kJoint);
  double now = 300.0;
  for (auto _ : state) {
    auto r = l.runtime->RunOnce(now);
    if (!r.ok() || r->changed) state.SkipWithError("the frozen replan run changed the gears");
    now += 1e-3;
  }
  state.counters["cells"] = 64 * 64;
  state.counters["events_in_window"] = 1e6;
}
BENCHMARK(BM_RunOnceReplanJoint)->Unit(benchmark::kMillisecond);

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

// The replan decision when the target differs from the current gears in
// every place (the worst case: 64 gears per dimension, all moves examined,
// up to max_changes_per_update applied).
void BM_DecideReplan(benchmark::State& state) {
  Loaded l(false, /*replan=*/true);
  const WindowStats stats = l.runtime->BuildStatsSnapshot(300.0);
  SnapshotRef snap = l.runtime->GetSnapshot();
  AdaptiveOptions a;
  ReplanOptions o;
  o.cost.compile_seconds = 0.01;  // cheap compiles: many moves pay
  o.min_gear_lifetime_seconds = 0;
  o.max_graphs = 65536;  // no graph budget: the target differs everywhere
  int changes = 0;
  for (auto _ : state) {
    UpdateDecision d = DecideReplan(*snap, stats, {}, a, o, 300.0);
    changes = static_cast<int>(d.record.changes.size());
    benchmark::DoNotOptimize(d);
  }
  state.counters["changes"] = changes;
}
BENCHMARK(BM_DecideReplan)->Unit(benchmark::kMillisecond);

// The same with a joint (arg 1) or sparse (arg 2) gear set: after the grid,
// the choice among its 4,096 cells, every one compiled to start with and
// the window's variant shapes spread over all of them.
void BM_DecideReplanCombinations(benchmark::State& state) {
  const GearScheme scheme = state.range(0) == 1 ? GearScheme::kJoint : GearScheme::kSparse;
  Loaded l(false, /*replan=*/true, scheme);
  const WindowStats stats = l.runtime->BuildStatsSnapshot(300.0);
  SnapshotRef snap = l.runtime->GetSnapshot();
  AdaptiveOptions a;
  ReplanOptions o;
  o.cost.compile_seconds = 0.01;
  o.min_gear_lifetime_seconds = 0;
  // range(2): 1 keeps the default graph budget (100 combinations: the 4,096
  // compiled shrink to it), 0 lifts it (every combination weighed).
  if (state.range(2) == 0) {
    o.max_graphs = 65536;
    o.max_combinations = 4096;
  }
  size_t combinations = 0;
  // range(1): 1 for a look at the combinations alone (the grid stays).
  const ReplanScope scope =
      state.range(1) == 1 ? ReplanScope::kCombinations : ReplanScope::kGearsAndCombinations;
  for (auto _ : state) {
    UpdateDecision d = DecideReplan(*snap, stats, {}, a, o, 300.0, scope);
    combinations = d.next_combinations.size();
    benchmark::DoNotOptimize(d);
  }
  state.SetLabel(std::string(GearSchemeName(scheme)) +
                 (scope == ReplanScope::kCombinations ? ", look" : "") +
                 (state.range(2) == 1 ? ", budget 100" : ""));
  state.counters["joint_sizes"] = static_cast<double>(stats.joint_sizes.size());
  state.counters["combinations_after"] = static_cast<double>(combinations);
}
BENCHMARK(BM_DecideReplanCombinations)
    ->Args({1, 0, 0})
    ->Args({2, 0, 0})
    ->Args({1, 1, 0})
    ->Args({2, 1, 0})
    ->Args({1, 0, 1})
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
