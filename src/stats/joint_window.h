// JointWindow: the decayed window of executed variant shapes over two
// dimensions together, for joint and sparse gear sets (their policy decides
// which combinations to compile, which per-dimension statistics cannot
// tell).
//
// Shapes are binned per dimension: exact below 64, then 16 bins per octave
// (each under 1/16 of its values wide); a bin remembers the largest size it
// saw, so a combination planned at a bin's corner covers every shape in it.
// A slot holds at most kFineBinsPerSlot fine bins; beyond that, new shapes
// go to power-of-two bins (at most 64 x 64 more), so memory is bounded
// whatever the traffic: under (window_slots + 1) * 6,144 bins of 48 bytes.
// Decay as GearWindow: per slot, sums of count * exp(lambda (t - slot start)).
//
// Not thread-safe: the owner (WindowStore) serializes access.
#ifndef GEARBOX_SRC_STATS_JOINT_WINDOW_H_
#define GEARBOX_SRC_STATS_JOINT_WINDOW_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gearbox/stats.h"
#include "src/stats/gear_window.h"

namespace gearbox::internal {

class JointWindow {
 public:
  static constexpr size_t kFineBinsPerSlot = 2048;

  explicit JointWindow(const WindowGeometry& geometry);

  // Adds variants of shape (a, b) with the slot and the decay weight (count
  // * exp(lambda (t - slot start))) the caller computed (WindowStore::FoldEvent).
  // Returns false for a slot older than the window of the newest one seen.
  bool AddToSlot(int64_t slot_index, double weight, int64_t a, int64_t b);

  // The window's shapes at `now` with their decayed weights, one per bin at
  // the bin's largest sizes, ascending by (a, b).
  std::vector<JointSize> Summarize(double now, const WindowGeometry& geometry) const;

  size_t MemoryBytes() const;

  // The bin a size falls in (exposed for tests).
  static uint32_t FineBin(int64_t size);
  static uint32_t CoarseBin(int64_t size);

 private:
  struct Bin {
    double weight = 0.0;
    int64_t max_a = 0;
    int64_t max_b = 0;
  };
  struct Slot {
    int64_t index = INT64_MIN;
    size_t fine = 0;  // fine bins in `bins`
    std::unordered_map<uint64_t, Bin> bins;
  };

  int64_t newest_slot_ = INT64_MIN;
  int slots_;
  std::vector<Slot> ring_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_JOINT_WINDOW_H_
