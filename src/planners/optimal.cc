#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "gearbox/planners.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;

// Exact K-bucket DP over sorted distinct values, last gear = last value.
// A bucket of values with index in [i, j) is served by gear v[j-1] and costs
// unit[j-1] * (its weight) + fixed[j-1]: with unit = the value itself and no
// fixed cost this is the padded total; with the cost model it is padded
// runtime plus each gear's compile and memory cost. Monge (unit increasing):
// cost(a,c) + cost(b,d) - cost(a,d) - cost(b,c) = (u_c - u_d)(P_b - P_a) <= 0,
// the fixed costs cancelling, so the optimal split points are monotone and
// divide-and-conquer finds each layer in O(M log M).
class BucketDp {
 public:
  BucketDp(const std::vector<int64_t>& values, const std::vector<double>& counts,
           std::vector<double> unit = {}, std::vector<double> fixed = {})
      : v_(values),
        unit_(std::move(unit)),
        fixed_(std::move(fixed)),
        count_prefix_(values.size() + 1, 0.0) {
    for (size_t i = 0; i < v_.size(); ++i) count_prefix_[i + 1] = count_prefix_[i] + counts[i];
    if (unit_.empty()) {
      for (int64_t v : v_) unit_.push_back(static_cast<double>(v));
    }
    if (fixed_.empty()) fixed_.assign(v_.size(), 0.0);
  }

  double Cost(size_t i, size_t j) const {
    return unit_[j - 1] * (count_prefix_[j] - count_prefix_[i]) + fixed_[j - 1];
  }

  // Layers 1..max_buckets; best_[b] is the minimal total with exactly b gears.
  // `stop_once_rising`: stop after the first layer whose total is not below
  // the previous one. Exact for finding the cheapest count: the bucket cost
  // is Monge (per-gear fixed costs keep it so), and the minimal k-bucket
  // total of a Monge partition problem is convex in k.
  void SolveLayers(int max_buckets, bool stop_once_rising = false) {
    const size_t m = v_.size();
    const size_t buckets = std::min<size_t>(static_cast<size_t>(std::max(max_buckets, 1)), m);
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> prev(m + 1, inf), cur(m + 1, inf);
    choice_.assign(buckets + 1, std::vector<uint32_t>(m + 1, 0));
    best_.assign(buckets + 1, inf);
    prev[0] = 0.0;
    for (size_t b = 1; b <= buckets; ++b) {
      std::fill(cur.begin(), cur.end(), inf);
      Compute(1, m, 0, m - 1, prev, &cur, &choice_[b]);
      std::swap(prev, cur);
      best_[b] = prev[m];
      if (stop_once_rising && b >= 2 && best_[b] >= best_[b - 1]) {
        best_.resize(b + 1);
        choice_.resize(b + 1);
        break;
      }
    }
  }
  const std::vector<double>& best() const { return best_; }
  std::vector<int64_t> Gears(size_t buckets) const {
    std::vector<int64_t> gears;
    size_t j = v_.size();
    for (size_t b = buckets; b >= 1 && j > 0; --b) {
      gears.push_back(v_[j - 1]);
      j = choice_[b][j];
    }
    std::reverse(gears.begin(), gears.end());
    return gears;
  }

  // Minimal total with at most k gears (exactly min(k, M)); fills the gears.
  double Solve(int k, std::vector<int64_t>* gears) {
    if (v_.empty()) return 0.0;
    SolveLayers(k);
    const size_t b = best_.size() - 1;
    *gears = Gears(b);
    return best_[b];
  }

 private:
  void Compute(size_t lo, size_t hi, size_t lo_opt, size_t hi_opt, const std::vector<double>& prev,
               std::vector<double>* cur, std::vector<uint32_t>* choice) const {
    if (lo > hi) return;
    const size_t mid = lo + (hi - lo) / 2;
    double best = std::numeric_limits<double>::infinity();
    size_t best_i = lo_opt;
    const size_t top = std::min(hi_opt, mid - 1);
    for (size_t i = lo_opt; i <= top; ++i) {
      if (!std::isfinite(prev[i])) continue;
      const double c = prev[i] + Cost(i, mid);
      if (c < best) {
        best = c;
        best_i = i;
      }
    }
    (*cur)[mid] = best;
    (*choice)[mid] = static_cast<uint32_t>(best_i);
    if (mid > lo) Compute(lo, mid - 1, lo_opt, best_i, prev, cur, choice);
    Compute(mid + 1, hi, best_i, hi_opt, prev, cur, choice);
  }

  const std::vector<int64_t>& v_;
  std::vector<double> unit_;
  std::vector<double> fixed_;
  std::vector<double> count_prefix_;
  std::vector<std::vector<uint32_t>> choice_;
  std::vector<double> best_;
};

// Sizes <= g, plus the remainders of larger sizes, plus g itself (count 0
// if absent); also the padded total of the full chunks.
void SplitAt(const SizeHistogram& h, int64_t g, std::vector<int64_t>* values,
             std::vector<double>* counts, double* full_chunks) {
  std::map<int64_t, double> merged;
  *full_chunks = 0.0;
  for (size_t i = 0; i < h.values.size(); ++i) {
    const int64_t v = h.values[i];
    if (v <= g) {
      merged[v] += h.counts[i];
    } else {
      *full_chunks += h.counts[i] * static_cast<double>((v / g) * g);
      if (v % g > 0) merged[v % g] += h.counts[i];
    }
  }
  merged.try_emplace(g, 0.0);
  values->clear();
  counts->clear();
  for (const auto& [v, c] : merged) {
    values->push_back(v);
    counts->push_back(c);
  }
}

}  // namespace

SizeHistogram SizeHistogram::FromSizes(std::span<const int64_t> sizes) {
  std::map<int64_t, double> m;
  for (int64_t s : sizes) m[s] += 1.0;
  SizeHistogram h;
  for (const auto& [v, c] : m) {
    h.values.push_back(v);
    h.counts.push_back(c);
  }
  return h;
}

double SizeHistogram::total_count() const {
  double t = 0;
  for (double c : counts) t += c;
  return t;
}

double SizeHistogram::total_size() const {
  double t = 0;
  for (size_t i = 0; i < values.size(); ++i) t += counts[i] * static_cast<double>(values[i]);
  return t;
}

absl::StatusOr<double> PaddedTotal(const SizeHistogram& h, std::span<const int64_t> gears,
                                   bool splittable) {
  if (gears.empty()) return internal::InvalidField("gears", "[]", "at least one gear");
  const int64_t max = gears.back();
  double padded = 0.0;
  auto map = [&](int64_t v) { return *std::lower_bound(gears.begin(), gears.end(), v); };
  for (size_t i = 0; i < h.values.size(); ++i) {
    const int64_t v = h.values[i];
    if (v <= max) {
      padded += h.counts[i] * static_cast<double>(map(v));
    } else if (splittable) {
      const int64_t rest = v % max;
      padded += h.counts[i] * static_cast<double>((v / max) * max + (rest > 0 ? map(rest) : 0));
    } else {
      return internal::InvalidFieldValue(
          "size", v, Cat("at most the largest gear ", max, " (not splittable)"));
    }
  }
  return padded;
}

absl::StatusOr<GearPlan> OptimalGears(const SizeHistogram& h, int k, bool splittable) {
  if (k < 1) return internal::InvalidFieldValue("--gears", k, "an integer >= 1");
  if (h.values.empty()) return absl::InvalidArgumentError("no sizes to plan for");
  GearPlan plan;
  plan.raw = h.total_size();
  if (!splittable) {
    BucketDp dp(h.values, h.counts);
    plan.padded = dp.Solve(k, &plan.gears);
    plan.search = "largest gear = largest size (not splittable)";
    return plan;
  }
  // Splittable: search the largest gear.
  const int64_t largest = h.values.back();
  const double m = static_cast<double>(h.values.size());
  const double per_g = static_cast<double>(k) * m * std::max(1.0, std::log2(m)) + m;
  std::vector<int64_t> candidates;
  // Largest candidates first: on equal padding the larger gear wins (fewer chunks).
  if (static_cast<double>(largest) * per_g <= 4e9) {
    for (int64_t g = largest; g >= 1; --g) candidates.push_back(g);
    plan.search = Cat("every largest gear 1..", largest);
  } else {
    candidates.assign(h.values.rbegin(), h.values.rend());
    plan.search = Cat("largest gear among the ", h.values.size(), " distinct sizes");
  }
  plan.padded = std::numeric_limits<double>::infinity();
  std::vector<int64_t> values, gears;
  std::vector<double> counts;
  for (int64_t g : candidates) {
    double full = 0.0;
    SplitAt(h, g, &values, &counts, &full);
    BucketDp dp(values, counts);
    const double padded = full + dp.Solve(k, &gears);
    if (padded < plan.padded) {
      plan.padded = padded;
      plan.gears = gears;
    }
  }
  return plan;
}

}  // namespace gearbox

namespace gearbox::internal {

std::vector<int64_t> SolveBucketDp(const SizeHistogram& sizes, int max_gears,
                                   const std::vector<double>& unit,
                                   const std::vector<double>& fixed,
                                   std::vector<double>* best_per_count,
                                   std::vector<std::vector<int64_t>>* gears_per_count) {
  BucketDp dp(sizes.values, sizes.counts, unit, fixed);
  dp.SolveLayers(max_gears, /*stop_once_rising=*/true);
  *best_per_count = dp.best();
  gears_per_count->assign(best_per_count->size(), {});
  for (size_t b = 1; b < best_per_count->size(); ++b) (*gears_per_count)[b] = dp.Gears(b);
  return gears_per_count->back();
}

}  // namespace gearbox::internal
