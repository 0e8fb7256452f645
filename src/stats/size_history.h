// The sizes of the last bins of a dimension (DimensionStats::size_history):
// a ring of time bins (the drift's: a fifth of a window each, six windows),
// each with its requests' sizes and counts, undecayed. The replan policy
// plans a stationary one-dimensional gear set on the longest stretch of them
// that the last window does not tell apart from (FindStationaryRegime in
// src/policy/replan_regime.cc; docs/POLICY.md, "The regime"). Memory
// per bin is bounded by the histogram's bins a dimension's sizes span
// (RawSampleHistogram: 128 an octave above 256), whatever the request rate.
// Folded on the updating thread with the window; not thread-safe (the
// window store's lock guards it).
#ifndef GEARBOX_SRC_STATS_SIZE_HISTORY_H_
#define GEARBOX_SRC_STATS_SIZE_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "gearbox/stats.h"

namespace gearbox::internal {

class SizeHistory {
 public:
  // `bins` time bins of `bin_seconds` each.
  SizeHistory(double bin_seconds, int bins);

  // `count` requests of `raw` (> 0) served by `gear` at time t; older than
  // the bins: ignored. Stored as DimensionStats::sizes stores it: the
  // histogram bin's largest value, at most `gear` when raw <= gear.
  void Add(double t, int64_t raw, int64_t gear, int64_t count);

  // The bins up to `now` with samples, oldest first.
  std::vector<SizeHistoryBin> Bins(double now) const;

  std::size_t MemoryBytes() const;

 private:
  struct Bin {
    int64_t index = INT64_MIN;
    std::vector<std::pair<int64_t, uint64_t>> sizes;  // ascending by size
  };

  double bin_seconds_;
  std::vector<Bin> ring_;
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_STATS_SIZE_HISTORY_H_
