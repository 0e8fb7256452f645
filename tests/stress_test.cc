// Concurrency stress: request threads plan, "compile" (register graphs in
// the pool), hold graphs while "running" them and record events, while an
// updater thread runs an update after every few requests with no protection,
// so gears are added and evicted constantly. Checked invariants:
//  - every request is served (planned and recorded);
//  - no graph is released while a request holds it;
//  - every recorded event is accounted for (folded, or dropped because its
//    gear was evicted first);
//  - at the end, graphs alive == pool entries, and every pool entry serves
//    a gear combination of the current gear set (no leaked graph).
// Runs under ThreadSanitizer in CI (see scripts/test.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "gearbox/runtime.h"

namespace gearbox {
namespace {

std::atomic<int> g_alive{0};
std::atomic<int> g_released_while_held{0};

struct StressGraph : GraphResource {
  StressGraph(int64_t b, int64_t s) : batch(b), seq(s) { g_alive.fetch_add(1); }
  ~StressGraph() override {
    if (in_use.load() != 0) g_released_while_held.fetch_add(1);
    g_alive.fetch_sub(1);
  }
  int64_t bytes() const override { return batch * seq; }
  const int64_t batch, seq;
  std::atomic<int> in_use{0};
};

// The caller's compile cache: gear combination -> pool key.
class CompileCache {
 public:
  explicit CompileCache(AdaptiveGearRuntime* rt) : rt_(rt) {}

  // A held graph for the variant, compiling (registering) on a miss.
  std::shared_ptr<GraphResource> Get(int64_t batch, int64_t seq) {
    const std::pair<int64_t, int64_t> combo{batch, seq};
    GraphKey key = 0;
    {
      MutexLock lock(&mu_);
      auto it = keys_.find(combo);
      if (it != keys_.end()) key = it->second;
    }
    if (key != 0) {
      if (auto held = rt_->pool().Acquire(key)) return held;
    }
    auto graph = std::make_shared<StressGraph>(batch, seq);
    rt_->pool().Register(graph);
    const std::vector<GraphKey> keys = rt_->pool().ConsumeRecentKeys();
    {
      MutexLock lock(&mu_);
      keys_[combo] = keys.front();
    }
    const int64_t gears[] = {batch, seq};
    rt_->AttachCleanupKeys(gears, keys);
    compiles_.fetch_add(1);
    return graph;  // the caller's reference keeps it alive while running
  }
  std::map<std::pair<int64_t, int64_t>, GraphKey> Snapshot() {
    MutexLock lock(&mu_);
    return keys_;
  }
  uint64_t compiles() const { return compiles_.load(); }

 private:
  AdaptiveGearRuntime* rt_;
  Mutex mu_;
  std::map<std::pair<int64_t, int64_t>, GraphKey> keys_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> compiles_{0};
};

TEST(Stress, RequestsUpdatesAndReleasesInterleaveSafely) {
  ManualClock clock(0.0);
  FixedMemoryProbe probe(0.5);
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock;
  o.pool = &pool;
  o.memory_probe = &probe;
  o.start_worker = true;  // folds full buffers concurrently
  o.event_buffer_events = 64;
  o.adaptive.recent_use_protect_seconds = 0;
  o.adaptive.window_seconds = 20;
  o.adaptive.half_life_seconds = 10;
  o.adaptive.add_min_samples = 1;
  o.adaptive.min_samples_per_gear = 1;
  auto runtime = *AdaptiveGearRuntime::Create(
      {{"BATCHSIZE", {1, 4, 16}, true, false}, {"SEQLEN", {64, 256, 1024}, false, false}}, o);
  CompileCache cache(runtime.get());

  constexpr int kThreads = 3;
#if defined(__SANITIZE_THREAD__) || defined(GEARBOX_UNDER_TSAN)
  constexpr int kRequestsPerThread = 4000;
#else
  constexpr int kRequestsPerThread = 20000;
#endif
  std::atomic<int> finished{0};
  std::atomic<uint64_t> served{0};
  std::atomic<uint64_t> variants_run{0};
  std::atomic<uint64_t> updates{0};
  std::atomic<uint64_t> changes{0};

  std::thread updater([&] {
    double t = 0;
    while (finished.load() < kThreads) {
      t += 0.5;
      clock.Set(t);
      probe.Set(updates.load() % 7 == 0 ? 0.95 : 0.5);  // memory pressure now and then
      auto r = runtime->RunOnce(t);
      ASSERT_TRUE(r.ok());
      updates.fetch_add(1);
      if (r->changed) changes.fetch_add(1);
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> requesters;
  for (int th = 0; th < kThreads; ++th) {
    requesters.emplace_back([&, th] {
      std::mt19937_64 rng(1234 + th);
      for (int i = 0; i < kRequestsPerThread; ++i) {
        // Keep requests and updates interleaved whatever the scheduler does:
        // every 100 requests, wait for the updater to catch up.
        if (i % 100 == 0) {
          while (updates.load() < static_cast<uint64_t>(i / 100)) std::this_thread::yield();
        }
        // Traffic that shifts with time, so gears come and go.
        const int phase = (i / 500) % 3;
        const int64_t batch = 1 + static_cast<int64_t>(rng() % (phase == 0 ? 6 : phase == 1 ? 40 : 13));
        const int64_t seq = 1 + static_cast<int64_t>(rng() % (phase == 2 ? 1024 : 300));
        SnapshotRef snap = runtime->GetSnapshot();
        const int64_t raw[] = {batch, seq};
        auto plan = MakePlan(*snap, raw);
        ASSERT_TRUE(plan.ok()) << plan.status();
        plan->ForEachVariant([&](const Variant& v) {
          std::shared_ptr<GraphResource> graph = cache.Get(v.gear[0], v.gear[1]);
          auto* g = static_cast<StressGraph*>(graph.get());
          g->in_use.fetch_add(1);
          EXPECT_EQ(g->batch, v.gear[0]);
          g->in_use.fetch_sub(1);
          variants_run.fetch_add(1);
        });
        runtime->RecordPlan(*plan, clock.NowSeconds());
        served.fetch_add(1);
      }
      finished.fetch_add(1);
    });
  }
  for (auto& t : requesters) t.join();
  updater.join();
  runtime->StopWorker();
  auto last = runtime->RunOnce(clock.NowSeconds() + 1);
  ASSERT_TRUE(last.ok());

  EXPECT_EQ(served.load(), static_cast<uint64_t>(kThreads) * kRequestsPerThread);
  EXPECT_EQ(g_released_while_held.load(), 0);
  const RuntimeCounters c = runtime->counters();
  EXPECT_EQ(c.events_pending, 0u);
  EXPECT_EQ(c.events_recorded, c.events_folded + c.events_for_evicted_gears + c.events_too_late +
                                   c.events_bad_time);
  EXPECT_GT(changes.load(), 10u) << "the test should churn gears";
  // No leaked graph: every live graph is a pool entry for current gears.
  EXPECT_EQ(static_cast<size_t>(g_alive.load()), pool.size());
  SnapshotRef now = runtime->GetSnapshot();
  for (const auto& [combo, key] : cache.Snapshot()) {
    if (pool.Acquire(key) == nullptr) continue;
    EXPECT_TRUE(now->Contains(0, combo.first) && now->Contains(1, combo.second))
        << "graph for (" << combo.first << "," << combo.second << ") outlived its gears";
  }
  std::printf("stress: %llu requests, %llu variants, %llu updates (%llu changed), %llu compiles, "
              "%llu keys released, %zu graphs alive\n",
              static_cast<unsigned long long>(served.load()),
              static_cast<unsigned long long>(variants_run.load()),
              static_cast<unsigned long long>(updates.load()),
              static_cast<unsigned long long>(changes.load()),
              static_cast<unsigned long long>(cache.compiles()),
              static_cast<unsigned long long>(c.keys_released + c.orphan_keys_released),
              pool.size());
}

}  // namespace
}  // namespace gearbox
