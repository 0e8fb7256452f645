// DecideReplan on hand-made window statistics, as tests/policy_test.cc tests
// DecideUpdate: each test builds the window the policy sees and checks the
// decision and its record. Cost model defaults: compile 2 s, 2e-5 s per
// unit, a 3600 s payback horizon (a 300 s window with traffic throughout
// stands for 162 s, so window padding counts 22.2 times), additions need
// 1.5 x compile = 3 s, removals may lose at most 1 s.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "gearbox/replan_policy.h"
#include "gearbox/update_record.h"
#include "src/policy/replan_internal.h"
#include "tests/policy_fixtures.h"

namespace gearbox {
namespace {

using namespace policy_fixtures;

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr double kNow = 10000.0;
// A time since a gear's addition past the default lifetime.
const double kPastTheLifetime = ReplanOptions{}.min_gear_lifetime_seconds + 600;

struct GearSpec {
  int64_t gear;
  double samples;       // events at the gear's own size spread over the window (0: none)
  double created;       // when the gear was created
  bool initial = true;  // in the runtime's initial set (not added by the policy)
  int64_t raw = 0;      // the events' size (0: the gear's own)
};

// One non-splittable SEQLEN dimension: its gears and the window's sizes.
struct Window {
  GearSet gears;
  WindowStats stats;
};

Window MakeWindow(const std::vector<GearSpec>& specs, const std::vector<WeightedSize>& sizes,
                  std::vector<std::pair<int64_t, double>> recently_removed = {}) {
  std::vector<int64_t> values;
  for (const GearSpec& s : specs) values.push_back(s.gear);
  Window w{*GearSet::Create({{"SEQLEN", values, false, false}}), {}};
  w.stats.now = kNow;
  DimensionStats& d = w.stats.dimensions.emplace_back();
  d.name = "SEQLEN";
  for (const GearSpec& s : specs) {
    std::vector<RawEvent> events;
    const int n = static_cast<int>(s.samples);
    for (int i = 0; i < n; ++i)
      events.push_back(
          {s.raw > 0 ? s.raw : s.gear, kNow - 290.0 + 290.0 * i / std::max(n - 1, 1), 1});
    GearStats g = MakeGearStats(s.gear, events, kNow, 150.0, s.created);
    g.initial = s.initial;
    d.gears.push_back(std::move(g));
  }
  FinalizeDimensionStats(&d);
  d.sizes = sizes;
  d.observed_seconds = 300.0;
  d.recently_removed = std::move(recently_removed);
  return w;
}

UpdateDecision Decide(const Window& w, const MemoryState& memory = {},
                      const ReplanOptions& o = {}) {
  return DecideReplan(w.gears, w.stats, memory, AdaptiveOptions{}, o, kNow);
}

// Window padding seconds times this is padding over the payback horizon.
double Horizon() {
  const double lambda = std::log(2.0) / 150.0;
  return 3600.0 / ((1.0 - std::exp(-lambda * 300.0)) / lambda);
}

TEST(ReplanDecision, AddsAGearWherePaddingIsHeavyAndTheGainPaysItsCompile) {
  // 100 decayed requests of 100 on gear 1024: 100 x 2e-5 x 924 = 1.85 s of
  // padding a window, 41 s over the horizon; the planned gears pay their
  // compiles many times over.
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  const UpdateDecision d = Decide(w);
  EXPECT_TRUE(d.changed);
  EXPECT_THAT(d.next_gears[0], Contains(100));
  EXPECT_EQ(d.next_gears[0].back(), 1024);  // non-splittable: the largest gear stays
  ASSERT_FALSE(d.record.changes.empty());
  double gain = 0, compile = 0;
  for (const ChangeRecord& c : d.record.changes) {
    gain += c.gain_seconds;
    compile += c.compile_seconds;
  }
  EXPECT_NEAR(gain, 100 * 2e-5 * 924 * Horizon() - 0.0, 1.0);
  EXPECT_GE(gain, 1.5 * compile);
  // Above the planned gear, no gap wider than tail_ratio (2).
  const auto& g = d.next_gears[0];
  for (size_t i = 1; i < g.size(); ++i) EXPECT_LE(g[i], 2 * g[i - 1]) << g[i - 1] << " -> " << g[i];
}

TEST(ReplanDecision, HoldsStillInsideTheHysteresisBand) {
  // 250 decayed requests of 1000 on gear 1024: adding 1000 saves
  // 250 x 2e-5 x 24 x 22.2 = 2.66 s, more than its 2 s compile (a net gain)
  // but under 1.5 x 2 = 3 s: nothing moves, and the record says why.
  const Window w = MakeWindow({{1024, 250, 0}}, {{1000, 250.0}});
  const UpdateDecision d = Decide(w);
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.next_gears[0], ElementsAre(1024));
  EXPECT_THAT(d.record.targets[0], ElementsAre(1000, 1024));
  ASSERT_EQ(d.record.declined.size(), 1u);
  const ChangeRecord& no = d.record.declined[0];
  EXPECT_EQ(no.action, ChangeAction::kAdd);
  EXPECT_EQ(no.gear, 1000);
  EXPECT_NEAR(no.gain_seconds, 250 * 2e-5 * 24 * Horizon(), 1e-6);
  EXPECT_GT(no.net_seconds, 0);
  EXPECT_THAT(no.reason, HasSubstr("outside the hysteresis band (gain must reach 3 s)"));
  // Twice the traffic clears the band.
  const UpdateDecision more = Decide(MakeWindow({{1024, 500, 0}}, {{1000, 500.0}}));
  EXPECT_THAT(more.next_gears[0], ElementsAre(1000, 1024));
}

TEST(ReplanDecision, AHeldGearIsPlannedWhileItSavesMoreThanHoldingIt) {
  // Gear 300's few requests of 290 would pad to 1024 if it went:
  // 4.6 x 2e-5 x 734 x 22.2 = 1.5 s lost, more than holding one graph (1 s)
  // but less than a compile (2 s). Held already, it costs its holding, not a
  // compile, so the target keeps it and nothing moves; planned from nothing
  // (a compile) it would not be.
  const Window w = MakeWindow({{100, 200, 0}, {300, 0, 0}, {1024, 200, 0}},
                              {{100, 200.0}, {290, 4.6}, {1024, 200.0}});
  const UpdateDecision d = Decide(w);
  EXPECT_THAT(d.record.targets[0], ElementsAre(100, 300, 1024));
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.record.declined, IsEmpty());
  const UpdateDecision fresh = Decide(
      MakeWindow({{100, 200, 0}, {1024, 200, 0}}, {{100, 200.0}, {290, 4.6}, {1024, 200.0}}));
  EXPECT_THAT(fresh.record.targets[0], ElementsAre(100, 1024));
  // With 2 requests it saves 0.65 s, less than holding it: it goes.
  const UpdateDecision less = Decide(MakeWindow({{100, 200, 0}, {300, 0, 0}, {1024, 200, 0}},
                                                {{100, 200.0}, {290, 2.0}, {1024, 200.0}}));
  EXPECT_THAT(less.record.targets[0], ElementsAre(100, 1024));
  EXPECT_THAT(less.removed[0], ElementsAre(300));
}

TEST(ReplanDecision, MemoryPressureGivesBackTheGearThatCostsLeast) {
  // The same window under memory pressure: the target is planned as if
  // nothing were held, and 300 goes although its removal loses more than
  // the band allows; nothing is added.
  const Window w = MakeWindow({{100, 200, 0}, {300, 0, 0}, {1024, 200, 0}},
                              {{100, 200.0}, {290, 4.6}, {1024, 200.0}});
  const UpdateDecision d = Decide(w, High());
  EXPECT_TRUE(d.changed);
  EXPECT_THAT(d.removed[0], ElementsAre(300));
  EXPECT_THAT(d.added[0], IsEmpty());
  EXPECT_THAT(d.next_gears[0], ElementsAre(100, 1024));
  ASSERT_EQ(d.record.changes.size(), 1u);
  EXPECT_EQ(d.record.changes[0].reason, "memory is high");
  EXPECT_EQ(d.record.memory.high, true);
}

TEST(ReplanDecision, MemoryPressureAddsNothingNet) {
  // The window of the first test under pressure: the planned gears would
  // grow the set, so none is added.
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  const UpdateDecision d = Decide(w, High());
  EXPECT_THAT(d.next_gears[0], ElementsAre(1024));
  EXPECT_FALSE(d.changed);
}

TEST(ReplanDecision, AddsNothingWhosePredictedBytesWouldPassTheByteBudget) {
  // The window of the first test; each gear costs 1000 bytes per unit, gear
  // 1024 is held (1,024,000 bytes). Unbounded, the planned gears come in.
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  EXPECT_THAT(Decide(w, ByteBudget(0, {1024})).next_gears[0], Contains(100));
  // A budget that fits only gear 100 beside 1024: 100 comes, the tail does not.
  UpdateDecision d = Decide(w, ByteBudget(1'124'000, {1024}));
  EXPECT_THAT(d.next_gears[0], ElementsAre(100, 1024));
  // One byte less: nothing; the record says what and why.
  d = Decide(w, ByteBudget(1'123'999, {1024}));
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.next_gears[0], ElementsAre(1024));
  ASSERT_EQ(d.record.declined.size(), 1u);
  EXPECT_EQ(d.record.declined[0].action, ChangeAction::kAdd);
  EXPECT_EQ(d.record.declined[0].gear, 100);
  EXPECT_THAT(d.record.declined[0].reason,
              HasSubstr("its predicted 100000 bytes would take the gears' memory from 1024000 to "
                        "1124000 bytes, past memory_budget_bytes = 1123999"));
}

// The never-fitting rule in the replan policy: gear 1024, never compiled,
// needs 1,024,000 bytes alone, past the budget: declined with its bytes and
// the budget; it is no pressure, so gear 100 still comes in beside it.
TEST(ReplanDecision, AGearTheByteBudgetCanNeverHoldIsDeclined) {
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  const UpdateDecision d = Decide(w, ByteBudget(500'000, {}));
  EXPECT_THAT(d.next_gears[0], Contains(100));
  EXPECT_THAT(d.next_gears[0], Contains(1024));
  bool declined = false;
  for (const ChangeRecord& c : d.record.declined) {
    if (c.gear == 1024 && c.action == ChangeAction::kAdd) {
      declined = true;
      EXPECT_THAT(c.reason, HasSubstr("its predicted 1024000 bytes alone, plus 0 bytes"));
      EXPECT_THAT(c.reason, HasSubstr("memory_budget_bytes = 500000"));
    }
  }
  EXPECT_TRUE(declined);
  // Room for it: not declined.
  for (const ChangeRecord& c : Decide(w, ByteBudget(2'000'000, {})).record.declined)
    EXPECT_EQ(c.reason.find("can never hold"), std::string::npos) << c.reason;
}

TEST(ReplanDecision, UnderTheByteBudgetAReplacementThatFreesEnoughIsTaken) {
  // Gear 300 is unused and held (300,000 bytes); the traffic is at 100.
  // Adding 100 alone would pass a budget of exactly the bytes in use;
  // trading 300 for it frees more than it adds.
  const Window w = MakeWindow({{300, 0, 0}, {1024, 200, 0}}, {{100, 200.0}, {1024, 200.0}});
  const UpdateDecision d = Decide(w, ByteBudget(1'324'000, {300, 1024}));
  EXPECT_THAT(d.next_gears[0], ElementsAre(100, 1024));
  int64_t bytes = 0;
  for (int64_t g : d.next_gears[0]) bytes += 1000 * g;
  EXPECT_LE(bytes, 1'324'000);
}

TEST(ReplanDecision, ThePredictedBytesPriceTheMemoryTerm) {
  // The config's memory model prices gears at 0 bytes; the predictor at
  // 1000 bytes per unit. At gamma = 1e6 s per GiB gear 100's predicted
  // 100,000 bytes cost 93 s, more than its ~41 s padding gain.
  ReplanOptions o;
  o.cost.gamma = 1e6;
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  EXPECT_THAT(Decide(w, {}, o).next_gears[0], Contains(100));  // no bytes in the config's model
  EXPECT_THAT(Decide(w, ByteBudget(0, {1024}), o).next_gears[0], Not(Contains(100)));
}

TEST(ReplanDecision, AGearThatRanOutOfMemoryIsNotAddedWithinTheCooldown) {
  const Window w = MakeWindow({{1024, 100, 0}}, {{100, 100.0}});
  MemoryState memory;
  memory.recent_out_of_memory.push_back({{100}, std::nullopt, kNow - 60, 1});
  const UpdateDecision d = Decide(w, memory);
  EXPECT_THAT(d.next_gears[0], Not(Contains(100)));
  bool said = false;
  for (const ChangeRecord& c : d.record.declined)
    said = said || (c.gear == 100 && c.reason.find("ran out of memory") != std::string::npos);
  EXPECT_TRUE(said);
}

TEST(ReplanDecision, RespectsTheLifetimeOfGearsItAdded) {
  // Gear 100 carries almost nothing now (0.5 decayed requests; removing it
  // loses 0.2 s, inside what a removal may lose). Added by the policy 600 s
  // ago (and used), it stays for the default min_gear_lifetime_seconds;
  // added longer ago, or one of the initial gears, it goes.
  const std::vector<WeightedSize> sizes = {{100, 0.5}, {1024, 500.0}};
  const UpdateDecision young =
      Decide(MakeWindow({{100, 1, kNow - 600, false}, {1024, 500, 0}}, sizes));
  EXPECT_THAT(young.next_gears[0], ElementsAre(100, 1024));
  EXPECT_FALSE(young.changed);
  ASSERT_EQ(young.record.declined.size(), 1u);
  EXPECT_THAT(young.record.declined[0].reason,
              HasSubstr("gear 100 was added less than min_gear_lifetime_seconds ago"));
  const UpdateDecision old =
      Decide(MakeWindow({{100, 1, kNow - kPastTheLifetime, false}, {1024, 500, 0}}, sizes));
  EXPECT_THAT(old.removed[0], ElementsAre(100));
  const UpdateDecision initial =
      Decide(MakeWindow({{100, 1, kNow - 600, true}, {1024, 500, 0}}, sizes));
  EXPECT_THAT(initial.removed[0], ElementsAre(100));
  // An idle gear is not protected by its lifetime: removing it is no churn.
  const UpdateDecision idle =
      Decide(MakeWindow({{100, 0, kNow - 600, false}, {1024, 500, 0}}, sizes));
  EXPECT_THAT(idle.removed[0], ElementsAre(100));
  // ... unless the fleet's window has traffic in its range (fleet_stats.h):
  // idle here, used by the fleet, it stays as for one runtime serving it all.
  Window fleet = MakeWindow({{100, 0, kNow - 600, false}, {1024, 500, 0}}, sizes);
  fleet.stats.dimensions[0].gears[0].fleet_traffic = true;
  const UpdateDecision used_by_the_fleet = Decide(fleet);
  EXPECT_THAT(used_by_the_fleet.next_gears[0], ElementsAre(100, 1024));
  ASSERT_EQ(used_by_the_fleet.record.declined.size(), 1u);
  EXPECT_THAT(used_by_the_fleet.record.declined[0].reason,
              HasSubstr("gear 100 was added less than min_gear_lifetime_seconds ago"));
}

TEST(ReplanDecision, AGearThatCameBackStaysForItsLifetimeWhileIdle) {
  // Gear 100 came back within an hour of its eviction (a recurring burst)
  // and is idle now: evicting it again would be its second cycle within the
  // hour, so its lifetime protects it although the window brought it
  // nothing. Past its lifetime, or never evicted before, an idle gear goes.
  const std::vector<WeightedSize> sizes = {{1024, 500.0}};
  Window returned = MakeWindow({{100, 0, kNow - 600, false}, {1024, 500, 0}}, sizes);
  returned.stats.dimensions[0].gears[0].readded = true;
  const UpdateDecision kept = Decide(returned);
  EXPECT_THAT(kept.next_gears[0], ElementsAre(100, 1024));
  EXPECT_FALSE(kept.changed);
  ASSERT_EQ(kept.record.declined.size(), 1u);
  EXPECT_THAT(kept.record.declined[0].reason,
              HasSubstr("gear 100 came back after an eviction less than "
                        "min_gear_lifetime_seconds ago (idle now: its traffic recurs)"));
  Window old = MakeWindow({{100, 0, kNow - kPastTheLifetime, false}, {1024, 500, 0}}, sizes);
  old.stats.dimensions[0].gears[0].readded = true;
  EXPECT_THAT(Decide(old).removed[0], ElementsAre(100));
  const Window first_life = MakeWindow({{100, 0, kNow - 600, false}, {1024, 500, 0}}, sizes);
  EXPECT_THAT(Decide(first_life).removed[0], ElementsAre(100));
}

// Adds a second dimension to a MakeWindow window: BATCHSIZE (splittable),
// one initial gear `gear` that 500 requests of that batch hit (gear 1: the
// first dimension's costs are what they are alone).
void AddBatchDimension(Window* w, int64_t gear = 8) {
  std::vector<int64_t> seqlen(w->gears.gears(0).begin(), w->gears.gears(0).end());
  w->gears = *GearSet::Create({{"SEQLEN", seqlen, false, false}, {"BATCHSIZE", {gear}, true}});
  DimensionStats& batch = w->stats.dimensions.emplace_back();
  batch.name = "BATCHSIZE";
  std::vector<RawEvent> events;
  for (int i = 0; i < 500; ++i) events.push_back({gear, kNow - 290.0 + 290.0 * i / 499, 1});
  batch.gears.push_back(MakeGearStats(gear, events, kNow, 150.0, 0));
  batch.gears.back().initial = true;
  FinalizeDimensionStats(&batch);
  batch.sizes = {{gear, 500.0}};
  batch.observed_seconds = 300.0;
}

TEST(ReplanDecision, AGearThatCarriedTrafficStaysForItsLifetimeWhileIdle) {
  // One dimension: gear 100, added by the policy 1,500 s ago, brought no
  // request in this window but one 800 s ago (a sparse size range, a
  // burst's band between bursts): it stays for its lifetime, and so it does
  // when that request was 1,300 s ago, past the idle release
  // (idle_graph_release_seconds, 1200 s: its graph is released, the gear
  // holds only its slot), so its traffic coming back compiles it again
  // rather than adding it again (a cycle). Never hit since it was added, or
  // with the idle release off (0: an idle gear would keep its graph), it
  // goes as an idle gear does.
  const std::vector<WeightedSize> sizes = {{1024, 500.0}};
  auto window = [&](double last_hit) {
    Window w = MakeWindow({{100, 0, kNow - 1500, false}, {1024, 500, 0}}, sizes);
    w.stats.dimensions[0].gears[0].last_hit_ts = kNow - last_hit;
    return w;
  };
  const UpdateDecision kept = Decide(window(800));
  EXPECT_THAT(kept.next_gears[0], ElementsAre(100, 1024));
  ASSERT_EQ(kept.record.declined.size(), 1u);
  EXPECT_THAT(kept.record.declined[0].reason,
              HasSubstr("gear 100 was added less than min_gear_lifetime_seconds ago and carried "
                        "traffic since (idle in the window)"));
  const UpdateDecision released = Decide(window(1300));
  EXPECT_THAT(released.next_gears[0], ElementsAre(100, 1024));
  ASSERT_EQ(released.record.declined.size(), 1u);
  EXPECT_THAT(released.record.declined[0].reason,
              HasSubstr("carried traffic since (idle in the window, its graph released)"));
  EXPECT_THAT(Decide(window(1600)).removed[0], ElementsAre(100));  // before it was added
  ReplanOptions never_released;
  never_released.idle_graph_release_seconds = 0;
  EXPECT_THAT(Decide(window(800), {}, never_released).removed[0], ElementsAre(100));
  // At the gear cap (replan.max_graphs, 2 here) a gear whose graph is
  // released gives its slot; one hit within the idle release keeps it.
  ReplanOptions capped;
  capped.max_graphs = 2;
  EXPECT_THAT(Decide(window(1300), {}, capped).removed[0], ElementsAre(100));
  EXPECT_THAT(Decide(window(800), {}, capped).next_gears[0], ElementsAre(100, 1024));
}

TEST(ReplanDecision, WithSeveralDimensionsAnIdleGearGoesWhateverItsLastHit) {
  // The same gear 100 of SEQLEN beside a BATCHSIZE dimension: every SEQLEN
  // gear is a row of the graph budget's product, so an idle one goes.
  const std::vector<WeightedSize> sizes = {{1024, 500.0}};
  Window w = MakeWindow({{100, 0, kNow - 1500, false}, {1024, 500, 0}}, sizes);
  w.stats.dimensions[0].gears[0].last_hit_ts = kNow - 800;
  AddBatchDimension(&w);
  EXPECT_THAT(Decide(w).removed[0], ElementsAre(100));
}

TEST(ReplanDecision, AGainReadOffAFewRequestsWaitsForTheEvidence) {
  // n requests of 100 on gear 1024 (beside 500 at 1024, which pad nothing):
  // adding 100 gains n x 2e-5 x 924 x 22.2 = 0.41 n s, uncertain by
  // 0.41 sqrt(n) s (the window's requests read as Poisson counts). Ten
  // requests gain 4.1 s, past the 3 s band, but less one standard error
  // (gain_confidence_sigmas 1) only 2.8 s: the gear waits. Forty gain
  // 16.4 s, 13.8 s less one error: it comes. With 0 sigmas (the default)
  // ten suffice.
  auto window = [](double n) { return MakeWindow({{1024, 500, 0}}, {{100, n}, {1024, 500.0}}); };
  const double unit = 2e-5 * 924 * Horizon();
  ReplanOptions one;
  one.gain_confidence_sigmas = 1;
  const UpdateDecision thin = Decide(window(10), {}, one);
  EXPECT_FALSE(thin.changed);
  ASSERT_EQ(thin.record.declined.size(), 1u);
  const ChangeRecord& no = thin.record.declined[0];
  EXPECT_EQ(no.gear, 100);
  EXPECT_NEAR(no.gain_seconds, 10 * unit, 1e-6);
  EXPECT_THAT(no.reason, HasSubstr("too little evidence: the gain"));
  EXPECT_THAT(no.reason, HasSubstr("less replan.gain_confidence_sigmas of that must reach 3 s"));
  EXPECT_THAT(Decide(window(40), {}, one).next_gears[0], ElementsAre(100, 1024));
  EXPECT_THAT(Decide(window(10)).next_gears[0], ElementsAre(100, 1024));
  // Two sigmas need more: 40 requests pass (16.4 - 2 x 2.6 = 11.2 s), 12
  // do not (4.9 - 2 x 1.4 = 2.1 s).
  ReplanOptions two;
  two.gain_confidence_sigmas = 2;
  EXPECT_THAT(Decide(window(40), {}, two).next_gears[0], ElementsAre(100, 1024));
  EXPECT_FALSE(Decide(window(12), {}, two).changed);
  // With several dimensions gains are taken as read: beside a BATCHSIZE
  // dimension of batch 1 (the same costs) the ten requests' gear comes.
  Window two_dims = window(10);
  AddBatchDimension(&two_dims, 1);
  EXPECT_THAT(Decide(two_dims, {}, one).next_gears[0], ElementsAre(100, 1024));
}

TEST(ReplanDecision, AGearRemovedWithinTheCooldownNeedsTwiceTheGain) {
  // 500 requests of 1000 gain 5.3 s: enough for a new gear (3 s), not for
  // one removed 600 s ago (6 s).
  const std::vector<WeightedSize> sizes = {{1000, 500.0}};
  EXPECT_THAT(Decide(MakeWindow({{1024, 500, 0}}, sizes)).next_gears[0], ElementsAre(1000, 1024));
  const UpdateDecision d = Decide(MakeWindow({{1024, 500, 0}}, sizes, {{1000, kNow - 600}}));
  EXPECT_THAT(d.next_gears[0], ElementsAre(1024));
  ASSERT_EQ(d.record.declined.size(), 1u);
  EXPECT_THAT(d.record.declined[0].reason, HasSubstr("gain must reach 6 s"));
}

TEST(ReplanDecision, TooLittleTrafficChangesNothing) {
  // Ten requests of 100 on gear 1024: below min_window_weight (20) the
  // dimension is left alone, although the seed's pad rule would add 100.
  const Window w = MakeWindow({{1024, 10, 0, true, 100}}, {{100, 10.0}});
  const UpdateDecision d = Decide(w);
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.added[0], IsEmpty());
  EXPECT_THAT(d.next_gears[0], ElementsAre(1024));
  ASSERT_EQ(d.record.declined.size(), 1u);
  EXPECT_THAT(d.record.declined[0].reason, HasSubstr("too little traffic in the window"));
}

TEST(ReplanDecision, AtTheGraphBudgetATargetGearReplacesAFarGearTheTargetLacks) {
  // max_graphs 3, three gears; the target is {500, 800, 1024}. Gear 300,
  // added 600 s ago, is protected by its lifetime, so the whole target cannot
  // be taken and no gear may be added. Gear 800's neighbours (300, young;
  // 1024, the largest) stay: only replacing the far gear 100 makes room (its
  // 20 requests pad to 300, losing 1.8 s: more than a removal alone may lose).
  const Window w = MakeWindow({{100, 20, 0}, {300, 5, kNow - 600, false}, {1024, 200, 0}},
                              {{100, 20.0}, {300, 5.0}, {500, 300.0}, {800, 500.0}, {1024, 200.0}});
  ReplanOptions o;
  o.max_graphs = 3;
  const UpdateDecision d = Decide(w, {}, o);
  EXPECT_THAT(d.record.targets[0], ElementsAre(500, 800, 1024));
  EXPECT_THAT(d.next_gears[0], ElementsAre(300, 800, 1024));
  ASSERT_EQ(d.record.changes.size(), 1u);
  const ChangeRecord& c = d.record.changes[0];
  EXPECT_EQ(c.action, ChangeAction::kReplace);
  EXPECT_EQ(c.gear, 800);
  EXPECT_EQ(c.replaced, 100);
  EXPECT_NEAR(c.gain_seconds, (500 * 224 + 300 * 224 - 20 * 200) * 2e-5 * Horizon(), 1e-6);
}

// ---- GearCaps: the graph budget split between dimensions ----

double Product(const std::vector<int>& k) {
  double p = 1;
  for (int x : k) p *= x;
  return p;
}

TEST(GearCaps, GivesTheBudgetWhereAGearSavesMost) {
  // Dimension 0 saves 100 s per gear, dimension 1 one second: 0 gets the room.
  std::vector<std::vector<double>> curves = {{1000, 900, 800, 700, 600, 500, 400, 300},
                                             {10, 9, 8, 7, 6, 5, 4, 3}};
  const std::vector<int> current = {1, 1};
  const std::vector<int> caps = internal::GearCaps(curves, current, 16, 64);
  EXPECT_LE(Product(caps), 16);
  EXPECT_EQ(caps[0], 8);  // everything it wants
  EXPECT_EQ(caps[1], 2);
}

TEST(GearCaps, WithinTheBudgetEveryDimensionGetsWhatItWantsAndTheRestIsShared) {
  std::vector<std::vector<double>> curves = {{30, 20, 10}, {50, 25}};
  const std::vector<int> current = {1, 1};
  // What they want (3 x 2) fits; the room left goes to the smallest cap
  // first, one gear at a time, while the product fits.
  EXPECT_THAT(internal::GearCaps(curves, current, 6, 64), ElementsAre(3, 2));
  EXPECT_THAT(internal::GearCaps(curves, current, 100, 64), ElementsAre(10, 10));
  EXPECT_THAT(internal::GearCaps(curves, current, 100, 8), ElementsAre(8, 8));
}

TEST(GearCaps, RoomLeftKeepsGearsADimensionAlreadyHolds) {
  // Each wants two gears; dimension 1 holds six: the room left (within 24)
  // lets it keep them rather than forcing them out.
  std::vector<std::vector<double>> curves = {{30, 20}, {50, 25}};
  const std::vector<int> current = {2, 6};
  EXPECT_THAT(internal::GearCaps(curves, current, 12, 64), ElementsAre(2, 6));
  EXPECT_THAT(internal::GearCaps(curves, current, 8, 64), ElementsAre(2, 4));
  // Past what they hold, the rest is shared: 24 = 4 x 6.
  EXPECT_THAT(internal::GearCaps(curves, current, 24, 64), ElementsAre(4, 6));
}

TEST(GearCaps, EveryCapIsAtLeastOneAndAtMostThePerDimensionMaximum) {
  std::vector<std::vector<double>> curves(3, std::vector<double>(64));
  for (auto& c : curves) {
    for (size_t k = 0; k < c.size(); ++k) c[k] = 1000.0 / static_cast<double>(k + 1);
  }
  const std::vector<int> current = {40, 40, 40};
  for (int budget : {1, 2, 7, 100, 1000000}) {
    const std::vector<int> caps = internal::GearCaps(curves, current, budget, 32);
    EXPECT_LE(Product(caps), std::max(budget, 1)) << budget;
    for (int k : caps) {
      EXPECT_GE(k, 1);
      EXPECT_LE(k, 32);
    }
  }
}

TEST(ReplanDecision, FollowsADriftWhereTheWindowsBinsAgree) {
  // 400 decayed requests of 1000 on gear 4096. Without drift the planned
  // gear is 1000; with sizes growing x4 an hour (agreed by 95 % of the bins'
  // pairs) the target plans for the next drift_lead_seconds (300 s here):
  // the sizes' path from 1000 up to its last of eight steps,
  // 1000 x exp(slope x 300 x 15/16) = 1114.
  Window w = MakeWindow({{4096, 400, 0}}, {{1000, 400.0}});
  const UpdateDecision still = Decide(w);
  ASSERT_FALSE(still.record.targets[0].empty());
  EXPECT_EQ(still.record.targets[0].front(), 1000);
  DimensionStats& ds = w.stats.dimensions[0];
  ds.size_drift_per_second = std::log(4.0) / 3600.0;
  ds.size_drift_agreement = 0.95;
  ds.size_drift_bins = 30;
  ReplanOptions lead300;
  lead300.drift_lead_seconds = 300;
  const UpdateDecision up = Decide(w, {}, lead300);
  ASSERT_EQ(up.record.drift.size(), 1u);
  EXPECT_TRUE(up.record.drift[0].followed);
  EXPECT_EQ(up.record.drift[0].bins, 30);
  const std::vector<int64_t>& target = up.record.targets[0];
  ASSERT_GE(target.size(), 2u);
  EXPECT_GT(target.front(), 1000);
  // The planned gears reach the path's end (above them: the tail to 4096).
  const int64_t planned_top = *std::prev(std::upper_bound(target.begin(), target.end(), 1200));
  EXPECT_GE(planned_top, 1100);
  EXPECT_LE(planned_top, 1123);
  EXPECT_THAT(UpdateRecordToJson(up.record), HasSubstr("\"drift\":{\"SEQLEN\":{\"per_second\":"));
  // The default lead plans further along the same path, past the 300 s
  // plan's top: up to the last of its eight steps, 1000 x exp(slope x tau)
  // with tau = lead x 15/16, within a histogram bin (1/128 of an octave).
  const double lead = ReplanOptions{}.drift_lead_seconds;
  ASSERT_GT(lead, 300);
  const UpdateDecision ahead = Decide(w);
  const std::vector<int64_t>& far = ahead.record.targets[0];
  const double path_end = 1000 * std::exp(std::log(4.0) / 3600.0 * lead * 15 / 16);
  const int64_t far_top =
      *std::prev(std::upper_bound(far.begin(), far.end(), static_cast<int64_t>(path_end * 1.01)));
  EXPECT_GT(far_top, planned_top);
  EXPECT_NEAR(static_cast<double>(far_top), path_end, path_end / 128);
  // Too few bins agree, too few bins, or following switched off: the window as it is.
  ReplanOptions off;
  off.drift_lead_seconds = 0;
  ds.size_drift_agreement = 0.7;
  EXPECT_EQ(Decide(w).record.targets[0], still.record.targets[0]);
  EXPECT_FALSE(Decide(w).record.drift[0].followed);
  ds.size_drift_agreement = 0.95;
  ds.size_drift_bins = 10;
  EXPECT_EQ(Decide(w).record.targets[0], still.record.targets[0]);
  ds.size_drift_bins = 30;
  EXPECT_EQ(Decide(w, {}, off).record.targets[0], still.record.targets[0]);
}

TEST(ReplanDecision, DriftOptionsAreValidated) {
  ReplanOptions o;
  o.drift_agreement = 0.4;
  EXPECT_THAT(std::string(ValidateReplanOptions(o).message()), HasSubstr("replan.drift_agreement"));
  o = {};
  o.drift_min_bins = 31;
  EXPECT_THAT(std::string(ValidateReplanOptions(o).message()), HasSubstr("replan.drift_min_bins"));
  o = {};
  o.drift_lead_seconds = -1;
  EXPECT_THAT(std::string(ValidateReplanOptions(o).message()),
              HasSubstr("replan.drift_lead_seconds"));
  EXPECT_TRUE(ValidateReplanOptions(ReplanOptions{}).ok());
}

// The regime (docs/POLICY.md, "The regime"): FindStationaryRegime on
// minute bins 0..29 at now = 1799 s (the last window: bins 25..29).
namespace regime {

using internal::FindStationaryRegime;

constexpr double kMinute = 60.0;
constexpr double kAt = 30 * kMinute - 1;

// `n` sizes a bin, log-normal around `median`, deterministic by `seed`.
SizeHistoryBin Bin(int64_t index, int n, double median, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(index));
  std::normal_distribution<double> spread(0.0, 0.4);
  std::map<int64_t, uint64_t> counts;
  for (int i = 0; i < n; ++i) ++counts[std::llround(median * std::exp(spread(rng)))];
  SizeHistoryBin bin{index, {}};
  for (const auto& kv : counts) bin.sizes.push_back(kv);
  return bin;
}

std::optional<internal::StationaryRegime> Find(const std::vector<SizeHistoryBin>& history,
                                               std::vector<int64_t> gears = {1 << 20}) {
  return FindStationaryRegime(history, kMinute, kAt, 5, 1800.0, gears, false);
}

double Total(const internal::StationaryRegime& r) {
  double total = 0;
  for (const WeightedSize& w : r.sizes) total += w.weight;
  return total;
}

}  // namespace regime

TEST(Regime, StationaryTrafficIsPlannedOnTheWholeHistory) {
  using namespace regime;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<SizeHistoryBin> history;
    for (int b = 0; b < 30; ++b) history.push_back(Bin(b, 50, 1000.0, seed));
    const auto r = Find(history);
    ASSERT_TRUE(r.has_value()) << seed;
    EXPECT_EQ(r->start_bin, 0);
    EXPECT_DOUBLE_EQ(r->seconds, kAt);
    EXPECT_DOUBLE_EQ(Total(*r), 30 * 50.0);  // each request once, undecayed
    EXPECT_LE(r->statistic, r->critical);
    EXPECT_TRUE(std::is_sorted(r->sizes.begin(), r->sizes.end(),
                               [](const auto& a, const auto& b) { return a.size < b.size; }));
    // Not further back than asked: 900 s reaches bins 15..29.
    const auto shorter = FindStationaryRegime(history, kMinute, kAt, 5, 900.0, {1 << 20}, false);
    ASSERT_TRUE(shorter.has_value());
    EXPECT_EQ(shorter->start_bin, 15);
  }
}

TEST(Regime, AStepEndsTheRegimeAndOneInTheLastWindowLeavesTheWindowAlone) {
  using namespace regime;
  // Sizes doubled from bin 12 on: the regime starts there, or one bin
  // before (a window of bins with one from before the step of five is
  // still alike enough), never further back.
  std::vector<SizeHistoryBin> history;
  for (int b = 0; b < 30; ++b) history.push_back(Bin(b, 50, b < 12 ? 1000.0 : 2000.0, 7));
  const auto r = Find(history);
  ASSERT_TRUE(r.has_value());
  EXPECT_GE(r->start_bin, 11);
  EXPECT_LE(r->start_bin, 12);
  EXPECT_DOUBLE_EQ(Total(*r), (30 - r->start_bin) * 50.0);
  EXPECT_LE(r->statistic, r->critical);  // the test that ended it is not the regime's
  // A step in bin 22: a stretch of two windows would reach across it.
  history.clear();
  for (int b = 0; b < 30; ++b) history.push_back(Bin(b, 50, b < 22 ? 1000.0 : 2000.0, 7));
  EXPECT_FALSE(Find(history).has_value());
  // A step in the newest two bins (the last window's older bins agree with
  // the history): the newest bins' own test sees it.
  history.clear();
  for (int b = 0; b < 30; ++b) history.push_back(Bin(b, 50, b < 28 ? 1000.0 : 2000.0, 7));
  EXPECT_FALSE(Find(history).has_value());
}

TEST(Regime, NewSizesThatPadOnTheGearsEndItWhereTheDistributionBarelyMoves) {
  using namespace regime;
  // Sizes around 950 on gears {1000, 4000}; the newest two bins add twelve
  // requests of 1100, which pad 2,900 each on 4000: 11 % of those bins,
  // half the shift of the distribution function its test needs at 112
  // requests, but the padding per request rises 3.7 standard errors.
  auto history_with = [](int tail) {
    std::vector<SizeHistoryBin> history;
    for (int b = 0; b < 30; ++b) {
      SizeHistoryBin bin{b, {}};
      for (int64_t s = 901; s <= 1000; s += 2) bin.sizes.push_back({s, 1});
      if (b >= 28) bin.sizes.push_back({1100, static_cast<uint64_t>(tail)});
      history.push_back(bin);
    }
    return history;
  };
  EXPECT_FALSE(Find(history_with(6), {1000, 4000}).has_value());
  // Gears that serve 1100 well: the same history is one regime.
  EXPECT_TRUE(Find(history_with(6), {1000, 1100, 4000}).has_value());
  EXPECT_TRUE(Find(history_with(0), {1000, 4000}).has_value());
}

TEST(Regime, TooLittleHistoryOrTrafficIsNoRegime) {
  using namespace regime;
  std::vector<SizeHistoryBin> history;
  for (int b = 20; b < 30; ++b) history.push_back(Bin(b, 50, 1000.0, 3));
  // Bins 20..29: the stretch before the last window is 5 bins, just enough.
  const auto r = Find(history);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->start_bin, 20);
  history.erase(history.begin());  // 4 bins: less than a window
  EXPECT_FALSE(Find(history).has_value());
  // Fewer than kRegimeMinSamples requests in the last window.
  history.clear();
  for (int b = 0; b < 30; ++b) history.push_back(Bin(b, 3, 1000.0, 3));
  EXPECT_FALSE(Find(history).has_value());
  EXPECT_FALSE(Find({}).has_value());
  EXPECT_FALSE(FindStationaryRegime(history, 0.0, kAt, 5, 1800.0, {1000}, false).has_value());
  EXPECT_FALSE(
      FindStationaryRegime(history, kMinute, std::nan(""), 5, 1800.0, {1000}, false).has_value());
}

TEST(ReplanDecision, AStationaryHistoryBacksAGainTheWindowAloneCannot) {
  // With one standard error of evidence (gain_confidence_sigmas 1), ten
  // requests of 100 in the window on gear 1024 wait for their evidence
  // (AGainReadOffAFewRequestsWaitsForTheEvidence). The last 30 minutes held
  // the same traffic, four requests of 100 and 100 of 1024 a minute: planned
  // on those 120 requests, the gain (120 x 2e-5 x 924 x 3600 / 1780 = 4.5 s)
  // is backed (less one standard error, 4.1 s, past the 3 s band).
  Window w = MakeWindow({{1024, 500, 0}}, {{100, 10.0}, {1024, 500.0}});
  const int64_t newest = static_cast<int64_t>(std::floor(kNow / 60.0));
  for (int64_t b = newest - 29; b <= newest; ++b)
    w.stats.dimensions[0].size_history.push_back({b, {{100, 4}, {1024, 100}}});
  ReplanOptions one;
  one.gain_confidence_sigmas = 1;
  const UpdateDecision planned = Decide(w, {}, one);
  EXPECT_THAT(planned.added[0], ElementsAre(100));
  ASSERT_EQ(planned.record.regime.size(), 1u);
  EXPECT_NEAR(planned.record.regime[0].seconds, kNow - (newest - 29) * 60.0, 1e-9);
  EXPECT_LE(planned.record.regime[0].statistic, planned.record.regime[0].critical);
  // The window alone: no regime (regime_seconds 0), several dimensions, or
  // sizes that drift.
  ReplanOptions window_only = one;
  window_only.regime_seconds = 0;
  const UpdateDecision alone = Decide(w, {}, window_only);
  EXPECT_FALSE(alone.changed);
  EXPECT_EQ(alone.record.regime[0].seconds, 0.0);
  Window drifting = w;
  drifting.stats.dimensions[0].size_drift_per_second = 1e-4;
  drifting.stats.dimensions[0].size_drift_agreement = 1.0;
  drifting.stats.dimensions[0].size_drift_bins = 30;
  EXPECT_EQ(Decide(drifting).record.regime[0].seconds, 0.0);
  Window two = w;
  AddBatchDimension(&two);
  EXPECT_EQ(Decide(two).record.regime[0].seconds, 0.0);
}

// The cold-start review (docs/POLICY.md, rule 6). Eleven minute bins of
// history, the newest 40 s old: a regime of 640 s, within the default
// review's 600 to 750 s (cold_start_review_seconds and a quarter more), so
// this update reviews the gears added in the regime's first 150 s (from
// kNow - 640). Gear 700 carries `at_700` requests of 690 in the regime,
// spread over its bins: each pads 324 tokens more on 1024 without it,
// 2e-5 x 324 x 3600 / 640 = 0.036 s over the horizon. With `after_a_step`,
// the minute before those held prompts of 5000 alone: the regime (640 s)
// begins at a step, not at the history's start.
Window ColdStartWindow(double created_700, int at_700, bool after_a_step = false) {
  Window w = MakeWindow({{100, 500, 0}, {700, 1, created_700, false, 690}, {1024, 500, 0}},
                        {{100, 500.0}, {690, 1.0}, {1024, 500.0}});
  const int64_t newest = static_cast<int64_t>(std::floor(kNow / 60.0));
  for (int64_t b = newest - 10; b <= newest; ++b) {
    SizeHistoryBin bin{b, {{100, 50}, {1024, 50}}};
    const int64_t i = newest - b;
    const uint64_t n = static_cast<uint64_t>(at_700 / 11 + (i < at_700 % 11 ? 1 : 0));
    if (n > 0) bin.sizes.insert(bin.sizes.begin() + 1, {690, n});
    w.stats.dimensions[0].size_history.push_back(bin);
  }
  if (after_a_step) {
    auto& history = w.stats.dimensions[0].size_history;
    history.insert(history.begin(), SizeHistoryBin{newest - 11, {{5000, 100}}});
  }
  return w;
}

TEST(ReplanDecision, TheColdStartReviewRemovesAGearPlannedOnThinEvidenceOnce) {
  const double early = kNow - 630;  // within the regime's first 150 s
  const UpdateDecision reviewed = Decide(ColdStartWindow(early, 1));
  ASSERT_EQ(reviewed.record.regime.size(), 1u);
  EXPECT_NEAR(reviewed.record.regime[0].seconds, 640.0, 1e-9);
  EXPECT_THAT(reviewed.record.regime[0].reviewed, ElementsAre(700));
  EXPECT_THAT(reviewed.removed[0], ElementsAre(700));
  ASSERT_FALSE(reviewed.record.changes.empty());
  EXPECT_EQ(reviewed.record.changes[0].gear, 700);
  EXPECT_THAT(reviewed.record.changes[0].reason, HasSubstr("cold-start review"));
  EXPECT_THAT(UpdateRecordToJson(reviewed.record), HasSubstr(R"("reviewed":[700])"));

  // Not the review: the option off, a review due later, one past (500 to
  // 625 s), a gear added after the regime's first quarter of it, or a
  // regime that began at a step (its first gears were planned on the
  // traffic before it too). The lifetime keeps the gear.
  ReplanOptions off;
  off.cold_start_review_seconds = 0;
  ReplanOptions later;
  later.cold_start_review_seconds = 1200;
  ReplanOptions past;
  past.cold_start_review_seconds = 500;
  for (const auto& [w, o] :
       {std::pair{ColdStartWindow(early, 1), off}, std::pair{ColdStartWindow(early, 1), later},
        std::pair{ColdStartWindow(early, 1), past},
        std::pair{ColdStartWindow(kNow - 480, 1), ReplanOptions{}},
        std::pair{ColdStartWindow(early, 1, true), ReplanOptions{}}}) {
    const UpdateDecision kept = Decide(w, {}, o);
    EXPECT_NEAR(kept.record.regime[0].seconds, 640.0, 1e-9);  // the same regime
    EXPECT_TRUE(kept.removed[0].empty());
    EXPECT_TRUE(kept.record.regime[0].reviewed.empty());
    ASSERT_FALSE(kept.record.declined.empty());
    EXPECT_THAT(kept.record.declined[0].reason,
                HasSubstr("gear 700 was added less than min_gear_lifetime_seconds ago"));
  }

  // Updates every 300 s: the review at 500 s lasts until 800 s, so that one
  // falls within it (of the regime's first 125 s: gear 700 at 10 s).
  past.update_interval_seconds = 300;
  EXPECT_THAT(Decide(ColdStartWindow(early, 1), {}, past).removed[0], ElementsAre(700));

  // 25 requests: the removal loses 0.91 s, less than the holding (1 s) as
  // read, but not with a standard error of it (gain_confidence_sigmas 1);
  // taken at gain_confidence_sigmas 0, the default.
  ReplanOptions one;
  one.gain_confidence_sigmas = 1;
  const UpdateDecision thin = Decide(ColdStartWindow(early, 25), {}, one);
  EXPECT_THAT(thin.record.regime[0].reviewed, ElementsAre(700));
  EXPECT_TRUE(thin.removed[0].empty());
  ASSERT_FALSE(thin.record.declined.empty());
  EXPECT_THAT(thin.record.declined[0].reason,
              HasSubstr("too little evidence: at the cold-start review, removing gear 700"));
  EXPECT_THAT(Decide(ColdStartWindow(early, 25)).removed[0], ElementsAre(700));
}

TEST(ReplanDecision, TheColdStartReviewOptionIsValidated) {
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    ReplanOptions o;
    o.cold_start_review_seconds = bad;
    const absl::Status s = ValidateReplanOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("replan.cold_start_review_seconds"));
  }
  ReplanOptions never;
  never.cold_start_review_seconds = 0;
  EXPECT_TRUE(ValidateReplanOptions(never).ok());
}

}  // namespace
}  // namespace gearbox
