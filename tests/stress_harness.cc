#include "tests/stress_harness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "fmt/format.h"
#include "gearbox/runtime.h"
#include "src/common/mutex.h"

namespace gearbox::testing {
namespace {

std::atomic<uint64_t> g_alive{0};
std::atomic<uint64_t> g_released_while_held{0};

struct StressGraph : GraphResource {
  StressGraph(int64_t b, int64_t s) : batch(b), seq(s) { g_alive.fetch_add(1); }
  ~StressGraph() override { g_alive.fetch_sub(1); }
  absl::Status Release() override {
    released.store(true);
    if (in_use.load() != 0) g_released_while_held.fetch_add(1);
    return absl::OkStatus();
  }
  int64_t bytes() const override { return batch * seq; }
  const int64_t batch, seq;
  std::atomic<int> in_use{0};
  std::atomic<bool> released{false};
};

// Keeps the calling request's graphs held for a random while: mostly a few
// yields (other requests and the updater run meanwhile), now and then a
// sleep long enough for a whole update with its releases.
void HoldForAWhile(std::mt19937_64& rng) {
  const uint64_t draw = rng();
  if (draw % 4096 == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(20 + static_cast<int>(draw >> 20) % 200));
    return;
  }
  for (uint64_t i = draw % 8; i < 3; ++i) std::this_thread::yield();
}

// The caller's compile cache: gear combination -> pool key.
class CompileCache {
 public:
  explicit CompileCache(AdaptiveGearRuntime* rt) : rt_(rt) {}

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
    std::shared_ptr<GraphResource> held = rt_->pool().Acquire(keys.front());
    {
      MutexLock lock(&mu_);
      keys_[combo] = keys.front();
    }
    const int64_t gears[] = {batch, seq};
    rt_->AttachCleanupKeys(gears, keys);
    compiles_.fetch_add(1);
    // If the gear was evicted meanwhile, the pool already dropped it; the
    // request still runs on its own reference.
    return held ? held : graph;
  }
  std::map<std::pair<int64_t, int64_t>, GraphKey> Keys() {
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

}  // namespace

StressReport RunStress(const StressConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  g_released_while_held.store(0);
  StressReport report;
  {
    ManualClock clock(0.0);
    FixedMemoryProbe probe(0.5);
    GraphResourcePool pool(PoolOptions{5, [](LogLevel, std::string_view) {}});
    RuntimeOptions o;
    o.policy = config.replan ? UpdatePolicy::kReplan : UpdatePolicy::kAdaptive;
    o.combination_spec.scheme = config.scheme;
    o.replan.cost.compile_seconds = 0.05;  // cheap compiles: the replan policy churns too
    o.replan.min_gear_lifetime_seconds = 0;
    o.replan.readd_cooldown_seconds = 0;
    o.replan.update_interval_seconds = 0;
    o.clock = &clock;
    o.pool = &pool;
    o.memory_probe = &probe;
    o.start_worker = true;  // folds full buffers concurrently
    o.event_buffer_events = 64;
    o.log = [](LogLevel, std::string_view) {};
    o.adaptive.recent_use_protect_seconds = 0;
    o.adaptive.window_seconds = 20;
    o.adaptive.half_life_seconds = 10;
    o.adaptive.add_min_samples = 1;
    o.adaptive.min_samples_per_gear = 1;
    auto runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 4, 16}, true, false}, {"SEQLEN", {64, 256, 1024}, false, false}}, o);
    CompileCache cache(runtime.get());

    std::atomic<int> finished{0};
    std::atomic<uint64_t> served{0}, variants{0}, updates{0}, changes{0};

    std::thread updater([&] {
      double t = 0;
      auto next = std::chrono::steady_clock::now();
      auto last_report = next;
      while (finished.load() < config.threads) {
        t += 0.5;
        clock.Set(t);
        probe.Set(updates.load() % 7 == 0 ? 0.95 : 0.5);  // memory pressure now and then
        auto r = runtime->RunOnce(t);
        if (r.ok()) {
          updates.fetch_add(1);
          if (r->changed) changes.fetch_add(1);
        }
        if (config.update_period_us > 0) {
          next += std::chrono::microseconds(config.update_period_us);
          std::this_thread::sleep_until(next);
          if (config.progress &&
              std::chrono::steady_clock::now() - last_report > std::chrono::seconds(1)) {
            last_report = std::chrono::steady_clock::now();
            std::fprintf(stderr, "soak: %llu requests, %llu updates (%llu changed), %zu graphs\n",
                         static_cast<unsigned long long>(served.load()),
                         static_cast<unsigned long long>(updates.load()),
                         static_cast<unsigned long long>(changes.load()), pool.size());
          }
        } else {
          std::this_thread::yield();
        }
      }
    });

    std::vector<std::thread> requesters;
    for (int th = 0; th < config.threads; ++th) {
      requesters.emplace_back([&, th] {
        std::mt19937_64 rng(config.seed + static_cast<uint64_t>(th));
        for (int64_t i = 0; i < config.requests_per_thread; ++i) {
          if (config.update_period_us == 0 && i % config.requests_per_update == 0) {
            while (updates.load() < static_cast<uint64_t>(i / config.requests_per_update)) {
              std::this_thread::yield();
            }
          }
          // Traffic that shifts with time, so gears come and go.
          const int phase = static_cast<int>((i / 4000) % 3);  // 40 updates: 20 s, one window
          const int64_t batch = 1 + static_cast<int64_t>(rng() % (phase == 0   ? 6
                                                                  : phase == 1 ? 40
                                                                               : 13));
          const int64_t seq = 1 + static_cast<int64_t>(rng() % (phase == 2 ? 1024 : 300));
          SnapshotRef snap = runtime->GetSnapshot();
          const int64_t raw[] = {batch, seq};
          Plan plan;
          if (!MakePlan(*snap, raw, &plan).ok()) continue;  // never happens: sizes fit
          // Every graph of the request is held from its lookup to the end
          // of the request, across yields and now and then a sleep, so an
          // update (and its releases) can run while graphs are held: a pool
          // that released a held graph would be seen by StressGraph::Release.
          std::vector<std::shared_ptr<GraphResource>> held;
          plan.ForEachVariant([&](const Variant& v) {
            variants.fetch_add(1, std::memory_order_relaxed);
            if (v.eager) return;  // a sparse or joint miss: runs uncompiled
            std::shared_ptr<GraphResource> graph = cache.Get(v.gear[0], v.gear[1]);
            auto* g = static_cast<StressGraph*>(graph.get());
            g->in_use.fetch_add(1);
            if (g->batch != v.gear[0] || g->seq != v.gear[1])
              g_released_while_held.fetch_add(1000000);
            held.push_back(std::move(graph));
          });
          HoldForAWhile(rng);
          for (const std::shared_ptr<GraphResource>& graph : held) {
            auto* g = static_cast<StressGraph*>(graph.get());
            if (g->released.load()) g_released_while_held.fetch_add(1);  // released under our feet
            g->in_use.fetch_sub(1);
          }
          held.clear();
          runtime->RecordPlan(plan, clock.NowSeconds());
          served.fetch_add(1, std::memory_order_relaxed);
        }
        finished.fetch_add(1);
      });
    }
    for (auto& t : requesters) t.join();
    updater.join();
    runtime->StopWorker();
    (void)runtime->RunOnce(clock.NowSeconds() + 1);
    pool.RetryFailedReleases();

    const RuntimeCounters c = runtime->counters();
    report.served = served.load();
    report.variants = variants.load();
    report.updates = updates.load();
    report.updates_changed = changes.load();
    report.compiles = cache.compiles();
    report.keys_released = c.keys_released + c.orphan_keys_released;
    report.events_recorded = c.events_recorded;
    report.events_accounted =
        c.events_folded + c.events_for_evicted_gears + c.events_too_late + c.events_bad_time;
    report.pool_entries = pool.size();
    report.graphs_alive = g_alive.load();
    SnapshotRef now = runtime->GetSnapshot();
    for (const auto& [combo, key] : cache.Keys()) {
      if (pool.Acquire(key) == nullptr) continue;
      if (!now->Contains(0, combo.first) || !now->Contains(1, combo.second)) ++report.stale_graphs;
      if (now->scheme() != GearScheme::kIndependent &&
          !std::binary_search(now->combinations().begin(), now->combinations().end(),
                              GearCombination{combo.first, combo.second})) {
        ++report.stale_graphs;  // a dropped combination's graph outlived it
      }
    }
  }
  report.released_while_held = g_released_while_held.load();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::vector<std::string> StressReport::Violations(const StressConfig& config) const {
  std::vector<std::string> v;
  const uint64_t expected = static_cast<uint64_t>(config.threads) * config.requests_per_thread;
  if (served != expected) v.push_back(fmt::format("served {} of {} requests", served, expected));
  if (released_while_held != 0)
    v.push_back(fmt::format("{} graphs released while held", released_while_held));
  if (events_recorded != events_accounted) {
    v.push_back(
        fmt::format("{} events recorded, {} accounted for", events_recorded, events_accounted));
  }
  if (graphs_alive != pool_entries) {
    v.push_back(fmt::format("{} graphs alive but {} pool entries", graphs_alive, pool_entries));
  }
  if (stale_graphs != 0) v.push_back(fmt::format("{} graphs outlived their gears", stale_graphs));
  return v;
}

std::string StressReport::Summary() const {
  return fmt::format(
      "{} requests, {} variants, {} updates ({} changed the gears), {} compiles, {} graphs "
      "released by eviction, {} alive at the end, {:.1f} s",
      served, variants, updates, updates_changed, compiles, keys_released, graphs_alive, seconds);
}

}  // namespace gearbox::testing
