// Whether a dimension's sizes drift, and how fast (DimensionStats::size_drift_*):
// the median log size of each of the last `bins` time bins, and the Theil–Sen
// slope over them (the median of the slopes between every two bins) with the
// share of those slopes that agree with it in sign (a Mann–Kendall statistic:
// about one half for traffic without a trend; a burst or a step moves a few
// bins, not the sign of most pairs). Folded on the updating thread with the
// window; not thread-safe (the window store's lock guards it).
#ifndef GEARBOX_SRC_STATS_SIZE_DRIFT_H_
#define GEARBOX_SRC_STATS_SIZE_DRIFT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gearbox/stats.h"

namespace gearbox::internal {

class SizeDrift {
 public:
  // `bins` time bins of `bin_seconds` each.
  SizeDrift(double bin_seconds, int bins);

  // `count` samples of `size` (> 0) at time t; older than the bins: ignored.
  void Add(double t, int64_t size, int64_t count);

  using Estimate = SizeDriftEstimate;
  // Over the bins up to `now` (EstimateSizeDrift).
  Estimate At(double now) const;
  // The bins up to `now` with samples, oldest first (DimensionStats::drift_bins).
  std::vector<DriftBinCounts> Bins(double now) const;

  std::size_t MemoryBytes() const;

 private:
  struct Bin {
    int64_t index = INT64_MIN;
    uint64_t samples = 0;
    std::vector<uint32_t> counts;  // by size class (kSizeDriftClassesPerOctave)
  };

  double bin_seconds_;
  std::vector<Bin> ring_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_SIZE_DRIFT_H_
