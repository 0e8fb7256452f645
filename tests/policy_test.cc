#include "gearbox/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "nlohmann/json.hpp"
#include "tests/policy_fixtures.h"

namespace gearbox {
namespace {

using namespace policy_fixtures;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(Policy, ScoreIsTheSeedFormula) {
  GearStats s;
  s.hit_rate = 0.5;
  s.avg_pad_ratio = 0.25;
  s.avg_split_ratio = 0.1;
  EXPECT_DOUBLE_EQ(GearScore(s, AdaptiveOptions{}), 0.6 * 0.5 - 0.2 * 0.25 - 0.2 * 0.1);
}

TEST(Policy, SeedOscillationCaseIsStable) {
  // Gears [32, 64], protection 0, a steady stream of batch 32. The seed
  // evicts 32 (max skipped; replacement loss 0.5 < 0.6) and re-adds it on
  // the next update, forever. Here the hysteresis filter keeps it.
  const GearSet gears = Batch({32, 64});
  const WindowStats stats = OneDim(gears, {{32, Spread(32, 300, 0, 299)}}, 300);
  const UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  const GearRecord& r = RecordOf(d, 32);
  EXPECT_NEAR(r.replace_loss, 0.5, 1e-12);
  EXPECT_EQ(r.replacement_gear, 64);
  EXPECT_NEAR(r.readd_pad_ratio, 0.5, 1e-12);
  EXPECT_EQ(r.readd_candidate, 32);
  EXPECT_EQ(r.verdict, GearVerdict::kWouldReadd);
  EXPECT_EQ(RecordOf(d, 64).verdict, GearVerdict::kMaxGear);
  EXPECT_FALSE(d.changed);
  EXPECT_THAT(d.protect, ElementsAre(std::make_pair(0, int64_t{32})));
  EXPECT_THAT(d.next_gears[0], ElementsAre(32, 64));
}

TEST(Policy, EvictsTheLowestScoringGearWhenNothingUndoesIt) {
  const GearSet gears = Batch({8, 16, 64});
  const WindowStats stats = OneDim(
      gears,
      {{8, Spread(8, 10, 0, 290)}, {16, Spread(16, 100, 0, 290)}, {64, Spread(64, 200, 0, 290)}},
      300);
  const UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  const GearRecord& r8 = RecordOf(d, 8);
  EXPECT_EQ(r8.verdict, GearVerdict::kEvicted);
  EXPECT_NEAR(r8.replace_loss, 0.5, 1e-12);
  EXPECT_EQ(RecordOf(d, 16).verdict, GearVerdict::kCandidate);
  EXPECT_THAT(d.removed[0], ElementsAre(8));
  EXPECT_THAT(d.next_gears[0], ElementsAre(16, 64));
  EXPECT_TRUE(d.changed);
  // Exact numbers: hits spread evenly; 10 + 100 + 200 samples at the same times.
  EXPECT_NEAR(r8.hit_rate, 10.0 / 310.0, 1e-3);
  EXPECT_NEAR(r8.score, 0.6 * r8.hit_rate, 1e-12);
  // The receiving gear 16 would pad 10 samples by 0.5: far below the threshold.
  EXPECT_LT(r8.readd_pad_ratio, 0.1);
}

TEST(Policy, FiltersRunInTheSeedsOrder) {
  const GearSet gears = Batch({2, 4, 8, 64});
  std::map<int64_t, std::vector<RawEvent>> ev = {
      {2, Spread(2, 50, 0, 100)},  // last hit 100: protected at now=300 (300 s window)
      {4, Spread(4, 50, 0, 290)},  // recently hit too
      {8, Spread(8, 50, 0, 5)},    // last hit at 5: not protected
      {64, Spread(64, 50, 0, 290)}};
  AdaptiveOptions o;  // protection 300 s
  o.recent_use_protect_seconds = 250;
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, ev, 300), {}, o, 300);
  EXPECT_EQ(RecordOf(d, 2).verdict, GearVerdict::kProtected);
  EXPECT_EQ(RecordOf(d, 4).verdict, GearVerdict::kProtected);
  EXPECT_EQ(RecordOf(d, 64).verdict, GearVerdict::kMaxGear);
  // 8 -> 64: loss (64-8)/64 = 0.875 > 0.6: kept, protection extended.
  const GearRecord& r8 = RecordOf(d, 8);
  EXPECT_EQ(r8.verdict, GearVerdict::kReplaceLoss);
  EXPECT_NEAR(r8.replace_loss, 0.875, 1e-12);
  EXPECT_THAT(d.protect, ElementsAre(std::make_pair(0, int64_t{8})));
  EXPECT_FALSE(d.changed);

  AdaptiveOptions at_min = NoProtection();
  at_min.min_gear_count_per_type = 4;
  const UpdateDecision m = DecideUpdate(gears, OneDim(gears, ev, 300), {}, at_min, 300);
  EXPECT_EQ(RecordOf(m, 8).verdict, GearVerdict::kMinCount);
}

TEST(Policy, CreationProtectsNewGears) {
  const GearSet gears = Batch({4, 8, 64});
  AdaptiveOptions o;
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, {}, 300, /*created=*/100), {}, o, 300);
  EXPECT_EQ(RecordOf(d, 4).verdict, GearVerdict::kProtected);
  const UpdateDecision later =
      DecideUpdate(gears, OneDim(gears, {}, 400, /*created=*/100), {}, o, 400);
  EXPECT_EQ(RecordOf(later, 4).verdict, GearVerdict::kEvicted);  // zero-use, 300 s after creation
}

TEST(Policy, ZeroUseGearsGoFirstWhateverTheScores) {
  const GearSet gears = Batch({4, 8, 16, 64});
  // Gear 8 has a negative score (pad 0.375); gear 4 is unused (score 0).
  const WindowStats stats = OneDim(
      gears,
      {{8, Spread(5, 100, 0, 290)}, {16, Spread(16, 10, 0, 290)}, {64, Spread(64, 1000, 0, 290)}},
      300);
  const UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  EXPECT_LT(RecordOf(d, 8).score, RecordOf(d, 4).score);
  EXPECT_EQ(RecordOf(d, 4).tier, 0);
  EXPECT_EQ(RecordOf(d, 4).verdict, GearVerdict::kEvicted);
  EXPECT_THAT(d.removed[0], ElementsAre(4));
  // Gear 8 pads 5 -> 8 (0.375 >= 0.35): proposes 5.
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].gear, 5);
  EXPECT_EQ(d.record.additions[0].trigger, AdditionTrigger::kPad);
  EXPECT_NEAR(d.record.additions[0].pressure, 0.375 - 0.35, 1e-12);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kAdded);
  EXPECT_THAT(d.next_gears[0], ElementsAre(5, 8, 16, 64));
}

TEST(Policy, MinSamplesPerGearFormsASecondTier) {
  const GearSet gears = Batch({4, 8, 16, 64});
  const WindowStats stats = OneDim(gears,
                                   {{4, Spread(4, 3, 0, 290)},
                                    {8, Spread(8, 50, 0, 290)},
                                    {16, Spread(16, 20, 0, 290)},
                                    {64, Spread(64, 1000, 0, 290)}},
                                   300);
  AdaptiveOptions o = NoProtection();
  o.replace_loss_threshold = 1.0;
  UpdateDecision d = DecideUpdate(gears, stats, {}, o, 300);
  EXPECT_EQ(RecordOf(d, 4).tier, 1);  // 3 samples < 5
  EXPECT_EQ(RecordOf(d, 8).tier, 2);
  EXPECT_THAT(d.removed[0], ElementsAre(4));
  o.min_samples_per_gear = 0;  // only the zero-use tier: lowest score wins
  d = DecideUpdate(gears, stats, {}, o, 300);
  EXPECT_EQ(RecordOf(d, 4).tier, 2);
  EXPECT_THAT(d.removed[0], ElementsAre(4));  // still lowest by score (fewest hits)
}

TEST(Policy, AtMostOneEvictionPerDimensionPerRound) {
  const GearSet gears = Batch({2, 4, 8, 64});
  const UpdateDecision d = DecideUpdate(gears, OneDim(gears, {}, 300), {}, NoProtection(), 300);
  EXPECT_THAT(d.removed[0], ElementsAre(2));
  EXPECT_EQ(RecordOf(d, 4).verdict, GearVerdict::kCandidate);
  EXPECT_EQ(RecordOf(d, 8).verdict, GearVerdict::kCandidate);
}

TEST(Policy, DimensionsAreIndependent) {
  const GearSet gears = *GearSet::Create(
      {{"BATCHSIZE", {2, 4, 8}, true, false}, {"SEQLEN", {64, 128}, false, false}});
  WindowStats stats;
  for (int dd = 0; dd < 2; ++dd) {
    DimensionStats& ds = stats.dimensions.emplace_back();
    ds.name = gears.dimension(dd).name;
    for (int64_t g : gears.gears(dd)) {
      ds.gears.push_back(MakeGearStats(g, {}, 300, kHalfLife, -1e9));
    }
    FinalizeDimensionStats(&ds);
  }
  const UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  EXPECT_THAT(d.removed[0], ElementsAre(2));
  EXPECT_THAT(d.removed[1], ElementsAre(64));
}

TEST(Policy, SplitDrivenAdditionProposesTheMedianOversizeRequest) {
  const GearSet gears = Batch({8, 32});
  // Requests of 100 on max 32: each full chunk records raw 100, split 0.68.
  const WindowStats stats = OneDim(gears, {{32, Spread(100, 30, 0, 290)}}, 300);
  const UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  ASSERT_EQ(d.record.additions.size(), 1u);
  const AdditionRecord& a = d.record.additions[0];
  EXPECT_EQ(a.trigger, AdditionTrigger::kSplit);
  EXPECT_EQ(a.gear, 100);
  EXPECT_EQ(a.source_gear, 32);
  EXPECT_NEAR(a.ratio, 0.68, 1e-12);
  EXPECT_NEAR(a.pressure, 0.48, 1e-12);
  EXPECT_THAT(d.added[0], ElementsAre(100));
  EXPECT_THAT(d.next_gears[0], ElementsAre(32, 100));  // 8 was unused: evicted
}

TEST(Policy, SplitRuleAppliesOnlyToTheMaxGear) {
  // A non-max gear with stale split samples (from when it was the max).
  const GearSet gears = Batch({32, 256});
  const WindowStats stats =
      OneDim(gears, {{32, Spread(100, 30, 0, 290)}, {256, Spread(256, 30, 0, 290)}}, 300);
  AdaptiveOptions o = NoProtection();
  const UpdateDecision d = DecideUpdate(gears, stats, {}, o, 300);
  for (const AdditionRecord& a : d.record.additions) EXPECT_NE(a.trigger, AdditionTrigger::kSplit);
}

TEST(Policy, DuplicatesCapsAndPressureOrder) {
  const GearSet gears = Batch({16, 64, 256});
  // 64 pads 40 -> 64 (0.375); 256 pads 100 -> 256 (0.609); 16 pads 16 (0).
  const WindowStats stats = OneDim(
      gears,
      {{16, Spread(16, 50, 0, 290)}, {64, Spread(40, 50, 0, 290)}, {256, Spread(100, 50, 0, 290)}},
      300);
  AdaptiveOptions o;  // default protection keeps everything this round
  UpdateDecision d = DecideUpdate(gears, stats, {}, o, 300);
  ASSERT_EQ(d.record.additions.size(), 2u);
  EXPECT_EQ(d.record.additions[0].gear, 100);  // higher pressure first
  EXPECT_EQ(d.record.additions[1].gear, 40);
  EXPECT_THAT(d.next_gears[0], ElementsAre(16, 40, 64, 100, 256));
  o.max_gears_per_type = 4;
  d = DecideUpdate(gears, stats, {}, o, 300);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kAdded);
  EXPECT_EQ(d.record.additions[1].outcome, AdditionOutcome::kCap);
  // A proposal equal to an existing gear is a duplicate.
  const WindowStats dup = OneDim(gears, {{256, Spread(64, 50, 0, 290)}}, 300, /*created=*/200);
  d = DecideUpdate(gears, dup, {}, AdaptiveOptions{}, 300);
  ASSERT_EQ(d.record.additions.size(), 1u);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kDuplicate);
  EXPECT_FALSE(d.changed);
}

TEST(Policy, MemoryPressureLimitsAdditionsToEvictions) {
  const GearSet gears = Batch({8, 16, 64, 256});
  const WindowStats stats = OneDim(
      gears,
      {{16, Spread(16, 50, 0, 290)}, {64, Spread(40, 50, 0, 290)}, {256, Spread(100, 50, 0, 290)}},
      300);
  MemoryState high;
  high.usage = 0.95;
  high.threshold = 0.9;
  high.high = true;
  UpdateDecision d = DecideUpdate(gears, stats, high, NoProtection(), 300);
  EXPECT_THAT(d.removed[0], ElementsAre(8));  // unused
  ASSERT_TRUE(d.record.addition_budget.has_value());
  EXPECT_EQ(*d.record.addition_budget, 1);
  EXPECT_THAT(d.added[0], ElementsAre(100));
  EXPECT_EQ(d.record.additions[1].outcome, AdditionOutcome::kBudget);
  // Without pressure the budget is unlimited.
  d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  EXPECT_FALSE(d.record.addition_budget.has_value());
  EXPECT_THAT(d.added[0], ElementsAre(40, 100));
}

// A gear of the set that the byte budget can never hold (its predicted bytes
// alone, plus the cheapest gears the policy must keep besides it, pass the
// budget) is declined in the record with its bytes and the budget; nothing
// else changes on its account: the decision is the seed's.
TEST(Policy, AGearTheByteBudgetCanNeverHoldIsDeclinedAndEvictsNothing) {
  const GearSet gears = Batch({8, 16, 64, 256});
  const WindowStats stats = OneDim(gears,
                                   {{8, Spread(8, 50, 0, 290)},
                                    {16, Spread(16, 50, 0, 290)},
                                    {64, Spread(64, 50, 0, 290)},
                                    {256, Spread(200, 50, 0, 290)}},
                                   300);          // no padding to speak of: no additions
  const std::vector<int64_t> held = {8, 16, 64};  // 256 was never compiled: 256,000 bytes alone
  const UpdateDecision seed = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  UpdateDecision d = DecideUpdate(gears, stats, ByteBudget(200'000, held), NoProtection(), 300);
  EXPECT_EQ(d.removed, seed.removed);
  EXPECT_EQ(d.next_gears, seed.next_gears);
  ASSERT_EQ(d.record.declined.size(), 1u);
  EXPECT_EQ(d.record.declined[0].dimension, "BATCHSIZE");
  EXPECT_EQ(d.record.declined[0].action, ChangeAction::kAdd);
  EXPECT_EQ(d.record.declined[0].gear, 256);
  EXPECT_THAT(d.record.declined[0].reason,
              HasSubstr("its predicted 256000 bytes alone, plus 0 bytes the fewest gears kept "
                        "besides it hold (1 per dimension, min_gear_count_per_type), pass "
                        "memory_budget_bytes = 200000"));
  EXPECT_THAT(UpdateRecordToJson(d.record),
              HasSubstr("\"declined\":[{\"dim\":\"BATCHSIZE\",\"action\":\"add\",\"gear\":256"));
  // It fits alone: not declined, whatever else is held.
  d = DecideUpdate(gears, stats, ByteBudget(260'000, held), NoProtection(), 300);
  EXPECT_TRUE(d.record.declined.empty());
  // Two gears must stay per dimension: the cheapest other one kept counts
  // (this update evicts 8, so 16: 16,000 bytes).
  AdaptiveOptions two = NoProtection();
  two.min_gear_count_per_type = 2;
  d = DecideUpdate(gears, stats, ByteBudget(260'000, held), two, 300);
  EXPECT_THAT(d.removed[0], ElementsAre(8));
  ASSERT_EQ(d.record.declined.size(), 1u);
  EXPECT_THAT(d.record.declined[0].reason, HasSubstr("256000 bytes alone, plus 16000 bytes"));
  // A held gear fits (it is compiled); without a budget or a prediction, nothing is declined.
  d = DecideUpdate(gears, stats, ByteBudget(200'000, {8, 16, 64, 256}), NoProtection(), 300);
  EXPECT_TRUE(d.record.declined.empty());
  d = DecideUpdate(gears, stats, ByteBudget(0, held), NoProtection(), 300);
  EXPECT_TRUE(d.record.declined.empty());
  EXPECT_EQ(UpdateRecordToJson(d.record).find("declined"), std::string::npos);
  d = DecideUpdate(gears, stats, ByteBudget(200'000, held, 1000, /*unpredictable=*/true),
                   NoProtection(), 300);
  EXPECT_TRUE(d.record.declined.empty());
}

// Nor is a gear evicted whose samples would move to a gear the budget can
// never hold: the seed would evict the unused 64, whose samples then go to
// 256; with the budget, 64 is kept (verdict replacement_never_fits) and the
// next gear in the eviction order is examined instead (16, which the
// replacement-loss rule keeps: its samples would pad to 64).
TEST(Policy, AGearIsNotEvictedOntoAGearTheByteBudgetCanNeverHold) {
  const GearSet gears = Batch({8, 16, 64, 256});
  const WindowStats stats =
      OneDim(gears, {{8, Spread(8, 50, 0, 290)}, {16, Spread(16, 5, 0, 290)}}, 300);
  const UpdateDecision seed = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  EXPECT_THAT(seed.removed[0], ElementsAre(64));  // unused: first to go
  const UpdateDecision d =
      DecideUpdate(gears, stats, ByteBudget(250'000, {8, 16, 64}), NoProtection(), 300);
  EXPECT_TRUE(d.removed[0].empty());
  for (const GearRecord& g : d.record.gears) {
    if (g.gear == 64) {
      EXPECT_EQ(g.verdict, GearVerdict::kReplacementNeverFits);
    }
    if (g.gear == 16) {
      EXPECT_EQ(g.verdict, GearVerdict::kReplaceLoss);
    }
  }
  EXPECT_THAT(UpdateRecordToJson(d.record), HasSubstr("\"verdict\":\"replacement_never_fits\""));
  // 256 held (it fits after all): the seed's eviction.
  EXPECT_THAT(DecideUpdate(gears, stats, ByteBudget(400'000, {8, 16, 64, 256}), NoProtection(), 300)
                  .removed[0],
              ElementsAre(64));
}

TEST(Policy, AnAdditionPastTheByteBudgetIsRefusedAfterTheEvictionsFreeTheirs) {
  // The window of MemoryPressureLimitsAdditionsToEvictions, no pressure:
  // gear 8 goes (unused), 40 and 100 are proposed. Each gear costs 1000
  // bytes per unit: 344,000 bytes in use, 336,000 once 8 is evicted.
  const GearSet gears = Batch({8, 16, 64, 256});
  const WindowStats stats = OneDim(
      gears,
      {{16, Spread(16, 50, 0, 290)}, {64, Spread(40, 50, 0, 290)}, {256, Spread(100, 50, 0, 290)}},
      300);
  const std::vector<int64_t> held = {8, 16, 64, 256};
  // 336,000 + 100,000 fits 440,000; + 40,000 more does not.
  UpdateDecision d = DecideUpdate(gears, stats, ByteBudget(440'000, held), NoProtection(), 300);
  EXPECT_THAT(d.removed[0], ElementsAre(8));
  EXPECT_THAT(d.added[0], ElementsAre(100));
  ASSERT_EQ(d.record.additions.size(), 2u);
  EXPECT_EQ(d.record.additions[0].gear, 100);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kAdded);
  EXPECT_EQ(d.record.additions[0].predicted_bytes, 100'000);
  EXPECT_EQ(d.record.additions[1].gear, 40);
  EXPECT_EQ(d.record.additions[1].outcome, AdditionOutcome::kMemoryBytes);
  EXPECT_EQ(d.record.additions[1].predicted_bytes, 40'000);
  EXPECT_FALSE(d.record.addition_budget.has_value());  // the seed's count budget: not in play
  const std::string json = UpdateRecordToJson(d.record);
  EXPECT_THAT(json, HasSubstr("\"outcome\":\"memory_bytes\",\"predicted_bytes\":40000"));
  EXPECT_THAT(json, HasSubstr("\"budget_bytes\":440000,\"bytes_in_use\":344000"));
  // The eviction's bytes count: without them 344,000 + 100,000 would not fit.
  d = DecideUpdate(gears, stats, ByteBudget(436'000, held), NoProtection(), 300);
  EXPECT_THAT(d.added[0], ElementsAre(100));
  // One byte less: 100 does not fit, the smaller 40 still does.
  d = DecideUpdate(gears, stats, ByteBudget(435'999, held), NoProtection(), 300);
  EXPECT_THAT(d.added[0], ElementsAre(40));
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kMemoryBytes);
  // No budget, or a prediction that is not there yet: the seed's additions.
  d = DecideUpdate(gears, stats, ByteBudget(0, held), NoProtection(), 300);
  EXPECT_THAT(d.added[0], ElementsAre(40, 100));
  EXPECT_FALSE(d.record.additions[0].predicted_bytes.has_value());
  d = DecideUpdate(gears, stats, ByteBudget(1, held, 1000, /*unpredictable=*/true), NoProtection(),
                   300);
  EXPECT_THAT(d.added[0], ElementsAre(40, 100));
}

TEST(Policy, AGearThatRanOutOfMemoryIsNotAddedWithinTheCooldown) {
  // The window of MemoryPressureLimitsAdditionsToEvictions, no pressure:
  // 40 and 100 are proposed; 100's compile ran out of memory recently.
  const GearSet gears = Batch({8, 16, 64, 256});
  const WindowStats stats = OneDim(
      gears,
      {{16, Spread(16, 50, 0, 290)}, {64, Spread(40, 50, 0, 290)}, {256, Spread(100, 50, 0, 290)}},
      300);
  MemoryState memory;
  memory.recent_out_of_memory.push_back({{100}, 123456, 250.0, 2});
  UpdateDecision d = DecideUpdate(gears, stats, memory, NoProtection(), 300);
  EXPECT_THAT(d.added[0], ElementsAre(40));
  ASSERT_EQ(d.record.additions.size(), 2u);
  EXPECT_EQ(d.record.additions[0].gear, 100);
  EXPECT_EQ(d.record.additions[0].outcome, AdditionOutcome::kOutOfMemory);
  EXPECT_THAT(UpdateRecordToJson(d.record), HasSubstr("\"outcome\":\"out_of_memory\""));
  // Another gear's failure holds back only that gear.
  memory.recent_out_of_memory[0].gears = {101};
  d = DecideUpdate(gears, stats, memory, NoProtection(), 300);
  EXPECT_THAT(d.added[0], ElementsAre(40, 100));
}

TEST(Policy, ReplacementLossFollowsTheMappingRule) {
  GearStats s = MakeGearStats(16, Spread(12, 4, 0, 1), 1, kHalfLife);
  auto [loss, target] = ReplacementLoss(s, {8, 16, 64});
  EXPECT_EQ(target, 64);
  EXPECT_NEAR(loss, (64.0 - 12.0) / 64.0, 1e-12);  // samples go up to 64, not down to 8
  auto [alone, none] = ReplacementLoss(s, {16});
  EXPECT_TRUE(std::isinf(alone));
  (void)none;
}

TEST(Policy, RecordSerializesToOneJsonLine) {
  const GearSet gears = Batch({8, 16, 64});
  const WindowStats stats = OneDim(
      gears,
      {{8, Spread(8, 10, 0, 290)}, {16, Spread(16, 100, 0, 290)}, {64, Spread(40, 200, 0, 290)}},
      300);
  UpdateDecision d = DecideUpdate(gears, stats, {}, NoProtection(), 300);
  d.record.sequence = 7;
  d.record.trigger = UpdateTrigger::kInterval;
  const std::string line = UpdateRecordToJson(d.record);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["sequence"], 7);
  EXPECT_EQ(j["trigger"], "interval");
  EXPECT_EQ(j["removed"]["BATCHSIZE"], nlohmann::json::array({8}));
  EXPECT_EQ(j["added"]["BATCHSIZE"], nlohmann::json::array({40}));
  EXPECT_EQ(j["gears"]["BATCHSIZE"], nlohmann::json::array({16, 40, 64}));
  EXPECT_EQ(j["gear_stats"].size(), 3u);
  EXPECT_EQ(j["gear_stats"][0]["verdict"], "evicted");
  EXPECT_EQ(j["additions"][0]["trigger"], "pad");
  EXPECT_TRUE(j["memory"]["usage"].is_null());
  EXPECT_TRUE(j["addition_budget"].is_null());
}

}  // namespace
}  // namespace gearbox
