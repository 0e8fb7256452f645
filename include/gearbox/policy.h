// The update policy: a pure function from (gear set, window statistics,
// memory state, options, now) to the next gear set and its explanation.
// The runtime, the worker and the replay tool all call this one function.
#ifndef GEARBOX_POLICY_H_
#define GEARBOX_POLICY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "gearbox/export.h"
#include "gearbox/gear_set.h"
#include "gearbox/options.h"
#include "gearbox/stats.h"
#include "gearbox/update_record.h"

namespace gearbox {

struct UpdateDecision {
  std::vector<std::vector<int64_t>> next_gears;  // per dimension, ascending
  // Joint and sparse gear sets: the next compiled combinations (sorted).
  std::vector<GearCombination> next_combinations;
  std::vector<std::vector<int64_t>> removed;
  std::vector<std::vector<int64_t>> added;
  // Gears kept by the replacement-loss or hysteresis filter: their
  // protection is extended to `now`.
  std::vector<std::pair<int, int64_t>> protect;
  // Filled except sequence, trigger, versions, cleanup_keys and memory,
  // which the caller knows.
  UpdateRecord record;
  bool changed = false;
};

// score = weight_hit * hit_rate - weight_pad * avg_pad - weight_split * avg_split
GEARBOX_EXPORT double GearScore(const GearStats& stats, const AdaptiveOptions& options);

// Mean loss of `stats`' raw samples if `gear` left `gears` (ascending): each
// sample moves to the smallest remaining gear >= it (loss = pad ratio there),
// or splits on the largest (loss = split ratio). Returns (loss, the gear the
// smallest samples move to). Unweighted, as the seed.
GEARBOX_EXPORT std::pair<double, int64_t> ReplacementLoss(const GearStats& stats,
                                                          const std::vector<int64_t>& gears);

// The seed's policy (§5-§8) with the fixes described in docs/POLICY.md:
//  1. score every gear; 2. per dimension, evict at most one: skip the max,
//  recently used/created gears and dimensions at their minimum; take the
//  lowest (zero-use first, then below min_samples_per_gear, then by score);
//  keep it if its replacement loss is too high or if the addition rule would
//  undo the eviction (hysteresis); 3. propose additions from pad (any gear)
//  and split (max gear), candidate = median raw size, skip duplicates, order
//  by pressure, cap per dimension; under memory pressure at most as many
//  additions as evictions.
// The static policy: the gears as they are, the record says so.
GEARBOX_EXPORT UpdateDecision DecideStatic(const GearSet& gears, const MemoryState& memory,
                                           double now);

GEARBOX_EXPORT UpdateDecision DecideUpdate(const GearSet& gears, const WindowStats& stats,
                                           const MemoryState& memory,
                                           const AdaptiveOptions& options, double now);

}  // namespace gearbox

#endif  // GEARBOX_POLICY_H_
