// Gear sets: the bucket values per named dimension, and the immutable
// snapshot (GearSet) that requests read and only the update path replaces.
#ifndef GEARBOX_GEAR_SET_H_
#define GEARBOX_GEAR_SET_H_

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"

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
GEARBOX_EXPORT absl::StatusOr<std::vector<int64_t>> MakeTimesGears(
    int64_t min, int64_t max, std::string_view field = "policy");

// Sorts and de-duplicates an explicit list; every value must be >= 1 and the
// list must hold 1..kMaxGearsPerDimension gears.
GEARBOX_EXPORT absl::StatusOr<std::vector<int64_t>> NormalizeGears(
    std::vector<int64_t> gears, std::string_view field = "gears");

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
GEARBOX_EXPORT bool DefaultSplittable(std::string_view dimension_name);

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
GEARBOX_EXPORT std::string_view GearSchemeName(GearScheme scheme);
GEARBOX_EXPORT absl::StatusOr<GearScheme> ParseGearScheme(std::string_view name,
                                                          std::string_view field = "scheme");

// Joint and sparse gear sets have exactly this many dimensions.
inline constexpr int kJointDimensions = 2;
// A compiled combination: one gear per dimension.
using GearCombination = std::array<int64_t, kJointDimensions>;

// Every cell of the grid of `a` x `b`.
GEARBOX_EXPORT std::vector<GearCombination> EveryCombination(std::span<const int64_t> a,
                                                             std::span<const int64_t> b);

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
GEARBOX_EXPORT CombinationSpec InitialCombinations(const std::vector<DimensionSpec>& dimensions,
                                                   CombinationSpec spec);

// An immutable gear set with a version: the snapshot requests plan against.
// Value type; cheap to read concurrently because nothing in it ever changes.
class GEARBOX_EXPORT GearSet {
 public:
  // Validates names (unique, [A-Za-z0-9_.-]+), gear lists and flags, and
  // for joint and sparse sets the combinations (two dimensions; each
  // coordinate a gear of its dimension; cover_ratio >= 1).
  static absl::StatusOr<GearSet> Create(std::vector<DimensionSpec> dimensions, uint64_t version = 1,
                                        double created_at = 0.0, CombinationSpec combinations = {});

  int num_dimensions() const { return static_cast<int>(dimensions_.size()); }
  const DimensionSpec& dimension(int d) const { return dimensions_[d]; }
  const std::vector<DimensionSpec>& dimensions() const { return dimensions_; }
  // Index of the dimension called `name`, or -1.
  int FindDimension(std::string_view name) const;

  std::span<const int64_t> gears(int d) const { return dimensions_[d].gears; }
  int64_t max_gear(int d) const { return lookup_[static_cast<size_t>(d)].max_gear; }
  bool Contains(int d, int64_t gear) const;
  // The gear a raw size maps to: the smallest gear >= raw (the smallest gear
  // for any raw at or below it). Returns -1 when raw exceeds the largest gear.
  int64_t MapToGear(int d, int64_t raw) const {
    const int index = MapToGearIndex(d, raw);
    return index < 0 ? -1
                     : lookup_gears_[lookup_[static_cast<size_t>(d)].gears_offset +
                                     static_cast<size_t>(index)];
  }

  // The index of MapToGear's gear in gears(d), or -1 above the largest.
  // One load from a 64-entry table built at creation, indexed by the bit
  // width of raw - 1 (sizes in (2^(b-1), 2^b] share entry b), narrows the
  // answer to the gears inside that range of sizes; a branch-free binary
  // search over those finishes it (nothing to search on a powers-of-two
  // ladder: one candidate per range).
  int MapToGearIndex(int d, int64_t raw) const {
    const Lookup& l = lookup_[static_cast<size_t>(d)];
    if (raw > l.max_gear) return -1;
    const SizeRange r = l.ranges[static_cast<size_t>(SizeRangeOf(raw))];
    return r.first + SearchIndex(lookup_gears_.data() + l.gears_offset + r.first, r.count, raw);
  }

  // Which entry of the table sizes map through: the bit width of raw - 1
  // (0 for raw <= 1), so 0..63.
  static int SizeRangeOf(int64_t raw) {
    return static_cast<int>(std::bit_width(raw < 1 ? uint64_t{0} : static_cast<uint64_t>(raw - 1)));
  }
  // MapToGearIndex by binary search over all gears of d (no table), for
  // any raw <= the largest gear. What the table is built from and checked
  // against.
  int SearchGearIndex(int d, int64_t raw) const {
    const Lookup& l = lookup_[static_cast<size_t>(d)];
    return SearchIndex(lookup_gears_.data() + l.gears_offset, l.num_gears, raw);
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
  absl::StatusOr<GearSet> WithGears(
      const std::vector<std::vector<int64_t>>& gears, uint64_t version, double created_at,
      const std::vector<GearCombination>* combinations = nullptr) const;

  // "BATCHSIZE=[1,2,4] SEQLEN=[128,256]"
  std::string DebugString() const;

 private:
  GearSet() = default;
  // Builds lookup_ and lookup_gears_ from dimensions_.
  void BuildLookup();
  // Index of the smallest of gears[0..n) >= raw (the last for raw above
  // them all); n >= 1. Branch-free: request sizes are unpredictable.
  static int SearchIndex(const int64_t* gears, int n, int64_t raw) {
    const int64_t* base = gears;
    size_t count = static_cast<size_t>(n);
    while (count > 1) {
      const size_t half = count / 2;
      base = (base[half - 1] < raw) ? base + half : base;
      count -= half;
    }
    return static_cast<int>(base - gears);
  }

  // The gears the sizes of one table entry can map to: indices
  // first..first + count - 1.
  struct SizeRange {
    uint8_t first = 0;
    uint8_t count = 1;
  };
  // What mapping reads per dimension, next to each other (an offset, not a
  // pointer: a GearSet is copied as a value).
  struct Lookup {
    int64_t max_gear = 0;
    size_t gears_offset = 0;  // the dimension's gears in lookup_gears_
    int num_gears = 0;
    std::array<SizeRange, 64> ranges{};  // by SizeRangeOf(raw)
  };
  std::vector<DimensionSpec> dimensions_;
  std::array<Lookup, kMaxDimensions> lookup_{};
  std::vector<int64_t> lookup_gears_;  // every dimension's gears, one after another
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
