#include "src/runtime/epoch.h"

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
  } while (!head_.compare_exchange_weak(head, s, std::memory_order_release,
                                        std::memory_order_relaxed));
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
    slot->epoch.store(epoch_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  }
  return slot;
}

void EpochDomain::Unpin(ReaderSlot* slot) noexcept {
  if (--slot->depth == 0) slot->epoch.store(0, std::memory_order_release);
}

uint64_t EpochDomain::Advance() noexcept {
  return epoch_.fetch_add(1, std::memory_order_seq_cst) + 1;
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
