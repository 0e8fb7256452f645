#include "gearbox/plan.h"

#include <algorithm>

#include "src/common/errors.h"

namespace gearbox {

int64_t DimensionPlan::num_chunks() const {
  int64_t chunks = 0;
  for (int i = 0; i < num_groups; ++i) chunks += groups[i].count;
  return chunks;
}

bool Plan::any_split() const {
  return std::any_of(dimensions_, dimensions_ + num_dimensions_,
                     [](const DimensionPlan& d) { return d.split; });
}

bool Plan::any_eager() const {
  return std::any_of(dimensions_, dimensions_ + num_dimensions_,
                     [](const DimensionPlan& d) { return d.eager; });
}

bool Plan::any_uncompiled() const {
  if (any_eager()) return true;
  if (!joint_) return false;
  for (int i = 0; i < num_variant_groups_; ++i) {
    if (joint_groups_[i].eager) return true;
  }
  return false;
}

bool Plan::any_off_cell() const {
  if (!joint_) return false;
  for (int i = 0; i < num_variant_groups_; ++i) {
    if (joint_groups_[i].off_cell) return true;
  }
  return false;
}

VariantGroup Plan::variant_group(int index) const {
  VariantGroup vg;
  vg.count = 1;
  vg.eager = any_eager();
  const int flat = index;
  // Mixed-radix decomposition, last dimension fastest (as ForEachVariant).
  for (int d = num_dimensions_ - 1; d >= 0; --d) {
    const int radix = dimensions_[d].num_groups;
    vg.group[d] = index % radix;
    index /= radix;
    const ChunkGroup& g = dimensions_[d].groups[vg.group[d]];
    vg.count *= g.count;
    vg.gear[d] = g.gear;
  }
  if (joint_) {
    const JointGroup& j = joint_groups_[flat];
    vg.gear[0] = j.gear[0];
    vg.gear[1] = j.gear[1];
    vg.eager = j.eager;
  }
  return vg;
}

bool Plan::exact() const {
  if (num_variants_ != 1 || any_uncompiled()) return false;
  const VariantGroup vg = variant_group(0);
  for (int d = 0; d < num_dimensions_; ++d) {
    if (vg.gear[d] != dimensions_[d].raw) return false;
  }
  return true;
}

double Plan::padded_volume() const {
  double total = 0.0;
  for (int i = 0, n = num_variant_groups(); i < n; ++i) {
    const VariantGroup vg = variant_group(i);
    double volume = static_cast<double>(vg.count);
    for (int d = 0; d < num_dimensions_; ++d) volume *= static_cast<double>(vg.gear[d]);
    total += volume;
  }
  return total;
}

double Plan::raw_volume() const {
  double volume = 1.0;
  for (int d = 0; d < num_dimensions_; ++d) volume *= static_cast<double>(dimensions_[d].raw);
  return volume;
}

[[gnu::always_inline]] inline bool Plan::FillSingleVariant(const GearSet& gears,
                                                           std::span<const int64_t> raw,
                                                           Plan* plan) {
  const int n = gears.num_dimensions();
  if (static_cast<int>(raw.size()) != n || gears.scheme() != GearScheme::kIndependent) return false;
  for (int d = 0; d < n; ++d) {
    const int64_t size = raw[d];
    const int64_t max = gears.max_gear(d);
    if (size < 1 || size > max) return false;
    DimensionPlan& dp = plan->dimensions_[d];
    dp.raw = size;
    dp.max_gear = max;
    dp.split = false;
    dp.eager = false;
    dp.num_groups = 1;
    dp.groups[0] = {gears.MapToGear(d, size), size, 1, 0};
  }
  plan->snapshot_version_ = gears.version();
  plan->joint_ = false;
  plan->num_dimensions_ = n;
  plan->num_variant_groups_ = 1;
  plan->num_variants_ = 1;
  return true;
}

absl::Status MakePlan(const GearSet& gears, std::span<const int64_t> raw, Plan* plan) {
  if (Plan::FillSingleVariant(gears, raw, plan)) return absl::OkStatus();
  return Plan::FillGeneral(gears, raw, plan);
}

absl::Status Plan::FillGeneral(const GearSet& gears, std::span<const int64_t> raw, Plan* plan) {
  const int n = gears.num_dimensions();
  if (static_cast<int>(raw.size()) != n) {
    return internal::InvalidField("dims", internal::Cat(raw.size(), " sizes"),
                                  internal::Cat("one size per dimension (", n, ")"));
  }
  plan->snapshot_version_ = gears.version();
  plan->joint_ = false;
  plan->num_dimensions_ = n;
  plan->num_variant_groups_ = 1;
  plan->num_variants_ = 1;
  for (int d = 0; d < n; ++d) {
    const int64_t size = raw[d];
    const DimensionSpec& spec = gears.dimension(d);
    if (size < 1) {
      return internal::InvalidFieldValue(spec.name, size, "request sizes must be >= 1");
    }
    DimensionPlan& dp = plan->dimensions_[d];
    dp.raw = size;
    dp.max_gear = spec.gears.back();
    dp.split = false;
    dp.eager = false;
    const int64_t gear = gears.MapToGear(d, size);
    if (gear > 0) {
      dp.num_groups = 1;
      dp.groups[0] = {gear, size, 1, 0};
      continue;  // one chunk: the products are unchanged
    }
    const int64_t max = dp.max_gear;
    if (spec.splittable) {
      dp.split = true;
      const int64_t full = size / max;
      const int64_t rest = size % max;
      dp.groups[0] = {max, max, full, 0};
      dp.num_groups = 1;
      if (rest > 0) {
        dp.groups[1] = {gears.MapToGear(d, rest), rest, 1, full * max};
        dp.num_groups = 2;
      }
      plan->num_variant_groups_ *= dp.num_groups;
      const int64_t chunks = dp.num_chunks();
      if (chunks > kMaxVariantsPerRequest / plan->num_variants_) {
        return internal::InvalidFieldValue(
            spec.name, size,
            internal::Cat("the request would run more than ", kMaxVariantsPerRequest,
                          " chunks (largest gear ", max, ")"));
      }
      plan->num_variants_ *= chunks;
    } else if (spec.eager_fallback) {
      dp.eager = true;
      dp.num_groups = 1;
      dp.groups[0] = {size, size, 1, 0};
    } else {
      return internal::InvalidFieldValue(
          spec.name, size,
          internal::Cat("the largest gear is ", max,
                        " and this dimension neither splits nor has eager_fallback"));
    }
  }
  if (gears.scheme() != GearScheme::kIndependent) Plan::AssignCombinations(gears, plan);
  return absl::OkStatus();
}

void Plan::AssignCombinations(const GearSet& gears, Plan* plan) {
  if (plan->any_eager()) return;  // an eager dimension runs the whole request uncompiled
  // Each variant group's cell runs on the combination the gear set gives
  // it, or (no combination serves it) uncompiled at its extents.
  plan->joint_ = true;
  const DimensionPlan& a = plan->dimensions_[0];
  const DimensionPlan& b = plan->dimensions_[1];
  for (int i = 0; i < a.num_groups; ++i) {
    for (int j = 0; j < b.num_groups; ++j) {
      JointGroup& jg = plan->joint_groups_[i * b.num_groups + j];
      const GearCombination* c = gears.CombinationForCell(
          gears.MapToGearIndex(0, a.groups[i].gear), gears.MapToGearIndex(1, b.groups[j].gear));
      jg.eager = c == nullptr;
      jg.off_cell = c == nullptr || (*c)[0] != a.groups[i].gear || (*c)[1] != b.groups[j].gear;
      jg.gear[0] = c ? (*c)[0] : a.groups[i].extent;
      jg.gear[1] = c ? (*c)[1] : b.groups[j].extent;
    }
  }
}

absl::StatusOr<Plan> MakePlan(const GearSet& gears, std::span<const int64_t> raw) {
  Plan plan;
  if (absl::Status s = MakePlan(gears, raw, &plan); !s.ok()) return s;
  return plan;
}

}  // namespace gearbox
