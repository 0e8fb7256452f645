#include "gearbox/executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <new>
#include <thread>
#include <utility>

#include "src/common/mutex.h"

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// y = 3x + 1 elementwise on [B, S, C]: padding and splitting must not change it.
struct Gate {
  Mutex mu;
  CondVar cv;
  bool open ABSL_GUARDED_BY(mu) = true;
  int waiting ABSL_GUARDED_BY(mu) = 0;
  void Close() {
    MutexLock l(&mu);
    open = false;
  }
  void Open() {
    MutexLock l(&mu);
    open = true;
    cv.SignalAll();
  }
  void Pass() {
    MutexLock l(&mu);
    ++waiting;
    cv.SignalAll();
    while (!open) cv.Wait(&mu);
    --waiting;
  }
  void WaitForWaiters(int n) {
    MutexLock l(&mu);
    while (waiting < n) cv.Wait(&mu);
  }
};

struct Shared {
  std::atomic<int> compiles{0};
  std::atomic<int> alive{0};
  std::atomic<int> released_while_running{0};
  std::atomic<int64_t> fail_gear{-1};  // compile fails for this SEQLEN gear
  // How: 0 out of memory (ResourceExhausted), 1 another error, 2 throws std::bad_alloc.
  std::atomic<int> fail_kind{0};
  // Runs of this SEQLEN gear fail for memory (ResourceExhausted), as a run
  // whose workspace arena cannot grow does; compiles of it succeed.
  std::atomic<int64_t> fail_run_gear{-1};
  // Runs of this BATCHSIZE gear fail for memory, as fail_run_gear's do.
  std::atomic<int64_t> fail_run_batch{-1};
  // The gears of every run, in order (TakeRuns empties it).
  Mutex ran_mu;
  std::vector<std::vector<int64_t>> ran ABSL_GUARDED_BY(ran_mu);
  std::vector<std::vector<int64_t>> TakeRuns() {
    MutexLock l(&ran_mu);
    return std::exchange(ran, {});
  }
  // bytes() of an executable: this many per gear element (B x S), or 100 when 0.
  std::atomic<int64_t> bytes_per_token{0};
  std::atomic<bool> throw_on_compile{false};
  Gate compile_gate, run_gate;
};

class AffineExecutable final : public Executable {
 public:
  AffineExecutable(Shared* s, std::vector<int64_t> gears) : s_(s), gears_(std::move(gears)) {
    s_->alive.fetch_add(1);
  }
  ~AffineExecutable() override { s_->alive.fetch_sub(1); }
  int64_t bytes() const override {
    const int64_t per = s_->bytes_per_token.load();
    return per > 0 ? per * gears_[0] * gears_[1] : 100;
  }
  absl::Status Release() override {
    if (running_.load() > 0) s_->released_while_running.fetch_add(1);
    return absl::OkStatus();
  }
  absl::Status Run(std::span<const DLTensor> in, std::span<const DLTensor> out,
                   const RunShape& shape) override {
    running_.fetch_add(1);
    s_->run_gate.Pass();
    if (in[0].shape[0] != shape.gear[0] || in[0].shape[1] != shape.gear[1]) {
      running_.fetch_sub(1);
      return absl::InternalError("executable got tensors that are not at its gear");
    }
    {
      MutexLock l(&s_->ran_mu);
      s_->ran.push_back(gears_);
    }
    if (gears_[1] == s_->fail_run_gear.load() || gears_[0] == s_->fail_run_batch.load()) {
      running_.fetch_sub(1);
      return absl::ResourceExhaustedError("no memory for the workspace arena's growth");
    }
    const int64_t n = in[0].shape[0] * in[0].shape[1] * in[0].shape[2];
    const float* x = static_cast<const float*>(in[0].data);
    float* y = static_cast<float*>(out[0].data);
    for (int64_t i = 0; i < n; ++i) y[i] = 3 * x[i] + 1;
    running_.fetch_sub(1);
    return absl::OkStatus();
  }

 private:
  Shared* s_;
  std::vector<int64_t> gears_;
  std::atomic<int> running_{0};
};

class AffineBackend final : public Backend {
 public:
  explicit AffineBackend(Shared* s) : s_(s) {
    TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, 2}, {{0, 0}, {1, 1}}};
    TensorSpec y = x;
    y.name = "y";
    sig_.inputs = {x};
    sig_.outputs = {y};
  }
  std::string_view name() const override { return "affine"; }
  const ModelSignature& signature() const override { return sig_; }
  DLDevice device() const override { return {kDLCPU, 0}; }
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears) override {
    s_->compile_gate.Pass();
    if (s_->throw_on_compile.load()) throw std::runtime_error("compiler crashed");
    if (gears[1] == s_->fail_gear.load()) {
      if (s_->fail_kind.load() == 2) throw std::bad_alloc();
      if (s_->fail_kind.load() == 1) return absl::InternalError("compiler rejected the gear");
      return absl::ResourceExhaustedError("out of graph memory");
    }
    s_->compiles.fetch_add(1);
    return std::shared_ptr<Executable>(
        std::make_shared<AffineExecutable>(s_, std::vector<int64_t>(gears.begin(), gears.end())));
  }

 private:
  Shared* s_;
  ModelSignature sig_;
};

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape, strides;
  DLTensor dl{};
  Tensor(int64_t b, int64_t s, int64_t c) : data(static_cast<size_t>(b * s * c)), shape{b, s, c} {
    Bind();
  }
  void Bind() {
    dl = DLTensor{data.data(),
                  {kDLCPU, 0},
                  static_cast<int>(shape.size()),
                  {kDLFloat, 32, 1},
                  shape.data(),
                  strides.empty() ? nullptr : strides.data(),
                  0};
  }
};

struct Fixture {
  Shared shared;  // outlives the pool and the backend's executables
  ManualClock clock{0};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  AffineBackend backend{&shared};
  std::unique_ptr<GearedExecutor> executor;
  explicit Fixture(GearScheme scheme = GearScheme::kIndependent,
                   std::vector<GearCombination> combinations = {}, double cover_ratio = 4.0,
                   ExecutorOptions options = {}, double idle_graph_release_seconds = 0) {
    RuntimeOptions o;
    o.replan.idle_graph_release_seconds = idle_graph_release_seconds;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    o.combination_spec.scheme = scheme;
    o.combination_spec.combinations = std::move(combinations);
    o.combination_spec.cover_ratio = cover_ratio;
    runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {4, 8}, false, true}}, o);
    executor = *GearedExecutor::Create(runtime.get(), &backend, options);
  }
  // Runs a request of [b, s, 2] filled with i and checks y = 3x + 1.
  absl::Status RunAndCheck(int64_t b, int64_t s) {
    Tensor x(b, s, 2), y(b, s, 2);
    for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<float>(i);
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    absl::Status st = executor->Run(in, out);
    if (!st.ok()) return st;
    for (size_t i = 0; i < x.data.size(); ++i) {
      if (y.data[i] != 3 * x.data[i] + 1)
        return absl::InternalError("wrong output at " + std::to_string(i));
    }
    return absl::OkStatus();
  }
};

TEST(Executor, PadsSplitsRunsAndRecovers) {
  Fixture f;
  EXPECT_TRUE(f.RunAndCheck(3, 5).ok());   // pad 3->4, 5->8
  EXPECT_TRUE(f.RunAndCheck(11, 7).ok());  // split 4,4,+3->4; pad 7->8
  EXPECT_TRUE(f.RunAndCheck(4, 8).ok());   // exact: zero copy
  const ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.zero_copy_requests, 1u);
  EXPECT_EQ(s.variants, 1u + 3u + 1u);
  EXPECT_EQ(s.compiles, 1u);  // every variant ran on gear (4, 8)
  EXPECT_EQ(f.shared.compiles.load(), 1);
  EXPECT_EQ(f.pool.size(), 1u);
  // One event per executed variant.
  EXPECT_EQ(f.runtime->BuildStatsSnapshot(0).dimensions[0].gears[2].sample_count, 5u);
}

TEST(Executor, JointSetsRunOnCombinationsAndSparseMissesUncompiled) {
  // Joint, one graph (4, 8), any cover: every request runs on it.
  Fixture joint(GearScheme::kJoint, {{4, 8}}, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(joint.RunAndCheck(1, 3).ok());   // cell (1, 4) -> (4, 8)
  EXPECT_TRUE(joint.RunAndCheck(11, 7).ok());  // chunks 4, 4, 3 -> all on (4, 8)
  EXPECT_EQ(joint.shared.compiles.load(), 1);
  EXPECT_EQ(joint.pool.size(), 1u);
  EXPECT_EQ(joint.executor->stats().eager_variants, 0u);
  // Sparse, the same graph: a cell that is not it runs uncompiled, exactly.
  Fixture sparse(GearScheme::kSparse, {{4, 8}});
  EXPECT_TRUE(sparse.RunAndCheck(1, 3).ok());
  EXPECT_EQ(sparse.executor->stats().eager_variants, 1u);
  EXPECT_EQ(sparse.pool.size(), 0u);
  EXPECT_TRUE(sparse.RunAndCheck(12, 8).ok());  // three chunks at (4, 8): compiled
  EXPECT_EQ(sparse.shared.compiles.load(), 2);  // one eager run, one graph
  EXPECT_EQ(sparse.pool.size(), 1u);
}

TEST(Executor, EagerFallbackCompilesForOneRunAndCachesNothing) {
  Fixture f;
  EXPECT_TRUE(f.RunAndCheck(2, 13).ok());  // SEQLEN 13 > 8: eager at exactly 13
  EXPECT_EQ(f.executor->stats().eager_variants, 1u);
  EXPECT_EQ(f.pool.size(), 0u);
  EXPECT_EQ(f.shared.alive.load(), 0);
}

TEST(Executor, ConcurrentMissesCompileOnce) {
  Fixture f;
  f.shared.compile_gate.Close();
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      if (f.RunAndCheck(2, 3).ok()) ok.fetch_add(1);
    });
  }
  f.shared.compile_gate.WaitForWaiters(1);  // one thread compiles; the others wait for it
  f.shared.compile_gate.Open();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads);
  EXPECT_EQ(f.shared.compiles.load(), 1);
  EXPECT_EQ(f.executor->stats().compiles, 1u);
}

TEST(Executor, FailedCompilesAreReportedAndNotCached) {
  Fixture f;
  f.shared.fail_gear = 8;
  f.shared.fail_kind = 1;  // not for memory: no fallback
  absl::Status s = f.RunAndCheck(2, 6);
  EXPECT_THAT(s.message(), HasSubstr("compiling gears (2,8) failed: compiler rejected the gear"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(f.RunAndCheck(2, 6).ok());
  EXPECT_EQ(f.executor->stats().compile_failures, 2u);  // tried again: not cached
  EXPECT_EQ(f.executor->cached_executables(), 0u);
  f.shared.fail_gear = -1;
  EXPECT_TRUE(f.RunAndCheck(2, 6).ok());
  f.shared.throw_on_compile = true;
  EXPECT_THAT(f.RunAndCheck(1, 2).message(), HasSubstr("compile threw: compiler crashed"));
  EXPECT_EQ(f.executor->stats().failed_requests, 3u);
}

// Fault injection: a compile that runs out of memory (a ResourceExhausted
// status, or std::bad_alloc thrown) is survived: the variant runs on an
// executable compiled at its exact sizes, cached nowhere, counted; the
// outputs are right and no executable outlives its run.
TEST(Executor, OutOfMemoryCompilesRunAtTheExactSizesUncached) {
  for (int kind : {0, 2}) {
    Fixture f;
    f.shared.fail_gear = 8;
    f.shared.fail_kind = kind;
    EXPECT_TRUE(f.RunAndCheck(2, 6).ok()) << kind;   // gear (2,8) fails: runs at (2,6)
    EXPECT_TRUE(f.RunAndCheck(11, 7).ok()) << kind;  // three chunks, each at its exact sizes
    const ExecutorStats s = f.executor->stats();
    EXPECT_EQ(s.out_of_memory_fallbacks, 4u);  // 1 + 3 variants
    EXPECT_EQ(s.compile_failures, 4u);         // the gear is tried again each time: not cached
    EXPECT_EQ(s.compiles, 4u);                 // the fallbacks
    EXPECT_EQ(s.failed_requests, 0u);
    EXPECT_EQ(f.executor->cached_executables(), 0u);
    EXPECT_EQ(f.pool.size(), 0u);
    EXPECT_EQ(f.shared.alive.load(), 0);  // nothing leaked
    // Already at its exact sizes there is nothing smaller: the request fails, reported.
    const absl::Status exact = f.RunAndCheck(2, 8);
    EXPECT_EQ(exact.code(), absl::StatusCode::kResourceExhausted) << exact;
    EXPECT_THAT(exact.message(), HasSubstr(kind == 2 ? "std::bad_alloc" : "out of graph memory"));
    EXPECT_EQ(f.executor->stats().failed_requests, 1u);
    EXPECT_EQ(f.executor->stats().out_of_memory_fallbacks, 4u);
    // Memory back: the gear compiles and is cached.
    f.shared.fail_gear = -1;
    EXPECT_TRUE(f.RunAndCheck(2, 6).ok());
    EXPECT_EQ(f.executor->cached_executables(), 1u);
  }
}

// Out of memory at a compile is reported to the runtime: the next update
// lists it (gears, predicted bytes when known, time, count), runs under
// memory pressure, and the policies hold its gears back for
// adaptive.out_of_memory_cooldown_seconds (600 s).
TEST(Executor, AnOutOfMemoryCompileIsInTheNextUpdateRecordAndHeldBackForTheCooldown) {
  Fixture f;
  f.shared.fail_gear = 8;
  f.clock.Set(5);
  ASSERT_TRUE(f.RunAndCheck(2, 6).ok());  // gear (2,8) out of memory
  f.clock.Set(7);
  ASSERT_TRUE(f.RunAndCheck(11, 7).ok());  // three chunks on (4,8): out of memory each
  EXPECT_EQ(f.runtime->CheckTrigger(8), UpdateTrigger::kMemory);
  absl::StatusOr<UpdateRecord> r = f.runtime->RunOnce(10);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->out_of_memory.size(), 2u);
  EXPECT_THAT(r->out_of_memory[0].gears, ElementsAre(2, 8));
  EXPECT_EQ(r->out_of_memory[0].time, 5.0);
  EXPECT_EQ(r->out_of_memory[0].count, 1u);
  EXPECT_FALSE(r->out_of_memory[0].bytes.has_value());  // nothing compiled yet to predict from
  EXPECT_THAT(r->out_of_memory[1].gears, ElementsAre(4, 8));
  EXPECT_EQ(r->out_of_memory[1].time, 7.0);
  EXPECT_EQ(r->out_of_memory[1].count, 3u);
  EXPECT_TRUE(r->memory.high);  // room is made as under memory pressure
  EXPECT_EQ(r->memory.recent_out_of_memory.size(), 2u);
  EXPECT_THAT(UpdateRecordToJson(*r),
              HasSubstr("\"out_of_memory\":[{\"gears\":{\"BATCHSIZE\":2,\"SEQLEN\":8},"
                        "\"stage\":\"compile\",\"bytes\":null,\"time\":5.0,\"count\":1,"
                        "\"served\":{\"exact\":1}}"));
  EXPECT_EQ(r->out_of_memory[0].stage, OutOfMemoryStage::kCompile);
  // The next update: nothing new, no pressure, the gears still held back.
  EXPECT_NE(f.runtime->CheckTrigger(11), UpdateTrigger::kMemory);
  r = f.runtime->RunOnce(20);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->out_of_memory.empty());
  EXPECT_FALSE(r->memory.high);
  EXPECT_EQ(r->memory.recent_out_of_memory.size(), 2u);
  EXPECT_EQ(UpdateRecordToJson(*r).find("out_of_memory"), std::string::npos);
  // 600 s after each failure it is forgotten.
  r = f.runtime->RunOnce(606);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->memory.recent_out_of_memory.size(), 1u);
  EXPECT_THAT(r->memory.recent_out_of_memory[0].gears, ElementsAre(4, 8));
  r = f.runtime->RunOnce(607);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->memory.recent_out_of_memory.empty());
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
}

// Fault injection: a run of a cached gear that runs out of memory (its
// workspace arena cannot grow) falls back as an out-of-memory compile does:
// the variant runs at its exact sizes, uncached; the failure is in the next
// update's record with the stage "run", under memory pressure, and held back
// for the cooldown. No request is lost, the gear stays cached and runs again
// once memory allows, and nothing outlives its run.
TEST(Executor, AnOutOfMemoryRunFallsBackToTheExactSizesAndIsInTheNextUpdateRecord) {
  Fixture f;
  f.shared.fail_run_gear = 8;
  f.clock.Set(5);
  ASSERT_TRUE(f.RunAndCheck(2, 6).ok());  // gear (2,8): compiled, its run fails: runs at (2,6)
  f.clock.Set(7);
  ASSERT_TRUE(f.RunAndCheck(11, 7).ok());  // three chunks on (4,8): each falls back
  ASSERT_TRUE(f.RunAndCheck(3, 3).ok());   // a smaller gear (4,4) runs as before
  ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_fallbacks, 4u);  // 1 + 3 variants
  EXPECT_EQ(s.compile_failures, 0u);
  EXPECT_EQ(s.compiles, 7u);  // (2,8), (4,8), (4,4) cached; 4 fallbacks
  EXPECT_EQ(s.failed_requests, 0u);
  EXPECT_EQ(f.executor->cached_executables(), 3u);  // the gears stay cached
  EXPECT_EQ(f.pool.size(), 3u);
  EXPECT_EQ(f.pool.bytes(), 300);
  EXPECT_EQ(f.shared.alive.load(), 3);  // no fallback outlives its run
  // Already at its exact sizes there is nothing smaller: the request fails, reported.
  const absl::Status exact = f.RunAndCheck(2, 8);
  EXPECT_EQ(exact.code(), absl::StatusCode::kResourceExhausted) << exact;
  EXPECT_EQ(f.executor->stats().failed_requests, 1u);
  EXPECT_EQ(f.executor->stats().out_of_memory_fallbacks, 4u);
  // Memory back: the cached gear runs again, nothing more falls back.
  f.shared.fail_run_gear = -1;
  ASSERT_TRUE(f.RunAndCheck(2, 6).ok());
  s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_fallbacks, 4u);
  EXPECT_EQ(s.compiles, 7u);
  EXPECT_EQ(f.shared.alive.load(), 3);

  EXPECT_EQ(f.runtime->CheckTrigger(8), UpdateTrigger::kMemory);
  absl::StatusOr<UpdateRecord> r = f.runtime->RunOnce(10);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->out_of_memory.size(), 2u);
  EXPECT_THAT(r->out_of_memory[0].gears, ElementsAre(2, 8));
  EXPECT_EQ(r->out_of_memory[0].stage, OutOfMemoryStage::kRun);
  EXPECT_EQ(r->out_of_memory[0].count, 2u);  // the fallback's run and the exact one
  EXPECT_EQ(r->out_of_memory[0].time, 7.0);
  EXPECT_THAT(r->out_of_memory[1].gears, ElementsAre(4, 8));
  EXPECT_EQ(r->out_of_memory[1].stage, OutOfMemoryStage::kRun);
  EXPECT_EQ(r->out_of_memory[1].count, 3u);
  EXPECT_TRUE(r->memory.high);
  EXPECT_EQ(r->memory.recent_out_of_memory.size(), 2u);  // held back for the cooldown
  EXPECT_THAT(UpdateRecordToJson(*r),
              HasSubstr("\"out_of_memory\":[{\"gears\":{\"BATCHSIZE\":2,\"SEQLEN\":8},"
                        "\"stage\":\"run\",\"bytes\":"));
  // After the update (which may evict under the pressure): nothing leaked.
  EXPECT_EQ(f.shared.alive.load(), static_cast<int>(f.executor->cached_executables()));
  EXPECT_EQ(f.pool.bytes(), 100 * static_cast<int64_t>(f.pool.size()));
}

using Runs = std::vector<std::vector<int64_t>>;

// Fault injection, "larger" (the default order's first): a compile that runs
// out of memory serves its variant on the smallest cached combination at or
// above its gears, padded (staged even for a zero-copy request): no compile,
// no new memory. The update record says which fallback served.
TEST(Executor, AnOutOfMemoryCompileRunsOnTheSmallestLargerCachedGear) {
  Fixture f;
  ASSERT_TRUE(f.RunAndCheck(4, 8).ok());  // caches (4,8)
  ASSERT_TRUE(f.RunAndCheck(2, 7).ok());  // caches (2,8)
  f.shared.TakeRuns();
  const int64_t pool_bytes = f.pool.bytes();
  f.shared.fail_gear = 4;  // compiles of SEQLEN 4 run out of memory
  f.clock.Set(5);
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());  // (2,4) fails: on (2,8), the smallest above it
  ASSERT_TRUE(f.RunAndCheck(3, 4).ok());  // (4,4) fails: on (4,8)
  ASSERT_TRUE(f.RunAndCheck(1, 4).ok());  // (1,4), its exact sizes, fails: on (2,8)
  EXPECT_EQ(f.shared.TakeRuns(), (Runs{{2, 8}, {4, 8}, {2, 8}}));
  const ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_fallbacks, 3u);
  EXPECT_EQ(s.out_of_memory_larger, 3u);
  EXPECT_EQ(s.out_of_memory_split + s.out_of_memory_exact, 0u);
  EXPECT_EQ(s.compile_failures, 3u);
  EXPECT_EQ(s.compiles, 2u);  // nothing compiled for the fallbacks
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.failed_requests, 0u);
  EXPECT_EQ(f.executor->cached_executables(), 2u);
  EXPECT_EQ(f.pool.bytes(), pool_bytes);
  EXPECT_EQ(f.shared.alive.load(), 2);
  absl::StatusOr<UpdateRecord> r = f.runtime->RunOnce(10);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->out_of_memory.size(), 3u);
  EXPECT_THAT(r->out_of_memory[0].gears, ElementsAre(2, 4));
  EXPECT_EQ(r->out_of_memory[0].served[static_cast<int>(OutOfMemoryFallback::kLarger)], 1u);
  EXPECT_THAT(UpdateRecordToJson(*r), HasSubstr("\"count\":1,\"served\":{\"larger\":1}"));
  // Memory back: the gear compiles and is cached again.
  f.shared.fail_gear = -1;
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());
  EXPECT_EQ(f.executor->stats().out_of_memory_fallbacks, 3u);
  EXPECT_EQ(f.shared.alive.load(), static_cast<int>(f.executor->cached_executables()));
}

// Fault injection, "split": a compile that runs out of memory with nothing
// cached above it runs as chunks of the largest cached gear below it on the
// splittable dimension, the remainder on the smallest that holds it.
TEST(Executor, AnOutOfMemoryCompileSplitsOnTheLargestCachedGearBelow) {
  Fixture f;
  ASSERT_TRUE(f.RunAndCheck(1, 7).ok());  // caches (1,8)
  ASSERT_TRUE(f.RunAndCheck(2, 7).ok());  // caches (2,8)
  f.shared.TakeRuns();
  f.shared.fail_gear = 8;                 // compiles of SEQLEN 8 (here (4,8)) run out of memory
  ASSERT_TRUE(f.RunAndCheck(3, 6).ok());  // (4,8): chunks of 2 and 1
  ASSERT_TRUE(f.RunAndCheck(4, 8).ok());  // exact sizes: chunks 2 and 2
  EXPECT_EQ(f.shared.TakeRuns(), (Runs{{2, 8}, {1, 8}, {2, 8}, {2, 8}}));
  const ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_split, 2u);
  EXPECT_EQ(s.out_of_memory_fallbacks, 2u);
  EXPECT_EQ(s.compiles, 2u);
  EXPECT_EQ(s.failed_requests, 0u);
  EXPECT_EQ(f.pool.bytes(), 200);
  EXPECT_EQ(f.shared.alive.load(), 2);
}

// Fault injection on runs: a cached gear whose run runs out of memory is
// served on a larger cached gear, or, with none, split on the largest below
// (a request's chunks each on their own).
TEST(Executor, AnOutOfMemoryRunRunsOnALargerGearOrSplits) {
  Fixture f;
  for (int64_t b : {1, 2, 4}) ASSERT_TRUE(f.RunAndCheck(b, 7).ok());  // caches (b,8)
  f.shared.TakeRuns();
  f.shared.fail_run_batch = 2;            // runs of (2,8) fail for memory
  ASSERT_TRUE(f.RunAndCheck(2, 6).ok());  // on (4,8)
  EXPECT_EQ(f.shared.TakeRuns(), (Runs{{2, 8}, {4, 8}}));
  f.shared.fail_run_batch = 4;            // runs of (4,8): nothing larger
  ASSERT_TRUE(f.RunAndCheck(3, 8).ok());  // chunks 2 on (2,8), 1 on (1,8)
  ASSERT_TRUE(f.RunAndCheck(4, 8).ok());  // zero copy planned: chunks 2 and 2, staged
  EXPECT_EQ(f.shared.TakeRuns(), (Runs{{4, 8}, {2, 8}, {1, 8}, {4, 8}, {2, 8}, {2, 8}}));
  ASSERT_TRUE(f.RunAndCheck(9, 5).ok());  // chunks 4, 4, 1: each 4 splits into 2 and 2
  EXPECT_EQ(f.shared.TakeRuns(), (Runs{{4, 8}, {2, 8}, {2, 8}, {4, 8}, {2, 8}, {2, 8}, {1, 8}}));
  const ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_larger, 1u);
  EXPECT_EQ(s.out_of_memory_split, 4u);
  EXPECT_EQ(s.out_of_memory_exact, 0u);
  EXPECT_EQ(s.out_of_memory_fallbacks, 5u);
  EXPECT_EQ(s.compiles, 3u);
  EXPECT_EQ(s.failed_requests, 0u);
  EXPECT_EQ(f.executor->cached_executables(), 3u);
  EXPECT_EQ(f.pool.bytes(), 300);
  EXPECT_EQ(f.shared.alive.load(), 3);
  absl::StatusOr<UpdateRecord> r = f.runtime->RunOnce(10);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->out_of_memory.size(), 2u);
  EXPECT_THAT(r->out_of_memory[1].gears, ElementsAre(4, 8));
  EXPECT_EQ(r->out_of_memory[1].stage, OutOfMemoryStage::kRun);
  EXPECT_EQ(r->out_of_memory[1].count, 4u);
  EXPECT_EQ(r->out_of_memory[1].served[static_cast<int>(OutOfMemoryFallback::kSplit)], 4u);
  EXPECT_THAT(UpdateRecordToJson(*r), HasSubstr("\"stage\":\"run\""));
}

// The order is the configured one: a kind that is impossible, or that runs
// out of memory in turn, passes to the next; none left fails the request
// with the memory error (reported, nothing served).
TEST(Executor, OutOfMemoryFallbacksFallThroughInTheConfiguredOrder) {
  {
    Fixture f;  // larger, split, exact
    ASSERT_TRUE(f.RunAndCheck(4, 8).ok());
    f.shared.TakeRuns();
    f.shared.fail_gear = 4;
    f.shared.fail_run_batch = 4;
    // (2,4) out of memory; (4,8) too; nothing cached below (2,4): exact.
    ASSERT_TRUE(f.RunAndCheck(2, 3).ok());
    EXPECT_EQ(f.shared.TakeRuns(), (Runs{{4, 8}, {2, 3}}));
    const ExecutorStats s = f.executor->stats();
    EXPECT_EQ(s.out_of_memory_exact, 1u);
    EXPECT_EQ(s.out_of_memory_fallbacks, 1u);
    EXPECT_EQ(s.compiles, 2u);
    EXPECT_EQ(f.shared.alive.load(), 1);  // the exact executable did not outlive its run
  }
  {
    Fixture f(
        GearScheme::kIndependent, {}, 4.0,
        {.out_of_memory_fallback = {OutOfMemoryFallback::kExact, OutOfMemoryFallback::kLarger}});
    ASSERT_TRUE(f.RunAndCheck(4, 8).ok());
    f.shared.TakeRuns();
    f.shared.fail_gear = 4;
    ASSERT_TRUE(f.RunAndCheck(2, 3).ok());  // exact first, though (4,8) is cached
    ASSERT_TRUE(f.RunAndCheck(1, 4).ok());  // at its exact sizes: exact impossible, larger
    EXPECT_EQ(f.shared.TakeRuns(), (Runs{{2, 3}, {4, 8}}));
    const ExecutorStats s = f.executor->stats();
    EXPECT_EQ(s.out_of_memory_exact, 1u);
    EXPECT_EQ(s.out_of_memory_larger, 1u);
    EXPECT_EQ(f.shared.alive.load(), 1);
  }
  {
    Fixture f(GearScheme::kIndependent, {}, 4.0, {.out_of_memory_fallback = {}});
    f.shared.fail_gear = 8;
    const absl::Status s = f.RunAndCheck(2, 6);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("out of graph memory"));
    EXPECT_EQ(f.executor->stats().failed_requests, 1u);
    EXPECT_EQ(f.executor->stats().out_of_memory_fallbacks, 0u);
    EXPECT_EQ(f.shared.alive.load(), 0);
    absl::StatusOr<UpdateRecord> r = f.runtime->RunOnce(10);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->out_of_memory.size(), 1u);
    EXPECT_THAT(UpdateRecordToJson(*r), HasSubstr("\"count\":1,\"served\":{}"));
  }
}

TEST(Executor, CreateRejectsARepeatedOutOfMemoryFallback) {
  Shared shared;
  ManualClock clock{0};
  RuntimeOptions o;
  o.clock = &clock;
  o.start_worker = false;
  auto runtime = *AdaptiveGearRuntime::Create(
      {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {4, 8}, false, true}}, o);
  AffineBackend backend(&shared);
  auto e = GearedExecutor::Create(
      runtime.get(), &backend,
      {.out_of_memory_fallback = {OutOfMemoryFallback::kSplit, OutOfMemoryFallback::kExact,
                                  OutOfMemoryFallback::kSplit}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(),
              HasSubstr("ExecutorOptions.out_of_memory_fallback[2]: \"split\" is not allowed; "
                        "each of \"larger\", \"split\" and \"exact\" at most once"));
  e = GearedExecutor::Create(runtime.get(), &backend,
                             {.out_of_memory_fallback = {static_cast<OutOfMemoryFallback>(7)}});
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("out_of_memory_fallback[0]: 7 is not allowed"));
  EXPECT_THAT(ParseOutOfMemoryFallback("eager").status().message(),
              HasSubstr("out_of_memory_fallback: \"eager\" is not allowed; \"larger\", "
                        "\"split\" or \"exact\""));
  EXPECT_EQ(*ParseOutOfMemoryFallback("split"), OutOfMemoryFallback::kSplit);
}

// With a budget, a gear whose predicted memory would pass it is refused
// before its compile: never compiled, its variant runs at its exact sizes
// (uncached), or at the gear when already exact; the pool stays within.
TEST(Executor, AGearPredictedPastTheBudgetIsNotCompiled) {
  Fixture f(GearScheme::kIndependent, {}, 4.0, {.graph_memory_budget_bytes = 350});
  f.shared.bytes_per_token = 10;          // bytes = 10 x B x S: the model fits it exactly
  ASSERT_TRUE(f.RunAndCheck(1, 3).ok());  // gear (1,4): 40 bytes
  EXPECT_FALSE(f.executor->PredictGearBytes(std::vector<int64_t>{4, 8}).ok());  // 1 point
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());                                        // (2,4): 80
  ASSERT_TRUE(f.RunAndCheck(1, 7).ok());  // (1,8): 80, predicted from the two before
  EXPECT_EQ(*f.executor->PredictGearBytes(std::vector<int64_t>{4, 8}), 320);
  EXPECT_EQ(f.pool.bytes(), 200);
  EXPECT_EQ(f.shared.compiles.load(), 3);
  // (4,8) would take the pool to 520 > 350: (4,7) is compiled for the run instead.
  ASSERT_TRUE(f.RunAndCheck(4, 7).ok());
  EXPECT_EQ(f.shared.compiles.load(), 4);
  EXPECT_EQ(f.executor->stats().predicted_over_budget_runs, 1u);
  EXPECT_EQ(f.executor->stats().over_budget_runs, 0u);  // never compiled, never refused after
  EXPECT_EQ(f.executor->OverBudgetBytes(), 320);        // reads as pressure: it fits alone
  EXPECT_EQ(f.executor->cached_executables(), 3u);
  EXPECT_EQ(f.pool.bytes(), 200);
  EXPECT_EQ(f.shared.alive.load(), 3);  // the run's executable is gone
  // Already exact: compiled at the gear for this run, not cached.
  ASSERT_TRUE(f.RunAndCheck(4, 8).ok());
  EXPECT_EQ(f.executor->stats().predicted_over_budget_runs, 2u);
  EXPECT_EQ(f.executor->cached_executables(), 3u);
  EXPECT_EQ(f.shared.alive.load(), 3);
  EXPECT_LE(f.pool.bytes(), 350);
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
  // The executor's predictions, each exact: (1,8) from two points, then
  // (4,7) and (4,8), each before its first compile.
  EXPECT_EQ(f.executor->stats().memory_predictions, 3u);
  EXPECT_DOUBLE_EQ(f.executor->stats().memory_prediction_max_error, 0.0);
}

// A gear whose predicted bytes alone pass the budget can never fit: it is
// refused before its compile like any gear past the budget, but no eviction
// could make room for it, so its refusal is not pressure.
TEST(Executor, AGearThatCanNeverFitTheBudgetIsRefusedWithoutPressure) {
  Fixture f(GearScheme::kIndependent, {}, 4.0, {.graph_memory_budget_bytes = 250});
  f.shared.bytes_per_token = 10;  // bytes = 10 x B x S
  for (auto [b, s] : {std::pair<int64_t, int64_t>{1, 3}, {2, 3}, {1, 7}})
    ASSERT_TRUE(f.RunAndCheck(b, s).ok());
  EXPECT_EQ(*f.executor->PredictAloneBytes(std::vector<int64_t>{4, 8}), 320);  // > 250
  EXPECT_EQ(*f.executor->PredictAloneBytes(std::vector<int64_t>{2, 8}), 160);
  ASSERT_TRUE(f.RunAndCheck(4, 7).ok());  // (4,8) refused: runs at (4,7), uncached
  EXPECT_EQ(f.executor->stats().predicted_over_budget_runs, 1u);
  EXPECT_EQ(f.executor->OverBudgetBytes(), 0);  // not pressure
  ASSERT_TRUE(f.RunAndCheck(2, 7).ok());        // (2,8): 200 + 160 > 250, but it fits alone
  EXPECT_EQ(f.executor->stats().predicted_over_budget_runs, 2u);
  EXPECT_EQ(f.executor->OverBudgetBytes(), 160);  // pressure: evictions could make room
  ASSERT_TRUE(f.RunAndCheck(4, 7).ok());          // the never-fitting refusal leaves it as is
  EXPECT_EQ(f.executor->OverBudgetBytes(), 160);
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
  EXPECT_EQ(f.executor->cached_executables(), 3u);
}

TEST(Executor, EvictionDuringARunWaitsForTheRun) {
  Fixture f;
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());  // compiles (2, 4)
  ASSERT_EQ(f.shared.alive.load(), 1);
  f.shared.run_gate.Close();
  std::thread runner([&] { EXPECT_TRUE(f.RunAndCheck(2, 3).ok()); });
  f.shared.run_gate.WaitForWaiters(1);  // the run holds the executable
  // An operator evicts gear 2 of BATCHSIZE and 4 of SEQLEN meanwhile.
  auto r = f.runtime->CommitUpdate({{1, 4}, {8}}, 1.0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cleanup_keys, 1u);
  EXPECT_EQ(f.pool.size(), 0u);         // gone from the pool at once
  EXPECT_EQ(f.shared.alive.load(), 1);  // but not released: the run holds it
  f.shared.run_gate.Open();
  runner.join();
  EXPECT_EQ(f.shared.released_while_running.load(), 0);
  EXPECT_EQ(f.shared.alive.load(), 0);  // released once the run finished
  // The next request plans on the new gears and compiles them.
  EXPECT_TRUE(f.RunAndCheck(2, 3).ok());
  EXPECT_EQ(f.shared.compiles.load(), 2);
}

TEST(Executor, TheUpdateThatEvictsAGearDropsTheExecutorsReferenceAtOnce) {
  Fixture f;
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());  // compiles (2, 4)
  ASSERT_TRUE(f.RunAndCheck(2, 3).ok());  // a hit: no second compile
  EXPECT_EQ(f.shared.compiles.load(), 1);
  EXPECT_EQ(f.executor->cached_executables(), 1u);
  auto r = f.runtime->CommitUpdate({{1, 4}, {8}}, 1.0);  // evicts BATCHSIZE 2 and SEQLEN 4
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(f.executor->cached_executables(), 0u);  // not only on its next use
  EXPECT_EQ(f.shared.alive.load(), 0);              // no request runs it: released now
}

// replan.idle_graph_release_seconds: the update that releases an idle
// graph drops the executor's reference with it, and the gear's next request
// compiles it again.
TEST(Executor, AnIdleGraphIsDroppedAndCompiledAgainOnItsNextRequest) {
  Fixture f(GearScheme::kIndependent, {}, 4.0, {}, /*idle_graph_release_seconds=*/600);
  ASSERT_TRUE(f.RunAndCheck(1, 7).ok());  // compiles (1, 8) at t = 0
  for (int i = 0; i <= 70; ++i) {         // then only (1, 4), every 10 s
    f.clock.Set(10.0 * i);
    ASSERT_TRUE(f.RunAndCheck(1, 3).ok());
  }
  EXPECT_EQ(f.shared.compiles.load(), 2);
  EXPECT_EQ(f.executor->cached_executables(), 2u);
  auto r = f.runtime->RunOnce(700.0);
  ASSERT_TRUE(r.ok()) << r.status();
  // SEQLEN is not splittable: 8, its largest gear, stays; its graph goes.
  EXPECT_THAT(r->gears_after[1], ElementsAre(4, 8));
  EXPECT_THAT(r->graphs_released_idle[1], ElementsAre(8));
  EXPECT_EQ(f.executor->cached_executables(), 1u);
  EXPECT_EQ(f.shared.alive.load(), 1);
  EXPECT_EQ(f.shared.released_while_running.load(), 0);
  f.clock.Set(705.0);
  ASSERT_TRUE(f.RunAndCheck(1, 7).ok());
  EXPECT_EQ(f.shared.compiles.load(), 3);
  EXPECT_EQ(f.executor->cached_executables(), 2u);
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
}

TEST(Executor, HitsAndEvictionsFromManyThreadsNeverReleaseARunningExecutable) {
  Fixture f;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        if (!f.RunAndCheck(1 + (i + t) % 4, 1 + i % 8).ok()) failures.fetch_add(1);
      }
    });
  }
  for (int u = 0; u < 200; ++u) {  // gears come and go under the requests
    auto r =
        f.runtime->CommitUpdate(u % 2 == 0 ? std::vector<std::vector<int64_t>>{{1, 2, 4}, {4, 8}}
                                           : std::vector<std::vector<int64_t>>{{1, 4}, {8}},
                                1.0 + u);
    ASSERT_TRUE(r.ok());
    std::this_thread::yield();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(f.shared.released_while_running.load(), 0);
  EXPECT_GT(f.shared.compiles.load(), 2);
}

TEST(Executor, BadTensorsAreRejectedWithTheField) {
  Fixture f;
  Tensor x(2, 3, 2), y(2, 3, 2);
  auto run = [&](DLTensor in, DLTensor out) {
    const DLTensor ins[] = {in};
    const DLTensor outs[] = {out};
    return f.executor->Run(ins, outs);
  };
  DLTensor rank = x.dl;
  rank.ndim = 2;
  EXPECT_THAT(run(rank, y.dl).message(), HasSubstr("x.ndim: 2"));
  DLTensor dtype = x.dl;
  dtype.dtype = {kDLInt, 32, 1};
  EXPECT_THAT(run(dtype, y.dl).message(), HasSubstr("x.dtype"));
  Tensor wide(2, 3, 5);
  EXPECT_THAT(run(wide.dl, y.dl).message(),
              HasSubstr("x.shape[2]: 5 is not allowed; the model's fixed size 2"));
  Tensor other(2, 4, 2);
  EXPECT_THAT(run(x.dl, other.dl).message(), HasSubstr("y.shape[1]: 4 is not allowed; 3"));
  DLTensor null = x.dl;
  null.data = nullptr;
  EXPECT_THAT(run(null, y.dl).message(), HasSubstr("x.data"));
  const DLTensor none[] = {x.dl};
  EXPECT_THAT(f.executor->Run(none, {}).message(), HasSubstr("outputs: 0 tensors"));
  EXPECT_EQ(f.executor->stats().failed_requests, 6u);
  EXPECT_EQ(f.shared.compiles.load(), 0);
}

TEST(Executor, NonContiguousInputsAreStaged) {
  Fixture f;
  // x logically [2, 3, 2] stored as [3, 2, 2] (axes 0 and 1 swapped).
  Tensor storage(3, 2, 2);
  for (size_t i = 0; i < storage.data.size(); ++i) storage.data[i] = static_cast<float>(i);
  Tensor x(2, 3, 2);
  x.data = storage.data;
  x.strides = {2, 4, 1};
  x.Bind();
  Tensor y(2, 3, 2);
  const DLTensor in[] = {x.dl};
  const DLTensor out[] = {y.dl};
  ASSERT_TRUE(f.executor->Run(in, out).ok());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t c = 0; c < 2; ++c) {
        const float xv = storage.data[static_cast<size_t>(s * 4 + b * 2 + c)];
        EXPECT_EQ(y.data[static_cast<size_t>((b * 3 + s) * 2 + c)], 3 * xv + 1);
      }
}

TEST(Executor, SignatureMustBindEveryDimension) {
  Shared shared;
  ManualClock clock(0);
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock;
  o.pool = &pool;
  o.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create({{"BATCHSIZE", {1}, true, false},
                                          {"SEQLEN", {4}, false, false},
                                          {"EXTRA", {1}, false, false}},
                                         o);
  AffineBackend backend(&shared);
  EXPECT_THAT(GearedExecutor::Create(rt.get(), &backend).status().message(), HasSubstr("EXTRA"));
}

TEST(BackendRegistry, NamesListsTheRegisteredBackendsInOrder) {
  BackendRegistry registry;
  EXPECT_TRUE(registry.Names().empty());
  Shared shared;
  auto factory = [&shared](const BackendParams&) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::make_unique<AffineBackend>(&shared);
  };
  ASSERT_TRUE(registry.Register("zeta", factory).ok());
  ASSERT_TRUE(registry.Register("alpha", factory).ok());
  EXPECT_THAT(registry.Names(), ElementsAre("alpha", "zeta"));
  EXPECT_THAT(registry.Register("zeta", factory).message(), HasSubstr("not registered yet"));
  EXPECT_THAT(registry.Create("beta", {}).status().message(), HasSubstr("one of: alpha, zeta"));
  auto backend = registry.Create("alpha", {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "affine");
}

TEST(Executor, PoolBudgetProbeReadsThePool) {
  Fixture f;
  PoolBudgetMemoryProbe probe(&f.pool, 400);
  EXPECT_DOUBLE_EQ(*probe.UsageFraction(), 0.0);
  ASSERT_TRUE(f.RunAndCheck(1, 2).ok());
  EXPECT_DOUBLE_EQ(*probe.UsageFraction(), 0.25);
  PoolBudgetMemoryProbe tiny(&f.pool, 10);
  EXPECT_DOUBLE_EQ(*tiny.UsageFraction(), 1.0);  // over budget reads as full
}

}  // namespace
}  // namespace gearbox
