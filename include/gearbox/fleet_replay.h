// Fleet replay: one trace split across N simulated replicas in one process,
// each with its own runtime (and simulated compiled graphs) on the shared
// virtual clock, sharing statistics through one fleet store
// (docs/FLEET.md, "Fleet replay").
//
// Rows go, in time order, to the active replicas: round-robin, or by a hash
// of one column's value (requests of one size class stay on one replica).
// Before each row every replica runs its worker's checks due by then
// (ReplaySchedule, as the single replay does). The last replica may join
// late (created at `join_at`, rows before go to the others); the store may
// be down between two virtual times (every call fails as a dead server's
// would: the replicas plan from their local statistics meanwhile).
// Compiles are counted as in Replay: each time a replica first runs a gear
// combination it has no graph for; with share_artifacts also when its update
// path builds a graph for a new gear set, and loads from the store apart. No memory probe (no
// memory pressure).
#ifndef GEARBOX_FLEET_REPLAY_H_
#define GEARBOX_FLEET_REPLAY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/config.h"
#include "gearbox/export.h"
#include "gearbox/fleet.h"
#include "gearbox/fleet_artifacts.h"
#include "gearbox/fleet_stats.h"
#include "gearbox/replay.h"
#include "gearbox/trace.h"

namespace gearbox {

enum class ReplicaSplit { kRoundRobin, kHashColumn };

struct FleetReplayOptions : ReplayRunOptions {
  int replicas = 2;  // 1..256
  // Where the replicas share statistics: "redis://HOST:PORT", or empty for
  // the in-process stand-in (on the virtual clock).
  std::string store_url;
  // false: the same replicas each learning alone (the baseline).
  bool share_stats = true;
  // How the fleet's buckets are weighted (FleetStatsOptions::weighting).
  FleetWeighting weighting = FleetStatsOptions{}.weighting;
  // One plan per fleet (gearbox/fleet_plan.h): replica 0 plans (the run's
  // policy) and publishes after each of its updates; the others run the
  // static policy, never lead, and after each of the leader's updates run
  // one update of their own (pushing their statistics: the leader sees them
  // one update later) and adopt a new version; a joining replica adopts the
  // current plan before its first request.
  bool fleet_plan = false;
  // Shared artifacts (gearbox/fleet_artifacts.h): whenever a replica's gear
  // set changes (its update, an adopted plan, its start) its update path
  // obtains a graph for every gear combination it has none for: loaded from
  // the store when another replica put that artifact (artifact_loads), else
  // compiled under the compile lease and put (compiles). Works with or
  // without share_stats; with the store down a replica compiles itself.
  // At its start without a fleet plan to adopt, a replica does not prewarm
  // its configured gears (the first plan replaces most of them): it loads
  // those the fleet has, looks again every artifact_poll_seconds until the
  // gear set changes, and compiles a miss on the request (put afterwards by
  // its update path for the others), as one runtime compiles lazily.
  bool share_artifacts = false;
  // Seconds between two looks of a replica's update path for the others'
  // artifacts of gears it has no graph for (above; > 0, at most 3600).
  double artifact_poll_seconds = 0.1;
  // Trace seconds replayed per wall second at most (0: as fast as it can):
  // each row waits until (t - first row's t) / pace wall seconds have passed
  // since the start. For a fleet of processes whose store is stopped and
  // restarted while they run (scripts/fleet-example.sh --kill-store-at).
  double pace = 0.0;
  // Bytes of one simulated artifact (1..64 MiB; chunked above 256 KiB).
  int64_t artifact_bytes = 64 * 1024;
  ReplicaSplit split = ReplicaSplit::kRoundRobin;
  std::string split_column;  // kHashColumn: a dimension (trace column) name
  // Simulates only this replica (0-based, < replicas): rows are routed as
  // for the whole fleet and the others' rows skipped; the other replicas run
  // in other processes against the same store (a fleet of processes:
  // store_url and fingerprint.model_id required; not with fleet_plan yet).
  // Its compile leases are then waited on in real time (up to 5 s).
  std::optional<int> only_replica;
  // The last replica joins at this trace time (seconds, the trace's clock).
  std::optional<double> join_at;
  // The store fails every call for trace times in [first, second).
  std::optional<std::pair<double, double>> store_outage;
  // The keys' fingerprint; an empty model_id gets a fresh one per run, so
  // runs against one Redis never see each other's buckets.
  FleetFingerprint fingerprint;
  // Width of the per-replica waste buckets (the joining replica's catch-up), seconds.
  double bucket_seconds = 60.0;
  // Called after each replica's update with its index (the replay's
  // thread), as on_update is for every replica's: `gearbox replay
  // --replicas N --decisions FILE` writes them with a "replica" field.
  std::function<void(int replica, const UpdateRecord&)> on_replica_update;
};

// "--replica-split": "round-robin" or "hash:COLUMN".
GEARBOX_EXPORT absl::Status ParseReplicaSplit(std::string_view text, FleetReplayOptions* options);
// "--store-outage": "T1:T2" (seconds, T1 < T2).
GEARBOX_EXPORT absl::StatusOr<std::pair<double, double>> ParseStoreOutage(std::string_view text);

struct ReplicaReplayResult {
  int replica = 0;
  double joined_at = 0.0;  // trace time it started serving
  uint64_t requests = 0;   // rows routed to it
  uint64_t served_requests = 0;
  uint64_t rejected_requests = 0;
  double padded_volume = 0.0;
  double raw_volume = 0.0;
  double padding_waste = 0.0;
  uint64_t compiles = 0;        // graphs built here (on a request's miss or by the update path)
  uint64_t artifact_loads = 0;  // graphs loaded from the fleet's artifacts instead
  // Of compiles and artifact_loads: the graphs its update path had ready at
  // its start, before its first request (share_artifacts: its initial gear
  // set; with fleet_plan, a joiner's adopted plan).
  uint64_t prewarm_compiles = 0;
  uint64_t prewarm_loads = 0;
  // Of compiles, those made on a request's miss (the rest: the update path
  // building a new gear set's graphs). With share_artifacts a replica
  // without a fleet plan to adopt at its start builds its configured gears
  // only this way (lazily), and its update path puts them for the others.
  uint64_t request_compiles = 0;
  uint64_t updates = 0;
  uint64_t updates_changed = 0;
  // Joint and sparse sets: the looks at the combinations between updates
  // (trigger "combinations"; not counted in `updates`).
  uint64_t combination_looks = 0;
  uint64_t combination_looks_changed = 0;
  uint64_t peak_graphs = 0;
  uint64_t final_graphs = 0;
  std::vector<std::vector<int64_t>> final_gears;
  FleetStatsCounters fleet;        // zero without share_stats
  uint64_t plan_adoptions = 0;     // fleet plan versions this replica committed
  uint64_t plan_publications = 0;  // ... it published (the leader)
  // Of plan_adoptions, those made on the leader's announcement (a fleet of
  // processes: between two rows, before the replica's next check).
  uint64_t plan_notified_adoptions = 0;
  // The store's plan version at its last successful plan step (0: none; a
  // store restarted without persistence starts the versions again).
  uint64_t plan_version = 0;
  FleetArtifactCounters artifacts;  // zero without share_artifacts
  std::vector<WasteBucket> waste_timeline;
};

struct FleetReplayResult {
  std::string policy;
  std::vector<std::string> dimensions;
  std::string store;  // "in-process" or "redis://HOST:PORT" (no credentials)
  bool share_stats = true;
  bool fleet_plan = false;
  bool share_artifacts = false;
  std::vector<ReplicaReplayResult> replicas;
  // The fleet: every replica's volumes and counts together.
  uint64_t requests = 0;
  uint64_t rejected_requests = 0;
  double padding_waste = 0.0;
  uint64_t compiles = 0;
  uint64_t artifact_loads = 0;
  uint64_t peak_graphs = 0;   // sum over replicas of each one's peak
  uint64_t final_graphs = 0;  // sum over replicas
  FleetStoreCounters store_counters;
  // With join_at: the first of the joining replica's waste buckets (from its
  // join) whose waste is at most max(1.1 x, +0.01 over) the other
  // replicas' waste in the same bucket, and the joiner's updates before
  // that bucket started;
  // nullopt when it never did (or no join).
  std::optional<double> join_converged_seconds;  // from the join to that bucket's end
  std::optional<uint64_t> join_converged_updates;
  double wall_seconds = 0.0;
};

GEARBOX_EXPORT absl::StatusOr<FleetReplayResult> FleetReplay(const RuntimeConfig& config,
                                                             const Trace& trace,
                                                             const FleetReplayOptions& options);

GEARBOX_EXPORT std::string FleetReplayResultJson(const FleetReplayResult& result, int indent = 2);

}  // namespace gearbox

#endif  // GEARBOX_FLEET_REPLAY_H_
