#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "gearbox/replan_policy.h"
#include "gearbox/runtime.h"

namespace gearbox {
namespace {

using ::testing::Contains;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Replanned {
  ManualClock clock{0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> rt;
  std::mt19937_64 rng{7};
  double t = 0;

  explicit Replanned(std::vector<DimensionSpec> dims, ReplanOptions replan = {},
                     AdaptiveOptions adaptive = {}) {
    RuntimeOptions o;
    o.adaptive = adaptive;
    o.policy = UpdatePolicy::kReplan;
    o.replan = replan;
    o.clock = &clock;
    o.pool = &pool;
    o.memory_probe = &probe;
    o.start_worker = false;
    rt = *AdaptiveGearRuntime::Create(std::move(dims), o);
  }
  // `seconds` of traffic at `rate`/s with sizes from `draw`, then an update.
  template <typename Draw>
  UpdateRecord Run(double seconds, double rate, Draw draw) {
    const double end = t + seconds;
    for (; t < end; t += 1.0 / rate) {
      SnapshotRef snap = rt->GetSnapshot();
      const int64_t raw[] = {draw(rng)};
      Plan plan;
      if (MakePlan(*snap, raw, &plan).ok()) rt->RecordPlan(plan, t);
    }
    return *rt->RunOnce(end);
  }
  std::vector<int64_t> Gears() {
    SnapshotRef s = rt->GetSnapshot();
    return {s->gears(0).begin(), s->gears(0).end()};
  }
};

std::vector<DimensionSpec> Seq() { return {{"SEQLEN", *MakeTimesGears(1, 16384), false, false}}; }

// Prompt lengths: two bumps (a chat mix), all below 1,200.
int64_t Mixture(std::mt19937_64& rng) {
  std::normal_distribution<double> a(300, 40), b(900, 90);
  const double v = (rng() % 3 == 0) ? b(rng) : a(rng);
  return std::clamp<int64_t>(static_cast<int64_t>(v), 1, 1200);
}

TEST(Replan, PlansFromTheWindowAndCoversTheTail) {
  Replanned r(Seq());
  const UpdateRecord rec = r.Run(60, 20, Mixture);
  EXPECT_EQ(rec.policy, UpdatePolicy::kReplan);
  EXPECT_TRUE(rec.changed);
  ASSERT_EQ(rec.targets.size(), 1u);
  const std::vector<int64_t> g = r.Gears();
  EXPECT_EQ(g.back(), 16384);  // a non-splittable dimension keeps its largest gear
  // Above the planned gears no gap is wider than tail_ratio (2).
  const int64_t top = *std::upper_bound(g.begin(), g.end(), 1200);
  for (auto it = std::lower_bound(g.begin(), g.end(), top); std::next(it) != g.end(); ++it) {
    EXPECT_LE(*std::next(it), 2 * *it) << *it << " -> " << *std::next(it);
  }
  // The unused small powers of two are gone; the mixture got gears of its own.
  EXPECT_FALSE(std::binary_search(g.begin(), g.end(), 1));
  EXPECT_FALSE(std::binary_search(g.begin(), g.end(), 64));
  int planned = 0;
  for (int64_t x : g) planned += (x > 200 && x <= 1200 && (x & (x - 1)) != 0) ? 1 : 0;
  EXPECT_GE(planned, 3);
  // Every change is explained, with a gain above its compile cost.
  ASSERT_FALSE(rec.changes.empty());
  for (const ChangeRecord& c : rec.changes) {
    EXPECT_FALSE(c.reason.empty());
    if (c.action != ChangeAction::kRemove) {
      EXPECT_GE(c.gain_seconds, 1.5 * c.compile_seconds - 1e-9);
    }
  }
  const std::string json = UpdateRecordToJson(rec);
  EXPECT_THAT(json, HasSubstr("\"policy\":\"replan\""));
  EXPECT_THAT(json, HasSubstr("\"targets\""));
}

TEST(Replan, StationaryTrafficSettlesWithoutChurn) {
  Replanned r(Seq());
  std::map<int64_t, int> added, removed;
  int changes_after_warmup = 0;
  for (int update = 1; update <= 120; ++update) {  // two hours, an update a minute
    const UpdateRecord rec = r.Run(60, 20, Mixture);
    for (int64_t g : rec.added[0]) ++added[g];
    for (int64_t g : rec.removed[0]) ++removed[g];
    if (update > 10 && rec.changed) ++changes_after_warmup;
  }
  EXPECT_LE(changes_after_warmup, 1);
  for (const auto& [g, n] : added) {
    EXPECT_LE(n, 1) << "gear " << g << " added " << n << " times";
    EXPECT_FALSE(removed.count(g) && n > 0 && removed[g] > 0)
        << "gear " << g << " added and removed";
  }
}

TEST(Replan, SmallGainsDoNotPayForACompile) {
  ReplanOptions o;
  o.cost.compile_seconds = 1e6;  // compiles cost more than any padding they save
  Replanned r(Seq(), o);
  const UpdateRecord rec = r.Run(120, 20, Mixture);
  EXPECT_TRUE(rec.added[0].empty());
  bool declined_for_cost = false;
  for (const ChangeRecord& c : rec.declined) {
    declined_for_cost |= c.reason.find("hysteresis band") != std::string::npos;
  }
  EXPECT_TRUE(declined_for_cost);
}

TEST(Replan, AMeasuredCostModelReplacesTheConfiguredOne) {
  // The configured compile cost is cheap; measured compiles are dear: the
  // next update prices gears by the measured cost and adds none.
  Replanned r(Seq());
  GearCostModel measured = r.rt->ReplanCostModel();
  EXPECT_EQ(measured.compile_seconds, ReplanOptions{}.cost.compile_seconds);
  measured.compile_seconds = 1e6;
  ASSERT_TRUE(r.rt->SetReplanCostModel(measured).ok());
  EXPECT_EQ(r.rt->ReplanCostModel().compile_seconds, 1e6);
  const UpdateRecord rec = r.Run(120, 20, Mixture);
  EXPECT_TRUE(rec.added[0].empty());
  // The same traffic with the configured cost adds gears.
  Replanned configured(Seq());
  EXPECT_FALSE(configured.Run(120, 20, Mixture).added[0].empty());
}

TEST(Replan, ABadCostModelIsRefusedAndChangesNothing) {
  Replanned r(Seq());
  GearCostModel bad = r.rt->ReplanCostModel();
  bad.compile_seconds = -1;
  const absl::Status s = r.rt->SetReplanCostModel(bad);
  EXPECT_THAT(s.message(), HasSubstr("compile_seconds"));
  EXPECT_EQ(r.rt->ReplanCostModel().compile_seconds, ReplanOptions{}.cost.compile_seconds);
}

TEST(Replan, ReleaseListenersSeeTheirUpdateInLastUpdate) {
  Replanned r(Seq());
  uint64_t seen = 0;
  r.rt->AddReleaseListener([&](std::span<const GraphKey>) {
    const std::optional<UpdateRecord> last = r.rt->last_update();
    seen = last.has_value() ? last->sequence : 0;
  });
  const UpdateRecord rec = r.Run(120, 20, Mixture);
  EXPECT_EQ(seen, rec.sequence);
  const UpdateRecord manual = *r.rt->CommitUpdate({{1, 2, 16384}}, r.t);
  EXPECT_EQ(seen, manual.sequence);
}

TEST(Replan, TooLittleTrafficChangesNothing) {
  Replanned r(Seq());
  const UpdateRecord rec = r.Run(10, 0.5, Mixture);  // 5 requests
  EXPECT_FALSE(rec.changed);
  ASSERT_FALSE(rec.declined.empty());
  EXPECT_THAT(rec.declined[0].reason, HasSubstr("too little traffic"));
}

TEST(Replan, MemoryPressureAllowsNoNetGrowth) {
  Replanned r({{"SEQLEN", {1200, 16384}, false, false}});
  r.probe.Set(0.99);
  const UpdateRecord rec = r.Run(120, 20, Mixture);
  EXPECT_TRUE(rec.memory.high);
  EXPECT_LE(rec.gears_after[0].size(), 2u);
}

TEST(Replan, MemoryPressureNeverGivesBackTheLastGears) {
  // Found by runtime_fuzz: under pressure the policy gave back gears past
  // the count floor, emptied a dimension and then read past its end.
  AdaptiveOptions a;
  a.min_gear_count_per_type = 2;
  Replanned r({{"BATCHSIZE", {1, 2, 4, 8}, true, false}}, {}, a);
  r.probe.Set(0.99);
  auto small = [](std::mt19937_64& rng) { return 1 + static_cast<int64_t>(rng() % 3); };
  for (int i = 0; i < 6; ++i) {
    const UpdateRecord rec = r.Run(60, 20, small);
    EXPECT_TRUE(rec.memory.high);
    EXPECT_GE(rec.gears_after[0].size(), 2u);
  }
}

TEST(Replan, PolicyAddedGearsLiveAtLeastTheirLifetime) {
  ReplanOptions o;
  o.min_gear_lifetime_seconds = 3600;
  Replanned r(Seq(), o);
  r.Run(300, 20, Mixture);
  const std::vector<int64_t> planned = r.Gears();
  // Most traffic moves to much longer prompts; the gears planned for the old
  // mix still see a little of it, so they stay for their lifetime (a gear
  // that sees no traffic at all may go: removing it is not churn).
  auto longer = [](std::mt19937_64& rng) {
    return rng() % 10 == 0 ? Mixture(rng) : 3000 + static_cast<int64_t>(rng() % 1000);
  };
  int removed_with_traffic = 0, removed_idle = 0;
  for (int i = 0; i < 10; ++i) {
    const UpdateRecord rec = r.Run(60, 20, longer);
    for (int64_t g : rec.removed[0]) {
      // Gears the policy added (the initial powers of two are not protected).
      if (!std::binary_search(planned.begin(), planned.end(), g) || (g & (g - 1)) == 0) continue;
      for (const GearRecord& gr : rec.gears) {
        if (gr.gear != g) continue;
        (gr.samples > 0 ? removed_with_traffic : removed_idle) += 1;
      }
    }
  }
  EXPECT_EQ(removed_with_traffic, 0);
  const std::vector<int64_t> now = r.Gears();
  int kept = 0;
  for (int64_t g : planned) {
    if (g > 250 && g <= 1200 && (g & (g - 1)) != 0)
      kept += std::binary_search(now.begin(), now.end(), g);
  }
  EXPECT_GT(kept, 5);
  // ... and new gears follow the new traffic.
  EXPECT_TRUE(std::any_of(now.begin(), now.end(), [](int64_t g) { return g > 3000 && g < 4096; }));
}

TEST(Replan, RespectsTheCountCap) {
  AdaptiveOptions a;
  a.max_gears_per_type = 16;
  Replanned r(Seq(), {}, a);
  auto wide = [](std::mt19937_64& rng) { return 1 + static_cast<int64_t>(rng() % 16000); };
  for (int i = 0; i < 5; ++i) {
    const UpdateRecord rec = r.Run(60, 50, wide);
    EXPECT_LE(rec.gears_after[0].size(), 16u);
  }
}

TEST(Replan, SplittableDimensionsMayMoveTheirLargestGear) {
  Replanned r({{"BATCHSIZE", {1, 2, 4, 8, 16, 32, 64}, true, false}});
  auto small = [](std::mt19937_64& rng) { return 1 + static_cast<int64_t>(rng() % 6); };
  // Enough traffic that the planned gears pay for their compiles.
  r.Run(120, 400, small);
  r.Run(60, 400, small);
  const std::vector<int64_t> g = r.Gears();
  EXPECT_LT(g.back(), 64);
  EXPECT_GE(g.back(), 6);  // still covers every size: no shrinking into chunks
}

// Two dimensions: a unit of batch padding costs a whole row of the sequence
// dimension, and a batch gear compiles one graph per sequence gear in use.
struct TwoDims {
  std::vector<int64_t> seq_gears;
  std::vector<int64_t> seq_sizes;  // drawn uniformly
};
UpdateRecord RunTwoDims(const TwoDims& c, std::vector<int64_t>* batch_gears) {
  ManualClock clock{0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  RuntimeOptions o;
  o.policy = UpdatePolicy::kReplan;
  o.clock = &clock;
  o.pool = &pool;
  o.memory_probe = &probe;
  o.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create(
      {{"BATCHSIZE", *MakeTimesGears(1, 64), true, false}, {"SEQLEN", c.seq_gears, false, false}},
      o);
  std::mt19937_64 rng(3);
  for (double t = 0; t < 300; t += 0.2) {
    SnapshotRef snap = rt->GetSnapshot();
    const int64_t raw[] = {1 + static_cast<int64_t>(rng() % 40),
                           c.seq_sizes[rng() % c.seq_sizes.size()]};
    Plan plan;
    EXPECT_TRUE(MakePlan(*snap, raw, &plan).ok());
    rt->RecordPlan(plan, t);
  }
  UpdateRecord rec = *rt->RunOnce(300);
  SnapshotRef snap = rt->GetSnapshot();
  batch_gears->assign(snap->gears(0).begin(), snap->gears(0).end());
  return rec;
}

TEST(Replan, OtherDimensionsScaleTheCostOfPaddingAndCompiles) {
  std::vector<int64_t> short_rows, long_rows, four_seq;
  // Batch padding on rows of one element saves too little to pay for a
  // compile; on rows of 2,048 the same padding is worth 2,048 times more.
  const UpdateRecord a = RunTwoDims({{1}, {1}}, &short_rows);
  const UpdateRecord b = RunTwoDims({{2048}, {2000}}, &long_rows);
  EXPECT_TRUE(a.added[0].empty()) << UpdateRecordToJson(a);
  EXPECT_GE(b.added[0].size(), 3u) << UpdateRecordToJson(b);
  for (const ChangeRecord& ch : b.changes) {
    if (ch.dimension == "BATCHSIZE" && ch.action == ChangeAction::kAdd) {
      EXPECT_DOUBLE_EQ(ch.compile_seconds, 2.0);
    }
  }
  // With four sequence gears in use, each new batch gear means four graphs.
  const UpdateRecord c = RunTwoDims({{512, 1024, 2048, 4096}, {500, 1000, 2000, 4000}}, &four_seq);
  bool saw_batch_change = false;
  for (const ChangeRecord& ch : c.changes) {
    if (ch.dimension == "BATCHSIZE" && ch.action != ChangeAction::kRemove) {
      saw_batch_change = true;
      // "add"/"replace": one gear, 4 graphs of 2 s; "replan": a multiple.
      EXPECT_GT(ch.compile_seconds, 0.0);
      EXPECT_NEAR(std::fmod(ch.compile_seconds, 8.0), 0.0, 1e-9) << UpdateRecordToJson(c);
    }
  }
  EXPECT_TRUE(saw_batch_change) << UpdateRecordToJson(c);
}

TEST(Replan, OptionsAreValidated) {
  ReplanOptions o;
  o.min_gain_ratio = 0.5;
  EXPECT_THAT(ValidateReplanOptions(o).message(), HasSubstr("replan.min_gain_ratio: 0.5"));
  o = {};
  o.tail_ratio = 1;
  EXPECT_THAT(ValidateReplanOptions(o).message(), HasSubstr("replan.tail_ratio"));
  o = {};
  o.cost.runtime_exponent = 9;
  EXPECT_THAT(ValidateReplanOptions(o).message(), HasSubstr("runtime_exponent"));
  o = {};
  o.gain_confidence_sigmas = -1;
  EXPECT_THAT(ValidateReplanOptions(o).message(),
              HasSubstr("replan.gain_confidence_sigmas: -1 is not allowed; a finite number >= 0"));
  RuntimeOptions ro;
  ro.policy = UpdatePolicy::kReplan;
  ro.replan.payback_seconds = -1;
  ro.start_worker = false;
  EXPECT_FALSE(AdaptiveGearRuntime::Create(Seq(), ro).ok());
}

// ---- The graph budget (ReplanOptions::max_graphs) ----

// Two dimensions (decode steps: batch x context) on the TIMES ladders,
// 9 x 15 = 135 cells, every one of which may compile.
struct Replanned2D {
  ManualClock clock{0};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> rt;
  std::mt19937_64 rng{11};
  double t = 0;

  Replanned2D(ReplanOptions replan, GearScheme scheme) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kReplan;
    o.replan = replan;
    o.combination_spec.scheme = scheme;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", *MakeTimesGears(1, 256), true, false},
                                       {"SEQLEN", *MakeTimesGears(1, 16384), false, false}},
                                      o);
  }
  UpdateRecord Run(double seconds, double rate) {
    std::uniform_int_distribution<int64_t> batch(1, 200);
    std::lognormal_distribution<double> context(7.0, 0.8);
    const double end = t + seconds;
    for (; t < end; t += 1.0 / rate) {
      SnapshotRef snap = rt->GetSnapshot();
      const int64_t raw[] = {batch(rng),
                             std::clamp<int64_t>(static_cast<int64_t>(context(rng)), 1, 16384)};
      Plan plan;
      if (MakePlan(*snap, raw, &plan).ok()) rt->RecordPlan(plan, t);
    }
    return *rt->RunOnce(end);
  }
};

TEST(ReplanGraphBudget, TwoIndependentDimensionsStayWithinMaxGraphs) {
  ReplanOptions o;
  o.max_graphs = 40;
  o.cost = {.compile_seconds = 0.5, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  Replanned2D r(o, GearScheme::kIndependent);
  double product_sum = 0;
  for (int update = 1; update <= 30; ++update) {
    const UpdateRecord rec = r.Run(60, 20);
    const double product = static_cast<double>(rec.gears_after[0].size()) *
                           static_cast<double>(rec.gears_after[1].size());
    // The initial 135 cells shrink to the budget at the first update.
    EXPECT_LE(product, 40) << "update " << update;
    product_sum += product;
  }
  // Not by giving every gear away: the budget is used.
  EXPECT_GE(product_sum / 30, 20);
}

TEST(ReplanGraphBudget, ADimensionWithinItsShareNeverGivesWayToOneAboveIts) {
  // Stationary traffic after the first updates: once within the budget the
  // policy holds still (no gear traded between the dimensions each update).
  ReplanOptions o;
  o.max_graphs = 40;
  o.cost = {.compile_seconds = 0.5, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  Replanned2D r(o, GearScheme::kIndependent);
  int changed_after_warmup = 0;
  for (int update = 1; update <= 40; ++update) {
    const UpdateRecord rec = r.Run(60, 20);
    if (update > 15 && rec.changed) ++changed_after_warmup;
  }
  EXPECT_LE(changed_after_warmup, 2);
}

TEST(ReplanGraphBudget, OneDimensionHoldsAtMostMaxGraphsGears) {
  ReplanOptions o;
  o.max_graphs = 6;
  o.cost.compile_seconds = 1e-3;  // every gear pays: only the budget bounds them
  Replanned r(Seq(), o);
  for (int update = 1; update <= 5; ++update) {
    const UpdateRecord rec = r.Run(60, 20, Mixture);
    EXPECT_LE(rec.gears_after[0].size(), 6u) << "update " << update;
    EXPECT_LE(rec.targets[0].size(), 6u);
  }
  // The largest gear stays (the dimension is not splittable).
  EXPECT_EQ(r.Gears().back(), 16384);
}

TEST(ReplanGraphBudget, ASparseGridHoldsNoMoreCellsThanMaxGraphs) {
  // Sparse runs a cell only on its own graph: a grid of more cells than it
  // may compile would run the rest uncompiled, so its grid is bounded as an
  // independent set's is.
  ReplanOptions o;
  o.max_graphs = 40;
  o.cost = {.compile_seconds = 0.5, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  Replanned2D r(o, GearScheme::kSparse);
  for (int update = 1; update <= 10; ++update) {
    const UpdateRecord rec = r.Run(60, 20);
    EXPECT_LE(rec.gears_after[0].size() * rec.gears_after[1].size(), 40u) << "update " << update;
    EXPECT_LE(rec.combinations_after.size(), 40u);
  }
}

TEST(ReplanGraphBudget, JointCombinationsStayWithinMaxGraphs) {
  ReplanOptions o;
  o.max_graphs = 12;
  o.cost = {.compile_seconds = 1e-3, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  Replanned2D r(o, GearScheme::kJoint);
  for (int update = 1; update <= 10; ++update) {
    const UpdateRecord rec = r.Run(60, 20);
    EXPECT_LE(rec.combinations_after.size(), 12u) << "update " << update;
  }
  EXPECT_LE(r.rt->GetSnapshot()->combinations().size(), 12u);
}

// ---- Between updates: the combinations (combination_interval_seconds) ----

// A decode step's cost (data/configs/decode_times.json).
ReplanOptions DecodeCosts() {
  ReplanOptions o;
  o.cost = {.compile_seconds = 0.5, .seconds_per_unit = 1.1e-7, .seconds_per_run = 0.012};
  return o;
}

TEST(ReplanCombinations, BetweenUpdatesACellWithTrafficIsCompiledAndNoGearMoves) {
  ReplanOptions o = DecodeCosts();
  o.max_graphs = 40;
  o.combination_interval_seconds = 10;
  o.max_uncompiled_share = 1;  // only what pays: some cell of the grid stays uncompiled
  Replanned2D r(o, GearScheme::kSparse);
  EXPECT_EQ(r.rt->CheckIntervalSeconds(), 10.0);  // warmup_check_seconds, before the first update
  const UpdateRecord first = r.Run(60, 20);
  ASSERT_EQ(first.trigger, UpdateTrigger::kManual);
  // Sparse: the worker now checks every 10 s (check_interval_seconds is 60),
  // but nothing has run off its cell's combination since the update.
  EXPECT_EQ(r.rt->CheckIntervalSeconds(), 10.0);
  EXPECT_EQ(r.rt->LookIntervalSeconds(), 10.0);
  EXPECT_EQ(r.rt->CheckTrigger(60 + 10), std::nullopt);
  EXPECT_EQ(r.rt->CheckTrigger(60 + 60), UpdateTrigger::kInterval);
  // A cell of the grid that no combination serves starts carrying traffic.
  SnapshotRef snap = r.rt->GetSnapshot();
  const std::vector<GearCombination>& compiled = snap->combinations();
  std::optional<GearCombination> idle;
  for (int64_t b : snap->gears(0)) {
    for (int64_t s : snap->gears(1)) {
      const bool has =
          std::find(compiled.begin(), compiled.end(), GearCombination{b, s}) != compiled.end();
      if (!has && b >= 8 && s >= 256 && !idle) idle = GearCombination{b, s};
    }
  }
  ASSERT_TRUE(idle.has_value()) << "every cell of the grid is compiled";
  Plan plan;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(MakePlan(*snap, *idle, &plan).ok());
    EXPECT_TRUE(plan.any_uncompiled());
    EXPECT_TRUE(plan.any_off_cell());
    r.rt->RecordPlan(plan, 60 + i * 0.05);
  }
  EXPECT_EQ(r.rt->CheckTrigger(60 + 5), std::nullopt);  // at most one look per interval
  EXPECT_EQ(r.rt->CheckTrigger(60 + 10), UpdateTrigger::kCombinations);
  const UpdateRecord look = *r.rt->RunOnce(70, UpdateTrigger::kCombinations);
  EXPECT_EQ(look.trigger, UpdateTrigger::kCombinations);
  EXPECT_THAT(look.added, Each(IsEmpty()));  // the grid stays
  EXPECT_THAT(look.removed, Each(IsEmpty()));
  EXPECT_THAT(look.combinations_added, Contains(*idle));
  ASSERT_TRUE(MakePlan(*r.rt->GetSnapshot(), *idle, &plan).ok());
  EXPECT_FALSE(plan.any_uncompiled());
  EXPECT_FALSE(plan.any_off_cell());
  // The look left the next update where it was; the next look waits for a
  // variant off its cell again (an event may say so: GearEvent::off_cell).
  EXPECT_EQ(r.rt->CheckTrigger(80), std::nullopt);
  GearEvent off{.time = 71, .count = 1, .raw = {1, 1}, .gear = {1, 1}, .off_cell = true};
  ASSERT_TRUE(r.rt->RecordEvent(off).ok());
  EXPECT_EQ(r.rt->CheckTrigger(75), std::nullopt);
  EXPECT_EQ(r.rt->CheckTrigger(80), UpdateTrigger::kCombinations);
  EXPECT_EQ(r.rt->CheckTrigger(120), UpdateTrigger::kInterval);
}

TEST(ReplanCombinations, UnderMemoryPressureALookIsAWholeUpdate) {
  // A compile ran out of memory since the last update: the look runs the
  // whole update (room is made as for any memory trigger) and says so.
  ReplanOptions o = DecodeCosts();
  o.combination_interval_seconds = 10;
  Replanned2D r(o, GearScheme::kSparse);
  r.Run(60, 20);
  const std::vector<int64_t> gears = {r.rt->GetSnapshot()->gears(0).back(),
                                      r.rt->GetSnapshot()->gears(1).back()};
  r.rt->ReportOutOfMemory(gears, std::nullopt);
  const UpdateRecord rec = *r.rt->RunOnce(70, UpdateTrigger::kCombinations);
  EXPECT_EQ(rec.trigger, UpdateTrigger::kMemory);
  EXPECT_EQ(rec.out_of_memory.size(), 1u);
  EXPECT_TRUE(rec.memory.high);
  // A whole update: the next one is due a full interval after it (and a
  // look before it once a variant runs off its cell).
  GearEvent off{.time = 71, .count = 1, .raw = {1, 1}, .gear = {1, 1}, .off_cell = true};
  ASSERT_TRUE(r.rt->RecordEvent(off).ok());
  EXPECT_EQ(r.rt->CheckTrigger(125), UpdateTrigger::kCombinations);
  EXPECT_EQ(r.rt->CheckTrigger(130), UpdateTrigger::kInterval);
}

TEST(ReplanCombinations, IndependentSetsAndAZeroIntervalNeverLook) {
  ReplanOptions o = DecodeCosts();
  Replanned2D independent(o, GearScheme::kIndependent);
  independent.Run(60, 20);
  EXPECT_EQ(independent.rt->CheckIntervalSeconds(), 60.0);
  EXPECT_EQ(independent.rt->LookIntervalSeconds(), 0.0);
  EXPECT_EQ(independent.rt->CheckTrigger(70), std::nullopt);
  o.combination_interval_seconds = 0;
  Replanned2D off(o, GearScheme::kJoint);
  off.Run(60, 20);
  EXPECT_EQ(off.rt->CheckIntervalSeconds(), 60.0);
  EXPECT_EQ(off.rt->CheckTrigger(110), std::nullopt);
  EXPECT_EQ(off.rt->CheckTrigger(120), UpdateTrigger::kInterval);
  // The option is validated: 0 or at least a millisecond.
  o.combination_interval_seconds = 1e-9;
  EXPECT_THAT(ValidateReplanOptions(o).message(),
              HasSubstr("replan.combination_interval_seconds: 1e-09"));
}

}  // namespace
}  // namespace gearbox
