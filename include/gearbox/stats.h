// Window statistics: what the update path knows about recent traffic.
//
// Per gear and per dimension (dimensions are independent, seed §4): decayed
// hit weight, weighted average pad and split ratios, sample counts and the
// raw sizes the gear served. Events are weighted exp(-lambda * age) with
// lambda = ln 2 / half_life_seconds.
#ifndef GEARBOX_STATS_H_
#define GEARBOX_STATS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gearbox/export.h"
#include "gearbox/gear_set.h"

namespace gearbox {

// Counts of raw sizes in log-linear bins, so memory does not grow with the
// request rate. Sizes below 256 have a bin each (exact); above, a bin is
// 1/128 of an octave wide and stands for its midpoint, so a value read back
// (a median, a replacement loss) is within 1/256 (0.39%) of the true size.
class GEARBOX_EXPORT RawSampleHistogram {
 public:
  static constexpr int64_t kExactBelow = 256;
  static constexpr int kSubBinsPerOctave = 128;

  static int64_t BinOf(int64_t value) {  // value >= 1
    if (value < kExactBelow) return value < 0 ? 0 : value;
    const int octave = 63 - __builtin_clzll(static_cast<unsigned long long>(value));
    const int64_t sub = (value >> (octave - 7)) - kSubBinsPerOctave;
    return kExactBelow + static_cast<int64_t>(octave - 8) * kSubBinsPerOctave + sub;
  }
  static int64_t BinLow(int64_t bin);  // smallest value in the bin
  static int64_t BinWidth(int64_t bin);
  static int64_t BinValue(int64_t bin);  // representative: the midpoint, rounded down

  void Add(int64_t value, uint64_t count = 1) {
    const int64_t offset = BinOf(value) - first_bin_;
    if (offset >= 0 && offset < static_cast<int64_t>(counts_.size())) {
      counts_[static_cast<size_t>(offset)] += count;  // the common case: a bin already covered
      total_ += count;
    } else {
      AddSlow(value, count);
    }
  }
  void Merge(const RawSampleHistogram& other);
  void Clear();

  uint64_t total() const { return total_; }
  bool empty() const { return total_ == 0; }
  // The median as Python's int(statistics.median(samples)) computes it: the
  // middle sample, or the mean of the two middle ones rounded down. 0 if empty.
  int64_t Median() const;
  // Samples whose bin's representative value is <= `value`.
  uint64_t CountAtMost(int64_t value) const;
  // Non-empty bins as (representative value, count), ascending.
  std::vector<std::pair<int64_t, uint64_t>> Bins() const;
  // Heap bytes held (for the memory bound in tests and docs).
  size_t MemoryBytes() const { return counts_.capacity() * sizeof(uint64_t); }

  template <typename Visitor>  // visit(value, count) for non-empty bins, ascending
  void ForEachBin(Visitor&& visit) const {
    for (size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i] != 0) visit(BinValue(first_bin_ + static_cast<int64_t>(i)), counts_[i]);
    }
  }
  // The same with each bin's smallest and largest value.
  template <typename Visitor>  // visit(low, high, count)
  void ForEachBinRange(Visitor&& visit) const {
    for (size_t i = 0; i < counts_.size(); ++i) {
      const int64_t bin = first_bin_ + static_cast<int64_t>(i);
      if (counts_[i] != 0) visit(BinLow(bin), BinLow(bin) + BinWidth(bin) - 1, counts_[i]);
    }
  }

 private:
  void Cover(int64_t bin);
  void AddSlow(int64_t value, uint64_t count);
  // Value of the k-th smallest sample (0-based), k < total_.
  int64_t KthValue(uint64_t k) const;

  int64_t first_bin_ = 0;
  std::vector<uint64_t> counts_;  // dense over [first_bin_, first_bin_ + size)
  uint64_t total_ = 0;
};

// One gear's statistics over the window at a given time.
struct GearStats {
  int64_t gear = 0;
  double weighted_hits = 0.0;    // sum of decay weights (times variant counts)
  double hit_rate = 0.0;         // weighted_hits / the dimension's total
  double avg_pad_ratio = 0.0;    // weighted mean of (gear - raw) / gear
  double avg_split_ratio = 0.0;  // weighted mean of (raw - gear) / raw
  uint64_t sample_count = 0;
  uint64_t pad_sample_count = 0;    // samples with pad ratio > 0
  uint64_t split_sample_count = 0;  // samples with split ratio > 0
  // Samples with raw <= gear (padded or exact): their decay weight and
  // weighted raw sum, to evaluate exactly where they would go if the gear went.
  double unsplit_weight = 0.0;
  double unsplit_raw_weighted = 0.0;
  uint64_t unsplit_sample_count = 0;
  RawSampleHistogram raw_samples;  // unweighted, within the window
  double created_ts = 0.0;
  bool initial = false;      // in the gear set the runtime started with (not added by an update)
  double last_hit_ts = 0.0;  // also moved forward when protection is extended
  // Set by FleetStatsSync (fleet_stats.h): this replica served no request of
  // the gear in the window, but the fleet's merged window has sizes in its
  // range (above the next gear below, up to it).
  bool fleet_traffic = false;
  // The gear came back within an hour of its eviction (it was among
  // DimensionStats::recently_removed when an update added it again): its
  // traffic recurs, so the replan policy keeps it for its lifetime even
  // while it is idle (docs/POLICY.md, "One update, per dimension").
  bool readded = false;

  // The window brought the gear traffic: a request here, or the fleet's.
  bool carries_traffic() const { return sample_count > 0 || fleet_traffic; }
};

// A size and its decay weight in the window.
struct WeightedSize {
  int64_t size = 0;
  double weight = 0.0;
};

// One window slot's sizes, for sharing with a fleet (gearbox/fleet_stats.h):
// the slot's absolute index (it starts at index x window_seconds /
// window_slots) and its sizes (as in DimensionStats::sizes) each weighted
// relative to the slot's start, sum of count x exp(lambda (t - start)); the
// weight at `now` is that times exp(-lambda (now - start)).
struct SlotSizes {
  int64_t slot = 0;
  std::vector<WeightedSize> sizes;  // ascending by size
};

// The size drift's bins (DimensionStats::size_drift_*): a fifth of a window
// each, the last six windows. A bin counts its samples by size class:
// floor(log2(size) x kSizeDriftClassesPerOctave), in [0, kSizeDriftClasses).
inline constexpr int kSizeDriftBinsPerWindow = 5;
inline constexpr int kSizeDriftBins = 6 * kSizeDriftBinsPerWindow;
inline constexpr int kSizeDriftClassesPerOctave = 8;
inline constexpr int kSizeDriftClasses = 63 * kSizeDriftClassesPerOctave;
// A bin needs this many samples to have a median.
inline constexpr uint64_t kSizeDriftMinSamples = 20;

// One drift bin, for sharing with a fleet (gearbox/fleet_stats.h): its
// absolute index (it starts at bin x window_seconds / kSizeDriftBinsPerWindow)
// and its samples by size class (ascending by class, no zero counts).
struct DriftBinCounts {
  int64_t bin = 0;
  std::vector<std::pair<int32_t, uint64_t>> counts;
};

// One bin of a dimension's size history (DimensionStats::size_history): its
// absolute index (it starts at bin x window_seconds / kSizeDriftBinsPerWindow,
// the drift's bins) and the requests' sizes in it, each as in
// DimensionStats::sizes (a histogram bin's largest value, at most the gear
// that served it padded), with counts, ascending by size.
struct SizeHistoryBin {
  int64_t bin = 0;
  std::vector<std::pair<int64_t, uint64_t>> sizes;
};

struct SizeDriftEstimate {
  double per_second = 0.0;  // Theil-Sen slope of the bins' median log(size)
  double agreement = 0.0;   // share of the pairwise slopes with its sign
  int bins = 0;             // bins with at least kSizeDriftMinSamples samples
};
// The drift over the bins among `bins` within the last `max_bins` bins of
// `bin_seconds` up to `now` that hold at least kSizeDriftMinSamples samples
// (DimensionStats::size_drift_*). A bin index appears at most once. Pure.
GEARBOX_EXPORT SizeDriftEstimate EstimateSizeDrift(const std::vector<DriftBinCounts>& bins,
                                                   double bin_seconds, double now,
                                                   int max_bins = kSizeDriftBins);

struct DimensionStats {
  std::string name;
  double total_weighted_hits = 0.0;
  std::vector<GearStats> gears;  // one per active gear, ascending by gear
  // The window's raw sizes with their decay weights, merged over the gears
  // (ascending; each at its histogram bin's largest value, so a gear planned
  // at one covers the whole bin, but no larger than the gear that served
  // it; each slot's samples share the slot's mean weight). Filled for
  // policies that re-plan from the distribution.
  std::vector<WeightedSize> sizes;
  // How much of the window has traffic in it (from the oldest slot with a
  // sample to now, at most window_seconds): rates read from `sizes` divide
  // by its decayed length, so a young runtime does not underestimate them.
  double observed_seconds = 0.0;
  // Whether the raw sizes drift: over the last six windows in bins of a
  // fifth of a window (30 minutes of one-minute bins by default), each bin's
  // median log(size), and the Theil–Sen slope between them (per second: 1e-4
  // is 44 % an hour) with the share of the bins' pairwise slopes that agree
  // with it in sign (about 0.5 without a trend; 1 when every later bin is
  // larger). Bins with fewer than 20 samples do not count; `size_drift_bins`
  // is how many did.
  double size_drift_per_second = 0.0;
  double size_drift_agreement = 0.0;
  int size_drift_bins = 0;
  // The window's slots with samples, oldest first, and the drift's bins with
  // samples, oldest first; filled only when the runtime has a merge hook
  // (RuntimeOptions::merge_window_stats), which may re-estimate the drift
  // from more bins (EstimateSizeDrift).
  std::vector<SlotSizes> slot_sizes;
  std::vector<DriftBinCounts> drift_bins;
  // The sizes of the last six windows (the drift's bins, oldest first, those
  // with samples), undecayed: the replan policy plans a gear set of one
  // dimension on the longest stretch of them that the last window's sizes
  // do not tell apart from (docs/POLICY.md, "The regime"). Filled with
  // `sizes`, except when the runtime has a merge hook (a fleet's merged
  // window has no history).
  std::vector<SizeHistoryBin> size_history;
  // Gears of this dimension evicted recently, with when (the runtime keeps
  // an hour of them).
  std::vector<std::pair<int64_t, double>> recently_removed;
};

// A variant shape over two dimensions and its decay weight in the window
// (joint and sparse gear sets).
struct JointSize {
  int64_t a = 0;  // first dimension's size
  int64_t b = 0;  // second dimension's size
  double weight = 0.0;
};

struct WindowStats {
  double now = 0.0;
  std::vector<DimensionStats> dimensions;  // in gear-set order
  // Joint and sparse gear sets: the executed variant shapes (split chunks at
  // their extents), filled for the replan policy. Each is a bin's largest
  // sizes, so a combination at it covers every shape the bin stands for.
  std::vector<JointSize> joint_sizes;
  // ... their compiled combinations with when each was added (the initial
  // ones at the runtime's start), and those dropped in the last hour, when.
  std::vector<std::pair<GearCombination, double>> combinations;
  std::vector<std::pair<GearCombination, double>> recently_removed_combinations;
};

// Builds one gear's statistics from explicit samples (raw size, event time),
// exactly as the runtime would; for tests and tools that hand-make inputs.
struct RawEvent {
  int64_t raw = 0;
  double time = 0.0;
  uint64_t count = 1;
};
GEARBOX_EXPORT GearStats MakeGearStats(int64_t gear, const std::vector<RawEvent>& events,
                                       double now, double half_life_seconds,
                                       double created_ts = 0.0);
// Fills hit_rate and total_weighted_hits of a dimension from its gears.
GEARBOX_EXPORT void FinalizeDimensionStats(DimensionStats* dimension);

}  // namespace gearbox

#endif  // GEARBOX_STATS_H_
