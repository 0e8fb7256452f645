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

namespace gearbox::internal {

class SizeDrift {
 public:
  // `bins` time bins of `bin_seconds` each.
  SizeDrift(double bin_seconds, int bins);

  // `count` samples of `size` (> 0) at time t; older than the bins: ignored.
  void Add(double t, int64_t size, int64_t count);

  struct Estimate {
    double slope = 0.0;      // of log(size), per second
    double agreement = 0.0;  // share of the pairwise slopes with the slope's sign
    int bins = 0;            // bins with enough samples to have a median
  };
  // Over the bins up to `now` holding at least `min_samples` samples each.
  Estimate At(double now, uint64_t min_samples = 20) const;

  std::size_t MemoryBytes() const;

 private:
  struct Bin {
    int64_t index = INT64_MIN;
    uint64_t samples = 0;
    std::vector<uint32_t> counts;  // by floor(log2(size) * kPerOctave)
  };
  // The bin's median log(size), interpolated within its histogram bin.
  static double MedianLog(const Bin& bin);

  double bin_seconds_;
  std::vector<Bin> ring_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_SIZE_DRIFT_H_
