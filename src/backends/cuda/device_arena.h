// The CUDA Graph backend's device arena, as bookkeeping (no CUDA here, so
// it is tested where no GPU is): where each gear's tensors sit in a slot's
// buffer, how large the arena's slots must be, and which slot a run gets.
//
// The arena has one execution slot per concurrent run (a stream and a
// device buffer each). Every gear's graph is captured per slot against that
// slot's buffer: its inputs, its outputs and its valid-size array at
// offsets from the slot's base, so each slot holds the largest live gear
// once instead of every gear's buffers. A slot grows when a run needs more
// than it holds and shrinks when the largest live gear is released; each
// allocation of a slot's buffer is a new generation of that slot, and a
// graph captured on it in an older generation is captured again (on the
// new base) before its next run there.
//
// Thread-safety: none; the backend calls it under its arena mutex.
#ifndef GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_
#define GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <set>
#include <span>
#include <vector>

#include "gearbox/backend.h"

namespace gearbox::internal {

// Offsets from the arena's base: one per input and output (signature
// order), then the valid-size array (int64 per gear dimension); each
// aligned to `kArenaAlignment` bytes.
struct ArenaLayout {
  std::vector<int64_t> input_offset, input_bytes;
  std::vector<int64_t> output_offset, output_bytes;
  int64_t valid_offset = 0;
  int64_t total_bytes = 0;  // what one run needs from the arena
};

inline constexpr int64_t kArenaAlignment = 256;  // cudaMalloc's own alignment

// Bytes of `spec` with its bound axes at `gears`.
inline int64_t TensorBytesAt(const TensorSpec& spec, std::span<const int64_t> gears) {
  int64_t n = spec.dtype.bits / 8;
  for (size_t a = 0; a < spec.shape.size(); ++a) {
    int64_t size = spec.shape[a];
    for (const AxisBinding& b : spec.bindings) {
      if (b.axis == static_cast<int>(a)) size = gears[static_cast<size_t>(b.dimension)];
    }
    n *= size;
  }
  return n;
}

inline ArenaLayout LayoutAt(const ModelSignature& signature, std::span<const int64_t> gears) {
  ArenaLayout l;
  int64_t at = 0;
  auto place = [&](int64_t bytes) {
    const int64_t offset = at;
    at += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    return offset;
  };
  for (const TensorSpec& t : signature.inputs) {
    l.input_bytes.push_back(TensorBytesAt(t, gears));
    l.input_offset.push_back(place(l.input_bytes.back()));
  }
  for (const TensorSpec& t : signature.outputs) {
    l.output_bytes.push_back(TensorBytesAt(t, gears));
    l.output_offset.push_back(place(l.output_bytes.back()));
  }
  l.valid_offset = place(static_cast<int64_t>(gears.size() * sizeof(int64_t)));
  l.total_bytes = at;
  return l;
}

// The arena's size over the live gears' needs.
class ArenaSizer {
 public:
  // A gear that needs `bytes` compiles: true when the arena must grow to
  // capacity() first (a new generation).
  bool Add(int64_t bytes) {
    needs_.insert(bytes);
    if (bytes <= capacity_) return false;
    capacity_ = bytes;
    ++generation_;
    return true;
  }
  // A gear that needed `bytes` is released: true when the arena may shrink
  // to capacity() (the largest gear left; a new generation). Unknown needs
  // are ignored.
  bool Remove(int64_t bytes) {
    auto it = needs_.find(bytes);
    if (it == needs_.end()) return false;
    needs_.erase(it);
    const int64_t largest = needs_.empty() ? 0 : *std::prev(needs_.end());
    if (largest >= capacity_) return false;
    capacity_ = largest;
    ++generation_;
    return true;
  }
  int64_t capacity() const { return capacity_; }
  int64_t largest_need() const { return needs_.empty() ? 0 : *std::prev(needs_.end()); }
  uint64_t generation() const { return generation_; }

 private:
  std::multiset<int64_t> needs_;
  int64_t capacity_ = 0;
  uint64_t generation_ = 0;
};

// The arena's execution slots: a run checks a free slot out (a new one when
// every slot is busy, so there are as many slots as runs were ever in
// flight at once) and returns it; no slot serves two runs at once. Slots are
// indexes 0, 1, ...; they are never destroyed before the arena.
class SlotList {
 public:
  // A free slot, or a new one (`*created` true).
  int Checkout(bool* created) {
    *created = free_.empty();
    if (*created) return count_++;
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void Return(int slot) { free_.push_back(slot); }
  const std::vector<int>& free() const { return free_; }
  int count() const { return count_; }

 private:
  std::vector<int> free_;
  int count_ = 0;
};

// What a slot holding `held` bytes must be given for a run that needs
// `need`, the arena's capacity (its largest live need) being `capacity`: 0
// when it holds enough, else the capacity (it grows once, not once per
// larger gear; the backend tries `need` alone when that allocation fails).
inline int64_t SlotGrowBytes(int64_t held, int64_t need, int64_t capacity) {
  return held >= need ? 0 : std::max(need, capacity);
}

// Whether a slot holding `held` bytes is shrunk to `capacity`: it holds more
// than the largest live gear needs (when free at once, else when returned).
inline bool SlotShrinks(int64_t held, int64_t capacity) { return held > capacity; }

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_
