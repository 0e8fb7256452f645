// WindowStore: the window statistics of every active gear, per dimension,
// plus each gear's cleanup keys (seed: GearRuntimeState).
//
// Not thread-safe: the runtime guards it with its stats mutex.
#ifndef GEARBOX_SRC_STATS_WINDOW_STORE_H_
#define GEARBOX_SRC_STATS_WINDOW_STORE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gearbox/gear_set.h"
#include "gearbox/graph_key.h"
#include "gearbox/options.h"
#include "gearbox/stats.h"
#include "src/stats/event_log.h"
#include "src/stats/gear_window.h"
#include "src/stats/joint_window.h"
#include "src/stats/size_drift.h"
#include "src/stats/size_history.h"

namespace gearbox::internal {

struct FoldCounters {
  uint64_t events = 0;        // events folded into a gear's window
  uint64_t variants = 0;      // the same, counting each event's variant count
  uint64_t evicted_gear = 0;  // events for a gear evicted before they were folded
  uint64_t too_late = 0;      // events older than the window ring
  uint64_t bad_time = 0;      // events with a non-finite or absurd time (|t| > 1e15 s)
};

class WindowStore {
 public:
  WindowStore(const GearSet& initial, const AdaptiveOptions& options, double now);

  // Folds one recorded event (EventLog's layout, EventWords).
  void Fold(const int64_t* event);
  // Folds one event: per dimension, `raw` served by `gear`.
  void FoldEvent(double time, int64_t count, const int64_t* raw, const int64_t* gear);

  // Attaches keys to the gear of each dimension (and, for a joint or sparse
  // gear set, to the combination). Returns false when one of those gears, or
  // the combination, is no longer active: its keys must then be released at
  // once (the variant can never run again on the current gears). `now`:
  // when they were attached (a graph just compiled is not idle, though the
  // event of the run that compiled it may not be folded yet).
  bool AttachKeys(std::span<const int64_t> gears, std::span<const GraphKey> keys, double now);

  // `with_sizes`: also fill each dimension's weighted size distribution;
  // `with_slots`: and its per-slot sizes (DimensionStats::slot_sizes).
  WindowStats Summarize(double now, const GearSet& current, bool with_sizes = false,
                        bool with_slots = false) const;

  // Applies a committed update: windows for added gears (created at `now`),
  // removal of evicted gears, and for a joint or sparse gear set the new
  // combinations (null: unchanged but for those of evicted gears). Returns
  // the cleanup keys of the evicted gears and combinations (and forgets them
  // everywhere else).
  std::vector<GraphKey> ApplyCommit(const std::vector<std::vector<int64_t>>& removed,
                                    const std::vector<std::vector<int64_t>>& added, double now,
                                    const std::vector<GearCombination>* combinations = nullptr);
  void ExtendProtection(int dimension, int64_t gear, double now);

  // The graphs of idle gears (ReplanOptions::idle_graph_release_seconds):
  // for every active gear holding cleanup keys whose last folded event and
  // last attached key are both at least `idle_seconds` before `now`, takes
  // its keys (and forgets them everywhere else: a combination's graph goes
  // with either of its gears). The gear stays, with its window. Appends the
  // keys to `*keys` and returns the gears, per dimension.
  std::vector<std::vector<int64_t>> TakeIdleKeys(double now, double idle_seconds,
                                                 std::vector<GraphKey>* keys);

  const FoldCounters& counters() const { return counters_; }
  size_t MemoryBytes() const;
  size_t cleanup_key_count() const;

 private:
  struct GearState {
    GearState(int64_t gear, double created, bool from_start, const WindowGeometry& geometry)
        : window(gear, created, geometry), initial(from_start) {}
    GearWindow window;
    bool initial;          // part of the runtime's initial gear set
    bool readded = false;  // added again within an hour of its eviction (GearStats::readded)
    std::unordered_set<GraphKey> cleanup_keys;
    // The newest event folded for this gear, and the last AttachKeys (for
    // TakeIdleKeys; unlike the window's last_hit_ts, protection never moves them).
    double last_event = -std::numeric_limits<double>::infinity();
    double last_attach = -std::numeric_limits<double>::infinity();
  };
  // Ascending by gear (at most kMaxGearsPerDimension): a binary search beats
  // hashing here, and folding is the hottest loop of the update path.
  struct DimensionStates {
    std::vector<int64_t> gears;
    std::vector<std::unique_ptr<GearState>> states;
    GearState* Find(int64_t gear) const;
    GearState* Insert(int64_t gear, std::unique_ptr<GearState> state);  // no-op if present
    std::unique_ptr<GearState> Erase(int64_t gear);
  };

  // Forgets `keys` in every gear and combination.
  void ForgetKeys(const std::unordered_set<GraphKey>& keys);

  WindowGeometry geometry_;
  std::vector<DimensionStates> dimensions_;
  std::vector<bool> splittable_;
  std::vector<SizeDrift> drifts_;       // per dimension: whether its raw sizes drift
  std::vector<SizeHistory> histories_;  // per dimension: the sizes of the last six windows
  // Joint and sparse gear sets: the shapes window, the active combinations
  // and their cleanup keys (also attached to their gears).
  std::unique_ptr<JointWindow> joint_;
  struct CombinationState {
    double created = 0.0;
    std::unordered_set<GraphKey> keys;
  };
  std::map<GearCombination, CombinationState> combinations_;
  std::map<GearCombination, double> removed_combinations_;  // pruned after an hour
  // Per dimension: evicted gears and when, pruned after an hour.
  std::vector<std::map<int64_t, double>> removed_;
  std::vector<std::string> names_;
  FoldCounters counters_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_WINDOW_STORE_H_
