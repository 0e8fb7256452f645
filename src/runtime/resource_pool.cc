#include "gearbox/resource_pool.h"

#include <exception>
#include <map>
#include <thread>
#include <unordered_map>

#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

// Release bookkeeping. Thread-safety: mu guards everything; Release() calls
// run outside it.
struct GraphResourcePool::ReleaseState {
  explicit ReleaseState(PoolOptions o) : options(std::move(o)) {}
  const PoolOptions options;
  Mutex mu;
  struct Failed {
    std::shared_ptr<GraphResource> resource;  // the original owner
    int attempts = 0;
  };
  std::vector<Failed> failed ABSL_GUARDED_BY(mu);
  uint64_t released ABSL_GUARDED_BY(mu) = 0;
  uint64_t failures ABSL_GUARDED_BY(mu) = 0;
  uint64_t abandoned ABSL_GUARDED_BY(mu) = 0;

  void Log(const std::string& message) const {
    if (options.log) {
      options.log(LogLevel::kWarning, message);
    } else {
      StderrLogSink(LogLevel::kWarning, message);
    }
  }

  // One attempt; the resource is destroyed on success or when abandoned.
  void Attempt(std::shared_ptr<GraphResource> resource, int attempts_before) {
    std::string error;
    try {
      absl::Status s = resource->Release();
      if (!s.ok()) error = internal::Message(s);
    } catch (const std::exception& e) {
      error = internal::Cat("threw: ", e.what());
    } catch (...) {
      error = "threw an unknown exception";
    }
    const int attempts = attempts_before + 1;
    if (error.empty()) {
      MutexLock lock(&mu);
      ++released;
      return;  // `resource` is destroyed here, outside the lock
    }
    const bool give_up = attempts >= options.max_release_attempts;
    Log(internal::Cat("graph release failed (attempt ", attempts, " of ",
                      options.max_release_attempts, "): ", error,
                      give_up ? "; giving up, the resource is leaked" : "; will retry"));
    MutexLock lock(&mu);
    ++failures;
    if (give_up) {
      ++abandoned;
    } else {
      failed.push_back({std::move(resource), attempts});
    }
  }
};

struct GraphResourcePool::Registry {
  struct Entry {
    std::shared_ptr<GraphResource> resource;  // the handle whose last drop releases
    int64_t bytes = 0;                        // as reported at registration
  };
  mutable Mutex mu;
  GraphKey next_key ABSL_GUARDED_BY(mu) = 1;
  std::unordered_map<GraphKey, Entry> entries ABSL_GUARDED_BY(mu);
  std::unordered_map<std::thread::id, std::vector<GraphKey>> pending_by_thread ABSL_GUARDED_BY(mu);
  int64_t bytes ABSL_GUARDED_BY(mu) = 0;
  std::atomic<uint64_t> registered{0};  // statistics only; relaxed
  std::atomic<uint64_t> removed{0};     // statistics only; relaxed
};

GraphResourcePool::GraphResourcePool(PoolOptions options)
    : release_(std::make_shared<ReleaseState>(std::move(options))),
      registry_(std::make_unique<Registry>()) {}

GraphResourcePool::~GraphResourcePool() {
  std::unordered_map<GraphKey, Registry::Entry> entries;
  {
    MutexLock lock(&registry_->mu);
    entries.swap(registry_->entries);
  }
  entries.clear();  // releases run here, outside the lock
  RetryFailedReleases();
}

GraphResourcePool& GraphResourcePool::GetPool(int device_index) {
  static Mutex registry_mu;
  static auto* pools = new std::map<int, std::unique_ptr<GraphResourcePool>>();
  MutexLock lock(&registry_mu);
  auto& pool = (*pools)[device_index];
  if (!pool) pool = std::make_unique<GraphResourcePool>();
  return *pool;
}

GraphKey GraphResourcePool::Register(std::shared_ptr<GraphResource> resource) {
  if (resource == nullptr) return 0;
  const int64_t bytes = resource->bytes();
  // The handle shares ownership with every Acquire; its deleter releases
  // the resource once the last of them is gone.
  GraphResource* raw = resource.get();
  std::shared_ptr<GraphResource> handle(
      raw, [state = release_, owner = std::move(resource)](GraphResource*) mutable noexcept {
        state->Attempt(std::move(owner), 0);
      });
  MutexLock lock(&registry_->mu);
  const GraphKey key = registry_->next_key++;
  registry_->entries.emplace(key, Registry::Entry{std::move(handle), bytes});
  registry_->pending_by_thread[std::this_thread::get_id()].push_back(key);
  registry_->bytes += bytes;
  registry_->registered.fetch_add(1, std::memory_order_relaxed);
  return key;
}

std::vector<GraphKey> GraphResourcePool::ConsumeRecentKeys() {
  MutexLock lock(&registry_->mu);
  auto it = registry_->pending_by_thread.find(std::this_thread::get_id());
  if (it == registry_->pending_by_thread.end()) return {};
  std::vector<GraphKey> keys = std::move(it->second);
  registry_->pending_by_thread.erase(it);
  return keys;
}

std::shared_ptr<GraphResource> GraphResourcePool::Acquire(GraphKey key) const {
  MutexLock lock(&registry_->mu);
  auto it = registry_->entries.find(key);
  return it == registry_->entries.end() ? nullptr : it->second.resource;
}

size_t GraphResourcePool::RemoveByKeys(std::span<const GraphKey> keys) {
  RetryFailedReleases();
  std::vector<std::shared_ptr<GraphResource>> dropped;
  dropped.reserve(keys.size());
  {
    MutexLock lock(&registry_->mu);
    for (GraphKey key : keys) {
      auto it = registry_->entries.find(key);
      if (it == registry_->entries.end()) continue;
      registry_->bytes -= it->second.bytes;
      dropped.push_back(std::move(it->second.resource));
      registry_->entries.erase(it);
    }
  }
  registry_->removed.fetch_add(dropped.size(), std::memory_order_relaxed);
  const size_t count = dropped.size();
  dropped.clear();  // unheld resources are released here, outside the lock
  return count;
}

size_t GraphResourcePool::RetryFailedReleases() {
  std::vector<ReleaseState::Failed> retry;
  {
    MutexLock lock(&release_->mu);
    retry.swap(release_->failed);
  }
  for (auto& f : retry) release_->Attempt(std::move(f.resource), f.attempts);
  MutexLock lock(&release_->mu);
  return release_->failed.size();
}

uint64_t GraphResourcePool::registered() const {
  return registry_->registered.load(std::memory_order_relaxed);
}

uint64_t GraphResourcePool::removed() const {
  return registry_->removed.load(std::memory_order_relaxed);
}

size_t GraphResourcePool::size() const {
  MutexLock lock(&registry_->mu);
  return registry_->entries.size();
}

int64_t GraphResourcePool::bytes() const {
  MutexLock lock(&registry_->mu);
  return registry_->bytes;
}

uint64_t GraphResourcePool::released() const {
  MutexLock lock(&release_->mu);
  return release_->released;
}

uint64_t GraphResourcePool::release_failures() const {
  MutexLock lock(&release_->mu);
  return release_->failures;
}

uint64_t GraphResourcePool::abandoned() const {
  MutexLock lock(&release_->mu);
  return release_->abandoned;
}

size_t GraphResourcePool::waiting_for_release() const {
  MutexLock lock(&release_->mu);
  return release_->failed.size();
}

}  // namespace gearbox
