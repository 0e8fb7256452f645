// Gear sets: the bucket values per named dimension, and the immutable
// snapshot (GearSet) that requests read and only the update path replaces.
#ifndef GEARBOX_GEAR_SET_H_
#define GEARBOX_GEAR_SET_H_

#include <array>
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

// Which gear combinations are compiled graphs (seeds/001 §17.5.3). The
// dimensions' gear lists form a grid; a request's variant maps to a cell of
// it (each dimension to its smallest gear >= the size) and runs:
enum class GearScheme {
  kIndependent,  // on that cell: every combination of gears is a graph
  kJoint,        // on the cheapest compiled combination covering the cell
                 // (every gear >= the cell's) whose size (product of gears)
                 // is at most cover_ratio times the cell's; else uncompiled
                 // at its exact size (the model's dynamic version)
  kSparse,       // on the cell if it is a compiled combination, else
                 // uncompiled at its exact size: joint with cover_ratio 1
};
std::string_view GearSchemeName(GearScheme scheme);
absl::StatusOr<GearScheme> ParseGearScheme(std::string_view name, std::string_view field = "scheme");

// Joint and sparse gear sets have exactly this many dimensions.
inline constexpr int kJointDimensions = 2;
// A compiled combination: one gear per dimension.
using GearCombination = std::array<int64_t, kJointDimensions>;

// Every cell of the grid of `a` x `b`.
std::vector<GearCombination> EveryCombination(std::span<const int64_t> a, std::span<const int64_t> b);

// The compiled combinations of a joint or sparse gear set.
struct CombinationSpec {
  GearScheme scheme = GearScheme::kIndependent;
  // Each coordinate must be a gear of its dimension; sorted and
  // de-duplicated on creation. Empty for kIndependent.
  std::vector<GearCombination> combinations;
  // Joint: how much larger than a cell the combination it runs on may be
  // (>= 1; infinity: any covering combination). Sparse: always 1.
  double cover_ratio = 4.0;
};

// A gear set's starting combinations as a runtime or config names them:
// for a joint or sparse set of two dimensions, no combinations means every
// cell of the initial gears (as many graphs as independent; the policy then
// keeps what the traffic pays for).
CombinationSpec InitialCombinations(const std::vector<DimensionSpec>& dimensions, CombinationSpec spec);

// An immutable gear set with a version: the snapshot requests plan against.
// Value type; cheap to read concurrently because nothing in it ever changes.
class GearSet {
 public:
  // Validates names (unique, [A-Za-z0-9_.-]+), gear lists and flags, and
  // for joint and sparse sets the combinations (two dimensions; each
  // coordinate a gear of its dimension; cover_ratio >= 1).
  static absl::StatusOr<GearSet> Create(std::vector<DimensionSpec> dimensions,
                                        uint64_t version = 1, double created_at = 0.0,
                                        CombinationSpec combinations = {});

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
  int64_t MapToGear(int d, int64_t raw) const {
    const int64_t* gear = FindGear(d, raw);
    return gear == nullptr ? -1 : *gear;
  }

  // The index of MapToGear's gear in gears(d), or -1 above the largest.
  int MapToGearIndex(int d, int64_t raw) const {
    const int64_t* gear = FindGear(d, raw);
    return gear == nullptr ? -1 : static_cast<int>(gear - dimensions_[d].gears.data());
  }

  GearScheme scheme() const { return scheme_; }
  // Compiled combinations (joint and sparse; empty for kIndependent), sorted.
  const std::vector<GearCombination>& combinations() const { return combinations_; }
  double cover_ratio() const { return cover_ratio_; }
  // Joint and sparse: the combination the cell (gear index per dimension)
  // runs on, or nullptr when none serves it (it runs uncompiled). One table
  // lookup.
  const GearCombination* CombinationForCell(int index0, int index1) const {
    const int c = cell_combination_[static_cast<size_t>(index0) * dimensions_[1].gears.size() +
                                    static_cast<size_t>(index1)];
    return c < 0 ? nullptr : &combinations_[static_cast<size_t>(c)];
  }

  // Monotonically increasing per runtime; 1 for the initial set.
  uint64_t version() const { return version_; }
  // Clock time the set was published at.
  double created_at() const { return created_at_; }

  // The same dimensions and scheme with new gear lists (one per dimension),
  // validated. Joint and sparse: `combinations` replaces the compiled
  // combinations; without it the ones whose gears all remain are kept.
  absl::StatusOr<GearSet> WithGears(const std::vector<std::vector<int64_t>>& gears, uint64_t version,
                                    double created_at,
                                    const std::vector<GearCombination>* combinations = nullptr) const;

  // "BATCHSIZE=[1,2,4] SEQLEN=[128,256]"
  std::string DebugString() const;

 private:
  GearSet() = default;
  // The smallest gear >= raw (the smallest for any raw at or below it), or
  // nullptr above the largest. Branch-free binary search: request sizes are
  // unpredictable.
  const int64_t* FindGear(int d, int64_t raw) const {
    const std::vector<int64_t>& g = dimensions_[d].gears;
    if (raw > g.back()) return nullptr;
    const int64_t* base = g.data();
    size_t n = g.size();
    while (n > 1) {
      const size_t half = n / 2;
      base = (base[half - 1] < raw) ? base + half : base;
      n -= half;
    }
    return base;
  }
  std::vector<DimensionSpec> dimensions_;
  GearScheme scheme_ = GearScheme::kIndependent;
  std::vector<GearCombination> combinations_;
  double cover_ratio_ = 1.0;
  // Joint and sparse: per cell of the grid (row-major by dimension 0), the
  // index in combinations_ it runs on, or -1.
  std::vector<int16_t> cell_combination_;
  uint64_t version_ = 0;
  double created_at_ = 0.0;
};

}  // namespace gearbox

#endif  // GEARBOX_GEAR_SET_H_
