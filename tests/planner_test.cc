#include "gearbox/planners.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace gearbox {
namespace {

using ::testing::ElementsAre;

// Brute force over every gear set of size k drawn from 1..max (small inputs).
double BruteForce(const SizeHistogram& h, int k, bool splittable, int64_t max_gear) {
  double best = 1e300;
  std::vector<int64_t> gears;
  std::function<void(int64_t)> rec = [&](int64_t from) {
    if (static_cast<int>(gears.size()) == k) {
      auto p = PaddedTotal(h, gears, splittable);
      if (p.ok()) best = std::min(best, *p);
      return;
    }
    for (int64_t g = from; g <= max_gear; ++g) {
      gears.push_back(g);
      rec(g + 1);
      gears.pop_back();
    }
  };
  rec(1);
  return best;
}

TEST(OptimalGears, HandCheckedNonSplittable) {
  // Sizes 1, 2, 3, 10 (x1 each), K = 2: best {3, 10}: padded 3+3+3+10 = 19.
  const SizeHistogram h = SizeHistogram::FromSizes(std::vector<int64_t>{1, 2, 3, 10});
  auto p = OptimalGears(h, 2, false);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->gears, ElementsAre(3, 10));
  EXPECT_DOUBLE_EQ(p->padded, 19.0);
  EXPECT_DOUBLE_EQ(p->raw, 16.0);
  EXPECT_NEAR(p->waste(), 19.0 / 16.0 - 1.0, 1e-12);
  // K >= distinct sizes: no padding.
  EXPECT_DOUBLE_EQ(OptimalGears(h, 9, false)->waste(), 0.0);
}

TEST(OptimalGears, CountsWeighTheChoice) {
  // Many 5s and a few 8s: with 2 gears {5, 8}; with 1 gear {8}.
  std::vector<int64_t> sizes(100, 5);
  sizes.push_back(8);
  const SizeHistogram h = SizeHistogram::FromSizes(sizes);
  EXPECT_THAT(OptimalGears(h, 1, false)->gears, ElementsAre(8));
  EXPECT_DOUBLE_EQ(OptimalGears(h, 1, false)->padded, 808.0);
  EXPECT_THAT(OptimalGears(h, 2, false)->gears, ElementsAre(5, 8));
}

TEST(OptimalGears, SplittingCanBeatCoveringTheMax) {
  // Sizes 60 and 100, one gear: 20 divides both, no padding at all.
  const SizeHistogram h = SizeHistogram::FromSizes(std::vector<int64_t>{60, 100});
  auto p = OptimalGears(h, 1, true);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->padded, 160.0);
  EXPECT_THAT(p->gears, ElementsAre(20));  // the largest gear with no padding
  EXPECT_DOUBLE_EQ(*PaddedTotal(h, p->gears, true), 160.0);
  // Not splittable: the only choice is {100}.
  EXPECT_DOUBLE_EQ(OptimalGears(h, 1, false)->padded, 200.0);
}

TEST(OptimalGears, MatchesBruteForceOnRandomInputs) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> sizes;
    const int n = 5 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) sizes.push_back(1 + static_cast<int64_t>(rng() % 24));
    const SizeHistogram h = SizeHistogram::FromSizes(sizes);
    const int k = 1 + static_cast<int>(rng() % 3);
    const bool splittable = trial % 2 == 0;
    auto p = OptimalGears(h, k, splittable);
    ASSERT_TRUE(p.ok());
    EXPECT_LE(static_cast<int>(p->gears.size()), k);
    EXPECT_DOUBLE_EQ(*PaddedTotal(h, p->gears, splittable), p->padded) << trial;
    EXPECT_DOUBLE_EQ(p->padded, BruteForce(h, k, splittable, 24)) << "trial " << trial;
  }
}

TEST(OptimalGears, RejectsBadInput) {
  EXPECT_FALSE(OptimalGears(SizeHistogram{}, 2, false).ok());
  EXPECT_FALSE(OptimalGears(SizeHistogram::FromSizes(std::vector<int64_t>{1}), 0, false).ok());
  const int64_t gears[] = {4};
  EXPECT_FALSE(PaddedTotal(SizeHistogram::FromSizes(std::vector<int64_t>{5}), gears, false).ok());
}

}  // namespace
}  // namespace gearbox
