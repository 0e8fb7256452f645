// Fuzzes the pool's key operations: register, consume, acquire, remove
// (real, stale and made-up keys, repeated) and release failures. Checks:
// live entries match a model, acquired references are never released while
// held, every resource is released or abandoned exactly once.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "gearbox/resource_pool.h"

namespace {

struct Counters {
  int alive = 0;
  int held_released = 0;
};

struct Graph : gearbox::GraphResource {
  Graph(Counters* c, int failures) : c_(c), failures_(failures) { ++c_->alive; }
  ~Graph() override { --c_->alive; }
  absl::Status Release() override {
    if (holders > 0) ++c_->held_released;
    if (failures_-- > 0) return absl::UnavailableError("injected");
    return absl::OkStatus();
  }
  Counters* c_;
  int failures_;
  int holders = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Counters counters;
  {
    gearbox::GraphResourcePool pool(
        gearbox::PoolOptions{3, [](gearbox::LogLevel, std::string_view) {}});
    std::set<gearbox::GraphKey> live, pending;
    std::vector<gearbox::GraphKey> all;
    std::map<gearbox::GraphKey, std::shared_ptr<gearbox::GraphResource>> held;
    while (in.remaining_bytes() > 0) {
      switch (in.ConsumeIntegralInRange<int>(0, 5)) {
        case 0: {
          const gearbox::GraphKey k = pool.Register(
              std::make_shared<Graph>(&counters, in.ConsumeIntegralInRange<int>(0, 4)));
          live.insert(k);
          pending.insert(k);
          all.push_back(k);
          break;
        }
        case 1: {
          const auto keys = pool.ConsumeRecentKeys();
          if (std::set<gearbox::GraphKey>(keys.begin(), keys.end()) != pending) __builtin_trap();
          pending.clear();
          break;
        }
        case 2: {  // a request takes a graph
          if (all.empty()) break;
          const gearbox::GraphKey k = all[in.ConsumeIntegralInRange<size_t>(0, all.size() - 1)];
          auto r = pool.Acquire(k);
          if ((r != nullptr) != (live.count(k) > 0)) __builtin_trap();
          if (r && !held.count(k)) {
            static_cast<Graph*>(r.get())->holders++;
            held[k] = std::move(r);
          }
          break;
        }
        case 3: {  // the request finishes
          if (held.empty()) break;
          auto it = held.begin();
          std::advance(it, in.ConsumeIntegralInRange<size_t>(0, held.size() - 1));
          static_cast<Graph*>(it->second.get())->holders--;
          held.erase(it);
          break;
        }
        case 4: {  // eviction: some keys, maybe repeated, maybe unknown
          std::vector<gearbox::GraphKey> keys;
          const int n = in.ConsumeIntegralInRange<int>(0, 4);
          for (int i = 0; i < n; ++i) {
            keys.push_back(all.empty() || in.ConsumeBool()
                               ? in.ConsumeIntegral<gearbox::GraphKey>()
                               : all[in.ConsumeIntegralInRange<size_t>(0, all.size() - 1)]);
          }
          size_t expected = 0;
          for (gearbox::GraphKey k : std::set<gearbox::GraphKey>(keys.begin(), keys.end())) {
            expected += live.erase(k);
          }
          if (pool.RemoveByKeys(keys) != expected) __builtin_trap();
          break;
        }
        case 5:
          pool.RetryFailedReleases();
          break;
      }
      if (pool.size() != live.size()) __builtin_trap();
      if (counters.held_released != 0) __builtin_trap();
    }
    for (auto& [k, r] : held) static_cast<Graph*>(r.get())->holders--;
    held.clear();
    for (int i = 0; i < 4; ++i) pool.RetryFailedReleases();
  }
  if (counters.alive != 0) __builtin_trap();  // released or abandoned: destroyed either way
  return 0;
}
