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

// One column's sizes split by alternate minutes of trace time (from the
// first row), each half with the column's largest size added (so that a plan
// of it covers the other half), and each half's own sizes.
struct Halves {
  SizeHistogram planned[2];
  SizeHistogram sizes[2];
};

// Times further than this from the first row's are refused (a hand-made
// trace; a loaded one is within 1e11 s): their minute would not fit an int64.
constexpr double kMaxSecondsFromFirstRow = 1e12;

// nullopt when a half has no rows.
absl::StatusOr<std::optional<Halves>> SplitByAlternateMinutes(const Trace& trace, size_t d) {
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
    if (!(std::fabs(since) <= kMaxSecondsFromFirstRow)) {
      return absl::InvalidArgumentError(
          internal::Cat("other-half optimum: row ", i + 1, " has t = ", trace.time[i],
                        ", expected finite seconds within ", kMaxSecondsFromFirstRow,
                        " of the first row's t = ", trace.time[0]));
    }
    const auto minute = static_cast<int64_t>(std::floor(since / 60.0));
    half[minute & 1].push_back(size);
    largest = std::max(largest, size);
  }
  if (half[0].empty() || half[1].empty()) return std::optional<Halves>();
  Halves out;
  for (int h = 0; h < 2; ++h) {
    out.sizes[h] = SizeHistogram::FromSizes(half[h]);
    half[h].push_back(largest);
    out.planned[h] = SizeHistogram::FromSizes(half[h]);
  }
  return std::optional<Halves>(std::move(out));
}

// Each half's optimum at `gears` padding the other half: the waste of the two.
absl::StatusOr<double> OtherHalfWasteOf(const Halves& halves, int gears) {
  double padded = 0, raw = 0;
  for (int h = 0; h < 2; ++h) {
    auto plan = OptimalGears(halves.planned[h], gears, /*splittable=*/false);
    if (!plan.ok()) return plan.status();
    auto total = PaddedTotal(halves.sizes[1 - h], plan->gears, /*splittable=*/false);
    if (!total.ok()) return total.status();
    padded += *total;
    raw += halves.sizes[1 - h].total_size();
  }
  return raw > 0 ? padded / raw - 1.0 : 0.0;
}

// Optimal plans of one dimension by gear count, each computed once; with the
// column's halves (one-dimensional configs), the other-half waste likewise.
class OptimumCache {
 public:
  OptimumCache(std::vector<int64_t> sizes, bool splittable, std::optional<Halves> halves)
      : histogram_(SizeHistogram::FromSizes(sizes)),
        splittable_(splittable),
        halves_(std::move(halves)) {}
  absl::StatusOr<GearPlan> Get(int gears, bool splitting) {
    auto& plans = splitting ? split_ : whole_;
    if (auto it = plans.find(gears); it != plans.end()) return it->second;
    auto plan = OptimalGears(histogram_, gears, splitting);
    if (!plan.ok()) return plan.status();
    return plans[gears] = *std::move(plan);
  }
  absl::StatusOr<std::optional<double>> OtherHalf(int gears) {
    if (!halves_.has_value()) return std::optional<double>();
    if (auto it = other_half_.find(gears); it != other_half_.end()) return it->second;
    auto waste = OtherHalfWasteOf(*halves_, gears);
    if (!waste.ok()) return waste.status();
    return std::optional<double>(other_half_[gears] = *waste);
  }
  bool splittable() const { return splittable_; }

 private:
  SizeHistogram histogram_;
  bool splittable_;
  std::optional<Halves> halves_;
  std::map<int, GearPlan> whole_, split_;
  std::map<int, double> other_half_;
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
  auto halves = SplitByAlternateMinutes(trace, d);
  if (!halves.ok()) return halves.status();
  if (!halves->has_value()) return std::optional<double>();
  auto waste = OtherHalfWasteOf(**halves, gears);
  if (!waste.ok()) return waste.status();
  return std::optional<double>(*waste);
}

absl::StatusOr<std::vector<std::vector<DimensionOptimum>>> OfflineOptimum(
    const RuntimeConfig& config, const Trace& trace, std::span<const ReplayResult> results) {
  const size_t n = config.dims.size();
  std::vector<OptimumCache> caches;
  caches.reserve(n);
  for (size_t d = 0; d < n; ++d) {
    std::vector<int64_t> sizes;
    sizes.reserve(trace.rows());
    for (size_t i = 0; i < trace.rows(); ++i) sizes.push_back(trace.row(i)[d]);
    // The other half is read at the compiled-graph count: one dimension only.
    std::optional<Halves> halves;
    if (n == 1) {
      auto split = SplitByAlternateMinutes(trace, d);
      if (!split.ok()) return split.status();
      halves = *std::move(split);
    }
    caches.emplace_back(std::move(sizes), config.dims[d].splittable, std::move(halves));
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
        auto half = caches[d].OtherHalf(one.graph_count);
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
