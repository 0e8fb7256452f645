// Replay throughput: requests per second through the real runtime on a
// virtual clock (plan, compile bookkeeping, record, fold, scheduled
// updates). Target: >= 1 million events per second on one core.
//   build/bench/replay_bench
#include <benchmark/benchmark.h>

#include <random>

#include "gearbox/config.h"
#include "gearbox/replay.h"

namespace gearbox {
namespace {

Trace Synthetic(int rows, bool two_dims) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> seq(6.5, 1.0);
  Trace t;
  t.dimensions = two_dims ? std::vector<std::string>{"BATCHSIZE", "SEQLEN"}
                          : std::vector<std::string>{"SEQLEN"};
  for (int i = 0; i < rows; ++i) {
    t.time.push_back(i * 0.01);  // 100 requests/s: 10^6 rows span 2.8 hours
    if (two_dims) t.sizes.push_back(1 + static_cast<int64_t>(rng() % 64));
    t.sizes.push_back(std::clamp<int64_t>(static_cast<int64_t>(seq(rng)), 1, 16384));
  }
  return t;
}

// Args: dimensions (1 or 2), policy (0 adaptive, 1 replan).
void BM_Replay(benchmark::State& state) {
  const bool two_dims = state.range(0) == 2;
  const Trace trace = Synthetic(1000000, two_dims);
  RuntimeConfig c;
  if (two_dims) c.dims.push_back({"BATCHSIZE", *MakeTimesGears(1, 64), true, false});
  c.dims.push_back({"SEQLEN", *MakeTimesGears(1, 16384), false, false});
  ReplayOptions o;
  o.policy = state.range(1) == 1 ? UpdatePolicy::kReplan : UpdatePolicy::kAdaptive;
  state.SetLabel(state.range(1) == 1 ? "replan" : "adaptive");
  for (auto _ : state) {
    auto r = Replay(c, trace, o);
    if (!r.ok()) state.SkipWithError("replay failed");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.rows()));
}
BENCHMARK(BM_Replay)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
