// Joint and sparse gear sets end to end: the variant-shape window, the
// replan policy's choice of combinations, and the graphs of dropped
// combinations (seeds/001 §17.5.3).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <random>

#include "gearbox/runtime.h"
#include "src/stats/joint_window.h"

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JointWindow, BinsAreExactBelow64ThenSixteenPerOctave) {
  using internal::JointWindow;
  EXPECT_EQ(JointWindow::FineBin(1), 1u);
  EXPECT_EQ(JointWindow::FineBin(63), 63u);
  EXPECT_EQ(JointWindow::FineBin(64), 64u);
  EXPECT_EQ(JointWindow::FineBin(67), 64u);  // 64..67: one bin (width 4)
  EXPECT_EQ(JointWindow::FineBin(68), 65u);
  EXPECT_EQ(JointWindow::FineBin(128), 80u);
  EXPECT_EQ(JointWindow::FineBin(16383), 64u + 7 * 16 + 15);
  EXPECT_EQ(JointWindow::CoarseBin(1000), 9u);
}

TEST(JointWindow, WeightsDecayAndMemoryStaysBounded) {
  const auto geometry = internal::WindowGeometry::Make(300, 30, 150);
  internal::JointWindow window(geometry);
  // Two shapes at t = 5 (one slot), weighted as the runtime folds them.
  const int64_t slot = geometry.SlotIndex(5);
  ASSERT_TRUE(window.AddToSlot(slot, geometry.SlotWeight(5, slot) * 3, 8, 1000));
  ASSERT_TRUE(
      window.AddToSlot(slot, geometry.SlotWeight(5, slot) * 1, 8, 1010));  // same bin: max 1010
  std::vector<JointSize> sizes = window.Summarize(155, geometry);
  ASSERT_EQ(sizes.size(), 1u);
  EXPECT_EQ(sizes[0].a, 8);
  EXPECT_EQ(sizes[0].b, 1010);  // the bin's largest: a combination there covers both
  EXPECT_NEAR(sizes[0].weight, 4 * 0.5, 1e-9);  // one half-life later

  // A million distinct shapes in one slot: at most 2,048 fine bins plus the
  // power-of-two bins (64 x 64 at most) are kept, and no weight is lost.
  internal::JointWindow flood(geometry);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000000; ++i) {
    ASSERT_TRUE(flood.AddToSlot(slot, 1.0, 1 + static_cast<int64_t>(rng() % 100000),
                                1 + static_cast<int64_t>(rng() % 100000)));
  }
  sizes = flood.Summarize(5, geometry);
  EXPECT_LE(sizes.size(), internal::JointWindow::kFineBinsPerSlot + 64 * 64);
  double total = 0;
  for (const JointSize& s : sizes) total += s.weight;
  EXPECT_NEAR(total, 1e6 * std::exp(-geometry.lambda * (5 - geometry.SlotStart(slot))), 1e-3);
  EXPECT_LT(flood.MemoryBytes(), size_t{31} * 6144 * 96);
  // An event older than the window is refused.
  EXPECT_FALSE(flood.AddToSlot(slot - 40, 1.0, 1, 1));
}

struct Graph : GraphResource {
  explicit Graph(std::atomic<int>* counter) : live(counter) { live->fetch_add(1); }
  ~Graph() override { live->fetch_sub(1); }
  int64_t bytes() const override { return 1000; }
  std::atomic<int>* live;
};

struct JointFixture {
  ManualClock clock{0.0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;

  JointFixture(GearScheme scheme, std::vector<GearCombination> combinations,
               ReplanOptions replan = {}) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kReplan;
    o.replan = replan;
    o.combination_spec.scheme = scheme;
    o.combination_spec.combinations = std::move(combinations);
    o.clock = &clock;
    o.memory_probe = &probe;
    o.pool = &pool;
    o.start_worker = false;
    auto r = AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {4, 16}, true, false}, {"SEQLEN", {512, 2048}, false, false}}, std::move(o));
    EXPECT_TRUE(r.ok()) << r.status();
    runtime = *std::move(r);
  }
  void Request(int64_t batch, int64_t seq, double t) {
    const int64_t raw[] = {batch, seq};
    Plan plan;
    ASSERT_TRUE(MakePlan(*runtime->GetSnapshot(), raw, &plan).ok());
    runtime->RecordPlan(plan, t);
  }
  // Five minutes of heavy traffic, one request every 50 ms on each cell.
  void Steady(std::initializer_list<GearCombination> cells) {
    for (int i = 0; i < 6000; ++i) {
      for (const GearCombination& c : cells) Request(c[0], c[1], i * 0.05);
    }
  }
};

TEST(Joint, NeedsTheReplanPolicyAndTwoDimensions) {
  RuntimeOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  o.combination_spec.scheme = GearScheme::kJoint;
  o.start_worker = false;
  EXPECT_THAT(AdaptiveGearRuntime::Create({{"A", {1}}, {"B", {1}}}, o).status().message(),
              HasSubstr("scheme: \"joint\""));
  o.policy = UpdatePolicy::kReplan;
  EXPECT_THAT(AdaptiveGearRuntime::Create({{"A", {1}}}, o).status().message(),
              HasSubstr("exactly 2 dimensions"));
  auto two = AdaptiveGearRuntime::Create({{"A", {1, 2}}, {"B", {3}}}, o);
  ASSERT_TRUE(two.ok());
  // No combinations given: every cell of the initial gears.
  EXPECT_EQ((*two)->GetSnapshot()->combinations().size(), 2u);
}

TEST(Joint, DroppingACombinationReleasesItsGraphWhileItsGearsStay) {
  ReplanOptions replan;
  replan.min_gear_lifetime_seconds = 0;
  std::atomic<int> live{0};  // outlives the pool
  JointFixture f(GearScheme::kSparse, {{4, 512}, {16, 512}, {16, 2048}}, replan);
  std::map<GearCombination, GraphKey> key_of;
  for (const GearCombination& c : f.runtime->GetSnapshot()->combinations()) {
    f.pool.Register(std::make_shared<Graph>(&live));
    const auto keys = f.pool.ConsumeRecentKeys();
    key_of[c] = keys[0];
    EXPECT_TRUE(f.runtime->AttachCleanupKeys(c, keys));
  }
  EXPECT_EQ(live.load(), 3);
  // Heavy traffic at 16 x 2048 and 4 x 512 (exactly the gears, so the grid
  // stays); none at 16 x 512.
  for (int i = 0; i < 3000; ++i) {
    f.Request(16, 2048, i * 0.05);
    f.Request(4, 512, i * 0.05);
  }
  std::shared_ptr<GraphResource> held = f.pool.Acquire(key_of[{16, 512}]);  // a run in flight
  auto record = f.runtime->RunOnce(150);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_THAT(record->combinations_removed, ElementsAre(GearCombination{16, 512}));
  EXPECT_THAT(record->combinations_after,
              ElementsAre(GearCombination{4, 512}, GearCombination{16, 2048}));
  EXPECT_THAT(record->gears_after[0], ElementsAre(4, 16));  // the gears stay
  EXPECT_EQ(record->cleanup_keys, 1u);
  EXPECT_EQ(live.load(), 3);  // held by the run
  held.reset();
  EXPECT_EQ(live.load(), 2);
  // A late compile of the dropped combination is released at once.
  f.pool.Register(std::make_shared<Graph>(&live));
  const auto late = f.pool.ConsumeRecentKeys();
  EXPECT_FALSE(f.runtime->AttachCleanupKeys(GearCombination{16, 512}, late));
  EXPECT_EQ(live.load(), 2);
  const std::string json = UpdateRecordToJson(*record);
  EXPECT_THAT(json, HasSubstr("\"scheme\":\"sparse\""));
  EXPECT_THAT(json, HasSubstr("\"combinations_removed\":[[16,512]]"));
  EXPECT_THAT(json, HasSubstr("\"action\":\"drop\",\"combination\":[16,512]"));
}

TEST(Joint, TheReplanPolicyCompilesTheCombinationsTrafficPaysFor) {
  // Compiles cost 200 s: heavy traffic pays for one, a trickle does not.
  ReplanOptions dear;
  dear.cost.compile_seconds = 200;
  dear.max_uncompiled_share = 1;  // only what pays (the next test: the default)
  // Sparse, nothing compiled: heavy traffic on one cell pays for its graph,
  // a trickle on another does not (it keeps running uncompiled).
  JointFixture f(GearScheme::kSparse, std::vector<GearCombination>{{4, 2048}}, dear);
  f.Steady({{16, 2048}});
  for (int i = 0; i < 2; ++i) f.Request(4, 512, 100 + i * 100.0);
  // The trickle runs uncompiled meanwhile.
  {
    const int64_t raw[] = {4, 512};
    Plan plan;
    ASSERT_TRUE(MakePlan(*f.runtime->GetSnapshot(), raw, &plan).ok());
    EXPECT_TRUE(plan.any_uncompiled());
  }
  auto record = f.runtime->RunOnce(300);
  ASSERT_TRUE(record.ok());
  // (4, 2048) saw no traffic but was compiled less than
  // min_gear_lifetime_seconds ago: it stays.
  EXPECT_THAT(record->combinations_after,
              ElementsAre(GearCombination{4, 2048}, GearCombination{16, 2048}));
  bool compiled = false;
  for (const ChangeRecord& c : record->changes) {
    if (c.action == ChangeAction::kCompile) {
      compiled = true;
      EXPECT_EQ(c.combination, (GearCombination{16, 2048}));
      EXPECT_GE(c.gain_seconds, 1.5 * c.compile_seconds);
      EXPECT_EQ(c.dimension, "BATCHSIZE,SEQLEN");
    }
  }
  EXPECT_TRUE(compiled);
  ASSERT_FALSE(record->declined.empty());
  EXPECT_EQ(record->declined.back().action, ChangeAction::kCompile);
  EXPECT_THAT(record->declined.back().reason, HasSubstr("too little traffic for it"));

  // Joint: a trickle on the cell next to a compiled combination pads onto
  // it (within cover_ratio 4) instead of compiling its own; a cell 16 times
  // smaller than any combination runs uncompiled.
  JointFixture j(GearScheme::kJoint, {{16, 2048}}, dear);
  j.Steady({{16, 2048}});
  for (int i = 0; i < 2; ++i) j.Request(16, 512, 100 + i * 100.0);
  // Their events count for the cell's gear (512), not the combination's (2048).
  const WindowStats stats = j.runtime->BuildStatsSnapshot(300);
  EXPECT_EQ(stats.dimensions[1].gears[0].gear, 512);
  EXPECT_EQ(stats.dimensions[1].gears[0].sample_count, 2u);
  record = j.runtime->RunOnce(300);
  ASSERT_TRUE(record.ok());
  EXPECT_THAT(record->combinations_after, ElementsAre(GearCombination{16, 2048}));
  auto plan_of = [&](int64_t batch, int64_t seq) {
    const int64_t raw[] = {batch, seq};
    return *MakePlan(*j.runtime->GetSnapshot(), raw);
  };
  EXPECT_EQ(plan_of(16, 512).variant_group(0).gear[1], 2048);
  EXPECT_FALSE(plan_of(16, 512).any_uncompiled());
}

TEST(Joint, PastWhatPaysThinTrafficStillRunsOnAGraph) {
  // The trickle of the test above, with the default max_uncompiled_share
  // (0): it does not pay its compile, but it would run uncompiled, so it is
  // compiled, and the record says why. Where the share allows it (half the
  // window may run uncompiled) it is not.
  for (const double share : {0.0, 0.5}) {
    ReplanOptions dear;
    dear.cost.compile_seconds = 200;
    dear.max_uncompiled_share = share;
    JointFixture f(GearScheme::kSparse, std::vector<GearCombination>{{4, 2048}}, dear);
    f.Steady({{16, 2048}});
    for (int i = 0; i < 2; ++i) f.Request(4, 512, 100 + i * 100.0);
    const UpdateRecord record = *f.runtime->RunOnce(300);
    const bool compiled =
        std::any_of(record.combinations_after.begin(), record.combinations_after.end(),
                    [](const GearCombination& c) {
                      return c == GearCombination{4, 512};
                    });
    EXPECT_EQ(compiled, share == 0.0) << "max_uncompiled_share " << share;
    for (const ChangeRecord& c : record.changes) {
      if (c.combination != GearCombination{4, 512}) continue;
      EXPECT_EQ(c.action, ChangeAction::kCompile);
      EXPECT_THAT(c.reason, HasSubstr("above replan.max_uncompiled_share = 0"));
      EXPECT_LT(c.gain_seconds, c.compile_seconds);  // it does not pay
    }
  }
  // The option is validated.
  ReplanOptions bad;
  bad.max_uncompiled_share = 1.5;
  EXPECT_THAT(ValidateReplanOptions(bad).message(), HasSubstr("replan.max_uncompiled_share: 1.5"));
}

TEST(Joint, NoDropLeavesMoreThanTheShareUncompiled) {
  // A combination past its lifetime whose trickle loses less than holding a
  // graph is dropped, unless its variants would then run uncompiled beyond
  // max_uncompiled_share.
  for (const double share : {0.0, 1.0}) {
    ReplanOptions o;
    o.min_gear_lifetime_seconds = 0;
    o.max_uncompiled_share = share;
    JointFixture f(GearScheme::kSparse, {{16, 2048}, {4, 512}}, o);
    f.Steady({{16, 2048}});
    for (int i = 0; i < 2; ++i) f.Request(4, 512, 100 + i * 100.0);
    const UpdateRecord record = *f.runtime->RunOnce(300);
    if (share == 0.0) {
      EXPECT_THAT(record.combinations_after,
                  ElementsAre(GearCombination{4, 512}, GearCombination{16, 2048}));
      EXPECT_THAT(record.combinations_removed, ::testing::IsEmpty());  // not dropped and recompiled
      for (const ChangeRecord& c : record.changes) EXPECT_NE(c.action, ChangeAction::kDrop);
    } else {
      EXPECT_THAT(record.combinations_after, ElementsAre(GearCombination{16, 2048}));
      EXPECT_THAT(record.combinations_removed, ElementsAre(GearCombination{4, 512}));
    }
  }
}

TEST(Joint, TheOnlyGraphOfACellThatRunsCheaperUncompiledStays) {
  // A trickle that fills a fraction of its cell models cheaper uncompiled
  // (twice the run time at its exact size) than on the cell's graph: the
  // graph is no cell's best, but the cell's only one, and with the default
  // max_uncompiled_share it is neither dropped nor dropped and recompiled.
  ReplanOptions o;
  o.min_gear_lifetime_seconds = 0;
  o.cost.compile_seconds = 1e6;  // no gear moves: the grid stays
  JointFixture f(GearScheme::kSparse, {{16, 2048}, {4, 512}}, o);
  f.Steady({{16, 2048}});
  for (int i = 0; i < 30; ++i) f.Request(3, 300, 10 + i * 9.0);
  const UpdateRecord record = *f.runtime->RunOnce(300);
  EXPECT_THAT(record.combinations_after,
              ElementsAre(GearCombination{4, 512}, GearCombination{16, 2048}));
  for (const ChangeRecord& c : record.changes) {
    EXPECT_NE(c.combination, (GearCombination{4, 512})) << c.reason;
  }
}

TEST(Joint, AtTheCapAThinCombinationMakesRoomForTrafficWithoutAGraph) {
  // Three combinations at most, all compiled: heavy traffic on two, a
  // trickle on the third, and a new cell carrying heavy traffic. Keeping
  // the trickle's graph would keep the new traffic uncompiled: at the cap
  // the share does not hold a drop back.
  ReplanOptions o;
  o.min_gear_lifetime_seconds = 0;
  o.max_combinations = 3;
  JointFixture f(GearScheme::kSparse, {{16, 2048}, {4, 2048}, {4, 512}}, o);
  f.Steady({{16, 2048}, {4, 2048}, {16, 512}});
  for (int i = 0; i < 2; ++i) f.Request(4, 512, 100 + i * 100.0);
  const UpdateRecord record = *f.runtime->RunOnce(300);
  EXPECT_THAT(
      record.combinations_after,
      ElementsAre(GearCombination{4, 2048}, GearCombination{16, 512}, GearCombination{16, 2048}));
}

TEST(Joint, OfTwoEqualCombinationsServingACellOnlyOneGoes) {
  // (4, 2048) and (16, 512) cost the same on cell (4, 512): each loses
  // nothing if the other serves it, but dropping both at once would leave
  // the cell uncompiled. The one that is no cell's best goes; the other is
  // then all the cell has, and stays. ((16, 2048) keeps the gears.)
  ReplanOptions o;
  // A decode step's costs (a launch dominates: uncompiled runs cost more than
  // padding), but compiles so dear that the cell's own combination never pays.
  o.cost = {.compile_seconds = 1e6, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  o.min_gear_lifetime_seconds = 0;
  o.max_uncompiled_share = 1;
  JointFixture f(GearScheme::kJoint, {{4, 2048}, {16, 512}, {16, 2048}}, o);
  f.Steady({{4, 512}, {16, 2048}});
  const UpdateRecord record = *f.runtime->RunOnce(300);
  EXPECT_EQ(record.combinations_after.size(), 2u);
  ASSERT_EQ(record.combinations_removed.size(), 1u);
  for (const ChangeRecord& c : record.changes) {
    if (c.action == ChangeAction::kDrop) {
      EXPECT_EQ(c.reason, "no traffic of the window runs best on it");
    }
  }
  const int64_t raw[] = {4, 512};
  EXPECT_FALSE(MakePlan(*f.runtime->GetSnapshot(), raw)->any_uncompiled());
}

TEST(Joint, StationaryTrafficDoesNotFlap) {
  // Two hours of a steady mix over a grid of some 300 cells. Cells whose
  // gain sits near the threshold may still be compiled late (their noise
  // crosses it once), but no combination is compiled twice, none is dropped
  // within min_gear_lifetime_seconds of its compile, and after warm-up the
  // compiles are a small share of the set.
  JointFixture f(GearScheme::kJoint, {});
  std::mt19937_64 rng(5);
  double t = 0;
  std::map<GearCombination, std::vector<double>> compiled_at;
  int compiles_after_warmup = 0;
  size_t final_size = 0;
  for (int update = 1; update <= 120; ++update) {
    for (; t < 60.0 * update; t += 0.05) {
      const int64_t batch = 1 + static_cast<int64_t>(rng() % 16);
      const int64_t seq = rng() % 4 ? 300 + static_cast<int64_t>(rng() % 200)
                                    : 1500 + static_cast<int64_t>(rng() % 500);
      f.Request(batch, seq, t);
    }
    auto record = f.runtime->RunOnce(60.0 * update);
    ASSERT_TRUE(record.ok());
    for (const ChangeRecord& c : record->changes) {
      if (c.action == ChangeAction::kCompile) {
        compiled_at[c.combination].push_back(record->time);
        if (update > 10) ++compiles_after_warmup;
      }
      if (c.action == ChangeAction::kDrop && compiled_at.count(c.combination)) {
        EXPECT_GE(record->time - compiled_at[c.combination].back(),
                  ReplanOptions{}.min_gear_lifetime_seconds)
            << c.combination[0] << "x" << c.combination[1] << " dropped early";
      }
    }
    final_size = record->combinations_after.size();
  }
  for (const auto& [c, times] : compiled_at) {
    EXPECT_EQ(times.size(), 1u) << c[0] << "x" << c[1] << " compiled " << times.size() << " times";
  }
  EXPECT_GT(final_size, 50u);
  EXPECT_LT(compiles_after_warmup, static_cast<int>(final_size) / 2);
}

}  // namespace
}  // namespace gearbox
