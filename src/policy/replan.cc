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
  // pays its remainder's padding and one seconds_per_run per extra chunk, a
  // non-splittable one runs eagerly (none).
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
        const double extra_chunks = static_cast<double>(value_[i] / top - (rest == 0 ? 1 : 0));
        double cost = extra_chunks * m_.seconds_per_run;
        if (rest > 0) cost += m_.Run(*std::lower_bound(gears.begin(), gears.end(), rest)) - m_.Run(rest);
        padding += (weight_[i + 1] - weight_[i]) * cost;
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

// The horizon factor: window padding times this is padding over the payback
// horizon (the window's decayed weights stand for only the part of it that
// has traffic yet).
double HorizonFactor(double observed_seconds, const AdaptiveOptions& adaptive, const ReplanOptions& o) {
  const double lambda = std::log(2.0) / adaptive.half_life_seconds;
  const double observed = std::max(observed_seconds, adaptive.window_seconds / adaptive.window_slots);
  const double effective_seconds = (1.0 - std::exp(-lambda * observed)) / lambda;
  return o.payback_seconds / effective_seconds;
}

// Joint and sparse gear sets: which cells of the next grid are compiled
// combinations. Pure; fills out->next_combinations and the record's changes.
//
// Each cell with traffic in the window carries the decayed weight of the
// variant shapes that fall in it. A cell runs on its cheapest covering
// combination within the gear set's cover_ratio (sparse: 1, its own), else
// uncompiled at the shapes' exact sizes, uncompiled_slowdown times slower;
// a combination's gain is the run time it saves over the horizon on every
// cell it serves better. Additions need gain >= min_gain_ratio x one
// compile (twice that within readd_cooldown_seconds of being dropped), best
// first, the gains re-evaluated as the set grows. A combination older than
// min_gear_lifetime_seconds goes when no cell runs best on it, or when its
// cells would lose less than holding it (gear_holding_seconds, at most one
// compile, so the band between dropping and compiling stays open) running
// elsewhere. Memory pressure: no additions, and the least useful goes.
void DecideCombinations(const GearSet& current, const WindowStats& stats, const MemoryState& memory,
                        const AdaptiveOptions& adaptive, const ReplanOptions& o, double now, UpdateDecision* out) {
  const std::map<GearCombination, double> created(stats.combinations.begin(), stats.combinations.end());
  const std::map<GearCombination, double> removed_at(stats.recently_removed_combinations.begin(),
                                                     stats.recently_removed_combinations.end());
  const std::vector<int64_t>& g0 = out->next_gears[0];
  const std::vector<int64_t>& g1 = out->next_gears[1];
  const size_t n0 = g0.size(), n1 = g1.size();
  const GearCostModel& m = o.cost;
  const std::string dims = Cat(current.dimension(0).name, ",", current.dimension(1).name);
  double observed = 0;
  for (const DimensionStats& ds : stats.dimensions) observed = std::max(observed, ds.observed_seconds);
  const double scale = m.beta * HorizonFactor(observed, adaptive, o);  // window seconds -> over the horizon
  const double compile_cost = m.alpha * m.compile_seconds;
  const double holding = std::min(o.gear_holding_seconds, compile_cost);
  const double ratio = current.cover_ratio();
  auto at = [&](size_t i, size_t j) { return i * n1 + j; };
  // Per cell: its size, its graph's run time and memory cost.
  std::vector<double> cell_volume(n0 * n1), cell_run(n0 * n1), cell_memory(n0 * n1);
  for (size_t i = 0; i < n0; ++i) {
    for (size_t j = 0; j < n1; ++j) {
      cell_volume[at(i, j)] = static_cast<double>(g0[i]) * static_cast<double>(g1[j]);
      cell_run[at(i, j)] = m.Run(g0[i] * g1[j]);
      cell_memory[at(i, j)] = m.gamma * m.GearBytes(g0[i] * g1[j]) / kGiB;
    }
  }
  auto volume = [&](size_t i, size_t j) { return cell_volume[at(i, j)]; };
  auto run = [&](size_t i, size_t j) { return cell_run[at(i, j)]; };
  auto memory_cost = [&](size_t i, size_t j) { return cell_memory[at(i, j)]; };

  // Traffic per cell of the next grid (dense: at most 64 x 64 cells): the
  // decayed variants, and their run time uncompiled at their exact sizes.
  std::vector<double> weight(n0 * n1, 0.0), uncompiled(n0 * n1, 0.0);
  for (const JointSize& s : stats.joint_sizes) {
    auto i = static_cast<size_t>(std::lower_bound(g0.begin(), g0.end(), s.a) - g0.begin());
    auto j = static_cast<size_t>(std::lower_bound(g1.begin(), g1.end(), s.b) - g1.begin());
    // Above a splittable dimension's largest gear the shape splits into
    // chunks of it; above another's it runs eagerly (no graph helps).
    if (i == n0) {
      if (!current.dimension(0).splittable) continue;
      i = n0 - 1;
    }
    if (j == n1) {
      if (!current.dimension(1).splittable) continue;
      j = n1 - 1;
    }
    weight[at(i, j)] += s.weight;
    uncompiled[at(i, j)] += s.weight * o.uncompiled_slowdown * m.Run(std::min(s.a, g0[i]) * std::min(s.b, g1[j]));
  }
  std::vector<size_t> traffic;  // cells with traffic
  for (size_t c = 0; c < n0 * n1; ++c) {
    if (weight[c] > 0) traffic.push_back(c);
  }
  // The combinations that survive the grid change, as grid cells.
  std::vector<char> in_set(n0 * n1, 0);
  for (const GearCombination& k : current.combinations()) {
    auto i = std::lower_bound(g0.begin(), g0.end(), k[0]);
    auto j = std::lower_bound(g1.begin(), g1.end(), k[1]);
    if (i != g0.end() && *i == k[0] && j != g1.end() && *j == k[1]) {
      in_set[at(static_cast<size_t>(i - g0.begin()), static_cast<size_t>(j - g1.begin()))] = 1;
    }
  }
  auto combination = [&](size_t c) { return GearCombination{g0[c / n1], g1[c % n1]}; };
  // The combinations that may serve cell (i, j): it covers the cell and is
  // at most `ratio` times its size; and the cells combination (ki, kj) may
  // serve. Both walk only that region of the grid.
  auto for_each_server = [&](size_t i, size_t j, auto&& visit) {
    const double limit = ratio * volume(i, j);
    for (size_t ki = i; ki < n0; ++ki) {
      if (volume(ki, j) > limit) break;
      for (size_t kj = j; kj < n1 && volume(ki, kj) <= limit; ++kj) visit(ki, kj);
    }
  };
  auto for_each_served = [&](size_t ki, size_t kj, auto&& visit) {
    const double v = volume(ki, kj);
    for (size_t i = ki + 1; i-- > 0;) {
      if (v > ratio * volume(i, kj)) break;
      for (size_t j = kj + 1; j-- > 0 && v <= ratio * volume(i, j);) visit(i, j);
    }
  };
  // Per cell with traffic: its cost per window on the best combination of
  // the set and on the second best (uncompiled when none serves it), and
  // which cell of the grid is its best (or none).
  std::vector<double> best_cost(n0 * n1), second_cost(n0 * n1);
  std::vector<int64_t> best_at(n0 * n1, -1);
  auto assign = [&]() {
    for (size_t c : traffic) {
      best_cost[c] = second_cost[c] = uncompiled[c];
      best_at[c] = -1;
      for_each_server(c / n1, c % n1, [&](size_t ki, size_t kj) {
        if (!in_set[at(ki, kj)]) return;
        const double v = weight[c] * run(ki, kj);
        if (v < best_cost[c]) {
          second_cost[c] = best_cost[c];
          best_cost[c] = v;
          best_at[c] = static_cast<int64_t>(at(ki, kj));
        } else if (v < second_cost[c]) {
          second_cost[c] = v;
        }
      });
    }
  };

  // Drop what keeps too little: a combination whose traffic would lose less
  // than holding one graph if it ran elsewhere. Those that are no cell's
  // best lose nothing and go together; others one at a time, least first,
  // at most max_changes_per_update an update.
  int dropped = 0;
  for (int round = 0; round <= o.max_changes_per_update; ++round) {
    assign();
    std::vector<double> loss(n0 * n1, 0.0);
    for (size_t c : traffic) {
      if (best_at[c] >= 0) loss[static_cast<size_t>(best_at[c])] += scale * (second_cost[c] - best_cost[c]);
    }
    std::vector<size_t> go;
    int64_t least = -1;
    for (size_t k = 0; k < n0 * n1; ++k) {
      if (!in_set[k]) continue;
      loss[k] -= memory_cost(k / n1, k % n1);
      // A combination compiled within min_gear_lifetime_seconds stays, idle
      // or not (unless memory is high): the traffic of a cell comes and
      // goes within minutes, and recompiling it is the churn to avoid.
      auto c = created.find(combination(k));
      if (!memory.high && c != created.end() && now - c->second < o.min_gear_lifetime_seconds) continue;
      if (loss[k] <= 0) {
        go.push_back(k);
      } else if (least < 0 || loss[k] < loss[static_cast<size_t>(least)]) {
        least = static_cast<int64_t>(k);
      }
    }
    if (go.empty() && least >= 0 && round < o.max_changes_per_update &&
        (loss[static_cast<size_t>(least)] < holding || (memory.high && dropped == 0))) {
      go.push_back(static_cast<size_t>(least));
    }
    if (go.empty()) break;
    for (size_t k : go) {
      in_set[k] = 0;
      ++dropped;
      out->record.changes.push_back(
          {dims, "drop", 0, 0, -loss[k], 0.0, -loss[k],
           loss[k] <= 0 ? "no traffic of the window runs best on it"
           : memory.high && loss[k] >= holding ? "memory is high"
                                               : "its traffic loses less than holding one graph elsewhere",
           combination(k)});
    }
  }
  // Compile what pays, best first. Gains only shrink as the set grows (each
  // cell keeps its best), so a stale gain is an upper bound: pop,
  // re-evaluate, take it if it still leads.
  if (!memory.high) {
    assign();
    // The gain of compiling cell k, and the decayed variants it would serve better.
    auto gain_of = [&](size_t k, double* served) {
      double gain = 0, served_weight = 0;
      for_each_served(k / n1, k % n1, [&](size_t i, size_t j) {
        const size_t c = at(i, j);
        if (weight[c] <= 0) return;
        const double v = weight[c] * run(k / n1, k % n1);
        if (v < best_cost[c]) {
          gain += best_cost[c] - v;
          served_weight += weight[c];
        }
      });
      *served = served_weight;
      return scale * gain - memory_cost(k / n1, k % n1);
    };
    // What a compile is judged on: the gain less one standard error of its
    // estimate (a count of n variants is uncertain by sqrt(n), so the gain
    // is shrunk by 1/sqrt(n)); none below min_window_weight variants. On a
    // fine grid most cells see few variants, and without this their noise
    // alone would keep pushing one more over the threshold. A combination
    // dropped within readd_cooldown_seconds comes back only at twice the gain.
    auto judged_gain = [&](size_t k) {
      double served = 0;
      const double g = gain_of(k, &served);
      if (served < o.min_window_weight) return 0.0;
      const double confident = g * (1.0 - 1.0 / std::sqrt(served));
      auto r = removed_at.find(combination(k));
      return r != removed_at.end() && now - r->second < o.readd_cooldown_seconds ? confident / 2 : confident;
    };
    std::vector<std::pair<double, size_t>> queue;
    for (size_t c : traffic) {
      if (!in_set[c]) queue.push_back({judged_gain(c), c});
    }
    std::make_heap(queue.begin(), queue.end());
    const double threshold = o.min_gain_ratio * compile_cost;
    size_t in_use = 0;
    for (char x : in_set) in_use += x ? 1 : 0;
    std::optional<ChangeRecord> declined;
    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end());
      const size_t k = queue.back().second;
      queue.pop_back();
      const double gain = judged_gain(k);
      if (!queue.empty() && gain < queue.front().first) {
        queue.push_back({gain, k});
        std::push_heap(queue.begin(), queue.end());
        continue;
      }
      double served = 0;
      const double raw_gain = gain_of(k, &served);
      if (gain < threshold) {
        declined = ChangeRecord{dims, "compile", 0, 0, raw_gain, compile_cost, raw_gain - compile_cost,
                                served < o.min_window_weight
                                    ? Cat("too little traffic for it in the window (", served, " < min_window_weight)")
                                    : Cat("outside the hysteresis band (gain must reach ", threshold, " s)"),
                                combination(k)};
        break;
      }
      if (static_cast<int>(in_use) >= o.max_combinations) {
        declined = ChangeRecord{dims, "compile", 0, 0, raw_gain, compile_cost, raw_gain - compile_cost,
                                "the gear set is at replan.max_combinations", combination(k)};
        break;
      }
      in_set[k] = 1;
      ++in_use;
      out->record.changes.push_back({dims, "compile", 0, 0, raw_gain, compile_cost, raw_gain - compile_cost,
                                     "gain clears the hysteresis", combination(k)});
      for_each_served(k / n1, k % n1, [&](size_t i, size_t j) {
        const size_t c = at(i, j);
        if (weight[c] > 0) best_cost[c] = std::min(best_cost[c], weight[c] * run(k / n1, k % n1));
      });
    }
    if (declined) out->record.declined.push_back(*declined);
  }
  std::vector<GearCombination> set;
  for (size_t k = 0; k < n0 * n1; ++k) {
    if (in_set[k]) set.push_back(combination(k));
  }
  out->next_combinations = std::move(set);  // ascending: row-major over ascending gears
}

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
  if (!(std::isfinite(o.uncompiled_slowdown) && o.uncompiled_slowdown >= 1)) {
    return internal::InvalidFieldValue("replan.uncompiled_slowdown", o.uncompiled_slowdown, "a ratio >= 1");
  }
  if (o.max_combinations < 1 || o.max_combinations > 4096) {
    return internal::InvalidFieldValue("replan.max_combinations", o.max_combinations, "an integer in [1, 4096]");
  }
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
  // The seed policy's own additions are not this policy's: a dimension this
  // policy leaves alone (no statistics, too little traffic) must not carry
  // them into the decision.
  for (int d = 0; d < num_dims; ++d) {
    out.added[d].clear();
    out.removed[d].clear();
  }
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
    // Graphs per gear of this dimension (at most; a joint or sparse set
    // compiles a subset of the grid's cells, chosen after the grid).
    double combinations = 1;
    GearCostModel m = o.cost;  // this dimension's view of the cost model
    for (int e = 0; e < num_dims; ++e) {
      if (e == d) continue;
      combinations *= gears_in_use[e];
      m.seconds_per_unit *= mean_gear_power[e];
    }
    const double compile_cost = m.alpha * m.compile_seconds * combinations;
    // Removing must stay below adding (the hysteresis band): a removal may
    // lose at most holding one graph, and never a compile's worth.
    const double holding_cost = std::min(o.gear_holding_seconds, m.alpha * m.compile_seconds) * combinations;
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
    const double horizon = HorizonFactor(ds->observed_seconds, adaptive, o);
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
        // Memory pressure: give back the gear whose removal costs least,
        // within the count floor and the largest-gear rule (why_not).
        for (const Move& mv : moves) {
          if (mv.action == "remove" && mv.why_not.empty() && (best == nullptr || mv.gain > best->gain)) best = &mv;
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
  if (gears.scheme() != GearScheme::kIndependent) {
    DecideCombinations(gears, stats, memory, adaptive, o, now, &out);
    if (out.next_combinations != gears.combinations()) out.changed = true;
  }
  rec.removed = out.removed;
  rec.added = out.added;
  rec.gears_after = out.next_gears;
  rec.changed = out.changed;
  return out;
}

}  // namespace gearbox
