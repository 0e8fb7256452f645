#include "src/stats/joint_window.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace gearbox::internal {
namespace {

constexpr uint64_t kCoarseFlag = uint64_t{1} << 63;

uint64_t Key(uint32_t bin_a, uint32_t bin_b) { return (uint64_t{bin_a} << 32) | bin_b; }

int Octave(int64_t size) { return 63 - std::countl_zero(static_cast<uint64_t>(size)); }

}  // namespace

uint32_t JointWindow::FineBin(int64_t size) {
  if (size < 64) return static_cast<uint32_t>(std::max<int64_t>(size, 0));
  const int octave = Octave(size);                  // >= 6
  const int64_t sub = (size >> (octave - 4)) - 16;  // 0..15
  return static_cast<uint32_t>(64 + (octave - 6) * 16 + sub);
}

uint32_t JointWindow::CoarseBin(int64_t size) {
  return static_cast<uint32_t>(Octave(std::max<int64_t>(size, 1)));
}

JointWindow::JointWindow(const WindowGeometry& geometry)
    : slots_(geometry.slots), ring_(static_cast<size_t>(geometry.slots + 1)) {}

bool JointWindow::AddToSlot(int64_t index, double weight, int64_t a, int64_t b) {
  if (newest_slot_ != INT64_MIN && index < newest_slot_ - slots_) return false;
  const int64_t ring = static_cast<int64_t>(ring_.size());
  Slot& slot = ring_[static_cast<size_t>(((index % ring) + ring) % ring)];
  if (slot.index != index) {
    if (slot.index > index) return false;  // late by more than the ring holds
    slot.index = index;
    slot.fine = 0;
    slot.bins.clear();
  }
  newest_slot_ = std::max(newest_slot_, index);
  uint64_t key = Key(FineBin(a), FineBin(b));
  auto it = slot.bins.find(key);
  if (it == slot.bins.end()) {
    if (slot.fine >= kFineBinsPerSlot) {
      key = kCoarseFlag | Key(CoarseBin(a), CoarseBin(b));
      it = slot.bins.find(key);
    } else {
      ++slot.fine;
    }
    if (it == slot.bins.end()) it = slot.bins.emplace(key, Bin{}).first;
  }
  Bin& bin = it->second;
  bin.weight += weight;
  bin.max_a = std::max(bin.max_a, a);
  bin.max_b = std::max(bin.max_b, b);
  return true;
}

std::vector<JointSize> JointWindow::Summarize(double now, const WindowGeometry& geometry) const {
  // Bins of all slots, merged by their largest sizes.
  std::vector<JointSize> out;
  const double window_start = now - geometry.window_seconds;
  for (const Slot& slot : ring_) {
    if (slot.index == INT64_MIN || slot.bins.empty()) continue;
    const double start = geometry.SlotStart(slot.index);
    if (start > now || start + geometry.slot_seconds <= window_start) continue;
    const double factor = std::exp(-geometry.lambda * (now - start));
    for (const auto& [key, bin] : slot.bins)
      out.push_back({bin.max_a, bin.max_b, bin.weight * factor});
  }
  std::sort(out.begin(), out.end(), [](const JointSize& x, const JointSize& y) {
    return x.a != y.a ? x.a < y.a : x.b < y.b;
  });
  size_t w = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    if (w > 0 && out[w - 1].a == out[r].a && out[w - 1].b == out[r].b) {
      out[w - 1].weight += out[r].weight;
    } else {
      out[w++] = out[r];
    }
  }
  out.resize(w);
  return out;
}

size_t JointWindow::MemoryBytes() const {
  size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Slot);
  for (const Slot& slot : ring_) {
    bytes += slot.bins.size() * (sizeof(uint64_t) + sizeof(Bin) + 2 * sizeof(void*)) +
             slot.bins.bucket_count() * sizeof(void*);
  }
  return bytes;
}

}  // namespace gearbox::internal
