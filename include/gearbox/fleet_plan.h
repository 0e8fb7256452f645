// One plan per fleet: a leader (a lease with expiry, renewed by its owner;
// any replica takes over once it lapses) publishes its gear lists as a
// versioned plan (compare-and-set on the version); the other replicas adopt
// a newer plan through AdaptiveGearRuntime::CommitUpdate.
//
// Call Step after each update, on the updating thread, outside the
// runtime's locks (e.g. from RuntimeOptions::on_update, which RunOnce calls
// after releasing them); never from merge_window_stats (CommitUpdate takes
// the commit lock that hook runs under). With the store unreachable Step
// returns its status and changes nothing: the replica keeps its own gears.
#ifndef GEARBOX_FLEET_PLAN_H_
#define GEARBOX_FLEET_PLAN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/fleet.h"
#include "gearbox/runtime.h"

namespace gearbox {

struct FleetPlan {
  uint64_t version = 0;                     // the store's version (0: no plan)
  std::string leader;                       // the replica that published it
  double time = 0.0;                        // the leader's clock when it published, seconds
  std::vector<std::vector<int64_t>> gears;  // per dimension, ascending
};

// The payload: "gearbox-plan 1", "leader <id>", "time <seconds>", then one
// "dim <name> <g1>,<g2>,..." line per dimension, '\n'-separated.
GEARBOX_EXPORT std::string EncodeFleetPlan(const FleetPlan& plan,
                                           const std::vector<std::string>& dimensions);
// Validates and decodes a payload for these dimensions (same names, same
// order; 1..64 gears each, strictly ascending, in 1..2^40; at most 64 KiB).
// Errors (kDataLoss) name the line and what is allowed. Pure; fuzzed.
GEARBOX_EXPORT absl::StatusOr<FleetPlan> DecodeFleetPlan(
    std::string_view payload, const std::vector<std::string>& dimensions);

struct FleetPlanOptions {
  // Required: this replica's id (as FleetStatsOptions::replica_id).
  std::string replica_id;
  // Milliseconds the leader's lease lasts; renewed at every Step. Longer
  // than the time between two updates, or the leadership flaps. 1..1 day.
  int64_t lease_ms = 180000;
  // Milliseconds a published plan lives without a new version (0: forever).
  int64_t plan_ttl_ms = 24 * 3600 * 1000;
  // false: this replica only adopts (never takes the lease), e.g. one whose
  // own policy does not plan (static).
  bool may_lead = true;
  // A follower's own limits and hysteresis when adopting:
  // The most gear combinations (compiled graphs: the product of the gears
  // per dimension) this replica can hold; a plan above it is refused (the
  // replica keeps its gears, FleetPlanStep::refused) and not retried until
  // a newer version. 0: no local limit.
  int64_t max_graphs = 0;
  // Seconds a follower keeps an adopted plan before adopting a newer one (a
  // version arriving sooner waits for a later Step: no flapping when the
  // leader publishes often). 0: adopt every new version at once.
  double min_adopt_interval_seconds = 0.0;
};

struct FleetPlanStep {
  bool leader = false;     // this replica holds the lease now
  bool published = false;  // ... and wrote a new version
  bool adopted = false;    // a follower committed the fleet's plan
  bool refused = false;    // ... refused it (above max_graphs)
  bool deferred = false;   // ... put it off (min_adopt_interval_seconds)
  uint64_t version = 0;    // the plan's version after the step (0: none)
  bool announced = false;  // ... published and announced on the change channel
};

// Thread-safety: Step serializes on an internal mutex (held across the
// store calls and the CommitUpdate); the store and runtime must outlive it.
class GEARBOX_EXPORT FleetPlanSync {
 public:
  static absl::StatusOr<std::unique_ptr<FleetPlanSync>> Create(FleetStore* store,
                                                               const FleetFingerprint& fingerprint,
                                                               std::vector<std::string> dimensions,
                                                               FleetPlanOptions options);
  ~FleetPlanSync();

  // Leader: renews the lease and publishes the runtime's gear lists when
  // they differ from the stored plan. Follower: adopts a plan with a version
  // it has not adopted yet that differs from its gears. A stored plan that
  // fails validation is an error (logged by the caller), never adopted.
  absl::StatusOr<FleetPlanStep> Step(AdaptiveGearRuntime* runtime, double now);

  // Before an update: takes the leader's lease when it is free, or renews
  // it when this replica holds it; true when it does (the caller then plans,
  // e.g. AdaptiveGearRuntime::SetUpdatePolicy(kReplan), and publishes with
  // Step; else it follows: kStatic, and Step adopts). false with may_lead
  // false. The store down: its status (the caller keeps its role).
  absl::StatusOr<bool> Lead();
  // Gives the lease up when this replica holds it (it stops: another takes
  // over at its next Lead instead of after lease_ms).
  absl::Status Resign();

  // Change notification (never on the request path). After each version it
  // writes, the leader publishes the version (decimal) on the channel
  // "<fingerprint prefix>:plan:changed". Watch subscribes this replica:
  // for each announced version newer than any before, on_version(version)
  // runs on the subscription's thread (Redis) or the publisher's
  // (in-process): keep it cheap and never call Step from it (set a flag,
  // wake a loop). NewerPlanAnnounced() then says, without a store call,
  // that a version newer than any the last Step saw was announced: the
  // update path can Step at once instead of at its next update. Messages
  // are best effort: with the store away, or a message lost, Step still
  // polls the plan at every update.
  absl::Status Watch(std::function<void(uint64_t version)> on_version = nullptr);
  bool NewerPlanAnnounced() const;

 private:
  class Impl;
  explicit FleetPlanSync(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gearbox

#endif  // GEARBOX_FLEET_PLAN_H_
