#include "gearbox/replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gearbox/executed_replay.h"
#include "gearbox/replay_summary.h"
#include "nlohmann/json.hpp"
#include "src/sim/replay_schedule.h"
#include "tests/replay_fixtures.h"

namespace gearbox {
namespace {

using replay_fixtures::SeqTrace;

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// "600 -2" / "900 +2": an update's time and its changes to the first dimension.
std::string fmt_time_and_change(const UpdateRecord& r) {
  std::string out = std::to_string(static_cast<int>(r.time));
  for (int64_t g : r.removed[0]) out += " -" + std::to_string(g);
  for (int64_t g : r.added[0]) out += " +" + std::to_string(g);
  return out;
}

RuntimeConfig SeqConfig(std::vector<int64_t> gears) {
  RuntimeConfig c;
  c.dims = {{"SEQLEN", std::move(gears), false, false}};
  return c;
}

TEST(Replay, StaticMetricsOnAHandCheckedTrace) {
  const Trace trace = SeqTrace({{0, 3}, {1, 5}, {2, 8}, {3, 2}});
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto r = Replay(SeqConfig({4, 8}), trace, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->requests, 4u);
  EXPECT_DOUBLE_EQ(r->padded_volume, 4 + 8 + 8 + 4);
  EXPECT_DOUBLE_EQ(r->raw_volume, 18);
  EXPECT_DOUBLE_EQ(r->padding_waste, 24.0 / 18.0 - 1.0);
  EXPECT_DOUBLE_EQ(r->dimension_waste(0), 24.0 / 18.0 - 1.0);
  EXPECT_EQ(r->compiles, 2u);  // gear 4 and gear 8, once each
  EXPECT_EQ(r->updates, 0u);
  EXPECT_THAT(r->avg_gears, ElementsAre(2.0));
  EXPECT_THAT(r->final_gears[0], ElementsAre(4, 8));
  EXPECT_EQ(r->peak_graphs, 2u);
  EXPECT_EQ(r->policy, "static");
}

TEST(Replay, SplitsEagerAndRejectionsAreCounted) {
  RuntimeConfig c;
  c.dims = {{"BATCHSIZE", {2, 4}, true, false}, {"SEQLEN", {8}, false, true}};
  Trace t;
  t.dimensions = {"BATCHSIZE", "SEQLEN"};
  t.time = {0, 1, 2};
  t.sizes = {9, 8, 3, 20, 1, 5};  // split (4,4,+1->2), eager seq 20, plain
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto r = Replay(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->split_requests, 1u);
  EXPECT_EQ(r->eager_requests, 1u);
  EXPECT_EQ(r->variants, 3u + 1u + 1u);
  // padded: (4+4+2)*8 + 4*20 + 2*8 = 80 + 80 + 16; raw: 72 + 60 + 5.
  EXPECT_DOUBLE_EQ(r->padded_volume, 176);
  EXPECT_DOUBLE_EQ(r->raw_volume, 137);
  // Compiled: (4,8), (2,8); the eager variant is not compiled.
  EXPECT_EQ(r->compiles, 2u);
  // Per dimension alone: BATCHSIZE 10+4+2 over 9+3+1; SEQLEN 8+20+8 over 8+20+5.
  EXPECT_DOUBLE_EQ(r->dimension_padded[0], 16);
  EXPECT_DOUBLE_EQ(r->dimension_raw[0], 13);
  EXPECT_DOUBLE_EQ(r->dimension_padded[1], 36);

  c.dims[1].eager_fallback = false;
  auto rejected = Replay(c, t, o);
  ASSERT_TRUE(rejected.ok());
  EXPECT_EQ(rejected->rejected_requests, 1u);
  EXPECT_EQ(rejected->served_requests, 2u);
  EXPECT_THAT(rejected->first_rejection, HasSubstr("row 2 (t=1): SEQLEN: 20"));
}

TEST(Replay, TheWorkerScheduleRunsInTraceTime) {
  std::vector<std::pair<double, int64_t>> rows;
  for (double t = 1000; t <= 1700; t += 10) rows.push_back({t, 5});
  std::vector<double> times;
  std::vector<UpdateTrigger> triggers;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.on_update = [&](const UpdateRecord& r) {
    times.push_back(r.time);
    triggers.push_back(r.trigger);
  };
  auto r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
  ASSERT_TRUE(r.ok()) << r.status();
  // Checks at 1060, 1120, ...; updates when 300 s have passed: 1300, 1600.
  EXPECT_THAT(times, ElementsAre(1300.0, 1600.0));
  EXPECT_THAT(triggers, ElementsAre(UpdateTrigger::kInterval, UpdateTrigger::kInterval));
  EXPECT_EQ(r->updates, 2u);

  times.clear();
  o.update_at = {1450, 1050};
  r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(times, ElementsAre(1050.0, 1450.0));  // exactly these, sorted; no schedule
}

TEST(Replay, RequestedUpdatesAfterTheLastRowRunAndTheTimelineCoversThem) {
  std::vector<std::pair<double, int64_t>> rows;
  for (double t = 0; t <= 100; t += 10) rows.push_back({t, 5});
  std::vector<double> times;
  ReplayOptions o;
  o.update_at = {400, 50, 250};  // two of them after the last row (100)
  o.on_update = [&](const UpdateRecord& r) { times.push_back(r.time); };
  auto r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(times, ElementsAre(50.0, 250.0, 400.0));
  EXPECT_EQ(r->updates, 3u);
  ASSERT_EQ(r->gear_timeline.size(), 4u);  // the start, then each update
  EXPECT_EQ(r->gear_timeline.back().time, 400.0);
  EXPECT_DOUBLE_EQ(r->trace_seconds, 100);
  EXPECT_DOUBLE_EQ(r->replay_seconds, 400);  // the virtual clock went on to the last update
  EXPECT_EQ(nlohmann::json::parse(ReplayResultJson(*r))["replay_seconds"], 400.0);
  // The static policy runs no update, requested or not.
  o.policy = UpdatePolicy::kStatic;
  times.clear();
  r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(times.empty());
  EXPECT_DOUBLE_EQ(r->replay_seconds, 100);
}

TEST(Replay, ScheduledChecksRunUpToTheLastRowTime) {
  // Checks every 60 s from the first row; an update when 300 s have passed.
  auto update_times = [](double last_row) {
    std::vector<std::pair<double, int64_t>> rows;
    for (double t = 0; t <= last_row; t += 10) rows.push_back({t, 5});
    if (rows.back().first != last_row) rows.push_back({last_row, 5});
    std::vector<double> times;
    ReplayOptions o;
    o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
    o.on_update = [&](const UpdateRecord& r) { times.push_back(r.time); };
    auto r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return times;
    EXPECT_DOUBLE_EQ(r->replay_seconds, r->trace_seconds);  // none after the last row
    return times;
  };
  EXPECT_THAT(update_times(600),
              ElementsAre(300.0, 600.0));  // the check at the last row's time runs
  EXPECT_THAT(update_times(599), ElementsAre(300.0));
  EXPECT_THAT(update_times(899), ElementsAre(300.0, 600.0));  // none at 900, after the last row
}

TEST(Replay, RecompilesAfterEvictionAndAveragesGearCountsOverTime) {
  // A: 0..299 sizes 2 and 64; B: 300..599 only 64 (gear 2 idle, evicted at
  // 600); C: 600..899 size 2 again (pads to 64: gear 2 re-added at 900);
  // D: 900..999 size 2 (gear 2 compiled a second time).
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t < 1000; ++t) {
    const bool b = t >= 300 && t < 600;
    rows.push_back({static_cast<double>(t), b ? 64 : (t < 300 && t % 2 ? 64 : 2)});
  }
  RuntimeConfig c = SeqConfig({2, 64});
  c.adaptive.recent_use_protect_seconds = 0;
  std::vector<std::string> changes;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.on_update = [&](const UpdateRecord& r) {
    if (r.changed) changes.push_back(UpdateRecordToJson(r));
  };
  auto r = Replay(c, SeqTrace(rows), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(changes[0])["removed"]["SEQLEN"], nlohmann::json::array({2}));
  EXPECT_EQ(nlohmann::json::parse(changes[0])["time"], 600.0);
  EXPECT_EQ(nlohmann::json::parse(changes[1])["added"]["SEQLEN"], nlohmann::json::array({2}));
  EXPECT_EQ(r->compiles, 3u);  // 2 and 64, then 2 again after its eviction
  // 2 gears for 600 s, 1 for 300 s, 2 for the last 99 s of a 999 s trace.
  EXPECT_NEAR(r->avg_gears[0], (2 * 600.0 + 1 * 300.0 + 2 * 99.0) / 999.0, 1e-9);
  EXPECT_EQ(r->gear_timeline.size(), 1u + r->updates);
}

// replan.idle_graph_release_seconds in a replay: the largest gear (kept: not
// splittable) runs at 0 and at 1500 only; with a release time of 600 its
// graph goes at the first update 600 s after its run and is compiled again
// at 1500, one compile more for about 880 s less of one graph.
TEST(Replay, IdleGraphsLeaveTheGraphCountAndCompileAgainWhenHit) {
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 1600; ++t)
    rows.push_back({static_cast<double>(t), t % 1500 == 0 ? 1000 : 32});
  ReplayResult runs[2];
  std::vector<double> released_at;
  for (int i = 0; i < 2; ++i) {
    RuntimeConfig c = SeqConfig({32, 1024});
    c.replan.idle_graph_release_seconds = i == 0 ? 0.0 : 600.0;
    ReplayOptions o;
    o.policy = UpdatePolicy::kReplan;
    o.on_update = [&](const UpdateRecord& r) {
      EXPECT_THAT(r.gears_after[0], ::testing::Contains(1024));
      if (!r.graphs_released_idle.empty() && !r.graphs_released_idle[0].empty()) {
        EXPECT_THAT(r.graphs_released_idle[0], ElementsAre(1024));
        released_at.push_back(r.time);
      }
    };
    auto r = Replay(c, SeqTrace(rows), o);
    ASSERT_TRUE(r.ok()) << r.status();
    runs[i] = *std::move(r);
  }
  ASSERT_EQ(released_at.size(), 1u);  // none without the release; then once
  EXPECT_GE(released_at[0], 600.0);
  EXPECT_LT(released_at[0], 660.0);  // the first update after 600 s idle
  EXPECT_EQ(runs[1].compiles, runs[0].compiles + 1);
  EXPECT_NEAR(runs[0].avg_graphs - runs[1].avg_graphs, (1500.0 - released_at[0]) / 1600.0, 1e-9);
  EXPECT_EQ(runs[1].padding_waste, runs[0].padding_waste);  // the gears are the same
}

TEST(Replay, ChurnCountsGearsEvictedWithinAnHourOfTheirAddition) {
  // Gear 2 (initial) goes idle and is evicted at 600: not churn. Then size 2
  // comes and goes every 300 s: re-added at 900, evicted at 1200, re-added at
  // 1500, evicted at 1800: two add-then-evict cycles within one hour.
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t < 2000; ++t) {
    const int phase = t / 300;  // 0: both sizes; then 64 only on odd phases, 2 on even
    int64_t size = phase == 0 ? (t % 2 ? 64 : 2) : (phase % 2 ? 64 : 2);
    rows.push_back({static_cast<double>(t), size});
  }
  RuntimeConfig c = SeqConfig({2, 64});
  c.adaptive.recent_use_protect_seconds = 0;
  std::vector<std::string> changes;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.on_update = [&](const UpdateRecord& r) {
    if (r.changed) changes.push_back(fmt_time_and_change(r));
  };
  auto r = Replay(c, SeqTrace(rows), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(changes, ElementsAre("600 -2", "900 +2", "1200 -2", "1500 +2", "1800 -2"));
  EXPECT_EQ(r->short_lived_gears, 2u);
  EXPECT_EQ(r->max_gear_cycles_per_hour, 2u);
  EXPECT_DOUBLE_EQ(r->compiles_per_hour, static_cast<double>(r->compiles));  // under an hour
  // With a churn window of 250 s no eviction comes that soon after its addition.
  o.churn_window_seconds = 250;
  r = Replay(c, SeqTrace(rows), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->short_lived_gears, 0u);
  EXPECT_EQ(r->max_gear_cycles_per_hour, 1u);
  o.churn_window_seconds = 0;
  EXPECT_THAT(Replay(c, SeqTrace(rows), o).status().message(), HasSubstr("churn_window_seconds"));
}

TEST(Replay, FlappingCountsGearChangesIn25UpdatesAfterTheWarmUp) {
  // The oscillation above: the adaptive policy changes the gears at 600,
  // 900, 1200, 1500 and 1800 s; the first is in the warm-up (the first
  // kFlapWarmupSeconds, 900 s), so 4 changes count. Kept up for 9000 s it
  // changes the gears at every update, 28 of them after the warm-up, and
  // the figure is the most within any 25 consecutive ones.
  auto oscillating = [](int seconds) {
    std::vector<std::pair<double, int64_t>> rows;
    for (int t = 0; t < seconds; ++t) {
      const int phase = t / 300;
      rows.push_back(
          {static_cast<double>(t), phase == 0 ? (t % 2 ? 64 : 2) : (phase % 2 ? 64 : 2)});
    }
    return SeqTrace(rows);
  };
  RuntimeConfig c = SeqConfig({2, 64});
  c.adaptive.recent_use_protect_seconds = 0;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  int changed_after_warmup = 0;
  o.on_update = [&](const UpdateRecord& r) {
    changed_after_warmup += r.changed && r.time >= kFlapWarmupSeconds;
  };
  auto r = Replay(c, oscillating(2000), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(changed_after_warmup, 4);
  EXPECT_EQ(r->max_gear_set_changes_in_25_updates, 4u);
  changed_after_warmup = 0;
  r = Replay(c, oscillating(9000), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(changed_after_warmup, 25);
  EXPECT_EQ(r->max_gear_set_changes_in_25_updates, kFlapUpdates);
  const auto j = nlohmann::json::parse(ReplayResultJson(*r));
  EXPECT_EQ(j["max_gear_set_changes_in_25_updates"], kFlapUpdates);
}

TEST(Replay, CompilesPerHourAfterTheFirstHourLeavesTheColdStartOut) {
  // Static gears [2, 8, 64]: two compile in the first second, one at 5000 s,
  // over a 3-hour trace: 1 compile in the 2 hours after the first.
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto r = Replay(SeqConfig({2, 8, 64}), SeqTrace({{0, 2}, {1, 8}, {5000, 64}, {10800, 2}}), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->compiles, 3u);
  EXPECT_DOUBLE_EQ(r->compiles_per_hour, 1.0);
  EXPECT_DOUBLE_EQ(r->compiles_per_hour_after_first_hour, 0.5);
  EXPECT_EQ(nlohmann::json::parse(ReplayResultJson(*r))["compiles_per_hour_after_first_hour"], 0.5);
  // An hour or less has no "after".
  r = Replay(SeqConfig({2, 8}), SeqTrace({{0, 2}, {3000, 8}}), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->compiles_per_hour_after_first_hour, 0.0);
}

// The first plan comes at the first warm-up check whose window holds
// min_window_weight of decayed weight. An update that finds it short though
// as many requests came is not the first plan: the next warm-up check tries
// again, instead of a whole update interval later.
TEST(Replay, ReplanPlansAtTheFirstWarmUpCheckWithEnoughTraffic) {
  std::vector<std::pair<double, int64_t>> rows;
  for (double t = 1000; t <= 1200; t += 1) rows.push_back({t, 5});
  std::vector<UpdateRecord> records;
  ReplayOptions o;
  o.policy = UpdatePolicy::kReplan;
  o.on_update = [&](const UpdateRecord& r) { records.push_back(r); };
  auto r = Replay(SeqConfig({8, 16}), SeqTrace(rows), o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> times;
  for (const UpdateRecord& rec : records) times.push_back(rec.time);
  // Warm-up checks every 10 s: at 1010 the window holds 11 requests (< 20);
  // at 1020, 21 requests whose decayed weight (half-life 150 s) is about
  // 19.1: declined. At 1030 the first plan; then an update every 60 s.
  EXPECT_THAT(times, ElementsAre(1020.0, 1030.0, 1090.0, 1150.0));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_THAT(records[0].targets, Each(IsEmpty()));
  ASSERT_FALSE(records[0].declined.empty());
  EXPECT_THAT(records[0].declined[0].reason, HasSubstr("too little traffic"));
  for (size_t i = 1; i < records.size(); ++i) EXPECT_THAT(records[i].targets, Each(Not(IsEmpty())));
}

TEST(Replay, JointAndSparseSchemesOnAHandCheckedTrace) {
  RuntimeConfig c;
  c.dims = {{"BATCHSIZE", {2, 4}, true, false}, {"SEQLEN", {8, 16}, false, false}};
  c.combination_spec.scheme = GearScheme::kJoint;
  c.combination_spec.combinations = {{4, 16}};  // one graph; cover_ratio 4
  Trace t;
  t.dimensions = {"BATCHSIZE", "SEQLEN"};
  t.time = {0, 1, 2, 3};
  t.sizes = {2, 8, 3, 16, 1, 5, 2, 16};
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto joint = Replay(c, t, o);
  ASSERT_TRUE(joint.ok()) << joint.status();
  // Every cell is within 4 times of 4 x 16 (2 x 8 exactly 4 times): all run on it.
  EXPECT_DOUBLE_EQ(joint->padded_volume, 4 * 64.0);
  EXPECT_DOUBLE_EQ(joint->raw_volume, 16 + 48 + 5 + 32);
  EXPECT_EQ(joint->compiles, 1u);
  EXPECT_EQ(joint->eager_requests, 0u);
  EXPECT_EQ(joint->scheme, GearScheme::kJoint);
  EXPECT_THAT(ReplayResultJson(*joint), HasSubstr("\"scheme\": \"joint\""));

  c.combination_spec.scheme = GearScheme::kSparse;  // only the cell 4 x 16 itself is compiled
  auto sparse = Replay(c, t, o);
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_DOUBLE_EQ(sparse->padded_volume, 16 + 64 + 5 + 32);  // the others run uncompiled, exactly
  EXPECT_EQ(sparse->eager_requests, 3u);
  EXPECT_EQ(sparse->compiles, 1u);

  // Overriding the scheme starts from every cell; independent compiles each cell used.
  o.scheme = GearScheme::kIndependent;
  auto independent = Replay(c, t, o);
  ASSERT_TRUE(independent.ok());
  EXPECT_EQ(independent->policy, "static/independent");
  EXPECT_DOUBLE_EQ(independent->padded_volume, 16 + 64 + 16 + 32);
  EXPECT_EQ(independent->compiles, 3u);  // (2, 8), (4, 16), (2, 16)
  // The seed's policy plans each dimension alone: no joint sets.
  o.scheme = GearScheme::kJoint;
  o.policy = UpdatePolicy::kAdaptive;
  EXPECT_THAT(Replay(c, t, o).status().message(), HasSubstr("need the replan or static policy"));
}

TEST(Replay, RunsTheRuntimeWithTheRuntimesOwnDefaults) {
  // One default each, shared by the runtime, both replays and the CLI.
  const RuntimeOptions runtime;
  EXPECT_EQ(runtime.policy, kDefaultUpdatePolicy);
  EXPECT_EQ(ReplayRunOptions{}.policy, kDefaultUpdatePolicy);
  EXPECT_EQ(ExecutedReplayOptions{}.policy, kDefaultUpdatePolicy);
  EXPECT_EQ(ReplayOptions{}.max_updates, kMaxReplayUpdates);
  EXPECT_EQ(ExecutedReplayOptions{}.max_updates, kMaxReplayUpdates);
  RuntimeConfig c = SeqConfig({8, 16});
  c.combination_spec.cover_ratio = 2.0;
  ManualClock clock(0.0);
  GraphResourcePool pool;
  const RuntimeOptions replay =
      internal::ReplayRuntimeOptions(c, ReplayRunOptions{}, &clock, &pool);
  EXPECT_EQ(replay.policy, runtime.policy);
  EXPECT_EQ(replay.event_buffer_events, runtime.event_buffer_events);
  EXPECT_EQ(replay.combination_spec.scheme, GearScheme::kIndependent);
  EXPECT_EQ(replay.combination_spec.cover_ratio, 2.0);  // the config's
}

TEST(Replay, ASchemeOverrideStartsFromEveryCellAndKeepsTheConfigsCoverRatio) {
  RuntimeConfig c;
  c.dims = {{"BATCHSIZE", {2, 4}, true, false}, {"SEQLEN", {8, 16}, false, false}};
  c.combination_spec = {GearScheme::kJoint, {{4, 16}}, 3.0};
  ManualClock clock(0.0);
  GraphResourcePool pool;
  ReplayRunOptions run;
  run.scheme = GearScheme::kJoint;  // the config's own: its combinations are kept
  RuntimeOptions ro = internal::ReplayRuntimeOptions(c, run, &clock, &pool);
  EXPECT_THAT(ro.combination_spec.combinations, ElementsAre(GearCombination{4, 16}));
  run.scheme = GearScheme::kSparse;  // another: every cell of the initial gears
  ro = internal::ReplayRuntimeOptions(c, run, &clock, &pool);
  EXPECT_EQ(ro.combination_spec.scheme, GearScheme::kSparse);
  EXPECT_TRUE(ro.combination_spec.combinations.empty());
  EXPECT_EQ(ro.combination_spec.cover_ratio, 3.0);
}

TEST(Replay, ScalingATraceDownKeepsItsEconomics) {
  // Executed replays divide sizes (rounding up) so a real backend runs them
  // quickly; a unit then stands for 8 of the trace's.
  const Trace scaled = ScaleTraceSizes(SeqTrace({{0, 1000}, {1, 7}}), 8);
  EXPECT_THAT(scaled.sizes, ElementsAre(125, 1));
  RuntimeConfig c = SeqConfig({1, 8, 1024});
  c.replan.cost.runtime_exponent = 2;
  c.replan.cost.memory_bytes_per_unit = 10;
  c.combination_spec.scheme = GearScheme::kJoint;
  c.combination_spec.combinations = {{1024, 9}};
  const RuntimeConfig s = ScaleConfigGears(c, 8);
  EXPECT_THAT(s.dims[0].gears, ElementsAre(1, 128));  // 8 -> 1 merges with 1
  EXPECT_EQ(s.combination_spec.combinations[0], (GearCombination{128, 2}));
  EXPECT_DOUBLE_EQ(s.replan.cost.seconds_per_unit, c.replan.cost.seconds_per_unit * 64);
  EXPECT_DOUBLE_EQ(s.replan.cost.memory_bytes_per_unit, 80);
  EXPECT_DOUBLE_EQ(s.replan.cost.compile_seconds, c.replan.cost.compile_seconds);
}

TEST(Replay, MemoryFromTheTraceTriggersUpdates) {
  Trace t = SeqTrace({{0, 5}, {30, 5}, {90, 5}, {150, 5}});
  t.mem_usage = {0.5, 0.95, 0.5, 0.5};
  std::vector<std::pair<double, UpdateTrigger>> seen;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.on_update = [&](const UpdateRecord& r) { seen.push_back({r.time, r.trigger}); };
  auto r = Replay(SeqConfig({8, 16}), t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The check at 60 sees the row at 30 (0.95): a memory update; at 120, 0.5: none.
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, 60.0);
  EXPECT_EQ(seen[0].second, UpdateTrigger::kMemory);
}

TEST(Replay, MemoryModelTracksCompiledGraphs) {
  RuntimeConfig c = SeqConfig({4, 8, 16});
  c.memory_model = MemoryModel{1000, 850, 60, 0};  // each graph 60 bytes
  // Two graphs at t < 60 push usage to (850 + 120) / 1000 = 0.97.
  Trace t = SeqTrace({{0, 3}, {10, 7}, {70, 3}, {200, 3}});
  std::vector<UpdateRecord> records;
  ReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  o.on_update = [&](const UpdateRecord& r) { records.push_back(r); };
  auto r = Replay(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records[0].trigger, UpdateTrigger::kMemory);
  EXPECT_NEAR(*records[0].memory.usage, 0.97, 1e-12);
  EXPECT_DOUBLE_EQ(r->peak_graph_bytes, 120);
}

TEST(Replay, RejectsMismatchedInputs) {
  Trace t = SeqTrace({{0, 3}});
  t.dimensions = {"BATCHSIZE"};
  EXPECT_THAT(Replay(SeqConfig({4}), t, {}).status().message(),
              HasSubstr("trace column 0: BATCHSIZE"));
  EXPECT_FALSE(Replay(SeqConfig({4}), SeqTrace({}), {}).ok());
  ReplayOptions o;
  o.update_at = {std::nan("")};
  EXPECT_THAT(Replay(SeqConfig({4}), SeqTrace({{0, 3}}), o).status().message(),
              HasSubstr("--update-at"));
}

TEST(Replay, SummaryJsonHasTheDocumentedKeys) {
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto r = Replay(SeqConfig({4, 8}), SeqTrace({{0, 3}, {1, 5}}), o);
  ASSERT_TRUE(r.ok());
  const auto j = nlohmann::json::parse(ReplayResultJson(*r));
  for (const char* key : {"requests", "padding_waste", "split_requests", "compiles", "updates",
                          "avg_gears", "final_gears"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["final_gears"]["SEQLEN"], nlohmann::json::array({4, 8}));
}

TEST(Replay, SummaryNamesEachRunWithItsOptimumAndExecutedFigures) {
  const RuntimeConfig config = SeqConfig({4, 8});
  const Trace trace = SeqTrace({{0, 3}, {1, 5}, {2, 8}, {3, 2}});
  ReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto fixed = Replay(config, trace, o);
  ASSERT_TRUE(fixed.ok());
  ReplaySummary summary;
  summary.trace = "t.csv";
  summary.results = {*fixed};
  auto optimum = OfflineOptimum(config, trace, summary.results);
  ASSERT_TRUE(optimum.ok()) << optimum.status();
  const DimensionOptimum& seq = (*optimum)[0][0];
  // Two gears over sizes 2, 3, 5, 8: {3, 8} pads to 3+3+8+8 = 22 (of 18).
  EXPECT_EQ(seq.gears, 2);
  EXPECT_THAT(seq.plan.gears, ElementsAre(3, 8));
  EXPECT_DOUBLE_EQ(seq.plan.waste(), 22.0 / 18.0 - 1.0);
  // Graphs alive: 1 over [0, 1), 2 over [1, 3]: 5/3 on average, rounded to 2.
  EXPECT_EQ(seq.graph_count, 2);
  EXPECT_FALSE(seq.with_splitting.has_value());  // SEQLEN is not splittable here
  summary.optimum = *optimum;
  ExecutedReplayResult executed;
  executed.policy = "static";
  executed.compiles = 2;
  summary.executed = {executed};
  summary.backend = "onednn";
  summary.size_scale = 4;

  // One run: its object at the top.
  auto j = nlohmann::json::parse(ReplaySummaryJson(summary));
  EXPECT_EQ(j["policy"], "static");
  EXPECT_FALSE(j.contains("policies"));
  EXPECT_EQ(j["offline_optimum"]["SEQLEN"]["gear_list"], nlohmann::json::array({3, 8}));
  EXPECT_EQ(j["offline_optimum"]["SEQLEN"]["same_graph_count"]["gears"], 2);
  EXPECT_EQ(j["executed"]["compiles"], 2);
  EXPECT_EQ(j["executed"]["backend"], "onednn");
  EXPECT_EQ(j["executed"]["size_scale"], 4.0);

  // Several: by run name, with the trace; no optimum or execution asked for.
  o.policy = UpdatePolicy::kAdaptive;
  auto adaptive = Replay(config, trace, o);
  ASSERT_TRUE(adaptive.ok());
  summary.results.push_back(*adaptive);
  summary.optimum.clear();
  summary.executed.clear();
  j = nlohmann::json::parse(ReplaySummaryJson(summary));
  EXPECT_EQ(j["trace"], "t.csv");
  EXPECT_EQ(j["policies"]["static"]["requests"], 4);
  EXPECT_EQ(j["policies"]["adaptive"]["policy"], "adaptive");
  EXPECT_FALSE(j["policies"]["static"].contains("offline_optimum"));
  EXPECT_FALSE(j["policies"]["static"].contains("executed"));
}

}  // namespace
}  // namespace gearbox
