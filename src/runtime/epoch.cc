#include "src/runtime/epoch.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gearbox/snapshot.h"

namespace gearbox::internal {
namespace {

// Returns the thread's slot to the domain when the thread exits.
struct ThreadSlot {
  ReaderSlot* slot = nullptr;
  ~ThreadSlot() {
    if (slot != nullptr) EpochDomain::Global().ReleaseSlot(slot);
  }
};
thread_local ThreadSlot tls_slot;

}  // namespace

// The asymmetric fence: readers order their epoch store before their
// pointer load with a compiler fence only, and every writer's Advance makes
// all running threads of the process execute a full fence (membarrier)
// between its unlink and any later scan. Off (plain seq_cst stores) where
// the kernel lacks membarrier, and under ThreadSanitizer, which does not
// model it.
bool UseMembarrier() {
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return false;
#endif
#endif
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0;
#endif
}

EpochDomain::EpochDomain() : asymmetric_(UseMembarrier()) {}

EpochDomain& EpochDomain::Global() {
  static EpochDomain* domain = new EpochDomain();  // outlives every thread
  return *domain;
}

ReaderSlot* EpochDomain::AcquireSlot() {
  for (ReaderSlot* s = head_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    bool expected = false;
    if (!s->claimed.load(std::memory_order_relaxed) &&
        s->claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      return s;
    }
  }
  auto* s = new ReaderSlot();
  s->claimed.store(true, std::memory_order_relaxed);
  ReaderSlot* head = head_.load(std::memory_order_relaxed);
  do {
    s->next = head;
  } while (
      !head_.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
  return s;
}

void EpochDomain::ReleaseSlot(ReaderSlot* slot) noexcept {
  slot->depth = 0;
  slot->epoch.store(0, std::memory_order_seq_cst);
  slot->claimed.store(false, std::memory_order_release);
}

ReaderSlot* EpochDomain::Pin() noexcept {
  ReaderSlot* slot = tls_slot.slot;
  if (slot == nullptr) slot = tls_slot.slot = AcquireSlot();
  if (slot->depth++ == 0) {
    if (asymmetric_) {
      // Acquire: the pointer this reader loads next cannot be read before the
      // epoch (on weakly ordered CPUs a relaxed load could pair a new epoch
      // with an old pointer).
      slot->epoch.store(epoch_.load(std::memory_order_acquire), std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the writer's membarrier does the rest
    } else {
      slot->epoch.store(epoch_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
    }
  }
  return slot;
}

void EpochDomain::Unpin(ReaderSlot* slot) noexcept {
  if (--slot->depth == 0) slot->epoch.store(0, std::memory_order_release);
}

uint64_t EpochDomain::Advance() noexcept {
  const uint64_t tag = epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
  // Every reader either made its pin visible to scans after this point, or
  // loads the pointer its writer unlinked before calling Advance afterwards.
  if (asymmetric_) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0);
  return tag;
}

bool EpochDomain::SafeToFree(uint64_t tag) const noexcept {
  for (ReaderSlot* s = head_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    const uint64_t e = s->epoch.load(std::memory_order_seq_cst);
    if (e != 0 && e < tag) return false;
  }
  return true;
}

}  // namespace gearbox::internal

namespace gearbox {

SnapshotRef& SnapshotRef::operator=(SnapshotRef&& other) noexcept {
  if (this != &other) {
    Reset();
    set_ = other.set_;
    slot_ = other.slot_;
    other.set_ = nullptr;
    other.slot_ = nullptr;
  }
  return *this;
}

void SnapshotRef::Reset() noexcept {
  if (slot_ != nullptr) internal::EpochDomain::Unpin(slot_);
  slot_ = nullptr;
  set_ = nullptr;
}

}  // namespace gearbox
