// Shared statistics (gearbox/fleet_stats.h): the same behavioural tests on
// the in-process stand-in and on a real redis-server started by the test;
// a killed and restarted server; hostile buckets; the bucket decoder.
#include "gearbox/fleet_stats.h"

#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gearbox/clock.h"
#include "gearbox/fleet.h"
#include "gearbox/memory_probe.h"
#include "gearbox/plan.h"
#include "gearbox/runtime.h"
#include "gtest/gtest.h"
#include "tests/redis_fixture.h"

namespace gearbox {
namespace {

using ::gearbox::testing::RedisServer;

enum class Kind { kInProcess, kRedis };

const FleetFingerprint kModel{"model-a", "simulated", "1", "x86_64", "float32"};

std::vector<DimensionSpec> Seq() { return {{"SEQLEN", *MakeTimesGears(1, 16384), false, false}}; }

// Prompt lengths: two bumps (a chat mix), all below 1,200.
int64_t Mixture(std::mt19937_64& rng) {
  std::normal_distribution<double> a(300, 40), b(900, 90);
  const double v = (rng() % 3 == 0) ? b(rng) : a(rng);
  return std::clamp<int64_t>(static_cast<int64_t>(v), 1, 1200);
}

// One simulated replica: a runtime (replan policy, no worker) on the shared
// clock, its statistics merged through `store` when `fleet` is set.
struct Replica {
  Replica(ManualClock* clock, FleetStore* store, std::string id, bool fleet,
          FleetFingerprint fingerprint = kModel)
      : clock_(clock) {
    if (fleet) {
      FleetStatsOptions fo;
      fo.replica_id = std::move(id);
      auto s =
          FleetStatsSync::Create(store, fingerprint, {"SEQLEN"}, AdaptiveOptions{}, fo,
                                 [this](LogLevel, std::string_view m) { logs.emplace_back(m); });
      EXPECT_TRUE(s.ok()) << s.status();
      sync = *std::move(s);
    }
    RuntimeOptions o;
    o.policy = UpdatePolicy::kReplan;
    o.clock = clock;
    o.pool = &pool;
    o.memory_probe = &probe;
    o.start_worker = false;
    o.log = [this](LogLevel, std::string_view m) { logs.emplace_back(m); };
    if (sync) o.merge_window_stats = sync->Hook();
    rt = *AdaptiveGearRuntime::Create(Seq(), o);
  }
  // Requests from t0 to t1 at `rate`/s; every one is served (planned) whatever
  // the store does. Sizes from the mixture, or `size(t, rng)`.
  void Traffic(double t0, double t1, double rate,
               const std::function<int64_t(double, std::mt19937_64&)>& size = nullptr) {
    const int64_t n = std::llround((t1 - t0) * rate);
    for (int64_t i = 0; i < n; ++i) {
      const double t = t0 + static_cast<double>(i) / rate;
      SnapshotRef snap = rt->GetSnapshot();
      const int64_t raw[] = {size ? size(t, rng) : Mixture(rng)};
      Plan plan;
      ASSERT_TRUE(MakePlan(*snap, raw, &plan).ok());
      rt->RecordPlan(plan, t);
      ++served;
    }
  }
  UpdateRecord Update(double now) {
    clock_->Set(now);
    auto r = rt->RunOnce(now);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : UpdateRecord{};
  }
  int64_t LargestGear() const {
    SnapshotRef s = rt->GetSnapshot();
    return s->gears(0).back();
  }
  // Gears the policy placed inside the mixture (not powers of two).
  int PlannedInMixture() const {
    SnapshotRef s = rt->GetSnapshot();
    int n = 0;
    for (int64_t x : s->gears(0)) n += (x > 200 && x <= 1200 && (x & (x - 1)) != 0) ? 1 : 0;
    return n;
  }

  ManualClock* clock_;
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  std::unique_ptr<FleetStatsSync> sync;
  std::unique_ptr<AdaptiveGearRuntime> rt;
  std::mt19937_64 rng{7};
  std::vector<std::string> logs;
  uint64_t served = 0;
};

class FleetStatsTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kInProcess) {
      auto s = std::make_unique<InProcessFleetStore>(&clock_);
      in_process_ = s.get();
      store_ = std::move(s);
      return;
    }
    server_ = std::make_unique<RedisServer>();
    GEARBOX_REQUIRE_REDIS(*server_);
    RedisFleetStoreOptions o;
    o.url = server_->url();
    o.clock = &clock_;
    o.command_timeout_ms = 2000;
    o.log = [](LogLevel, std::string_view) {};
    auto s = RedisFleetStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }

  ManualClock clock_{0.0};
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<FleetStore> store_;
  InProcessFleetStore* in_process_ = nullptr;
};

// A replica that saw no traffic plans from the fleet's: it gets gears for
// sizes only another replica served. Without the fleet it declines.
TEST_P(FleetStatsTest, AReplicaPlansFromTrafficItNeverSaw) {
  Replica a(&clock_, store_.get(), "a", true);
  Replica b(&clock_, store_.get(), "b", true);
  Replica alone(&clock_, store_.get(), "alone", false);
  a.Traffic(0, 120, 20);
  const UpdateRecord ra = a.Update(120);
  EXPECT_TRUE(ra.changed);
  EXPECT_GT(a.sync->counters().slots_pushed, 0u);
  const UpdateRecord rb = b.Update(120);
  EXPECT_TRUE(rb.changed);
  EXPECT_EQ(b.sync->counters().merges, 1u);
  EXPECT_GE(b.PlannedInMixture(), 1) << "b's gears do not cover the fleet's mixture";
  EXPECT_EQ(b.LargestGear(), 16384);
  const UpdateRecord ralone = alone.Update(120);
  EXPECT_FALSE(ralone.changed);
  EXPECT_EQ(alone.PlannedInMixture(), 0);
}

// Another fingerprint (another model, dtype...) is a miss, never a mix.
TEST_P(FleetStatsTest, AnotherFingerprintSeesNothing) {
  Replica a(&clock_, store_.get(), "a", true);
  FleetFingerprint other = kModel;
  other.dtype = "bfloat16";
  Replica c(&clock_, store_.get(), "c", true, other);
  a.Traffic(0, 120, 20);
  a.Update(120);
  const UpdateRecord rc = c.Update(120);
  EXPECT_FALSE(rc.changed);
  EXPECT_EQ(c.sync->counters().merges, 0u);
  EXPECT_EQ(c.sync->counters().local_only, 1u);
}

// A slot pushed twice (a retry, a restarted replica with the same id) adds
// once; another replica's push adds, and the per-replica mean divides by two.
TEST_P(FleetStatsTest, ADuplicatedPushIsHarmless) {
  AdaptiveOptions adaptive;  // 300 s window, 30 slots of 10 s, half-life 150 s
  auto make = [&](const std::string& id, FleetWeighting w) {
    FleetStatsOptions fo;
    fo.replica_id = id;
    fo.weighting = w;
    auto s = FleetStatsSync::Create(store_.get(), kModel, {"SEQLEN"}, adaptive, fo,
                                    [](LogLevel, std::string_view) {});
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  };
  auto local = [] {
    WindowStats stats;
    DimensionStats& d = stats.dimensions.emplace_back();
    d.name = "SEQLEN";
    d.sizes = {{100, 1.0}};
    d.slot_sizes = {{0, {{100, 2.0}}}};
    return stats;
  };
  const double now = 30.0;
  clock_.Set(now);
  const double decay = std::exp(-std::log(2.0) / adaptive.half_life_seconds * now);
  auto first = make("r1", FleetWeighting::kFleetTotal);
  WindowStats s1 = local();
  first->Merge(now, &s1);
  ASSERT_EQ(s1.dimensions[0].sizes.size(), 1u);
  EXPECT_NEAR(s1.dimensions[0].sizes[0].weight, 2.0 * decay, 1e-9);
  auto retry = make("r1", FleetWeighting::kFleetTotal);
  WindowStats s2 = local();
  retry->Merge(now, &s2);
  EXPECT_EQ(retry->counters().slots_duplicate, 1u);
  EXPECT_EQ(retry->counters().slots_pushed, 0u);
  EXPECT_NEAR(s2.dimensions[0].sizes[0].weight, 2.0 * decay, 1e-9);
  auto other = make("r2", FleetWeighting::kFleetTotal);
  WindowStats s3 = local();
  other->Merge(now, &s3);
  EXPECT_NEAR(s3.dimensions[0].sizes[0].weight, 4.0 * decay, 1e-9);
  auto mean = make("r3", FleetWeighting::kPerReplicaMean);
  WindowStats s4;
  s4.dimensions.emplace_back().name = "SEQLEN";
  mean->Merge(now, &s4);  // no local traffic: the mean of r1 and r2
  ASSERT_EQ(s4.dimensions[0].sizes.size(), 1u);
  EXPECT_NEAR(s4.dimensions[0].sizes[0].weight, 2.0 * decay, 1e-9);
  EXPECT_EQ(mean->counters().fleet_replicas_seen, 2.0);
  EXPECT_NEAR(s4.dimensions[0].observed_seconds, now, 1e-9);
}

// The newest slot the other replica has not pushed yet (it pushes at its
// own update) is filled to the fleet's size with the complete slots'
// distribution; with fill_recent_seconds = 0 it holds this replica alone.
// A gear with no local request that the fleet's sizes fall in counts one
// sample; a gear nobody used stays at none.
TEST_P(FleetStatsTest, TheNewestSlotsAreFilledToTheFleetsTraffic) {
  AdaptiveOptions adaptive;  // 300 s window, 30 slots of 10 s, half-life 150 s
  const double lambda = std::log(2.0) / adaptive.half_life_seconds;
  const double now = 120.0;
  clock_.Set(now);
  for (const double fill : {90.0, 0.0}) {
    FleetFingerprint model = kModel;
    model.model_id = fill > 0 ? "fill" : "no-fill";
    auto make = [&](const std::string& id) {
      FleetStatsOptions fo;
      fo.replica_id = id;
      fo.fill_recent_seconds = fill;
      auto s = FleetStatsSync::Create(store_.get(), model, {"SEQLEN"}, adaptive, fo,
                                      [](LogLevel, std::string_view) {});
      EXPECT_TRUE(s.ok()) << s.status();
      return *std::move(s);
    };
    // Slots 0..11 ([0, 120) s), weight 1 each: a serves size 100, b size 500.
    auto local = [](int64_t size, uint64_t samples_at_512) {
      WindowStats stats;
      DimensionStats& d = stats.dimensions.emplace_back();
      d.name = "SEQLEN";
      for (int64_t k = 0; k < 12; ++k) d.slot_sizes.push_back({k, {{size, 1.0}}});
      for (int64_t g : {128, 256, 512}) {
        GearStats& gs = d.gears.emplace_back();
        gs.gear = g;
        gs.sample_count = g == 512 ? samples_at_512 : 0;
      }
      return stats;
    };
    auto a = make("a");
    auto b = make("b");
    WindowStats sa = local(100, 0);
    a->Merge(now, &sa);  // pushes slots 0..10 (slot 11 ends within push_lag_seconds)
    WindowStats sb = local(500, 12);
    b->Merge(now, &sb);
    double complete = 0;  // slots 0..10, decayed
    for (int k = 0; k <= 10; ++k) complete += std::exp(-lambda * (now - 10.0 * k));
    const double newest = std::exp(-lambda * (now - 110.0));
    const std::vector<WeightedSize>& sizes = sb.dimensions[0].sizes;
    ASSERT_EQ(sizes.size(), 2u);
    EXPECT_EQ(sizes[0].size, 100);
    EXPECT_EQ(sizes[1].size, 500);
    if (fill > 0) {
      // b's own weight in slot 11 (1) again for a, shaped as slots 0..10 (half each).
      EXPECT_NEAR(sizes[0].weight, complete + 0.5 * newest, 1e-9);
      EXPECT_NEAR(sizes[1].weight, complete + 1.5 * newest, 1e-9);
      EXPECT_EQ(b->counters().slots_filled, 1u);
    } else {
      EXPECT_NEAR(sizes[0].weight, complete, 1e-9);
      EXPECT_NEAR(sizes[1].weight, complete + newest, 1e-9);
      EXPECT_EQ(b->counters().slots_filled, 0u);
    }
    const std::vector<GearStats>& gears = sb.dimensions[0].gears;
    EXPECT_TRUE(gears[0].fleet_traffic) << "gear 128 carries a's traffic";
    EXPECT_TRUE(gears[0].carries_traffic());
    EXPECT_EQ(gears[0].sample_count, 0u) << "its local count stays (the adaptive policy's)";
    EXPECT_FALSE(gears[1].carries_traffic()) << "nobody used gear 256";
    EXPECT_FALSE(gears[2].fleet_traffic) << "b served 512 itself";
    EXPECT_EQ(gears[2].sample_count, 12u) << "local counts stay";
  }
}

// At the fleet's start (no bucket in the window yet) the local window
// stands for the fleet's when its size is known: weights times
// expected_replicas; unknown (0), exactly local.
TEST_P(FleetStatsTest, BeforeAnyBucketTheLocalWindowIsScaledToTheFleet) {
  for (const double expected : {4.0, 0.0}) {
    FleetStatsOptions fo;
    fo.replica_id = "first";
    fo.expected_replicas = expected;
    FleetFingerprint model = kModel;
    model.model_id = expected > 0 ? "scaled" : "unscaled";
    auto sync = FleetStatsSync::Create(store_.get(), model, {"SEQLEN"}, AdaptiveOptions{}, fo,
                                       [](LogLevel, std::string_view) {});
    ASSERT_TRUE(sync.ok()) << sync.status();
    WindowStats stats;
    DimensionStats& d = stats.dimensions.emplace_back();
    d.name = "SEQLEN";
    d.sizes = {{100, 2.0}};
    d.slot_sizes = {{0, {{100, 2.0}}}};  // slot 0 ([0, 10) s) has not ended at 5 s
    clock_.Set(5.0);
    (*sync)->Merge(5.0, &stats);
    EXPECT_EQ((*sync)->counters().local_only, 1u);
    EXPECT_NEAR(stats.dimensions[0].sizes[0].weight, expected > 0 ? 8.0 : 2.0, 1e-12);
  }
}

// A corrupt or hostile bucket is left out with a logged error; the update
// goes on with what is valid.
TEST_P(FleetStatsTest, AHostileBucketIsRejectedAndLogged) {
  Replica a(&clock_, store_.get(), "a", true);
  Replica b(&clock_, store_.get(), "b", true);
  a.Traffic(0, 120, 20);
  a.Update(120);
  // Corrupt one bucket a pushed (slot 5: [50 s, 60 s)).
  const std::string key = b.sync->BucketKey(5);
  const std::vector<FieldIncrement> junk = {{"0:notasize", 1.0}};
  ASSERT_TRUE(store_->IncrementOnce(key, junk, key + ":r:attacker", 60000).ok());
  const UpdateRecord rb = b.Update(120);
  EXPECT_EQ(b.sync->counters().buckets_rejected, 1u);
  EXPECT_EQ(b.sync->counters().merges, 1u);
  EXPECT_TRUE(rb.changed);
  bool logged = false;
  for (const std::string& m : b.logs) logged |= m.find("rejected") != std::string::npos;
  EXPECT_TRUE(logged);
}

INSTANTIATE_TEST_SUITE_P(Stores, FleetStatsTest, ::testing::Values(Kind::kInProcess, Kind::kRedis),
                         [](const ::testing::TestParamInfo<Kind>& p) {
                           return p.param == Kind::kRedis ? "Redis" : "InProcess";
                         });

// The store killed mid-run: no crash, every request served, updates run on
// local statistics; once it is back, the slots of the outage still in the
// window are pushed and the fleet's window is merged again.
TEST(FleetStatsRedisTest, AKilledStoreIsSurvivedAndResynchronised) {
  RedisServer server;
  GEARBOX_REQUIRE_REDIS(server);
  ManualClock clock(0.0);
  RedisFleetStoreOptions o;
  o.url = server.url();
  o.clock = &clock;
  o.command_timeout_ms = 2000;
  o.log = [](LogLevel, std::string_view) {};
  auto store = RedisFleetStore::Create(o);
  ASSERT_TRUE(store.ok());
  Replica a(&clock, store->get(), "a", true);
  a.Traffic(0, 60, 20);
  a.Update(60);
  EXPECT_EQ(a.sync->counters().merges, 1u);
  server.Kill();
  a.Traffic(60, 120, 20);
  const UpdateRecord during = a.Update(120);
  EXPECT_EQ(during.sequence, 2u);
  EXPECT_EQ(a.sync->counters().local_only, 1u);
  EXPECT_GE(a.sync->counters().push_failures, 1u);
  const uint64_t pushed_before = a.sync->counters().slots_pushed;
  ASSERT_TRUE(server.Start()) << server.error();
  a.Traffic(120, 180, 20);
  a.Update(180);
  EXPECT_EQ(a.sync->counters().merges, 2u);
  // The outage's slots (60..118 s) and the new ones: all pushed now.
  EXPECT_GE(a.sync->counters().slots_pushed - pushed_before, 11u);
  EXPECT_EQ(a.served, 180u * 20u);
}

// Prompts growing 50 % in 20 minutes, at 15 a minute per replica: fewer
// than the 20 a drift bin needs for a median, so neither replica sees the
// drift alone (DimensionStats::size_drift_*); the fleet's bins, merged, do.
TEST_P(FleetStatsTest, TheFleetSeesADriftNoReplicaSeesAlone) {
  const double slope = std::log(1.5) / 1200.0;
  auto drifting = [slope](double t, std::mt19937_64& rng) {
    std::lognormal_distribution<double> noise(0.0, 0.2);
    return std::clamp<int64_t>(std::llround(400.0 * std::exp(slope * t) * noise(rng)), 1, 16384);
  };
  Replica a(&clock_, store_.get(), "a", true);
  Replica b(&clock_, store_.get(), "b", true);
  Replica alone(&clock_, store_.get(), "alone", false);
  alone.rng.seed(11);
  b.rng.seed(12);
  UpdateRecord rb, ralone;
  for (double t = 0; t < 1200; t += 60) {
    a.Traffic(t, t + 60, 0.25, drifting);
    b.Traffic(t, t + 60, 0.25, drifting);
    alone.Traffic(t, t + 60, 0.25, drifting);
    a.Update(t + 60);
    rb = b.Update(t + 60);
    ralone = alone.Update(t + 60);
  }
  ASSERT_EQ(ralone.drift.size(), 1u);
  EXPECT_EQ(ralone.drift[0].bins, 0);  // 15 samples a bin: no median
  ASSERT_EQ(rb.drift.size(), 1u);
  EXPECT_GE(rb.drift[0].bins, 18);  // the fleet's 30 a bin (the newest may be b's own)
  EXPECT_GE(rb.drift[0].agreement, 0.8);
  EXPECT_NEAR(rb.drift[0].per_second, slope, 0.5 * slope);
  EXPECT_GT(b.sync->counters().drift_bins_pushed, 15u);
  EXPECT_GT(b.sync->counters().drift_merges, 0u);
}

TEST(FleetStatsSyncTest, OptionsAreValidatedNamingTheField) {
  InProcessFleetStore store;
  FleetStatsOptions fo;
  auto s = FleetStatsSync::Create(&store, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("fleet.replica_id"), absl::string_view::npos) << s.status();
  fo.replica_id = "has space";
  EXPECT_FALSE(FleetStatsSync::Create(&store, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo).ok());
  fo.replica_id = "r1";
  fo.push_lag_seconds = -1;
  s = FleetStatsSync::Create(&store, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo);
  EXPECT_NE(s.status().message().find("fleet.push_lag_seconds: -1"), absl::string_view::npos)
      << s.status();
  fo.push_lag_seconds = 2;
  fo.fill_recent_seconds = 301;
  s = FleetStatsSync::Create(&store, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo);
  EXPECT_NE(s.status().message().find("fleet.fill_recent_seconds: 301"), absl::string_view::npos)
      << s.status();
  fo.fill_recent_seconds = 90;
  fo.expected_replicas = -1;
  s = FleetStatsSync::Create(&store, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo);
  EXPECT_NE(s.status().message().find("fleet.expected_replicas: -1"), absl::string_view::npos)
      << s.status();
  fo.expected_replicas = 0;
  FleetFingerprint none;
  EXPECT_FALSE(FleetStatsSync::Create(&store, none, {"SEQLEN"}, AdaptiveOptions{}, fo).ok());
  EXPECT_FALSE(FleetStatsSync::Create(nullptr, kModel, {"SEQLEN"}, AdaptiveOptions{}, fo).ok());
}

// Each hash is rejected as data loss, the message naming what is wrong.
void ExpectEachRejectedNaming(const std::vector<std::pair<FleetHash, std::string>>& bad,
                              const std::function<absl::Status(const FleetHash&)>& decode) {
  for (const auto& [hash, named] : bad) {
    const absl::Status s = decode(hash);
    ASSERT_FALSE(s.ok()) << named;
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find(named), absl::string_view::npos) << s;
  }
}

TEST(FleetStatsBucketTest, DecodesAndRejectsWithTheFieldNamed) {
  auto ok = DecodeFleetStatsBucket({{"n", "2"}, {"0:8", "1.5"}, {"1:300", "2"}, {"0:4", "1"}}, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->replicas, 2.0);
  ASSERT_EQ(ok->sizes[0].size(), 2u);
  EXPECT_EQ(ok->sizes[0][0].size, 4);
  EXPECT_EQ(ok->sizes[0][1].weight, 1.5);
  EXPECT_EQ(ok->sizes[1][0].size, 300);
  const std::vector<std::pair<FleetHash, std::string>> bad = {
      {{{"0:8", "1"}}, "no \"n\""},
      {{{"n", "0"}, {"0:8", "1"}}, "\"n\""},
      {{{"n", "1"}, {"2:8", "1"}}, "\"2:8\""},
      {{{"n", "1"}, {"0:08", "1"}}, "\"0:08\""},
      {{{"n", "1"}, {"0:-8", "1"}}, "\"0:-8\""},
      {{{"n", "1"}, {"0:8", "-1"}}, "\"0:8\""},
      {{{"n", "1"}, {"0:8", "nan"}}, "\"0:8\""},
      {{{"n", "1"}, {"0:1099511627777", "1"}}, "1099511627777"},
      {{{"n", "1"}, {"x", "1"}}, "\"x\""},
  };
  ExpectEachRejectedNaming(
      bad, [](const FleetHash& h) { return DecodeFleetStatsBucket(h, 2).status(); });
}

TEST(FleetStatsBucketTest, DecodesADriftBinAndRejectsWithTheFieldNamed) {
  auto ok = DecodeFleetDriftBucket({{"n", "2"}, {"0:80", "3"}, {"1:0", "2"}, {"0:8", "1"}}, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->replicas, 2.0);
  ASSERT_EQ(ok->counts[0].size(), 2u);
  EXPECT_EQ(ok->counts[0][0], (std::pair<int32_t, uint64_t>{8, 1}));
  EXPECT_EQ(ok->counts[0][1], (std::pair<int32_t, uint64_t>{80, 3}));
  EXPECT_EQ(ok->counts[1][0], (std::pair<int32_t, uint64_t>{0, 2}));
  const std::vector<std::pair<FleetHash, std::string>> bad = {
      {{{"0:8", "1"}}, "no \"n\""},
      {{{"n", "0"}, {"0:8", "1"}}, "\"n\""},
      {{{"n", "1"}, {"2:8", "1"}}, "\"2:8\""},
      {{{"n", "1"}, {"0:504", "1"}}, "\"0:504\""},
      {{{"n", "1"}, {"0:08", "1"}}, "\"0:08\""},
      {{{"n", "1"}, {"0:8", "1.5"}}, "an integer"},
      {{{"n", "1"}, {"0:8", "-1"}}, "\"0:8\""},
      {{{"n", "1"}, {"0:8", "1e300"}}, "\"0:8\""},
      {{{"n", "1"}, {"x", "1"}}, "\"x\""},
  };
  ExpectEachRejectedNaming(
      bad, [](const FleetHash& h) { return DecodeFleetDriftBucket(h, 2).status(); });
}

}  // namespace
}  // namespace gearbox

namespace gearbox {
namespace {

// A store whose first call blocks until released: the update stuck in the
// store while requests go on.
class GatedStore final : public FleetStore {
 public:
  explicit GatedStore(FleetStore* inner) : inner_(inner) {}
  void WaitEntered() { entered_.get_future().wait(); }
  void Release() { gate_.set_value(); }

  absl::StatusOr<bool> IncrementOnce(std::string_view key,
                                     std::span<const FieldIncrement> increments,
                                     std::string_view once_key, int64_t ttl_ms) override {
    Gate();
    return inner_->IncrementOnce(key, increments, once_key, ttl_ms);
  }
  absl::StatusOr<std::vector<std::optional<FleetHash>>> GetHashes(
      std::span<const std::string> keys) override {
    Gate();
    return inner_->GetHashes(keys);
  }
  absl::StatusOr<VersionedValue> GetVersioned(std::string_view key) override {
    return inner_->GetVersioned(key);
  }
  absl::StatusOr<bool> CompareAndSet(std::string_view key, uint64_t expected,
                                     std::string_view payload, int64_t ttl_ms) override {
    return inner_->CompareAndSet(key, expected, payload, ttl_ms);
  }
  absl::StatusOr<bool> AcquireLease(std::string_view key, std::string_view owner,
                                    int64_t ttl_ms) override {
    return inner_->AcquireLease(key, owner, ttl_ms);
  }
  absl::Status ReleaseLease(std::string_view key, std::string_view owner) override {
    return inner_->ReleaseLease(key, owner);
  }
  absl::Status PutStrings(std::span<const std::pair<std::string, std::string>> entries,
                          int64_t ttl_ms) override {
    return inner_->PutStrings(entries, ttl_ms);
  }
  absl::StatusOr<std::vector<std::optional<std::string>>> GetStrings(
      std::span<const std::string> keys) override {
    return inner_->GetStrings(keys);
  }
  absl::StatusOr<int64_t> Publish(std::string_view channel, std::string_view message) override {
    return inner_->Publish(channel, message);
  }
  absl::StatusOr<std::unique_ptr<FleetSubscription>> Subscribe(
      std::string_view channel, std::function<void(std::string_view)> on_message) override {
    return inner_->Subscribe(channel, std::move(on_message));
  }
  FleetStoreCounters counters() const override { return inner_->counters(); }
  std::string Describe() const override { return "gated"; }

 private:
  void Gate() {
    if (first_.exchange(false)) {
      entered_.set_value();
      released_.wait();
    }
  }
  FleetStore* inner_;
  std::atomic<bool> first_{true};
  std::promise<void> entered_;
  std::promise<void> gate_;
  std::shared_future<void> released_ = gate_.get_future().share();
};

// The request path never waits on the store: while an update is stuck in
// it, other threads still take snapshots, plan and record.
TEST(FleetStatsThreadsTest, RequestsGoOnWhileAnUpdateWaitsOnTheStore) {
  ManualClock clock(0.0);
  InProcessFleetStore inner(&clock);
  GatedStore store(&inner);
  Replica a(&clock, &store, "a", true);
  a.Traffic(0, 60, 20);
  clock.Set(60);
  std::thread update([&] { EXPECT_TRUE(a.rt->RunOnce(60).ok()); });
  store.WaitEntered();  // the update is inside the store now
  uint64_t recorded = 0;
  for (int i = 0; i < 2000; ++i) {
    SnapshotRef snap = a.rt->GetSnapshot();
    const int64_t raw[] = {1 + i % 1000};
    Plan plan;
    ASSERT_TRUE(MakePlan(*snap, raw, &plan).ok());
    a.rt->RecordPlan(plan, 60.0 + i * 0.001);
    ++recorded;
  }
  EXPECT_EQ(recorded, 2000u);
  store.Release();
  update.join();
  EXPECT_EQ(a.rt->counters().updates, 1u);
  EXPECT_EQ(a.sync->counters().merges, 1u);
}

}  // namespace
}  // namespace gearbox
