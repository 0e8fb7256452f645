// The graph budget (ReplanOptions::max_graphs) as one gear cap per
// dimension: with the independent scheme every combination of the
// dimensions' gears may compile, so the product of their counts is bounded.
#include <algorithm>
#include <cmath>

#include "src/policy/replan_internal.h"

namespace gearbox::internal {
namespace {

double Product(const std::vector<int>& k) {
  double p = 1;
  for (int x : k) p *= x;
  return p;
}

// Raises caps one at a time while the product stays within `budget`: each
// time the dimension `pick` chooses (or none: -1).
template <typename Pick>
void Raise(std::vector<int>* caps, double budget, Pick&& pick) {
  for (;;) {
    const int d = pick(*caps);
    if (d < 0) return;
    std::vector<int> next = *caps;
    ++next[static_cast<size_t>(d)];
    if (Product(next) > budget) return;
    *caps = std::move(next);
  }
}

}  // namespace

std::vector<int> GearCaps(std::span<const std::vector<double>> cost_curves,
                          std::span<const int> current, int budget, int max_per_dimension,
                          std::vector<int>* shares) {
  const size_t n = cost_curves.size();
  const double b = std::max(budget, 1);
  std::vector<int> caps(n, 1);
  // The cost saved by dimension d's next gear, per unit of the budget's
  // logarithm it uses (a gear more multiplies the graphs by (k + 1) / k).
  auto gain = [&](const std::vector<int>& k, size_t d) {
    const std::vector<double>& c = cost_curves[d];
    const size_t at = static_cast<size_t>(k[d]);  // c[at - 1] is the cost at k[d] gears
    if (k[d] >= max_per_dimension || at >= c.size()) return 0.0;
    return (c[at - 1] - c[at]) / std::log(static_cast<double>(k[d] + 1) / k[d]);
  };
  Raise(&caps, b, [&](const std::vector<int>& k) {
    int best = -1;
    double most = 0;
    for (size_t d = 0; d < n; ++d) {
      std::vector<int> next = k;
      ++next[d];
      if (Product(next) > b) continue;  // only what still fits competes
      const double g = gain(k, d);
      if (g > most) best = static_cast<int>(d), most = g;
    }
    return best;
  });
  if (shares != nullptr) *shares = caps;
  // A gear the target does not want yet may stay (the hysteresis band):
  // room left in the budget goes to the dimensions that hold more gears
  // than their cap, most first, one gear a round.
  Raise(&caps, b, [&](const std::vector<int>& k) {
    int best = -1, most = 0;
    for (size_t d = 0; d < n; ++d) {
      const int room = std::min(current[d], max_per_dimension) - k[d];
      if (room > most) best = static_cast<int>(d), most = room;
    }
    return best;
  });
  // Room still left is nobody's in particular: it lets a dimension add a
  // target gear before the hysteresis band lets an old one go, as without a
  // budget. The smallest cap first.
  Raise(&caps, b, [&](const std::vector<int>& k) {
    int best = -1;
    for (size_t d = 0; d < n; ++d) {
      if (k[d] < max_per_dimension && (best < 0 || k[d] < k[static_cast<size_t>(best)]))
        best = static_cast<int>(d);
    }
    return best;
  });
  return caps;
}

}  // namespace gearbox::internal
