#include "src/stats/size_drift.h"

#include <algorithm>
#include <cmath>

namespace gearbox::internal {
namespace {

constexpr int kPerOctave = 8;  // histogram bins per octave of size
constexpr int kOctaves = 63;   // sizes up to 2^63

}  // namespace

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
    bin.counts.assign(kPerOctave * kOctaves, 0);
  }
  const int k = std::clamp(static_cast<int>(std::log2(static_cast<double>(size)) * kPerOctave), 0,
                           kPerOctave * kOctaves - 1);
  bin.counts[static_cast<size_t>(k)] += static_cast<uint32_t>(std::min<int64_t>(count, 1 << 30));
  bin.samples += static_cast<uint64_t>(count);
}

double SizeDrift::MedianLog(const Bin& bin) {
  const double half = static_cast<double>(bin.samples) / 2;
  double below = 0;
  for (size_t k = 0; k < bin.counts.size(); ++k) {
    const double c = bin.counts[k];
    if (below + c >= half && c > 0) {
      const double log2_size = (static_cast<double>(k) + (half - below) / c) / kPerOctave;
      return log2_size * std::log(2.0);
    }
    below += c;
  }
  return 0.0;
}

SizeDrift::Estimate SizeDrift::At(double now, uint64_t min_samples) const {
  const auto newest = static_cast<int64_t>(std::floor(now / bin_seconds_));
  std::vector<std::pair<double, double>> points;  // (bin centre, median log size)
  for (const Bin& bin : ring_) {
    if (bin.index == INT64_MIN || bin.index > newest ||
        bin.index <= newest - static_cast<int64_t>(ring_.size()) || bin.samples < min_samples)
      continue;
    points.emplace_back((static_cast<double>(bin.index) + 0.5) * bin_seconds_, MedianLog(bin));
  }
  Estimate e;
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
  e.slope = slopes[mid];
  const double sign = e.slope > 0 ? 1.0 : e.slope < 0 ? -1.0 : 0.0;
  size_t agree = 0;
  for (double s : slopes) agree += (s * sign > 0) ? 1 : 0;
  e.agreement = static_cast<double>(agree) / static_cast<double>(slopes.size());
  return e;
}

std::size_t SizeDrift::MemoryBytes() const {
  size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Bin);
  for (const Bin& bin : ring_) bytes += bin.counts.capacity() * sizeof(uint32_t);
  return bytes;
}

}  // namespace gearbox::internal
