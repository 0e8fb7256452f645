#include "gearbox/fleet_replay.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <unordered_set>

#include "gearbox/fleet_plan.h"
#include "gearbox/runtime.h"
#include "nlohmann/json.hpp"
#include "src/common/errors.h"
#include "src/sim/graph_combo.h"
#include "src/sim/replay_schedule.h"

namespace gearbox {
namespace {

using internal::Cat;

constexpr int kMaxReplicas = 256;

using internal::Combo;
using internal::ComboHash;

// A replica's simulated compiled graph: leaves its alive set when the pool releases it.
class ReplicaGraph final : public GraphResource {
 public:
  ReplicaGraph(std::unordered_set<Combo, ComboHash>* alive, const Combo& combo)
      : alive_(alive), combo_(combo) {
    alive_->insert(combo_);
  }
  ~ReplicaGraph() override { alive_->erase(combo_); }
  int64_t bytes() const override { return 0; }

 private:
  std::unordered_set<Combo, ComboHash>* alive_;
  Combo combo_;
};

// One replica: graphs before the pool (the pool's release touches them),
// the pool before the runtime. Single-threaded (the replay).
struct Replica {
  std::unordered_set<Combo, ComboHash> alive;
  GraphResourcePool pool;
  ManualClock clock{0.0};
  std::unique_ptr<FleetStatsSync> sync;
  std::unique_ptr<FleetPlanSync> plan;
  std::unique_ptr<FleetArtifactStore> artifacts;
  std::vector<std::vector<int64_t>> synced_gears;  // the gear set last given graphs
  // Lazy (no fleet plan yet): combinations of the gear set it has no graph
  // for are only loaded, when the fleet has them, at most once per
  // `load_every` seconds; a miss compiles on the request as one runtime's.
  bool lazy = false;
  double next_load_at = 0.0;
  double load_every = 0.0;
  std::vector<Combo> pending_puts;  // built on a request's miss, put by the update path
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  std::unique_ptr<internal::ReplaySchedule> schedule;
  ReplicaReplayResult result;
  std::vector<double> update_times;
  bool active = false;
  bool leading = false;  // a fleet of processes: holds the plan's lease (plans)
};

constexpr int64_t kMaxArtifactBytes = int64_t{64} << 20;
// Gear combinations the update path builds graphs for at most per change
// (beyond, the rest compile on their first request as without sharing).
constexpr size_t kMaxSyncedCombos = 4096;

std::string GearKey(const Combo& c) {
  std::string key;
  for (int d = 0; d < c.n; ++d) key += Cat(d == 0 ? "" : "x", c.gear[d]);
  return key;
}

// A simulated artifact: deterministic bytes for a gear combination (the same
// combination gives the same digest on every replica).
std::string SimulatedArtifact(const Combo& c, int64_t bytes) {
  std::string out = Cat("gearbox-simulated-graph ", GearKey(c), "\n");
  uint64_t z = ComboHash{}(c);
  while (static_cast<int64_t>(out.size()) < bytes) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(static_cast<char>(z >> 56));
  }
  out.resize(static_cast<size_t>(bytes));
  return out;
}

uint64_t HashValue(int64_t v) {
  uint64_t z = static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::StatusOr<double> ParseSeconds(std::string_view text, std::string_view field) {
  double x = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(x)) {
    return internal::InvalidField(field, Cat("\"", text, "\""), "seconds, a finite number");
  }
  return x;
}

}  // namespace

absl::Status ParseReplicaSplit(std::string_view text, FleetReplayOptions* options) {
  if (text == "round-robin") {
    options->split = ReplicaSplit::kRoundRobin;
    options->split_column.clear();
    return absl::OkStatus();
  }
  if (text.substr(0, 5) == "hash:" && text.size() > 5) {
    options->split = ReplicaSplit::kHashColumn;
    options->split_column = std::string(text.substr(5));
    return absl::OkStatus();
  }
  return internal::InvalidField("--replica-split", Cat("\"", text, "\""),
                                "\"round-robin\" or \"hash:COLUMN\" (a dimension's column)");
}

absl::StatusOr<std::pair<double, double>> ParseStoreOutage(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return internal::InvalidField("--store-outage", Cat("\"", text, "\""),
                                  "T1:T2 (trace seconds, T1 < T2)");
  }
  auto a = ParseSeconds(text.substr(0, colon), "--store-outage T1");
  if (!a.ok()) return a.status();
  auto b = ParseSeconds(text.substr(colon + 1), "--store-outage T2");
  if (!b.ok()) return b.status();
  if (!(*a < *b)) {
    return internal::InvalidField("--store-outage", Cat("\"", text, "\""),
                                  "T1:T2 with T1 < T2 (trace seconds)");
  }
  return std::make_pair(*a, *b);
}

absl::StatusOr<FleetReplayResult> FleetReplay(const RuntimeConfig& config, const Trace& trace,
                                              const FleetReplayOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (auto s = internal::CheckReplayInputs(config, trace, options); !s.ok()) return s;
  if (options.replicas < 1 || options.replicas > kMaxReplicas) {
    return internal::InvalidFieldValue("--replicas", options.replicas,
                                       Cat("an integer in [1, ", kMaxReplicas, "]"));
  }
  const int n = static_cast<int>(config.dims.size());
  int split_column = -1;
  if (options.split == ReplicaSplit::kHashColumn) {
    for (int d = 0; d < n; ++d) {
      if (config.dims[d].name == options.split_column) split_column = d;
    }
    if (split_column < 0) {
      std::string names;
      for (const auto& d : config.dims) names += Cat(names.empty() ? "" : ", ", d.name);
      return internal::InvalidField("--replica-split", Cat("\"hash:", options.split_column, "\""),
                                    Cat("hash:COLUMN with COLUMN one of the dimensions: ", names));
    }
  }
  const double t0 = trace.time.front();
  const double t_end = trace.time.back();
  if (options.join_at.has_value()) {
    if (options.replicas < 2) {
      return internal::InvalidFieldValue("--join-at", *options.join_at,
                                         "only with --replicas >= 2 (the last one joins)");
    }
    if (!std::isfinite(*options.join_at) || *options.join_at < t0 || *options.join_at > t_end) {
      return internal::InvalidFieldValue(
          "--join-at", *options.join_at,
          Cat("a trace time in [", t0, ", ", t_end, "] (the trace's first and last row)"));
    }
  }
  if (!(options.bucket_seconds > 0) ||
      !((t_end - t0) / options.bucket_seconds < static_cast<double>(kMaxTimelineBuckets))) {
    return internal::InvalidFieldValue("--bucket-seconds", options.bucket_seconds,
                                       "seconds > 0 (and at most 1e6 buckets over the trace)");
  }

  if (options.only_replica.has_value()) {
    if (*options.only_replica < 0 || *options.only_replica >= options.replicas) {
      return internal::InvalidFieldValue(
          "--replica-index", *options.only_replica,
          Cat("an integer in [0, --replicas = ", options.replicas, ")"));
    }
    if (options.store_url.empty()) {
      return internal::InvalidField("--replica-index", Cat(*options.only_replica),
                                    "only with --store redis://HOST:PORT (the processes of a "
                                    "fleet share one store)");
    }
    if (options.fingerprint.model_id.empty()) {
      return internal::InvalidField("--replica-index", Cat(*options.only_replica),
                                    "only with --fleet-id ID (the same in every process)");
    }
  }
  if (options.artifact_bytes < 1 || options.artifact_bytes > kMaxArtifactBytes) {
    return internal::InvalidFieldValue("--artifact-bytes", options.artifact_bytes,
                                       Cat("bytes in [1, ", kMaxArtifactBytes, "]"));
  }
  if (!(options.pace >= 0 && options.pace <= 1e9)) {
    return internal::InvalidFieldValue("--pace", options.pace,
                                       "trace seconds per wall second in [0, 1e9] (0: unpaced)");
  }
  if (!(options.artifact_poll_seconds > 0 && options.artifact_poll_seconds <= 3600)) {
    return internal::InvalidFieldValue("--artifact-poll-seconds", options.artifact_poll_seconds,
                                       "seconds in (0, 3600]");
  }
  // The store, on a clock the replay moves to each row's time.
  ManualClock store_clock(t0);
  std::unique_ptr<FleetStore> inner;
  if (options.store_url.empty()) {
    inner = std::make_unique<InProcessFleetStore>(&store_clock);
  } else {
    RedisFleetStoreOptions ro;
    ro.url = options.store_url;
    ro.clock = &store_clock;
    ro.log = [](LogLevel, std::string_view) {};  // failures are in the counters
    auto redis = RedisFleetStore::Create(std::move(ro));
    if (!redis.ok()) return internal::WithContext(redis.status(), "--store");
    inner = *std::move(redis);
  }
  const std::optional<std::pair<double, double>> outage = options.store_outage;
  OutageFleetStore store(inner.get(), [&store_clock, outage] {
    const double now = store_clock.NowSeconds();
    return outage.has_value() && now >= outage->first && now < outage->second;
  });
  FleetFingerprint fingerprint = options.fingerprint;
  if (fingerprint.model_id.empty()) {
    fingerprint.model_id =
        Cat("replay-", getpid(), "-", std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (fingerprint.backend.empty()) fingerprint.backend = "simulated";
  if (auto s = ValidateFleetFingerprint(fingerprint); !s.ok()) {
    return internal::WithContext(s, "--fleet-id");  // the only field a user sets here
  }

  std::vector<std::string> names;
  for (const auto& d : config.dims) names.push_back(d.name);
  std::vector<std::unique_ptr<Replica>> replicas;
  // The leader updated since the followers last synchronised: with a fleet
  // plan the followers (static policy, no schedule of their own) then run
  // an update (which pushes their statistics through the merge hook) and
  // adopt the plan.
  bool leader_updated = false;
  const auto Adopt = [](Replica& r, double at) {
    absl::StatusOr<FleetPlanStep> step = r.plan->Step(r.runtime.get(), at);
    if (step.ok()) r.result.plan_version = step->version;
    if (step.ok() && step->adopted) ++r.result.plan_adoptions;
  };
  // The update path's artifact step: graphs for every combination of a new
  // gear set (loaded when the fleet has them, else compiled and put). Runs
  // between rows, as the replica's worker would after an update.
  Combo sync_combo;
  sync_combo.n = n;
  // `build` false: only loads what the fleet already has (the gear set did
  // not come from the fleet: a replica's configured gears before any plan).
  const auto SyncArtifacts = [&](Replica& r, bool build = true) {
    if (r.artifacts == nullptr) return;
    // The graphs requests built since: put for the others (deferred, as
    // the Python integration's request path does).
    for (const Combo& c : r.pending_puts) {
      (void)r.artifacts->Put(GearKey(c), "simulated", SimulatedArtifact(c, options.artifact_bytes));
    }
    r.pending_puts.clear();
    SnapshotRef snap = r.runtime->GetSnapshot();
    std::vector<std::vector<int64_t>> gears;
    size_t combos = 1;
    for (int d = 0; d < n; ++d) {
      gears.emplace_back(snap->gears(d).begin(), snap->gears(d).end());
      combos *= gears.back().size();
    }
    const double now = store_clock.NowSeconds();  // the row's time
    if (gears == r.synced_gears) {
      if (!r.lazy || now < r.next_load_at) return;
      build = false;  // a lazy replica's periodic look for the others' graphs
    } else {
      r.lazy = !build;
    }
    r.synced_gears = gears;
    if (r.lazy) r.next_load_at = now + r.load_every;
    if (combos > kMaxSyncedCombos) return;
    std::vector<size_t> at(static_cast<size_t>(n), 0);
    for (size_t k = 0; k < combos; ++k) {
      for (int d = 0; d < n; ++d) sync_combo.gear[d] = gears[d][at[d]];
      for (int d = n - 1; d >= 0; --d) {  // the next combination (odometer)
        if (++at[d] < gears[d].size()) break;
        at[d] = 0;
      }
      if (r.alive.count(sync_combo)) continue;
      const Combo c = sync_combo;
      absl::StatusOr<ObtainedArtifact> got;
      if (build) {
        got = r.artifacts->Obtain(GearKey(c), "simulated", [&c, &options] {
          return absl::StatusOr<std::string>(SimulatedArtifact(c, options.artifact_bytes));
        });
      } else {
        absl::StatusOr<std::optional<FleetArtifact>> found =
            r.artifacts->Get(GearKey(c), "simulated");
        if (!found.ok() || !found->has_value()) continue;  // compiled on its first request
        got = ObtainedArtifact{std::move(**found), ArtifactSource::kLoaded, false};
      }
      if (!got.ok()) continue;  // a build never fails here; the request path would compile
      r.pool.Register(std::make_shared<ReplicaGraph>(&r.alive, c));
      r.runtime->AttachCleanupKeys({c.gear, static_cast<size_t>(n)}, r.pool.ConsumeRecentKeys());
      if (got->source == ArtifactSource::kLoaded) {
        ++r.result.artifact_loads;
      } else {
        ++r.result.compiles;
      }
      r.result.peak_graphs = std::max<uint64_t>(r.result.peak_graphs, r.alive.size());
    }
  };
  // A fleet of processes with one plan: before each of its updates a
  // replica takes or renews the lease (the store down: it keeps its role)
  // and runs the run's policy while it leads, the static one while it
  // follows.
  const bool process_fleet = options.fleet_plan && options.only_replica.has_value();
  const auto TakeRole = [&options](Replica& r) -> absl::Status {
    absl::StatusOr<bool> lead = r.plan->Lead();
    const bool leads = lead.ok() ? *lead : r.leading;
    r.leading = leads;
    return r.runtime->SetUpdatePolicy(leads ? options.policy : UpdatePolicy::kStatic);
  };
  auto start = [&](Replica& r, int index, double at) -> absl::Status {
    r.clock.Set(at);
    r.result.replica = index;
    r.result.joined_at = at;
    RuntimeOptions ro = internal::ReplayRuntimeOptions(config, options, &r.clock, &r.pool);
    // Sharing, a replica plans from the fleet's window: its first plan
    // waits for the fleet's min_window_weight requests (its share of them),
    // not for that many of its own (N times longer).
    if (options.share_stats) ro.replan.min_window_weight /= options.replicas;
    if (options.share_stats) {
      FleetStatsOptions fo;
      fo.replica_id = Cat("replica-", index);
      fo.weighting = options.weighting;
      // The fleet's size at the start (the first plan weighs the fleet's traffic).
      fo.expected_replicas = options.join_at.has_value() ? options.replicas - 1 : options.replicas;
      // A replay records each request's event at its row's time, before
      // any later update: no event lands late, so a slot is pushed as soon
      // as it ends (a runtime serving on threads keeps the default lag).
      fo.push_lag_seconds = 0;
      auto sync = FleetStatsSync::Create(&store, fingerprint, names, config.adaptive, fo,
                                         [](LogLevel, std::string_view) {});
      if (!sync.ok()) return sync.status();
      r.sync = *std::move(sync);
      ro.merge_window_stats = r.sync->Hook();
    }
    if (options.share_artifacts) {
      FleetArtifactOptions ao;
      ao.replica_id = Cat("replica-", index);
      // Replicas run one at a time here: a lease held elsewhere means its
      // holder failed mid-build, so build at once rather than wait.
      ao.wait_ms = 0;
      ao.clock = &store_clock;
      if (options.only_replica.has_value()) {
        // Processes of one fleet run at once: wait for a holder in real time.
        ao.wait_ms = 5000;
        ao.poll_ms = 10;
        ao.clock = SystemClock::Default();
      }
      auto artifacts =
          FleetArtifactStore::Create(&store, fingerprint, ao, [](LogLevel, std::string_view) {});
      if (!artifacts.ok()) return artifacts.status();
      r.artifacts = *std::move(artifacts);
    }
    // In one process replica 0 leads for the whole run; in a fleet of
    // processes the lease decides, at every check (ProcessChecksThrough).
    const bool leads = index == 0 && !process_fleet;
    if (options.fleet_plan) {
      FleetPlanOptions po;
      po.replica_id = Cat("replica-", index);
      po.may_lead = leads || process_fleet;
      auto plan = FleetPlanSync::Create(&store, fingerprint, names, po);
      if (!plan.ok()) return plan.status();
      r.plan = *std::move(plan);
      if (!leads) ro.policy = UpdatePolicy::kStatic;
    }
    ReplicaReplayResult* result = &r.result;
    std::vector<double>* times = &r.update_times;
    Replica* self = &r;
    ro.on_update = [result, times, self, leads, index, &options,
                    &leader_updated](const UpdateRecord& rec) {
      times->push_back(rec.time);
      // A look at the combinations changes no gear: nothing to publish (a
      // fleet plan carries the gears).
      if (self->plan != nullptr && leads && rec.trigger != UpdateTrigger::kCombinations) {
        // After the update, outside the runtime's locks (RunOnce calls on_update there).
        absl::StatusOr<FleetPlanStep> step = self->plan->Step(self->runtime.get(), rec.time);
        if (step.ok()) result->plan_version = step->version;
        if (step.ok() && step->published) ++result->plan_publications;
        leader_updated = true;
      }
      internal::CountUpdate(rec, result);
      if (options.on_update) options.on_update(rec);
      if (options.on_replica_update) options.on_replica_update(index, rec);
    };
    auto created = AdaptiveGearRuntime::Create(config.dims, ro);
    if (!created.ok()) return created.status();
    r.runtime = *std::move(created);
    if (r.plan != nullptr && process_fleet) {
      if (auto s = TakeRole(r); !s.ok()) return s;
      // The leader's announcements: a follower adopts between two rows, not
      // at its next check (the subscription fails only on bad input).
      if (auto s = r.plan->Watch(); !s.ok()) return s;
    }
    r.schedule =
        std::make_unique<internal::ReplaySchedule>(options, at, t_end, r.runtime.get(), &r.clock);
    r.active = true;
    // The fleet's plan first, and its graphs (prewarmed from the fleet's
    // artifacts). Without a plan to adopt, the configured gears are not
    // prewarmed (the first plan replaces most of them): loaded when the
    // fleet has them, else compiled on a request's miss as one runtime's.
    const uint64_t adopted = r.result.plan_adoptions;
    if (r.plan != nullptr && !leads && !r.leading) Adopt(r, at);
    r.load_every = options.artifact_poll_seconds;
    SyncArtifacts(r, r.result.plan_adoptions > adopted);
    r.result.prewarm_compiles = r.result.compiles;
    r.result.prewarm_loads = r.result.artifact_loads;
    return absl::OkStatus();
  };
  // With a fleet plan the leader's checks drive the followers (static
  // policy, no schedule of their own). Before a check that updates, each
  // follower runs an update (which pushes its window's slots through the
  // merge hook), so the leader plans from the fleet's traffic up to then
  // (every slot ended by then: push_lag_seconds is 0 here); after the
  // leader's update the followers adopt the plan.
  const auto LeaderChecksThrough = [&](double t) -> absl::Status {
    Replica& leader = *replicas[0];
    for (double at = leader.schedule->NextTime(); at <= t; at = leader.schedule->NextTime()) {
      const std::optional<UpdateTrigger> trigger = leader.runtime->CheckTrigger(at);
      if (trigger.has_value() && *trigger != UpdateTrigger::kCombinations) {
        for (size_t k = 1; k < replicas.size(); ++k) {
          Replica& f = *replicas[k];
          if (!f.active) continue;
          f.clock.Set(at);
          if (auto s = f.runtime->RunOnce(at); !s.ok()) return s.status();
        }
      }
      if (auto s = leader.schedule->RunThrough(at); !s.ok()) return s;
      SyncArtifacts(leader);
      if (!leader_updated) continue;
      leader_updated = false;
      for (size_t k = 1; k < replicas.size(); ++k) {
        Replica& f = *replicas[k];
        if (!f.active) continue;
        f.clock.Set(at);
        Adopt(f, at);
        SyncArtifacts(f);
      }
    }
    return absl::OkStatus();
  };
  // A fleet of processes: at each of its checks the replica takes its role,
  // updates (the leader its policy's check; a follower an update that
  // pushes its statistics), then publishes or adopts.
  const auto ProcessChecksThrough = [&](Replica& r, double t) -> absl::Status {
    for (double at = r.schedule->NextTime(); at <= t; at = r.schedule->NextTime()) {
      if (auto s = TakeRole(r); !s.ok()) return s;
      const uint64_t updates = r.result.updates;
      if (auto s = r.schedule->RunThrough(at); !s.ok()) return s;
      if (!r.leading && r.result.updates == updates) {
        r.clock.Set(at);
        if (auto s = r.runtime->RunOnce(at); !s.ok()) return s.status();
      }
      absl::StatusOr<FleetPlanStep> step = r.plan->Step(r.runtime.get(), at);
      if (step.ok()) r.result.plan_version = step->version;
      if (step.ok() && step->published) ++r.result.plan_publications;
      if (step.ok() && step->adopted) ++r.result.plan_adoptions;
      SyncArtifacts(r);
    }
    return absl::OkStatus();
  };
  // With only_replica the other replicas are not simulated in this process:
  // their share of the trace is routed to them and skipped.
  const auto simulated = [&options](int i) {
    return !options.only_replica.has_value() || *options.only_replica == i;
  };
  bool last_joined = false;
  for (int i = 0; i < options.replicas; ++i) {
    replicas.push_back(std::make_unique<Replica>());
    replicas.back()->result.replica = i;
    const bool joins_later = options.join_at.has_value() && i == options.replicas - 1;
    if (!joins_later) {
      if (i == options.replicas - 1) last_joined = true;
      if (!simulated(i)) continue;
      if (auto s = start(*replicas.back(), i, t0); !s.ok()) return s;
    }
  }

  Plan plan;
  Combo combo;
  combo.n = n;
  uint64_t round_robin = 0;
  const size_t rows = trace.rows();
  const size_t progress_step = std::max<size_t>(1, rows / 100);
  for (size_t i = 0; i < rows; ++i) {
    const double t = trace.time[i];
    if (options.pace > 0) {
      std::this_thread::sleep_until(wall_start +
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>((t - t0) / options.pace)));
    }
    store_clock.Set(t);
    if (options.progress && i % progress_step == 0) options.progress(i, rows);
    Replica& last = *replicas.back();
    if (!last_joined && options.join_at.has_value() && t >= *options.join_at) {
      last_joined = true;
      if (simulated(options.replicas - 1)) {
        if (auto s = start(last, options.replicas - 1, t); !s.ok()) return s;
      }
    }
    if (options.fleet_plan && !process_fleet && replicas[0]->active) {
      if (auto s = LeaderChecksThrough(t); !s.ok()) return s;
    }
    if (process_fleet) {
      for (auto& r : replicas) {
        if (!r->active) continue;
        if (auto s = ProcessChecksThrough(*r, t); !s.ok()) return s;
        if (r->leading || !r->plan->NewerPlanAnnounced()) continue;
        r->clock.Set(t);
        absl::StatusOr<FleetPlanStep> step = r->plan->Step(r->runtime.get(), t);
        if (step.ok()) r->result.plan_version = step->version;
        if (step.ok() && step->adopted) {
          ++r->result.plan_adoptions;
          ++r->result.plan_notified_adoptions;
        }
        SyncArtifacts(*r);
      }
    }
    for (auto& r : replicas) {
      if (!r->active) continue;
      if (auto s = r->schedule->RunThrough(t); !s.ok()) return s;
      SyncArtifacts(*r);
    }
    const int active = last_joined ? options.replicas : options.replicas - 1;
    const int64_t* row = trace.row(i);
    const uint64_t pick = split_column >= 0 ? HashValue(row[split_column]) : round_robin++;
    Replica& r = *replicas[static_cast<size_t>(pick % static_cast<uint64_t>(active))];
    if (!r.active) continue;  // another process's row
    ReplicaReplayResult& res = r.result;
    ++res.requests;
    SnapshotRef snap = r.runtime->GetSnapshot();
    if (!MakePlan(*snap, std::span<const int64_t>(row, static_cast<size_t>(n)), &plan).ok()) {
      ++res.rejected_requests;
      continue;
    }
    ++res.served_requests;
    double padded = 0;
    const int groups = plan.num_variant_groups();
    for (int g = 0; g < groups; ++g) {
      const VariantGroup vg = plan.variant_group(g);
      double volume = static_cast<double>(vg.count);
      for (int d = 0; d < n; ++d) volume *= static_cast<double>(vg.gear[d]);
      padded += volume;
      if (vg.eager) continue;
      for (int d = 0; d < n; ++d) combo.gear[d] = vg.gear[d];
      if (r.alive.count(combo)) continue;
      r.pool.Register(std::make_shared<ReplicaGraph>(&r.alive, combo));
      r.runtime->AttachCleanupKeys({combo.gear, static_cast<size_t>(n)},
                                   r.pool.ConsumeRecentKeys());
      ++res.compiles;
      ++res.request_compiles;
      if (r.artifacts != nullptr) r.pending_puts.push_back(combo);
      res.peak_graphs = std::max<uint64_t>(res.peak_graphs, r.alive.size());
    }
    r.runtime->RecordPlan(plan, t);
    const double raw = plan.raw_volume();
    res.padded_volume += padded;
    res.raw_volume += raw;
    const size_t bucket = static_cast<size_t>((t - t0) / options.bucket_seconds);
    if (res.waste_timeline.size() <= bucket) {
      const size_t from = res.waste_timeline.size();
      res.waste_timeline.resize(bucket + 1);
      for (size_t b = from; b <= bucket; ++b) {
        res.waste_timeline[b].start = t0 + static_cast<double>(b) * options.bucket_seconds;
      }
    }
    WasteBucket& wb = res.waste_timeline[bucket];
    wb.padded += padded;
    wb.raw += raw;
    ++wb.requests;
  }
  if (options.progress) options.progress(rows, rows);
  for (auto& r : replicas) {
    if (!r->active) continue;
    if (auto s = r->schedule->RunRest(); !s.ok()) return s;
    // Done: a process that leads hands the lease on (the others still run).
    if (process_fleet) (void)r->plan->Resign();
  }

  FleetReplayResult out;
  out.policy = internal::ReplayRunName(options);
  out.dimensions = names;
  out.store = store.Describe();
  out.share_stats = options.share_stats;
  out.fleet_plan = options.fleet_plan;
  out.share_artifacts = options.share_artifacts;
  double padded = 0, raw = 0;
  for (auto& r : replicas) {
    if (!simulated(r->result.replica)) continue;
    ReplicaReplayResult& res = r->result;
    if (r->active) {
      SnapshotRef s = r->runtime->GetSnapshot();
      for (int d = 0; d < n; ++d)
        res.final_gears.emplace_back(s->gears(d).begin(), s->gears(d).end());
      res.final_graphs = r->alive.size();
    }
    if (r->sync) res.fleet = r->sync->counters();
    if (r->artifacts) res.artifacts = r->artifacts->counters();
    res.padding_waste = res.raw_volume > 0 ? res.padded_volume / res.raw_volume - 1.0 : 0.0;
    out.requests += res.requests;
    out.rejected_requests += res.rejected_requests;
    out.compiles += res.compiles;
    out.artifact_loads += res.artifact_loads;
    out.peak_graphs += res.peak_graphs;
    out.final_graphs += res.final_graphs;
    padded += res.padded_volume;
    raw += res.raw_volume;
    out.replicas.push_back(res);
  }
  out.padding_waste = raw > 0 ? padded / raw - 1.0 : 0.0;
  out.store_counters = store.counters();
  if (options.join_at.has_value() && replicas.back()->active && !options.only_replica.has_value()) {
    const ReplicaReplayResult& joiner = out.replicas.back();
    const size_t first = static_cast<size_t>((joiner.joined_at - t0) / options.bucket_seconds);
    for (size_t b = first; b < joiner.waste_timeline.size(); ++b) {
      const WasteBucket& mine = joiner.waste_timeline[b];
      double op = 0, orw = 0;
      for (size_t k = 0; k + 1 < out.replicas.size(); ++k) {
        if (b < out.replicas[k].waste_timeline.size()) {
          op += out.replicas[k].waste_timeline[b].padded;
          orw += out.replicas[k].waste_timeline[b].raw;
        }
      }
      if (mine.raw <= 0 || orw <= 0) continue;
      const double w = mine.padded / mine.raw - 1.0;
      const double others = op / orw - 1.0;
      if (w <= std::max(1.1 * others, others + 0.01)) {
        const double end = mine.start + options.bucket_seconds;
        out.join_converged_seconds = end - joiner.joined_at;
        const std::vector<double>& times = replicas.back()->update_times;
        out.join_converged_updates = static_cast<uint64_t>(
            std::upper_bound(times.begin(), times.end(), mine.start) - times.begin());
        break;
      }
    }
  }
  out.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

std::string FleetReplayResultJson(const FleetReplayResult& r, int indent) {
  nlohmann::ordered_json j;
  j["policy"] = r.policy;
  j["store"] = r.store;
  j["share_stats"] = r.share_stats;
  j["fleet_plan"] = r.fleet_plan;
  j["share_artifacts"] = r.share_artifacts;
  j["replicas"] = r.replicas.size();
  nlohmann::ordered_json fleet;
  fleet["requests"] = r.requests;
  fleet["rejected_requests"] = r.rejected_requests;
  fleet["padding_waste"] = r.padding_waste;
  fleet["compiles"] = r.compiles;
  fleet["artifact_loads"] = r.artifact_loads;
  fleet["peak_graphs"] = r.peak_graphs;
  fleet["final_graphs"] = r.final_graphs;
  j["fleet"] = fleet;
  nlohmann::ordered_json store;
  store["calls"] = r.store_counters.calls;
  store["failures"] = r.store_counters.failures;
  store["skipped"] = r.store_counters.skipped;
  store["bytes_sent"] = r.store_counters.bytes_sent;
  store["bytes_received"] = r.store_counters.bytes_received;
  store["rejected_values"] = r.store_counters.rejected_values;
  j["store_traffic"] = store;
  if (r.join_converged_seconds.has_value()) {
    j["join_converged_seconds"] = *r.join_converged_seconds;
  } else {
    j["join_converged_seconds"] = nullptr;
  }
  if (r.join_converged_updates.has_value()) {
    j["join_converged_updates"] = *r.join_converged_updates;
  } else {
    j["join_converged_updates"] = nullptr;
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ReplicaReplayResult& x : r.replicas) {
    nlohmann::ordered_json e;
    e["replica"] = x.replica;
    e["joined_at"] = x.joined_at;
    e["requests"] = x.requests;
    e["rejected_requests"] = x.rejected_requests;
    e["padding_waste"] = x.padding_waste;
    e["compiles"] = x.compiles;
    e["artifact_loads"] = x.artifact_loads;
    e["prewarm_compiles"] = x.prewarm_compiles;
    e["prewarm_loads"] = x.prewarm_loads;
    e["request_compiles"] = x.request_compiles;
    e["updates"] = x.updates;
    e["updates_changed"] = x.updates_changed;
    e["combination_looks"] = x.combination_looks;
    e["combination_looks_changed"] = x.combination_looks_changed;
    e["peak_graphs"] = x.peak_graphs;
    e["final_graphs"] = x.final_graphs;
    nlohmann::ordered_json gears = nlohmann::ordered_json::object();
    for (size_t d = 0; d < r.dimensions.size() && d < x.final_gears.size(); ++d) {
      gears[r.dimensions[d]] = x.final_gears[d];
    }
    e["final_gears"] = gears;
    e["fleet_merges"] = x.fleet.merges;
    e["fleet_local_only"] = x.fleet.local_only;
    e["fleet_slots_pushed"] = x.fleet.slots_pushed;
    e["fleet_drift_bins_pushed"] = x.fleet.drift_bins_pushed;
    e["fleet_drift_merges"] = x.fleet.drift_merges;
    e["fleet_push_failures"] = x.fleet.push_failures;
    e["fleet_read_failures"] = x.fleet.read_failures;
    e["plan_publications"] = x.plan_publications;
    e["plan_adoptions"] = x.plan_adoptions;
    e["plan_notified_adoptions"] = x.plan_notified_adoptions;
    e["plan_version"] = x.plan_version;
    e["artifact_puts"] = x.artifacts.puts;
    e["artifact_corrupt"] = x.artifacts.corrupt;
    e["artifact_lease_waits"] = x.artifacts.lease_waits;
    e["artifact_store_failures"] = x.artifacts.store_failures;
    list.push_back(e);
  }
  j["per_replica"] = list;
  j["wall_seconds"] = r.wall_seconds;
  return j.dump(indent);
}

}  // namespace gearbox
