// The replan policy, one dimension (docs/POLICY.md, "One update, per
// dimension"): plan the target on the window, adopt it whole when that pays
// for all its compiles, else take the best single move toward it while one
// clears the hysteresis band.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "src/common/errors.h"
#include "src/policy/gear_bytes.h"
#include "src/policy/replan_internal.h"

namespace gearbox::internal {
namespace {

struct Move {
  ChangeAction action;
  int64_t add = 0;
  int64_t remove = 0;
  double gain = 0;     // padding + memory saved over the horizon (weighted seconds)
  double compile = 0;  // weighted compile seconds of the addition
  double threshold = 0;
  std::string why_not;
};

// Creation times [from, to): the gears under the cold-start review.
struct CreationSpan {
  double from = 0.0;
  double to = 0.0;
  bool Holds(double t) const { return t >= from && t < to; }
};

// The gears planned on a quarter of the regime's evidence or less.
constexpr double kColdStartShare = 0.25;

// The cold-start review (rule 6): at the updates while the regime is
// between cold_start_review_seconds and a quarter more (or one
// update_interval_seconds more, if longer: an update comes within it), the
// gears added in its first kColdStartShare of that. Only where the regime
// holds all the history (`history`: the dimension's size history): a
// regime that began at a step follows older traffic, which the gears of its
// first minutes were planned on too. None otherwise, or with the option 0.
// Pure.
std::optional<CreationSpan> ColdStartReview(const StationaryRegime& regime,
                                            const std::vector<SizeHistoryBin>& history, double now,
                                            const ReplanOptions& o) {
  const double at = o.cold_start_review_seconds;
  const bool all_history =
      std::all_of(history.begin(), history.end(),
                  [&](const SizeHistoryBin& b) { return b.bin >= regime.start_bin; });
  if (!(at > 0) || !all_history || regime.seconds < at ||
      regime.seconds >= at + std::max(kColdStartShare * at, o.update_interval_seconds))
    return std::nullopt;
  const double start = now - regime.seconds;
  return CreationSpan{start, start + kColdStartShare * at};
}

// The target: the cost model's optimum on the window (exact DP; a current
// gear costs its holding instead of a compile), then on a non-splittable
// dimension a tail from the planned top to the largest gear with no gap
// wider than tail_ratio, reusing the current gears there.
class TargetPlanner {
 public:
  TargetPlanner(const Distribution& dist, const std::vector<int64_t>& current, bool keep_max,
                const DimensionCost& cost, double horizon, const ReplanOptions& o,
                bool held_discount)
      : current_(current),
        keep_max_(keep_max),
        o_(o),
        held_discount_(held_discount),
        plan_top_(keep_max ? std::min(dist.max_size(), current.back()) : dist.max_size()),
        hist_(dist.Histogram(plan_top_)),
        scaled_(cost.model),
        holding_(cost.holding) {
    scaled_.beta = cost.model.beta * horizon;  // padding counted over the payback horizon
    scaled_.compile_seconds = cost.model.compile_seconds * cost.combinations;
    scaled_.gamma = cost.model.gamma * cost.combinations;
  }

  // The target within `max_gears` gears, tail included: the DP gets fewer
  // gears while the tail does not fit beside them; a tail longer than the
  // cap alone loses its smallest rungs.
  std::vector<int64_t> Target(int max_gears) const {
    int budget = max_gears;
    std::vector<int64_t> target;
    for (;;) {
      target = WithTail(Planned(budget));
      const int excess = static_cast<int>(target.size()) - max_gears;
      if (excess <= 0 || budget == 1) break;
      budget = std::max(1, budget - excess);
    }
    while (static_cast<int>(target.size()) > max_gears) target.erase(target.begin());
    return target;
  }

  // Targets within 1..max_gears gears, from one DP (CostCurve).
  std::vector<std::vector<int64_t>> TargetsUpTo(int max_gears) {
    if (held_discount_ && !hist_.values.empty()) {
      auto plans = PlanWithHeldGearsPerBudget(hist_, max_gears, scaled_, current_, holding_);
      if (plans.ok()) per_budget_ = *std::move(plans);
    }
    std::vector<std::vector<int64_t>> targets;
    for (int k = 1; k <= max_gears; ++k) targets.push_back(Target(k));
    return targets;
  }

 private:
  // The DP's gears within `budget` (a held gear costs its holding; not
  // under memory pressure, where the gears the target lacks are given back).
  std::vector<int64_t> Planned(int budget) const {
    if (hist_.values.empty()) return {};
    if (static_cast<size_t>(budget) <= per_budget_.size()) return per_budget_[budget - 1];
    auto plan = held_discount_ ? PlanWithHeldGears(hist_, budget, scaled_, current_, holding_)
                               : PlanWithCostModel(hist_, budget, PlanMethod::kDp, scaled_);
    return plan.ok() ? plan->plan.gears : std::vector<int64_t>{};
  }

  std::vector<int64_t> WithTail(std::vector<int64_t> target) const {
    const int64_t max_gear = current_.back();
    if (keep_max_ && (target.empty() || target.back() < max_gear)) {
      double x =
          target.empty() ? static_cast<double>(plan_top_) : static_cast<double>(target.back());
      while (x * o_.tail_ratio < static_cast<double>(max_gear)) {
        const int64_t reach = static_cast<int64_t>(x * o_.tail_ratio);
        auto it = std::upper_bound(current_.begin(), current_.end(), reach);
        int64_t next = (it != current_.begin() && *std::prev(it) > static_cast<int64_t>(x))
                           ? *std::prev(it)
                           : reach;
        target.push_back(next);
        x = static_cast<double>(next);
      }
      target.push_back(max_gear);
    }
    std::sort(target.begin(), target.end());
    target.erase(std::unique(target.begin(), target.end()), target.end());
    return target;
  }

  const std::vector<int64_t>& current_;
  const bool keep_max_;
  const ReplanOptions& o_;
  const bool held_discount_;
  const int64_t plan_top_;
  const SizeHistogram hist_;
  GearCostModel scaled_;
  const double holding_;
  std::vector<std::vector<int64_t>> per_budget_;  // TargetsUpTo's one DP
};

std::vector<int64_t> PlanTarget(const Distribution& dist, const std::vector<int64_t>& current,
                                bool keep_max, const DimensionCost& cost, double horizon,
                                int max_gears, const ReplanOptions& o, bool held_discount = true) {
  return TargetPlanner(dist, current, keep_max, cost, horizon, o, held_discount).Target(max_gears);
}

// Moves one dimension's gears from `current` toward `target`.
class DimensionReplanner {
 public:
  DimensionReplanner(const DimensionSpec& spec, const DimensionStats& ds, const Distribution& dist,
                     const DimensionCost& cost, double horizon, std::vector<int64_t> current,
                     std::vector<int64_t> target, const MemoryState& memory, const GearBytes& bytes,
                     int64_t projected_bytes, const AdaptiveOptions& adaptive,
                     const ReplanOptions& o, GearLimit limit, bool one_dimension, double now, int d,
                     std::optional<CreationSpan> review, UpdateDecision* out)
      : spec_(spec),
        dist_(dist),
        cost_(cost),
        horizon_(horizon),
        current_(std::move(current)),
        target_(std::move(target)),
        memory_(memory),
        bytes_(bytes),
        projected_(projected_bytes),
        adaptive_(adaptive),
        o_(o),
        max_gears_(limit.max_gears),
        limit_(limit),
        one_dimension_(one_dimension),
        now_(now),
        d_(d),
        out_(out),
        keep_max_(!spec.splittable),
        max_gear_(current_.back()),
        set_(current_),
        removed_at_(ds.recently_removed.begin(), ds.recently_removed.end()) {
    // Gears this policy added, and when: protected for min_gear_lifetime
    // seconds unless the window brought them no traffic at all (removing an
    // unused gear is not churn), but a gear that came back after its
    // eviction is protected idle too: its traffic recurs (a burst), and
    // evicting it again would cycle it. Where an idle gear holds no part of
    // the graph budget (one dimension: its graph is all it holds), a gear
    // that carried traffic since it was added is protected idle as well: a
    // sparse size range, or a burst's band between bursts, brings a gear no
    // request in many windows, and the idle release frees its graph anyway
    // (evicting it would cycle it when its traffic comes back). Past
    // idle_graph_release_seconds idle, such a gear holds only its slot, and
    // at the gear cap it gives it (Young). The initial gears are not
    // protected.
    for (const GearStats& g : ds.gears) {
      const bool hit_since_added = one_dimension && o.idle_graph_release_seconds > 0 &&
                                   std::isfinite(g.last_hit_ts) && g.last_hit_ts >= g.created_ts;
      if (g.initial || !(g.carries_traffic() || g.readded || hit_since_added)) continue;
      if (review.has_value() && review->Holds(g.created_ts)) {
        reviewed_.insert(g.gear);  // not young at this update (rule 6's review)
        out->record.regime[d].reviewed.push_back(g.gear);  // ds.gears is ascending
        continue;
      }
      created_[g.gear] = g.created_ts;
      if (g.carries_traffic()) continue;
      if (g.readded) {
        recurring_.insert(g.gear);
      } else {
        carried_traffic_.insert(g.gear);
        if (now - g.last_hit_ts >= o.idle_graph_release_seconds) idle_past_release_.insert(g.gear);
      }
    }
  }

  void Run() {
    AdoptWholeTarget();
    while ((changes_ < o_.max_changes_per_update || OverCap()) && Step()) {
    }
    Publish();
  }

 private:
  // Modelled cost of the window on `s` over the horizon (padding + memory).
  double CostOf(const std::vector<int64_t>& s) const {
    const GearCostModel& m = cost_.model;
    double mem = 0;
    if (bytes_.predicts()) {
      for (int64_t g : s) mem += PredictedGiB(g);
      return m.beta * dist_.Padding(s, spec_.splittable) * horizon_ + m.gamma * mem;
    }
    for (int64_t g : s) mem += m.GearBytes(g) / kGiB;
    return m.beta * dist_.Padding(s, spec_.splittable) * horizon_ +
           m.gamma * mem * cost_.combinations;
  }

  // With a predictor, what gear g costs in memory, GiB, over all its
  // combinations: what it frees if held, what it adds if not (the config's
  // memory model where the predictor cannot say yet).
  double PredictedGiB(int64_t g) const {
    const std::optional<double> b = bytes_.Held(d_, g);
    return (b.has_value() ? *b : cost_.model.GearBytes(g) * cost_.combinations) / kGiB;
  }

  // Memory pressure: the probe's, or the gears' memory past the byte budget.
  bool High() const { return memory_.high || (bytes_.budgeted() && projected_ > bytes_.budget()); }

  // Why adding `add` (after removing `remove`, 0: none) would pass the byte
  // budget; "" when it fits or no budget binds.
  std::string PastByteBudget(int64_t add, int64_t remove) const {
    if (!add || !bytes_.budgeted()) return "";
    return bytes_.PastBudget(projected_ - (remove ? bytes_.Freed(d_, remove) : 0),
                             bytes_.Added(d_, add));
  }

  // Above the cap (GearLimit): gears must go, young ones too, whatever
  // they cost. A dimension above its share while the whole fits only adds
  // no more (the share moves with the traffic; no gear goes for that alone).
  bool OverCap() const {
    return static_cast<int>(set_.size()) > std::max(max_gears_, limit_.hard_max_gears);
  }
  // Additions stop at the share and at what fits beside the others' gears.
  int AdditionCap() const { return std::min(max_gears_, limit_.hard_max_gears); }

  // Too young to remove: within min_gear_lifetime_seconds of its addition,
  // unless memory is high, the set is above its cap, or the gear idles with
  // its graph released (one dimension) while the set is at its addition cap.
  bool Young(int64_t g) const {
    auto it = created_.find(g);
    if (idle_past_release_.count(g) && static_cast<int>(set_.size()) >= AdditionCap()) return false;
    return !High() && !OverCap() && it != created_.end() &&
           now_ - it->second < o_.min_gear_lifetime_seconds;
  }

  bool RemovedRecently(int64_t g) const {
    auto r = removed_at_.find(g);
    return r != removed_at_.end() && now_ - r->second < o_.readd_cooldown_seconds;
  }

  void MarkEvicted(int64_t gear) {
    for (GearRecord& g : out_->record.gears) {
      if (g.dimension == spec_.name && g.gear == gear) g.verdict = GearVerdict::kEvicted;
    }
  }

  // The whole target at once: taken when everything it adds pays for itself
  // together (so a fresh runtime, or a shifted workload, converges in one
  // update instead of one gear at a time). Gears too young to remove stay.
  void AdoptWholeTarget() {
    std::vector<int64_t> whole = target_;
    for (int64_t c : set_) {
      if (!std::binary_search(target_.begin(), target_.end(), c) && Young(c)) whole.push_back(c);
    }
    std::sort(whole.begin(), whole.end());
    whole.erase(std::unique(whole.begin(), whole.end()), whole.end());
    int adds = 0;
    double readd_extra = 0;
    int64_t delta_bytes = 0;  // the gears' memory change, with a byte budget
    bool bytes_unknown = false;
    bool out_of_memory = false;  // a gear it adds ran out of memory within the cooldown
    for (int64_t t : whole) {
      if (std::binary_search(set_.begin(), set_.end(), t)) continue;
      ++adds;
      if (RemovedRecently(t)) readd_extra += cost_.compile;
      const std::optional<int64_t> b = bytes_.Added(d_, t);
      bytes_unknown = bytes_unknown || !b.has_value();
      out_of_memory = out_of_memory || OutOfMemoryAt(memory_, d_, t).has_value();
      delta_bytes += b.value_or(0);
    }
    for (int64_t c : set_) {
      if (!std::binary_search(whole.begin(), whole.end(), c)) delta_bytes -= bytes_.Freed(d_, c);
    }
    // Past the byte budget the target is approached one move at a time
    // (each addition checked on its own, removals first).
    const bool within_bytes = !bytes_.budgeted() || bytes_unknown || adds == 0 ||
                              projected_ + delta_bytes <= bytes_.budget();
    const double gain = CostOf(set_) - CostOf(whole);
    const double uncertainty = adds > 0 && Sigmas() > 0 ? Uncertainty(whole) : 0.0;
    const bool fits =
        static_cast<int>(whole.size()) <= std::max<int>(AdditionCap(), set_.size()) &&
        (!High() || static_cast<int>(whole.size()) <= static_cast<int>(set_.size())) &&
        adds <= o_.max_changes_per_update && within_bytes && !out_of_memory;
    if (!(adds > 0 && fits &&
          gain - Sigmas() * uncertainty >=
              o_.min_gain_ratio * (adds * cost_.compile + readd_extra)))
      return;
    for (int64_t c : set_) {
      if (!std::binary_search(whole.begin(), whole.end(), c)) MarkEvicted(c);
    }
    out_->record.changes.push_back({spec_.name, ChangeAction::kReplan,
                                    static_cast<int64_t>(whole.size()), 0, gain,
                                    adds * cost_.compile, gain - adds * cost_.compile,
                                    Cat("the planned set pays for its ", adds, " compiles")});
    set_ = whole;
    projected_ += delta_bytes;
    for (int64_t t : set_) {
      if (!created_.count(t) && !std::binary_search(current_.begin(), current_.end(), t))
        created_[t] = now_;
    }
    changes_ = adds;
  }

  // How many standard errors of a gain its evidence must leave above the
  // band: gain_confidence_sigmas on a one-dimensional set, 0 with several
  // dimensions (docs/POLICY.md, rule 5: weighed there, it held back the
  // gears the decode batch and context needed and lowered no break on the
  // policy suite's decode views).
  double Sigmas() const { return one_dimension_ ? o_.gain_confidence_sigmas : 0.0; }

  // The standard error of the padding gain of moving from the current set
  // to `next` over the horizon (Distribution::DifferenceVariance).
  double Uncertainty(const std::vector<int64_t>& next) const {
    return cost_.model.beta * horizon_ *
           std::sqrt(dist_.DifferenceVariance(set_, next, spec_.splittable));
  }

  // The set after adding `add` and removing `remove` (0: none).
  std::vector<int64_t> After(int64_t add, int64_t remove) const {
    std::vector<int64_t> next = set_;
    if (remove) next.erase(std::find(next.begin(), next.end(), remove));
    if (add) next.insert(std::lower_bound(next.begin(), next.end(), add), add);
    return next;
  }

  // Add / replace: gain >= ratio x compile (twice that for a gear removed
  // within the cooldown). Remove: keeping it must be worth less than its
  // holding cost, i.e. the removal's gain >= -gear_holding_seconds (both per
  // graph: times the combinations the gear is part of).
  double ThresholdFor(int64_t added) const {
    if (!added) return -cost_.holding;
    double t = o_.min_gain_ratio * cost_.compile;
    if (RemovedRecently(added)) t *= 2;
    return t;
  }

  // The gain of a move, computed locally: only the sizes between the
  // neighbours of the touched gears change gear (O(log sizes)). On a
  // splittable dimension a split's remainder may land on any gear, so its
  // moves are evaluated whole against `base`, the cost of the current set.
  double GainOf(int64_t add, int64_t remove, double base) const {
    const GearCostModel& m = cost_.model;
    if (spec_.splittable) return base - CostOf(After(add, remove));
    const int64_t low = std::min(add ? add : remove, remove ? remove : add);
    const int64_t high = std::max(add, remove);
    // Neighbours that stay: the largest gear below `low`, the smallest above `high`.
    int64_t lo = 0, hi = 0;
    for (int64_t g : set_) {
      if (g == remove) continue;
      if (g < low) lo = g;
      if (g > high && hi == 0) hi = g;
    }
    auto segments = [&](const std::vector<int64_t>& span_gears) {
      double padding = 0;
      int64_t prev = lo;
      for (int64_t g : span_gears) {
        padding += dist_.Segment(prev, g, g);
        prev = g;
      }
      return padding;  // sizes above the last gear up to hi: none when hi is a gear
    };
    std::vector<int64_t> before, after;
    for (int64_t g : set_) {
      if (g > lo && (hi == 0 || g <= hi)) before.push_back(g);
    }
    for (int64_t g : before) {
      if (g != remove) after.push_back(g);
    }
    if (add) after.insert(std::lower_bound(after.begin(), after.end(), add), add);
    double gain = m.beta * horizon_ * (segments(before) - segments(after));
    if (m.gamma > 0 && bytes_.predicts()) {
      gain += m.gamma * ((remove ? PredictedGiB(remove) : 0) - (add ? PredictedGiB(add) : 0));
    } else if (m.gamma > 0) {
      gain += m.gamma * cost_.combinations *
              ((remove ? m.GearBytes(remove) : 0) - (add ? m.GearBytes(add) : 0)) / kGiB;
    }
    return gain;
  }

  // A move with its gain, threshold and, if a rule forbids it, why.
  Move Consider(ChangeAction action, int64_t add, int64_t remove, double base,
                std::optional<double> gain = std::nullopt) const {
    Move mv{action,
            add,
            remove,
            gain.has_value() ? *gain : GainOf(add, remove, base),
            add ? cost_.compile : 0.0,
            ThresholdFor(add),
            ""};
    if (remove && Young(remove)) {
      mv.why_not = recurring_.count(remove)
                       ? Cat("gear ", remove,
                             " came back after an eviction less than min_gear_lifetime_seconds "
                             "ago (idle now: its traffic recurs)")
                   : carried_traffic_.count(remove)
                       ? Cat("gear ", remove,
                             " was added less than min_gear_lifetime_seconds ago and carried "
                             "traffic since (idle in the window",
                             idle_past_release_.count(remove) ? ", its graph released" : "", ")")
                       : Cat("gear ", remove, " was added less than min_gear_lifetime_seconds ago");
    }
    if (add && !remove && static_cast<int>(set_.size()) >= AdditionCap()) {
      mv.why_not = AdditionCap() < adaptive_.max_gears_per_type
                       ? Cat("the dimension is at its share of replan.max_graphs (", AdditionCap(),
                             " gears)")
                       : Cat("the dimension is at max_gears_per_type (", AdditionCap(), ")");
    }
    if (add && !remove && High() && budget_ <= 0) mv.why_not = "memory is high: no net additions";
    if (std::string why = PastByteBudget(add, remove); !why.empty()) mv.why_not = std::move(why);
    if (add) {
      if (const std::optional<double> at = OutOfMemoryAt(memory_, d_, add)) {
        mv.why_not = Cat("gear ", add, " ran out of memory at t = ", *at,
                         " s (adaptive.out_of_memory_cooldown_seconds)");
      }
    }
    if (remove && !add && static_cast<int>(set_.size()) <= adaptive_.min_gear_count_per_type) {
      mv.why_not = "the dimension is at min_gear_count_per_type";
    }
    // The largest gear goes only once the planned largest is in place (a
    // splittable dimension would otherwise shrink into many chunks).
    if (remove && remove == set_.back() &&
        !(std::binary_search(set_.begin(), set_.end(), target_.back()) &&
          remove > target_.back())) {
      mv.why_not = Cat("gear ", remove, " is the largest until the planned largest is in place");
    }
    return mv;
  }

  // Every single move toward the target: add a target gear, remove a gear
  // the target lacks, or replace a neighbouring gear by a target gear (far
  // apart, an add and a remove are independent moves). Sets *any_removal.
  std::vector<Move> CandidateMoves(bool* any_removal) const {
    const double base = CostOf(set_);
    std::vector<int64_t> adds, removes;
    for (int64_t t : target_) {
      if (!std::binary_search(set_.begin(), set_.end(), t)) adds.push_back(t);
    }
    for (int64_t c : set_) {
      if (std::binary_search(target_.begin(), target_.end(), c)) continue;
      if (keep_max_ && c == max_gear_) continue;
      removes.push_back(c);
    }
    *any_removal = !removes.empty();
    std::vector<Move> moves;
    if (target_.empty()) return moves;
    std::map<int64_t, double> add_gain, remove_gain;
    for (int64_t t : adds) {
      moves.push_back(Consider(ChangeAction::kAdd, t, 0, base));
      add_gain[t] = moves.back().gain;
    }
    for (int64_t c : removes) {
      moves.push_back(Consider(ChangeAction::kRemove, 0, c, base));
      remove_gain[c] = moves.back().gain;
    }
    // At the addition cap a target gear can only come in for another: there,
    // within its planned share, any gear the target lacks may make room (an
    // add and a far removal as one replacement); otherwise only a neighbour
    // is replaced.
    const int held = static_cast<int>(set_.size());
    const bool at_cap = held >= AdditionCap() && held <= limit_.planned_share;
    for (int64_t t : adds) {
      auto above = std::upper_bound(set_.begin(), set_.end(), t);
      const int64_t next = above == set_.end() ? 0 : *above;
      const int64_t prev = above == set_.begin() ? 0 : *std::prev(above);
      for (int64_t c : removes) {
        if (c == next || c == prev) {
          moves.push_back(Consider(ChangeAction::kReplace, t, c, base));
        } else if (at_cap) {
          // Far apart on a dimension that does not split, the sizes the
          // addition takes and those the removal gives away are disjoint:
          // the replacement gains what the two gain apart.
          std::optional<double> gain;
          if (!spec_.splittable) gain = add_gain[t] + remove_gain[c];
          moves.push_back(Consider(ChangeAction::kReplace, t, c, base, gain));
        }
      }
    }
    return moves;
  }

  // Best net gain among the allowed moves that clear their threshold; under
  // memory pressure, else the allowed removal that costs least. nullptr if
  // none, after recording the best declined move.
  const Move* Pick(const std::vector<Move>& moves, bool any_removal) {
    const Move* best = nullptr;
    const Move* best_declined = nullptr;
    std::string thin;  // why best_declined, if only its evidence is too thin
    for (const Move& mv : moves) {
      const double net = mv.gain - mv.compile;
      bool ok = mv.why_not.empty() && mv.gain >= mv.threshold;
      std::string why;
      // Only a move that would be taken needs its evidence weighed: an
      // addition (or replacement), and a removal at the cold-start review,
      // whose loss plus its standard errors must stay within the holding.
      const bool weighed = mv.add || reviewed_.count(mv.remove);
      if (ok && weighed && Sigmas() > 0 && (best == nullptr || net > best->gain - best->compile)) {
        const double se = Uncertainty(After(mv.add, mv.remove));
        if (mv.gain - Sigmas() * se < mv.threshold) {
          ok = false;
          why = mv.add ? Cat("too little evidence: the gain ", mv.gain, " s is uncertain by ", se,
                             " s, and less replan.gain_confidence_sigmas of that must reach ",
                             mv.threshold, " s")
                       : Cat("too little evidence: at the cold-start review, removing gear ",
                             mv.remove, " loses ", -mv.gain, " s, uncertain by ", se,
                             " s; with replan.gain_confidence_sigmas of that it must lose at most ",
                             -mv.threshold, " s");
        }
      }
      if (ok && (best == nullptr || net > best->gain - best->compile)) best = &mv;
      if (!ok && (best_declined == nullptr || net > best_declined->gain - best_declined->compile)) {
        best_declined = &mv;
        thin = why;
      }
    }
    if (best == nullptr && (High() || OverCap()) && any_removal) {
      // Memory pressure, or above the cap: give back the gear whose removal
      // costs least, within the count floor and the largest-gear rule (why_not).
      for (const Move& mv : moves) {
        if (mv.action == ChangeAction::kRemove && mv.why_not.empty() &&
            (best == nullptr || mv.gain > best->gain))
          best = &mv;
      }
    }
    if (best == nullptr && best_declined != nullptr) {
      const Move& mv = *best_declined;
      out_->record.declined.push_back(
          {spec_.name, mv.action, mv.add ? mv.add : mv.remove, mv.add && mv.remove ? mv.remove : 0,
           mv.gain, mv.compile, mv.gain - mv.compile,
           !mv.why_not.empty() ? mv.why_not
           : !thin.empty()
               ? thin
               : Cat("outside the hysteresis band (gain must reach ", mv.threshold, " s)")});
    }
    return best;
  }

  void Apply(const Move& mv) {
    if (mv.remove) projected_ -= bytes_.Freed(d_, mv.remove);
    if (mv.add) projected_ += bytes_.Added(d_, mv.add).value_or(0);
    if (mv.remove) {
      set_.erase(std::find(set_.begin(), set_.end(), mv.remove));
      out_->removed[d_].push_back(mv.remove);
      MarkEvicted(mv.remove);
    }
    if (mv.add) {
      set_.insert(std::lower_bound(set_.begin(), set_.end(), mv.add), mv.add);
      out_->added[d_].push_back(mv.add);
      created_[mv.add] = now_;
    }
    if (High() && mv.add && !mv.remove) --budget_;
    if (High() && mv.remove && !mv.add) ++budget_;
    out_->record.changes.push_back(
        {spec_.name, mv.action, mv.add ? mv.add : mv.remove, mv.add && mv.remove ? mv.remove : 0,
         mv.gain, mv.compile, mv.gain - mv.compile,
         mv.action == ChangeAction::kRemove && mv.gain < -cost_.holding
             ? (memory_.high ? "memory is high"
                : High()     ? "the gears' memory is past memory_budget_bytes"
                             : "above the dimension's gear cap")
         : mv.action == ChangeAction::kRemove && reviewed_.count(mv.remove)
             ? "cold-start review: keeping it is worth less than gear_holding_seconds"
             : "gain clears the hysteresis"});
    ++changes_;
  }

  // One move toward the target; false when none is taken.
  bool Step() {
    bool any_removal = false;
    const std::vector<Move> moves = CandidateMoves(&any_removal);
    if (moves.empty()) return false;
    const Move* best = Pick(moves, any_removal);
    if (best == nullptr) return false;
    Apply(*best);
    return true;
  }

  // The net change against the current gears (an addition removed again
  // within the same update is no change).
  void Publish() {
    out_->removed[d_].clear();
    out_->added[d_].clear();
    for (int64_t c : current_) {
      if (!std::binary_search(set_.begin(), set_.end(), c)) out_->removed[d_].push_back(c);
    }
    for (int64_t g : set_) {
      if (!std::binary_search(current_.begin(), current_.end(), g)) out_->added[d_].push_back(g);
    }
    out_->next_gears[d_] = set_;
  }

  const DimensionSpec& spec_;
  const Distribution& dist_;
  const DimensionCost& cost_;
  const double horizon_;
  const std::vector<int64_t> current_;
  const std::vector<int64_t> target_;
  const MemoryState& memory_;
  const GearBytes& bytes_;
  int64_t projected_;  // the gears' memory after the moves taken so far, bytes (byte budget)
  const AdaptiveOptions& adaptive_;
  const ReplanOptions& o_;
  const int max_gears_;
  const GearLimit limit_;
  // Whether the gear set has this dimension alone. With several, an idle
  // gear still holds part of the graph budget (independent or sparse: every
  // gear is a row of the product; alone its graph is all it holds, and the
  // idle release frees that), so it is not protected for having carried
  // traffic since its addition, and a gain's evidence is not weighed (Sigmas).
  const bool one_dimension_;
  const double now_;
  const int d_;
  UpdateDecision* out_;
  const bool keep_max_;  // a non-splittable dimension keeps its largest gear (requests above it
                         // would fail)
  const int64_t max_gear_;
  std::vector<int64_t> set_;
  std::map<int64_t, double> removed_at_;
  std::map<int64_t, double> created_;
  std::set<int64_t> reviewed_;         // under the cold-start review at this update
  std::set<int64_t> recurring_;        // idle young gears protected because they came back
  std::set<int64_t> carried_traffic_;  // idle young gears hit since added (one dimension)
  // Of those, idle past idle_graph_release_seconds: the runtime releases
  // their graphs at this update (after the decision) if it has not already.
  std::set<int64_t> idle_past_release_;
  int changes_ = 0;
  int64_t budget_ = 0;  // net additions allowed while memory is high (none beyond removals)
};

}  // namespace

namespace {

// The sizes drift (DimensionStats::size_drift_*): enough bins, and enough of
// their pairwise slopes agree with the trend in sign.
bool Drifting(const DimensionStats& ds, const ReplanOptions& o) {
  return o.drift_lead_seconds > 0 && ds.size_drift_bins >= o.drift_min_bins &&
         ds.size_drift_agreement >= o.drift_agreement && ds.size_drift_per_second != 0;
}

// The sizes to plan for: the window's, or, where they drift, the window's
// sizes carried along the trend over the next drift_lead_seconds (each
// spread evenly over that path), so that the gears are where the traffic is
// going rather than where it was.
std::vector<WeightedSize> AnticipatedSizes(const DimensionStats& ds, const ReplanOptions& o) {
  if (!Drifting(ds, o)) return ds.sizes;
  const double slope = ds.size_drift_per_second;
  constexpr int kSteps = 8;
  std::map<int64_t, double> path;
  for (const WeightedSize& w : ds.sizes) {
    for (int j = 0; j < kSteps; ++j) {
      const double tau = o.drift_lead_seconds * (j + 0.5) / kSteps;
      const double x = static_cast<double>(w.size) * std::exp(slope * tau);
      const int64_t size = std::max<int64_t>(1, std::llround(std::min(x, 4.0e18)));
      path[size] += w.weight / kSteps;
    }
  }
  std::vector<WeightedSize> out;
  out.reserve(path.size());
  for (const auto& [size, weight] : path) out.push_back({size, weight});
  return out;
}

// The window's distribution of dimension d, or null (recorded) when it is
// too thin to plan from.
std::optional<Distribution> PlannableDistribution(const DimensionSpec& spec,
                                                  const DimensionStats* ds,
                                                  const DimensionCost& cost, const ReplanOptions& o,
                                                  const StationaryRegime* regime,
                                                  UpdateDecision* out) {
  if (ds == nullptr) return std::nullopt;
  Distribution dist(regime != nullptr ? regime->sizes : AnticipatedSizes(*ds, o), cost.model);
  if (dist.empty() || dist.total_weight() < o.min_window_weight) {
    if (out != nullptr) {
      out->record.declined.push_back(
          {spec.name, ChangeAction::kNone, 0, 0, 0.0, 0.0, 0.0,
           Cat("too little traffic in the window (", dist.empty() ? 0.0 : dist.total_weight(),
               " < min_window_weight)")});
    }
    return std::nullopt;
  }
  return dist;
}

// The regime to plan a gear set of one dimension on (FindStationaryRegime),
// or none: several dimensions, the sizes drift, no history (a fleet's
// merged window), or the option off.
std::optional<StationaryRegime> RegimeOf(const GearSet& gears, const DimensionStats& ds,
                                         const AdaptiveOptions& adaptive, const ReplanOptions& o,
                                         double now) {
  if (gears.num_dimensions() != 1 || !(o.regime_seconds > 0) || Drifting(ds, o) ||
      ds.size_history.empty())
    return std::nullopt;
  std::vector<int64_t> current(gears.gears(0).begin(), gears.gears(0).end());
  return FindStationaryRegime(ds.size_history, adaptive.window_seconds / kSizeDriftBinsPerWindow,
                              now, kSizeDriftBinsPerWindow, o.regime_seconds, current,
                              gears.dimension(0).splittable);
}

}  // namespace

std::vector<double> CostCurve(const GearSet& gears, int d, const DimensionStats* ds,
                              const DimensionCost& cost, const AdaptiveOptions& adaptive,
                              const ReplanOptions& o) {
  const DimensionSpec& spec = gears.dimension(d);
  std::vector<int64_t> current(gears.gears(d).begin(), gears.gears(d).end());
  const std::optional<Distribution> dist =
      PlannableDistribution(spec, ds, cost, o, /*regime=*/nullptr, nullptr);
  if (!dist.has_value()) return {0.0};
  const double horizon = HorizonFactor(ds->observed_seconds, adaptive, o);
  const bool keep_max = !spec.splittable;
  TargetPlanner planner(*dist, current, keep_max, cost, horizon, o, /*held_discount=*/true);
  const std::vector<std::vector<int64_t>> targets =
      planner.TargetsUpTo(adaptive.max_gears_per_type);
  const size_t wanted = targets.back().size();
  std::vector<double> curve;
  for (size_t k = 1; k <= wanted; ++k) {
    const std::vector<int64_t>& target = targets[k - 1];
    curve.push_back(cost.model.beta * horizon * dist->Padding(target, spec.splittable) +
                    cost.compile * static_cast<double>(target.size()));
  }
  return curve;
}

void ReplanDimension(const GearSet& gears, int d, const DimensionStats* ds,
                     const DimensionCost& cost, const MemoryState& memory,
                     const AdaptiveOptions& adaptive, const ReplanOptions& o, GearLimit limit,
                     double now, UpdateDecision* out) {
  const DimensionSpec& spec = gears.dimension(d);
  std::vector<int64_t> current(gears.gears(d).begin(), gears.gears(d).end());
  out->next_gears[d] = current;
  const std::optional<StationaryRegime> regime =
      ds != nullptr ? RegimeOf(gears, *ds, adaptive, o, now) : std::nullopt;
  const std::optional<Distribution> dist =
      PlannableDistribution(spec, ds, cost, o, regime ? &*regime : nullptr, out);
  if (!dist.has_value()) return;
  // The window's decayed weights stand for this many seconds of traffic
  // (only the part of the window that has traffic yet), a regime's counts
  // for its length; padding read off them times `horizon` is padding over
  // the payback horizon.
  const double horizon = regime ? o.payback_seconds / regime->seconds
                                : HorizonFactor(ds->observed_seconds, adaptive, o);
  const bool keep_max = !spec.splittable;
  // The byte budget: the gears' memory after the dimensions replanned before this one.
  std::vector<std::vector<int64_t>> grid;
  for (int e = 0; e < gears.num_dimensions(); ++e)
    grid.emplace_back(gears.gears(e).begin(), gears.gears(e).end());
  const GearBytes bytes(grid, memory);
  int64_t projected = bytes.in_use();
  for (int e = 0; e < d && bytes.budgeted(); ++e) {
    for (int64_t g : out->removed[e]) projected -= bytes.Freed(e, g);
    for (int64_t g : out->added[e]) projected += bytes.Added(e, g).value_or(0);
  }
  const bool pressure = memory.high || (bytes.budgeted() && projected > bytes.budget());
  std::vector<int64_t> target =
      PlanTarget(*dist, current, keep_max, cost, horizon, limit.max_gears, o, !pressure);
  out->record.targets[d] = target;
  out->record.drift[d] = {ds->size_drift_per_second, ds->size_drift_agreement, ds->size_drift_bins,
                          Drifting(*ds, o)};
  if (regime.has_value())
    out->record.regime[d] = {regime->seconds, regime->statistic, regime->critical, {}};
  const std::optional<CreationSpan> review =
      regime.has_value() ? ColdStartReview(*regime, ds->size_history, now, o) : std::nullopt;
  DimensionReplanner(spec, *ds, *dist, cost, horizon, std::move(current), std::move(target), memory,
                     bytes, projected, adaptive, o, limit, gears.num_dimensions() == 1, now, d,
                     review, out)
      .Run();
}

}  // namespace gearbox::internal
