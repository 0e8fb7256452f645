#include "src/stats/window_store.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gearbox::internal {

WindowStore::GearState* WindowStore::DimensionStates::Find(int64_t gear) const {
  auto it = std::lower_bound(gears.begin(), gears.end(), gear);
  if (it == gears.end() || *it != gear) return nullptr;
  return states[static_cast<size_t>(it - gears.begin())].get();
}

WindowStore::GearState* WindowStore::DimensionStates::Insert(int64_t gear,
                                                             std::unique_ptr<GearState> state) {
  auto it = std::lower_bound(gears.begin(), gears.end(), gear);
  const size_t at = static_cast<size_t>(it - gears.begin());
  if (it != gears.end() && *it == gear) return states[at].get();
  gears.insert(it, gear);
  states.insert(states.begin() + static_cast<std::ptrdiff_t>(at), std::move(state));
  return states[at].get();
}

std::unique_ptr<WindowStore::GearState> WindowStore::DimensionStates::Erase(int64_t gear) {
  auto it = std::lower_bound(gears.begin(), gears.end(), gear);
  if (it == gears.end() || *it != gear) return nullptr;
  const size_t at = static_cast<size_t>(it - gears.begin());
  std::unique_ptr<GearState> out = std::move(states[at]);
  gears.erase(it);
  states.erase(states.begin() + static_cast<std::ptrdiff_t>(at));
  return out;
}

WindowStore::WindowStore(const GearSet& initial, const AdaptiveOptions& options, double now)
    : geometry_(WindowGeometry::Make(options.window_seconds, options.window_slots,
                                     options.half_life_seconds)),
      dimensions_(initial.num_dimensions()),
      removed_(initial.num_dimensions()) {
  if (initial.scheme() != GearScheme::kIndependent) {
    joint_ = std::make_unique<JointWindow>(geometry_);
    for (const GearCombination& c : initial.combinations()) combinations_[c].created = now;
  }
  for (int d = 0; d < initial.num_dimensions(); ++d) {
    names_.push_back(initial.dimension(d).name);
    splittable_.push_back(initial.dimension(d).splittable);
    drifts_.emplace_back(options.window_seconds / kSizeDriftBinsPerWindow, kSizeDriftBins);
    histories_.emplace_back(options.window_seconds / kSizeDriftBinsPerWindow, kSizeDriftBins);
    for (int64_t gear : initial.gears(d)) {
      dimensions_[d].Insert(gear,
                            std::make_unique<GearState>(gear, now, /*from_start=*/true, geometry_));
    }
  }
}

void WindowStore::Fold(const int64_t* e) {
  const int n = static_cast<int>(dimensions_.size());
  int64_t raw[kMaxDimensions];
  int64_t gear[kMaxDimensions];
  for (int d = 0; d < n; ++d) {
    raw[d] = EventWords::Raw(e, d);
    gear[d] = EventWords::Gear(e, d);
  }
  FoldEvent(EventWords::Time(e), EventWords::Count(e), raw, gear);
}

void WindowStore::FoldEvent(double time, int64_t count, const int64_t* raw, const int64_t* gear) {
  if (!(std::fabs(time) <= 1e15)) {  // also catches NaN
    ++counters_.bad_time;
    return;
  }
  bool folded = false;
  bool evicted = false;
  bool late = false;
  // Slot and decay weight are shared by every dimension of the event.
  const int64_t slot = geometry_.SlotIndex(time);
  const double weight = geometry_.SlotWeight(time, slot) * static_cast<double>(count);
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    drifts_[d].Add(time, raw[d], count);
    histories_[d].Add(time, raw[d], gear[d], count);
    GearState* state = dimensions_[d].Find(gear[d]);
    if (state == nullptr) {
      evicted = true;
      continue;
    }
    state->last_event = std::max(state->last_event, time);
    if (state->window.AddToSlot(slot, weight, time, raw[d], static_cast<uint64_t>(count),
                                geometry_)) {
      folded = true;
    } else {
      late = true;
    }
  }
  if (folded && joint_ != nullptr) {
    // The variant's shape: a split's full chunk (raw above a splittable
    // gear) ran at the gear; anything else at its raw size.
    int64_t extent[kJointDimensions];
    for (int d = 0; d < kJointDimensions; ++d) {
      extent[d] = raw[d] > gear[d] && splittable_[static_cast<size_t>(d)] ? gear[d] : raw[d];
    }
    joint_->AddToSlot(slot, weight, extent[0], extent[1]);
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

bool WindowStore::AttachKeys(std::span<const int64_t> gears, std::span<const GraphKey> keys,
                             double now) {
  bool all_active = true;
  if (joint_ != nullptr) {
    auto it = gears.size() == kJointDimensions ? combinations_.find({gears[0], gears[1]})
                                               : combinations_.end();
    if (it == combinations_.end()) return false;  // attached nowhere yet: nothing to forget
    it->second.keys.insert(keys.begin(), keys.end());
  }
  for (size_t d = 0; d < dimensions_.size() && d < gears.size(); ++d) {
    GearState* state = dimensions_[d].Find(gears[d]);
    if (state == nullptr) {
      all_active = false;
      continue;
    }
    state->cleanup_keys.insert(keys.begin(), keys.end());
    state->last_attach = std::max(state->last_attach, now);
  }
  if (!all_active) ForgetKeys({keys.begin(), keys.end()});  // the caller releases them now
  return all_active;
}

void WindowStore::ForgetKeys(const std::unordered_set<GraphKey>& keys) {
  if (keys.empty()) return;
  for (auto& dim : dimensions_) {
    for (auto& state : dim.states) {
      for (GraphKey k : keys) state->cleanup_keys.erase(k);
    }
  }
  for (auto& [combination, state] : combinations_) {
    for (GraphKey k : keys) state.keys.erase(k);
  }
}

WindowStats WindowStore::Summarize(double now, const GearSet& current, bool with_sizes,
                                   bool with_slots) const {
  WindowStats stats;
  stats.now = now;
  for (int d = 0; d < current.num_dimensions(); ++d) {
    DimensionStats& ds = stats.dimensions.emplace_back();
    ds.name = current.dimension(d).name;
    for (const auto& [gear, when] : removed_[d]) ds.recently_removed.emplace_back(gear, when);
    const SizeDrift::Estimate drift = drifts_[static_cast<size_t>(d)].At(now);
    ds.size_drift_per_second = drift.per_second;
    ds.size_drift_agreement = drift.agreement;
    ds.size_drift_bins = drift.bins;
    if (with_sizes) {
      std::map<int64_t, double> weights;
      double oldest = std::numeric_limits<double>::infinity();
      for (const auto& state : dimensions_[d].states) {
        state->window.AddWeightedSizes(now, geometry_, &weights);
        oldest = std::min(oldest, state->window.OldestSampleSlot(now, geometry_));
      }
      for (const auto& [size, weight] : weights) ds.sizes.push_back({size, weight});
      ds.observed_seconds =
          std::isfinite(oldest) ? std::clamp(now - oldest, 0.0, geometry_.window_seconds) : 0.0;
      // A fleet's merged window has no history: its planning stays on the window.
      if (!with_slots) ds.size_history = histories_[static_cast<size_t>(d)].Bins(now);
    }
    if (with_slots) {
      ds.drift_bins = drifts_[static_cast<size_t>(d)].Bins(now);
      std::map<int64_t, std::map<int64_t, double>> by_slot;
      for (const auto& state : dimensions_[d].states) {
        state->window.AddSlotSizes(now, geometry_, &by_slot);
      }
      for (const auto& [slot, sizes] : by_slot) {
        SlotSizes& out = ds.slot_sizes.emplace_back();
        out.slot = slot;
        for (const auto& [size, weight] : sizes) out.sizes.push_back({size, weight});
      }
    }
    for (int64_t gear : current.gears(d)) {
      const GearState* state = dimensions_[d].Find(gear);
      if (state == nullptr) {
        GearStats empty;
        empty.gear = gear;
        ds.gears.push_back(std::move(empty));
        continue;
      }
      ds.gears.push_back(state->window.Summarize(now, geometry_));
      ds.gears.back().initial = state->initial;
      ds.gears.back().readded = state->readded;
    }
    FinalizeDimensionStats(&ds);
  }
  if (joint_ != nullptr) {
    if (with_sizes) stats.joint_sizes = joint_->Summarize(now, geometry_);
    for (const auto& [c, state] : combinations_) stats.combinations.emplace_back(c, state.created);
    for (const auto& [c, when] : removed_combinations_)
      stats.recently_removed_combinations.emplace_back(c, when);
  }
  return stats;
}

std::vector<GraphKey> WindowStore::ApplyCommit(const std::vector<std::vector<int64_t>>& removed,
                                               const std::vector<std::vector<int64_t>>& added,
                                               double now,
                                               const std::vector<GearCombination>* combinations) {
  std::unordered_set<GraphKey> keys;
  if (joint_ != nullptr) {
    // Combinations that go: replaced by the new list, or on an evicted gear.
    auto evicted = [&](const GearCombination& c) {
      for (size_t d = 0; d < kJointDimensions && d < removed.size(); ++d) {
        if (std::find(removed[d].begin(), removed[d].end(), c[d]) != removed[d].end()) return true;
      }
      return false;
    };
    for (auto it = combinations_.begin(); it != combinations_.end();) {
      const bool kept = combinations != nullptr ? std::binary_search(combinations->begin(),
                                                                     combinations->end(), it->first)
                                                : !evicted(it->first);
      if (kept) {
        ++it;
        continue;
      }
      keys.insert(it->second.keys.begin(), it->second.keys.end());
      removed_combinations_[it->first] = now;
      it = combinations_.erase(it);
    }
    if (combinations != nullptr) {
      for (const GearCombination& c : *combinations) {
        if (combinations_.count(c) == 0) {
          combinations_[c].created = now;
          removed_combinations_.erase(c);
        }
      }
    }
    for (auto it = removed_combinations_.begin(); it != removed_combinations_.end();) {
      it = now - it->second > 3600.0 ? removed_combinations_.erase(it) : std::next(it);
    }
  }
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    if (d < removed.size()) {
      for (int64_t gear : removed[d]) {
        std::unique_ptr<GearState> state = dimensions_[d].Erase(gear);
        if (state == nullptr) continue;
        keys.insert(state->cleanup_keys.begin(), state->cleanup_keys.end());
        removed_[d][gear] = now;
      }
      for (auto it = removed_[d].begin(); it != removed_[d].end();) {
        it = now - it->second > 3600.0 ? removed_[d].erase(it) : std::next(it);
      }
    }
    if (d < added.size()) {
      for (int64_t gear : added[d]) {
        const bool readded = removed_[d].erase(gear) > 0;
        if (dimensions_[d].Find(gear) == nullptr) {
          dimensions_[d]
              .Insert(gear, std::make_unique<GearState>(gear, now, /*from_start=*/false, geometry_))
              ->readded = readded;
        }
      }
    }
  }
  ForgetKeys(keys);
  std::vector<GraphKey> out(keys.begin(), keys.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int64_t>> WindowStore::TakeIdleKeys(double now, double idle_seconds,
                                                            std::vector<GraphKey>* keys) {
  std::vector<std::vector<int64_t>> idle(dimensions_.size());
  std::unordered_set<GraphKey> taken;
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    const DimensionStates& dim = dimensions_[d];
    for (size_t i = 0; i < dim.states.size(); ++i) {
      const GearState& state = *dim.states[i];
      if (state.cleanup_keys.empty()) continue;
      if (now - std::max(state.last_event, state.last_attach) < idle_seconds) continue;
      idle[d].push_back(dim.gears[i]);
      taken.insert(state.cleanup_keys.begin(), state.cleanup_keys.end());
    }
  }
  ForgetKeys(taken);
  const size_t from = keys->size();
  keys->insert(keys->end(), taken.begin(), taken.end());
  std::sort(keys->begin() + static_cast<std::ptrdiff_t>(from), keys->end());
  return idle;
}

void WindowStore::ExtendProtection(int dimension, int64_t gear, double now) {
  if (GearState* state = dimensions_[dimension].Find(gear)) state->window.ExtendProtection(now);
}

size_t WindowStore::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& dim : dimensions_) {
    for (const auto& state : dim.states) {
      bytes += state->window.MemoryBytes() + state->cleanup_keys.size() * sizeof(GraphKey);
    }
  }
  for (const SizeDrift& drift : drifts_) bytes += drift.MemoryBytes();
  for (const SizeHistory& history : histories_) bytes += history.MemoryBytes();
  if (joint_ != nullptr) bytes += joint_->MemoryBytes();
  return bytes;
}

size_t WindowStore::cleanup_key_count() const {
  std::unordered_set<GraphKey> keys;
  for (const auto& dim : dimensions_) {
    for (const auto& state : dim.states) {
      keys.insert(state->cleanup_keys.begin(), state->cleanup_keys.end());
    }
  }
  return keys.size();
}

}  // namespace gearbox::internal
