// The CUDA Graph backend on a GPU; every test skips cleanly without one.
// tools/gpu_check.sh runs these and the capture/replay benchmark.
#include "gearbox/backends/cuda_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "gearbox/backends/builtin.h"
#include "gearbox/executor.h"

namespace gearbox {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device"

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  DLTensor dl{};
  Tensor(int64_t b, int64_t s, int64_t h) : data(static_cast<size_t>(b * s * h)), shape{b, s, h} {
    dl = DLTensor{data.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape.data(), nullptr, 0};
  }
};

TEST(CudaGraph, RegistryReportsMissingDeviceClearly) {
  ASSERT_TRUE(RegisterBuiltinBackends().ok());
  auto b = BackendRegistry::Global().Create("cuda_graph", {{"hidden", "16"}});
  if (!CudaDeviceAvailable()) {
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(b.status().message(), ::testing::HasSubstr("no CUDA device"));
  } else {
    EXPECT_TRUE(b.ok()) << b.status();
  }
}

TEST(CudaGraph, PaddedAndSplitReplaysEqualTheExactShape) {
  SKIP_WITHOUT_GPU();
  ManualClock clock(0);
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock;
  o.pool = &pool;
  o.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create(
      {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {8, 16, 32}, false, false}}, o);
  auto backend = *BackendRegistry::Global().Create("cuda_graph", {{"hidden", "16"}});
  auto executor = *GearedExecutor::Create(rt.get(), backend.get());
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  for (auto [b, s] : {std::pair<int64_t, int64_t>{3, 5}, {9, 13}, {4, 16}, {1, 1}}) {
    Tensor x(b, s, 16), y(b, s, 16), exact(b, s, 16);
    for (float& v : x.data) v = n(rng);
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    ASSERT_TRUE(executor->Run(in, out).ok());
    const int64_t gears[] = {b, s};
    auto exe = backend->Compile(gears);
    ASSERT_TRUE(exe.ok()) << exe.status();
    const DLTensor exact_out[] = {exact.dl};
    ASSERT_TRUE((*exe)->Run(in, exact_out, {2, gears, gears}).ok());
    for (size_t i = 0; i < y.data.size(); ++i)
      ASSERT_NEAR(y.data[i], exact.data[i], 1e-5) << b << "x" << s;
  }
  EXPECT_GT(backend->arena_usage().held_bytes, 0);
  CudaMemoryProbe probe;
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok());
  EXPECT_GT(*usage, 0.0);
  EXPECT_LE(*usage, 1.0);
}

TEST(CudaGraph, EvictionReleasesTheGraph) {
  SKIP_WITHOUT_GPU();
  ManualClock clock(0);
  GraphResourcePool pool;
  RuntimeOptions o;
  o.clock = &clock;
  o.pool = &pool;
  o.start_worker = false;
  auto rt = *AdaptiveGearRuntime::Create(
      {{"BATCHSIZE", {2, 4}, true, false}, {"SEQLEN", {8}, false, false}}, o);
  auto backend = *BackendRegistry::Global().Create("cuda_graph", {{"hidden", "8"}});
  auto executor = *GearedExecutor::Create(rt.get(), backend.get());
  Tensor x(2, 8, 8), y(2, 8, 8);
  const DLTensor in[] = {x.dl};
  const DLTensor out[] = {y.dl};
  ASSERT_TRUE(executor->Run(in, out).ok());
  ASSERT_EQ(pool.size(), 1u);
  ASSERT_TRUE(rt->CommitUpdate({{4}, {8}}, 1).ok());
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.released(), 1u);
  EXPECT_EQ(pool.release_failures(), 0u);
}

// Every gear's graph is captured against one arena of the largest live
// gear's buffers; when the largest goes the arena shrinks, and the graphs
// captured on the old one are captured again before they run, with the
// same results.
TEST(CudaGraph, OneArenaOfTheLargestLiveGearServesEveryGraph) {
  SKIP_WITHOUT_GPU();
  auto backend = *BackendRegistry::Global().Create("cuda_graph", {{"hidden", "16"}});
  const int64_t small[] = {1, 8}, large[] = {4, 32}, mid[] = {2, 16};
  auto a = *backend->Compile(small);
  auto b = *backend->Compile(large);
  auto c = *backend->Compile(mid);
  EXPECT_EQ(backend->arena_usage().held_bytes, b->arena_bytes());
  EXPECT_EQ(backend->arena_usage().largest_need_bytes, b->arena_bytes());
  EXPECT_EQ(backend->arena_usage().slots, 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> n;
  auto run = [&](Executable& exe, std::span<const int64_t> gears, const Tensor& x) {
    Tensor y(gears[0], gears[1], 16);
    const DLTensor in[] = {x.dl};
    const DLTensor out[] = {y.dl};
    EXPECT_TRUE(exe.Run(in, out, {2, gears.data(), gears.data()}).ok());
    return y.data;
  };
  Tensor xs(1, 8, 16), xm(2, 16, 16);
  for (float& v : xs.data) v = n(rng);
  for (float& v : xm.data) v = n(rng);
  const std::vector<float> before_small = run(*a, small, xs), before_mid = run(*c, mid, xm);
  ASSERT_TRUE(b->Release().ok());
  b.reset();
  EXPECT_EQ(backend->arena_usage().held_bytes, c->arena_bytes());  // shrunk to the largest left
  EXPECT_EQ(run(*a, small, xs), before_small);                     // captured again, same result
  EXPECT_EQ(run(*c, mid, xm), before_mid);
  ASSERT_TRUE(c->Release().ok());
  ASSERT_TRUE(a->Release().ok());
  EXPECT_EQ(backend->arena_usage().held_bytes, 0);
}

// One execution slot per concurrent run: while one gear's graph is being
// captured on slot 0 (its launch sequence waits on the host), another
// gear's compile finds no free slot and takes a second, with its own stream
// and buffer. Each gear then has a graph per slot it ran on; every run's
// output is right (an identity model: y = x, copied on the device).
TEST(CudaGraph, ConcurrentRunsTakeSeparateSlots) {
  SKIP_WITHOUT_GPU();
  std::mutex mu;
  std::condition_variable cv;
  bool capturing = false, open = false;
  CudaGraphOptions o;
  TensorSpec x{"x", {kDLFloat, 32, 1}, {1, 1, 4}, {{0, 0}, {1, 1}}};
  TensorSpec y = x;
  y.name = "y";
  o.signature.inputs = {x};
  o.signature.outputs = {y};
  o.launch = [&](cudaStream_t stream, std::span<const int64_t> gears, std::span<void* const> in,
                 std::span<void* const> out, const int64_t*) -> absl::Status {
    if (gears[1] == 32) {  // hold slot 0 until the other compile has taken slot 1
      std::unique_lock<std::mutex> lock(mu);
      capturing = true;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    }
    const size_t bytes = static_cast<size_t>(gears[0] * gears[1] * 4) * sizeof(float);
    if (cudaMemcpyAsync(out[0], in[0], bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
      return absl::InternalError("cudaMemcpyAsync");
    return absl::OkStatus();
  };
  auto backend = MakeCudaGraphBackend(std::move(o));
  ASSERT_TRUE(backend.ok()) << backend.status();
  const int64_t large[] = {2, 32}, small[] = {1, 8};
  absl::StatusOr<std::shared_ptr<Executable>> a;
  std::thread holder([&] { a = (*backend)->Compile(large); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return capturing; });
  }
  auto b = (*backend)->Compile(small);  // slot 0 is busy: a second slot
  ASSERT_TRUE(b.ok()) << b.status();
  {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
  }
  cv.notify_all();
  holder.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ArenaUsage u = (*backend)->arena_usage();
  EXPECT_EQ(u.slots, 2);
  EXPECT_EQ(u.largest_need_bytes, (*a)->arena_bytes());
  EXPECT_LE(u.held_bytes, 2 * (*a)->arena_bytes());
  auto run = [](Executable& exe, std::span<const int64_t> gears) {
    Tensor in(gears[0], gears[1], 4), out(gears[0], gears[1], 4);
    for (size_t i = 0; i < in.data.size(); ++i) in.data[i] = static_cast<float>(i);
    const DLTensor ins[] = {in.dl};
    const DLTensor outs[] = {out.dl};
    EXPECT_TRUE(exe.Run(ins, outs, {2, gears.data(), gears.data()}).ok());
    return out.data == in.data;
  };
  // Runs from four threads at once: each takes a free slot (or a new one),
  // capturing the gear's graph on it where it has none yet; every output is
  // right, and the slots hold at most slots x the largest need.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const bool ok = t % 2 ? run(**a, large) : run(**b, small);
        if (!ok) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  u = (*backend)->arena_usage();
  EXPECT_LE(u.held_bytes, u.slots * u.largest_need_bytes);
  ASSERT_TRUE((*a)->Release().ok());
  ASSERT_TRUE((*b)->Release().ok());
  EXPECT_EQ((*backend)->arena_usage().held_bytes, 0);
}

// The probe counts what this process holds on the device, and names a device
// that does not exist.
TEST(CudaMemoryProbe, CountsAnAllocationAndNamesABadDevice) {
  SKIP_WITHOUT_GPU();
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  const size_t bytes = std::min<size_t>(free_bytes / 2, size_t{1} << 30);
  void* block = nullptr;
  ASSERT_EQ(cudaMalloc(&block, bytes), cudaSuccess);
  CudaMemoryProbe probe;
  auto usage = probe.UsageFraction();
  ASSERT_EQ(cudaFree(block), cudaSuccess);
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_GE(*usage, static_cast<double>(bytes) / static_cast<double>(total));
  EXPECT_LE(*usage, 1.0);
  auto bad = CudaMemoryProbe(1 << 20).UsageFraction();
  static_cast<void>(cudaGetLastError());  // clears the error for the tests after this one
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("cudaSetDevice"));
}

}  // namespace
}  // namespace gearbox
