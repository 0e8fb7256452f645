#include <bit>
#include <cmath>

#include "gearbox/stats.h"

namespace gearbox {
namespace {
constexpr int kSubBits = 7;         // log2(kSubBinsPerOctave)
constexpr int kFirstLogOctave = 8;  // log2(kExactBelow)
}  // namespace

int64_t RawSampleHistogram::BinLow(int64_t bin) {
  if (bin < kExactBelow) return bin;
  const int64_t octave = kFirstLogOctave + (bin - kExactBelow) / kSubBinsPerOctave;
  const int64_t sub = (bin - kExactBelow) % kSubBinsPerOctave;
  return (kSubBinsPerOctave + sub) << (octave - kSubBits);
}

int64_t RawSampleHistogram::BinWidth(int64_t bin) {
  if (bin < kExactBelow) return 1;
  const int64_t octave = kFirstLogOctave + (bin - kExactBelow) / kSubBinsPerOctave;
  return int64_t{1} << (octave - kSubBits);
}

int64_t RawSampleHistogram::BinValue(int64_t bin) { return BinLow(bin) + (BinWidth(bin) - 1) / 2; }

void RawSampleHistogram::Cover(int64_t bin) {
  if (counts_.empty()) {
    first_bin_ = bin;
    counts_.assign(1, 0);
    return;
  }
  if (bin < first_bin_) {
    counts_.insert(counts_.begin(), static_cast<size_t>(first_bin_ - bin), 0);
    first_bin_ = bin;
  } else if (bin >= first_bin_ + static_cast<int64_t>(counts_.size())) {
    counts_.resize(static_cast<size_t>(bin - first_bin_ + 1), 0);
  }
}

void RawSampleHistogram::AddSlow(int64_t value, uint64_t count) {
  if (count == 0) return;
  const int64_t bin = BinOf(value);
  Cover(bin);
  counts_[static_cast<size_t>(bin - first_bin_)] += count;
  total_ += count;
}

void RawSampleHistogram::Merge(const RawSampleHistogram& other) {
  if (other.total_ == 0) return;
  Cover(other.first_bin_);
  Cover(other.first_bin_ + static_cast<int64_t>(other.counts_.size()) - 1);
  const size_t base = static_cast<size_t>(other.first_bin_ - first_bin_);
  for (size_t i = 0; i < other.counts_.size(); ++i) counts_[base + i] += other.counts_[i];
  total_ += other.total_;
}

void RawSampleHistogram::Clear() {
  counts_.clear();
  first_bin_ = 0;
  total_ = 0;
}

int64_t RawSampleHistogram::KthValue(uint64_t k) const {
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen > k) return BinValue(first_bin_ + static_cast<int64_t>(i));
  }
  return 0;
}

int64_t RawSampleHistogram::Median() const {
  if (total_ == 0) return 0;
  if (total_ % 2 == 1) return KthValue(total_ / 2);
  const int64_t low = KthValue(total_ / 2 - 1);
  const int64_t high = KthValue(total_ / 2);
  return low + (high - low) / 2;
}

uint64_t RawSampleHistogram::CountAtMost(int64_t value) const {
  uint64_t n = 0;
  ForEachBin([&](int64_t v, uint64_t count) {
    if (v <= value) n += count;
  });
  return n;
}

std::vector<std::pair<int64_t, uint64_t>> RawSampleHistogram::Bins() const {
  std::vector<std::pair<int64_t, uint64_t>> bins;
  ForEachBin([&](int64_t value, uint64_t count) { bins.emplace_back(value, count); });
  return bins;
}

GearStats MakeGearStats(int64_t gear, const std::vector<RawEvent>& events, double now,
                        double half_life_seconds, double created_ts) {
  const double lambda = std::log(2.0) / half_life_seconds;
  GearStats s;
  s.gear = gear;
  s.created_ts = created_ts;
  double pad_weighted = 0.0;
  double split_weighted = 0.0;
  for (const RawEvent& e : events) {
    const double w = std::exp(-lambda * (now - e.time)) * static_cast<double>(e.count);
    s.weighted_hits += w;
    s.sample_count += e.count;
    s.raw_samples.Add(e.raw, e.count);
    if (e.raw <= gear) {
      const double pad = static_cast<double>(gear - e.raw) / static_cast<double>(gear);
      pad_weighted += w * pad;
      if (e.raw < gear) s.pad_sample_count += e.count;
      s.unsplit_weight += w;
      s.unsplit_raw_weighted += w * static_cast<double>(e.raw);
      s.unsplit_sample_count += e.count;
    } else {
      split_weighted += w * static_cast<double>(e.raw - gear) / static_cast<double>(e.raw);
      s.split_sample_count += e.count;
    }
    s.last_hit_ts = std::max(s.last_hit_ts, e.time);
  }
  if (s.weighted_hits > 0) {
    s.avg_pad_ratio = pad_weighted / s.weighted_hits;
    s.avg_split_ratio = split_weighted / s.weighted_hits;
  }
  return s;
}

void FinalizeDimensionStats(DimensionStats* dimension) {
  double total = 0.0;
  for (const GearStats& g : dimension->gears) total += g.weighted_hits;
  dimension->total_weighted_hits = total;
  for (GearStats& g : dimension->gears) g.hit_rate = total > 0 ? g.weighted_hits / total : 0.0;
}

}  // namespace gearbox
