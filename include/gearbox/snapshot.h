// SnapshotRef: a pinned, lock-free read of the current gear set.
//
// Getting one costs a few nanoseconds and never allocates, locks or waits
// for the update path (epoch-based reclamation; see
// src/runtime/epoch.h). While it lives, the GearSet it points to stays valid
// even if the worker publishes a new one. It is request-scoped: create and
// destroy it on the same thread, and do not keep it for long (a pinned
// reader delays freeing of superseded snapshots, never anything else).
// Refs may nest on one thread.
#ifndef GEARBOX_SNAPSHOT_H_
#define GEARBOX_SNAPSHOT_H_

#include "gearbox/export.h"
#include "gearbox/gear_set.h"

namespace gearbox {
namespace internal {
struct ReaderSlot;
class SnapshotStore;
}  // namespace internal

class GEARBOX_EXPORT SnapshotRef {
 public:
  SnapshotRef() = default;
  SnapshotRef(SnapshotRef&& other) noexcept : set_(other.set_), slot_(other.slot_) {
    other.set_ = nullptr;
    other.slot_ = nullptr;
  }
  SnapshotRef& operator=(SnapshotRef&& other) noexcept;
  SnapshotRef(const SnapshotRef&) = delete;
  SnapshotRef& operator=(const SnapshotRef&) = delete;
  ~SnapshotRef() { Reset(); }

  const GearSet& operator*() const { return *set_; }
  const GearSet* operator->() const { return set_; }
  const GearSet* get() const { return set_; }
  explicit operator bool() const { return set_ != nullptr; }
  // Unpins early.
  void Reset() noexcept;

 private:
  friend class internal::SnapshotStore;
  SnapshotRef(const GearSet* set, internal::ReaderSlot* slot) : set_(set), slot_(slot) {}

  const GearSet* set_ = nullptr;
  internal::ReaderSlot* slot_ = nullptr;
};

}  // namespace gearbox

#endif  // GEARBOX_SNAPSHOT_H_
