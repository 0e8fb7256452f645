// Plans: how one request runs on the current gears. A plan is a value (no
// hidden per-request state anywhere else): it says, per dimension, which
// chunks run on which gear, and everything recover needs to undo it.
#ifndef GEARBOX_PLAN_H_
#define GEARBOX_PLAN_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/gear_set.h"

namespace gearbox {

// `count` identical chunks along one dimension. Plain data: a plan sets
// every field of the groups it uses and never reads the others.
struct ChunkGroup {
  int64_t gear;    // compiled size of each chunk (the exact size when eager)
  int64_t extent;  // valid (unpadded) size of each chunk; gear - extent is padding
  int64_t count;   // how many such chunks
  int64_t offset;  // where the first of them starts in the request
};

// How one dimension of a request is handled.
struct GEARBOX_EXPORT DimensionPlan {
  int64_t raw;       // the request's size along this dimension
  int64_t max_gear;  // the snapshot's largest gear for it
  bool split;        // raw > max_gear on a splittable dimension
  bool eager;        // raw > max_gear on a dimension with eager fallback
  int num_groups;    // 1, or 2 when a split leaves a remainder
  ChunkGroup groups[2];

  int64_t num_chunks() const;
  // What the statistics record for each chunk of group `g`. A full chunk of
  // a split records the whole request size against the largest gear (so the
  // split-driven rule proposes the median oversize request); a remainder or
  // a padded request records its own size against its own gear; an eager
  // request records its size against the largest gear as overflow. In a
  // joint or sparse set this is the cell's gear, whatever combination the
  // variant ran on (the combination is the graph; the cell is where the
  // traffic is).
  int64_t event_raw(int g) const { return split && g == 0 ? raw : groups[g].extent; }
  int64_t event_gear(int g) const { return eager ? max_gear : groups[g].gear; }
};

// One executed shape: a chunk in every dimension.
struct Variant {
  int num_dimensions = 0;
  bool eager = false;                 // some dimension runs uncompiled at its exact size
  int64_t gear[kMaxDimensions] = {};  // compiled size per dimension
  int64_t extent[kMaxDimensions] = {};
  int64_t offset[kMaxDimensions] = {};
};

// Most executed variants one request may plan into (beyond it, MakePlan
// reports an error instead of planning billions of chunks).
inline constexpr int64_t kMaxVariantsPerRequest = int64_t{1} << 30;

// Identical variants, as one group index per dimension and how many they
// are, and the shape they run at: `gear` per dimension (a joint gear set's
// combination, or the exact extents of a variant that runs uncompiled).
// Plain data, filled by Plan::variant_group for the plan's dimensions only
// (the entries beyond them are unspecified: not zeroed, it is on the
// request path).
struct VariantGroup {
  int group[kMaxDimensions];
  int64_t count;
  int64_t gear[kMaxDimensions];
  bool eager;  // runs uncompiled
};

class GEARBOX_EXPORT Plan {
 public:
  uint64_t snapshot_version() const { return snapshot_version_; }
  int num_dimensions() const { return num_dimensions_; }
  const DimensionPlan& dimension(int d) const { return dimensions_[d]; }

  // Executed variants: the product over dimensions of their chunk counts.
  int64_t num_variants() const { return num_variants_; }
  bool any_split() const;
  // Some dimension runs above its largest gear at its exact size.
  bool any_eager() const;
  // Some variant runs uncompiled: an eager dimension, or a joint or sparse
  // gear set's cell that no compiled combination serves.
  bool any_uncompiled() const;
  // Joint and sparse gear sets: some variant does not run on its own cell's
  // compiled combination (uncompiled, or on a larger one covering the cell),
  // so compiling a combination could serve it better.
  bool any_off_cell() const;

  // Groups of identical variants (at most 2^num_dimensions), for recording
  // one event per executed variant without visiting each chunk.
  int num_variant_groups() const { return num_variant_groups_; }
  VariantGroup variant_group(int index) const;
  // One variant, compiled, exactly at the request's sizes (no copy needed).
  bool exact() const;

  // Visits every executed variant, the last dimension varying fastest.
  template <typename Visitor>
  void ForEachVariant(Visitor&& visit) const;

  // Elements computed (product of gears, summed over variants) and elements
  // requested (product of raw sizes): padded / raw - 1 is this request's waste.
  double padded_volume() const;
  double raw_volume() const;

 private:
  friend absl::Status MakePlan(const GearSet&, std::span<const int64_t>, Plan*);
  // The common case, without the general machinery: an independent gear
  // set and every size in 1..its dimension's largest gear (one variant, no
  // split, no eager dimension). Returns false, *plan then unspecified, for
  // anything else (MakePlan's general path plans it or reports the error).
  static bool FillSingleVariant(const GearSet& gears, std::span<const int64_t> raw, Plan* plan);
  // Everything else: splits, eager dimensions, joint and sparse sets, errors.
  [[gnu::noinline]] static absl::Status FillGeneral(const GearSet& gears,
                                                    std::span<const int64_t> raw, Plan* plan);
  // Joint and sparse gear sets: fills joint_groups_ (off the common path).
  [[gnu::noinline]] static void AssignCombinations(const GearSet& gears, Plan* plan);
  // Joint and sparse gear sets: per variant group (kJointDimensions
  // dimensions, so at most 4), the combination it runs on, or its extents
  // with `eager` when no combination serves it.
  struct JointGroup {
    int64_t gear[kJointDimensions];
    bool eager;
    bool off_cell;  // not on the cell's own combination (eager, or a larger one)
  };
  uint64_t snapshot_version_ = 0;
  bool joint_ = false;  // scheme_ is joint or sparse, and no dimension is eager
  JointGroup joint_groups_[1 << kJointDimensions];
  int num_dimensions_ = 0;
  int num_variant_groups_ = 0;                // product of num_groups
  int64_t num_variants_ = 0;                  // product of num_chunks
  DimensionPlan dimensions_[kMaxDimensions];  // only the first num_dimensions_ are set
};

// Plans a request with `raw[d]` along dimension d of `gears` into *plan.
// Pure, no allocation on success. Errors: wrong number of sizes, a size < 1,
// a size above the largest gear of a dimension that neither splits nor
// falls back, more than kMaxVariantsPerRequest chunks; *plan is then
// unspecified.
GEARBOX_EXPORT absl::Status MakePlan(const GearSet& gears, std::span<const int64_t> raw,
                                     Plan* plan);
// The same, returning the plan (one copy more).
GEARBOX_EXPORT absl::StatusOr<Plan> MakePlan(const GearSet& gears, std::span<const int64_t> raw);

template <typename Visitor>
void Plan::ForEachVariant(Visitor&& visit) const {
  const int n = num_dimensions_;
  // Odometer over (group, chunk-within-group) per dimension.
  int group[kMaxDimensions] = {};
  int64_t chunk[kMaxDimensions] = {};
  Variant v;
  v.num_dimensions = n;
  v.eager = any_eager();
  while (true) {
    for (int d = 0; d < n; ++d) {
      const ChunkGroup& g = dimensions_[d].groups[group[d]];
      v.gear[d] = g.gear;
      v.extent[d] = g.extent;
      v.offset[d] = g.offset + chunk[d] * g.extent;
    }
    if (joint_) {
      const JointGroup& j = joint_groups_[group[0] * dimensions_[1].num_groups + group[1]];
      v.gear[0] = j.gear[0];
      v.gear[1] = j.gear[1];
      v.eager = j.eager;
    }
    visit(static_cast<const Variant&>(v));
    int d = n - 1;
    for (; d >= 0; --d) {
      const DimensionPlan& dp = dimensions_[d];
      if (++chunk[d] < dp.groups[group[d]].count) break;
      chunk[d] = 0;
      if (++group[d] < dp.num_groups) break;
      group[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace gearbox

#endif  // GEARBOX_PLAN_H_
