// GearMemoryModel: the fit recovers known coefficients, predicts gears it
// has not seen, refuses to predict from too few points, and names the field
// and value of every bad input.
#include "gearbox/memory_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace gearbox {
namespace {

using ::testing::HasSubstr;

GearMemoryModel Make(int dims, int quadratic) {
  auto m = GearMemoryModel::Create({.num_dimensions = dims, .quadratic_dimension = quadratic});
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

TEST(GearMemoryModel, AffineInTheProductRecoversItsCoefficients) {
  GearMemoryModel m = Make(2, -1);
  auto bytes = [](int64_t b, int64_t s) { return 4096 + 2816 * b * s; };
  for (auto [b, s] : std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {2, 16}, {4, 4}}) {
    const int64_t g[] = {b, s};
    ASSERT_TRUE(m.Observe(g, bytes(b, s)).ok());
  }
  auto c = m.Coefficients();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_NEAR((*c)[0], 4096, 1e-6 * 4096);
  EXPECT_NEAR((*c)[1], 2816, 1e-9 * 2816);
  const int64_t unseen[] = {8, 128};
  EXPECT_EQ(*m.Predict(unseen), bytes(8, 128));
}

TEST(GearMemoryModel, QuadraticTermFollowsTheNamedDimension) {
  GearMemoryModel m = Make(2, 1);  // P * seq: attention scores
  auto bytes = [](int64_t b, int64_t s) { return 640 + 2816 * b * s + 16 * b * s * s; };
  for (auto [b, s] : std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {1, 16}, {2, 8}, {1, 32}}) {
    const int64_t g[] = {b, s};
    ASSERT_TRUE(m.Observe(g, bytes(b, s)).ok());
  }
  for (auto [b, s] : std::vector<std::pair<int64_t, int64_t>>{{4, 512}, {16, 64}, {1, 1}}) {
    const int64_t g[] = {b, s};
    auto p = m.Predict(g);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NEAR(static_cast<double>(*p), static_cast<double>(bytes(b, s)),
                1e-6 * static_cast<double>(bytes(b, s)))
        << b << "x" << s;
  }
}

TEST(GearMemoryModel, ObservingAGearAgainReplacesItsPoint) {
  GearMemoryModel m = Make(1, -1);
  const int64_t a[] = {10}, b[] = {20}, c[] = {40};
  ASSERT_TRUE(m.Observe(a, 999).ok());
  ASSERT_TRUE(m.Observe(a, 100).ok());  // replaces 999
  ASSERT_TRUE(m.Observe(b, 200).ok());
  EXPECT_EQ(m.points(), 2u);
  EXPECT_EQ(*m.Predict(c), 400);
}

TEST(GearMemoryModel, TooFewOrCollinearPointsDetermineNoFit) {
  GearMemoryModel m = Make(2, 1);
  const int64_t g[] = {1, 8};
  EXPECT_EQ(m.Predict(g).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.Observe(g, 100).ok());
  const int64_t g2[] = {2, 8}, g3[] = {4, 8};
  ASSERT_TRUE(m.Observe(g2, 200).ok());
  EXPECT_THAT(m.Predict(g).status().message(), HasSubstr("needs at least 3"));
  // Three points, all at seq 8: P and P * seq are proportional, no fit.
  ASSERT_TRUE(m.Observe(g3, 400).ok());
  EXPECT_EQ(m.Predict(g).status().code(), absl::StatusCode::kFailedPrecondition);
  const int64_t g4[] = {1, 16};
  ASSERT_TRUE(m.Observe(g4, 300).ok());
  EXPECT_TRUE(m.Predict(g).ok());
}

TEST(GearMemoryModel, PredictionsAreNeverNegative) {
  GearMemoryModel m = Make(1, -1);
  const int64_t a[] = {100}, b[] = {200}, tiny[] = {1};
  ASSERT_TRUE(m.Observe(a, 100).ok());
  ASSERT_TRUE(m.Observe(b, 10000).ok());  // steep: the line crosses 0 near 99
  EXPECT_EQ(*m.Predict(tiny), 0);
}

TEST(GearMemoryModel, BadInputNamesTheFieldAndValue) {
  EXPECT_THAT(GearMemoryModel::Create({.num_dimensions = 0}).status().message(),
              HasSubstr("num_dimensions: 0 is not allowed"));
  EXPECT_THAT(GearMemoryModel::Create({.num_dimensions = 9}).status().message(),
              HasSubstr("num_dimensions: 9"));
  EXPECT_THAT(
      GearMemoryModel::Create({.num_dimensions = 2, .quadratic_dimension = 2}).status().message(),
      HasSubstr("quadratic_dimension: 2 is not allowed; -1 (none) or a dimension in [0, 2)"));
  GearMemoryModel m = Make(2, -1);
  const int64_t one[] = {4}, zero[] = {4, 0}, ok[] = {4, 4};
  EXPECT_THAT(m.Observe(one, 10).message(), HasSubstr("gears: 1 sizes is not allowed"));
  EXPECT_THAT(m.Observe(zero, 10).message(), HasSubstr("gears[1]: 0 is not allowed"));
  EXPECT_THAT(m.Observe(ok, -5).message(), HasSubstr("bytes: -5 is not allowed"));
  EXPECT_THAT(m.Predict(zero).status().message(), HasSubstr("gears[1]: 0"));
  EXPECT_EQ(m.points(), 0u);  // nothing recorded by the bad calls
}

}  // namespace
}  // namespace gearbox
