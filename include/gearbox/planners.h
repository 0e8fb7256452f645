// Offline gear planners: given the sizes a dimension saw, which K gears
// would have wasted the least padding? Used by `gearbox plan` and as the
// yardstick replays are compared with.
#ifndef GEARBOX_PLANNERS_H_
#define GEARBOX_PLANNERS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gearbox {

// Sizes as sorted distinct values with their counts.
struct SizeHistogram {
  std::vector<int64_t> values;  // ascending, distinct, >= 1
  std::vector<double> counts;   // > 0

  static SizeHistogram FromSizes(std::span<const int64_t> sizes);
  double total_count() const;
  double total_size() const;  // sum of count * value
};

struct GearPlan {
  std::vector<int64_t> gears;  // ascending
  double padded = 0.0;         // sum over executed chunks of their gear
  double raw = 0.0;            // sum of the sizes
  double waste() const { return raw > 0 ? padded / raw - 1.0 : 0.0; }
  // How the largest gear was searched (splittable dimensions).
  std::string search;
};

// Padded total of `sizes` on `gears` (ascending) as the runtime plans them:
// pad up to the smallest gear >= size; above the largest gear, split into
// full chunks plus a padded remainder when `splittable`, else an error.
absl::StatusOr<double> PaddedTotal(const SizeHistogram& sizes, std::span<const int64_t> gears,
                                   bool splittable);

// The K gears minimising total padding, by exact dynamic programming
// (O(K M log M) for M distinct sizes: the bucket cost is Monge, so the
// optimal split points are monotone and divide-and-conquer finds them).
// Non-splittable: the largest gear is the largest size. Splittable: every
// largest gear G from 1 to the largest size is tried (remainders of larger
// sizes join the sizes below G) when that is cheap enough, else every G
// among the distinct sizes; `search` says which.
absl::StatusOr<GearPlan> OptimalGears(const SizeHistogram& sizes, int k, bool splittable);

}  // namespace gearbox

#endif  // GEARBOX_PLANNERS_H_
