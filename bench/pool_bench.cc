// The graph resource pool: register / consume_recent_keys / remove_by_keys,
// and acquiring a graph for a request.
//   build/bench/pool_bench
#include <benchmark/benchmark.h>

#include "gearbox/resource_pool.h"

namespace gearbox {
namespace {

struct Graph : GraphResource {
  int64_t bytes() const override { return 1; }
};

// One compile's worth: register a graph, read its key back, later remove it.
void BM_RegisterConsumeRemove(benchmark::State& state) {
  GraphResourcePool pool;
  const int batch = static_cast<int>(state.range(0));
  std::vector<GraphKey> keys;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) pool.Register(std::make_shared<Graph>());
    keys = pool.ConsumeRecentKeys();
    pool.RemoveByKeys(keys);
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_RegisterConsumeRemove)->Arg(1)->Arg(16)->Arg(256);

// The request path's use: acquire a reference to a live graph, drop it.
void BM_Acquire(benchmark::State& state) {
  static GraphResourcePool pool;
  static const GraphKey key = pool.Register(std::make_shared<Graph>());
  for (auto _ : state) benchmark::DoNotOptimize(pool.Acquire(key));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Acquire)->Threads(1)->Threads(2)->UseRealTime();

// Removing keys that are already gone (the idempotent path of eviction).
void BM_RemoveMissing(benchmark::State& state) {
  GraphResourcePool pool;
  std::vector<GraphKey> keys(64);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000000 + i;
  for (auto _ : state) benchmark::DoNotOptimize(pool.RemoveByKeys(keys));
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_RemoveMissing);

}  // namespace
}  // namespace gearbox

BENCHMARK_MAIN();
