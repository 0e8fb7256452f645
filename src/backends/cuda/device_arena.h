// The CUDA Graph backend's device arena, as bookkeeping (no CUDA here, so
// it is tested where no GPU is): where each gear's tensors sit in the
// arena, and when the arena must change size.
//
// Every gear's graph is captured against the same arena: its inputs, its
// outputs and its valid-size array at offsets from the arena's base, so the
// arena holds the largest live gear once instead of every gear's buffers.
// The arena grows when a gear larger than it compiles and shrinks when the
// largest live gear is released; each change of its size is a new
// generation, and a graph captured in an older generation is captured
// again (on the new base) before its next run.
//
// Thread-safety: none; the backend calls it under its arena mutex.
#ifndef GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_
#define GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_

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

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_BACKENDS_CUDA_DEVICE_ARENA_H_
