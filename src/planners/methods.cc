// Bucket-boundary algorithms (uniform, quantile, k-means++, exact DP) and
// the compile / runtime / memory cost model they are compared with.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "gearbox/planners.h"
#include "src/common/errors.h"

namespace gearbox {

// Declared in optimal.cc (the DP engine). Solves counts 1, 2, ... up to
// max_gears, stopping once the total rises (it is convex in the count).
namespace internal {
std::vector<int64_t> SolveBucketDp(const SizeHistogram& sizes, int max_gears,
                                   const std::vector<double>& unit,
                                   const std::vector<double>& fixed,
                                   std::vector<double>* best_per_count,
                                   std::vector<std::vector<int64_t>>* gears_per_count);
}  // namespace internal

namespace {

using internal::Cat;

std::vector<int64_t> Finish(std::vector<int64_t> gears, const SizeHistogram& h) {
  gears.push_back(h.values.back());  // the largest size must be covered
  std::sort(gears.begin(), gears.end());
  gears.erase(std::unique(gears.begin(), gears.end()), gears.end());
  return gears;
}

std::vector<int64_t> Uniform(const SizeHistogram& h, int k) {
  const double lo = static_cast<double>(h.values.front());
  const double hi = static_cast<double>(h.values.back());
  std::vector<int64_t> gears;
  for (int i = 1; i <= k; ++i) {
    // Near 2^63 the double may round past the largest size: cap it there
    // (converting a double >= 2^63 to int64 would overflow).
    const double boundary = std::ceil(lo + (hi - lo) * i / k);
    gears.push_back(boundary >= hi ? h.values.back() : static_cast<int64_t>(boundary));
  }
  return Finish(gears, h);
}

std::vector<int64_t> Quantile(const SizeHistogram& h, int k) {
  const double total = h.total_count();
  std::vector<int64_t> gears;
  double seen = 0;
  size_t v = 0;
  for (int i = 1; i <= k; ++i) {
    const double target = total * i / k;
    while (v + 1 < h.values.size() && seen + h.counts[v] < target - 1e-9) seen += h.counts[v++];
    gears.push_back(h.values[v]);
  }
  return Finish(gears, h);
}

// 1-D weighted k-means (k-means++ seeding, Lloyd); a cluster's gear is its
// largest member, so every member fits.
std::vector<int64_t> KMeans(const SizeHistogram& h, int k, uint64_t seed) {
  const size_t m = h.values.size();
  if (static_cast<size_t>(k) >= m) return h.values;
  std::mt19937_64 rng(seed);
  std::vector<double> centers;
  {
    std::discrete_distribution<size_t> first(h.counts.begin(), h.counts.end());
    centers.push_back(static_cast<double>(h.values[first(rng)]));
  }
  std::vector<double> d2(m);
  while (static_cast<int>(centers.size()) < k) {
    for (size_t i = 0; i < m; ++i) {
      double best = std::numeric_limits<double>::infinity();
      for (double c : centers) best = std::min(best, (h.values[i] - c) * (h.values[i] - c));
      d2[i] = best * h.counts[i];
    }
    double sum = 0;
    for (double x : d2) sum += x;
    if (sum <= 0) break;  // fewer distinct sizes than clusters
    std::discrete_distribution<size_t> next(d2.begin(), d2.end());
    centers.push_back(static_cast<double>(h.values[next(rng)]));
  }
  std::sort(centers.begin(), centers.end());
  std::vector<size_t> assign(m, 0);
  for (int iter = 0; iter < 100; ++iter) {
    bool changed = false;
    // Sizes and centers are sorted: a sweep assigns each size to its nearest center.
    size_t c = 0;
    for (size_t i = 0; i < m; ++i) {
      while (c + 1 < centers.size() &&
             std::fabs(h.values[i] - centers[c + 1]) <= std::fabs(h.values[i] - centers[c])) {
        ++c;
      }
      if (assign[i] != c) changed = true;
      assign[i] = c;
    }
    std::vector<double> sum(centers.size(), 0.0), weight(centers.size(), 0.0);
    for (size_t i = 0; i < m; ++i) {
      sum[assign[i]] += h.counts[i] * static_cast<double>(h.values[i]);
      weight[assign[i]] += h.counts[i];
    }
    for (size_t j = 0; j < centers.size(); ++j) {
      if (weight[j] > 0) centers[j] = sum[j] / weight[j];
    }
    std::sort(centers.begin(), centers.end());
    if (!changed && iter > 0) break;
  }
  std::vector<int64_t> gears;
  for (size_t i = 0; i < m; ++i) {
    if (i + 1 == m || assign[i + 1] != assign[i]) gears.push_back(h.values[i]);  // cluster max
  }
  return Finish(gears, h);
}

absl::Status CheckInput(const SizeHistogram& h, int k, const char* field) {
  if (h.values.empty()) return absl::InvalidArgumentError("no sizes to plan for");
  if (k < 1) return internal::InvalidFieldValue(field, k, "an integer >= 1");
  return absl::OkStatus();
}

}  // namespace

std::string_view PlanMethodName(PlanMethod method) {
  switch (method) {
    case PlanMethod::kUniform:
      return "uniform";
    case PlanMethod::kQuantile:
      return "quantile";
    case PlanMethod::kKMeans:
      return "kmeans";
    case PlanMethod::kDp:
      return "dp";
  }
  return "unknown";
}

absl::StatusOr<PlanMethod> ParsePlanMethod(std::string_view name) {
  for (PlanMethod m :
       {PlanMethod::kUniform, PlanMethod::kQuantile, PlanMethod::kKMeans, PlanMethod::kDp}) {
    if (name == PlanMethodName(m)) return m;
  }
  return internal::InvalidField("--method", Cat("\"", name, "\""),
                                "uniform, quantile, kmeans or dp");
}

absl::StatusOr<std::vector<int64_t>> PlanGears(const SizeHistogram& h, int k, PlanMethod method,
                                               uint64_t seed) {
  if (auto s = CheckInput(h, k, "--gears"); !s.ok()) return s;
  switch (method) {
    case PlanMethod::kUniform:
      return Uniform(h, k);
    case PlanMethod::kQuantile:
      return Quantile(h, k);
    case PlanMethod::kKMeans:
      return KMeans(h, k, seed);
    case PlanMethod::kDp: {
      auto plan = OptimalGears(h, k, /*splittable=*/false);
      if (!plan.ok()) return plan.status();
      return plan->gears;
    }
  }
  return absl::InternalError("unknown method");
}

namespace {
// x^e with the common exponents exact and cheap (the policies evaluate it
// for every size of the window at every update).
double Power(double x, double e) {
  if (e == 1.0) return x;
  if (e == 2.0) return x * x;
  return std::pow(x, e);
}
}  // namespace

double GearCostModel::Run(int64_t size) const {
  return seconds_per_run + seconds_per_unit * Power(static_cast<double>(size), runtime_exponent);
}

double GearCostModel::GearBytes(int64_t gear) const {
  return memory_fixed_bytes +
         memory_bytes_per_unit * Power(static_cast<double>(gear), memory_exponent);
}

absl::Status ValidateCostModel(const GearCostModel& m) {
  const std::pair<const char*, double> nonnegative[] = {
      {"compile_seconds", m.compile_seconds},
      {"seconds_per_unit", m.seconds_per_unit},
      {"seconds_per_run", m.seconds_per_run},
      {"memory_fixed_bytes", m.memory_fixed_bytes},
      {"memory_bytes_per_unit", m.memory_bytes_per_unit},
      {"alpha", m.alpha},
      {"beta", m.beta},
      {"gamma", m.gamma}};
  for (const auto& [name, v] : nonnegative) {
    if (!(std::isfinite(v) && v >= 0))
      return internal::InvalidFieldValue(name, v, "a finite number >= 0");
  }
  for (const auto& [name, v] :
       {std::pair<const char*, double>{"runtime_exponent", m.runtime_exponent},
        {"memory_exponent", m.memory_exponent}}) {
    if (!(std::isfinite(v) && v > 0 && v <= 4))
      return internal::InvalidFieldValue(name, v, "a number in (0, 4]");
  }
  if (m.seconds_per_unit <= 0 || m.beta <= 0) {
    return internal::InvalidField("beta * seconds_per_unit", Cat(m.beta * m.seconds_per_unit),
                                  "> 0 (padding must cost something)");
  }
  return absl::OkStatus();
}

absl::StatusOr<CostBreakdown> EvaluateCost(const SizeHistogram& h, std::span<const int64_t> gears,
                                           const GearCostModel& m) {
  if (gears.empty()) return internal::InvalidField("gears", "[]", "at least one gear");
  if (!h.values.empty() && h.values.back() > gears.back()) {
    return internal::InvalidFieldValue(
        "gears", gears.back(), Cat("a largest gear covering the largest size ", h.values.back()));
  }
  CostBreakdown c;
  c.compile_seconds = static_cast<double>(gears.size()) * m.compile_seconds;
  for (size_t i = 0; i < h.values.size(); ++i) {
    const int64_t g = *std::lower_bound(gears.begin(), gears.end(), h.values[i]);
    c.padding_seconds += h.counts[i] * (m.Run(g) - m.Run(h.values[i]));
  }
  for (int64_t g : gears) c.memory_gib += m.GearBytes(g) / (1024.0 * 1024.0 * 1024.0);
  c.total = m.alpha * c.compile_seconds + m.beta * c.padding_seconds + m.gamma * c.memory_gib;
  return c;
}

namespace {

// The exact DP under the cost model over `candidates` (the sizes, possibly
// with weight-0 positions): each candidate costs a compile, or `held_cost`
// where `is_held` says so, plus its memory. totals[k] is the modelled cost
// with exactly k gears plus the same constant for every k (the sizes' own
// run time), so its smallest entry (the fewest gears on a tie) is the plan.
// Empty when the DP plans nothing.
// Element b - 1: the plan within b gears, for every b up to max_budget,
// from one DP (its layers do not depend on the budget).
std::vector<std::vector<int64_t>> CheapestDpGearsPerBudget(const SizeHistogram& candidates,
                                                           int max_budget, const GearCostModel& m,
                                                           const std::vector<bool>& is_held,
                                                           double held_cost) {
  std::vector<double> unit, fixed;
  for (size_t c = 0; c < candidates.values.size(); ++c) {
    const int64_t v = candidates.values[c];
    unit.push_back(m.beta * m.Run(v));
    fixed.push_back((is_held[c] ? held_cost : m.alpha * m.compile_seconds) +
                    m.gamma * m.GearBytes(v) / (1024.0 * 1024.0 * 1024.0));
  }
  std::vector<double> totals;
  std::vector<std::vector<int64_t>> per_count;
  internal::SolveBucketDp(candidates, max_budget, unit, fixed, &totals, &per_count);
  std::vector<std::vector<int64_t>> per_budget;
  size_t best_k = 0;
  for (size_t b = 1; b <= static_cast<size_t>(max_budget); ++b) {
    if (b < per_count.size() && (best_k == 0 || totals[b] < totals[best_k])) best_k = b;
    per_budget.push_back(best_k > 0 ? per_count[best_k] : std::vector<int64_t>{});
  }
  return per_budget;
}

std::vector<int64_t> CheapestDpGears(const SizeHistogram& candidates, int budget,
                                     const GearCostModel& m, const std::vector<bool>& is_held,
                                     double held_cost) {
  return CheapestDpGearsPerBudget(candidates, budget, m, is_held, held_cost).back();
}

// The sizes, and every held gear within their range as a candidate of its
// own (weight 0); `is_held` marks the held ones, `*inside` counts them.
SizeHistogram HeldGearCandidates(const SizeHistogram& h, std::span<const int64_t> held,
                                 std::vector<bool>* is_held, size_t* inside_count) {
  std::vector<int64_t> sorted_held(held.begin(), held.end());
  std::sort(sorted_held.begin(), sorted_held.end());
  std::vector<int64_t> inside;
  for (int64_t g : sorted_held) {
    if (g >= h.values.front() && g <= h.values.back() && (inside.empty() || inside.back() != g))
      inside.push_back(g);
  }
  SizeHistogram candidates;
  size_t i = 0;
  size_t j = 0;
  while (i < h.values.size() || j < inside.size()) {
    if (j < inside.size() && (i == h.values.size() || inside[j] < h.values[i])) {
      candidates.values.push_back(inside[j++]);
      candidates.counts.push_back(0.0);
      continue;
    }
    if (j < inside.size() && inside[j] == h.values[i]) ++j;
    candidates.values.push_back(h.values[i]);
    candidates.counts.push_back(h.counts[i]);
    ++i;
  }
  is_held->clear();
  for (int64_t v : candidates.values)
    is_held->push_back(std::binary_search(sorted_held.begin(), sorted_held.end(), v));
  *inside_count = inside.size();
  return candidates;
}

absl::Status CheckHeldInput(const SizeHistogram& h, int budget, const GearCostModel& m,
                            double held_cost) {
  if (auto s = CheckInput(h, budget, "--budget"); !s.ok()) return s;
  if (auto s = ValidateCostModel(m); !s.ok()) return s;
  if (!(std::isfinite(held_cost) && held_cost >= 0)) {
    return internal::InvalidFieldValue("held_cost", held_cost, "a finite number >= 0");
  }
  return absl::OkStatus();
}

// Fills the plan's raw and padded totals on `h` and its search description.
absl::Status FinishPlan(const SizeHistogram& h, std::string search, CostPlan* best) {
  best->plan.raw = h.total_size();
  auto padded = PaddedTotal(h, best->plan.gears, false);
  if (!padded.ok()) return padded.status();
  best->plan.padded = *padded;
  best->plan.search = std::move(search);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CostPlan> PlanWithHeldGears(const SizeHistogram& h, int budget,
                                           const GearCostModel& m, std::span<const int64_t> held,
                                           double held_cost) {
  if (auto s = CheckHeldInput(h, budget, m, held_cost); !s.ok()) return s;
  // The sizes, and every held gear within their range as a candidate of
  // its own (weight 0) that costs held_cost instead of a compile.
  std::vector<bool> is_held;
  size_t inside = 0;
  const SizeHistogram candidates = HeldGearCandidates(h, held, &is_held, &inside);
  auto held_at = [&](int64_t v) { return std::find(held.begin(), held.end(), v) != held.end(); };
  CostPlan best;
  best.plan.gears = CheapestDpGears(candidates, budget, m, is_held, held_cost);
  if (best.plan.gears.empty()) return absl::InternalError("the DP planned no gears");
  auto cost = EvaluateCost(h, best.plan.gears, m);
  if (!cost.ok()) return cost.status();
  best.cost = *cost;
  double held_compiles = 0;
  for (int64_t g : best.plan.gears) held_compiles += held_at(g) ? 1 : 0;
  best.cost.compile_seconds -= held_compiles * m.compile_seconds;
  best.cost.total += held_compiles * (held_cost - m.alpha * m.compile_seconds);
  if (auto s = FinishPlan(h,
                          Cat("dp, best of 1..", budget, " gears under the cost model, ", inside,
                              " held gears at their holding cost"),
                          &best);
      !s.ok())
    return s;
  return best;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> PlanWithHeldGearsPerBudget(
    const SizeHistogram& h, int max_budget, const GearCostModel& m, std::span<const int64_t> held,
    double held_cost) {
  if (auto s = CheckHeldInput(h, max_budget, m, held_cost); !s.ok()) return s;
  std::vector<bool> is_held;
  size_t inside = 0;
  const SizeHistogram candidates = HeldGearCandidates(h, held, &is_held, &inside);
  return CheapestDpGearsPerBudget(candidates, max_budget, m, is_held, held_cost);
}

absl::StatusOr<CostPlan> PlanWithCostModel(const SizeHistogram& h, int budget, PlanMethod method,
                                           const GearCostModel& m, uint64_t seed) {
  if (auto s = CheckInput(h, budget, "--budget"); !s.ok()) return s;
  if (auto s = ValidateCostModel(m); !s.ok()) return s;
  CostPlan best;
  best.cost.total = std::numeric_limits<double>::infinity();
  auto consider = [&](std::vector<int64_t> gears) -> absl::Status {
    auto cost = EvaluateCost(h, gears, m);
    if (!cost.ok()) return cost.status();
    if (cost->total < best.cost.total) {
      best.cost = *cost;
      best.plan.gears = std::move(gears);
    }
    return absl::OkStatus();
  };
  if (method == PlanMethod::kDp) {
    // Exact: the DP's bucket cost is the weighted model itself; only its
    // cheapest count is evaluated.
    std::vector<int64_t> gears =
        CheapestDpGears(h, budget, m, std::vector<bool>(h.values.size(), false), 0.0);
    if (!gears.empty()) {
      if (auto s = consider(std::move(gears)); !s.ok()) return s;
    }
  } else {
    for (int k = 1; k <= budget; ++k) {
      auto gears = PlanGears(h, k, method, seed);
      if (!gears.ok()) return gears.status();
      if (auto s = consider(*std::move(gears)); !s.ok()) return s;
    }
  }
  if (auto s = FinishPlan(
          h, Cat(PlanMethodName(method), ", best of 1..", budget, " gears under the cost model"),
          &best);
      !s.ok())
    return s;
  return best;
}

}  // namespace gearbox
