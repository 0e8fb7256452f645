// The replan policy's view of a window: its size distribution with prefix
// sums, the payback horizon, and what a gear costs in each dimension.
#include <algorithm>
#include <cmath>

#include "src/policy/replan_internal.h"

namespace gearbox::internal {

Distribution::Distribution(const std::vector<WeightedSize>& sizes, const GearCostModel& m) : m_(m) {
  weight_.push_back(0);
  run_.push_back(0);
  for (const WeightedSize& w : sizes) {
    if (w.weight <= 0) continue;
    value_.push_back(w.size);
    weight_.push_back(weight_.back() + w.weight);
    run_.push_back(run_.back() + w.weight * m.Run(w.size));
  }
}

double Distribution::Padding(const std::vector<int64_t>& gears, bool splittable) const {
  double padding = 0;
  size_t from = 0;  // first size not yet assigned
  for (int64_t g : gears) {
    const size_t to =
        static_cast<size_t>(std::upper_bound(value_.begin(), value_.end(), g) - value_.begin());
    if (to > from) padding += m_.Run(g) * (weight_[to] - weight_[from]) - (run_[to] - run_[from]);
    from = std::max(from, to);
  }
  if (splittable && !gears.empty()) {
    const int64_t top = gears.back();
    for (size_t i = from; i < value_.size(); ++i) {
      const int64_t rest = value_[i] % top;
      const double extra_chunks = static_cast<double>(value_[i] / top - (rest == 0 ? 1 : 0));
      double cost = extra_chunks * m_.seconds_per_run;
      if (rest > 0)
        cost += m_.Run(*std::lower_bound(gears.begin(), gears.end(), rest)) - m_.Run(rest);
      padding += (weight_[i + 1] - weight_[i]) * cost;
    }
  }
  return padding;
}

double Distribution::SizePadding(int64_t size, const std::vector<int64_t>& gears,
                                 bool splittable) const {
  auto it = std::lower_bound(gears.begin(), gears.end(), size);
  if (it != gears.end()) return m_.Run(*it) - m_.Run(size);
  if (!splittable || gears.empty()) return 0.0;  // eager, or nothing to run on
  const int64_t top = gears.back();
  const int64_t rest = size % top;
  double cost = static_cast<double>(size / top - (rest == 0 ? 1 : 0)) * m_.seconds_per_run;
  if (rest > 0) cost += m_.Run(*std::lower_bound(gears.begin(), gears.end(), rest)) - m_.Run(rest);
  return cost;
}

double Distribution::DifferenceVariance(const std::vector<int64_t>& a,
                                        const std::vector<int64_t>& b, bool splittable) const {
  double variance = 0;
  for (size_t i = 0; i < value_.size(); ++i) {
    const double d = SizePadding(value_[i], a, splittable) - SizePadding(value_[i], b, splittable);
    variance += (weight_[i + 1] - weight_[i]) * d * d;
  }
  return variance;
}

double Distribution::Segment(int64_t lo, int64_t hi, int64_t gear) const {
  const size_t a = Index(lo), b = Index(hi);
  if (b <= a) return 0.0;
  return m_.Run(gear) * (weight_[b] - weight_[a]) - (run_[b] - run_[a]);
}

SizeHistogram Distribution::Histogram(int64_t up_to) const {
  SizeHistogram h;
  for (size_t i = 0; i < value_.size() && value_[i] <= up_to; ++i) {
    h.values.push_back(value_[i]);
    h.counts.push_back(weight_[i + 1] - weight_[i]);
  }
  return h;
}

size_t Distribution::Index(int64_t x) const {
  return static_cast<size_t>(std::upper_bound(value_.begin(), value_.end(), x) - value_.begin());
}

double HorizonFactor(double observed_seconds, const AdaptiveOptions& adaptive,
                     const ReplanOptions& o) {
  const double lambda = std::log(2.0) / adaptive.half_life_seconds;
  const double observed =
      std::max(observed_seconds, adaptive.window_seconds / adaptive.window_slots);
  const double effective_seconds = (1.0 - std::exp(-lambda * observed)) / lambda;
  return o.payback_seconds / effective_seconds;
}

const DimensionStats* StatsOf(const GearSet& gears, const WindowStats& stats, int d) {
  for (const DimensionStats& c : stats.dimensions) {
    if (c.name == gears.dimension(d).name) return &c;
  }
  return nullptr;
}

std::vector<DimensionCost> CostPerDimension(const GearSet& gears, const WindowStats& stats,
                                            const ReplanOptions& o) {
  const int num_dims = gears.num_dimensions();
  // Per dimension: its gears in use, and the window's mean of gear^exponent.
  std::vector<double> gears_in_use(num_dims, 1.0);
  std::vector<double> mean_gear_power(num_dims, 1.0);
  for (int d = 0; d < num_dims; ++d) {
    if (const DimensionStats* ds = StatsOf(gears, stats, d)) {
      double used = 0, weight = 0, power = 0;
      for (const GearStats& g : ds->gears) {
        used += g.carries_traffic() ? 1 : 0;
        weight += g.weighted_hits;
        power += g.weighted_hits * std::pow(static_cast<double>(g.gear), o.cost.runtime_exponent);
      }
      gears_in_use[d] = std::max(used, 1.0);
      if (weight > 0) mean_gear_power[d] = power / weight;
    }
  }
  std::vector<DimensionCost> out(num_dims);
  for (int d = 0; d < num_dims; ++d) {
    DimensionCost& c = out[d];
    c.model = o.cost;
    for (int e = 0; e < num_dims; ++e) {
      if (e == d) continue;
      c.combinations *= gears_in_use[e];
      c.model.seconds_per_unit *= mean_gear_power[e];
    }
    const GearCostModel& m = c.model;
    c.compile = m.alpha * m.compile_seconds * c.combinations;
    // Removing must stay below adding (the hysteresis band): a removal may
    // lose at most holding one graph, and never a compile's worth.
    c.holding = std::min(o.gear_holding_seconds, m.alpha * m.compile_seconds) * c.combinations;
  }
  return out;
}

}  // namespace gearbox::internal
