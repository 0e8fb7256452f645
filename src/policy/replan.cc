#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "gearbox/replan_policy.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The window's size distribution with prefix sums, so the padding cost of
// any gear set is O(gears * log sizes).
class Distribution {
 public:
  Distribution(const std::vector<WeightedSize>& sizes, const GearCostModel& m) : m_(m) {
    weight_.push_back(0);
    run_.push_back(0);
    for (const WeightedSize& w : sizes) {
      if (w.weight <= 0) continue;
      value_.push_back(w.size);
      weight_.push_back(weight_.back() + w.weight);
      run_.push_back(run_.back() + w.weight * m.Run(w.size));
    }
  }
  bool empty() const { return value_.empty(); }
  double total_weight() const { return weight_.back(); }
  int64_t max_size() const { return value_.back(); }

  // Padding seconds of the window on `gears` (ascending): each size runs on
  // the smallest gear >= it; above the largest gear, a splittable dimension
  // pays its remainder's padding, a non-splittable one runs eagerly (none).
  double Padding(const std::vector<int64_t>& gears, bool splittable) const {
    double padding = 0;
    size_t from = 0;  // first size not yet assigned
    for (int64_t g : gears) {
      const size_t to = static_cast<size_t>(std::upper_bound(value_.begin(), value_.end(), g) - value_.begin());
      if (to > from) padding += m_.Run(g) * (weight_[to] - weight_[from]) - (run_[to] - run_[from]);
      from = std::max(from, to);
    }
    if (splittable && !gears.empty()) {
      const int64_t top = gears.back();
      for (size_t i = from; i < value_.size(); ++i) {
        const int64_t rest = value_[i] % top;
        if (rest == 0) continue;
        const int64_t g = *std::lower_bound(gears.begin(), gears.end(), rest);
        padding += (weight_[i + 1] - weight_[i]) * (m_.Run(g) - m_.Run(rest));
      }
    }
    return padding;
  }

  // Padding seconds of the sizes in (lo, hi] all running on `gear`.
  double Segment(int64_t lo, int64_t hi, int64_t gear) const {
    const size_t a = Index(lo), b = Index(hi);
    if (b <= a) return 0.0;
    return m_.Run(gear) * (weight_[b] - weight_[a]) - (run_[b] - run_[a]);
  }

  SizeHistogram Histogram(int64_t up_to) const {
    SizeHistogram h;
    for (size_t i = 0; i < value_.size() && value_[i] <= up_to; ++i) {
      h.values.push_back(value_[i]);
      h.counts.push_back(weight_[i + 1] - weight_[i]);
    }
    return h;
  }

  // Number of sizes <= x.
  size_t Index(int64_t x) const {
    return static_cast<size_t>(std::upper_bound(value_.begin(), value_.end(), x) - value_.begin());
  }

 private:
  const GearCostModel& m_;
  std::vector<int64_t> value_;
  std::vector<double> weight_;  // prefix sums
  std::vector<double> run_;     // prefix sums of weight * Run(size)
};

struct Move {
  std::string action;
  int64_t add = 0;
  int64_t remove = 0;
  double gain = 0;     // padding + memory saved over the horizon (weighted seconds)
  double compile = 0;  // weighted compile seconds of the addition
  double threshold = 0;
  std::string why_not;
};

}  // namespace

absl::Status ValidateReplanOptions(const ReplanOptions& o) {
  if (auto s = ValidateCostModel(o.cost); !s.ok()) return internal::WithContext(s, "replan.cost");
  const std::pair<const char*, double> positive[] = {{"replan.payback_seconds", o.payback_seconds},
                                                     {"replan.min_gain_ratio", o.min_gain_ratio},
                                                     {"replan.tail_ratio", o.tail_ratio}};
  for (const auto& [name, v] : positive) {
    if (!(std::isfinite(v) && v > 0)) return internal::InvalidFieldValue(name, v, "a finite number > 0");
  }
  if (o.min_gain_ratio < 1) {
    return internal::InvalidFieldValue("replan.min_gain_ratio", o.min_gain_ratio, "a ratio >= 1");
  }
  if (o.tail_ratio <= 1) return internal::InvalidFieldValue("replan.tail_ratio", o.tail_ratio, "a ratio > 1");
  const std::pair<const char*, double> nonnegative[] = {
      {"replan.gear_holding_seconds", o.gear_holding_seconds},
      {"replan.min_gear_lifetime_seconds", o.min_gear_lifetime_seconds},
      {"replan.readd_cooldown_seconds", o.readd_cooldown_seconds},
      {"replan.min_window_weight", o.min_window_weight}};
  if (!(std::isfinite(o.warmup_check_seconds) && o.warmup_check_seconds > 0)) {
    return internal::InvalidFieldValue("replan.warmup_check_seconds", o.warmup_check_seconds,
                                       "a finite number of seconds > 0");
  }
  for (const auto& [name, v] : nonnegative) {
    if (!(std::isfinite(v) && v >= 0)) return internal::InvalidFieldValue(name, v, "a finite number >= 0");
  }
  if (!(std::isfinite(o.update_interval_seconds) && o.update_interval_seconds >= 0)) {
    return internal::InvalidFieldValue("replan.update_interval_seconds", o.update_interval_seconds,
                                       "a finite number of seconds >= 0");
  }
  if (o.max_changes_per_update < 1 || o.max_changes_per_update > 1024) {
    return internal::InvalidFieldValue("replan.max_changes_per_update", o.max_changes_per_update,
                                       "an integer in [1, 1024]");
  }
  return absl::OkStatus();
}

UpdateDecision DecideReplan(const GearSet& gears, const WindowStats& stats, const MemoryState& memory,
                            const AdaptiveOptions& adaptive, const ReplanOptions& o, double now) {
  // Start from the seed policy's record for the per-gear numbers; this
  // policy's decisions replace its verdicts, additions and changes.
  AdaptiveOptions frozen = adaptive;
  frozen.recent_use_protect_seconds = std::numeric_limits<double>::infinity();
  UpdateDecision out = DecideUpdate(gears, stats, MemoryState{}, frozen, now);
  UpdateRecord& rec = out.record;
  rec.policy = "replan";
  rec.memory = memory;
  rec.additions.clear();
  rec.addition_budget.reset();
  for (GearRecord& g : rec.gears) {
    g.verdict = GearVerdict::kKept;
    g.examined = false;
  }
  const int num_dims = gears.num_dimensions();
  rec.targets.assign(num_dims, {});
  out.protect.clear();
  const double lambda = std::log(2.0) / adaptive.half_life_seconds;
  // With several dimensions a graph is compiled per gear combination, so a
  // gear of one dimension costs one compile (and one held graph) per gear of
  // the others that the window's traffic uses.
  auto stats_of = [&](int d) -> const DimensionStats* {
    for (const DimensionStats& c : stats.dimensions) {
      if (c.name == gears.dimension(d).name) return &c;
    }
    return nullptr;
  };
  // And a unit of padding along one dimension costs a whole row of the
  // others: run(gears) = seconds_per_unit * (product of gears)^exponent, so
  // dimension d's sizes run at seconds_per_unit times the mean over the
  // window of the other dimensions' (gear)^exponent (exact when the
  // dimensions are independent).
  std::vector<double> gears_in_use(num_dims, 1.0);
  std::vector<double> mean_gear_power(num_dims, 1.0);
  for (int d = 0; d < num_dims; ++d) {
    if (const DimensionStats* ds = stats_of(d)) {
      double used = 0, weight = 0, power = 0;
      for (const GearStats& g : ds->gears) {
        used += g.sample_count > 0 ? 1 : 0;
        weight += g.weighted_hits;
        power += g.weighted_hits * std::pow(static_cast<double>(g.gear), o.cost.runtime_exponent);
      }
      gears_in_use[d] = std::max(used, 1.0);
      if (weight > 0) mean_gear_power[d] = power / weight;
    }
  }

  for (int d = 0; d < num_dims; ++d) {
    const DimensionSpec& spec = gears.dimension(d);
    const DimensionStats* ds = stats_of(d);
    double combinations = 1;  // graphs per gear of this dimension
    GearCostModel m = o.cost;  // this dimension's view of the cost model
    for (int e = 0; e < num_dims; ++e) {
      if (e == d) continue;
      combinations *= gears_in_use[e];
      m.seconds_per_unit *= mean_gear_power[e];
    }
    const double compile_cost = m.alpha * m.compile_seconds * combinations;
    const double holding_cost = o.gear_holding_seconds * combinations;
    std::vector<int64_t> current(gears.gears(d).begin(), gears.gears(d).end());
    out.next_gears[d] = current;
    if (ds == nullptr) continue;
    const Distribution dist(ds->sizes, m);
    if (dist.empty() || dist.total_weight() < o.min_window_weight) {
      rec.declined.push_back({spec.name, "none", 0, 0, 0.0, 0.0, 0.0,
                              Cat("too little traffic in the window (", dist.empty() ? 0.0 : dist.total_weight(),
                                  " < min_window_weight)")});
      continue;
    }
    // The window's decayed weights stand for this many seconds of traffic
    // (only the part of the window that has traffic yet); window padding
    // times `horizon` is padding over the payback horizon.
    const double observed = std::max(ds->observed_seconds, adaptive.window_seconds / adaptive.window_slots);
    const double effective_seconds = (1.0 - std::exp(-lambda * observed)) / lambda;
    const double horizon = o.payback_seconds / effective_seconds;
    const int64_t max_gear = current.back();
    const bool keep_max = !spec.splittable;  // requests above it would fail
    const int64_t plan_top = keep_max ? std::min(dist.max_size(), max_gear) : dist.max_size();

    // 1. The target: the cost model's optimum on the window (exact DP).
    const SizeHistogram hist = dist.Histogram(plan_top);
    std::vector<int64_t> target;
    if (!hist.values.empty()) {
      GearCostModel scaled = m;
      scaled.beta = m.beta * horizon;  // padding counted over the payback horizon
      scaled.compile_seconds = m.compile_seconds * combinations;
      scaled.gamma = m.gamma * combinations;
      auto plan = PlanWithCostModel(hist, adaptive.max_gears_per_type, PlanMethod::kDp, scaled);
      if (plan.ok()) target = plan->plan.gears;
    }
    // 2. The tail: from the planned top to the largest gear, no gap wider
    // than tail_ratio; reuse the current gears there.
    if (keep_max && (target.empty() || target.back() < max_gear)) {
      double x = target.empty() ? static_cast<double>(plan_top) : static_cast<double>(target.back());
      while (x * o.tail_ratio < static_cast<double>(max_gear)) {
        const int64_t reach = static_cast<int64_t>(x * o.tail_ratio);
        auto it = std::upper_bound(current.begin(), current.end(), reach);
        int64_t next = (it != current.begin() && *std::prev(it) > static_cast<int64_t>(x)) ? *std::prev(it) : reach;
        target.push_back(next);
        x = static_cast<double>(next);
      }
      target.push_back(max_gear);
    }
    std::sort(target.begin(), target.end());
    target.erase(std::unique(target.begin(), target.end()), target.end());
    while (static_cast<int>(target.size()) > adaptive.max_gears_per_type) target.erase(target.begin());
    rec.targets[d] = target;

    // 3. Moves toward the target, best first, while they pay for themselves.
    std::map<int64_t, double> removed_at(ds->recently_removed.begin(), ds->recently_removed.end());
    // Gears this policy added, and when: protected for min_gear_lifetime
    // seconds unless the window brought them no traffic at all (removing an
    // unused gear is not churn). The initial gears are not protected.
    std::map<int64_t, double> created;
    for (const GearStats& g : ds->gears) {
      if (!g.initial && g.sample_count > 0) created[g.gear] = g.created_ts;
    }
    std::vector<int64_t> set = current;
    auto cost_of = [&](const std::vector<int64_t>& s) {
      double mem = 0;
      for (int64_t g : s) mem += m.GearBytes(g) / kGiB;
      return m.beta * dist.Padding(s, spec.splittable) * horizon + m.gamma * mem * combinations;
    };
    int changes = 0;
    int64_t budget = 0;  // net additions allowed while memory is high (none beyond removals)
    // First, the whole target at once: taken when everything it adds pays
    // for itself together (so a fresh runtime, or a shifted workload,
    // converges in one update instead of one gear at a time).
    {
      std::vector<int64_t> whole = target;
      std::vector<int64_t> kept_young;  // gears too young to remove stay
      for (int64_t c : set) {
        if (!std::binary_search(target.begin(), target.end(), c)) {
          auto it = created.find(c);
          if (!memory.high && it != created.end() && now - it->second < o.min_gear_lifetime_seconds) {
            kept_young.push_back(c);
          }
        }
      }
      whole.insert(whole.end(), kept_young.begin(), kept_young.end());
      std::sort(whole.begin(), whole.end());
      whole.erase(std::unique(whole.begin(), whole.end()), whole.end());
      int adds = 0;
      double readd_extra = 0;
      for (int64_t t : whole) {
        if (std::binary_search(set.begin(), set.end(), t)) continue;
        ++adds;
        auto r = removed_at.find(t);
        if (r != removed_at.end() && now - r->second < o.readd_cooldown_seconds) readd_extra += compile_cost;
      }
      const double gain = cost_of(set) - cost_of(whole);
      const bool fits = static_cast<int>(whole.size()) <= adaptive.max_gears_per_type &&
                        (!memory.high || static_cast<int>(whole.size()) <= static_cast<int>(set.size())) &&
                        adds <= o.max_changes_per_update;
      if (adds > 0 && fits && gain >= o.min_gain_ratio * (adds * compile_cost + readd_extra)) {
        for (int64_t c : set) {
          if (!std::binary_search(whole.begin(), whole.end(), c)) {
            for (GearRecord& g : rec.gears) {
              if (g.dimension == spec.name && g.gear == c) g.verdict = GearVerdict::kEvicted;
            }
          }
        }
        rec.changes.push_back({spec.name, "replan", static_cast<int64_t>(whole.size()), 0, gain,
                               adds * compile_cost, gain - adds * compile_cost,
                               Cat("the planned set pays for its ", adds, " compiles")});
        set = whole;
        for (int64_t t : set) {
          if (!created.count(t) && !std::binary_search(current.begin(), current.end(), t)) created[t] = now;
        }
        changes = adds;
      }
    }
    while (changes < o.max_changes_per_update) {
      const double base = cost_of(set);
      std::vector<int64_t> adds, removes;
      for (int64_t t : target) {
        if (!std::binary_search(set.begin(), set.end(), t)) adds.push_back(t);
      }
      for (int64_t c : set) {
        if (std::binary_search(target.begin(), target.end(), c)) continue;
        if (keep_max && c == max_gear) continue;
        removes.push_back(c);
      }
      if (target.empty()) break;
      auto young = [&](int64_t g) {
        auto it = created.find(g);
        return !memory.high && it != created.end() && now - it->second < o.min_gear_lifetime_seconds;
      };
      auto threshold_for = [&](int64_t added) {
        // Add / replace: gain >= ratio x compile (twice that for a gear removed
        // within the cooldown). Remove: keeping it must be worth less than its
        // holding cost, i.e. the removal's gain >= -gear_holding_seconds
        // (both per graph: times the combinations the gear is part of).
        if (!added) return -holding_cost;
        double t = o.min_gain_ratio * compile_cost;
        auto r = removed_at.find(added);
        if (r != removed_at.end() && now - r->second < o.readd_cooldown_seconds) t *= 2;
        return t;
      };
      // The gain of a move, computed locally: only the sizes between the
      // neighbours of the touched gears change gear (O(log sizes)); moves at
      // the top of a splittable dimension (which change its splitting) are
      // evaluated whole.
      auto gain_of = [&](int64_t add, int64_t remove) {
        const int64_t top = set.back();
        if (spec.splittable && ((remove && remove == top) || (add && add > top))) {
          std::vector<int64_t> next = set;
          if (remove) next.erase(std::find(next.begin(), next.end(), remove));
          if (add) next.insert(std::lower_bound(next.begin(), next.end(), add), add);
          return base - cost_of(next);
        }
        const int64_t low = std::min(add ? add : remove, remove ? remove : add);
        const int64_t high = std::max(add, remove);
        // Neighbours that stay: the largest gear below `low`, the smallest above `high`.
        int64_t lo = 0, hi = 0;
        for (int64_t g : set) {
          if (g == remove) continue;
          if (g < low) lo = g;
          if (g > high && hi == 0) hi = g;
        }
        auto segments = [&](const std::vector<int64_t>& span_gears) {
          double padding = 0;
          int64_t prev = lo;
          for (int64_t g : span_gears) {
            padding += dist.Segment(prev, g, g);
            prev = g;
          }
          return padding;  // sizes above the last gear up to hi: none when hi is a gear
        };
        std::vector<int64_t> before, after;
        for (int64_t g : set) {
          if (g > lo && (hi == 0 || g <= hi)) before.push_back(g);
        }
        for (int64_t g : before) {
          if (g != remove) after.push_back(g);
        }
        if (add) after.insert(std::lower_bound(after.begin(), after.end(), add), add);
        double gain = m.beta * horizon * (segments(before) - segments(after));
        if (m.gamma > 0) {
          gain += m.gamma * combinations * ((remove ? m.GearBytes(remove) : 0) - (add ? m.GearBytes(add) : 0)) / kGiB;
        }
        return gain;
      };
      std::vector<Move> moves;
      auto consider = [&](const char* action, int64_t add, int64_t remove) {
        Move mv{action, add, remove, gain_of(add, remove), add ? compile_cost : 0.0, threshold_for(add), ""};
        if (remove && young(remove)) mv.why_not = Cat("gear ", remove, " was added less than min_gear_lifetime_seconds ago");
        if (add && !remove && static_cast<int>(set.size()) >= adaptive.max_gears_per_type) {
          mv.why_not = "the dimension is at max_gears_per_type";
        }
        if (add && !remove && memory.high && budget <= 0) mv.why_not = "memory is high: no net additions";
        if (remove && !add && static_cast<int>(set.size()) <= adaptive.min_gear_count_per_type) {
          mv.why_not = "the dimension is at min_gear_count_per_type";
        }
        // The largest gear goes only once the planned largest is in place
        // (a splittable dimension would otherwise shrink into many chunks).
        if (remove && remove == set.back() &&
            !(std::binary_search(set.begin(), set.end(), target.back()) && remove > target.back())) {
          mv.why_not = Cat("gear ", remove, " is the largest until the planned largest is in place");
        }
        moves.push_back(std::move(mv));
      };
      for (int64_t t : adds) consider("add", t, 0);
      for (int64_t c : removes) consider("remove", 0, c);
      // Replacements: a planned gear takes the place of a neighbouring one
      // (far apart, an add and a remove are independent moves).
      for (int64_t t : adds) {
        auto above = std::upper_bound(set.begin(), set.end(), t);
        for (auto it : {above, above == set.begin() ? set.end() : std::prev(above)}) {
          if (it != set.end() && std::binary_search(removes.begin(), removes.end(), *it)) consider("replace", t, *it);
        }
      }
      if (moves.empty()) break;
      // Best net gain among the allowed moves that clear their threshold.
      const Move* best = nullptr;
      const Move* best_declined = nullptr;
      for (const Move& mv : moves) {
        const double net = mv.gain - mv.compile;
        const bool ok = mv.why_not.empty() && mv.gain >= mv.threshold;
        if (ok && (best == nullptr || net > best->gain - best->compile)) best = &mv;
        if (!ok && (best_declined == nullptr || net > best_declined->gain - best_declined->compile)) {
          best_declined = &mv;
        }
      }
      if (best == nullptr && memory.high && !removes.empty()) {
        // Memory pressure: give back the gear whose removal costs least.
        for (const Move& mv : moves) {
          if (mv.action == "remove" && (best == nullptr || mv.gain > best->gain)) best = &mv;
        }
      }
      if (best == nullptr) {
        if (best_declined != nullptr) {
          const Move& mv = *best_declined;
          rec.declined.push_back({spec.name, mv.action, mv.add ? mv.add : mv.remove, mv.add && mv.remove ? mv.remove : 0,
                                  mv.gain, mv.compile, mv.gain - mv.compile,
                                  !mv.why_not.empty() ? mv.why_not
                                                      : Cat("outside the hysteresis band (gain must reach ", mv.threshold, " s)")});
        }
        break;
      }
      const Move mv = *best;
      if (mv.remove) {
        set.erase(std::find(set.begin(), set.end(), mv.remove));
        out.removed[d].push_back(mv.remove);
        for (GearRecord& g : rec.gears) {
          if (g.dimension == spec.name && g.gear == mv.remove) g.verdict = GearVerdict::kEvicted;
        }
      }
      if (mv.add) {
        set.insert(std::lower_bound(set.begin(), set.end(), mv.add), mv.add);
        out.added[d].push_back(mv.add);
        created[mv.add] = now;
      }
      if (memory.high && mv.add && !mv.remove) --budget;
      if (memory.high && mv.remove && !mv.add) ++budget;
      rec.changes.push_back({spec.name, mv.action, mv.add ? mv.add : mv.remove, mv.add && mv.remove ? mv.remove : 0,
                             mv.gain, mv.compile, mv.gain - mv.compile,
                             memory.high && mv.action == "remove" && mv.gain < 0 ? "memory is high"
                                                                                 : "gain clears the hysteresis"});
      ++changes;
    }
    // An addition removed again within the same update is no change.
    std::vector<int64_t> final_set = set;
    out.removed[d].clear();
    out.added[d].clear();
    for (int64_t c : current) {
      if (!std::binary_search(final_set.begin(), final_set.end(), c)) out.removed[d].push_back(c);
    }
    for (int64_t g : final_set) {
      if (!std::binary_search(current.begin(), current.end(), g)) out.added[d].push_back(g);
    }
    out.next_gears[d] = final_set;
  }
  out.changed = false;
  for (int d = 0; d < num_dims; ++d) {
    if (!out.removed[d].empty() || !out.added[d].empty()) out.changed = true;
  }
  rec.removed = out.removed;
  rec.added = out.added;
  rec.gears_after = out.next_gears;
  rec.changed = out.changed;
  return out;
}

}  // namespace gearbox
