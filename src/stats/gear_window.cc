#include "src/stats/gear_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gearbox::internal {

WindowGeometry WindowGeometry::Make(double window_seconds, int slots, double half_life_seconds) {
  WindowGeometry g;
  g.window_seconds = window_seconds;
  g.slots = slots;
  g.slot_seconds = window_seconds / slots;
  g.inverse_slot_seconds = 1.0 / g.slot_seconds;
  g.lambda = std::log(2.0) / half_life_seconds;
  return g;
}

int64_t WindowGeometry::SlotIndex(double t) const {
  return static_cast<int64_t>(std::floor(t * inverse_slot_seconds));
}

double WindowGeometry::SlotWeight(double t, int64_t index) const {
  return std::exp(lambda * (t - SlotStart(index)));
}

void GearWindow::Slot::Reset(int64_t new_index) {
  index = new_index;
  weight = unsplit_weight = unsplit_raw_weighted = split_weight = split_inv_raw_weighted = 0.0;
  samples = pad_samples = split_samples = unsplit_samples = 0;
  raw.Clear();
}

GearWindow::GearWindow(int64_t gear, double created_ts, const WindowGeometry& geometry)
    : gear_(gear),
      created_ts_(created_ts),
      last_hit_ts_(-std::numeric_limits<double>::infinity()),
      ring_(static_cast<size_t>(geometry.slots + 1)) {}

bool GearWindow::AddToSlot(int64_t index, double w, double t, int64_t raw, uint64_t count,
                           const WindowGeometry& geometry) {
  Slot* target = newest_;
  if (index != newest_slot_) {
    if (newest_slot_ != INT64_MIN && index < newest_slot_ - geometry.slots) return false;
    const int64_t ring = static_cast<int64_t>(ring_.size());
    target = &ring_[static_cast<size_t>(((index % ring) + ring) % ring)];
    if (target->index != index) {
      if (target->index > index) return false;  // late by more than the ring holds
      target->Reset(index);
    }
    if (index > newest_slot_) {
      newest_slot_ = index;
      newest_ = target;
    }
  }
  Slot& slot = *target;
  slot.weight += w;
  slot.samples += count;
  slot.raw.Add(raw, count);
  if (raw <= gear_) {
    if (raw < gear_) slot.pad_samples += count;
    slot.unsplit_weight += w;
    slot.unsplit_raw_weighted += w * static_cast<double>(raw);
    slot.unsplit_samples += count;
  } else {
    slot.split_weight += w;
    slot.split_inv_raw_weighted += w / static_cast<double>(raw);
    slot.split_samples += count;
  }
  last_hit_ts_ = std::max(last_hit_ts_, t);
  return true;
}

GearStats GearWindow::Summarize(double now, const WindowGeometry& geometry) const {
  GearStats s;
  s.gear = gear_;
  s.created_ts = created_ts_;
  s.last_hit_ts = last_hit_ts_;
  double split_weight = 0.0;
  double split_inv_raw_weighted = 0.0;
  const double window_start = now - geometry.window_seconds;
  for (const Slot& slot : ring_) {
    if (slot.index == INT64_MIN || slot.samples == 0) continue;
    const double start = geometry.SlotStart(slot.index);
    if (start > now || start + geometry.slot_seconds <= window_start) continue;
    const double factor = std::exp(-geometry.lambda * (now - start));
    s.weighted_hits += slot.weight * factor;
    split_weight += slot.split_weight * factor;
    split_inv_raw_weighted += slot.split_inv_raw_weighted * factor;
    s.unsplit_weight += slot.unsplit_weight * factor;
    s.unsplit_raw_weighted += slot.unsplit_raw_weighted * factor;
    s.sample_count += slot.samples;
    s.pad_sample_count += slot.pad_samples;
    s.split_sample_count += slot.split_samples;
    s.unsplit_sample_count += slot.unsplit_samples;
    s.raw_samples.Merge(slot.raw);
  }
  if (s.weighted_hits > 0) {
    const double g = static_cast<double>(gear_);
    const double pad_weighted = s.unsplit_weight - s.unsplit_raw_weighted / g;
    const double split_weighted = split_weight - g * split_inv_raw_weighted;
    s.avg_pad_ratio = std::max(0.0, pad_weighted / s.weighted_hits);
    s.avg_split_ratio = std::max(0.0, split_weighted / s.weighted_hits);
  }
  return s;
}

void GearWindow::AddWeightedSizes(double now, const WindowGeometry& geometry,
                                  std::map<int64_t, double>* weights) const {
  const double window_start = now - geometry.window_seconds;
  for (const Slot& slot : ring_) {
    if (slot.index == INT64_MIN || slot.samples == 0) continue;
    const double start = geometry.SlotStart(slot.index);
    if (start > now || start + geometry.slot_seconds <= window_start) continue;
    // Every sample of the slot gets the slot's mean weight.
    const double per_sample = slot.weight * std::exp(-geometry.lambda * (now - start)) /
                              static_cast<double>(slot.samples);
    // At the bin's largest value (a gear there covers the bin), but samples
    // this gear served padded are at most the gear.
    slot.raw.ForEachBinRange([&](int64_t low, int64_t high, uint64_t count) {
      (*weights)[low <= gear_ ? std::min(high, gear_) : high] +=
          per_sample * static_cast<double>(count);
    });
  }
}

void GearWindow::AddSlotSizes(double now, const WindowGeometry& geometry,
                              std::map<int64_t, std::map<int64_t, double>>* by_slot) const {
  const double window_start = now - geometry.window_seconds;
  for (const Slot& slot : ring_) {
    if (slot.index == INT64_MIN || slot.samples == 0) continue;
    const double start = geometry.SlotStart(slot.index);
    if (start > now || start + geometry.slot_seconds <= window_start) continue;
    const double per_sample = slot.weight / static_cast<double>(slot.samples);
    std::map<int64_t, double>& sizes = (*by_slot)[slot.index];
    slot.raw.ForEachBinRange([&](int64_t low, int64_t high, uint64_t count) {
      sizes[low <= gear_ ? std::min(high, gear_) : high] += per_sample * static_cast<double>(count);
    });
  }
}

double GearWindow::OldestSampleSlot(double now, const WindowGeometry& geometry) const {
  double oldest = std::numeric_limits<double>::infinity();
  const double window_start = now - geometry.window_seconds;
  for (const Slot& slot : ring_) {
    if (slot.index == INT64_MIN || slot.samples == 0) continue;
    const double start = geometry.SlotStart(slot.index);
    if (start > now || start + geometry.slot_seconds <= window_start) continue;
    oldest = std::min(oldest, start);
  }
  return oldest;
}

size_t GearWindow::MemoryBytes() const {
  size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Slot);
  for (const Slot& slot : ring_) bytes += slot.raw.MemoryBytes();
  return bytes;
}

}  // namespace gearbox::internal
