// Faults injected through gearbox's own interfaces (GraphResource::Release,
// MemoryProbe, Clock, the on_update observer, bad event times). For each:
// the documented behaviour happens, nothing leaks, the gear set stays valid.
// docs/RELIABILITY.md lists the behaviours.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "gearbox/runtime.h"
#include "gearbox/update_worker.h"
#include "src/common/mutex.h"

namespace gearbox {
namespace {

using ::testing::HasSubstr;

// Fails its first `failures` releases (or throws), then succeeds.
struct FlakyGraph : GraphResource {
  FlakyGraph(int fail_times, bool throws, std::atomic<int>* alive)
      : fail_times_(fail_times), throws_(throws), alive_(alive) {
    alive_->fetch_add(1);
  }
  ~FlakyGraph() override { alive_->fetch_sub(1); }
  absl::Status Release() override {
    ++attempts;
    if (attempts <= fail_times_) {
      if (throws_) throw std::runtime_error("driver error");
      return absl::UnavailableError("device busy");
    }
    return absl::OkStatus();
  }
  int fail_times_;
  bool throws_;
  std::atomic<int>* alive_;
  int attempts = 0;
};

struct Logs {
  Mutex mu;
  std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  LogSink Sink() {
    return [this](LogLevel, std::string_view m) {
      MutexLock lock(&mu);
      lines.emplace_back(m);
    };
  }
  std::string Last() {
    MutexLock lock(&mu);
    return lines.empty() ? "" : lines.back();
  }
};

TEST(Faults, FailedReleaseIsRetriedThenSucceeds) {
  Logs logs;
  std::atomic<int> alive{0};
  GraphResourcePool pool(PoolOptions{5, logs.Sink()});
  const GraphKey k = pool.Register(std::make_shared<FlakyGraph>(2, false, &alive));
  const GraphKey keys[] = {k};
  EXPECT_EQ(pool.RemoveByKeys(keys), 1u);
  EXPECT_EQ(pool.size(), 0u);  // bookkeeping does not wait for the release
  EXPECT_EQ(pool.waiting_for_release(), 1u);
  EXPECT_THAT(logs.Last(), HasSubstr("attempt 1 of 5): device busy; will retry"));
  EXPECT_EQ(pool.RetryFailedReleases(), 1u);  // second attempt fails too
  EXPECT_EQ(pool.RetryFailedReleases(), 0u);  // third succeeds
  EXPECT_EQ(pool.released(), 1u);
  EXPECT_EQ(pool.release_failures(), 2u);
  EXPECT_EQ(pool.abandoned(), 0u);
  EXPECT_EQ(alive.load(), 0);
}

TEST(Faults, ReleaseThatAlwaysFailsOrThrowsIsAbandonedAndCounted) {
  Logs logs;
  std::atomic<int> alive{0};
  GraphResourcePool pool(PoolOptions{3, logs.Sink()});
  const GraphKey a = pool.Register(std::make_shared<FlakyGraph>(1000, false, &alive));
  const GraphKey b = pool.Register(std::make_shared<FlakyGraph>(1000, true, &alive));
  const GraphKey keys[] = {a, b};
  pool.RemoveByKeys(keys);
  pool.RetryFailedReleases();
  EXPECT_EQ(pool.RetryFailedReleases(), 0u);
  EXPECT_EQ(pool.abandoned(), 2u);
  EXPECT_EQ(pool.release_failures(), 6u);
  EXPECT_THAT(logs.Last(), HasSubstr("giving up, the resource is leaked"));
  EXPECT_EQ(alive.load(), 0);  // the C++ object is still destroyed
}

TEST(Faults, AResourceHeldPastThePoolStillReleases) {
  std::atomic<int> alive{0};
  std::shared_ptr<GraphResource> held;
  {
    GraphResourcePool pool(PoolOptions{5, [](LogLevel, std::string_view) {}});
    held = pool.Acquire(pool.Register(std::make_shared<FlakyGraph>(0, false, &alive)));
  }
  EXPECT_EQ(alive.load(), 1);
  held.reset();
  EXPECT_EQ(alive.load(), 0);
}

TEST(Faults, TheWorkerRetriesFailedReleasesAtEveryCheck) {
  Logs logs;
  ManualClock clock(0);
  std::atomic<int> alive{0};
  GraphResourcePool pool(PoolOptions{5, logs.Sink()});
  RuntimeOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  o.clock = &clock;
  o.pool = &pool;
  o.start_worker = false;
  o.log = logs.Sink();
  auto rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
  const GraphKey keys[] = {pool.Register(std::make_shared<FlakyGraph>(1, false, &alive))};
  pool.RemoveByKeys(keys);
  EXPECT_EQ(pool.waiting_for_release(), 1u);
  rt->worker()->CheckOnce(60);
  EXPECT_EQ(pool.waiting_for_release(), 0u);
  EXPECT_EQ(pool.released(), 1u);
}

struct ProbeCase {
  const char* name;
  std::function<absl::StatusOr<double>()> fn;
  const char* error;
};

class ProbeFaults : public ::testing::TestWithParam<ProbeCase> {};

TEST_P(ProbeFaults, AreReportedAndMeanNoPressure) {
  Logs logs;
  ManualClock clock(0);
  GraphResourcePool pool;
  FunctionMemoryProbe probe(GetParam().fn);
  RuntimeOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  o.clock = &clock;
  o.pool = &pool;
  o.memory_probe = &probe;
  o.start_worker = false;
  o.log = logs.Sink();
  auto rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
  EXPECT_FALSE(rt->CheckTrigger(60).has_value());  // no memory trigger
  auto r = rt->RunOnce(60);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->memory.high);
  EXPECT_FALSE(r->memory.usage.has_value());
  EXPECT_THAT(r->memory.error, HasSubstr(GetParam().error));
  EXPECT_THAT(logs.Last(), HasSubstr("memory probe unusable"));
  EXPECT_EQ(rt->GetSnapshot()->num_dimensions(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    All, ProbeFaults,
    ::testing::Values(
        ProbeCase{"error",
                  [] { return absl::StatusOr<double>(absl::UnavailableError("no device")); },
                  "no device"},
        ProbeCase{"throws", []() -> absl::StatusOr<double> { throw std::runtime_error("ioctl"); },
                  "probe threw: ioctl"},
        ProbeCase{"nan", [] { return absl::StatusOr<double>(std::nan("")); },
                  "expected a fraction"},
        ProbeCase{"negative", [] { return absl::StatusOr<double>(-0.2); }, "probe returned -0.2"},
        ProbeCase{"infinite", [] { return absl::StatusOr<double>(INFINITY); },
                  "expected a fraction"}),
    [](const ::testing::TestParamInfo<ProbeCase>& i) { return std::string(i.param.name); });

// Issue 11 defect 1: usage above 1 (over-committed memory) is high pressure,
// not a probe error.
TEST(ProbeAboveOne, IsHighPressure) {
  ManualClock clock(0);
  GraphResourcePool pool;
  FunctionMemoryProbe probe([] { return absl::StatusOr<double>(1.04); });
  RuntimeOptions o;
  o.policy = UpdatePolicy::kAdaptive;
  o.clock = &clock;
  o.pool = &pool;
  o.memory_probe = &probe;
  o.start_worker = false;
  o.log = [](LogLevel, std::string_view) {};
  auto rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4}, true, false}}, o);
  auto r = rt->RunOnce(60);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->memory.high);
  ASSERT_TRUE(r->memory.usage.has_value());
  EXPECT_DOUBLE_EQ(*r->memory.usage, 1.04);
  EXPECT_EQ(r->memory.error, "");
}

struct RuntimeFixture {
  std::atomic<int> alive{0};  // outlives the pool, whose graphs touch it
  ManualClock clock{1000};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> rt;
  explicit RuntimeFixture(std::function<void(const UpdateRecord&)> on_update = nullptr) {
    RuntimeOptions o;
    o.policy = UpdatePolicy::kAdaptive;  // the seed policy is under test
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    o.adaptive.recent_use_protect_seconds = 0;
    o.on_update = std::move(on_update);
    o.log = [](LogLevel, std::string_view) {};
    rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1, 2, 4, 8, 16}, true, false}}, o);
    // A graph per gear, attached.
    for (int64_t g : {1, 2, 4, 8, 16}) {
      pool.Register(std::make_shared<FlakyGraph>(0, false, &alive));
      const int64_t gears[] = {g};
      rt->AttachCleanupKeys(gears, pool.ConsumeRecentKeys());
    }
  }
  void Record(int64_t size, double t) {
    SnapshotRef s = rt->GetSnapshot();
    const int64_t raw[] = {size};
    auto plan = MakePlan(*s, raw);
    ASSERT_TRUE(plan.ok());
    rt->RecordPlan(*plan, t);
  }
  // Live graphs are exactly the pool's entries, and the gear set is valid.
  void ExpectConsistent() {
    SnapshotRef s = rt->GetSnapshot();
    EXPECT_TRUE(GearSet::Create(s->dimensions()).ok());
    EXPECT_EQ(static_cast<size_t>(alive.load()), pool.size());
    const RuntimeCounters c = rt->counters();
    EXPECT_EQ(c.events_pending, 0u);
  }
};

TEST(Faults, ClockJumpingBackwardsKeepsStatisticsSane) {
  RuntimeFixture f;
  for (int i = 0; i < 100; ++i) f.Record(3, 1000 + i);
  ASSERT_TRUE(f.rt->RunOnce(500).ok());  // "now" long before the events
  // Events stamped long before the newest are dropped as too late, not folded.
  f.Record(3, 500);
  ASSERT_TRUE(f.rt->RunOnce(1100).ok());
  EXPECT_EQ(f.rt->counters().events_too_late, 1u);
  f.ExpectConsistent();
}

TEST(Faults, ClockJumpingFarForwardEvictsIdleGearsOneAtATime) {
  RuntimeFixture f;
  for (int i = 0; i < 100; ++i) f.Record(3, 1000 + i);
  for (int round = 0; round < 6; ++round) ASSERT_TRUE(f.rt->RunOnce(1e12 + round).ok());
  EXPECT_EQ(f.rt->GetSnapshot()->gears(0).size(), 1u);  // everything idle: down to the max
  f.ExpectConsistent();
}

TEST(Faults, BadEventTimesAreDroppedAndCounted) {
  RuntimeFixture f;
  f.Record(3, std::nan(""));
  f.Record(3, INFINITY);
  f.Record(3, 1e300);
  f.Record(3, 1000);
  ASSERT_TRUE(f.rt->RunOnce(1001).ok());
  const RuntimeCounters c = f.rt->counters();
  EXPECT_EQ(c.events_bad_time, 3u);
  EXPECT_EQ(c.events_folded, 1u);
  EXPECT_FALSE(f.rt->RunOnce(std::nan("")).ok());
  f.ExpectConsistent();
}

TEST(Faults, AnUpdateThatThrowsLeavesAConsistentRuntime) {
  int calls = 0;
  RuntimeFixture f([&](const UpdateRecord&) {
    if (++calls == 1) throw std::runtime_error("observer failed");
  });
  for (int i = 0; i < 100; ++i) f.Record(16, 1000 + i);
  EXPECT_THROW((void)f.rt->RunOnce(1200), std::runtime_error);
  // The update itself was committed before the observer ran: evicted gears'
  // graphs are released, and the next update proceeds normally.
  f.ExpectConsistent();
  auto next = f.rt->RunOnce(1300);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->sequence, 2u);
  f.ExpectConsistent();
}

TEST(Faults, HugeRequestsAreRefusedNotPlannedIntoBillionsOfChunks) {
  auto gears = *GearSet::Create({{"A", {1}, true, false}, {"B", {1}, true, false}});
  const int64_t raw[] = {int64_t{1} << 40, int64_t{1} << 40};
  auto plan = MakePlan(gears, raw);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("more than 1073741824 chunks"));
}

}  // namespace
}  // namespace gearbox
