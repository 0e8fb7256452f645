// Epoch-based reclamation for snapshots: readers pin without locks or
// allocation; writers free a superseded object only once no reader can
// still hold it.
//
// Protocol (operations on the epoch and slots are seq_cst, except that
// where the kernel has membarrier the reader's pin is a plain store and a
// compiler fence, and the writer's Advance runs membarrier: an asymmetric
// fence that costs the writer microseconds and the reader nothing):
//  reader:  e = global_epoch; slot.epoch = e; p = current   (Pin + load)
//           ... use p ...;  slot.epoch = 0                   (Unpin, release)
//  writer:  old = current.exchange(new); tag = ++global_epoch; retire(old, tag)
//           free(old) once every slot's epoch is 0 or >= tag.
// A reader whose slot shows >= tag read the epoch after the exchange, so it
// loaded the new pointer; a reader that stored its epoch after the writer
// scanned its slot as 0 also loads after the exchange. Nested pins on one
// thread keep the outermost (oldest) epoch.
//
// Slots are process-wide, one per thread, claimed on the thread's first pin
// and returned when it exits; they are never freed (bounded by the peak
// number of threads).
#ifndef GEARBOX_SRC_RUNTIME_EPOCH_H_
#define GEARBOX_SRC_RUNTIME_EPOCH_H_

#include <atomic>
#include <cstdint>

namespace gearbox::internal {

struct alignas(64) ReaderSlot {
  std::atomic<uint64_t> epoch{0};    // 0: not pinned; written by its owner thread
  std::atomic<bool> claimed{false};  // owned by a live thread
  uint32_t depth = 0;                // nesting; touched only by the owner thread
  ReaderSlot* next = nullptr;        // immutable once published in the list
};

class EpochDomain {
 public:
  EpochDomain();
  static EpochDomain& Global();

  // Pins the calling thread (nesting allowed) and returns its slot.
  ReaderSlot* Pin() noexcept;
  static void Unpin(ReaderSlot* slot) noexcept;

  // Advances the global epoch; objects unlinked before this call may be
  // freed once SafeToFree(returned tag) holds.
  uint64_t Advance() noexcept;
  // True when no pinned reader has an epoch below `tag`.
  bool SafeToFree(uint64_t tag) const noexcept;

  ReaderSlot* AcquireSlot();
  void ReleaseSlot(ReaderSlot* slot) noexcept;

 private:
  const bool asymmetric_;  // readers' pins are plain stores; Advance runs membarrier
  std::atomic<uint64_t> epoch_{1};
  std::atomic<ReaderSlot*> head_{nullptr};  // push-only list of every slot
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_RUNTIME_EPOCH_H_
