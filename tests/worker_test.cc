#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

#include "gearbox/runtime.h"
#include "gearbox/update_worker.h"
#include "src/common/mutex.h"
#include "src/runtime/drain_pacing.h"

namespace gearbox {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct WorkerFixture {
  ManualClock clock{0.0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  Mutex mu;
  std::vector<std::string> logs ABSL_GUARDED_BY(mu);
  std::vector<UpdateRecord> records ABSL_GUARDED_BY(mu);
  bool throw_on_update = false;  // set before the worker starts
  std::unique_ptr<AdaptiveGearRuntime> runtime;

  explicit WorkerFixture(bool throws = false) : throw_on_update(throws) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kAdaptive;  // the seed policy is under test
    o.clock = &clock;
    o.memory_probe = &probe;
    o.pool = &pool;
    o.start_worker = true;
    o.log = [this](LogLevel, std::string_view m) {
      MutexLock lock(&mu);
      logs.emplace_back(m);
    };
    o.on_update = [this](const UpdateRecord& r) {
      {
        MutexLock lock(&mu);
        records.push_back(r);
      }
      if (throw_on_update) throw std::runtime_error("injected failure");
    };
    runtime = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
    clock.WaitForSleepersForTesting(1);
  }

  // Moves time to `t` and waits for the worker's `n`-th check.
  void AdvanceTo(double t, uint64_t n) {
    clock.Set(t);
    runtime->worker()->WaitForChecksForTesting(n);
    clock.WaitForSleepersForTesting(1);
  }
  size_t record_count() {
    MutexLock lock(&mu);
    return records.size();
  }
};

TEST(Worker, ChecksEveryMinuteAndUpdatesEveryFiveMinutes) {
  WorkerFixture f;
  EXPECT_TRUE(f.runtime->worker()->running());
  for (int i = 1; i <= 4; ++i) {
    f.AdvanceTo(60.0 * i, i);
    EXPECT_EQ(f.runtime->worker()->updates(), 0u) << "at " << 60 * i;
  }
  f.AdvanceTo(300.0, 5);
  EXPECT_EQ(f.runtime->worker()->updates(), 1u);
  ASSERT_EQ(f.record_count(), 1u);
  {
    MutexLock lock(&f.mu);
    EXPECT_EQ(f.records[0].trigger, UpdateTrigger::kInterval);
    EXPECT_EQ(f.records[0].time, 300.0);
  }
  for (int i = 6; i <= 9; ++i) f.AdvanceTo(60.0 * i, i);
  EXPECT_EQ(f.runtime->worker()->updates(), 1u);
  f.AdvanceTo(600.0, 10);
  EXPECT_EQ(f.runtime->worker()->updates(), 2u);
}

// Before its first plan the runtime retries only once more requests came:
// a declined update with no new request since is not run again at every
// warm-up check.
TEST(Worker, ReplanRetriesTheFirstPlanOnlyOnNewRequests) {
  ManualClock clock{0.0};
  GraphResourcePool pool;
  RuntimeOptions ro;
  ro.policy = UpdatePolicy::kReplan;
  ro.clock = &clock;
  ro.pool = &pool;
  ro.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create({{"SEQLEN", {8, 16}, false, false}}, ro);
  Plan plan;
  const int64_t raw[] = {5};
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(MakePlan(*rt->GetSnapshot(), raw, &plan).ok());
    rt->RecordPlan(plan, static_cast<double>(i));
  }
  EXPECT_EQ(rt->CheckTrigger(100), UpdateTrigger::kInterval);
  const UpdateRecord declined = *rt->RunOnce(100, UpdateTrigger::kInterval);
  EXPECT_THAT(declined.targets, Each(IsEmpty()));  // 20 requests, decayed below 20
  EXPECT_EQ(rt->CheckIntervalSeconds(), 10.0);     // still warming up
  EXPECT_EQ(rt->CheckTrigger(110), std::nullopt);  // nothing new came
  ASSERT_TRUE(MakePlan(*rt->GetSnapshot(), raw, &plan).ok());
  rt->RecordPlan(plan, 110);
  EXPECT_EQ(rt->CheckTrigger(110), UpdateTrigger::kInterval);
}

TEST(Worker, ReplanChecksOftenUntilItsFirstPlan) {
  ManualClock clock{0.0};
  FixedMemoryProbe probe{0.5};
  GraphResourcePool pool;
  RuntimeOptions o;
  o.policy = UpdatePolicy::kReplan;
  o.clock = &clock;
  o.memory_probe = &probe;
  o.pool = &pool;
  o.start_worker = true;
  auto runtime = *AdaptiveGearRuntime::Create({{"SEQLEN", {8, 16, 64}, false, false}}, o);
  EXPECT_EQ(runtime->CheckIntervalSeconds(), 10.0);  // replan.warmup_check_seconds
  clock.WaitForSleepersForTesting(1);
  for (int i = 0; i < 30; ++i) {
    Plan plan;
    const int64_t raw[] = {5};
    ASSERT_TRUE(MakePlan(*runtime->GetSnapshot(), raw, &plan).ok());
    runtime->RecordPlan(plan, 1.0);
  }
  clock.Set(10.0);
  runtime->worker()->WaitForChecksForTesting(1);
  clock.WaitForSleepersForTesting(1);
  EXPECT_EQ(runtime->worker()->updates(), 1u);  // the first plan, 50 s before the first minute
  EXPECT_EQ(runtime->CheckIntervalSeconds(), 60.0);
  clock.Set(69.0);  // the next check is a full check interval later, at 70
  clock.Set(70.0);
  runtime->worker()->WaitForChecksForTesting(2);
  // A check at 69 would have found 59 s since the plan: no update.
  EXPECT_EQ(runtime->worker()->updates(), 2u);

  RuntimeOptions adaptive = o;
  adaptive.policy = UpdatePolicy::kAdaptive;
  adaptive.start_worker = false;
  EXPECT_EQ((*AdaptiveGearRuntime::Create({{"SEQLEN", {8}, false, false}}, adaptive))
                ->CheckIntervalSeconds(),
            60.0);
}

TEST(Worker, MemoryPressureTriggersAtTheNextCheck) {
  WorkerFixture f;
  f.probe.Set(0.95);
  f.AdvanceTo(60.0, 1);
  EXPECT_EQ(f.runtime->worker()->updates(), 1u);
  MutexLock lock(&f.mu);
  ASSERT_EQ(f.records.size(), 1u);
  EXPECT_EQ(f.records[0].trigger, UpdateTrigger::kMemory);
  EXPECT_TRUE(f.records[0].memory.high);
}

TEST(Worker, SurvivesAnExceptionInAnUpdate) {
  WorkerFixture f(/*throws=*/true);
  f.probe.Set(0.95);  // an update at every check
  f.AdvanceTo(60.0, 1);
  f.AdvanceTo(120.0, 2);
  f.AdvanceTo(180.0, 3);
  EXPECT_EQ(f.runtime->worker()->failures(), 3u);
  EXPECT_EQ(f.record_count(), 3u);  // each update ran; the observer threw after
  EXPECT_TRUE(f.runtime->worker()->running());
  MutexLock lock(&f.mu);
  ASSERT_FALSE(f.logs.empty());
  EXPECT_THAT(f.logs.back(), HasSubstr("injected failure"));
}

TEST(Worker, ClockJumpingBackwardsReArmsTheNextCheck) {
  WorkerFixture f;
  f.clock.Set(-1000.0);  // worker wakes, sees time went back, re-arms at -940
  f.clock.WaitForSleepsBegunForTesting(2);
  f.AdvanceTo(-940.0, 1);
  EXPECT_EQ(f.runtime->worker()->checks(), 1u);
}

TEST(Worker, ClockJumpingFarForwardRunsOneCheck) {
  WorkerFixture f;
  f.AdvanceTo(1e6, 1);
  EXPECT_EQ(f.runtime->worker()->checks(), 1u);
  EXPECT_EQ(f.runtime->worker()->updates(), 1u);
}

TEST(Worker, StopsCleanlyWhileSleepingAndRestarts) {
  WorkerFixture f;
  f.runtime->StopWorker();
  EXPECT_FALSE(f.runtime->worker()->running());
  f.runtime->StopWorker();  // idempotent
  ASSERT_TRUE(f.runtime->StartWorker().ok());
  f.clock.WaitForSleepersForTesting(1);
  f.AdvanceTo(f.clock.NowSeconds() + 60.0, 1);
  EXPECT_EQ(f.runtime->worker()->checks(), 1u);
}

// A runtime whose worker runs on a manual clock that never moves (so only
// the drain thread folds), with a 4-event ring per recording thread, and
// the plan of one request of 3.
struct DrainFixture {
  explicit DrainFixture(double drain_cpu_share = RuntimeOptions{}.drain_cpu_share) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kAdaptive;
    o.clock = &clock;
    o.pool = &pool;
    o.event_buffer_events = 4;
    o.drain_cpu_share = drain_cpu_share;
    runtime = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
    clock.WaitForSleepersForTesting(1);
    const int64_t raw[] = {3};
    plan = *MakePlan(*runtime->GetSnapshot(), raw);
  }
  // Waits by condition; the deadline only turns a lost wake into a failure
  // instead of a hang.
  uint64_t WaitFolded(uint64_t n) {
    while (runtime->counters().events_folded < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return runtime->counters().events_folded;
  }
  void Record(int events) {
    for (int i = 0; i < events; ++i) runtime->RecordPlan(plan, 1.0);
  }

  ManualClock clock{0.0};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  Plan plan;
  const std::chrono::steady_clock::time_point deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(120);
};

TEST(Worker, FoldsFullBuffersWithoutAnUpdate) {
  DrainFixture f;
  // The second event fills the ring (4 events) to half: the recording thread
  // wakes the drain thread, which folds at least those two. Events after the
  // wake may stay pending until the next drain request or worker wake (the
  // manual clock never wakes the worker here), so only the two are awaited.
  f.Record(4);
  EXPECT_GE(f.WaitFolded(2), 2u) << "the drain thread never folded the half-full ring";
  const RuntimeCounters c = f.runtime->counters();
  EXPECT_EQ(c.events_folded + c.events_pending, 4u);
  EXPECT_EQ(c.events_dropped, 0u);
}

// With a small drain_cpu_share the drain thread rests after each drain; a
// request that comes during the rest must still be served after it.
TEST(Worker, DrainsARequestThatCameDuringItsRest) {
  DrainFixture f(0.001);  // rests about 1000 times as long as a drain (at most 50 ms)
  // Two events fill the ring to half: the first drain.
  f.Record(2);
  ASSERT_GE(f.WaitFolded(2), 2u) << "the drain thread never folded the half-full ring";
  // Right after it (most likely during the rest): four more fit, the fifth
  // finds the ring full, is dropped and asks for a drain.
  f.Record(5);
  EXPECT_GE(f.WaitFolded(6), 6u) << "a drain request made during the rest was lost";
  const RuntimeCounters c = f.runtime->counters();
  EXPECT_EQ(c.events_dropped, 1u);
  EXPECT_EQ(c.events_folded + c.events_pending, 6u);
}

TEST(Worker, RejectsADrainCpuShareOutsideZeroToOne) {
  for (double share : {0.0, -0.5, 1.5, std::nan("")}) {
    RuntimeOptions o;
    o.start_worker = false;
    o.drain_cpu_share = share;
    auto runtime = AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
    ASSERT_FALSE(runtime.ok()) << share;
    EXPECT_THAT(std::string(runtime.status().message()), ::testing::HasSubstr("drain_cpu_share"));
  }
}

TEST(DrainPacing, RestsSoThatDrainingTakesAtMostItsShare) {
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  EXPECT_EQ(internal::DrainPause(microseconds(100), 0.1), microseconds(900));
  EXPECT_EQ(internal::DrainPause(microseconds(100), 0.5), microseconds(100));
  EXPECT_EQ(internal::DrainPause(microseconds(100), 1.0), nanoseconds::zero());
  EXPECT_EQ(internal::DrainPause(nanoseconds::zero(), 0.1), nanoseconds::zero());
  // A long drain rests at most kMaxDrainPause.
  EXPECT_EQ(internal::DrainPause(std::chrono::milliseconds(100), 0.1),
            nanoseconds(internal::kMaxDrainPause));
}

}  // namespace
}  // namespace gearbox
