#include "gearbox/replay_summary.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "nlohmann/json.hpp"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using Json = nlohmann::ordered_json;

int RoundedAverageGears(const ReplayResult& r, size_t d) {
  return std::max(1, static_cast<int>(std::lround(r.avg_gears[d])));
}

// The time-weighted compiled-graph count, for one dimension (whose graphs are
// its gears); 0 with several dimensions, whose graphs are combinations.
int GraphCount(const ReplayResult& r) {
  return r.dimensions.size() == 1 ? std::max(1, static_cast<int>(std::lround(r.avg_graphs))) : 0;
}

// Optimal plans of one dimension by gear count, each computed once.
class OptimumCache {
 public:
  OptimumCache(std::vector<int64_t> sizes, bool splittable)
      : histogram_(SizeHistogram::FromSizes(sizes)), splittable_(splittable) {}
  absl::StatusOr<GearPlan> Get(int gears, bool splitting) {
    auto& plans = splitting ? split_ : whole_;
    if (auto it = plans.find(gears); it != plans.end()) return it->second;
    auto plan = OptimalGears(histogram_, gears, splitting);
    if (!plan.ok()) return plan.status();
    return plans[gears] = *std::move(plan);
  }
  bool splittable() const { return splittable_; }

 private:
  SizeHistogram histogram_;
  bool splittable_;
  std::map<int, GearPlan> whole_, split_;
};

// OtherHalfWaste per gear count, each computed once.
class OtherHalfCache {
 public:
  OtherHalfCache(const Trace& trace, size_t d) : trace_(trace), d_(d) {}
  absl::StatusOr<std::optional<double>> Get(int gears) {
    if (auto it = waste_.find(gears); it != waste_.end()) return it->second;
    auto w = OtherHalfWaste(trace_, d_, gears);
    if (!w.ok()) return w.status();
    return waste_[gears] = *w;
  }

 private:
  const Trace& trace_;
  size_t d_;
  std::map<int, std::optional<double>> waste_;
};

Json OptimumJson(const std::vector<std::string>& dimensions,
                 const std::vector<DimensionOptimum>& optimum) {
  Json o = Json::object();
  for (size_t d = 0; d < dimensions.size(); ++d) {
    const DimensionOptimum& one = optimum[d];
    Json& j = o[dimensions[d]];
    j = {{"gears", one.gears}, {"waste", one.plan.waste()}, {"gear_list", one.plan.gears}};
    if (one.graph_count > 0) {
      j["same_graph_count"] = {{"gears", one.graph_count}, {"waste", one.same_graph_count.waste()}};
      if (one.other_half_waste.has_value())
        j["same_graph_count"]["other_half_waste"] = *one.other_half_waste;
    }
    if (one.with_splitting.has_value()) {
      j["with_splitting"] = {{"waste", one.with_splitting->waste()},
                             {"gear_list", one.with_splitting->gears},
                             {"search", one.with_splitting->search}};
    }
  }
  return o;
}

}  // namespace

absl::StatusOr<std::optional<double>> OtherHalfWaste(const Trace& trace, size_t d, int gears) {
  const size_t n = trace.dimensions.size();
  if (d >= n) {
    return absl::InvalidArgumentError(
        internal::Cat("other-half optimum: column ", d, " of a trace of ", n, " columns"));
  }
  std::vector<int64_t> half[2];
  int64_t largest = 0;
  for (size_t i = 0; i < trace.rows(); ++i) {
    const int64_t size = trace.row(i)[d];
    const double since = trace.time[i] - trace.time[0];
    if (!(std::fabs(since) <= 1e12)) {
      return absl::InvalidArgumentError(internal::Cat(
          "other-half optimum: row ", i + 1, " has t = ", trace.time[i],
          ", expected finite seconds within 1e12 of the first row's t = ", trace.time[0]));
    }
    const auto minute = static_cast<int64_t>(std::floor(since / 60.0));
    half[minute & 1].push_back(size);
    largest = std::max(largest, size);
  }
  if (half[0].empty() || half[1].empty()) return std::optional<double>();
  double padded = 0, raw = 0;
  for (int h = 0; h < 2; ++h) {
    std::vector<int64_t> planned = half[h];
    planned.push_back(largest);  // its largest gear covers the other half
    auto plan = OptimalGears(SizeHistogram::FromSizes(planned), gears, /*splittable=*/false);
    if (!plan.ok()) return plan.status();
    const SizeHistogram other = SizeHistogram::FromSizes(half[1 - h]);
    auto total = PaddedTotal(other, plan->gears, /*splittable=*/false);
    if (!total.ok()) return total.status();
    padded += *total;
    raw += other.total_size();
  }
  return std::optional<double>(raw > 0 ? padded / raw - 1.0 : 0.0);
}

absl::StatusOr<std::vector<std::vector<DimensionOptimum>>> OfflineOptimum(
    const RuntimeConfig& config, const Trace& trace, std::span<const ReplayResult> results) {
  const size_t n = config.dims.size();
  std::vector<OptimumCache> caches;
  std::vector<OtherHalfCache> other_half;
  caches.reserve(n);
  other_half.reserve(n);
  for (size_t d = 0; d < n; ++d) {
    std::vector<int64_t> sizes;
    sizes.reserve(trace.rows());
    for (size_t i = 0; i < trace.rows(); ++i) sizes.push_back(trace.row(i)[d]);
    caches.emplace_back(std::move(sizes), config.dims[d].splittable);
    other_half.emplace_back(trace, d);
  }
  std::vector<std::vector<DimensionOptimum>> out;
  for (const ReplayResult& r : results) {
    std::vector<DimensionOptimum>& per_dimension = out.emplace_back(n);
    for (size_t d = 0; d < n; ++d) {
      DimensionOptimum& one = per_dimension[d];
      one.gears = RoundedAverageGears(r, d);
      auto plan = caches[d].Get(one.gears, /*splitting=*/false);
      if (!plan.ok()) return plan.status();
      one.plan = *std::move(plan);
      one.graph_count = GraphCount(r);
      if (one.graph_count > 0) {
        auto same = caches[d].Get(one.graph_count, /*splitting=*/false);
        if (!same.ok()) return same.status();
        one.same_graph_count = *std::move(same);
        auto half = other_half[d].Get(one.graph_count);
        if (!half.ok()) return half.status();
        one.other_half_waste = *half;
      }
      if (caches[d].splittable()) {
        auto split = caches[d].Get(one.gears, /*splitting=*/true);
        if (!split.ok()) return split.status();
        one.with_splitting = *std::move(split);
      }
    }
  }
  return out;
}

std::string ReplaySummaryJson(const ReplaySummary& summary, int indent) {
  std::vector<Json> each;
  for (size_t i = 0; i < summary.results.size(); ++i) {
    const ReplayResult& r = summary.results[i];
    Json j = Json::parse(ReplayResultJson(r));
    if (summary.max_reject_ratio.has_value()) {
      const double ratio = static_cast<double>(r.rejected_requests) /
                           static_cast<double>(std::max<uint64_t>(1, r.requests));
      j["rejected_ratio"] = ratio;
      j["max_reject_ratio"] = *summary.max_reject_ratio;
      j["rejected_ratio_exceeded"] = ratio > *summary.max_reject_ratio;
    }
    if (i < summary.optimum.size())
      j["offline_optimum"] = OptimumJson(r.dimensions, summary.optimum[i]);
    if (i < summary.executed.size()) {
      j["executed"] = Json::parse(ExecutedReplayResultJson(summary.executed[i]));
      j["executed"]["backend"] = summary.backend;
      j["executed"]["size_scale"] = summary.size_scale;
    }
    each.push_back(std::move(j));
  }
  if (each.size() == 1) return each.front().dump(indent);
  Json out;
  out["trace"] = summary.trace;
  out["policies"] = Json::object();
  for (size_t i = 0; i < each.size(); ++i)
    out["policies"][summary.results[i].policy] = std::move(each[i]);
  return out.dump(indent);
}

}  // namespace gearbox
