#include "src/stats/size_drift.h"

#include <algorithm>
#include <cmath>

namespace gearbox {
namespace {

// A bin's median log(size), interpolated within its size class.
double MedianLog(const DriftBinCounts& bin, uint64_t samples) {
  const double half = static_cast<double>(samples) / 2;
  double below = 0;
  for (const auto& [k, count] : bin.counts) {
    const double c = static_cast<double>(count);
    if (below + c >= half && c > 0) {
      const double log2_size =
          (static_cast<double>(k) + (half - below) / c) / kSizeDriftClassesPerOctave;
      return log2_size * std::log(2.0);
    }
    below += c;
  }
  return 0.0;
}

}  // namespace

SizeDriftEstimate EstimateSizeDrift(const std::vector<DriftBinCounts>& bins, double bin_seconds,
                                    double now, int max_bins) {
  SizeDriftEstimate e;
  if (!(bin_seconds > 0) || !std::isfinite(now) || max_bins < 2) return e;
  const double newest_at = std::floor(now / bin_seconds);
  if (!(std::fabs(newest_at) < 9e15)) return e;
  const auto newest = static_cast<int64_t>(newest_at);
  std::vector<std::pair<double, double>> points;  // (bin centre, median log size)
  for (const DriftBinCounts& bin : bins) {
    if (bin.bin > newest || bin.bin <= newest - max_bins) continue;
    uint64_t samples = 0;
    for (const auto& kc : bin.counts) samples += kc.second;
    if (samples < kSizeDriftMinSamples) continue;
    points.emplace_back((static_cast<double>(bin.bin) + 0.5) * bin_seconds,
                        MedianLog(bin, samples));
  }
  e.bins = static_cast<int>(points.size());
  if (points.size() < 2) return e;
  std::vector<double> slopes;
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t j = i + 1; j < points.size(); ++j) {
      slopes.push_back((points[j].second - points[i].second) / (points[j].first - points[i].first));
    }
  }
  const size_t mid = slopes.size() / 2;
  std::nth_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(mid), slopes.end());
  e.per_second = slopes[mid];
  const double sign = e.per_second > 0 ? 1.0 : e.per_second < 0 ? -1.0 : 0.0;
  size_t agree = 0;
  for (double s : slopes) agree += (s * sign > 0) ? 1 : 0;
  e.agreement = static_cast<double>(agree) / static_cast<double>(slopes.size());
  return e;
}

namespace internal {

SizeDrift::SizeDrift(double bin_seconds, int bins)
    : bin_seconds_(bin_seconds), ring_(static_cast<size_t>(std::max(bins, 2))) {}

void SizeDrift::Add(double t, int64_t size, int64_t count) {
  if (size <= 0 || count <= 0 || !std::isfinite(t)) return;
  const double at = std::floor(t / bin_seconds_);
  if (!(std::fabs(at) < 9e15)) return;
  const auto index = static_cast<int64_t>(at);
  Bin& bin = ring_[static_cast<size_t>(
      ((index % static_cast<int64_t>(ring_.size())) + static_cast<int64_t>(ring_.size())) %
      static_cast<int64_t>(ring_.size()))];
  if (bin.index != index) {
    if (bin.index != INT64_MIN && bin.index > index) return;  // older than the ring holds
    bin.index = index;
    bin.samples = 0;
    bin.counts.assign(kSizeDriftClasses, 0);
  }
  const int k = std::clamp(
      static_cast<int>(std::log2(static_cast<double>(size)) * kSizeDriftClassesPerOctave), 0,
      kSizeDriftClasses - 1);
  bin.counts[static_cast<size_t>(k)] += static_cast<uint32_t>(std::min<int64_t>(count, 1 << 30));
  bin.samples += static_cast<uint64_t>(count);
}

std::vector<DriftBinCounts> SizeDrift::Bins(double now) const {
  std::vector<DriftBinCounts> out;
  if (!std::isfinite(now)) return out;
  const auto newest = static_cast<int64_t>(std::clamp(std::floor(now / bin_seconds_), -9e15, 9e15));
  for (const Bin& bin : ring_) {
    if (bin.index == INT64_MIN || bin.index > newest ||
        bin.index <= newest - static_cast<int64_t>(ring_.size()) || bin.samples == 0)
      continue;
    DriftBinCounts& b = out.emplace_back();
    b.bin = bin.index;
    for (size_t k = 0; k < bin.counts.size(); ++k) {
      if (bin.counts[k] > 0) b.counts.emplace_back(static_cast<int32_t>(k), bin.counts[k]);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const DriftBinCounts& a, const DriftBinCounts& b) { return a.bin < b.bin; });
  return out;
}

SizeDriftEstimate SizeDrift::At(double now) const {
  return EstimateSizeDrift(Bins(now), bin_seconds_, now, static_cast<int>(ring_.size()));
}

std::size_t SizeDrift::MemoryBytes() const {
  size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Bin);
  for (const Bin& bin : ring_) bytes += bin.counts.capacity() * sizeof(uint32_t);
  return bytes;
}

}  // namespace internal
}  // namespace gearbox
