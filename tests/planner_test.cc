#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "gearbox/planners.h"

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

namespace gearbox {
namespace {

SizeHistogram Sizes(std::vector<int64_t> v) { return SizeHistogram::FromSizes(v); }

TEST(PlanMethods, UniformQuantileKMeansOnHandCheckedInputs) {
  const SizeHistogram h = Sizes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  // Uniform: 1 + 11 * i / 3, rounded up -> 5, 9, 12.
  EXPECT_THAT(*PlanGears(h, 3, PlanMethod::kUniform), ElementsAre(5, 9, 12));
  // Quantile: the 4th, 8th and 12th of 12 equal-weight sizes.
  EXPECT_THAT(*PlanGears(h, 3, PlanMethod::kQuantile), ElementsAre(4, 8, 12));
  // Two well separated clusters: k-means puts a gear at the top of each.
  const SizeHistogram two = Sizes({10, 11, 12, 10, 11, 100, 101, 102, 100});
  EXPECT_THAT(*PlanGears(two, 2, PlanMethod::kKMeans, 3), ElementsAre(12, 102));
  EXPECT_THAT(*PlanGears(two, 2, PlanMethod::kDp), ElementsAre(12, 102));
  EXPECT_TRUE(ParsePlanMethod("kmeans").ok());
  EXPECT_FALSE(ParsePlanMethod("median").ok());
  EXPECT_FALSE(PlanGears(h, 0, PlanMethod::kUniform).ok());
}

TEST(PlanMethods, DpIsNeverWorseThanTheRules) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> sizes;
    for (int i = 0; i < 300; ++i) sizes.push_back(1 + static_cast<int64_t>(rng() % 500));
    const SizeHistogram h = Sizes(sizes);
    const double dp = OptimalGears(h, 6, false)->padded;
    for (PlanMethod m : {PlanMethod::kUniform, PlanMethod::kQuantile, PlanMethod::kKMeans}) {
      auto g = PlanGears(h, 6, m, trial);
      ASSERT_TRUE(g.ok());
      EXPECT_LE(static_cast<int>(g->size()), 6);
      EXPECT_EQ(g->back(), h.values.back());
      EXPECT_LE(dp, *PaddedTotal(h, *g, false) + 1e-9) << PlanMethodName(m);
    }
  }
}

TEST(CostModel, BreakdownAndTheCheapestCount) {
  GearCostModel m;
  m.compile_seconds = 10;
  m.seconds_per_unit = 1;
  m.memory_fixed_bytes = 1024.0 * 1024 * 1024;  // 1 GiB per gear
  m.gamma = 0.5;
  const SizeHistogram h = Sizes({2, 4, 4});
  const int64_t one[] = {4};
  auto c = EvaluateCost(h, one, m);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->compile_seconds, 10);
  EXPECT_DOUBLE_EQ(c->padding_seconds, 2);  // size 2 runs as 4
  EXPECT_DOUBLE_EQ(c->memory_gib, 1);
  EXPECT_DOUBLE_EQ(c->total, 10 + 2 + 0.5);
  // A second gear (2) saves 2 s of padding but costs 10 s to compile: one gear wins.
  auto plan = PlanWithCostModel(h, 4, PlanMethod::kDp, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_THAT(plan->plan.gears, ElementsAre(4));
  // Cheap compiles flip it.
  m.compile_seconds = 0.1;
  m.gamma = 0;
  EXPECT_THAT(PlanWithCostModel(h, 4, PlanMethod::kDp, m)->plan.gears, ElementsAre(2, 4));
  // Quadratic runtime weighs long sizes more.
  m.runtime_exponent = 2;
  EXPECT_DOUBLE_EQ(EvaluateCost(h, one, m)->padding_seconds, 16 - 4);
  const int64_t short_gears[] = {2};
  EXPECT_FALSE(EvaluateCost(h, short_gears, m).ok());
  m.beta = 0;
  EXPECT_FALSE(ValidateCostModel(m).ok());
}

// A runtime's replan target (docs/POLICY.md): gears it holds cost their
// holding instead of a compile. Against every subset of the candidate
// positions (the sizes and the held gears within their range).
TEST(CostModel, HeldGearsCostTheirHoldingAndTheDpMatchesExhaustiveSearch) {
  GearCostModel m;
  m.compile_seconds = 3;
  m.seconds_per_unit = 0.2;
  m.runtime_exponent = 1.5;
  m.gamma = 0.5;
  m.memory_fixed_bytes = 1 << 28;
  const double held_cost = 1.0;
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    // Compiles cheaper and far dearer than holding: the DP stops adding
    // counts once the total rises, which must never miss the cheapest.
    m.compile_seconds = std::array<double, 3>{0.05, 3, 40}[trial % 3];
    std::vector<int64_t> sizes;
    for (int i = 0; i < 40; ++i) sizes.push_back(2 + static_cast<int64_t>(rng() % 14));
    const SizeHistogram h = Sizes(sizes);
    std::vector<int64_t> held;
    for (int64_t g = 1; g <= 20; ++g) {
      if (rng() % 4 == 0) held.push_back(g);
    }
    auto plan = PlanWithHeldGears(h, 16, m, held, held_cost);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<int64_t> candidates = h.values;
    for (int64_t g : held) {
      if (g >= h.values.front() && g <= h.values.back()) candidates.push_back(g);
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    auto total = [&](const std::vector<int64_t>& g) {
      const CostBreakdown c = *EvaluateCost(h, g, m);
      double t = c.total;
      for (int64_t x : g) {
        if (std::binary_search(held.begin(), held.end(), x)) t += held_cost - m.compile_seconds;
      }
      return t;
    };
    double best = 1e300;
    const size_t n = candidates.size();
    for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<int64_t> g;
      for (size_t i = 0; i + 1 < n; ++i) {
        if (mask & (1u << i)) g.push_back(candidates[i]);
      }
      g.push_back(candidates.back());
      best = std::min(best, total(g));
    }
    EXPECT_NEAR(plan->cost.total, best, 1e-9) << "trial " << trial;
    EXPECT_NEAR(plan->cost.total, total(plan->plan.gears), 1e-9) << "trial " << trial;
    // One DP for every budget plans what one DP per budget does.
    auto per_budget = PlanWithHeldGearsPerBudget(h, 16, m, held, held_cost);
    ASSERT_TRUE(per_budget.ok()) << per_budget.status();
    ASSERT_EQ(per_budget->size(), 16u);
    for (int b = 1; b <= 16; ++b) {
      EXPECT_EQ((*per_budget)[b - 1], PlanWithHeldGears(h, b, m, held, held_cost)->plan.gears)
          << "trial " << trial << ", budget " << b;
    }
  }
  EXPECT_THAT(std::string(PlanWithHeldGearsPerBudget(Sizes({4}), 0, m, {}, 1.0).status().message()),
              ::testing::HasSubstr("--budget"));
  // A held gear saving less than a compile but more than its holding stays;
  // without it held, the plan does without it.
  const SizeHistogram two = Sizes({4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2});
  GearCostModel cheap;
  cheap.compile_seconds = 3;
  cheap.seconds_per_unit = 0.2;  // gear 2 saves 5 x 2 x 0.2 = 2 s of padding
  const int64_t held_two[] = {2};
  EXPECT_THAT(PlanWithHeldGears(two, 4, cheap, held_two, 1.0)->plan.gears, ElementsAre(2, 4));
  EXPECT_THAT(PlanWithHeldGears(two, 4, cheap, {}, 1.0)->plan.gears, ElementsAre(4));
  EXPECT_THAT(PlanWithCostModel(two, 4, PlanMethod::kDp, cheap)->plan.gears, ElementsAre(4));
  // Held gears in any order, repeated, or outside the sizes' range; a bad holding cost is named.
  const int64_t unordered[] = {9, 2, 2, 1};
  EXPECT_THAT(PlanWithHeldGears(two, 4, cheap, unordered, 1.0)->plan.gears, ElementsAre(2, 4));
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto r = PlanWithHeldGears(two, 4, cheap, held_two, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("held_cost"));
  }
}

TEST(CostModel, DpMatchesExhaustiveSearchUnderTheModel) {
  GearCostModel m;
  m.compile_seconds = 3;
  m.seconds_per_unit = 0.2;
  m.runtime_exponent = 1.5;
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 30; ++trial) {
    // Cheap to dear compiles (the best count moves from many gears to one),
    // with and without memory per gear: the DP stops adding counts once the
    // total rises, which must never miss the cheapest.
    m.compile_seconds = std::array<double, 3>{0.05, 3, 40}[trial % 3];
    m.gamma = trial % 2 ? 1e9 : 0;
    m.memory_bytes_per_unit = trial % 2 ? 0.3 : 0;
    std::vector<int64_t> sizes;
    for (int i = 0; i < 40; ++i) sizes.push_back(1 + static_cast<int64_t>(rng() % 16));
    const SizeHistogram h = Sizes(sizes);
    auto plan = PlanWithCostModel(h, 16, PlanMethod::kDp, m);
    ASSERT_TRUE(plan.ok());
    // Exhaustive: every subset of the distinct sizes that contains the largest.
    double best = 1e300;
    const size_t n = h.values.size();
    for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
      std::vector<int64_t> g;
      for (size_t i = 0; i + 1 < n; ++i) {
        if (mask & (1u << i)) g.push_back(h.values[i]);
      }
      g.push_back(h.values.back());
      best = std::min(best, EvaluateCost(h, g, m)->total);
    }
    EXPECT_NEAR(plan->cost.total, best, 1e-9) << "trial " << trial;
  }
}

TEST(JointPlans, SchemesOnAHandCheckedGrid) {
  // Two clusters on the diagonal: (small, small) and (large, large).
  std::vector<Size2D> sizes = {{2, 10, 50}, {4, 12, 50}, {60, 900, 50}, {64, 1000, 50}};
  auto independent = PlanJoint(sizes, 2, GearScheme::kIndependent);
  auto joint = PlanJoint(sizes, 2, GearScheme::kJoint);
  auto sparse = PlanJoint(sizes, 2, GearScheme::kSparse);
  ASSERT_TRUE(independent.ok() && joint.ok() && sparse.ok());
  // With 2 graphs, the joint plan finds the two clusters' corners exactly.
  EXPECT_THAT(joint->graphs, ElementsAre(GearCombination{4, 12}, GearCombination{64, 1000}));
  EXPECT_LE(joint->padded, independent->padded);
  EXPECT_LE(static_cast<int>(independent->graphs.size()), 2);
  EXPECT_DOUBLE_EQ(joint->raw, 50.0 * (20 + 48 + 54000 + 64000));
  EXPECT_DOUBLE_EQ(joint->padded, 50.0 * (48 + 48 + 64000 + 64000));
  EXPECT_LE(static_cast<int>(sparse->graphs.size()), 2);
  EXPECT_GE(sparse->fallback_share, 0.0);
  EXPECT_FALSE(PlanJoint({}, 2, GearScheme::kJoint).ok());
  EXPECT_FALSE(PlanJoint(sizes, 0, GearScheme::kJoint).ok());
}

}  // namespace
}  // namespace gearbox
