// The executed replay end to end: a small trace through the GearedExecutor
// and the oneDNN backend (a tiny transformer block), against the figures the
// simulated replay and hand counts give.
#include "gearbox/executed_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gearbox/backends/builtin.h"
#include "gearbox/backends/onednn.h"
#include "gearbox/replay.h"
#include "nlohmann/json.hpp"
#include "tests/replay_fixtures.h"

namespace gearbox {
namespace {

using replay_fixtures::SeqTrace;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RuntimeConfig SeqConfig(std::vector<int64_t> gears) {
  RuntimeConfig c;
  c.dims = {{"SEQLEN", std::move(gears), false, false}};
  c.adaptive.recent_use_protect_seconds = 0;
  return c;
}

// A fresh tiny block per replay: the sequence axis follows SEQLEN, batch 1;
// workspaces in the backend's arena (the default) or per gear.
absl::StatusOr<std::unique_ptr<Backend>> TinyBlockWith(bool shared_arena) {
  TransformerBlockOptions o;
  o.hidden = 8;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.batch_dimension = -1;
  o.seq_dimension = 0;
  o.shared_arena = shared_arena;
  return MakeOneDnnTransformerBackend(o);
}
absl::StatusOr<std::unique_ptr<Backend>> TinyBlock() { return TinyBlockWith(true); }
absl::StatusOr<std::unique_ptr<Backend>> TinyBlockPerGear() { return TinyBlockWith(false); }

TEST(ExecutedReplay, StaticPolicyOnAHandCheckedTrace) {
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto r =
      ExecutedReplay(SeqConfig({4, 8}), SeqTrace({{0, 3}, {1, 5}, {2, 8}, {3, 2}}), TinyBlock, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->policy, "static");
  EXPECT_EQ(r->requests, 4u);
  EXPECT_EQ(r->failed_requests, 0u);
  EXPECT_EQ(r->compiles, 2u);  // gear 4 and gear 8, once each
  EXPECT_EQ(r->compile_failures, 0u);
  EXPECT_DOUBLE_EQ(r->padding_waste, (4 + 8 + 8 + 4) / 18.0 - 1.0);
  EXPECT_GT(r->peak_gear_bytes, 0);
  EXPECT_EQ(r->updates, 0u);
  EXPECT_EQ(r->released_executables, 0u);
  EXPECT_THAT(r->final_gears, ElementsAre(ElementsAre(4, 8)));
  EXPECT_GT(r->latency_p99_ms, 0.0);
  EXPECT_LE(r->latency_p50_ms, r->latency_p99_ms);
  const auto j = nlohmann::json::parse(ExecutedReplayResultJson(*r));
  for (const char* key : {"requests", "compiles", "released_executables", "peak_gear_bytes",
                          "padding_waste", "updates", "final_gears"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

// A: 0..299 sizes 2 and 64; B: 300..599 only 64 (gear 2 idle, evicted at
// 600); C: 600..899 size 2 again (pads to 64: gear 2 re-added at 900);
// D: 900..999 size 2 (gear 2 compiled a second time).
Trace EvictAndReturnTrace() {
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t < 1000; ++t) {
    const bool b = t >= 300 && t < 600;
    rows.push_back({static_cast<double>(t), b ? 64 : (t < 300 && t % 2 ? 64 : 2)});
  }
  return SeqTrace(rows);
}

TEST(ExecutedReplay, EvictedGearsAreReleasedAndRecompiledAsTheSimulationSays) {
  const RuntimeConfig config = SeqConfig({2, 64});
  const Trace trace = EvictAndReturnTrace();
  std::vector<std::string> executed_changes, simulated_changes;
  ExecutedReplayOptions eo;
  eo.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  eo.on_update = [&](const UpdateRecord& r) {
    if (r.changed) executed_changes.push_back(UpdateRecordToJson(r));
  };
  auto executed = ExecutedReplay(config, trace, TinyBlock, eo);
  ASSERT_TRUE(executed.ok()) << executed.status();
  ReplayOptions so;
  so.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  so.on_update = [&](const UpdateRecord& r) {
    if (r.changed) simulated_changes.push_back(UpdateRecordToJson(r));
  };
  auto simulated = Replay(config, trace, so);
  ASSERT_TRUE(simulated.ok()) << simulated.status();

  ASSERT_EQ(executed_changes.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(executed_changes[0])["removed"]["SEQLEN"],
            nlohmann::json::array({2}));
  EXPECT_EQ(nlohmann::json::parse(executed_changes[0])["time"], 600.0);
  EXPECT_EQ(nlohmann::json::parse(executed_changes[1])["added"]["SEQLEN"],
            nlohmann::json::array({2}));
  EXPECT_EQ(executed->failed_requests, 0u);
  EXPECT_EQ(executed->compiles, 3u);              // 2 and 64, then 2 again after its eviction
  EXPECT_EQ(executed->released_executables, 1u);  // gear 2's first executable, at 600
  // The same decisions, compiles and padding as the simulated replay.
  EXPECT_EQ(executed->compiles, simulated->compiles);
  EXPECT_EQ(executed->updates, simulated->updates);
  EXPECT_EQ(executed->updates_changed, simulated->updates_changed);
  EXPECT_DOUBLE_EQ(executed->padding_waste, simulated->padding_waste);
  EXPECT_EQ(executed->final_gears, simulated->final_gears);
}

TEST(ExecutedReplay, MemoryPressureRunsUpdatesEarlyAndHoldsAdditionsToEvictions) {
  // Size 3 on a single gear of 64: padding pressure asks for a smaller gear.
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 400; ++t) rows.push_back({static_cast<double>(t), 3});
  const Trace trace = SeqTrace(rows);
  std::vector<UpdateRecord> records;
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.on_update = [&](const UpdateRecord& r) { records.push_back(r); };

  // No budget: no memory probe; the interval update at 300 adds a gear.
  auto relaxed = ExecutedReplay(SeqConfig({64}), trace, TinyBlock, o);
  ASSERT_TRUE(relaxed.ok()) << relaxed.status();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].time, 300.0);
  EXPECT_EQ(records[0].trigger, UpdateTrigger::kInterval);
  EXPECT_FALSE(records[0].memory.usage.has_value());
  EXPECT_FALSE(records[0].added[0].empty());
  EXPECT_EQ(relaxed->final_gears[0].size(), 2u);

  // A budget the first executable already exceeds: nothing is cached (each
  // request runs on an executable compiled for it), every check sees the
  // refused executables as memory pressure and updates at once, and no gear
  // is added without one evicted.
  records.clear();
  o.memory_budget_bytes = 1;
  auto pressed = ExecutedReplay(SeqConfig({64}), trace, TinyBlock, o);
  ASSERT_TRUE(pressed.ok()) << pressed.status();
  ASSERT_EQ(records.size(), 6u);  // checks at 60, 120, ..., 360
  EXPECT_EQ(records[0].time, 60.0);
  for (const UpdateRecord& r : records) {
    EXPECT_EQ(r.trigger, UpdateTrigger::kMemory);
    EXPECT_TRUE(r.memory.high);
    EXPECT_DOUBLE_EQ(*r.memory.usage, 1.0);  // over budget reads as full
    EXPECT_EQ(r.addition_budget, 0);
    EXPECT_TRUE(r.added[0].empty());
  }
  EXPECT_THAT(pressed->final_gears, ElementsAre(ElementsAre(64)));
  EXPECT_EQ(pressed->compiles, trace.rows());
  EXPECT_EQ(pressed->over_budget_runs, trace.rows());
  EXPECT_EQ(pressed->peak_gear_bytes, 0);
  EXPECT_EQ(pressed->failed_requests, 0u);
  EXPECT_GT(pressed->padding_waste, relaxed->padding_waste);
}

// Four gears compiled on first use, one request at a time: per-gear
// workspaces hold their sum, the arena one workspace of the largest gear.
TEST(ExecutedReplay, TheArenaHoldsTheLargestGearWherePerGearWorkspacesHoldTheirSum) {
  std::vector<std::pair<double, int64_t>> rows;
  const int64_t sizes[] = {2, 30, 5, 16, 2, 30};
  for (int t = 0; t < 60; ++t) rows.push_back({static_cast<double>(t), sizes[t % 6]});
  const Trace trace = SeqTrace(rows);
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto per_gear = ExecutedReplay(SeqConfig({2, 4, 8, 16, 32}), trace, TinyBlockPerGear, o);
  auto arena = ExecutedReplay(SeqConfig({2, 4, 8, 16, 32}), trace, TinyBlock, o);
  ASSERT_TRUE(per_gear.ok() && arena.ok());
  ASSERT_EQ(per_gear->compiles, 4u);  // gears 2, 32, 8, 16
  ASSERT_EQ(arena->compiles, 4u);
  EXPECT_EQ(per_gear->largest_gear_bytes, arena->largest_gear_bytes);
  // Per gear: the sum of the four workspaces, no arena.
  EXPECT_EQ(per_gear->peak_arena_bytes, 0);
  EXPECT_EQ(per_gear->arena_slots, 0);
  EXPECT_EQ(per_gear->peak_gear_bytes, per_gear->peak_per_gear_bytes);
  EXPECT_GT(per_gear->peak_gear_bytes, per_gear->largest_gear_bytes);
  // Arena: one slot (one request at a time) of the largest gear's workspace.
  EXPECT_EQ(arena->peak_per_gear_bytes, 0);
  EXPECT_EQ(arena->arena_slots, 1);
  EXPECT_EQ(arena->peak_arena_bytes, arena->largest_gear_bytes);
  EXPECT_EQ(arena->peak_gear_bytes, arena->largest_gear_bytes);
  EXPECT_LT(arena->peak_gear_bytes, per_gear->peak_gear_bytes);
  // The fourth gear was predicted from the first three, within 10 %.
  EXPECT_EQ(arena->memory_predictions, 1u);
  EXPECT_LE(arena->memory_prediction_max_error, 0.10);
  // Peak RSS read from /proc/self/status.
  EXPECT_GT(arena->start_rss_bytes, 0);
  EXPECT_GE(arena->peak_rss_bytes, arena->start_rss_bytes);
  const auto j = nlohmann::json::parse(ExecutedReplayResultJson(*arena));
  for (const char* key :
       {"peak_per_gear_bytes", "peak_arena_bytes", "arena_slots", "largest_gear_bytes",
        "out_of_memory_fallbacks", "out_of_memory_larger", "out_of_memory_split",
        "out_of_memory_exact", "predicted_over_budget_runs", "memory_predictions",
        "memory_prediction_mean_error", "memory_prediction_max_error", "peak_rss_bytes",
        "start_rss_bytes", "peak_rss_reset"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

// The budget with the arena: counted at its bound (largest need x slots),
// so peak_gear_bytes stays within it too.
TEST(ExecutedReplay, TheGearMemoryBudgetCountsTheArena) {
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 400; ++t) rows.push_back({static_cast<double>(t), t % 2 ? 3 : 60});
  const Trace trace = SeqTrace(rows);
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto unbounded = ExecutedReplay(SeqConfig({4, 64}), trace, TinyBlock, o);
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  ASSERT_EQ(unbounded->over_budget_runs, 0u);
  // Room for gear 4's arena need but not gear 64's: 64 runs uncached.
  o.memory_budget_bytes = unbounded->peak_gear_bytes - 1;
  auto bounded = ExecutedReplay(SeqConfig({4, 64}), trace, TinyBlock, o);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_LE(bounded->peak_gear_bytes, o.memory_budget_bytes);
  EXPECT_GT(bounded->peak_gear_bytes, 0);      // gear 4 cached, its slot held
  EXPECT_EQ(bounded->over_budget_runs, 201u);  // every size-60 request (even t)
  EXPECT_EQ(bounded->failed_requests, 0u);
}

TEST(ExecutedReplay, TheGearMemoryBudgetHoldsForGearsCompiledOnFirstUse) {
  // Per-gear workspaces. Unbounded, the update at 300 adds a gear for the
  // size-3 requests and both executables are cached; a budget below their
  // sum keeps the pool within it: the gear that does not fit runs uncached,
  // nothing fails.
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 400; ++t) rows.push_back({static_cast<double>(t), 3});
  const Trace trace = SeqTrace(rows);
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  auto unbounded = ExecutedReplay(SeqConfig({64}), trace, TinyBlockPerGear, o);
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  ASSERT_EQ(unbounded->final_gears[0].size(), 2u);
  ASSERT_EQ(unbounded->over_budget_runs, 0u);
  o.memory_budget_bytes = unbounded->peak_gear_bytes - 1;
  // A threshold the first gear alone stays under: the policy sees no
  // pressure and adds the gear, whose compile then finds the budget full.
  RuntimeConfig config = SeqConfig({64});
  config.adaptive.device_memory_usage_threshold_ratio = 0.999;
  auto bounded = ExecutedReplay(config, trace, TinyBlockPerGear, o);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_LE(bounded->peak_gear_bytes, o.memory_budget_bytes);
  EXPECT_GT(bounded->over_budget_runs, 0u);
  EXPECT_EQ(bounded->failed_requests, 0u);
  EXPECT_EQ(bounded->requests, trace.rows());
}

// The policies honour the budget before the compile (memory_budget_bytes,
// priced by the executor's predictions): three gears compiled first fit the
// model; the traffic then asks for gear 40, which would pass the budget.
// Without the policies' rule they add it and the executor refuses it at
// each request (predicted_over_budget_runs); with it, no gear is added that
// the executor then turns away, the pool stays within the budget and no
// request fails.
TEST(ExecutedReplay, ThePoliciesAddNoGearWhosePredictedBytesWouldPassTheBudget) {
  std::vector<std::pair<double, int64_t>> rows = {{0, 4}, {1, 16}, {2, 64}};
  for (int i = 12; i <= 3600; ++i) rows.push_back({i / 4.0, 40});  // 4 per second
  const Trace trace = SeqTrace(rows);
  RuntimeConfig config = SeqConfig({4, 16, 64});
  config.adaptive.device_memory_usage_threshold_ratio.reset();  // the byte rule alone
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto held = ExecutedReplay(config, trace, TinyBlockPerGear, o);
  ASSERT_TRUE(held.ok()) << held.status();
  o.memory_budget_bytes = held->peak_gear_bytes + 1;  // the three gears, and one byte
  for (UpdatePolicy policy : {UpdatePolicy::kAdaptive, UpdatePolicy::kReplan}) {
    SCOPED_TRACE(std::string(UpdatePolicyName(policy)));
    o.policy = policy;
    bool refused = false;
    o.on_update = [&](const UpdateRecord& r) {
      EXPECT_EQ(r.memory.budget_bytes, o.memory_budget_bytes);
      ASSERT_TRUE(r.memory.bytes_in_use.has_value());
      EXPECT_LE(*r.memory.bytes_in_use, o.memory_budget_bytes);
      for (const AdditionRecord& a : r.additions)
        refused = refused || a.outcome == AdditionOutcome::kMemoryBytes;
      for (const ChangeRecord& c : r.declined)
        refused = refused || c.reason.find("past memory_budget_bytes") != std::string::npos;
    };
    auto bounded = ExecutedReplay(config, trace, TinyBlockPerGear, o);
    ASSERT_TRUE(bounded.ok()) << bounded.status();
    EXPECT_TRUE(refused);
    EXPECT_LE(bounded->peak_gear_bytes, o.memory_budget_bytes);
    EXPECT_EQ(bounded->predicted_over_budget_runs, 0u);
    EXPECT_EQ(bounded->over_budget_runs, 0u);
    EXPECT_EQ(bounded->failed_requests, 0u);
    EXPECT_EQ(bounded->requests, trace.rows());
  }
}

// A gear the budget can never hold (the config's largest, 256: its arena
// need alone passes the budget) under both policies: the executor refuses it
// before every compile and runs its requests at their exact sizes; its
// refusal is no memory pressure (no update runs under it), the policies
// decline it in the record with its bytes and the budget, the budget holds
// and no request is lost.
TEST(ExecutedReplay, AGearTheBudgetCanNeverHoldIsDeclinedAndIsNoPressure) {
  std::vector<std::pair<double, int64_t>> rows = {{0, 4}, {1, 16}, {2, 64}};
  for (int i = 12; i <= 2400; ++i) rows.push_back({i / 4.0, i % 8 == 0 ? 200 : 50});
  const Trace trace = SeqTrace(rows);
  const RuntimeConfig config = SeqConfig({4, 16, 64, 256});
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kStatic;
  auto small =
      ExecutedReplay(SeqConfig({4, 16, 64}), SeqTrace({{0, 4}, {1, 16}, {2, 64}}), TinyBlock, o);
  ASSERT_TRUE(small.ok()) << small.status();
  o.memory_budget_bytes = 2 * small->peak_gear_bytes;  // gear 64's arena twice; 256 needs ~16x
  for (UpdatePolicy policy : {UpdatePolicy::kAdaptive, UpdatePolicy::kReplan}) {
    SCOPED_TRACE(std::string(UpdatePolicyName(policy)));
    o.policy = policy;
    int declined = 0, high = 0;
    o.on_update = [&](const UpdateRecord& r) {
      high += r.memory.high ? 1 : 0;
      for (const ChangeRecord& c : r.declined) {
        if (c.gear != 256 || c.reason.find("can never hold") == std::string::npos) continue;
        ++declined;
        EXPECT_THAT(c.reason,
                    HasSubstr("memory_budget_bytes = " + std::to_string(o.memory_budget_bytes)));
      }
    };
    auto r = ExecutedReplay(config, trace, TinyBlock, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->updates, 0u);
    EXPECT_GT(declined, 0);
    EXPECT_EQ(high, 0);
    EXPECT_GT(r->predicted_over_budget_runs, 0u);  // gear 256, never compiled
    EXPECT_LE(r->peak_gear_bytes, o.memory_budget_bytes);
    EXPECT_EQ(r->failed_requests, 0u);
    EXPECT_EQ(r->requests, trace.rows());
  }
}

// The probe that matches the backend: the oneDNN block keeps its memory on
// the host, so MakeMemoryProbeFor gives a HostMemoryProbe; the executed
// replay reads it when no budget is set (here over a fake /proc/meminfo
// showing 95 % in use: every update sees memory pressure).
TEST(ExecutedReplay, WithoutABudgetTheProbeMatchingTheBackendIsRead) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("gearbox_replay_probe_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "proc");
  std::ofstream(root / "proc" / "meminfo") << "MemTotal: 1000 kB\nMemAvailable: 50 kB\n";
  HostMemoryProbeOptions host;
  host.root = root.string();
  auto backend = TinyBlock();
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto probe = MakeMemoryProbeFor(**backend, host);
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto* host_probe = dynamic_cast<HostMemoryProbe*>(probe->get());
  ASSERT_NE(host_probe, nullptr);
  absl::StatusOr<double> usage = host_probe->UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.95);
  EXPECT_EQ(host_probe->source(), "meminfo");

  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 400; ++t) rows.push_back({static_cast<double>(t), 3});
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  std::vector<UpdateRecord> records;
  o.on_update = [&](const UpdateRecord& r) { records.push_back(r); };
  o.make_memory_probe = [&](const Backend& b) { return MakeMemoryProbeFor(b, host); };
  auto r = ExecutedReplay(SeqConfig({64}), SeqTrace(rows), TinyBlock, o);
  fs::remove_all(root);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(records.empty());
  for (const UpdateRecord& u : records) {
    ASSERT_TRUE(u.memory.usage.has_value());
    EXPECT_DOUBLE_EQ(*u.memory.usage, 0.95);
    EXPECT_TRUE(u.memory.high);
    EXPECT_EQ(u.trigger, UpdateTrigger::kMemory);
  }
  // A probe that cannot be made fails the replay, named.
  o.make_memory_probe = [](const Backend&) -> absl::StatusOr<std::unique_ptr<MemoryProbe>> {
    return absl::UnimplementedError("memory probe: none here");
  };
  auto failed = ExecutedReplay(SeqConfig({64}), SeqTrace(rows), TinyBlock, o);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("memory probe: none here"));
}

TEST(ExecutedReplay, RunsRequestedUpdatesAfterTheLastRowAndChecksUpToIt) {
  std::vector<std::pair<double, int64_t>> rows;
  for (int t = 0; t <= 900; t += 10) rows.push_back({static_cast<double>(t), 5});
  const Trace trace = SeqTrace(rows);
  std::vector<double> times;
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.max_requests = 5;                  // rows at 0..40 s
  o.update_at = {100, 20};
  o.on_update = [&](const UpdateRecord& r) { times.push_back(r.time); };
  auto r = ExecutedReplay(SeqConfig({8, 16}), trace, TinyBlock, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->requests, 5u);
  EXPECT_THAT(times, ElementsAre(20.0, 100.0));  // 100 is after the last row replayed
  EXPECT_EQ(r->updates, 2u);

  // The worker's schedule stops at the last row replayed (here 600 s): the
  // check at 600 runs its update, none comes at 900.
  times.clear();
  o.update_at.clear();
  o.max_requests = 61;
  r = ExecutedReplay(SeqConfig({8, 16}), trace, TinyBlock, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(times, ElementsAre(300.0, 600.0));
}

TEST(ExecutedReplay, RejectsMismatchedInputs) {
  Trace t = SeqTrace({{0, 3}});
  t.dimensions = {"BATCHSIZE"};
  EXPECT_THAT(ExecutedReplay(SeqConfig({4}), t, TinyBlock, {}).status().message(),
              HasSubstr("trace column 0: BATCHSIZE"));
  EXPECT_FALSE(ExecutedReplay(SeqConfig({4}), SeqTrace({}), TinyBlock, {}).ok());
  ExecutedReplayOptions o;
  o.policy = UpdatePolicy::kAdaptive;  // the tests below count its updates
  o.update_at = {std::nan("")};
  EXPECT_THAT(ExecutedReplay(SeqConfig({4}), SeqTrace({{0, 3}}), TinyBlock, o).status().message(),
              HasSubstr("--update-at"));
}

}  // namespace
}  // namespace gearbox
