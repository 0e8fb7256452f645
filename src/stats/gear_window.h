// Bounded-memory window statistics for one gear.
//
// The window is kept as a ring of `window_slots + 1` time slots of width
// window_seconds / window_slots. Each slot keeps sums of
// exp(lambda * (t - slot_start)) (and the same weighted by pad and split
// ratios), so the decayed sums at any `now` are exact:
//   sum_e exp(-lambda (now - t_e)) = sum_slots exp(-lambda (now - start)) * slot_sum.
// A slot counts while it overlaps [now - window_seconds, now]: an event older
// than the window by less than one slot width may still count, with a weight
// below exp(-lambda * window_seconds). Raw sizes go to a per-slot
// RawSampleHistogram. Memory per gear is
//   (window_slots + 1) * (fixed fields + bins spanned by its raw sizes)
// whatever the request rate.
//
// Not thread-safe: the owner (WindowStore) serializes access.
#ifndef GEARBOX_SRC_STATS_GEAR_WINDOW_H_
#define GEARBOX_SRC_STATS_GEAR_WINDOW_H_

#include <cstdint>
#include <map>
#include <vector>

#include "gearbox/stats.h"

namespace gearbox::internal {

struct WindowGeometry {
  double window_seconds = 300.0;
  int slots = 30;
  double slot_seconds = 10.0;
  double inverse_slot_seconds = 0.1;
  double lambda = 0.0;  // ln 2 / half-life

  static WindowGeometry Make(double window_seconds, int slots, double half_life_seconds);
  int64_t SlotIndex(double t) const;
  double SlotStart(int64_t index) const { return static_cast<double>(index) * slot_seconds; }
  // exp(lambda * (t - start of slot `index`)): an event's weight relative to its slot.
  double SlotWeight(double t, int64_t index) const;
};

class GearWindow {
 public:
  GearWindow(int64_t gear, double created_ts, const WindowGeometry& geometry);
  GearWindow(const GearWindow&) = delete;  // newest_ points into ring_
  GearWindow& operator=(const GearWindow&) = delete;

  // Adds `count` samples of size `raw` at time t. Returns false (and adds
  // nothing) when t is older than the window of the newest event seen.
  bool Add(double t, int64_t raw, uint64_t count, const WindowGeometry& geometry) {
    const int64_t slot = geometry.SlotIndex(t);
    return AddToSlot(slot, geometry.SlotWeight(t, slot) * static_cast<double>(count), t, raw, count,
                     geometry);
  }
  // The same with the slot and the weight count * exp(lambda (t - slot
  // start)) computed once by the caller (shared by every dimension of an event).
  bool AddToSlot(int64_t slot_index, double weight, double t, int64_t raw, uint64_t count,
                 const WindowGeometry& geometry);

  // Statistics at `now` (hit_rate is left for the dimension to fill).
  GearStats Summarize(double now, const WindowGeometry& geometry) const;
  // Adds this gear's raw sizes with their decay weights at `now` to
  // `weights` (indexed by size: each bin's largest value, at most the gear
  // for the samples it served padded).
  void AddWeightedSizes(double now, const WindowGeometry& geometry,
                        std::map<int64_t, double>* weights) const;
  // The same per slot, each weight relative to its slot's start (no decay
  // to `now`): (*by_slot)[slot index][size] += weight.
  void AddSlotSizes(double now, const WindowGeometry& geometry,
                    std::map<int64_t, std::map<int64_t, double>>* by_slot) const;
  // Start of the oldest slot in the window at `now` that holds a sample
  // (+infinity when none).
  double OldestSampleSlot(double now, const WindowGeometry& geometry) const;

  int64_t gear() const { return gear_; }
  double created_ts() const { return created_ts_; }
  double last_hit_ts() const { return last_hit_ts_; }
  void ExtendProtection(double now) {
    if (now > last_hit_ts_) last_hit_ts_ = now;
  }
  size_t MemoryBytes() const;

 private:
  struct Slot {
    int64_t index = INT64_MIN;  // absolute slot index; INT64_MIN when empty
    // Sums of w = c * exp(lambda (t - start)). The pad and split sums are
    // derived at summary time, so folding an event needs no division:
    //   sum w (g - raw) / g = unsplit_weight - unsplit_raw_weighted / g
    //   sum w (raw - g) / raw = split_weight - g * split_inv_raw_weighted
    double weight = 0.0;
    double unsplit_weight = 0.0;          // raw <= gear
    double unsplit_raw_weighted = 0.0;    // sum of w * raw, raw <= gear
    double split_weight = 0.0;            // raw > gear
    double split_inv_raw_weighted = 0.0;  // sum of w / raw, raw > gear
    uint64_t samples = 0;
    uint64_t pad_samples = 0;
    uint64_t split_samples = 0;
    uint64_t unsplit_samples = 0;
    RawSampleHistogram raw;
    void Reset(int64_t new_index);
  };

  int64_t gear_;
  int64_t newest_slot_ = INT64_MIN;  // newest slot index ever written
  Slot* newest_ = nullptr;           // its slot in ring_ (events mostly land there)
  double created_ts_;
  double last_hit_ts_;
  std::vector<Slot> ring_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_GEAR_WINDOW_H_
