#include "gearbox/tensor_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace gearbox {
namespace {

using ::testing::HasSubstr;

// A host float tensor that owns its data.
struct HostTensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact
  DLTensor dl{};

  explicit HostTensor(std::vector<int64_t> s, float fill = 0.0f) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    data.assign(static_cast<size_t>(n), fill);
    Bind();
  }
  void Bind() {
    dl.data = data.data();
    dl.device = {kDLCPU, 0};
    dl.ndim = static_cast<int>(shape.size());
    dl.dtype = {kDLFloat, 32, 1};
    dl.shape = shape.data();
    dl.strides = strides.empty() ? nullptr : strides.data();
    dl.byte_offset = 0;
  }
  float& at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * shape[1] + j)]; }
};

GearSet BatchSeq(std::vector<int64_t> batch, std::vector<int64_t> seq) {
  return *GearSet::Create(
      {{"BATCHSIZE", std::move(batch), true, false}, {"SEQLEN", std::move(seq), false, false}});
}

TEST(TensorOps, PadSplitRunRecoverEqualsExactComputation) {
  const GearSet gears = BatchSeq({1, 2, 4}, {4, 8});
  const int64_t batch = 11, seq = 5;  // batch: 4,4,+3 (gear 4); seq: 5 -> 8
  HostTensor input({batch, seq});
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < seq; ++j) input.at(i, j) = static_cast<float>(i * 100 + j);
  const int64_t raw[] = {batch, seq};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const AxisBinding bindings[] = {{0, 0}, {1, 1}};
  HostTensor output({batch, seq}, -1.0f);
  int variants = 0;
  plan->ForEachVariant([&](const Variant& v) {
    HostTensor chunk({v.gear[0], v.gear[1]});
    ASSERT_TRUE(GatherChunk(input.dl, bindings, v, -7.0, &chunk.dl).ok());
    // Padding holds the pad value, valid cells hold the input.
    for (int64_t i = 0; i < v.gear[0]; ++i) {
      for (int64_t j = 0; j < v.gear[1]; ++j) {
        const bool valid = i < v.extent[0] && j < v.extent[1];
        const float expect = valid ? input.at(v.offset[0] + i, j) : -7.0f;
        ASSERT_EQ(chunk.at(i, j), expect) << i << "," << j;
      }
    }
    // "Model": y = 2x + 1, shape-preserving.
    for (float& x : chunk.data) x = 2 * x + 1;
    ASSERT_TRUE(ScatterChunk(chunk.dl, bindings, v, &output.dl).ok());
    ++variants;
  });
  EXPECT_EQ(variants, 3);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < seq; ++j) EXPECT_EQ(output.at(i, j), 2 * input.at(i, j) + 1);
}

TEST(TensorOps, RecoverSlicesEveryBoundOutputAxis) {
  // Output [seq, hidden, batch]: both gear dimensions appear, in another order.
  const GearSet gears = BatchSeq({2, 4}, {8});
  const int64_t raw[] = {6, 5};  // batch 4 + 2; seq 5 -> 8
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const AxisBinding out_bindings[] = {{0, 1}, {2, 0}};
  const int64_t hidden = 3;
  HostTensor output({5, hidden, 6}, -1.0f);
  plan->ForEachVariant([&](const Variant& v) {
    HostTensor chunk({v.gear[1], hidden, v.gear[0]});
    for (int64_t s = 0; s < v.gear[1]; ++s)
      for (int64_t h = 0; h < hidden; ++h)
        for (int64_t b = 0; b < v.gear[0]; ++b) {
          // Encodes the global position; padded cells get a poison value.
          const bool valid = s < v.extent[1] && b < v.extent[0];
          chunk.data[static_cast<size_t>((s * hidden + h) * v.gear[0] + b)] =
              valid ? static_cast<float>(s * 1000 + h * 100 + (v.offset[0] + b)) : 9999.0f;
        }
    ASSERT_TRUE(ScatterChunk(chunk.dl, out_bindings, v, &output.dl).ok());
  });
  for (int64_t s = 0; s < 5; ++s)
    for (int64_t h = 0; h < hidden; ++h)
      for (int64_t b = 0; b < 6; ++b)
        EXPECT_EQ(output.data[static_cast<size_t>((s * hidden + h) * 6 + b)],
                  static_cast<float>(s * 1000 + h * 100 + b));
}

TEST(TensorOps, StridedInputIsGatheredCorrectly) {
  // A transposed view: logical [batch=3, seq=2] over storage [2][3].
  const GearSet gears = BatchSeq({4}, {2});
  HostTensor storage({2, 3});
  for (int i = 0; i < 6; ++i) storage.data[i] = static_cast<float>(i);
  HostTensor view({3, 2});
  view.data = storage.data;
  view.strides = {1, 3};
  view.Bind();
  const int64_t raw[] = {3, 2};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  const AxisBinding bindings[] = {{0, 0}, {1, 1}};
  plan->ForEachVariant([&](const Variant& v) {
    HostTensor chunk({4, 2});
    ASSERT_TRUE(GatherChunk(view.dl, bindings, v, 0.0, &chunk.dl).ok());
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t s = 0; s < 2; ++s) EXPECT_EQ(chunk.at(b, s), storage.data[s * 3 + b]);
    EXPECT_EQ(chunk.at(3, 0), 0.0f);
  });
}

TEST(TensorOps, BadTensorsGetErrorsNamingTheField) {
  const GearSet gears = BatchSeq({4}, {8});
  const int64_t raw[] = {3, 5};
  auto plan = MakePlan(gears, raw);
  ASSERT_TRUE(plan.ok());
  Variant v;
  plan->ForEachVariant([&](const Variant& x) { v = x; });
  const AxisBinding bindings[] = {{0, 0}, {1, 1}};
  HostTensor input({3, 5});
  HostTensor wrong_shape({4, 7});
  EXPECT_THAT(GatherChunk(input.dl, bindings, v, 0, &wrong_shape.dl).message(),
              HasSubstr("chunk.shape"));
  HostTensor rank1({4});
  EXPECT_THAT(GatherChunk(input.dl, bindings, v, 0, &rank1.dl).message(), HasSubstr("chunk.ndim"));
  HostTensor chunk({4, 8});
  chunk.dl.dtype = {kDLInt, 32, 1};
  EXPECT_THAT(GatherChunk(input.dl, bindings, v, 0, &chunk.dl).message(), HasSubstr("chunk.dtype"));
  chunk.Bind();
  HostTensor small_input({2, 5});
  EXPECT_THAT(GatherChunk(small_input.dl, bindings, v, 0, &chunk.dl).message(),
              HasSubstr("input.shape[0]: 2"));
  const AxisBinding bad_axis[] = {{5, 0}};
  EXPECT_THAT(GatherChunk(input.dl, bad_axis, v, 0, &chunk.dl).message(),
              HasSubstr("binding.axis: 5"));
  const AxisBinding bad_dim[] = {{0, 3}};
  EXPECT_THAT(GatherChunk(input.dl, bad_dim, v, 0, &chunk.dl).message(),
              HasSubstr("binding.dimension: 3"));
  HostTensor gpu({3, 5});
  gpu.dl.device = {kDLCUDA, 0};
  EXPECT_THAT(GatherChunk(gpu.dl, bindings, v, 0, &chunk.dl).message(), HasSubstr("input.device"));
  HostTensor bf({4, 8});
  bf.dl.dtype = {kDLBfloat, 16, 1};
  HostTensor bf_in({3, 5});
  bf_in.dl.dtype = {kDLBfloat, 16, 1};
  EXPECT_THAT(GatherChunk(bf_in.dl, bindings, v, 1.5, &bf.dl).message(), HasSubstr("pad_value"));
  EXPECT_TRUE(GatherChunk(bf_in.dl, bindings, v, 0.0, &bf.dl).ok());
  HostTensor vec({4, 8});
  vec.dl.dtype = {kDLFloat, 32, 4};
  EXPECT_THAT(ScatterChunk(vec.dl, bindings, v, &input.dl).message(), HasSubstr("dtype"));
  EXPECT_FALSE(ScatterChunk(chunk.dl, bindings, v, nullptr).ok());
}

TEST(TensorOps, IntegerPadValues) {
  const GearSet gears = *GearSet::Create({{"SEQLEN", {4}, false, false}});
  std::vector<int32_t> in = {1, 2};
  int64_t in_shape[] = {2};
  DLTensor input{in.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, in_shape, nullptr, 0};
  std::vector<int32_t> out(4, 0);
  int64_t out_shape[] = {4};
  DLTensor chunk{out.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, out_shape, nullptr, 0};
  const int64_t raw[] = {2};
  auto plan = MakePlan(gears, raw);
  const AxisBinding bindings[] = {{0, 0}};
  plan->ForEachVariant(
      [&](const Variant& v) { ASSERT_TRUE(GatherChunk(input, bindings, v, -1, &chunk).ok()); });
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, -1, -1}));
}

}  // namespace
}  // namespace gearbox
