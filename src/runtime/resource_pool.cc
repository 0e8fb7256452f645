#include "gearbox/resource_pool.h"

#include <map>

namespace gearbox {

GraphResourcePool::~GraphResourcePool() {
  std::unordered_map<GraphKey, Entry> entries;
  {
    MutexLock lock(&mu_);
    entries.swap(entries_);
  }
  // Destructors run here, outside the lock.
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
  MutexLock lock(&mu_);
  const GraphKey key = next_key_++;
  entries_.emplace(key, Entry{std::move(resource), bytes});
  pending_by_thread_[std::this_thread::get_id()].push_back(key);
  bytes_ += bytes;
  registered_.fetch_add(1, std::memory_order_relaxed);
  return key;
}

std::vector<GraphKey> GraphResourcePool::ConsumeRecentKeys() {
  MutexLock lock(&mu_);
  auto it = pending_by_thread_.find(std::this_thread::get_id());
  if (it == pending_by_thread_.end()) return {};
  std::vector<GraphKey> keys = std::move(it->second);
  pending_by_thread_.erase(it);
  return keys;
}

std::shared_ptr<GraphResource> GraphResourcePool::Acquire(GraphKey key) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.resource;
}

size_t GraphResourcePool::RemoveByKeys(std::span<const GraphKey> keys) {
  std::vector<std::shared_ptr<GraphResource>> dropped;
  dropped.reserve(keys.size());
  {
    MutexLock lock(&mu_);
    for (GraphKey key : keys) {
      auto it = entries_.find(key);
      if (it == entries_.end()) continue;
      bytes_ -= it->second.bytes;
      dropped.push_back(std::move(it->second.resource));
      entries_.erase(it);
    }
  }
  removed_.fetch_add(dropped.size(), std::memory_order_relaxed);
  return dropped.size();  // references drop here, outside the lock
}

size_t GraphResourcePool::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

int64_t GraphResourcePool::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace gearbox
