// Two-dimensional gear planning: independent, joint and sparse (§17.5.3).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "gearbox/planners.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;
using Combo = GearCombination;

SizeHistogram Marginal(const std::vector<Size2D>& sizes, bool first) {
  std::map<int64_t, double> m;
  for (const Size2D& s : sizes) m[first ? s.a : s.b] += s.count;
  SizeHistogram h;
  for (const auto& [v, c] : m) {
    h.values.push_back(v);
    h.counts.push_back(c);
  }
  return h;
}

int64_t MapUp(const std::vector<int64_t>& gears, int64_t v) {
  return *std::lower_bound(gears.begin(), gears.end(), v);
}

// Serves every request on the grid of `ga` x `gb`; fills the plan.
JointPlan OnGrid(const std::vector<Size2D>& sizes, const std::vector<int64_t>& ga,
                 const std::vector<int64_t>& gb, GearScheme scheme) {
  JointPlan p;
  p.scheme = scheme;
  std::map<Combo, double> used;
  for (const Size2D& s : sizes) {
    const Combo c{MapUp(ga, s.a), MapUp(gb, s.b)};
    used[c] += s.count;
    p.padded += s.count * static_cast<double>(c[0]) * static_cast<double>(c[1]);
    p.raw += s.count * static_cast<double>(s.a) * static_cast<double>(s.b);
  }
  for (const auto& [c, n] : used) p.graphs.push_back(c);
  return p;
}

JointPlan Independent(const std::vector<Size2D>& sizes, int max_graphs) {
  const SizeHistogram ha = Marginal(sizes, true), hb = Marginal(sizes, false);
  JointPlan best;
  best.padded = std::numeric_limits<double>::infinity();
  const int ka_max = std::min<int>(max_graphs, static_cast<int>(ha.values.size()));
  for (int ka = 1; ka <= ka_max; ++ka) {
    const auto ga = OptimalGears(ha, ka, false)->gears;
    // The largest kb whose used combinations still fit (they grow with kb).
    int lo = 1, hi = std::min<int>(max_graphs, static_cast<int>(hb.values.size()));
    JointPlan fit;
    fit.padded = std::numeric_limits<double>::infinity();
    while (lo <= hi) {
      const int kb = (lo + hi) / 2;
      JointPlan p = OnGrid(sizes, ga, OptimalGears(hb, kb, false)->gears, GearScheme::kIndependent);
      if (static_cast<int>(p.graphs.size()) <= max_graphs) {
        fit = p;
        lo = kb + 1;
      } else {
        hi = kb - 1;
      }
    }
    if (fit.padded < best.padded) best = fit;
  }
  return best;
}

// Lloyd refinement from `combos` (combos[0] must be the covering (max, max)):
// assign each request to its cheapest covering combination, shrink each
// combination to its members; neither step can raise the padded total.
JointPlan Refine(const std::vector<Size2D>& sizes, std::vector<Combo> combos, int64_t max_a,
                 int64_t max_b) {
  JointPlan p;
  p.scheme = GearScheme::kJoint;
  for (int iter = 0; iter < 50; ++iter) {
    std::vector<Combo> next(combos.size(), {0, 0});
    next[0] = {max_a, max_b};
    double padded = 0;
    for (const Size2D& s : sizes) {
      size_t best = 0;
      double bv = std::numeric_limits<double>::infinity();
      for (size_t c = 0; c < combos.size(); ++c) {
        if (combos[c][0] < s.a || combos[c][1] < s.b) continue;
        const double v = static_cast<double>(combos[c][0]) * static_cast<double>(combos[c][1]);
        if (v < bv) {
          bv = v;
          best = c;
        }
      }
      padded += s.count * bv;
      next[best][0] = std::max(next[best][0], s.a);
      next[best][1] = std::max(next[best][1], s.b);
    }
    p.padded = padded;
    if (next == combos) break;
    combos = next;
  }
  for (const Size2D& s : sizes)
    p.raw += s.count * static_cast<double>(s.a) * static_cast<double>(s.b);
  for (const Combo& c : combos) {
    if (c[0] > 0) p.graphs.push_back(c);
  }
  std::sort(p.graphs.begin(), p.graphs.end());
  p.graphs.erase(std::unique(p.graphs.begin(), p.graphs.end()), p.graphs.end());
  return p;
}

JointPlan Joint(const std::vector<Size2D>& sizes, int max_graphs, uint64_t seed) {
  int64_t max_a = 0, max_b = 0;
  for (const Size2D& s : sizes) {
    max_a = std::max(max_a, s.a);
    max_b = std::max(max_b, s.b);
  }
  // k-means++ on (log a, log b), weighted by count; the top combination
  // (max, max) is always there so every request is covered.
  std::mt19937_64 rng(seed);
  auto la = [](int64_t v) { return std::log2(static_cast<double>(v)); };
  std::vector<std::pair<double, double>> centers = {{la(max_a), la(max_b)}};
  std::vector<double> d2(sizes.size());
  while (static_cast<int>(centers.size()) < max_graphs) {
    double total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      double best = std::numeric_limits<double>::infinity();
      for (const auto& [ca, cb] : centers) {
        const double da = la(sizes[i].a) - ca, db = la(sizes[i].b) - cb;
        best = std::min(best, da * da + db * db);
      }
      d2[i] = best * sizes[i].count;
      total += d2[i];
    }
    if (total <= 0) break;
    std::discrete_distribution<size_t> pick(d2.begin(), d2.end());
    const Size2D& s = sizes[pick(rng)];
    centers.push_back({la(s.a), la(s.b)});
  }
  // Initial combinations: each request joins its nearest center; a
  // combination is its members' (max a, max b).
  std::vector<Combo> combos(centers.size(), {0, 0});
  combos[0] = {max_a, max_b};
  for (const Size2D& s : sizes) {
    size_t best = 0;
    double bd = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < centers.size(); ++c) {
      const double da = la(s.a) - centers[c].first, db = la(s.b) - centers[c].second;
      if (da * da + db * db < bd) {
        bd = da * da + db * db;
        best = c;
      }
    }
    combos[best][0] = std::max(combos[best][0], s.a);
    combos[best][1] = std::max(combos[best][1], s.b);
  }
  JointPlan seeded = Refine(sizes, combos, max_a, max_b);
  // Also refine the independent grid's combinations: the joint plan is then
  // never worse than the independent one.
  JointPlan grid = Independent(sizes, max_graphs);
  std::vector<Combo> from_grid = {{max_a, max_b}};
  for (const Combo& c : grid.graphs) {
    if (c != Combo{max_a, max_b}) from_grid.push_back(c);
  }
  JointPlan refined = Refine(sizes, from_grid, max_a, max_b);
  return refined.padded <= seeded.padded ? refined : seeded;
}

// The combinations of a k x k independent grid that carry the most traffic,
// up to the budget; requests outside them run uncompiled.
JointPlan SparseGrid(const std::vector<Size2D>& sizes, int max_graphs, int k) {
  const SizeHistogram ha = Marginal(sizes, true), hb = Marginal(sizes, false);
  const auto ga = OptimalGears(ha, k, false)->gears;
  const auto gb = OptimalGears(hb, k, false)->gears;
  std::map<Combo, double> traffic;
  for (const Size2D& s : sizes) traffic[{MapUp(ga, s.a), MapUp(gb, s.b)}] += s.count;
  std::vector<std::pair<double, Combo>> ranked;
  for (const auto& [c, n] : traffic) ranked.push_back({n, c});
  std::sort(ranked.rbegin(), ranked.rend());
  std::map<Combo, bool> kept;
  JointPlan p;
  p.scheme = GearScheme::kSparse;
  for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < max_graphs; ++i) {
    kept[ranked[i].second] = true;
    p.graphs.push_back(ranked[i].second);
  }
  double total = 0, fallback = 0;
  for (const Size2D& s : sizes) {
    const Combo c{MapUp(ga, s.a), MapUp(gb, s.b)};
    const double raw = static_cast<double>(s.a) * static_cast<double>(s.b);
    p.raw += s.count * raw;
    total += s.count;
    if (kept.count(c)) {
      p.padded += s.count * static_cast<double>(c[0]) * static_cast<double>(c[1]);
    } else {
      p.padded += s.count * raw;  // the generic, uncompiled version: no padding
      fallback += s.count;
    }
  }
  p.fallback_share = total > 0 ? fallback / total : 0.0;
  std::sort(p.graphs.begin(), p.graphs.end());
  return p;
}

// The grid resolution that compiles the most traffic within the budget
// (then the least padding).
JointPlan Sparse(const std::vector<Size2D>& sizes, int max_graphs) {
  JointPlan best;
  best.fallback_share = 2;
  for (int k : {2, 3, 4, 6, 8, 12, 16, 24, 32}) {
    JointPlan p = SparseGrid(sizes, max_graphs, k);
    if (p.fallback_share < best.fallback_share - 1e-12 ||
        (std::fabs(p.fallback_share - best.fallback_share) <= 1e-12 && p.padded < best.padded)) {
      best = p;
    }
  }
  return best;
}

}  // namespace

absl::StatusOr<JointPlan> PlanJoint(const std::vector<Size2D>& sizes, int max_graphs,
                                    GearScheme scheme, uint64_t seed) {
  if (sizes.empty()) return absl::InvalidArgumentError("no sizes to plan for");
  if (max_graphs < 1 || max_graphs > 4096) {
    return internal::InvalidFieldValue("--graphs", max_graphs, "an integer in [1, 4096]");
  }
  for (const Size2D& s : sizes) {
    if (s.a < 1 || s.b < 1 || !(s.count > 0)) {
      return internal::InvalidField("sizes", Cat("(", s.a, ", ", s.b, ") x ", s.count),
                                    "sizes >= 1, counts > 0");
    }
  }
  switch (scheme) {
    case GearScheme::kIndependent:
      return Independent(sizes, max_graphs);
    case GearScheme::kJoint:
      return Joint(sizes, max_graphs, seed);
    case GearScheme::kSparse:
      return Sparse(sizes, max_graphs);
  }
  return absl::InternalError("unknown scheme");
}

}  // namespace gearbox
