// Shared statistics: every replica of a fleet plans from the fleet's traffic.
//
// At each update (RuntimeOptions::merge_window_stats = sync->Hook()) a
// replica
//  1. pushes each window slot it has not pushed yet and that ended at least
//     push_lag_seconds ago: per dimension its sizes with their weights
//     relative to the slot's start, as commutative float increments into the
//     slot's bucket hash (one per slot: the buckets of all replicas line up
//     in time), once per (replica, slot): a retried or duplicated push
//     changes nothing, a lost one only leaves that slot out;
//  2. reads the buckets of the window (one pipelined round trip) and merges
//     them, decayed to `now` exactly as the local window is, with its own
//     slots not pushed yet (the current one); the merged sizes replace the
//     local `sizes` and `observed_seconds` the replan policy plans from, and
//     a gear with no local request in the window whose range the fleet's
//     sizes fall in is marked `fleet_traffic` (GearStats::carries_traffic:
//     the fleet uses it, so the replan policy's lifetime protection and its
//     count of gears in use hold for it as for one runtime serving the whole
//     traffic; its sample counts stay this replica's); the recent slots the others have
//     not pushed yet are filled (FleetStatsOptions::fill_recent_seconds);
//  3. does the same with the size drift's bins (DimensionStats::drift_bins:
//     integer counts by size class, one bucket per bin of the last six
//     windows) and re-estimates the drift (size_drift_*) from the fleet's
//     bins, so a drift is seen as one runtime serving the whole traffic
//     sees it (a replica's share of a bin may be too thin for a median).
// With the store unreachable (or a bucket rejected) the local statistics
// are used: the runtime keeps planning alone and resynchronises when the
// store returns (slots not pushed yet are pushed then, if still in the window).
//
// Weights: by default the fleet's whole traffic (kFleetTotal): every replica
// plans the gears one runtime serving all of it would (the padding a gear
// saves is fleet-wide; so is its compile once artifacts are shared). With
// kPerReplicaMean each bucket is divided by the replicas that pushed it: a
// replica plans for its share of the traffic with the fleet's distribution
// (fewer gears, each replica paying its own compiles). docs/FLEET.md has
// both measured.
#ifndef GEARBOX_FLEET_STATS_H_
#define GEARBOX_FLEET_STATS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/fleet.h"
#include "gearbox/log.h"
#include "gearbox/options.h"
#include "gearbox/stats.h"

namespace gearbox {

enum class FleetWeighting {
  kPerReplicaMean,  // each bucket divided by the replicas that pushed it
  kFleetTotal,      // the fleet's whole traffic
};

struct FleetStatsOptions {
  // Required: this replica's name in the fleet, unique per replica (1..64 of
  // A-Z a-z 0-9 . _ -). Two replicas with one id would drop each other's pushes.
  std::string replica_id;
  // Seconds after a slot's end before it is pushed (events recorded late
  // still land in it locally first). 0..window_seconds.
  double push_lag_seconds = 2.0;
  FleetWeighting weighting = FleetWeighting::kFleetTotal;
  // Buckets and push markers expire window_seconds + one slot + this many
  // seconds after their last push (> 0): a bucket outlives the window it
  // counts in, and nothing is left behind by a fleet that stopped.
  double extra_ttl_seconds = 60.0;
  // kFleetTotal: the newest slots of the window hold fewer replicas than
  // the fleet (the others push at their own updates, later; this
  // replica's own unpushed slots hold only it). A slot newer than the
  // newest one holding the most replicas, started within this many seconds
  // of now, is filled: the missing replicas' weight (its own weight per
  // replica times the replicas missing) with the distribution of the
  // complete slots. Without it the window underweighs its recent traffic
  // and the plan has fewer gears than one runtime serving the whole
  // traffic would (docs/FLEET.md measures it). 0: off. 0..window_seconds.
  double fill_recent_seconds = 90.0;
  // The replicas the fleet has, when known (kFleetTotal; 0: unknown). While
  // no bucket of the fleet is in the window (the fleet's start: nobody has
  // pushed a complete slot yet) the local window's weights are multiplied
  // by it, so the first plan weighs the traffic as the fleet's, not as one
  // replica's share of it. 0..1e6.
  double expected_replicas = 0;
};

// A bucket as read back: how many replicas pushed it and, per dimension,
// the sizes with their weights (relative to the slot's start), ascending.
struct FleetStatsBucket {
  double replicas = 0.0;
  std::vector<std::vector<WeightedSize>> sizes;  // [dimension]
};
// Validates and decodes a bucket hash: field "n" (replicas, 1..1e6) and
// fields "<dimension>:<size>" (dimension 0..num_dimensions-1, size
// 1..2^40, decimal without sign or leading zeros) with a weight 0..1e15;
// anything else (an unknown field, a bad number, a missing "n") is an error
// naming the field. Pure; fuzzed.
GEARBOX_EXPORT absl::StatusOr<FleetStatsBucket> DecodeFleetStatsBucket(
    const FleetHash& hash, int num_dimensions, const FleetValueLimits& limits = {});

// A drift bin as read back: how many replicas pushed it and, per
// dimension, its samples by size class (ascending).
struct FleetDriftBucket {
  double replicas = 0.0;
  std::vector<std::vector<std::pair<int32_t, uint64_t>>> counts;  // [dimension]
};
// Validates and decodes a drift bin's hash: field "n" (replicas, 1..1e6)
// and fields "<dimension>:<size class>" (dimension 0..num_dimensions-1,
// class 0..kSizeDriftClasses-1, decimal without sign or leading zeros) with
// an integer count 0..2^52; anything else is an error naming the field.
// Pure; fuzzed.
GEARBOX_EXPORT absl::StatusOr<FleetDriftBucket> DecodeFleetDriftBucket(
    const FleetHash& hash, int num_dimensions, const FleetValueLimits& limits = {});

struct FleetStatsCounters {
  uint64_t merges = 0;             // updates whose statistics included the fleet's
  uint64_t local_only = 0;         // ... that used the local statistics (store failed)
  uint64_t slots_pushed = 0;       // slot pushes the store applied
  uint64_t slots_duplicate = 0;    // ... it had already (a retry: nothing changed)
  uint64_t push_failures = 0;      // pushes that failed (retried at the next update)
  uint64_t read_failures = 0;      // window reads that failed
  uint64_t buckets_rejected = 0;   // buckets that failed validation (left out, logged)
  uint64_t slots_filled = 0;       // recent slots filled to the fleet's size (fill_recent_seconds)
  double fleet_replicas_seen = 0;  // replicas in the newest bucket read (0: none)
  uint64_t drift_bins_pushed = 0;  // drift bin pushes the store applied (or had already)
  uint64_t drift_merges = 0;       // updates whose drift was estimated from the fleet's bins
};

// Thread-safety: Merge may be called from any thread; calls serialize on
// one internal mutex, held across the store calls (the runtime's update
// path already serializes them). counters() may be called from any thread
// and waits for a Merge in progress. The store must outlive this object.
class GEARBOX_EXPORT FleetStatsSync {
 public:
  // `dimensions`: the runtime's dimension names, in gear-set order.
  // Errors name the bad field (fingerprint, replica_id, options).
  static absl::StatusOr<std::unique_ptr<FleetStatsSync>> Create(
      FleetStore* store, const FleetFingerprint& fingerprint, std::vector<std::string> dimensions,
      const AdaptiveOptions& adaptive, FleetStatsOptions options, LogSink log = nullptr);
  ~FleetStatsSync();

  // Pushes, reads and merges as above; on any store failure leaves `stats`
  // as it was (local).
  void Merge(double now, WindowStats* stats);
  // A RuntimeOptions::merge_window_stats calling Merge (this must outlive the runtime).
  std::function<void(double, WindowStats*)> Hook();

  FleetStatsCounters counters() const;
  // The bucket key of a slot, and of a drift bin (for tests and docs).
  std::string BucketKey(int64_t slot) const;
  std::string DriftBucketKey(int64_t bin) const;

 private:
  class Impl;
  explicit FleetStatsSync(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gearbox

#endif  // GEARBOX_FLEET_STATS_H_
