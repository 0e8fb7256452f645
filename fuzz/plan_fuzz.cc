// Fuzzes the planner with arbitrary gear sets and request sizes: every plan
// covers the request exactly once, chunks fit their gears, counts agree,
// and transform/recover on real tensors reproduces the input.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gearbox/plan.h"
#include "gearbox/tensor_ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int dims = in.ConsumeIntegralInRange<int>(1, 3);
  std::vector<gearbox::DimensionSpec> specs;
  for (int d = 0; d < dims; ++d) {
    gearbox::DimensionSpec s;
    s.name = "D" + std::to_string(d);
    const int n = in.ConsumeIntegralInRange<int>(1, 6);
    for (int i = 0; i < n; ++i) s.gears.push_back(in.ConsumeIntegralInRange<int64_t>(-2, 40));
    s.splittable = in.ConsumeBool();
    s.eager_fallback = !s.splittable && in.ConsumeBool();
    specs.push_back(s);
  }
  // Two dimensions may be joint or sparse, with any combinations.
  gearbox::CombinationSpec combinations;
  if (dims == 2 && in.ConsumeBool()) {
    combinations.scheme =
        in.ConsumeBool() ? gearbox::GearScheme::kJoint : gearbox::GearScheme::kSparse;
    const int n = in.ConsumeIntegralInRange<int>(0, 8);
    for (int i = 0; i < n; ++i) {
      combinations.combinations.push_back(
          {in.ConsumeIntegralInRange<int64_t>(-1, 40), in.ConsumeIntegralInRange<int64_t>(-1, 40)});
    }
    combinations.cover_ratio = in.ConsumeFloatingPointInRange<double>(0.5, 50.0);
  }
  auto gears = gearbox::GearSet::Create(specs, 1, 0.0, combinations);
  if (!gears.ok()) return 0;
  std::vector<int64_t> raw;
  for (int d = 0; d < dims; ++d) {
    raw.push_back(in.ConsumeBool() ? in.ConsumeIntegral<int64_t>()
                                   : in.ConsumeIntegralInRange<int64_t>(-1, 100));
  }
  gearbox::Plan plan;
  if (!gearbox::MakePlan(*gears, raw, &plan).ok()) return 0;
  // Counts agree with the groups; each dimension's chunks tile [0, raw).
  int64_t groups_total = 0;
  for (int g = 0; g < plan.num_variant_groups(); ++g) groups_total += plan.variant_group(g).count;
  if (groups_total != plan.num_variants()) __builtin_trap();
  for (int d = 0; d < dims; ++d) {
    const gearbox::DimensionPlan& dp = plan.dimension(d);
    int64_t covered = 0;
    for (int g = 0; g < dp.num_groups; ++g) {
      const gearbox::ChunkGroup& c = dp.groups[g];
      if (c.extent < 1 || c.extent > c.gear || c.offset != covered) __builtin_trap();
      if (!dp.eager && !gears->Contains(d, c.gear)) __builtin_trap();
      covered += c.count * c.extent;
    }
    if (covered != dp.raw) __builtin_trap();
  }
  // Every variant group runs on a compiled combination covering its chunks
  // within the cover ratio, or uncompiled at exactly its chunks.
  for (int g = 0; g < plan.num_variant_groups(); ++g) {
    const gearbox::VariantGroup vg = plan.variant_group(g);
    double volume = 1, cell = 1;
    for (int d = 0; d < dims; ++d) {
      const gearbox::ChunkGroup& c = plan.dimension(d).groups[vg.group[d]];
      if (vg.gear[d] < c.extent) __builtin_trap();
      if (vg.eager && !plan.any_eager() && vg.gear[d] != c.extent) __builtin_trap();
      volume *= static_cast<double>(vg.gear[d]);
      cell *= static_cast<double>(c.gear);
    }
    if (gears->scheme() != gearbox::GearScheme::kIndependent && !vg.eager) {
      const gearbox::GearCombination k{vg.gear[0], vg.gear[1]};
      const auto& list = gears->combinations();
      if (!std::binary_search(list.begin(), list.end(), k)) __builtin_trap();
      if (volume > gears->cover_ratio() * cell * (1 + 1e-12)) __builtin_trap();
    }
  }
  // Volumes are doubles: allow rounding at sizes near 2^63.
  if (plan.padded_volume() < plan.raw_volume() * (1 - 1e-9)) __builtin_trap();
  // Transform + recover with identity "execution" on small requests.
  double volume = 1;
  for (int64_t r : raw) volume *= static_cast<double>(r);
  if (plan.num_variants() > 64 || volume > 4096) return 0;
  std::vector<int64_t> shape(raw.begin(), raw.end());
  std::vector<float> input(static_cast<size_t>(volume)), output(input.size(), -1);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i);
  DLTensor in_t{input.data(), {kDLCPU, 0}, dims, {kDLFloat, 32, 1}, shape.data(), nullptr, 0};
  DLTensor out_t{output.data(), {kDLCPU, 0}, dims, {kDLFloat, 32, 1}, shape.data(), nullptr, 0};
  std::vector<gearbox::AxisBinding> bindings;
  for (int d = 0; d < dims; ++d) bindings.push_back({d, d});
  bool ok = true;
  plan.ForEachVariant([&](const gearbox::Variant& v) {
    std::vector<int64_t> chunk_shape(v.gear, v.gear + dims);
    double n = 1;
    for (int64_t g : chunk_shape) n *= static_cast<double>(g);
    if (n > 1 << 20) return;
    std::vector<float> chunk(static_cast<size_t>(n));
    DLTensor c{chunk.data(), {kDLCPU, 0}, dims, {kDLFloat, 32, 1}, chunk_shape.data(), nullptr, 0};
    ok = ok && gearbox::GatherChunk(in_t, bindings, v, 0.0, &c).ok() &&
         gearbox::ScatterChunk(c, bindings, v, &out_t).ok();
  });
  if (ok && output != input) __builtin_trap();
  return 0;
}
