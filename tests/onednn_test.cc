// The oneDNN transformer block: checked against a plain C++ reference, and
// through the executor: for every request the recovered output equals the
// output of running the block at the exact unpadded shape.
#include "gearbox/backends/onednn.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "gearbox/backends/builtin.h"
#include "gearbox/executor.h"

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
  OneDnnFixture() {
    RuntimeOptions o;
    o.clock = &clock;
    o.pool = &pool;
    o.start_worker = false;
    runtime = *AdaptiveGearRuntime::Create(
        {{"BATCHSIZE", {1, 2, 4}, true, false}, {"SEQLEN", {8, 16, 32}, false, false}}, o);
    TransformerBlockOptions bo;
    bo.hidden = 32;
    bo.heads = 4;
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
  EXPECT_GT(f.pool.bytes(), 0);
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
}

}  // namespace
}  // namespace gearbox
