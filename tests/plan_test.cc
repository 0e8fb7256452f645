#include "gearbox/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace gearbox {
namespace {

using ::testing::HasSubstr;

GearSet Batch(std::vector<int64_t> gears) {
  return *GearSet::Create({{"BATCHSIZE", std::move(gears), true, false}});
}

GearSet BatchSeq(std::vector<int64_t> batch, std::vector<int64_t> seq, bool eager = false) {
  return *GearSet::Create(
      {{"BATCHSIZE", std::move(batch), true, false}, {"SEQLEN", std::move(seq), false, eager}});
}

std::vector<Variant> Variants(const Plan& plan) {
  std::vector<Variant> out;
  plan.ForEachVariant([&](const Variant& v) { out.push_back(v); });
  return out;
}

TEST(MakePlan, PadsUpToTheNearestGear) {
  const GearSet gears = Batch({1, 4, 16});
  const int64_t raw[] = {3};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const DimensionPlan& d = plan->dimension(0);
  EXPECT_FALSE(d.split);
  ASSERT_EQ(d.num_groups, 1);
  EXPECT_EQ(d.groups[0].gear, 4);
  EXPECT_EQ(d.groups[0].extent, 3);
  EXPECT_EQ(d.groups[0].count, 1);
  EXPECT_EQ(d.event_raw(0), 3);
  EXPECT_EQ(d.event_gear(0), 4);
  EXPECT_EQ(plan->num_variants(), 1);
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 4.0);
  EXPECT_DOUBLE_EQ(plan->raw_volume(), 3.0);
  EXPECT_EQ(plan->snapshot_version(), 1u);
}

TEST(MakePlan, SizeBelowSmallestGearMapsToSmallest) {
  const GearSet gears = Batch({8, 16});
  const int64_t raw[] = {2};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->dimension(0).groups[0].gear, 8);
}

TEST(MakePlan, SplitsAboveTheMaxWithARemainder) {
  const GearSet gears = Batch({1, 2, 4, 8, 16, 32});
  const int64_t raw[] = {100};  // 3 x 32 + remainder 4
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const DimensionPlan& d = plan->dimension(0);
  EXPECT_TRUE(d.split);
  ASSERT_EQ(d.num_groups, 2);
  // Full chunks: raw sample is the whole request, against the max gear.
  EXPECT_EQ(d.groups[0].gear, 32);
  EXPECT_EQ(d.groups[0].extent, 32);
  EXPECT_EQ(d.groups[0].count, 3);
  EXPECT_EQ(d.event_raw(0), 100);
  EXPECT_EQ(d.event_gear(0), 32);
  // Remainder: its own size, its own gear, its own padding.
  EXPECT_EQ(d.groups[1].gear, 4);
  EXPECT_EQ(d.groups[1].extent, 4);
  EXPECT_EQ(d.groups[1].offset, 96);
  EXPECT_EQ(d.event_raw(1), 4);
  EXPECT_EQ(d.event_gear(1), 4);
  EXPECT_EQ(plan->num_variants(), 4);
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 100.0);
}

TEST(MakePlan, RemainderIsPaddedToItsGear) {
  const GearSet gears = Batch({8, 32});
  const int64_t raw[] = {70};  // 2 x 32 + 6 -> gear 8
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const DimensionPlan& d = plan->dimension(0);
  EXPECT_EQ(d.groups[1].gear, 8);
  EXPECT_EQ(d.groups[1].extent, 6);
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 72.0);
}

TEST(MakePlan, ExactMultipleHasNoRemainder) {
  const GearSet gears = Batch({16, 32});
  const int64_t raw[] = {64};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->dimension(0).num_groups, 1);
  EXPECT_EQ(plan->dimension(0).groups[0].count, 2);
  EXPECT_EQ(plan->num_variants(), 2);
}

TEST(MakePlan, NonSplittableAboveMaxIsAnError) {
  const GearSet gears = BatchSeq({1, 8}, {128, 256});
  const int64_t raw[] = {4, 300};
  auto plan = MakePlan(gears, raw);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("SEQLEN: 300"));
  EXPECT_THAT(plan.status().message(), HasSubstr("largest gear is 256"));
}

TEST(MakePlan, EagerFallbackRunsAtExactSize) {
  const GearSet gears = BatchSeq({1, 8}, {128, 256}, /*eager=*/true);
  const int64_t raw[] = {4, 300};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const DimensionPlan& d = plan->dimension(1);
  EXPECT_TRUE(d.eager);
  EXPECT_TRUE(plan->any_eager());
  EXPECT_EQ(d.groups[0].gear, 300);
  EXPECT_EQ(d.groups[0].extent, 300);
  EXPECT_EQ(d.event_raw(0), 300);
  EXPECT_EQ(d.event_gear(0), 256);  // counted as overflow on the max gear
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 8.0 * 300.0);
}

TEST(MakePlan, RejectsBadSizes) {
  const GearSet gears = BatchSeq({1, 8}, {128});
  const int64_t zero[] = {0, 5};
  EXPECT_THAT(MakePlan(gears, zero).status().message(), HasSubstr("BATCHSIZE: 0"));
  const int64_t one[] = {5};
  EXPECT_THAT(MakePlan(gears, one).status().message(), HasSubstr("one size per dimension (2)"));
}

TEST(MakePlan, TwoDimensionsCombineChunksWithPaddedGears) {
  const GearSet gears = BatchSeq({1, 2, 4, 8}, {64, 128, 256});
  const int64_t raw[] = {19, 100};  // batch: 2 x 8 + 3 (gear 4); seq: 100 -> 128
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_variants(), 3);
  EXPECT_EQ(plan->num_variant_groups(), 2);
  const VariantGroup g0 = plan->variant_group(0);
  EXPECT_EQ(g0.count, 2);
  EXPECT_EQ(g0.group[0], 0);
  const VariantGroup g1 = plan->variant_group(1);
  EXPECT_EQ(g1.count, 1);
  EXPECT_EQ(g1.group[0], 1);
  const auto variants = Variants(*plan);
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_EQ(variants[0].gear[0], 8);
  EXPECT_EQ(variants[0].offset[0], 0);
  EXPECT_EQ(variants[1].offset[0], 8);
  EXPECT_EQ(variants[2].gear[0], 4);
  EXPECT_EQ(variants[2].extent[0], 3);
  EXPECT_EQ(variants[2].offset[0], 16);
  for (const Variant& v : variants) {
    EXPECT_EQ(v.gear[1], 128);
    EXPECT_EQ(v.extent[1], 100);
    EXPECT_EQ(v.offset[1], 0);
  }
  EXPECT_DOUBLE_EQ(plan->padded_volume(), (8 + 8 + 4) * 128.0);
}

TEST(MakePlan, BothDimensionsSplitGivesTheCartesianProduct) {
  auto gears = *GearSet::Create({{"A", {2, 4}, true, false}, {"B", {3}, true, false}});
  const int64_t raw[] = {9, 7};  // A: 4,4,+1(gear 2); B: 3,3,+1(gear 3)
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_variants(), 9);
  EXPECT_EQ(plan->num_variant_groups(), 4);
  int64_t sum = 0;
  for (int i = 0; i < plan->num_variant_groups(); ++i) sum += plan->variant_group(i).count;
  EXPECT_EQ(sum, 9);
  const auto variants = Variants(*plan);
  ASSERT_EQ(variants.size(), 9u);
  // Covered cells add up to the request exactly once.
  int64_t covered = 0;
  for (const Variant& v : variants) covered += v.extent[0] * v.extent[1];
  EXPECT_EQ(covered, 63);
  EXPECT_DOUBLE_EQ(plan->padded_volume(), (4 + 4 + 2) * (3 + 3 + 3.0));
}

TEST(MakePlan, JointSetsRunEachVariantOnItsCombination) {
  // Grid BATCHSIZE {2, 4, 8} x SEQLEN {64, 256}; compiled: (4, 256), (8, 64).
  const GearSet gears =
      *GearSet::Create({{"BATCHSIZE", {2, 4, 8}, true, false}, {"SEQLEN", {64, 256}, false, false}},
                       1, 0, {GearScheme::kJoint, {{4, 256}, {8, 64}}, 4.0});
  // 19 x 50: chunks 8, 8 and a remainder 3 (cell 4) at SEQLEN cell 64.
  const int64_t raw[] = {19, 50};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Variant> v = Variants(*plan);
  ASSERT_EQ(v.size(), 3u);
  // Full chunks: cell (8, 64) is compiled. The remainder's cell (4, 64) is
  // covered by (8, 64) and (4, 256), both within 4 times its size; the
  // smaller product (512 < 1024) serves it.
  EXPECT_EQ(v[0].gear[0], 8);
  EXPECT_EQ(v[0].gear[1], 64);
  EXPECT_EQ(v[2].gear[0], 8);
  EXPECT_EQ(v[2].gear[1], 64);
  EXPECT_EQ(v[2].extent[0], 3);
  EXPECT_FALSE(v[2].eager);
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 3 * 8 * 64.0);
  // Events record the cell's gears: where the traffic is.
  const VariantGroup rest = plan->variant_group(1);
  EXPECT_EQ(rest.count, 1);
  EXPECT_EQ(plan->dimension(0).event_gear(rest.group[0]), 4);
  EXPECT_EQ(plan->dimension(1).event_gear(rest.group[1]), 64);
  EXPECT_EQ(plan->dimension(0).event_raw(1), 3);

  // 4 x 256: cell (4, 256) itself, no copy needed.
  const int64_t fits[] = {4, 256};
  auto exact = MakePlan(gears, fits);
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->exact());
  const int64_t small[] = {2, 64};  // cell (2, 64): (8, 64) is 4 times its size
  auto padded = MakePlan(gears, small);
  ASSERT_TRUE(padded.ok());
  EXPECT_FALSE(padded->exact());
  EXPECT_EQ(padded->variant_group(0).gear[0], 8);
}

TEST(MakePlan, SparseSetsRunUncoveredCellsUncompiledAtTheirExtents) {
  const GearSet gears =
      *GearSet::Create({{"BATCHSIZE", {2, 4, 8}, true, false}, {"SEQLEN", {64, 256}, false, false}},
                       1, 0, {GearScheme::kSparse, {{8, 64}}, 1.0});
  const int64_t raw[] = {19, 50};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const std::vector<Variant> v = Variants(*plan);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_FALSE(v[0].eager);  // (8, 64) is compiled
  EXPECT_EQ(v[0].gear[0], 8);
  EXPECT_TRUE(v[2].eager);  // (4, 64) is not: uncompiled, exactly 3 x 50
  EXPECT_EQ(v[2].gear[0], 3);
  EXPECT_EQ(v[2].gear[1], 50);
  EXPECT_TRUE(plan->any_uncompiled());
  EXPECT_FALSE(plan->any_eager());
  EXPECT_DOUBLE_EQ(plan->padded_volume(), 2 * 8 * 64.0 + 3 * 50.0);
  // The uncompiled variant's event too is recorded against its cell's gears.
  const VariantGroup rest = plan->variant_group(1);
  EXPECT_TRUE(rest.eager);
  EXPECT_EQ(plan->dimension(0).event_gear(rest.group[0]), 4);
  EXPECT_EQ(plan->dimension(1).event_gear(rest.group[1]), 64);
}

TEST(MakePlan, AReusedPlanKeepsNothingOfItsPreviousRequest) {
  // A plan object reused across requests and gear sets: a one-variant
  // request after a split on a joint set is exactly a fresh plan's.
  const GearSet joint =
      *GearSet::Create({{"BATCHSIZE", {2, 4, 8}, true, false}, {"SEQLEN", {64, 256}, false, false}},
                       7, 0, {GearScheme::kSparse, {{8, 64}}, 1.0});
  const GearSet independent = BatchSeq({1, 4, 16}, {32, 128});
  Plan plan;
  const int64_t split[] = {19, 50};
  ASSERT_TRUE(MakePlan(joint, split, &plan).ok());
  ASSERT_TRUE(plan.any_uncompiled());
  const int64_t one[] = {3, 100};
  ASSERT_TRUE(MakePlan(independent, one, &plan).ok());
  auto fresh = MakePlan(independent, one);
  ASSERT_TRUE(fresh.ok());
  for (const Plan* p : {&plan, &*fresh}) {
    EXPECT_EQ(p->snapshot_version(), 1u);
    EXPECT_EQ(p->num_dimensions(), 2);
    EXPECT_EQ(p->num_variants(), 1);
    EXPECT_EQ(p->num_variant_groups(), 1);
    EXPECT_FALSE(p->any_split());
    EXPECT_FALSE(p->any_uncompiled());
    const VariantGroup vg = p->variant_group(0);
    EXPECT_EQ(vg.count, 1);
    EXPECT_EQ(vg.gear[0], 4);
    EXPECT_EQ(vg.gear[1], 128);
    for (int d = 0; d < 2; ++d) {
      const DimensionPlan& dp = p->dimension(d);
      EXPECT_EQ(dp.raw, one[d]);
      EXPECT_EQ(dp.num_groups, 1);
      EXPECT_EQ(dp.groups[0].extent, one[d]);
      EXPECT_EQ(dp.groups[0].count, 1);
      EXPECT_EQ(dp.groups[0].offset, 0);
      EXPECT_EQ(dp.event_raw(0), one[d]);
      EXPECT_EQ(dp.event_gear(0), vg.gear[d]);
    }
    EXPECT_EQ(p->dimension(0).max_gear, 16);
    EXPECT_EQ(p->dimension(1).max_gear, 128);
    EXPECT_DOUBLE_EQ(p->padded_volume(), 4 * 128.0);
  }
  // At the largest gear: still one variant; one above it: the general path.
  const int64_t at_max[] = {16, 128};
  ASSERT_TRUE(MakePlan(independent, at_max, &plan).ok());
  EXPECT_TRUE(plan.exact());
  const int64_t above[] = {17, 128};
  ASSERT_TRUE(MakePlan(independent, above, &plan).ok());
  EXPECT_TRUE(plan.any_split());
  EXPECT_EQ(plan.num_variants(), 2);
  const int64_t too_long[] = {3, 129};
  EXPECT_FALSE(MakePlan(independent, too_long, &plan).ok());
  const int64_t zero[] = {0, 1};
  EXPECT_FALSE(MakePlan(independent, zero, &plan).ok());
}

}  // namespace
}  // namespace gearbox
