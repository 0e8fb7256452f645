// The adaptive policy decides what the seed (seeds/000, §4-§8) decides, at
// the seed's thresholds and defaults. Each test pins one seed rule with the
// seed's numbers; where gearbox differs (docs/POLICY.md, "Where gearbox
// differs from the seed"), the difference is an option whose default leaves
// these decisions as they are.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "gearbox/options.h"
#include "gearbox/policy.h"
#include "gearbox/runtime.h"
#include "tests/policy_fixtures.h"

namespace gearbox {
namespace {

using namespace policy_fixtures;

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A runtime under the adaptive (seed) policy, driven by hand.
struct SeedRuntime {
  ManualClock clock{0.0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;

  SeedRuntime(std::vector<DimensionSpec> dims, AdaptiveOptions adaptive) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kAdaptive;
    o.adaptive = adaptive;
    o.clock = &clock;
    o.memory_probe = &probe;
    o.pool = &pool;
    o.start_worker = false;
    auto r = AdaptiveGearRuntime::Create(std::move(dims), std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    runtime = *std::move(r);
  }

  void Request(std::vector<int64_t> raw, double t) {
    SnapshotRef snap = runtime->GetSnapshot();
    auto plan = MakePlan(*snap, raw);
    ASSERT_TRUE(plan.ok()) << plan.status();
    runtime->RecordPlan(*plan, t);
  }

  std::vector<int64_t> Gears(int dim = 0) const {
    SnapshotRef snap = runtime->GetSnapshot();
    const auto g = snap->gears(dim);
    return {g.begin(), g.end()};
  }
};

std::vector<DimensionSpec> BatchSpec(std::vector<int64_t> g, bool splittable = true) {
  return {{"BATCHSIZE", std::move(g), splittable, false}};
}

// ---- the brief's four cases, end to end with DEFAULT options ----

TEST(SeedConformance, FivePaddedRequestsAddTheirMedian) {
  // Gears [128]; five requests of 64 inside the window: add_min_samples = 5
  // padded samples, pad ratio 0.5 >= 0.35, candidate median 64.
  SeedRuntime f(BatchSpec({128}), AdaptiveOptions{});
  for (int i = 0; i < 5; ++i) f.Request({64}, 200.0 + i);
  auto r = f.runtime->RunOnce(300.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->added[0], ElementsAre(64));
  EXPECT_THAT(f.Gears(), ElementsAre(64, 128));
}

TEST(SeedConformance, FiveOversizeRequestsGrowTheLargestGear) {
  // Gears [64] on a splittable dimension; five requests of 128 split on 64
  // (split ratio 0.5 >= 0.20): the largest gear proposes their median, 128.
  SeedRuntime f(BatchSpec({64}, /*splittable=*/true), AdaptiveOptions{});
  for (int i = 0; i < 5; ++i) f.Request({128}, 200.0 + i);
  auto r = f.runtime->RunOnce(300.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->added[0], ElementsAre(128));
  EXPECT_THAT(f.Gears(), ElementsAre(64, 128));
}

TEST(SeedConformance, MemoryPressureReplacesKeepingTheCount) {
  // Gears [32, 128], usage 0.95 >= 0.90, protection 0; five requests of 64,
  // none of 32: 32 is evicted (zero use, no replacement loss) and the budget
  // of one addition takes 64.
  AdaptiveOptions o;
  o.recent_use_protect_seconds = 0;
  SeedRuntime f(BatchSpec({32, 128}), o);
  f.probe.Set(0.95);
  for (int i = 0; i < 5; ++i) f.Request({64}, 200.0 + i);
  auto r = f.runtime->RunOnce(300.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->memory.high);
  ASSERT_TRUE(r->addition_budget.has_value());
  EXPECT_EQ(*r->addition_budget, 1);
  EXPECT_THAT(r->removed[0], ElementsAre(32));
  EXPECT_THAT(r->added[0], ElementsAre(64));
  EXPECT_THAT(f.Gears(), ElementsAre(64, 128));
}

TEST(SeedConformance, NullThresholdMeansNoPressureWhateverTheUsage) {
  AdaptiveOptions o;
  o.device_memory_usage_threshold_ratio = std::nullopt;
  SeedRuntime f(BatchSpec({32, 128}), o);
  f.probe.Set(1.0);
  EXPECT_FALSE(f.runtime->CheckTrigger(60.0).has_value());  // no memory trigger
  for (int i = 0; i < 5; ++i) f.Request({64}, 200.0 + i);
  auto r = f.runtime->RunOnce(250.0);  // 32 is still protected (created at 0)
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->memory.high);
  EXPECT_FALSE(r->memory.usage.has_value());     // not even read
  EXPECT_FALSE(r->addition_budget.has_value());  // growth, not replacement
  EXPECT_THAT(r->added[0], ElementsAre(64));
  EXPECT_THAT(f.Gears(), ElementsAre(32, 64, 128));
}

// ---- §4 statistics, §5 scores ----

TEST(SeedConformance, DefaultsAreTheSeeds) {
  const AdaptiveOptions o;
  EXPECT_EQ(o.window_seconds, 300.0);
  EXPECT_EQ(o.half_life_seconds, 150.0);
  EXPECT_EQ(o.weight_hit, 0.60);
  EXPECT_EQ(o.weight_pad, 0.20);
  EXPECT_EQ(o.weight_split, 0.20);
  EXPECT_EQ(o.pad_add_threshold, 0.35);
  EXPECT_EQ(o.split_add_threshold, 0.20);
  EXPECT_EQ(o.add_min_samples, 5);
  EXPECT_EQ(o.min_samples_per_gear, 5);
  EXPECT_EQ(o.max_gears_per_type, 64);
  EXPECT_EQ(o.recent_use_protect_seconds, 300.0);
  EXPECT_EQ(o.replace_loss_threshold, 0.60);
  EXPECT_EQ(o.device_memory_usage_threshold_ratio, std::optional<double>(0.90));
  EXPECT_EQ(o.check_interval_seconds, 60.0);
  EXPECT_EQ(o.update_interval_seconds, 300.0);
  // gearbox's evidence guard on additions is off unless asked for.
  EXPECT_EQ(o.addition_confidence_sigmas, 0.0);
}

TEST(SeedConformance, EventsDecayWithAHalfLifeOf150Seconds) {
  // w = exp(-ln2/150 * age): an event 150 s old weighs 1/2, 300 s old 1/4.
  const GearStats s = MakeGearStats(32, {{32, 150.0, 1}, {32, 0.0, 1}}, 300.0, kHalfLife);
  EXPECT_NEAR(s.weighted_hits, 0.5 + 0.25, 1e-12);
}

TEST(SeedConformance, ScoreWeighsHitsPaddingAndSplitting060_020_020) {
  GearStats s;
  s.hit_rate = 0.5;
  s.avg_pad_ratio = 0.4;
  s.avg_split_ratio = 0.25;
  EXPECT_DOUBLE_EQ(GearScore(s, AdaptiveOptions{}), 0.6 * 0.5 - 0.2 * 0.4 - 0.2 * 0.25);
}

// ---- §7 additions ----

TEST(SeedConformance, PadDrivenAdditionFiresAtAnAveragePadOf035) {
  const GearSet gears = Batch({128});
  // 83 -> 128 pads 45/128 = 0.3516 >= 0.35: proposes and adds 83.
  UpdateDecision d = DecideUpdate(gears, OneDim(gears, {{128, Spread(83, 5, 200, 290)}}, 300), {},
                                  AdaptiveOptions{}, 300);
  EXPECT_THAT(d.added[0], ElementsAre(83));
  // 84 -> 128 pads 44/128 = 0.34375 < 0.35: nothing.
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(84, 5, 200, 290)}}, 300), {},
                   AdaptiveOptions{}, 300);
  EXPECT_THAT(d.record.additions, IsEmpty());
  EXPECT_FALSE(d.changed);
}

TEST(SeedConformance, AdditionNeedsFiveSamples) {
  const GearSet gears = Batch({128});
  UpdateDecision d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 4, 200, 290)}}, 300), {},
                                  AdaptiveOptions{}, 300);
  EXPECT_THAT(d.record.additions, IsEmpty());  // 4 < add_min_samples = 5
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 5, 200, 290)}}, 300), {},
                   AdaptiveOptions{}, 300);
  EXPECT_THAT(d.added[0], ElementsAre(64));
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].trigger, AdditionTrigger::kPad);
  EXPECT_NEAR(d.record.additions[0].pressure, 0.5 - 0.35, 1e-12);
}

TEST(SeedConformance, SplitDrivenAdditionFiresAtAnAverageSplitOf020OnTheLargestGear) {
  const GearSet gears = Batch({64});
  // 80 on max 64 splits (80-64)/80 = 0.20: proposes 80, a new largest gear.
  UpdateDecision d = DecideUpdate(gears, OneDim(gears, {{64, Spread(80, 5, 200, 290)}}, 300), {},
                                  AdaptiveOptions{}, 300);
  EXPECT_THAT(d.added[0], ElementsAre(80));
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].trigger, AdditionTrigger::kSplit);
  // 79: 15/79 = 0.19 < 0.20: nothing.
  d = DecideUpdate(gears, OneDim(gears, {{64, Spread(79, 5, 200, 290)}}, 300), {},
                   AdaptiveOptions{}, 300);
  EXPECT_THAT(d.record.additions, IsEmpty());
}

TEST(SeedConformance, CandidateIsThePythonMedianOfRawSizes) {
  // int(statistics.median([40, 41, 60, 61])) = int(50.5) = 50.
  const GearSet gears = Batch({128});
  std::vector<RawEvent> ev = {{40, 250, 2}, {41, 260, 1}, {60, 270, 1}, {61, 280, 2}};
  const UpdateDecision d =
      DecideUpdate(gears, OneDim(gears, {{128, ev}}, 300), {}, AdaptiveOptions{}, 300);
  EXPECT_THAT(d.added[0], ElementsAre(50));
}

TEST(SeedConformance, AdditionsStopAtSixtyFourGearsPerDimension) {
  std::vector<int64_t> many;
  for (int64_t g = 1; g <= 64; ++g) many.push_back(g * 100);
  const GearSet gears = Batch(many);
  const UpdateDecision d =
      DecideUpdate(gears, OneDim(gears, {{6400, Spread(3350, 5, 200, 290)}}, 300, 250), {},
                   AdaptiveOptions{}, 300);
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kCap);
}

// ---- §6 eviction ----

TEST(SeedConformance, EvictsTheLowestScoringUnprotectedGearAtMostOncePerDimension) {
  // Three unused gears and the largest: only one goes per update, and the
  // largest never.
  const GearSet gears = Batch({2, 4, 8, 64});
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, {{64, Spread(64, 50, 0, 290)}}, 300),
                                        {}, NoProtection(), 300);
  EXPECT_THAT(d.removed[0], ElementsAre(2));
  EXPECT_EQ(RecordOf(d, 64).verdict, GearVerdict::kMaxGear);
}

TEST(SeedConformance, UseWithin300SecondsProtects) {
  const GearSet gears = Batch({8, 64});
  // 8 last hit at 1: protected at now = 300 (299 s), evicted at 301 (300 s).
  // Its samples would pad 8 -> 64, a loss of 0.875 > 0.60; allow the loss so
  // only the protection decides.
  AdaptiveOptions o;
  o.replace_loss_threshold = 1.0;
  const auto events = [](double now) {
    const GearSet g = Batch({8, 64});
    return OneDim(g, {{8, {{8, 1.0, 1}}}, {64, Spread(64, 1000, 0, 290)}}, now);
  };
  EXPECT_EQ(RecordOf(DecideUpdate(gears, events(300), {}, o, 300), 8).verdict,
            GearVerdict::kProtected);
  const UpdateDecision later = DecideUpdate(gears, events(301), {}, o, 301);
  EXPECT_THAT(later.removed[0], ElementsAre(8));
}

TEST(SeedConformance, NeverEvictsBelowTheMinimumCount) {
  const GearSet gears = Batch({8, 64});
  AdaptiveOptions o = NoProtection();
  o.min_gear_count_per_type = 2;
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, {}, 300), {}, o, 300);
  EXPECT_EQ(RecordOf(d, 8).verdict, GearVerdict::kMinCount);
  EXPECT_FALSE(d.changed);
}

TEST(SeedConformance, ReplacementLossAbove060KeepsTheGearAndExtendsItsProtection) {
  // Gear 32's samples move to 64 when it goes. 24 -> 64 loses 0.625 > 0.60:
  // kept, protection extended. 28 -> 64 loses 0.5625: evicted. Gear 64
  // carries enough unpadded traffic that the move leaves it far below the
  // pad threshold.
  const GearSet gears = Batch({32, 64});
  const auto decide = [&](int64_t raw) {
    return DecideUpdate(
        gears, OneDim(gears, {{32, Spread(raw, 10, 0, 290)}, {64, Spread(64, 1000, 0, 290)}}, 300),
        {}, NoProtection(), 300);
  };
  const UpdateDecision kept = decide(24);
  EXPECT_NEAR(RecordOf(kept, 32).replace_loss, 0.625, 1e-12);
  EXPECT_EQ(RecordOf(kept, 32).verdict, GearVerdict::kReplaceLoss);
  EXPECT_THAT(kept.protect, ElementsAre(std::make_pair(0, int64_t{32})));
  EXPECT_FALSE(kept.changed);
  const UpdateDecision evicted = decide(28);
  EXPECT_NEAR(RecordOf(evicted, 32).replace_loss, 0.5625, 1e-12);
  EXPECT_THAT(evicted.removed[0], ElementsAre(32));
}

TEST(SeedConformance, ZeroUseGearsAreEvictedFirst) {
  // Gear 16 scores below unused gear 4 (it pads 10 -> 16), yet 4 goes.
  const GearSet gears = Batch({4, 16, 64});
  const UpdateDecision d = DecideUpdate(
      gears, OneDim(gears, {{16, Spread(10, 20, 0, 290)}, {64, Spread(64, 1000, 0, 290)}}, 300), {},
      NoProtection(), 300);
  EXPECT_LT(RecordOf(d, 16).score, RecordOf(d, 4).score);
  EXPECT_THAT(d.removed[0], ElementsAre(4));
}

// ---- §8 memory ----

TEST(SeedConformance, UsageAtThe090ThresholdIsPressure) {
  SeedRuntime f(BatchSpec({8, 32}), AdaptiveOptions{});
  f.probe.Set(0.89);
  EXPECT_FALSE(f.runtime->ReadMemory().high);
  EXPECT_FALSE(f.runtime->CheckTrigger(60.0).has_value());
  f.probe.Set(0.90);
  EXPECT_TRUE(f.runtime->ReadMemory().high);
  EXPECT_EQ(f.runtime->CheckTrigger(60.0), UpdateTrigger::kMemory);
}

TEST(SeedConformance, PressureWithoutEvictionAddsNothing) {
  // Budget = gears evicted in this update = 0.
  const GearSet gears = Batch({128});
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 5, 200, 290)}}, 300),
                                        High(), AdaptiveOptions{}, 300);
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kBudget);
  EXPECT_FALSE(d.changed);
}

// ---- gearbox's optional evidence guard ----

TEST(SeedConformance, TheConfidenceGuardIsAnOptInDeparture) {
  // With addition_confidence_sigmas = 3 a new gear must serve n samples with
  // n - 3 sqrt(n) >= max(min_samples_per_gear, 1): 18 by default. Five are
  // "thin"; eighteen are enough.
  const GearSet gears = Batch({128});
  AdaptiveOptions o;
  o.addition_confidence_sigmas = 3.0;
  UpdateDecision d =
      DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 5, 200, 290)}}, 300), {}, o, 300);
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kThin);
  EXPECT_FALSE(d.changed);
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 17, 200, 290)}}, 300), {}, o, 300);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kThin);
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 18, 200, 290)}}, 300), {}, o, 300);
  EXPECT_THAT(d.added[0], ElementsAre(64));
  o.min_samples_per_gear = 1;  // n - 3 sqrt(n) >= 1: 11
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 10, 200, 290)}}, 300), {}, o, 300);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kThin);
  d = DecideUpdate(gears, OneDim(gears, {{128, Spread(64, 11, 200, 290)}}, 300), {}, o, 300);
  EXPECT_THAT(d.added[0], ElementsAre(64));
}

TEST(SeedConformance, TheConfidenceGuardIsValidated) {
  AdaptiveOptions o;
  EXPECT_TRUE(ValidateAdaptiveOptions(o).ok());
  o.addition_confidence_sigmas = 3.0;
  EXPECT_TRUE(ValidateAdaptiveOptions(o).ok());
  o.addition_confidence_sigmas = -1.0;
  const absl::Status bad = ValidateAdaptiveOptions(o);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("addition_confidence_sigmas: -1"));
  o.addition_confidence_sigmas = NAN;
  EXPECT_FALSE(ValidateAdaptiveOptions(o).ok());
}

}  // namespace
}  // namespace gearbox
