// Gear sets: the bucket values per named dimension, and the immutable
// snapshot (GearSet) that requests read and only the update path replaces.
#ifndef GEARBOX_GEAR_SET_H_
#define GEARBOX_GEAR_SET_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gearbox {

// Most dimensions a gear set may have (batch, sequence, image height, ...).
inline constexpr int kMaxDimensions = 8;
// Most gears a dimension may hold, initially and after any update.
inline constexpr int kMaxGearsPerDimension = 64;

// The conventional dimension names. Any name matching [A-Za-z0-9_.-]+ is allowed.
inline constexpr std::string_view kBatchSize = "BATCHSIZE";
inline constexpr std::string_view kSeqLen = "SEQLEN";

// Gear list of the TIMES policy: `min`, the powers of two above `min` up to
// `max`, then `max` if not already there. 3..100 -> [3,4,8,16,32,64,100].
// `field` names the setting in errors (for example "dims[0]").
absl::StatusOr<std::vector<int64_t>> MakeTimesGears(int64_t min, int64_t max,
                                                    std::string_view field = "policy");

// Sorts and de-duplicates an explicit list; every value must be >= 1 and the
// list must hold 1..kMaxGearsPerDimension gears.
absl::StatusOr<std::vector<int64_t>> NormalizeGears(std::vector<int64_t> gears,
                                                    std::string_view field = "gears");

// One dynamic dimension and its gears.
struct DimensionSpec {
  std::string name;
  std::vector<int64_t> gears;  // sorted ascending, unique, each >= 1
  // A request above the largest gear is cut into chunks of the largest gear
  // plus one padded remainder chunk. Default: true for BATCHSIZE only.
  bool splittable = false;
  // For a non-splittable dimension: a request above the largest gear runs at
  // its exact size (eager, uncompiled) instead of failing. Default: off.
  bool eager_fallback = false;
};

// Default splittability of a dimension by its name (BATCHSIZE splits).
bool DefaultSplittable(std::string_view dimension_name);

// An immutable gear set with a version: the snapshot requests plan against.
// Value type; cheap to read concurrently because nothing in it ever changes.
class GearSet {
 public:
  // Validates names (unique, [A-Za-z0-9_.-]+), gear lists and flags.
  static absl::StatusOr<GearSet> Create(std::vector<DimensionSpec> dimensions,
                                        uint64_t version = 1, double created_at = 0.0);

  int num_dimensions() const { return static_cast<int>(dimensions_.size()); }
  const DimensionSpec& dimension(int d) const { return dimensions_[d]; }
  const std::vector<DimensionSpec>& dimensions() const { return dimensions_; }
  // Index of the dimension called `name`, or -1.
  int FindDimension(std::string_view name) const;

  std::span<const int64_t> gears(int d) const { return dimensions_[d].gears; }
  int64_t max_gear(int d) const { return dimensions_[d].gears.back(); }
  int64_t min_gear(int d) const { return dimensions_[d].gears.front(); }
  bool Contains(int d, int64_t gear) const;
  // The gear a raw size maps to: the smallest gear >= raw (the smallest gear
  // for any raw at or below it). Returns -1 when raw exceeds the largest gear.
  // Branch-free binary search: request sizes are unpredictable.
  int64_t MapToGear(int d, int64_t raw) const {
    const std::vector<int64_t>& g = dimensions_[d].gears;
    if (raw > g.back()) return -1;
    const int64_t* base = g.data();
    size_t n = g.size();
    while (n > 1) {
      const size_t half = n / 2;
      base = (base[half - 1] < raw) ? base + half : base;
      n -= half;
    }
    return *base;
  }

  // Monotonically increasing per runtime; 1 for the initial set.
  uint64_t version() const { return version_; }
  // Clock time the set was published at.
  double created_at() const { return created_at_; }

  // The same dimensions with new gear lists (one per dimension), validated.
  absl::StatusOr<GearSet> WithGears(const std::vector<std::vector<int64_t>>& gears,
                                    uint64_t version, double created_at) const;

  // "BATCHSIZE=[1,2,4] SEQLEN=[128,256]"
  std::string DebugString() const;

 private:
  GearSet() = default;
  std::vector<DimensionSpec> dimensions_;
  uint64_t version_ = 0;
  double created_at_ = 0.0;
};

}  // namespace gearbox

#endif  // GEARBOX_GEAR_SET_H_
