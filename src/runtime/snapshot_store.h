// GearSnapshotStore: the current gear set, published by the update path and
// read lock-free by requests.
//
// Thread-safety: Get() from any thread, any time (no lock, no allocation).
// Publish() and Reclaim() from any thread; they serialize on mu_. A
// superseded set is freed by Publish/Reclaim once no reader pins it, outside
// mu_. The store must outlive every SnapshotRef it handed out.
#ifndef GEARBOX_SRC_RUNTIME_SNAPSHOT_STORE_H_
#define GEARBOX_SRC_RUNTIME_SNAPSHOT_STORE_H_

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "gearbox/gear_set.h"
#include "gearbox/snapshot.h"
#include "src/common/mutex.h"
#include "src/runtime/epoch.h"

namespace gearbox::internal {

class SnapshotStore {
 public:
  explicit SnapshotStore(GearSet initial);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  SnapshotRef Get() const noexcept {
    ReaderSlot* slot = EpochDomain::Global().Pin();
    return SnapshotRef(current_.load(std::memory_order_seq_cst), slot);
  }

  // Makes `next` current; the previous set is freed once unpinned.
  void Publish(GearSet next);
  // Frees superseded sets no reader pins. Returns how many remain retired.
  size_t Reclaim();

 private:
  std::atomic<const GearSet*> current_;  // owned; replaced only under mu_
  Mutex mu_;                             // serializes writers
  std::vector<std::pair<uint64_t, std::unique_ptr<const GearSet>>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_RUNTIME_SNAPSHOT_STORE_H_
