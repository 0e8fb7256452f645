#include "src/runtime/snapshot_store.h"

namespace gearbox::internal {

SnapshotStore::SnapshotStore(GearSet initial) : current_(new GearSet(std::move(initial))) {}

SnapshotStore::~SnapshotStore() {
  delete current_.load(std::memory_order_acquire);
  // retired_ entries are freed by their unique_ptrs.
}

void SnapshotStore::Publish(GearSet next) {
  auto* fresh = new GearSet(std::move(next));
  {
    MutexLock lock(&mu_);
    const GearSet* old = current_.exchange(fresh, std::memory_order_seq_cst);
    const uint64_t tag = EpochDomain::Global().Advance();
    retired_.emplace_back(tag, std::unique_ptr<const GearSet>(old));
  }
  Reclaim();
}

size_t SnapshotStore::Reclaim() {
  std::vector<std::unique_ptr<const GearSet>> freeable;
  size_t remaining;
  {
    MutexLock lock(&mu_);
    auto keep = retired_.begin();
    for (auto it = retired_.begin(); it != retired_.end(); ++it) {
      if (EpochDomain::Global().SafeToFree(it->first)) {
        freeable.push_back(std::move(it->second));
      } else {
        *keep++ = std::move(*it);
      }
    }
    retired_.erase(keep, retired_.end());
    remaining = retired_.size();
  }
  return remaining;  // freeable's destructors run here, outside mu_
}

}  // namespace gearbox::internal
