// The oneDNN transformer block: checked against a plain C++ reference, and
// through the executor: for every request the recovered output equals the
// output of running the block at the exact unpadded shape.
#include "gearbox/backends/onednn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "gearbox/backends/builtin.h"
#include "gearbox/executor.h"
#include "gearbox/memory_model.h"

namespace gearbox {
namespace {

using ::testing::HasSubstr;

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  DLTensor dl{};
  Tensor(int64_t b, int64_t s, int64_t h) : data(static_cast<size_t>(b * s * h)), shape{b, s, h} {
    dl = DLTensor{data.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape.data(), nullptr, 0};
  }
};

void Randomize(Tensor* t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& x : t->data) x = n(rng);
}

float MaxAbsDiff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (size_t i = 0; i < a.data.size(); ++i) m = std::max(m, std::fabs(a.data[i] - b.data[i]));
  return m;
}

// Runs the backend's executable compiled at exactly (b, s).
Tensor RunExact(Backend& backend, const Tensor& x) {
  const int64_t gears[] = {x.shape[0], x.shape[1]};
  auto exe = backend.Compile(gears);
  EXPECT_TRUE(exe.ok()) << exe.status();
  Tensor y(x.shape[0], x.shape[1], x.shape[2]);
  const int64_t extent[] = {x.shape[0], x.shape[1]};
  const DLTensor in[] = {x.dl};
  const DLTensor out[] = {y.dl};
  EXPECT_TRUE((*exe)->Run(in, out, {2, gears, extent}).ok());
  return y;
}

// Plain C++ transformer block with the same weights: the specification.
struct Reference {
  int64_t h, heads, m;
  std::vector<float> ln1_s, ln1_b, ln2_s, ln2_b, wqkv, bqkv, wo, bo, wup, bup, wdown, bdown;
  explicit Reference(const TransformerBlockOptions& o)
      : h(o.hidden), heads(o.heads), m(o.hidden * o.mlp_ratio) {
    // Mirrors the backend's deterministic initialization order.
    std::mt19937_64 rng(o.seed);
    auto fill = [&](std::vector<float>* v, size_t n, float scale) {
      std::uniform_real_distribution<float> u(-scale, scale);
      v->resize(n);
      for (float& x : *v) x = u(rng);
    };
    const size_t H = static_cast<size_t>(h), M = static_cast<size_t>(m);
    fill(&ln1_s, H, 0.2f);
    for (float& x : ln1_s) x += 1;
    fill(&ln1_b, H, 0.1f);
    fill(&ln2_s, H, 0.2f);
    for (float& x : ln2_s) x += 1;
    fill(&ln2_b, H, 0.1f);
    fill(&wqkv, H * 3 * H, 1.0f / std::sqrt(float(H)));
    fill(&bqkv, 3 * H, 0.1f);
    fill(&wo, H * H, 1.0f / std::sqrt(float(H)));
    fill(&bo, H, 0.1f);
    fill(&wup, H * M, 1.0f / std::sqrt(float(H)));
    fill(&bup, M, 0.1f);
    fill(&wdown, M * H, 1.0f / std::sqrt(float(M)));
    fill(&bdown, H, 0.1f);
  }
  std::vector<double> LayerNorm(const std::vector<double>& x, const std::vector<float>& s,
                                const std::vector<float>& b) const {
    std::vector<double> y(x.size());
    for (size_t r = 0; r < x.size() / h; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < h; ++c) mean += x[r * h + c];
      mean /= h;
      for (int64_t c = 0; c < h; ++c) var += (x[r * h + c] - mean) * (x[r * h + c] - mean);
      var /= h;
      for (int64_t c = 0; c < h; ++c)
        y[r * h + c] = (x[r * h + c] - mean) / std::sqrt(var + 1e-5) * s[c] + b[c];
    }
    return y;
  }
  std::vector<double> Linear(const std::vector<double>& x, int64_t in, int64_t out,
                             const std::vector<float>& w, const std::vector<float>& b) const {
    const size_t rows = x.size() / in;
    std::vector<double> y(rows * out);
    for (size_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[i * out + o];
        y[r * out + o] = acc;
      }
    return y;
  }
  Tensor Run(const Tensor& xt) const {
    const int64_t B = xt.shape[0], S = xt.shape[1], hd = h / heads;
    std::vector<double> x(xt.data.begin(), xt.data.end());
    auto qkv = Linear(LayerNorm(x, ln1_s, ln1_b), h, 3 * h, wqkv, bqkv);
    std::vector<double> ctx(x.size(), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < heads; ++n)
        for (int64_t i = 0; i < S; ++i) {
          std::vector<double> p(S);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < S; ++j) {
            double d = 0;
            for (int64_t k = 0; k < hd; ++k)
              d +=
                  qkv[(b * S + i) * 3 * h + n * hd + k] * qkv[(b * S + j) * 3 * h + h + n * hd + k];
            p[j] = d / std::sqrt(double(hd));
            mx = std::max(mx, p[j]);
          }
          for (double& v : p) sum += (v = std::exp(v - mx));
          for (int64_t k = 0; k < hd; ++k) {
            double acc = 0;
            for (int64_t j = 0; j < S; ++j)
              acc += p[j] / sum * qkv[(b * S + j) * 3 * h + 2 * h + n * hd + k];
            ctx[(b * S + i) * h + n * hd + k] = acc;
          }
        }
    auto x1 = Linear(ctx, h, h, wo, bo);
    for (size_t i = 0; i < x1.size(); ++i) x1[i] += x[i];
    auto up = Linear(LayerNorm(x1, ln2_s, ln2_b), h, m, wup, bup);
    for (double& v : up) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    auto y = Linear(up, m, h, wdown, bdown);
    Tensor out(B, S, h);
    for (size_t i = 0; i < y.size(); ++i) out.data[i] = static_cast<float>(y[i] + x1[i]);
    return out;
  }
};

TEST(OneDnn, BlockMatchesThePlainReference) {
  TransformerBlockOptions o;
  o.hidden = 16;
  o.heads = 2;
  auto backend = MakeOneDnnTransformerBackend(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  Tensor x(2, 5, 16);
  Randomize(&x, 3);
  const Tensor y = RunExact(**backend, x);
  const Tensor ref = Reference(o).Run(x);
  EXPECT_LT(MaxAbsDiff(y, ref), 1e-4);
}

struct OneDnnFixture {
  ManualClock clock{0};
  GraphResourcePool pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GearedExecutor> executor;
  explicit OneDnnFixture(bool shared_arena = true) {
    RuntimeOptions o;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {8, 16, 32}, false, false}}, o);
    TransformerBlockOptions bo;
    bo.hidden = 32;
    bo.heads = 4;
    bo.shared_arena = shared_arena;
    backend = *MakeOneDnnTransformerBackend(bo);
    executor = *GearedExecutor::Create(runtime.get(), backend.get(), {});
  }
};

TEST(OneDnn, PaddedAndSplitRunsEqualTheExactShape) {
  OneDnnFixture f;
  // (batch, seq): padded on both; split on batch; exact; tiny.
  const std::pair<int64_t, int64_t> shapes[] = {{3, 5}, {11, 13}, {4, 16}, {1, 1}, {2, 31}, {9, 8}};
  uint64_t seed = 10;
  for (auto [b, s] : shapes) {
    Tensor x(b, s, 32), y(b, s, 32);
    Randomize(&x, ++seed);
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    ASSERT_TRUE(f.executor->Run(in, out).ok()) << b << "x" << s;
    const Tensor exact = RunExact(*f.backend, x);
    EXPECT_LT(MaxAbsDiff(y, exact), 1e-5) << "batch " << b << " seq " << s;
  }
  // The arena holds the workspaces (one slot: one request at a time), the
  // pool nothing per gear; the executor reports both per gear.
  EXPECT_EQ(f.pool.bytes(), 0);
  int64_t largest = 0;
  for (const GearMemory& g : f.executor->cached_gear_memory()) {
    EXPECT_EQ(g.bytes, 0);
    EXPECT_GT(g.arena_bytes, 0);
    largest = std::max(largest, g.arena_bytes);
  }
  EXPECT_EQ(f.executor->cached_executables(), f.executor->cached_gear_memory().size());
  EXPECT_EQ(f.backend->arena_usage().slots, 1);
  EXPECT_EQ(f.executor->GearMemoryBytes(), largest);
  EXPECT_EQ(f.executor->stats().largest_gear_bytes, largest);
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
}

TEST(OneDnn, ConcurrentRunsOnOneGearAreCorrect) {
  OneDnnFixture f;
  Tensor x(2, 7, 32);
  Randomize(&x, 99);
  const Tensor exact = RunExact(*f.backend, x);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        Tensor y(2, 7, 32);
        const DLTensor in[] = {x.dl};
        const DLTensor out[] = {y.dl};
        if (f.executor->Run(in, out).ok() && MaxAbsDiff(y, exact) < 1e-5) good.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 20);
  EXPECT_EQ(f.executor->stats().compiles, 1u);
}

// The arena: several gears, interleaved on several threads, give exactly
// (bit for bit) what the per-gear workspaces give, and the arena holds at
// most one largest-gear workspace per execution slot.
TEST(OneDnn, ArenaRunsOfInterleavedGearsOnSeveralThreadsAreBitIdentical) {
  TransformerBlockOptions po;
  po.hidden = 32;
  po.heads = 4;
  po.shared_arena = false;
  TransformerBlockOptions ao = po;
  ao.shared_arena = true;
  auto per_gear = *MakeOneDnnTransformerBackend(po);
  auto arena = *MakeOneDnnTransformerBackend(ao);
  struct Case {
    int64_t b, s, valid_s;
  };
  const Case cases[] = {{1, 8, 8}, {2, 16, 11}, {4, 32, 32}, {3, 5, 2}, {1, 64, 40}, {2, 24, 24}};
  const int n = static_cast<int>(std::size(cases));
  std::vector<std::shared_ptr<Executable>> shared_exe;
  std::vector<Tensor> xs, refs;
  int64_t largest = 0, second = 0;
  for (const Case& c : cases) {
    const int64_t gears[] = {c.b, c.s};
    const int64_t extent[] = {c.b, c.valid_s};
    auto own = per_gear->Compile(gears);
    auto shared = arena->Compile(gears);
    ASSERT_TRUE(own.ok() && shared.ok());
    // Same workspace, held per gear or needed from the arena.
    EXPECT_GT((*own)->bytes(), 0);
    EXPECT_EQ((*own)->arena_bytes(), 0);
    EXPECT_EQ((*shared)->bytes(), 0);
    EXPECT_EQ((*shared)->arena_bytes(), (*own)->bytes());
    if ((*shared)->arena_bytes() > largest) {
      second = largest;
      largest = (*shared)->arena_bytes();
    } else {
      second = std::max(second, (*shared)->arena_bytes());
    }
    Tensor x(c.b, c.s, 32), y(c.b, c.s, 32);
    Randomize(&x, static_cast<uint64_t>(c.b * 100 + c.s));
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    ASSERT_TRUE((*own)->Run(in, out, {2, gears, extent}).ok());
    xs.push_back(std::move(x));
    refs.push_back(std::move(y));
    shared_exe.push_back(*shared);
  }
  for (int i = 0; i < n; ++i) {  // the tensors moved: point their views at their storage
    xs[static_cast<size_t>(i)].dl.data = xs[static_cast<size_t>(i)].data.data();
    xs[static_cast<size_t>(i)].dl.shape = xs[static_cast<size_t>(i)].shape.data();
    refs[static_cast<size_t>(i)].dl.data = refs[static_cast<size_t>(i)].data.data();
  }
  EXPECT_EQ(arena->arena_usage().largest_need_bytes, largest);
  EXPECT_EQ(arena->arena_usage().held_bytes, 0);  // grown at the first run
  constexpr int kThreads = 4, kRounds = 15;
  std::atomic<int> identical{0}, runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int k = 0; k < n; ++k) {
          const int g = (k * (t + 1) + r + t) % n;  // each thread its own interleaving
          const Case& c = cases[g];
          const int64_t gears[] = {c.b, c.s};
          const int64_t extent[] = {c.b, c.valid_s};
          Tensor y(c.b, c.s, 32);
          const DLTensor in[] = {xs[static_cast<size_t>(g)].dl};
          const DLTensor out[] = {y.dl};
          runs.fetch_add(1);
          if (shared_exe[static_cast<size_t>(g)]->Run(in, out, {2, gears, extent}).ok() &&
              std::memcmp(y.data.data(), refs[static_cast<size_t>(g)].data.data(),
                          y.data.size() * sizeof(float)) == 0) {
            identical.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(runs.load(), kThreads * kRounds * n);
  EXPECT_EQ(identical.load(), runs.load());
  const ArenaUsage used = arena->arena_usage();
  EXPECT_GE(used.slots, 1);
  EXPECT_LE(used.slots, kThreads);
  EXPECT_GE(used.held_bytes, largest);  // at least one slot ran the largest gear
  EXPECT_LE(used.held_bytes, largest * used.slots);

  // Evicting the largest gear shrinks the arena to the next largest.
  const auto it = std::find_if(shared_exe.begin(), shared_exe.end(),
                               [&](const auto& e) { return e->arena_bytes() == largest; });
  ASSERT_NE(it, shared_exe.end());
  shared_exe.erase(it);
  EXPECT_EQ(arena->arena_usage().largest_need_bytes, second);
  EXPECT_LE(arena->arena_usage().held_bytes, second * used.slots);
  shared_exe.clear();
  EXPECT_EQ(arena->arena_usage().largest_need_bytes, 0);
  EXPECT_EQ(arena->arena_usage().held_bytes, 0);
  EXPECT_EQ(arena->arena_usage().slots, used.slots);  // slots stay, empty
}

// One slot, gears run one after another: it grows to the larger gear (its
// buffer replaced, not added to) and serves the smaller one without growing.
TEST(OneDnn, ArenaSlotGrowsToTheLargestLiveGearOnce) {
  TransformerBlockOptions o;
  o.hidden = 32;
  o.heads = 4;
  auto backend = *MakeOneDnnTransformerBackend(o);
  auto run = [](Executable& exe, int64_t b, int64_t s) {
    const int64_t gears[] = {b, s};
    Tensor x(b, s, 32), y(b, s, 32);
    Randomize(&x, 5);
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    return exe.Run(in, out, {2, gears, gears});
  };
  const int64_t small_gears[] = {1, 8}, large_gears[] = {2, 32};
  auto small = *backend->Compile(small_gears);
  ASSERT_TRUE(run(*small, 1, 8).ok());
  EXPECT_EQ(backend->arena_usage().held_bytes, small->arena_bytes());
  auto large = *backend->Compile(large_gears);
  ASSERT_GT(large->arena_bytes(), small->arena_bytes());
  // A compile registers the need; the slot grows at the next run that needs it.
  EXPECT_EQ(backend->arena_usage().largest_need_bytes, large->arena_bytes());
  EXPECT_EQ(backend->arena_usage().held_bytes, small->arena_bytes());
  ASSERT_TRUE(run(*large, 2, 32).ok());
  ASSERT_TRUE(run(*small, 1, 8).ok());
  EXPECT_EQ(backend->arena_usage().held_bytes, large->arena_bytes());
  EXPECT_EQ(backend->arena_usage().slots, 1);
  large.reset();  // evicted and released: the free slot shrinks at once
  EXPECT_EQ(backend->arena_usage().held_bytes, 0);
  ASSERT_TRUE(run(*small, 1, 8).ok());
  EXPECT_EQ(backend->arena_usage().held_bytes, small->arena_bytes());
}

// The real block (hidden 32, 4 heads) behind an executor over BATCHSIZE
// {1, 2, 4} (splittable) x SEQLEN {8, 16, 32}, its arena capped (the
// out-of-memory tests). Need(b, s): a gear's arena need; Run(b, s): a random
// request, a successful output checked against the exact shape.
struct ArenaLimitedBlock {
  ArenaLimitedBlock() {
    o.hidden = 32;
    o.heads = 4;
    probe = *MakeOneDnnTransformerBackend(o);
  }
  int64_t Need(int64_t b, int64_t s) {
    const int64_t gears[] = {b, s};
    return (*probe->Compile(gears))->arena_bytes();
  }
  void Start(int64_t arena_limit_bytes) {
    o.arena_limit_bytes = arena_limit_bytes;
    pool = std::make_unique<GraphResourcePool>();
    RuntimeOptions ro;
    ro.clock = &clock;
    ro.pool = pool.get();
    ro.start_worker = false;
    runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {8, 16, 32}, false, false}}, ro);
    backend = *MakeOneDnnTransformerBackend(o);
    executor = *GearedExecutor::Create(runtime.get(), backend.get(), {});
  }
  absl::Status Run(int64_t b, int64_t s) {
    Tensor x(b, s, 32), y(b, s, 32);
    Randomize(&x, static_cast<uint64_t>(b * 100 + s));
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    const absl::Status st = executor->Run(in, out);
    if (st.ok()) {
      EXPECT_LT(MaxAbsDiff(y, RunExact(*probe, x)), 1e-5) << b << "x" << s;
    }
    return st;
  }
  // Releases the executor, the runtime and the pool (the cached gears); the
  // arena's usage afterwards.
  ArenaUsage ReleaseAll() {
    executor.reset();
    runtime.reset();
    pool.reset();
    return backend->arena_usage();
  }

  TransformerBlockOptions o;
  std::unique_ptr<Backend> probe;
  ManualClock clock{0};
  std::unique_ptr<GraphResourcePool> pool;
  std::unique_ptr<AdaptiveGearRuntime> runtime;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<GearedExecutor> executor;
};

// Fault injection on the real block: the arena's limit (arena_limit_bytes)
// makes its growth to a gear run out of memory at run time. The executor
// falls back to the variant's exact sizes (a smaller workspace, which the
// arena still grants), the output is right, the arena stays within its limit
// and consistent (a later smaller run works), and when everything is
// released the arena returns to nothing held and no need registered.
TEST(OneDnn, ArenaGrowthOutOfMemoryAtRunTimeFallsBackToTheExactSizes) {
  ArenaLimitedBlock f;
  ASSERT_LT(f.Need(1, 12), f.Need(1, 16));
  f.Start(f.Need(1, 12));         // gear (1,16) cannot grow its slot; (1,12) can
  ASSERT_TRUE(f.Run(1, 5).ok());  // gear (1,8)
  const int64_t before = f.backend->arena_usage().held_bytes;
  EXPECT_EQ(before, f.Need(1, 8));
  ASSERT_TRUE(f.Run(1, 12).ok());  // gear (1,16): its slot cannot grow; runs at (1,12)
  EXPECT_EQ(f.executor->stats().out_of_memory_fallbacks, 1u);
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
  EXPECT_EQ(f.executor->cached_executables(), 2u);
  ArenaUsage u = f.backend->arena_usage();
  EXPECT_EQ(u.held_bytes, f.Need(1, 12));  // the fallback's workspace, within the limit
  EXPECT_EQ(u.largest_need_bytes, f.Need(1, 16));
  EXPECT_EQ(u.slots, 1);
  ASSERT_TRUE(f.Run(1, 6).ok());  // a smaller gear reuses the slot
  EXPECT_EQ(f.backend->arena_usage().held_bytes, f.Need(1, 12));
  EXPECT_EQ(f.executor->GearMemoryBytes(), f.pool->bytes() + f.Need(1, 12));
  // At its exact sizes there is nothing smaller: that request fails, named.
  const absl::Status exact = f.Run(1, 16);
  EXPECT_EQ(exact.code(), absl::StatusCode::kResourceExhausted) << exact;
  EXPECT_THAT(exact.message(), HasSubstr("workspace"));
  EXPECT_EQ(f.backend->arena_usage().held_bytes, 0);  // the failed growth left the slot empty
  ASSERT_TRUE(f.Run(1, 6).ok());                      // and it is usable again: grown to
  EXPECT_EQ(f.backend->arena_usage().held_bytes,
            f.Need(1, 8));  // the run's own need, not the largest
  EXPECT_EQ(f.executor->stats().failed_requests, 1u);
  u = f.ReleaseAll();  // the cached gears released: no need, no buffer is left
  EXPECT_EQ(u.largest_need_bytes, 0);
  EXPECT_EQ(u.held_bytes, 0);
}

// The same fault on the real block, with a smaller batch gear cached: the
// default order's "split" serves the run as chunks of that gear (nothing
// larger is cached), whose workspace the arena grants; the output equals the
// exact-shape run, nothing is compiled for it, and once everything is
// released the arena holds nothing.
TEST(OneDnn, ArenaGrowthOutOfMemoryAtRunTimeSplitsOnACachedSmallerBatchGear) {
  ArenaLimitedBlock f;
  ASSERT_LT(f.Need(2, 16), f.Need(4, 16));
  f.Start(f.Need(2, 16));          // gear (4,16) cannot grow its slot; (2,16) can
  ASSERT_TRUE(f.Run(2, 12).ok());  // gear (2,16), cached
  ASSERT_TRUE(f.Run(3, 12).ok());  // gear (4,16): its slot cannot grow; chunks of 2 and 1 on (2,16)
  ExecutorStats s = f.executor->stats();
  EXPECT_EQ(s.out_of_memory_split, 1u);
  EXPECT_EQ(s.out_of_memory_fallbacks, 1u);
  EXPECT_EQ(s.compiles, 2u);  // (2,16) and (4,16); nothing for the fallback
  EXPECT_EQ(s.failed_requests, 0u);
  EXPECT_EQ(f.backend->arena_usage().held_bytes, f.Need(2, 16));  // within the limit
  ASSERT_TRUE(f.Run(4, 16).ok());  // at (4,16)'s exact sizes: split into 2 and 2
  EXPECT_EQ(f.executor->stats().out_of_memory_split, 2u);
  EXPECT_EQ(f.executor->GearMemoryBytes(), f.pool->bytes() + f.Need(2, 16));
  const ArenaUsage u = f.ReleaseAll();
  EXPECT_EQ(u.largest_need_bytes, 0);
  EXPECT_EQ(u.held_bytes, 0);
}

// The memory model on the real block: fitted to three small gears, it
// predicts the memory of every other gear of the block's range (not yet
// compiled) within 10 %. The figure quoted in docs/MEMORY.md is this test's
// output (the largest error, printed).
double WorstPredictionError(const TransformerBlockOptions& o, int dims,
                            const std::vector<std::vector<int64_t>>& fit,
                            const std::vector<std::vector<int64_t>>& unseen) {
  auto backend = *MakeOneDnnTransformerBackend(o);
  auto model = GearMemoryModel::Create(
      {.num_dimensions = dims, .quadratic_dimension = backend->quadratic_memory_dimension()});
  EXPECT_TRUE(model.ok()) << model.status();
  auto measure = [&](const std::vector<int64_t>& g) {
    auto exe = backend->Compile(g);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return (*exe)->bytes() + (*exe)->arena_bytes();
  };
  for (const auto& g : fit) EXPECT_TRUE(model->Observe(g, measure(g)).ok());
  double worst = 0;
  for (const auto& g : unseen) {
    auto predicted = model->Predict(g);
    EXPECT_TRUE(predicted.ok()) << predicted.status();
    const int64_t measured = measure(g);
    const double error =
        std::fabs(static_cast<double>(*predicted - measured)) / static_cast<double>(measured);
    EXPECT_LE(error, 0.10) << "gear " << ::testing::PrintToString(g) << ": predicted " << *predicted
                           << ", measured " << measured;
    worst = std::max(worst, error);
  }
  return worst;
}

TEST(OneDnn, MemoryModelPredictsUncompiledGearsWithinTenPercent) {
  {
    // The main job's block (hidden 64, 4 heads, sequence only).
    TransformerBlockOptions o;
    o.batch_dimension = -1;
    o.seq_dimension = 0;
    std::vector<std::vector<int64_t>> unseen;
    for (int64_t s : {1, 2, 3, 4, 5, 24, 48, 64, 100, 128, 200, 256, 300, 512, 700, 1000, 1024})
      unseen.push_back({s});
    const double worst = WorstPredictionError(o, 1, {{8}, {16}, {32}}, unseen);
    std::printf("memory model, seq 1..1024 (fit on 8, 16, 32): largest error %.2f%%\n",
                100 * worst);
  }
  {
    // Batch x sequence.
    TransformerBlockOptions o;
    o.hidden = 32;
    o.heads = 4;
    std::vector<std::vector<int64_t>> unseen;
    for (int64_t b : {1, 2, 4, 8, 16})
      for (int64_t s : {1, 4, 16, 64, 128, 256})
        if (!(b == 1 && s == 16)) unseen.push_back({b, s});
    const double worst = WorstPredictionError(o, 2, {{1, 8}, {2, 8}, {1, 32}, {1, 16}}, unseen);
    std::printf("memory model, batch 1..16 x seq 1..256 (fit on 4 gears): largest error %.2f%%\n",
                100 * worst);
  }
}

// Through the executor: requests on three threads while updates evict and
// re-add a gear (its executable released mid-traffic, the arena shrinking
// and growing again) give what the per-gear workspaces give, and the arena
// ends within slots x the largest live gear.
TEST(OneDnn, ArenaUnderConcurrentRequestsAndEvictionsMatchesPerGearWorkspaces) {
  OneDnnFixture f;
  OneDnnFixture per_gear(/*shared_arena=*/false);
  const std::pair<int64_t, int64_t> shapes[] = {{3, 5}, {2, 31}, {4, 16}, {1, 1}, {9, 8}, {2, 12}};
  std::vector<Tensor> xs, refs;
  for (auto [b, s] : shapes) {
    Tensor x(b, s, 32);
    Randomize(&x, static_cast<uint64_t>(b * 1000 + s));
    xs.push_back(x);
    refs.push_back(RunExact(*per_gear.backend, x));
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i].dl.data = xs[i].data.data();
    xs[i].dl.shape = xs[i].shape.data();
  }
  std::atomic<int> good{0}, runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 12; ++r) {
        for (size_t k = 0; k < xs.size(); ++k) {
          const size_t i = (k + static_cast<size_t>(t + r)) % xs.size();
          Tensor y(xs[i].shape[0], xs[i].shape[1], 32);
          const DLTensor in[] = {xs[i].dl};
          const DLTensor out[] = {y.dl};
          runs.fetch_add(1);
          if (f.executor->Run(in, out).ok() && MaxAbsDiff(y, refs[i]) < 1e-5) good.fetch_add(1);
        }
      }
    });
  }
  // Evict SEQLEN 16 and 32 (the largest), then bring them back, a few times.
  for (int u = 0; u < 6; ++u) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::vector<std::vector<int64_t>> gears =
        u % 2 == 0 ? std::vector<std::vector<int64_t>>{{1, 2, 4}, {8, 64}}
                   : std::vector<std::vector<int64_t>>{{1, 2, 4}, {8, 16, 32}};
    ASSERT_TRUE(f.runtime->CommitUpdate(gears, 0.0).ok());
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), runs.load());
  EXPECT_EQ(f.executor->stats().failed_requests, 0u);
  const ArenaUsage used = f.backend->arena_usage();
  EXPECT_LE(used.slots, 3);
  EXPECT_LE(used.held_bytes, used.largest_need_bytes * used.slots);
  int64_t largest = 0;
  for (const GearMemory& g : f.executor->cached_gear_memory())
    largest = std::max(largest, g.arena_bytes);
  EXPECT_EQ(used.largest_need_bytes, largest);  // released gears no longer count
}

// The budget probe watching an executor reads the pool plus the arena.
TEST(OneDnn, BudgetProbeWatchingTheExecutorCountsTheArena) {
  OneDnnFixture f;
  Tensor x(2, 12, 32), y(2, 12, 32);
  Randomize(&x, 4);
  const DLTensor in[] = {x.dl};
  const DLTensor out[] = {y.dl};
  ASSERT_TRUE(f.executor->Run(in, out).ok());  // gear (2, 16)
  const int64_t held = f.backend->arena_usage().held_bytes;
  ASSERT_GT(held, 0);
  EXPECT_EQ(f.pool.bytes(), 0);
  PoolBudgetMemoryProbe probe(&f.pool, 4 * held);
  EXPECT_DOUBLE_EQ(*probe.UsageFraction(), 0.0);  // the pool alone
  probe.Watch(f.executor.get());
  EXPECT_DOUBLE_EQ(*probe.UsageFraction(), 0.25);  // the pool and the arena
}

TEST(OneDnn, RegistryAndOptionErrors) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  ASSERT_TRUE(RegisterBuiltinBackends().ok());  // idempotent
  auto b = BackendRegistry::Global().Create("onednn", {{"hidden", "24"}, {"heads", "3"}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->signature().inputs[0].shape[2], 24);
  EXPECT_THAT(BackendRegistry::Global()
                  .Create("onednn", {{"hidden", "24"}, {"heads", "5"}})
                  .status()
                  .message(),
              HasSubstr("heads: 5"));
  EXPECT_THAT(BackendRegistry::Global().Create("onednn", {{"hiden", "24"}}).status().message(),
              HasSubstr("onednn.hiden"));
  EXPECT_THAT(BackendRegistry::Global().Create("tpu", {}).status().message(),
              HasSubstr("one of: "));
  EXPECT_THAT(BackendRegistry::Global().Create("onednn", {{"hidden", "x"}}).status().message(),
              HasSubstr("hidden: \"x\""));
  EXPECT_THAT(BackendRegistry::Global().Create("onednn", {{"arena", "2"}}).status().message(),
              HasSubstr("arena"));
  EXPECT_THAT(
      BackendRegistry::Global().Create("onednn", {{"arena_limit", "-1"}}).status().message(),
      HasSubstr("arena_limit"));
  TransformerBlockOptions negative;
  negative.arena_limit_bytes = -1;
  EXPECT_THAT(MakeOneDnnTransformerBackend(negative).status().message(),
              HasSubstr("arena_limit_bytes: -1"));
  auto per_gear = BackendRegistry::Global().Create("onednn", {{"arena", "0"}});
  ASSERT_TRUE(per_gear.ok()) << per_gear.status();
  const int64_t gears[] = {1, 4};
  auto exe = (*per_gear)->Compile(gears);
  ASSERT_TRUE(exe.ok());
  EXPECT_GT((*exe)->bytes(), 0);
  EXPECT_EQ((*exe)->arena_bytes(), 0);
  EXPECT_EQ((*per_gear)->arena_usage().largest_need_bytes, 0);
}

}  // namespace
}  // namespace gearbox
