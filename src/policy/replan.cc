// DecideReplan: the replan policy's update, in order (docs/POLICY.md, "The
// replan policy"). The steps live in their own files (replan_internal.h).
#include <algorithm>
#include <limits>
#include <vector>

#include "gearbox/replan_policy.h"
#include "src/policy/gear_bytes.h"
#include "src/policy/replan_internal.h"

namespace gearbox {
namespace {

// The seed policy's record for the per-gear numbers (hits, padding,
// samples), with nothing decided: this policy's decisions replace its
// verdicts, additions and changes.
UpdateDecision StartFromTheSeedRecord(const GearSet& gears, const WindowStats& stats,
                                      const MemoryState& memory, const AdaptiveOptions& adaptive,
                                      double now) {
  AdaptiveOptions frozen = adaptive;
  frozen.recent_use_protect_seconds = std::numeric_limits<double>::infinity();
  UpdateDecision out = DecideUpdate(gears, stats, MemoryState{}, frozen, now);
  UpdateRecord& rec = out.record;
  rec.policy = UpdatePolicy::kReplan;
  rec.memory = memory;
  rec.additions.clear();
  rec.addition_budget.reset();
  for (GearRecord& g : rec.gears) {
    g.verdict = GearVerdict::kKept;
    g.examined = false;
  }
  rec.targets.assign(gears.num_dimensions(), {});
  rec.drift.assign(gears.num_dimensions(), {});
  rec.regime.assign(gears.num_dimensions(), {});
  out.protect.clear();
  // The seed policy's own additions are not this policy's: a dimension this
  // policy leaves alone (no statistics, too little traffic) must not carry
  // them into the decision.
  for (int d = 0; d < gears.num_dimensions(); ++d) {
    out.added[d].clear();
    out.removed[d].clear();
  }
  return out;
}

// Whether anything changed, and the record's copy of the outcome.
void Finish(const GearSet& gears, UpdateDecision* out) {
  out->changed = false;
  for (int d = 0; d < gears.num_dimensions(); ++d) {
    if (!out->removed[d].empty() || !out->added[d].empty()) out->changed = true;
  }
  if (gears.scheme() != GearScheme::kIndependent &&
      out->next_combinations != gears.combinations()) {
    out->changed = true;
  }
  UpdateRecord& rec = out->record;
  rec.removed = out->removed;
  rec.added = out->added;
  rec.gears_after = out->next_gears;
  rec.changed = out->changed;
}

// Each dimension's most gears: max_gears_per_type, and the graph budget
// (max_graphs): one dimension's gears are its graphs; with the independent
// scheme every combination of several dimensions' gears may be one, and a
// sparse set runs a cell only on its own graph, so its grid is bounded the
// same way (more cells than graphs would run uncompiled). A joint set's
// graphs serve the cells around them: only its compiled combinations are
// bounded (DecideCombinations).
std::vector<int> GearCapsOf(const GearSet& gears, const WindowStats& stats,
                            const std::vector<internal::DimensionCost>& costs,
                            const AdaptiveOptions& adaptive, const ReplanOptions& o,
                            std::vector<int>* shares) {
  const int n = gears.num_dimensions();
  if (n == 1) {
    *shares = {std::min(adaptive.max_gears_per_type, o.max_graphs)};
    return *shares;
  }
  std::vector<int> caps(static_cast<size_t>(n), adaptive.max_gears_per_type);
  *shares = caps;
  if (gears.scheme() == GearScheme::kJoint) return caps;
  std::vector<std::vector<double>> curves;
  std::vector<int> current;
  for (int d = 0; d < n; ++d) {
    curves.push_back(internal::CostCurve(gears, d, internal::StatsOf(gears, stats, d),
                                         costs[static_cast<size_t>(d)], adaptive, o));
    current.push_back(static_cast<int>(gears.gears(d).size()));
  }
  return internal::GearCaps(curves, current, o.max_graphs, adaptive.max_gears_per_type, shares);
}

}  // namespace

UpdateDecision DecideReplan(const GearSet& gears, const WindowStats& stats,
                            const MemoryState& memory, const AdaptiveOptions& adaptive,
                            const ReplanOptions& o, double now, ReplanScope scope) {
  UpdateDecision out = StartFromTheSeedRecord(gears, stats, memory, adaptive, now);
  if (scope == ReplanScope::kCombinations) {
    // The grid stays; only which of its cells are compiled may change.
    for (int d = 0; d < gears.num_dimensions(); ++d)
      out.next_gears[d].assign(gears.gears(d).begin(), gears.gears(d).end());
    if (gears.scheme() != GearScheme::kIndependent) {
      internal::DecideCombinations(gears, stats, memory, adaptive, o, now, &out);
    }
    Finish(gears, &out);
    return out;
  }
  // 1. Each dimension's gears (the grid), priced as its gears' combinations
  // with the others.
  const std::vector<internal::DimensionCost> costs = internal::CostPerDimension(gears, stats, o);
  std::vector<int> shares;
  const std::vector<int> caps = GearCapsOf(gears, stats, costs, adaptive, o, &shares);
  for (int d = 0; d < gears.num_dimensions(); ++d) {
    internal::GearLimit limit{caps[static_cast<size_t>(d)], adaptive.max_gears_per_type,
                              shares[static_cast<size_t>(d)]};
    if (gears.scheme() != GearScheme::kJoint) {
      // The others' gears: those already replanned, and the current ones.
      double others = 1;
      for (int e = 0; e < gears.num_dimensions(); ++e) {
        if (e != d)
          others *= static_cast<double>(e < d ? out.next_gears[e].size() : gears.gears(e).size());
      }
      limit.hard_max_gears =
          std::clamp(static_cast<int>(o.max_graphs / others), 1, adaptive.max_gears_per_type);
    }
    internal::ReplanDimension(gears, d, internal::StatsOf(gears, stats, d), costs[d], memory,
                              adaptive, o, limit, now, &out);
  }
  // 2. Joint and sparse sets: which cells of the new grid are compiled.
  if (gears.scheme() != GearScheme::kIndependent) {
    internal::DecideCombinations(gears, stats, memory, adaptive, o, now, &out);
  }
  Finish(gears, &out);
  // 3. Gears the byte budget can never hold: declined, as the seed policy
  // does (internal::DeclineNeverFitting, gear_bytes.h).
  internal::DeclineNeverFitting(out.next_gears, out.record.dimensions, memory,
                                adaptive.min_gear_count_per_type, &out.record.declined);
  return out;
}

}  // namespace gearbox
