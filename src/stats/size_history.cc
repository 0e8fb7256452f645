#include "src/stats/size_history.h"

#include <algorithm>
#include <cmath>

namespace gearbox::internal {

SizeHistory::SizeHistory(double bin_seconds, int bins)
    : bin_seconds_(bin_seconds), ring_(static_cast<size_t>(std::max(bins, 2))) {}

void SizeHistory::Add(double t, int64_t raw, int64_t gear, int64_t count) {
  if (raw <= 0 || count <= 0 || !std::isfinite(t)) return;
  const double at = std::floor(t / bin_seconds_);
  if (!(std::fabs(at) < 9e15)) return;
  const auto index = static_cast<int64_t>(at);
  const auto n = static_cast<int64_t>(ring_.size());
  Bin& bin = ring_[static_cast<size_t>(((index % n) + n) % n)];
  if (bin.index != index) {
    if (bin.index != INT64_MIN && bin.index > index) return;  // older than the ring holds
    bin.index = index;
    bin.sizes.clear();
  }
  const int64_t b = RawSampleHistogram::BinOf(raw);
  const int64_t top = RawSampleHistogram::BinLow(b) + RawSampleHistogram::BinWidth(b) - 1;
  const int64_t size = raw <= gear ? std::min(top, gear) : top;
  auto it = std::lower_bound(bin.sizes.begin(), bin.sizes.end(), size,
                             [](const auto& e, int64_t s) { return e.first < s; });
  if (it == bin.sizes.end() || it->first != size) it = bin.sizes.insert(it, {size, 0});
  it->second += static_cast<uint64_t>(count);
}

std::vector<SizeHistoryBin> SizeHistory::Bins(double now) const {
  std::vector<SizeHistoryBin> out;
  if (!std::isfinite(now)) return out;
  const auto newest = static_cast<int64_t>(std::clamp(std::floor(now / bin_seconds_), -9e15, 9e15));
  for (const Bin& bin : ring_) {
    if (bin.index == INT64_MIN || bin.index > newest ||
        bin.index <= newest - static_cast<int64_t>(ring_.size()) || bin.sizes.empty())
      continue;
    out.push_back({bin.index, bin.sizes});
  }
  std::sort(out.begin(), out.end(),
            [](const SizeHistoryBin& a, const SizeHistoryBin& b) { return a.bin < b.bin; });
  return out;
}

std::size_t SizeHistory::MemoryBytes() const {
  size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Bin);
  for (const Bin& bin : ring_) bytes += bin.sizes.capacity() * sizeof(bin.sizes[0]);
  return bytes;
}

}  // namespace gearbox::internal
