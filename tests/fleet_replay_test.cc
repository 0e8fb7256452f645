// Fleet replay (gearbox/fleet_replay.h): replicas sharing statistics through
// the in-process stand-in and through a real redis-server the test starts.
#include "gearbox/fleet_replay.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "gearbox/config.h"
#include "gearbox/replay.h"
#include "gtest/gtest.h"
#include "tests/redis_fixture.h"

namespace gearbox {
namespace {

RuntimeConfig Config() {
  auto c = ParseConfig(R"({"dims": [{"name": "SEQLEN", "policy": "TIMES", "min": 1,
      "max": 16384, "splittable": false}]})");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// An hour at 6 requests/s of a two-bump prompt-length mixture.
Trace MixtureTrace() {
  Trace t;
  t.dimensions = {"SEQLEN"};
  std::mt19937_64 rng(11);
  std::normal_distribution<double> a(300, 40), b(900, 90);
  for (int i = 0; i < 3600 * 6; ++i) {
    t.time.push_back(i / 6.0);
    const double v = (rng() % 3 == 0) ? b(rng) : a(rng);
    t.sizes.push_back(std::clamp<int64_t>(static_cast<int64_t>(v), 1, 1200));
  }
  return t;
}

FleetReplayResult RunFleet(const FleetReplayOptions& o) {
  static const RuntimeConfig config = Config();
  static const Trace trace = MixtureTrace();
  auto r = FleetReplay(config, trace, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : FleetReplayResult{};
}

TEST(FleetReplayTest, SharingCutsEachReplicasWaste) {
  FleetReplayOptions shared;
  shared.replicas = 4;
  FleetReplayOptions isolated = shared;
  isolated.share_stats = false;
  const FleetReplayResult s = RunFleet(shared);
  const FleetReplayResult i = RunFleet(isolated);
  EXPECT_EQ(s.requests, 3600u * 6u);
  EXPECT_EQ(s.rejected_requests, 0u);
  ASSERT_EQ(s.replicas.size(), 4u);
  EXPECT_LT(s.padding_waste, i.padding_waste);
  for (const ReplicaReplayResult& r : s.replicas) {
    EXPECT_GT(r.fleet.merges, 0u);
    EXPECT_EQ(r.requests, 3600u * 6u / 4u);  // round-robin
  }
  EXPECT_GT(s.store_counters.calls, 0u);
  EXPECT_GT(s.store_counters.bytes_received, 0u);
  EXPECT_EQ(i.store_counters.calls, 0u);
}

TEST(FleetReplayTest, AJoiningReplicaCatchesUpWithinTwoUpdates) {
  FleetReplayOptions o;
  o.replicas = 4;
  o.join_at = 1800.0;
  const FleetReplayResult r = RunFleet(o);
  ASSERT_EQ(r.replicas.size(), 4u);
  EXPECT_EQ(r.replicas.back().joined_at, 1800.0);
  ASSERT_TRUE(r.join_converged_updates.has_value());
  EXPECT_LE(*r.join_converged_updates, 2u);
  // Its first five minutes: alone it starts from the initial ladder and
  // pays more padding than with the fleet's statistics.
  FleetReplayOptions alone = o;
  alone.share_stats = false;
  const FleetReplayResult a = RunFleet(alone);
  auto early_waste = [](const ReplicaReplayResult& x) {
    double padded = 0, raw = 0;
    for (const WasteBucket& b : x.waste_timeline) {
      if (b.start >= 1800.0 && b.start < 2100.0) {
        padded += b.padded;
        raw += b.raw;
      }
    }
    return raw > 0 ? padded / raw - 1.0 : 0.0;
  };
  const double shared_early = early_waste(r.replicas.back());
  const double alone_early = early_waste(a.replicas.back());
  std::printf("joiner's waste in its first 5 minutes: %.2f%% shared, %.2f%% alone\n",
              100 * shared_early, 100 * alone_early);
  EXPECT_LT(shared_early, alone_early);
  uint64_t total = 0;
  for (const ReplicaReplayResult& x : r.replicas) total += x.requests;
  EXPECT_EQ(total, 3600u * 6u);
}

TEST(FleetReplayTest, AStoreOutageLosesNoRequestAndTheReplicasResynchronise) {
  FleetReplayOptions o;
  o.replicas = 4;
  o.store_outage = std::make_pair(1200.0, 2400.0);
  const FleetReplayResult r = RunFleet(o);
  EXPECT_EQ(r.requests, 3600u * 6u);
  EXPECT_EQ(r.rejected_requests, 0u);
  EXPECT_GT(r.store_counters.failures, 0u);
  for (const ReplicaReplayResult& x : r.replicas) {
    EXPECT_GT(x.fleet.local_only, 0u);     // planned alone during the outage
    EXPECT_GT(x.fleet.push_failures, 0u);  // ... and its pushes failed
    // Updates after the outage merged the fleet again: more merges than the ~20 before it.
    EXPECT_GT(x.fleet.merges, 30u);
  }
}

TEST(FleetReplayTest, OnePlanPerFleetGivesEveryReplicaTheLeadersGears) {
  FleetReplayOptions o;
  o.replicas = 3;
  o.fleet_plan = true;
  o.join_at = 1800.0;
  const FleetReplayResult r = RunFleet(o);
  ASSERT_EQ(r.replicas.size(), 3u);
  const ReplicaReplayResult& leader = r.replicas[0];
  EXPECT_GT(leader.plan_publications, 0u);
  EXPECT_EQ(leader.plan_adoptions, 0u);
  for (size_t k = 1; k < r.replicas.size(); ++k) {
    EXPECT_EQ(r.replicas[k].plan_publications, 0u);
    EXPECT_GT(r.replicas[k].plan_adoptions, 0u);
    EXPECT_EQ(r.replicas[k].final_gears, leader.final_gears) << k;
  }
  EXPECT_EQ(r.requests, 3600u * 6u);
  EXPECT_EQ(r.rejected_requests, 0u);
}

// One plan per fleet, planned from the merged window (the followers push
// before the leader plans, the newest slots filled, the first plan after
// the fleet's min_window_weight requests): every replica wastes about what
// one runtime serving the whole trace does, for 4 and 16 replicas.
// One runtime on the whole mixture trace, and the fleet of 4 and of 16
// replicas with one plan and shared artifacts on it: replayed once for the
// two tests below.
struct OnePlanFleets {
  ReplayResult single;
  std::vector<std::pair<int, FleetReplayResult>> fleets;
};
const OnePlanFleets& OnePlanFleetsOnTheMixture() {
  static const OnePlanFleets runs = [] {
    OnePlanFleets out;
    out.single = Replay(Config(), MixtureTrace(), ReplayOptions{}).value();
    for (const int n : {4, 16}) {
      FleetReplayOptions o;
      o.replicas = n;
      o.fleet_plan = true;
      o.share_artifacts = true;
      out.fleets.emplace_back(n, RunFleet(o));
    }
    return out;
  }();
  return runs;
}

TEST(FleetReplayTest, OnePlanPerFleetWastesWhatOneRuntimeDoes) {
  const OnePlanFleets& runs = OnePlanFleetsOnTheMixture();
  const double one = runs.single.padding_waste;
  for (const auto& [n, r] : runs.fleets) {
    ASSERT_EQ(r.replicas.size(), static_cast<size_t>(n));
    for (const ReplicaReplayResult& x : r.replicas) {
      EXPECT_LE(x.padding_waste, one * 1.05 + 0.002) << n << " replicas, replica " << x.replica;
    }
    EXPECT_LE(r.padding_waste, one + 0.001) << n << " replicas";
  }
}

// One plan and shared artifacts: the fleet builds about the graphs one
// runtime builds, not N x. No replica prewarms the configured gears (no plan
// exists at the start: they are compiled on a miss, once in the fleet when
// the others find them in the store), and each gear of the plan is built
// once and loaded by the others.
TEST(FleetReplayTest, OnePlanAndSharedArtifactsCompileWhatOneRuntimeDoes) {
  const OnePlanFleets& runs = OnePlanFleetsOnTheMixture();
  const double one = static_cast<double>(runs.single.compiles);
  for (const auto& [n, r] : runs.fleets) {
    ASSERT_EQ(r.replicas.size(), static_cast<size_t>(n));
    uint64_t puts = 0;
    for (const ReplicaReplayResult& x : r.replicas) {
      EXPECT_EQ(x.prewarm_compiles, 0u) << n << " replicas, replica " << x.replica;
      EXPECT_LE(x.request_compiles, x.compiles);
      puts += x.artifacts.puts;
    }
    EXPECT_EQ(puts, r.compiles) << n << " replicas";  // every build put, once
    // Not N x: below twice one runtime's (the rest: the plan's gears built
    // before a request needs them, and a few misses before the others'
    // artifacts were found).
    EXPECT_LT(static_cast<double>(r.compiles), 2 * one) << n << " replicas";
    EXPECT_GT(r.artifact_loads, 0u);
  }
}

TEST(FleetReplayTest, HashSplitKeepsASizeOnOneReplica) {
  FleetReplayOptions o;
  o.replicas = 3;
  ASSERT_TRUE(ParseReplicaSplit("hash:SEQLEN", &o).ok());
  const FleetReplayResult r = RunFleet(o);
  uint64_t total = 0;
  for (const ReplicaReplayResult& x : r.replicas) {
    EXPECT_GT(x.requests, 0u);
    total += x.requests;
  }
  EXPECT_EQ(total, 3600u * 6u);
}

TEST(FleetReplayTest, BadOptionsNameTheFlag) {
  const RuntimeConfig config = Config();
  const Trace trace = MixtureTrace();
  FleetReplayOptions o;
  o.replicas = 0;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--replicas: 0"),
            absl::string_view::npos);
  o.replicas = 2;
  o.join_at = -5.0;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--join-at: -5"),
            absl::string_view::npos);
  o.join_at.reset();
  ASSERT_TRUE(ParseReplicaSplit("hash:BATCH", &o).ok());
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("hash:BATCH"),
            absl::string_view::npos);
  EXPECT_FALSE(ParseReplicaSplit("random", &o).ok());
  EXPECT_FALSE(ParseStoreOutage("10").ok());
  EXPECT_FALSE(ParseStoreOutage("20:10").ok());
  EXPECT_FALSE(ParseStoreOutage("a:10").ok());
  auto ok = ParseStoreOutage("10:20.5");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->second, 20.5);
  o = {};
  o.artifact_bytes = 0;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--artifact-bytes: 0"),
            absl::string_view::npos);
  o = {};
  o.pace = -1;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--pace: -1"),
            absl::string_view::npos);
  o = {};
  o.artifact_poll_seconds = 0;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--artifact-poll-seconds: 0"),
            absl::string_view::npos);
  o = {};
  o.only_replica = 1;
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("only with --store"),
            absl::string_view::npos);
  o = {};
  o.store_url = "redis://127.0.0.1";
  EXPECT_NE(FleetReplay(config, trace, o).status().message().find("--store"),
            absl::string_view::npos);
}

// The same fleet on a real Redis: the same figures as on the stand-in.
TEST(FleetReplayTest, RedisGivesTheStandInsFigures) {
  testing::RedisServer server;
  GEARBOX_REQUIRE_REDIS(server);
  FleetReplayOptions o;
  o.replicas = 4;
  const FleetReplayResult local = RunFleet(o);
  o.store_url = server.url();
  const FleetReplayResult redis = RunFleet(o);
  EXPECT_EQ(redis.store, server.url());
  EXPECT_EQ(redis.requests, local.requests);
  EXPECT_NEAR(redis.padding_waste, local.padding_waste, 0.005);
  EXPECT_EQ(redis.store_counters.failures, 0u);
  for (const ReplicaReplayResult& x : redis.replicas) EXPECT_GT(x.fleet.merges, 0u);
}

// Shared artifacts: every replica's graphs but the first builder's come from
// the store, so the fleet compiles about what one replica does.
TEST(FleetReplayTest, SharedArtifactsAreLoadedInsteadOfCompiled) {
  FleetReplayOptions o;
  o.replicas = 4;
  const FleetReplayResult alone = RunFleet(o);
  o.share_artifacts = true;
  o.artifact_bytes = 300 * 1024;  // two chunks each
  const FleetReplayResult shared = RunFleet(o);
  EXPECT_EQ(shared.requests, alone.requests);
  EXPECT_EQ(shared.rejected_requests, 0u);
  EXPECT_EQ(alone.artifact_loads, 0u);
  EXPECT_GT(shared.artifact_loads, 0u);
  EXPECT_LT(shared.compiles, alone.compiles);
  uint64_t puts = 0;
  for (const ReplicaReplayResult& x : shared.replicas) {
    EXPECT_EQ(x.artifacts.corrupt, 0u);
    EXPECT_EQ(x.artifacts.loads, x.artifact_loads);
    puts += x.artifacts.puts;
  }
  // Each artifact is put by the replica that built it, never by a loader.
  EXPECT_EQ(puts, shared.compiles);
  // The fleet's compiles stay below twice one replica's (not N x).
  uint64_t most = 0;
  for (const ReplicaReplayResult& x : shared.replicas) {
    most = std::max<uint64_t>(most, x.compiles + x.artifact_loads);
  }
  EXPECT_LT(shared.compiles, 2 * most);
}

// The store down for a while: the replicas build their graphs themselves,
// no request is lost, and loading resumes when it is back.
TEST(FleetReplayTest, SharedArtifactsSurviveAStoreOutage) {
  FleetReplayOptions o;
  o.replicas = 4;
  o.share_artifacts = true;
  const FleetReplayResult steady = RunFleet(o);
  o.store_outage =
      std::make_pair(0.0, 200.0);  // over the start: every replica builds its first gears
  const FleetReplayResult down = RunFleet(o);
  EXPECT_EQ(down.requests, steady.requests);
  EXPECT_EQ(down.rejected_requests, 0u);
  uint64_t failures = 0;
  for (const ReplicaReplayResult& x : down.replicas) failures += x.artifacts.store_failures;
  EXPECT_GT(failures, 0u);
  EXPECT_GT(down.compiles, steady.compiles);  // each replica built its first gears itself
  EXPECT_GT(down.artifact_loads, 0u);         // and loads again once the store is back
}

// A replica joining a fleet with one plan adopts the plan and prewarms its
// gears from the fleet's artifacts before its first request.
TEST(FleetReplayTest, AJoinerPrewarmsTheFleetPlansGearsFromTheArtifacts) {
  FleetReplayOptions o;
  o.replicas = 3;
  o.fleet_plan = true;
  o.share_artifacts = true;
  o.join_at = 1800.0;
  const FleetReplayResult r = RunFleet(o);
  ASSERT_EQ(r.replicas.size(), 3u);
  const ReplicaReplayResult& joiner = r.replicas.back();
  EXPECT_GE(joiner.plan_adoptions, 1u);
  // Everything it had at the start came from the store: it compiled none of it.
  EXPECT_GT(joiner.prewarm_loads, 0u);
  EXPECT_EQ(joiner.prewarm_compiles, 0u);
  // The first replica had no plan to adopt: it prewarmed nothing (its
  // configured gears compiled on their first request).
  EXPECT_EQ(r.replicas.front().prewarm_compiles, 0u);
  EXPECT_GT(r.replicas.front().request_compiles, 0u);
  EXPECT_EQ(joiner.final_gears, r.replicas.front().final_gears);
  EXPECT_EQ(r.rejected_requests, 0u);
}

TEST(FleetReplayTest, SharedArtifactsOnRedisGiveTheStandInsFigures) {
  testing::RedisServer server;
  GEARBOX_REQUIRE_REDIS(server);
  FleetReplayOptions o;
  o.replicas = 4;
  o.share_artifacts = true;
  o.artifact_bytes = 300 * 1024;
  const FleetReplayResult local = RunFleet(o);
  o.store_url = server.url();
  const FleetReplayResult redis = RunFleet(o);
  EXPECT_EQ(redis.store_counters.failures, 0u);
  EXPECT_EQ(redis.compiles, local.compiles);
  EXPECT_EQ(redis.artifact_loads, local.artifact_loads);
}

}  // namespace
}  // namespace gearbox
