#include "src/stats/window_store.h"

#include <algorithm>

namespace gearbox::internal {

WindowStore::WindowStore(const GearSet& initial, const AdaptiveOptions& options, double now)
    : geometry_(WindowGeometry::Make(options.window_seconds, options.window_slots,
                                     options.half_life_seconds)),
      dimensions_(initial.num_dimensions()) {
  for (int d = 0; d < initial.num_dimensions(); ++d) {
    names_.push_back(initial.dimension(d).name);
    for (int64_t gear : initial.gears(d)) {
      dimensions_[d].emplace(gear, std::make_unique<GearState>(gear, now, geometry_));
    }
  }
}

void WindowStore::Fold(const EventBuffer& buffer) {
  const int n = static_cast<int>(dimensions_.size());
  int64_t raw[kMaxDimensions];
  int64_t gear[kMaxDimensions];
  for (size_t i = 0; i < buffer.size(); ++i) {
    const int64_t* e = buffer.event(i);
    for (int d = 0; d < n; ++d) {
      raw[d] = EventBuffer::Raw(e, d);
      gear[d] = EventBuffer::Gear(e, d);
    }
    FoldEvent(EventBuffer::Time(e), EventBuffer::Count(e), raw, gear);
  }
}

void WindowStore::FoldEvent(double time, int64_t count, const int64_t* raw, const int64_t* gear) {
  bool folded = false;
  bool evicted = false;
  bool late = false;
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    auto it = dimensions_[d].find(gear[d]);
    if (it == dimensions_[d].end()) {
      evicted = true;
      continue;
    }
    if (it->second->window.Add(time, raw[d], static_cast<uint64_t>(count), geometry_)) {
      folded = true;
    } else {
      late = true;
    }
  }
  // An event is accounted once: folded if any dimension took it.
  if (folded) {
    ++counters_.events;
    counters_.variants += static_cast<uint64_t>(count);
  } else if (late) {
    ++counters_.too_late;
  } else if (evicted) {
    ++counters_.evicted_gear;
  }
}

bool WindowStore::AttachKeys(std::span<const int64_t> gears, std::span<const GraphKey> keys) {
  bool all_active = true;
  for (size_t d = 0; d < dimensions_.size() && d < gears.size(); ++d) {
    auto it = dimensions_[d].find(gears[d]);
    if (it == dimensions_[d].end()) {
      all_active = false;
      continue;
    }
    it->second->cleanup_keys.insert(keys.begin(), keys.end());
  }
  if (!all_active) {
    // Forget them everywhere: the caller releases them now.
    for (auto& dim : dimensions_) {
      for (auto& [g, state] : dim) {
        for (GraphKey k : keys) state->cleanup_keys.erase(k);
      }
    }
  }
  return all_active;
}

WindowStats WindowStore::Summarize(double now, const GearSet& current) const {
  WindowStats stats;
  stats.now = now;
  for (int d = 0; d < current.num_dimensions(); ++d) {
    DimensionStats& ds = stats.dimensions.emplace_back();
    ds.name = current.dimension(d).name;
    for (int64_t gear : current.gears(d)) {
      auto it = dimensions_[d].find(gear);
      if (it == dimensions_[d].end()) {
        GearStats empty;
        empty.gear = gear;
        ds.gears.push_back(std::move(empty));
        continue;
      }
      ds.gears.push_back(it->second->window.Summarize(now, geometry_));
    }
    FinalizeDimensionStats(&ds);
  }
  return stats;
}

std::vector<GraphKey> WindowStore::ApplyCommit(const std::vector<std::vector<int64_t>>& removed,
                                               const std::vector<std::vector<int64_t>>& added,
                                               double now) {
  std::unordered_set<GraphKey> keys;
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    if (d < removed.size()) {
      for (int64_t gear : removed[d]) {
        auto it = dimensions_[d].find(gear);
        if (it == dimensions_[d].end()) continue;
        keys.insert(it->second->cleanup_keys.begin(), it->second->cleanup_keys.end());
        dimensions_[d].erase(it);
      }
    }
    if (d < added.size()) {
      for (int64_t gear : added[d]) {
        dimensions_[d].try_emplace(gear, std::make_unique<GearState>(gear, now, geometry_));
      }
    }
  }
  if (!keys.empty()) {
    for (auto& dim : dimensions_) {
      for (auto& [g, state] : dim) {
        for (GraphKey k : keys) state->cleanup_keys.erase(k);
      }
    }
  }
  std::vector<GraphKey> out(keys.begin(), keys.end());
  std::sort(out.begin(), out.end());
  return out;
}

void WindowStore::ExtendProtection(int dimension, int64_t gear, double now) {
  auto it = dimensions_[dimension].find(gear);
  if (it != dimensions_[dimension].end()) it->second->window.ExtendProtection(now);
}

size_t WindowStore::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& dim : dimensions_) {
    for (const auto& [g, state] : dim) {
      bytes += state->window.MemoryBytes() + state->cleanup_keys.size() * sizeof(GraphKey);
    }
  }
  return bytes;
}

size_t WindowStore::cleanup_key_count() const {
  std::unordered_set<GraphKey> keys;
  for (const auto& dim : dimensions_) {
    for (const auto& [g, state] : dim) keys.insert(state->cleanup_keys.begin(), state->cleanup_keys.end());
  }
  return keys.size();
}

}  // namespace gearbox::internal
