// One plan per fleet (gearbox/fleet_plan.h) on the in-process stand-in and on
// a real redis-server started by the test.
#include "gearbox/fleet_plan.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gearbox/clock.h"
#include "gearbox/fleet.h"
#include "gearbox/runtime.h"
#include "gearbox/update_worker.h"
#include "gtest/gtest.h"
#include "src/common/mutex.h"
#include "tests/redis_fixture.h"

namespace gearbox {
namespace {

enum class Kind { kInProcess, kRedis };

const FleetFingerprint kModel{"model-p", "simulated", "1", "x86_64", "float32"};

std::vector<int64_t> Gears(const AdaptiveGearRuntime& rt) {
  SnapshotRef s = rt.GetSnapshot();
  return {s->gears(0).begin(), s->gears(0).end()};
}

class FleetPlanTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kInProcess) {
      auto s = std::make_unique<InProcessFleetStore>(&clock_);
      in_process_ = s.get();
      store_ = std::move(s);
    } else {
      server_ = std::make_unique<testing::RedisServer>();
      GEARBOX_REQUIRE_REDIS(*server_);
      RedisFleetStoreOptions o;
      o.url = server_->url();
      o.command_timeout_ms = 2000;
      o.log = [](LogLevel, std::string_view) {};
      store_ = *RedisFleetStore::Create(o);
    }
    for (int i = 0; i < 2; ++i) {
      RuntimeOptions o;
      o.clock = &clock_;
      o.pool = &pools_[i];
      o.start_worker = false;
      runtimes_.push_back(
          *AdaptiveGearRuntime::Create({{"SEQLEN", {1, 2, 4, 8, 16384}, false, false}}, o));
    }
  }
  std::unique_ptr<FleetPlanSync> Sync(const std::string& id, int64_t lease_ms = 60000) {
    FleetPlanOptions o;
    o.replica_id = id;
    o.lease_ms = lease_ms;
    auto s = FleetPlanSync::Create(store_.get(), kModel, {"SEQLEN"}, o);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  void Pass(int ms) {
    if (GetParam() == Kind::kInProcess) {
      clock_.Advance(ms / 1000.0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }

  // Waits (polling, up to ~30 s: readiness, not a timing assertion) until
  // `ready` holds; false if it never did.
  static bool Eventually(const std::function<bool()>& ready) {
    for (int i = 0; i < 3000; ++i) {
      if (ready()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ready();
  }
  // Until a subscriber listens on the plan's channel (a Redis subscription
  // connects on its own thread): a probe nobody decodes as a version.
  bool Listening() {
    const std::string channel = FleetKeyPrefix(kModel) + ":plan:changed";
    return Eventually([&] {
      absl::StatusOr<int64_t> n = store_->Publish(channel, "probe");
      return n.ok() && *n >= 1;
    });
  }

  ManualClock clock_{100.0};
  std::unique_ptr<testing::RedisServer> server_;
  std::unique_ptr<FleetStore> store_;
  InProcessFleetStore* in_process_ = nullptr;
  GraphResourcePool pools_[2];
  std::vector<std::unique_ptr<AdaptiveGearRuntime>> runtimes_;
};

// A follower's own limits: a plan above its max_graphs is refused (its
// gears stay), a smaller newer one is adopted; hysteresis puts off a version
// that comes sooner than min_adopt_interval_seconds after the last adoption.
TEST_P(FleetPlanTest, AFollowerRefusesWhatItCannotHoldAndKeepsItsHysteresis) {
  AdaptiveGearRuntime& a = *runtimes_[0];
  AdaptiveGearRuntime& b = *runtimes_[1];
  auto leader = Sync("leader");
  FleetPlanOptions fo;
  fo.replica_id = "follower";
  fo.may_lead = false;
  fo.max_graphs = 4;
  fo.min_adopt_interval_seconds = 60;
  auto follower = *FleetPlanSync::Create(store_.get(), kModel, {"SEQLEN"}, fo);
  const std::vector<int64_t> own = Gears(b);
  ASSERT_TRUE(a.CommitUpdate({{64, 256, 1024, 4096, 16384}}, 100).ok());  // 5 graphs
  ASSERT_TRUE(leader->Step(&a, 100)->published);
  auto s = follower->Step(&b, 100);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->refused);
  EXPECT_FALSE(s->adopted);
  EXPECT_EQ(Gears(b), own);
  EXPECT_FALSE(follower->Step(&b, 101)->refused);  // once per version
  ASSERT_TRUE(a.CommitUpdate({{256, 1024, 16384}}, 110).ok());
  ASSERT_TRUE(leader->Step(&a, 110)->published);
  s = follower->Step(&b, 110);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->adopted);
  EXPECT_EQ(Gears(b), (std::vector<int64_t>{256, 1024, 16384}));
  // Hysteresis: a version 20 s after the adoption waits until 60 s have passed.
  ASSERT_TRUE(a.CommitUpdate({{512, 16384}}, 130).ok());
  ASSERT_TRUE(leader->Step(&a, 130)->published);
  s = follower->Step(&b, 130);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->deferred);
  EXPECT_EQ(Gears(b), (std::vector<int64_t>{256, 1024, 16384}));
  s = follower->Step(&b, 171);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->adopted);
  EXPECT_EQ(Gears(b), (std::vector<int64_t>{512, 16384}));
  fo.max_graphs = -1;
  auto bad = FleetPlanSync::Create(store_.get(), kModel, {"SEQLEN"}, fo);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fleet.max_graphs"), std::string::npos);
}

TEST_P(FleetPlanTest, TheLeaderPublishesAndAFollowerAdoptsOnce) {
  AdaptiveGearRuntime& a = *runtimes_[0];
  AdaptiveGearRuntime& b = *runtimes_[1];
  ASSERT_TRUE(a.CommitUpdate({{64, 256, 1024, 16384}}, 100).ok());
  auto sa = Sync("a");
  auto sb = Sync("b");
  auto step = sa->Step(&a, 100);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->leader);
  EXPECT_TRUE(step->published);
  EXPECT_EQ(step->version, 1u);
  step = sb->Step(&b, 101);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(step->leader);
  EXPECT_TRUE(step->adopted);
  EXPECT_EQ(Gears(b), (std::vector<int64_t>{64, 256, 1024, 16384}));
  // Nothing new: no second adoption, no second publication.
  step = sb->Step(&b, 102);
  EXPECT_FALSE(step->adopted);
  step = sa->Step(&a, 102);
  EXPECT_FALSE(step->published);
  EXPECT_EQ(step->version, 1u);
  // The leader changes its gears: version 2, adopted once.
  ASSERT_TRUE(a.CommitUpdate({{128, 1024, 16384}}, 103).ok());
  EXPECT_EQ(sa->Step(&a, 103)->version, 2u);
  EXPECT_TRUE(sb->Step(&b, 104)->adopted);
  EXPECT_EQ(Gears(b), (std::vector<int64_t>{128, 1024, 16384}));
}

TEST_P(FleetPlanTest, AnotherReplicaTakesOverWhenTheLeaseLapses) {
  // Long enough that a loaded machine does not let it lapse between two calls.
  constexpr int kLeaseMs = 1500;
  auto sa = Sync("a", kLeaseMs);
  auto sb = Sync("b", kLeaseMs);
  EXPECT_TRUE(sa->Step(runtimes_[0].get(), 100)->leader);
  EXPECT_FALSE(sb->Step(runtimes_[1].get(), 100)->leader);
  Pass(2 * kLeaseMs);  // a stopped renewing
  auto step = sb->Step(runtimes_[1].get(), 101);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->leader);
  EXPECT_FALSE(sa->Step(runtimes_[0].get(), 101)->leader);
}

// Lead before an update: the first replica takes the lease and renews it,
// the other does not get it; once the holder resigns the other takes over
// at once (not after lease_ms); a replica that may not lead never leads.
TEST_P(FleetPlanTest, LeadTakesTheLeaseAndResignHandsItOn) {
  auto sa = Sync("a");
  auto sb = Sync("b");
  EXPECT_TRUE(*sa->Lead());
  EXPECT_TRUE(*sa->Lead());  // renewed
  EXPECT_FALSE(*sb->Lead());
  EXPECT_TRUE(sb->Resign().ok());  // not the holder: nothing happens
  EXPECT_FALSE(*sb->Lead());
  ASSERT_TRUE(sa->Resign().ok());
  EXPECT_TRUE(*sb->Lead());
  EXPECT_FALSE(*sa->Lead());
  FleetPlanOptions o;
  o.replica_id = "canary";
  o.may_lead = false;
  auto canary = *FleetPlanSync::Create(store_.get(), kModel, {"SEQLEN"}, o);
  ASSERT_TRUE(sb->Resign().ok());
  EXPECT_FALSE(*canary->Lead());
  EXPECT_TRUE(*sa->Lead());
}

// Change notification: the leader announces each version it writes on
// "<prefix>:plan:changed"; a watching follower learns of it without a store
// call (NewerPlanAnnounced) and its callback gets the version; its Step
// then adopts, and the flag clears. Messages that are not versions are
// ignored (the channel is untrusted).
TEST_P(FleetPlanTest, AWatchingFollowerLearnsOfANewVersionAtOnce) {
  auto sa = Sync("a");
  auto sb = Sync("b");
  Mutex mu;
  std::vector<uint64_t> versions;
  ASSERT_TRUE(sb->Watch([&](uint64_t v) {
                  MutexLock lock(&mu);
                  versions.push_back(v);
                }).ok());
  ASSERT_TRUE(Listening());
  EXPECT_FALSE(sb->NewerPlanAnnounced());
  ASSERT_TRUE(sa->Step(runtimes_[0].get(), 100)->leader);  // version 1: the initial gears
  ASSERT_TRUE(runtimes_[0]->CommitUpdate({{32, 16384}}, 100).ok());
  const std::string channel = FleetKeyPrefix(kModel) + ":plan:changed";
  ASSERT_TRUE(store_->Publish(channel, "99999999999999999999999").ok());  // not a version
  auto published = sa->Step(runtimes_[0].get(), 101);
  ASSERT_TRUE(published.ok()) << published.status();
  ASSERT_TRUE(published->published);
  EXPECT_TRUE(published->announced);
  ASSERT_TRUE(Eventually([&] {
    MutexLock lock(&mu);
    return !versions.empty() && versions.back() == published->version;
  }));
  {
    MutexLock lock(&mu);
    for (uint64_t v : versions) EXPECT_LE(v, published->version);  // the junk was ignored
  }
  EXPECT_TRUE(sb->NewerPlanAnnounced());
  auto adopted = sb->Step(runtimes_[1].get(), 101);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_TRUE(adopted->adopted);
  EXPECT_EQ(Gears(*runtimes_[1]), (std::vector<int64_t>{32, 16384}));
  EXPECT_FALSE(sb->NewerPlanAnnounced());
}

// The whole path on a running worker: the follower's announcement wakes
// its worker (UpdateNow), whose update's on_update steps and adopts the
// plan, while its clock never reaches the next scheduled check.
TEST_P(FleetPlanTest, AnAnnouncementWakesTheFollowersWorkerToAdopt) {
  auto leader = Sync("a");
  std::unique_ptr<FleetPlanSync> follower = Sync("b");
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock_;  // never advanced: the scheduled check (160 s) never comes
  o.pool = &pool;
  o.policy = UpdatePolicy::kStatic;
  o.start_worker = true;
  FleetPlanSync* sync = follower.get();
  AdaptiveGearRuntime* self = nullptr;
  o.on_update = [sync, &self](const UpdateRecord& r) { (void)sync->Step(self, r.time); };
  auto rt = AdaptiveGearRuntime::Create({{"SEQLEN", {1, 2, 4, 8, 16384}, false, false}}, o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  self = rt->get();
  ASSERT_TRUE(follower->Watch([self](uint64_t) { self->worker()->UpdateNow(); }).ok());
  ASSERT_TRUE(Listening());
  ASSERT_TRUE(leader->Step(runtimes_[0].get(), 100)->leader);
  ASSERT_TRUE(runtimes_[0]->CommitUpdate({{64, 16384}}, 100).ok());
  ASSERT_TRUE(leader->Step(runtimes_[0].get(), 100)->announced);
  // The leader announced twice (its first version, then this one): the
  // worker runs one update per announcement it has not yet seen (two
  // announcements before it wakes are one update), and each adopts the
  // newest version. The clock never moves, so every check is an update.
  const std::vector<int64_t> expected{64, 16384};
  (*rt)->worker()->WaitForChecksForTesting(1);
  if (Gears(**rt) != expected) (*rt)->worker()->WaitForChecksForTesting(2);
  EXPECT_EQ(Gears(**rt), expected);
  EXPECT_EQ((*rt)->worker()->updates(), (*rt)->worker()->checks());
  (*rt)->StopWorker();
}

TEST_P(FleetPlanTest, ACorruptPlanIsNeverAdoptedAndTheLeaderReplacesIt) {
  ASSERT_TRUE(*store_->CompareAndSet(FleetKeyPrefix(kModel) + ":plan", 0,
                                     "gearbox-plan 1\nleader x\ntime 1\ndim SEQLEN 8,4", 0));
  auto sa = Sync("a");
  auto sb = Sync("b");
  ASSERT_TRUE(sa->Step(runtimes_[0].get(), 100)->leader);  // publishes over the corrupt one
  ASSERT_TRUE(runtimes_[0]->CommitUpdate({{32, 16384}}, 100).ok());
  ASSERT_TRUE(sa->Step(runtimes_[0].get(), 100)->published);
  ASSERT_TRUE(*store_->CompareAndSet(FleetKeyPrefix(kModel) + ":plan", 3, "junk", 0));
  const std::vector<int64_t> before = Gears(*runtimes_[1]);
  auto step = sb->Step(runtimes_[1].get(), 101);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss) << step.status();
  EXPECT_EQ(Gears(*runtimes_[1]), before);
}

TEST_P(FleetPlanTest, AReplicaThatMayNotLeadOnlyAdopts) {
  FleetPlanOptions o;
  o.replica_id = "canary";
  o.may_lead = false;
  auto follower = *FleetPlanSync::Create(store_.get(), kModel, {"SEQLEN"}, o);
  auto step = follower->Step(runtimes_[1].get(), 100);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_FALSE(step->leader);  // the lease is free, yet not taken
  EXPECT_EQ(step->version, 0u);
  EXPECT_TRUE(Sync("a")->Step(runtimes_[0].get(), 100)->leader);
}

INSTANTIATE_TEST_SUITE_P(Stores, FleetPlanTest, ::testing::Values(Kind::kInProcess, Kind::kRedis),
                         [](const ::testing::TestParamInfo<Kind>& p) {
                           return p.param == Kind::kRedis ? "Redis" : "InProcess";
                         });

// The store going away: publishing fails (the step says it was not
// announced) and the follower still adopts by polling at its Step; the
// subscription survives, reconnects when the server is back, and is told
// of the next version.
TEST(FleetPlanRedisTest, NotificationSurvivesTheStoreGoingAwayAndPollingStands) {
  testing::RedisServer server;
  GEARBOX_REQUIRE_REDIS(server);
  RedisFleetStoreOptions o;
  o.url = server.url();
  o.command_timeout_ms = 2000;
  o.breaker_initial_backoff_ms = 1;  // the breaker on real time: retry at once here
  o.breaker_max_backoff_ms = 50;
  o.log = [](LogLevel, std::string_view) {};
  auto store = *RedisFleetStore::Create(o);
  ManualClock clock(100.0);
  GraphResourcePool pools[2];
  std::vector<std::unique_ptr<AdaptiveGearRuntime>> rt;
  for (auto& pool : pools) {
    RuntimeOptions ro;
    ro.clock = &clock;
    ro.pool = &pool;
    ro.start_worker = false;
    rt.push_back(*AdaptiveGearRuntime::Create({{"SEQLEN", {1, 2, 4, 8, 16384}, false, false}}, ro));
  }
  auto sync = [&](const std::string& id) {
    FleetPlanOptions po;
    po.replica_id = id;
    return *FleetPlanSync::Create(store.get(), kModel, {"SEQLEN"}, po);
  };
  auto leader = sync("a");
  auto follower = sync("b");
  ASSERT_TRUE(follower->Watch().ok());
  const std::string channel = FleetKeyPrefix(kModel) + ":plan:changed";
  auto listening = [&] {
    for (int i = 0; i < 3000; ++i) {  // readiness, up to ~30 s
      absl::StatusOr<int64_t> n = store->Publish(channel, "probe");
      if (n.ok() && *n >= 1) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(listening());
  ASSERT_TRUE(leader->Step(rt[0].get(), 100)->published);  // version 1
  ASSERT_TRUE(follower->Step(rt[1].get(), 100).ok());
  server.Kill();
  ASSERT_TRUE(rt[0]->CommitUpdate({{16, 16384}}, 101).ok());
  EXPECT_FALSE(leader->Step(rt[0].get(), 101).ok());  // the store is away: nothing written
  EXPECT_FALSE(follower->NewerPlanAnnounced());
  ASSERT_TRUE(server.Start());  // empty (no persistence): the next version is 1 again
  absl::StatusOr<FleetPlanStep> step;
  for (int i = 0; i < 3000; ++i) {  // until the breaker lets a call through
    step = leader->Step(rt[0].get(), 102);
    if (step.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->published);
  // Polling stands whatever the channel did: the follower adopts at its
  // Step (the versions started over with the empty server).
  auto polled = follower->Step(rt[1].get(), 102);
  ASSERT_TRUE(polled.ok()) << polled.status();
  EXPECT_TRUE(polled->adopted);
  EXPECT_EQ(Gears(*rt[1]), (std::vector<int64_t>{16, 16384}));
  ASSERT_TRUE(listening());
  ASSERT_TRUE(rt[0]->CommitUpdate({{8, 16384}}, 103).ok());
  auto next = leader->Step(rt[0].get(), 103);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->published);
  EXPECT_TRUE(next->announced);
  bool told = false;
  for (int i = 0; i < 3000 && !told; ++i) {
    told = follower->NewerPlanAnnounced();
    if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(told) << "the resubscribed follower was not told of version " << next->version;
  auto adopted = follower->Step(rt[1].get(), 103);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_TRUE(adopted->adopted);
  EXPECT_EQ(Gears(*rt[1]), (std::vector<int64_t>{8, 16384}));
}

TEST(FleetPlanStoreDownTest, AnUnreachableStoreChangesNothing) {
  ManualClock clock(0.0);
  InProcessFleetStore store(&clock);
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock;
  o.pool = &pool;
  o.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create({{"SEQLEN", {1, 2, 4, 8}, false, false}}, o);
  FleetPlanOptions po;
  po.replica_id = "a";
  auto sync = *FleetPlanSync::Create(&store, kModel, {"SEQLEN"}, po);
  store.SetAvailable(false);
  auto step = sync->Step(rt.get(), 1);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Gears(*rt), (std::vector<int64_t>{1, 2, 4, 8}));
}

TEST(FleetPlanCodecTest, RoundTripsAndRejectsNamingTheLine) {
  FleetPlan plan;
  plan.leader = "replica-3";
  plan.time = 1234.5;
  plan.gears = {{1, 8, 64}, {16, 4096}};
  const std::vector<std::string> dims = {"BATCHSIZE", "SEQLEN"};
  auto back = DecodeFleetPlan(EncodeFleetPlan(plan, dims), dims);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->leader, "replica-3");
  EXPECT_EQ(back->time, 1234.5);
  EXPECT_EQ(back->gears, plan.gears);
  const char* bad[] = {
      "",
      "gearbox-plan 2\nleader a\ntime 1\ndim BATCHSIZE 1\ndim SEQLEN 1",
      "gearbox-plan 1\nleader \ntime 1\ndim BATCHSIZE 1\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime nan\ndim BATCHSIZE 1\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim SEQLEN 1\ndim BATCHSIZE 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim BATCHSIZE 4,2\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim BATCHSIZE 0\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim BATCHSIZE 01\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim BATCHSIZE 1,,2\ndim SEQLEN 1",
      "gearbox-plan 1\nleader a\ntime 1\ndim BATCHSIZE 1\ndim SEQLEN 2199023255553",
  };
  for (const char* text : bad) {
    auto r = DecodeFleetPlan(text, dims);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("fleet plan"), absl::string_view::npos) << r.status();
  }
}

TEST(FleetPlanSyncTest, OptionsAreValidatedNamingTheField) {
  InProcessFleetStore store;
  FleetPlanOptions o;
  auto s = FleetPlanSync::Create(&store, kModel, {"SEQLEN"}, o);
  EXPECT_NE(s.status().message().find("fleet.replica_id"), absl::string_view::npos);
  o.replica_id = "a";
  o.lease_ms = 0;
  s = FleetPlanSync::Create(&store, kModel, {"SEQLEN"}, o);
  EXPECT_NE(s.status().message().find("fleet.lease_ms: 0"), absl::string_view::npos);
  o.lease_ms = 1000;
  EXPECT_FALSE(FleetPlanSync::Create(&store, kModel, {"SEQ LEN"}, o).ok());
}

}  // namespace
}  // namespace gearbox
