#include "gearbox/gear_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <span>
#include <vector>

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TimesGears, SeedExamples) {
  EXPECT_THAT(*MakeTimesGears(3, 100), ElementsAre(3, 4, 8, 16, 32, 64, 100));
  EXPECT_THAT(*MakeTimesGears(1, 1024), ElementsAre(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024));
  EXPECT_THAT(*MakeTimesGears(7, 7), ElementsAre(7));
  EXPECT_THAT(*MakeTimesGears(4, 9), ElementsAre(4, 8, 9));
  EXPECT_THAT(*MakeTimesGears(1, 1), ElementsAre(1));
  EXPECT_THAT(*MakeTimesGears(1, 2), ElementsAre(1, 2));
}

TEST(TimesGears, LargeRangeDoesNotOverflow) {
  auto gears = MakeTimesGears(1, int64_t{1} << 62);
  ASSERT_TRUE(gears.ok());
  EXPECT_EQ(gears->size(), 63u);
  EXPECT_EQ(gears->back(), int64_t{1} << 62);
  auto max_int = MakeTimesGears(1, INT64_MAX);
  ASSERT_TRUE(max_int.ok());
  EXPECT_EQ(max_int->back(), INT64_MAX);
  EXPECT_EQ(max_int->size(), 64u);
}

TEST(TimesGears, ErrorsNameTheField) {
  auto bad_min = MakeTimesGears(0, 10, "dims[0]");
  ASSERT_FALSE(bad_min.ok());
  EXPECT_THAT(bad_min.status().message(), HasSubstr("dims[0].min"));
  EXPECT_THAT(bad_min.status().message(), HasSubstr("0"));
  auto inverted = MakeTimesGears(10, 5, "dims[1]");
  ASSERT_FALSE(inverted.ok());
  EXPECT_THAT(inverted.status().message(), HasSubstr("dims[1].max: 5"));
  EXPECT_THAT(inverted.status().message(), HasSubstr(">= min (10)"));
}

TEST(NormalizeGears, SortsAndDeduplicates) {
  EXPECT_THAT(*NormalizeGears({64, 8, 8, 1, 32}), ElementsAre(1, 8, 32, 64));
}

TEST(NormalizeGears, RejectsBadLists) {
  EXPECT_THAT(NormalizeGears({}, "dims[0].gears").status().message(), HasSubstr("dims[0].gears"));
  auto zero = NormalizeGears({4, 0}, "g");
  EXPECT_THAT(zero.status().message(), HasSubstr("g[1]: 0 is not allowed"));
  std::vector<int64_t> many;
  for (int i = 1; i <= 65; ++i) many.push_back(i);
  EXPECT_THAT(NormalizeGears(many, "g").status().message(), HasSubstr("at most 64"));
  many.pop_back();
  EXPECT_TRUE(NormalizeGears(many, "g").ok());
}

TEST(GearSet, MapsToSmallestGearAtOrAbove) {
  auto set = GearSet::Create({{"BATCHSIZE", {1, 4, 16}, true, false}});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->MapToGear(0, 1), 1);
  EXPECT_EQ(set->MapToGear(0, 2), 4);
  EXPECT_EQ(set->MapToGear(0, 4), 4);
  EXPECT_EQ(set->MapToGear(0, 5), 16);
  EXPECT_EQ(set->MapToGear(0, 16), 16);
  EXPECT_EQ(set->MapToGear(0, 17), -1);
  EXPECT_EQ(set->version(), 1u);
  EXPECT_EQ(set->DebugString(), "BATCHSIZE=[1,4,16]");
}

// The gear index by an independent reference: std::lower_bound over the
// list, the smallest gear for sizes at or below it, -1 above the largest.
int ReferenceIndex(std::span<const int64_t> gears, int64_t raw) {
  if (raw > gears.back()) return -1;
  return static_cast<int>(std::lower_bound(gears.begin(), gears.end(), raw) - gears.begin());
}

void ExpectMapsLikeTheSearch(const GearSet& set, int d, int64_t raw) {
  const std::span<const int64_t> g = set.gears(d);
  const int want = ReferenceIndex(g, raw);
  ASSERT_EQ(set.MapToGearIndex(d, raw), want) << "raw " << raw;
  ASSERT_EQ(set.MapToGear(d, raw), want < 0 ? -1 : g[static_cast<size_t>(want)]) << "raw " << raw;
  if (raw <= set.max_gear(d)) {
    ASSERT_EQ(set.SearchGearIndex(d, raw), want) << "raw " << raw;
  }
}

TEST(GearSet, SizeTableMapsEverySizeAsTheBinarySearchDoes) {
  std::vector<int64_t> consecutive;  // 64 gears, many in one table entry's range of sizes
  for (int64_t g = 1; g <= kMaxGearsPerDimension; ++g) consecutive.push_back(g * 3);
  const std::vector<std::vector<int64_t>> lists = {
      {1, 4, 16},
      {7},
      {1},
      *MakeTimesGears(3, 100),
      *MakeTimesGears(16, 8192),
      consecutive,
      {5, 6, 7, 8, 9, 1000, 1023, 1024, 1025, 40000},
      *MakeTimesGears(1, int64_t{1} << 40),
      *MakeTimesGears(1, std::numeric_limits<int64_t>::max()),
      {3, (int64_t{1} << 62) + 1, std::numeric_limits<int64_t>::max() - 1}};
  for (const std::vector<int64_t>& list : lists) {
    SCOPED_TRACE(testing::PrintToString(list));
    auto set = GearSet::Create({{"SEQLEN", list, false, false}});
    ASSERT_TRUE(set.ok());
    const int64_t max = list.back();
    EXPECT_EQ(set->max_gear(0), max);
    // Every size up to a bound, each gear and its neighbours, each boundary
    // between table entries (2^b and 2^b + 1) and its neighbours.
    for (int64_t raw = 1; raw <= std::min<int64_t>(max, 20000); ++raw)
      ExpectMapsLikeTheSearch(*set, 0, raw);
    for (int64_t g : list) {
      for (int64_t raw : {g - 1, g}) ExpectMapsLikeTheSearch(*set, 0, raw);
      if (g < std::numeric_limits<int64_t>::max()) ExpectMapsLikeTheSearch(*set, 0, g + 1);
    }
    for (int b = 0; b < 63; ++b) {
      const int64_t p = int64_t{1} << b;
      for (int64_t raw : {p - 1, p, p + 1, p + 2}) ExpectMapsLikeTheSearch(*set, 0, raw);
    }
    // Sizes below 1 map as 1 does; above the largest gear, to none.
    for (int64_t raw : {int64_t{0}, int64_t{-5}, std::numeric_limits<int64_t>::min()}) {
      EXPECT_EQ(set->MapToGearIndex(0, raw), 0);
      EXPECT_EQ(set->MapToGear(0, raw), list.front());
    }
    if (max < std::numeric_limits<int64_t>::max()) {
      for (int64_t raw : {max + 1, std::numeric_limits<int64_t>::max()}) {
        EXPECT_EQ(set->MapToGearIndex(0, raw), -1);
        EXPECT_EQ(set->MapToGear(0, raw), -1);
      }
    }
  }
}

TEST(GearSet, LookupOfEachDimensionSurvivesCopiesAndWithGears) {
  auto created = GearSet::Create(
      {{"BATCHSIZE", {1, 2, 4, 8}, true, false}, {"SEQLEN", {16, 64, 256, 1000}, false, false}});
  ASSERT_TRUE(created.ok());
  auto original = std::make_unique<GearSet>(*std::move(created));
  const GearSet copy = *original;  // a value: its lookup must not point into `original`
  original.reset();
  EXPECT_EQ(copy.MapToGear(0, 3), 4);
  EXPECT_EQ(copy.MapToGear(0, 9), -1);
  EXPECT_EQ(copy.MapToGear(1, 3), 16);
  EXPECT_EQ(copy.MapToGear(1, 257), 1000);
  EXPECT_EQ(copy.MapToGearIndex(1, 1000), 3);
  EXPECT_EQ(copy.MapToGear(1, 1001), -1);
  EXPECT_EQ(copy.max_gear(1), 1000);
  auto next = copy.WithGears({{2, 50}, {300}}, 2, 1.0);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->MapToGear(0, 1), 2);
  EXPECT_EQ(next->MapToGear(0, 3), 50);
  EXPECT_EQ(next->MapToGear(0, 51), -1);
  EXPECT_EQ(next->MapToGear(1, 1), 300);
  EXPECT_EQ(next->MapToGear(1, 301), -1);
  EXPECT_EQ(next->max_gear(0), 50);
}

TEST(GearSet, ValidatesDimensions) {
  EXPECT_THAT(GearSet::Create({}).status().message(), HasSubstr("dims"));
  EXPECT_THAT(GearSet::Create({{"A", {1}}, {"A", {2}}}).status().message(),
              HasSubstr("dims[1].name: \"A\""));
  EXPECT_THAT(GearSet::Create({{"bad name", {1}}}).status().message(), HasSubstr("dims[0].name"));
  EXPECT_THAT(GearSet::Create({{"S", {1, -3}}}).status().message(),
              HasSubstr("dims[0].gears[1]: -3"));
  EXPECT_THAT(GearSet::Create({{"S", {1}, true, true}}).status().message(),
              HasSubstr("dims[0].eager_fallback"));
  std::vector<DimensionSpec> nine;
  // (Not "D" + std::to_string(i): GCC 12 warns falsely on it at -O3, bug 105651.)
  for (int i = 0; i < 9; ++i) nine.push_back({std::string(1, static_cast<char>('A' + i)), {1}});
  EXPECT_THAT(GearSet::Create(nine).status().message(), HasSubstr("at most 8"));
}

TEST(GearSet, AnyNameAndDefaultSplittability) {
  EXPECT_TRUE(DefaultSplittable("BATCHSIZE"));
  EXPECT_FALSE(DefaultSplittable("SEQLEN"));
  EXPECT_FALSE(DefaultSplittable("IMAGE_H"));
  auto set = GearSet::Create({{"IMAGE_H", {224, 448}}, {"tokens.v2", {1}}});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->FindDimension("tokens.v2"), 1);
  EXPECT_EQ(set->FindDimension("nope"), -1);
}

TEST(GearSet, WithGearsKeepsFlagsAndValidates) {
  auto set = GearSet::Create({{"BATCHSIZE", {1, 4}, true, false}}, 3, 10.0);
  ASSERT_TRUE(set.ok());
  auto next = set->WithGears({{8, 2}}, 4, 20.0);
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(next->gears(0), ElementsAre(2, 8));
  EXPECT_TRUE(next->dimension(0).splittable);
  EXPECT_EQ(next->version(), 4u);
  EXPECT_EQ(next->created_at(), 20.0);
  EXPECT_FALSE(set->WithGears({{}}, 4, 20.0).ok());
  EXPECT_FALSE(set->WithGears({{1}, {2}}, 4, 20.0).ok());
}

// Joint and sparse gear sets: a grid of BATCHSIZE x SEQLEN gears, of which
// only some cells are compiled combinations.
std::vector<DimensionSpec> Grid() {
  return {{"BATCHSIZE", {1, 4, 16}, true, false}, {"SEQLEN", {128, 512, 2048}, false, false}};
}

TEST(GearSet, JointCellsRunOnTheCheapestCoveringCombinationWithinTheRatio) {
  auto set = GearSet::Create(
      Grid(), 1, 0, {GearScheme::kJoint, {{16, 2048}, {4, 512}, {16, 512}, {4, 512}}, 4.0});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->scheme(), GearScheme::kJoint);
  EXPECT_THAT(set->combinations(),
              ElementsAre(GearCombination{4, 512}, GearCombination{16, 512},
                          GearCombination{16, 2048}));  // sorted, de-duplicated
  auto cell = [&](int i, int j) -> std::string {
    const GearCombination* c = set->CombinationForCell(i, j);
    return c ? std::to_string((*c)[0]) + "x" + std::to_string((*c)[1]) : "uncompiled";
  };
  EXPECT_EQ(cell(1, 1), "4x512");       // a combination runs itself
  EXPECT_EQ(cell(1, 0), "4x512");       // 4x128 -> 4x512: 4 times the cell, within the ratio
  EXPECT_EQ(cell(0, 1), "4x512");       // 1x512 -> 4x512: 4 times
  EXPECT_EQ(cell(0, 0), "uncompiled");  // 1x128 -> 4x512 would be 16 times
  EXPECT_EQ(cell(2, 0), "16x512");      // 16x128 -> 16x512 (not 16x2048)
  EXPECT_EQ(cell(1, 2), "16x2048");     // 4x2048 -> 16x2048: 4 times
  EXPECT_EQ(cell(0, 2), "uncompiled");  // 1x2048 -> 16x2048: 16 times
  EXPECT_EQ(set->MapToGearIndex(0, 3), 1);
  EXPECT_EQ(set->MapToGearIndex(1, 2049), -1);

  // Without a ratio any covering combination serves.
  auto any = GearSet::Create(
      Grid(), 1, 0, {GearScheme::kJoint, {{16, 2048}}, std::numeric_limits<double>::infinity()});
  ASSERT_TRUE(any.ok());
  EXPECT_NE(any->CombinationForCell(0, 0), nullptr);
  EXPECT_THAT(any->DebugString(), HasSubstr("joint=[(16,2048)]"));
}

TEST(GearSet, SparseCellsRunOnlyOnThemselves) {
  auto set = GearSet::Create(Grid(), 1, 0, {GearScheme::kSparse, {{4, 512}}, 4.0});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->cover_ratio(), 1.0);  // sparse is joint with ratio 1
  ASSERT_NE(set->CombinationForCell(1, 1), nullptr);
  EXPECT_EQ(set->CombinationForCell(1, 0), nullptr);
  EXPECT_EQ(set->CombinationForCell(0, 1), nullptr);
  // A sparse set may compile nothing at all.
  EXPECT_TRUE(GearSet::Create(Grid(), 1, 0, {GearScheme::kSparse, {}, 1.0}).ok());
}

TEST(GearSet, CombinationsAreValidatedAndFollowTheGears) {
  auto message = [](CombinationSpec spec, std::vector<DimensionSpec> dims = Grid()) {
    return std::string(GearSet::Create(std::move(dims), 1, 0, std::move(spec)).status().message());
  };
  EXPECT_THAT(message({GearScheme::kJoint, {{4, 500}}, 4}), HasSubstr("combinations[0][1]: 500"));
  EXPECT_THAT(message({GearScheme::kJoint, {{4, 500}}, 4}), HasSubstr("a gear of SEQLEN"));
  EXPECT_EQ(message({GearScheme::kJoint, {}, 4}),
            "");  // nothing compiled: every cell runs uncompiled
  EXPECT_THAT(message({GearScheme::kJoint, {{4, 512}}, 0.5}), HasSubstr("cover_ratio: 0.5"));
  EXPECT_THAT(message({GearScheme::kIndependent, {{4, 512}}, 4}),
              HasSubstr("joint and sparse schemes only"));
  EXPECT_THAT(message({GearScheme::kJoint, {{4, 512}}, 4}, {{"SEQLEN", {512}}}),
              HasSubstr("exactly 2 dimensions"));
  EXPECT_THAT(std::string(ParseGearScheme("diagonal").status().message()),
              HasSubstr("scheme: \"diagonal\""));
  // Starting combinations: none named means every cell; named ones are kept.
  EXPECT_THAT(
      InitialCombinations({{"A", {1, 2}}, {"B", {8}}}, {GearScheme::kSparse, {}, 1}).combinations,
      ElementsAre(GearCombination{1, 8}, GearCombination{2, 8}));
  EXPECT_THAT(InitialCombinations({{"A", {1, 2}}, {"B", {8}}}, {GearScheme::kJoint, {{2, 8}}, 4})
                  .combinations,
              ElementsAre(GearCombination{2, 8}));
  EXPECT_TRUE(InitialCombinations({{"A", {1, 2}}, {"B", {8}}}, {}).combinations.empty());

  auto set = *GearSet::Create(Grid(), 1, 0, {GearScheme::kJoint, {{4, 512}, {16, 2048}}, 4.0});
  // New gear lists keep the combinations whose gears all remain.
  auto next = set.WithGears({{1, 16}, {128, 512, 2048}}, 2, 1.0);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_THAT(next->combinations(), ElementsAre(GearCombination{16, 2048}));
  EXPECT_EQ(next->cover_ratio(), 4.0);
  const std::vector<GearCombination> chosen = {{1, 128}};
  next = set.WithGears({{1, 16}, {128, 512, 2048}}, 2, 1.0, &chosen);
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(next->combinations(), ElementsAre(GearCombination{1, 128}));
}

}  // namespace
}  // namespace gearbox
