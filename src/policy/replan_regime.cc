// The regime: the longest stretch of a dimension's size history that the
// last window's sizes do not tell apart from, so that stationary traffic is
// planned on all of it instead of on a window's worth (docs/POLICY.md, "The
// regime").
#include <algorithm>
#include <cmath>
#include <map>

#include "src/policy/replan_internal.h"

namespace gearbox::internal {
namespace {

// Sizes with their counts, and how many.
struct Counts {
  std::map<int64_t, double> by_size;
  double n = 0;
  void Add(const SizeHistoryBin& bin) {
    for (const auto& [size, count] : bin.sizes) {
      by_size[size] += static_cast<double>(count);
      n += static_cast<double>(count);
    }
  }
};

// A test's outcome as a fraction of what would reject it (> 1: rejected),
// with its statistic and that threshold.
struct Verdict {
  double statistic = 0, critical = 1;
  double ratio() const { return statistic / critical; }
};

// The two-sample Kolmogorov-Smirnov test: the largest gap between the two
// empirical distribution functions against c(alpha) sqrt((n + m) / (n m)).
Verdict KolmogorovSmirnov(const Counts& a, const Counts& b) {
  double fa = 0, fb = 0, d = 0;
  auto i = a.by_size.begin();
  auto j = b.by_size.begin();
  while (i != a.by_size.end() || j != b.by_size.end()) {
    const int64_t x = j == b.by_size.end() || (i != a.by_size.end() && i->first <= j->first)
                          ? i->first
                          : j->first;
    if (i != a.by_size.end() && i->first == x) fa += (i++)->second;
    if (j != b.by_size.end() && j->first == x) fb += (j++)->second;
    d = std::max(d, std::fabs(fa / a.n - fb / b.n));
  }
  return {d, kRegimeTestCoefficient * std::sqrt((a.n + b.n) / (a.n * b.n))};
}

// The padding (units) of one request of `size` on `gears` (ascending): the
// smallest gear at least its size; above the largest, a split's remainder
// on a splittable dimension, none on another (it runs uncompiled).
double PaddingOf(int64_t size, const std::vector<int64_t>& gears, bool splittable) {
  if (!gears.empty() && size > gears.back()) {
    if (!splittable) return 0;
    size %= gears.back();
    if (size == 0) return 0;
  }
  const auto g = std::lower_bound(gears.begin(), gears.end(), size);
  return g == gears.end() ? 0.0 : static_cast<double>(*g - size);
}

// Whether the requests of `recent` pad more per request on the current
// gears than those of `before` (a one-sided two-sample z test on the means):
// new sizes the gears serve badly (a new tail, a cluster between two gears)
// move a distribution function too little for the KS test to see.
Verdict PadsMore(const Counts& recent, const Counts& before, const std::vector<int64_t>& gears,
                 bool splittable) {
  auto moments = [&](const Counts& c, double* mean, double* variance) {
    double sum = 0, squares = 0;
    for (const auto& [size, count] : c.by_size) {
      const double p = PaddingOf(size, gears, splittable);
      sum += count * p;
      squares += count * p * p;
    }
    *mean = sum / c.n;
    *variance = std::max(0.0, squares / c.n - *mean * *mean);
  };
  double mr = 0, vr = 0, mb = 0, vb = 0;
  moments(recent, &mr, &vr);
  moments(before, &mb, &vb);
  const double error = std::sqrt(vr / recent.n + vb / before.n);
  if (!(mr > mb)) return {0, 1};
  return {mr - mb, kRegimePaddingSigmas * error};
}

}  // namespace

std::optional<StationaryRegime> FindStationaryRegime(const std::vector<SizeHistoryBin>& history,
                                                     double bin_seconds, double now,
                                                     int window_bins, double max_seconds,
                                                     const std::vector<int64_t>& gears,
                                                     bool splittable) {
  if (!(bin_seconds > 0) || !std::isfinite(now) || window_bins < kRegimeNewestBins + 1 ||
      !(max_seconds > 0))
    return std::nullopt;
  const double newest_at = std::floor(now / bin_seconds);
  if (!(std::fabs(newest_at) < 9e15)) return std::nullopt;
  const auto newest = static_cast<int64_t>(newest_at);
  const auto reach = static_cast<int64_t>(std::floor(max_seconds / bin_seconds));
  // The bins within reach, by index; the last window and its newest bins.
  std::map<int64_t, const SizeHistoryBin*> bins;
  for (const SizeHistoryBin& bin : history) {
    if (bin.bin <= newest && bin.bin > newest - reach) bins[bin.bin] = &bin;
  }
  auto range = [&](int64_t from, int64_t to) {  // bins [from, to)
    Counts c;
    for (auto it = bins.lower_bound(from); it != bins.end() && it->first < to; ++it)
      c.Add(*it->second);
    return c;
  };
  const int64_t window_start = newest - window_bins + 1;
  const Counts window = range(window_start, newest + 1);
  if (window.n < kRegimeMinSamples) return std::nullopt;
  // The shortest regime: the last window and a window of bins before it.
  const int64_t shortest = window_start - window_bins;
  if (bins.empty() || bins.begin()->first > shortest) return std::nullopt;
  StationaryRegime r;
  r.critical = 1;
  // Keeps the test nearest to rejecting; whether `v` passed.
  auto weigh = [&](const Verdict& v) {
    if (v.ratio() > r.statistic / r.critical) {
      r.statistic = v.statistic;
      r.critical = v.critical;
    }
    return v.ratio() <= 1;
  };
  // A change that began within the last window shows first in its newest
  // bins: against the rest of the shortest regime, their sizes and their
  // padding on the current gears.
  const Counts newest_bins = range(newest - kRegimeNewestBins + 1, newest + 1);
  const Counts before = range(shortest, newest - kRegimeNewestBins + 1);
  if (newest_bins.n >= kRegimeMinSamples && before.n >= kRegimeMinSamples) {
    if (!weigh(KolmogorovSmirnov(newest_bins, before)) ||
        !weigh(PadsMore(newest_bins, before, gears, splittable)))
      return std::nullopt;
  }
  // Back from there one bin at a time, while the window of bins at the
  // stretch's start agrees with the last window: the first that does not
  // ends the regime (a test of the whole stretch would let a few bins from
  // before a change in, diluted).
  int64_t start = window_start;
  for (int64_t s = shortest; s > newest - reach && s >= bins.begin()->first; --s) {
    const Counts chunk = range(s, s + window_bins);
    if (chunk.n >= kRegimeMinSamples) {
      const Verdict v = KolmogorovSmirnov(window, chunk);
      if (v.ratio() > 1) break;  // not part of the regime: not its nearest test either
      weigh(v);
    }
    start = s;
  }
  if (start > shortest) return std::nullopt;  // the shortest regime's own bins disagree
  const Counts all = range(start, newest + 1);
  r.seconds = now - static_cast<double>(start) * bin_seconds;
  r.start_bin = start;
  r.sizes.reserve(all.by_size.size());
  for (const auto& [size, count] : all.by_size) r.sizes.push_back({size, count});
  return r;
}

}  // namespace gearbox::internal
