// The replan policy on joint and sparse gear sets (docs/POLICY.md, "Joint
// and sparse gear sets"): which cells of the next grid are compiled
// combinations.
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
// With a gear-bytes predictor (MemoryState) a cell's memory is what it frees
// (compiled) or adds (not), and with memory_budget_bytes a compile whose
// predicted bytes would pass the budget is declined (drops free theirs first).
// Past what pays, combinations that serve uncompiled variants compile, the
// one that gains most first, until at most max_uncompiled_share of the
// window's variants run uncompiled, and no drop takes the share above it
// (unless memory is high or the set is above its cap).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "src/common/errors.h"
#include "src/policy/replan_internal.h"

namespace gearbox::internal {
namespace {

class CombinationChooser {
 public:
  CombinationChooser(const GearSet& current, const WindowStats& stats, const MemoryState& memory,
                     const AdaptiveOptions& adaptive, const ReplanOptions& o, double now,
                     UpdateDecision* out)
      : current_(current),
        memory_(memory),
        o_(o),
        now_(now),
        out_(out),
        created_(stats.combinations.begin(), stats.combinations.end()),
        removed_at_(stats.recently_removed_combinations.begin(),
                    stats.recently_removed_combinations.end()),
        g0_(out->next_gears[0]),
        g1_(out->next_gears[1]),
        n0_(g0_.size()),
        n1_(g1_.size()),
        m_(o.cost),
        dims_(Cat(current.dimension(0).name, ",", current.dimension(1).name)),
        compile_cost_(m_.alpha * m_.compile_seconds),
        holding_(std::min(o.gear_holding_seconds, compile_cost_)),
        cap_(static_cast<size_t>(std::min(o.max_combinations, o.max_graphs))),
        ratio_(current.cover_ratio()) {
    double observed = 0;
    for (const DimensionStats& ds : stats.dimensions)
      observed = std::max(observed, ds.observed_seconds);
    scale_ = m_.beta * HorizonFactor(observed, adaptive, o);  // window seconds -> over the horizon
    BuildCells();
    BuildTraffic(stats);
    MarkSurvivors();
    dropped_.assign(n0_ * n1_, 0);
  }

  void Run() {
    Drop();
    if (!memory_.high) Compile();
    std::vector<GearCombination> set;
    for (size_t k = 0; k < n0_ * n1_; ++k) {
      if (in_set_[k]) set.push_back(Combination(k));
    }
    out_->next_combinations = std::move(set);  // ascending: row-major over ascending gears
  }

 private:
  size_t At(size_t i, size_t j) const { return i * n1_ + j; }
  double Volume(size_t i, size_t j) const { return cell_volume_[At(i, j)]; }
  double RunTime(size_t i, size_t j) const { return cell_run_[At(i, j)]; }
  double MemoryCost(size_t i, size_t j) const { return cell_memory_[At(i, j)]; }
  GearCombination Combination(size_t c) const {
    return GearCombination{g0_[c / n1_], g1_[c % n1_]};
  }

  // A cell's memory, bytes: with a predictor what it frees if compiled now,
  // what it adds if not (the config's model until it can predict).
  double CellBytes(size_t i, size_t j) const {
    const GearCombination c{g0_[i], g1_[j]};
    if (memory_.predictor == nullptr) return m_.GearBytes(g0_[i] * g1_[j]);
    const std::vector<int64_t> gears{c[0], c[1]};
    if (std::binary_search(current_.combinations().begin(), current_.combinations().end(), c))
      return static_cast<double>(memory_.predictor->FreedBytes(gears));
    const std::optional<int64_t> added = memory_.predictor->AddedBytes(gears);
    return added.has_value() ? static_cast<double>(*added) : m_.GearBytes(g0_[i] * g1_[j]);
  }

  // Whether the combination ran out of memory at its compile within the cooldown.
  bool OutOfMemory(const GearCombination& c) const {
    for (const OutOfMemoryEvent& e : memory_.recent_out_of_memory) {
      if (e.gears.size() == 2 && e.gears[0] == c[0] && e.gears[1] == c[1]) return true;
    }
    return false;
  }

  // The gears' memory once this update's drops are made, bytes.
  int64_t BytesAfterDrops() const {
    int64_t bytes = memory_.bytes_in_use.value_or(0);
    for (const GearCombination& c : current_.combinations()) {
      auto i = std::lower_bound(g0_.begin(), g0_.end(), c[0]);
      auto j = std::lower_bound(g1_.begin(), g1_.end(), c[1]);
      const bool kept =
          i != g0_.end() && *i == c[0] && j != g1_.end() && *j == c[1] &&
          in_set_[At(static_cast<size_t>(i - g0_.begin()), static_cast<size_t>(j - g1_.begin()))];
      if (!kept) bytes -= memory_.predictor->FreedBytes(std::vector<int64_t>{c[0], c[1]});
    }
    return bytes;
  }

  // Per cell: its size, its graph's run time and memory cost.
  void BuildCells() {
    cell_volume_.assign(n0_ * n1_, 0.0);
    cell_run_.assign(n0_ * n1_, 0.0);
    cell_memory_.assign(n0_ * n1_, 0.0);
    for (size_t i = 0; i < n0_; ++i) {
      for (size_t j = 0; j < n1_; ++j) {
        cell_volume_[At(i, j)] = static_cast<double>(g0_[i]) * static_cast<double>(g1_[j]);
        cell_run_[At(i, j)] = m_.Run(g0_[i] * g1_[j]);
        cell_memory_[At(i, j)] = m_.gamma * CellBytes(i, j) / kGiB;
      }
    }
  }

  // Traffic per cell of the next grid (dense: at most 64 x 64 cells): the
  // decayed variants, and their run time uncompiled at their exact sizes.
  void BuildTraffic(const WindowStats& stats) {
    weight_.assign(n0_ * n1_, 0.0);
    uncompiled_.assign(n0_ * n1_, 0.0);
    for (const JointSize& s : stats.joint_sizes) {
      auto i = static_cast<size_t>(std::lower_bound(g0_.begin(), g0_.end(), s.a) - g0_.begin());
      auto j = static_cast<size_t>(std::lower_bound(g1_.begin(), g1_.end(), s.b) - g1_.begin());
      // Above a splittable dimension's largest gear the shape splits into
      // chunks of it; above another's it runs eagerly (no graph helps).
      if (i == n0_) {
        if (!current_.dimension(0).splittable) continue;
        i = n0_ - 1;
      }
      if (j == n1_) {
        if (!current_.dimension(1).splittable) continue;
        j = n1_ - 1;
      }
      weight_[At(i, j)] += s.weight;
      uncompiled_[At(i, j)] +=
          s.weight * o_.uncompiled_slowdown * m_.Run(std::min(s.a, g0_[i]) * std::min(s.b, g1_[j]));
    }
    for (size_t c = 0; c < n0_ * n1_; ++c) {
      if (weight_[c] > 0) traffic_.push_back(c);
      traffic_weight_ += weight_[c];
    }
  }

  // The combinations that survive the grid change, as grid cells.
  void MarkSurvivors() {
    in_set_.assign(n0_ * n1_, 0);
    for (const GearCombination& k : current_.combinations()) {
      auto i = std::lower_bound(g0_.begin(), g0_.end(), k[0]);
      auto j = std::lower_bound(g1_.begin(), g1_.end(), k[1]);
      if (i != g0_.end() && *i == k[0] && j != g1_.end() && *j == k[1]) {
        in_set_[At(static_cast<size_t>(i - g0_.begin()), static_cast<size_t>(j - g1_.begin()))] = 1;
      }
    }
  }

  // The combinations that may serve cell (i, j): it covers the cell and is
  // at most `ratio` times its size; and the cells combination (ki, kj) may
  // serve. Both walk only that region of the grid.
  template <typename Visit>
  void ForEachServer(size_t i, size_t j, Visit&& visit) const {
    const double limit = ratio_ * Volume(i, j);
    for (size_t ki = i; ki < n0_; ++ki) {
      if (Volume(ki, j) > limit) break;
      for (size_t kj = j; kj < n1_ && Volume(ki, kj) <= limit; ++kj) visit(ki, kj);
    }
  }
  template <typename Visit>
  void ForEachServed(size_t ki, size_t kj, Visit&& visit) const {
    const double v = Volume(ki, kj);
    for (size_t i = ki + 1; i-- > 0;) {
      if (v > ratio_ * Volume(i, kj)) break;
      for (size_t j = kj + 1; j-- > 0 && v <= ratio_ * Volume(i, j);) visit(i, j);
    }
  }

  // Per cell with traffic: its cost per window on the best combination of
  // the set and on the second best (uncompiled when none serves it), and
  // which cell of the grid is its best (or none).
  void Assign() {
    best_cost_.resize(n0_ * n1_);
    second_cost_.resize(n0_ * n1_);
    best_at_.resize(n0_ * n1_, -1);
    servers_.assign(n0_ * n1_, 0);
    sole_.assign(n0_ * n1_, 0);
    for (size_t c : traffic_) {
      best_cost_[c] = second_cost_[c] = uncompiled_[c];
      best_at_[c] = -1;
      ForEachServer(c / n1_, c % n1_, [&](size_t ki, size_t kj) {
        if (!in_set_[At(ki, kj)]) return;
        Served(c, At(ki, kj));
        const double v = weight_[c] * RunTime(ki, kj);
        if (v < best_cost_[c]) {
          second_cost_[c] = best_cost_[c];
          best_cost_[c] = v;
          best_at_[c] = static_cast<int64_t>(At(ki, kj));
        } else if (v < second_cost_[c]) {
          second_cost_[c] = v;
        }
      });
    }
  }

  // The window's variants that none of the set serves (after Assign; a
  // compile updates servers_), and how many of them may be.
  double UncompiledWeight() const {
    double w = 0;
    for (size_t c : traffic_) w += servers_[c] == 0 ? weight_[c] : 0.0;
    return w;
  }
  double UncompiledBound() const { return o_.max_uncompiled_share * traffic_weight_; }
  // One more compiled combination, k, serves cell c.
  void Served(size_t c, size_t k) {
    if (servers_[c] == 0) sole_[c] = k;
    servers_[c] = static_cast<char>(std::min(servers_[c] + 1, 2));
  }

  // Drop what keeps too little: a combination whose traffic would lose less
  // than holding one graph if it ran elsewhere. Those that are no cell's
  // best lose nothing and go together; others one at a time, least first,
  // at most max_changes_per_update an update.
  size_t InUse() const {
    size_t in_use = 0;
    for (char x : in_set_) in_use += x ? 1 : 0;
    return in_use;
  }

  // Above the cap (replan.max_combinations, replan.max_graphs) the least
  // useful go, young ones too, however many rounds it takes.
  void Drop() {
    int dropped = 0;
    for (int round = 0;; ++round) {
      const bool over = InUse() > cap_;
      if (round > o_.max_changes_per_update && !over) break;
      Assign();
      std::vector<double> loss(n0_ * n1_, 0.0);
      std::vector<char> best_somewhere(n0_ * n1_, 0);
      std::vector<double> uncovers(n0_ * n1_, 0.0);  // variants left with no graph if it goes
      for (size_t c : traffic_) {
        // A cell's only server leaves it uncompiled, whether or not it is the
        // cell's best (running uncompiled may model cheaper than a large graph).
        if (servers_[c] == 1) uncovers[sole_[c]] += weight_[c];
        if (best_at_[c] < 0) continue;
        const auto b = static_cast<size_t>(best_at_[c]);
        loss[b] += scale_ * (second_cost_[c] - best_cost_[c]);
        best_somewhere[b] = 1;
      }
      const std::vector<double> traffic_loss = loss;  // before memory
      // Below the cap, a drop that would leave more than max_uncompiled_share
      // of the window uncompiled is not made (at the cap a drop makes room
      // for a compile that may serve more; above it, or with memory high,
      // the set must shrink). 1: no such bound.
      const double room = UncompiledBound() - UncompiledWeight() + 1e-9 * traffic_weight_;
      const bool bounded = o_.max_uncompiled_share < 1 && !over && !memory_.high && InUse() < cap_;
      auto uncovers_too_much = [&](size_t k) {
        return bounded && uncovers[k] > 0 && uncovers[k] > room;
      };
      std::vector<size_t> go;
      int64_t least = -1;
      int64_t tied = -1;         // a cell's best at no loss: another serves it as well
      std::vector<size_t> keep;  // over the cap: the candidates, by loss
      for (size_t k = 0; k < n0_ * n1_; ++k) {
        if (!in_set_[k]) continue;
        loss[k] -= MemoryCost(k / n1_, k % n1_);
        // A combination compiled within min_gear_lifetime_seconds stays, idle
        // or not (unless memory is high): the traffic of a cell comes and
        // goes within minutes, and recompiling it is the churn to avoid.
        auto c = created_.find(Combination(k));
        if (!memory_.high && !over && c != created_.end() &&
            now_ - c->second < o_.min_gear_lifetime_seconds)
          continue;
        if (uncovers_too_much(k)) continue;
        if (loss[k] <= 0 && !best_somewhere[k] && uncovers[k] <= 0) {
          go.push_back(k);  // no cell's best nor only server: these go together
        } else if (loss[k] <= 0 && !over) {
          if (tied < 0) tied = static_cast<int64_t>(k);  // one at a time: its equal may go next
        } else {
          keep.push_back(k);
          if (least < 0 || loss[k] < loss[static_cast<size_t>(least)])
            least = static_cast<int64_t>(k);
        }
      }
      // Far above the cap, half the excess goes in one round, least useful
      // first (then the losses are weighed again): a set of thousands of
      // combinations shrinks in a few rounds, not one round per combination.
      if (go.empty() && tied >= 0) go.push_back(static_cast<size_t>(tied));
      const size_t excess = over ? InUse() - cap_ : 0;
      if (go.empty() && excess > 1) {
        const size_t n = std::min(keep.size(), excess / 2);
        std::partial_sort(keep.begin(), keep.begin() + static_cast<std::ptrdiff_t>(n), keep.end(),
                          [&](size_t a, size_t b) { return loss[a] < loss[b]; });
        go.assign(keep.begin(), keep.begin() + static_cast<std::ptrdiff_t>(n));
      }
      if (go.empty() && least >= 0 &&
          ((round < o_.max_changes_per_update &&
            (loss[static_cast<size_t>(least)] < holding_ || (memory_.high && dropped == 0))) ||
           over)) {
        go.push_back(static_cast<size_t>(least));
      }
      if (go.empty()) break;
      for (size_t k : go) {
        in_set_[k] = 0;
        dropped_[k] = 1;
        ++dropped;
        out_->record.changes.push_back(
            {dims_, ChangeAction::kDrop, 0, 0, -loss[k], 0.0, -loss[k],
             loss[k] <= 0 && !best_somewhere[k] ? "no traffic of the window runs best on it"
             : loss[k] <= 0 && traffic_loss[k] <= 0
                 ? "another combination serves its traffic as well"
             : loss[k] <= 0       ? "its memory costs more than its traffic saves"
             : loss[k] < holding_ ? "its traffic loses less than holding one graph elsewhere"
             : over               ? "the set is above replan.max_graphs"
                                  : "memory is high",
             Combination(k)});
      }
    }
  }

  // The gain of compiling cell k, and the decayed variants it would serve better.
  double GainOf(size_t k, double* served) const {
    double gain = 0, served_weight = 0;
    ForEachServed(k / n1_, k % n1_, [&](size_t i, size_t j) {
      const size_t c = At(i, j);
      if (weight_[c] <= 0) return;
      const double v = weight_[c] * RunTime(k / n1_, k % n1_);
      if (v < best_cost_[c]) {
        gain += best_cost_[c] - v;
        served_weight += weight_[c];
      }
    });
    *served = served_weight;
    return scale_ * gain - MemoryCost(k / n1_, k % n1_);
  }

  // What a compile is judged on: the gain less one standard error of its
  // estimate (a count of n variants is uncertain by sqrt(n), so the gain is
  // shrunk by 1/sqrt(n)); none below min_window_weight variants. On a fine
  // grid most cells see few variants, and without this their noise alone
  // would keep pushing one more over the threshold. A combination dropped
  // within readd_cooldown_seconds comes back only at twice the gain.
  double JudgedGain(size_t k) const {
    double served = 0;
    const double g = GainOf(k, &served);
    if (served < o_.min_window_weight) return 0.0;
    const double confident = g * (1.0 - 1.0 / std::sqrt(served));
    auto r = removed_at_.find(Combination(k));
    return r != removed_at_.end() && now_ - r->second < o_.readd_cooldown_seconds ? confident / 2
                                                                                  : confident;
  }

  // Why compiling combination k now is refused (the cap, the memory budget),
  // or nothing; `*skip_only`: only this one is (it ran out of memory at its
  // compile recently), the next may compile. `*added` is its predicted bytes.
  std::optional<std::string> Refusal(size_t k, size_t in_use, int64_t bytes, int64_t* added,
                                     bool* skip_only) const {
    *added = 0;
    *skip_only = false;
    if (in_use >= cap_) {
      return o_.max_graphs < o_.max_combinations ? "the gear set is at replan.max_graphs"
                                                 : "the gear set is at replan.max_combinations";
    }
    const GearCombination c = Combination(k);
    if (OutOfMemory(c)) {
      *skip_only = true;
      return "it ran out of memory at its compile within adaptive.out_of_memory_cooldown_seconds";
    }
    if (Budgeted()) {
      const std::optional<int64_t> bytes_of =
          memory_.predictor->AddedBytes(std::vector<int64_t>{c[0], c[1]});
      *added = bytes_of.value_or(0);
      if (bytes_of.has_value() && bytes + *bytes_of > memory_.budget_bytes) {
        return Cat("its predicted ", *bytes_of, " bytes would take the gears' memory from ", bytes,
                   " to ", bytes + *bytes_of,
                   " bytes, past memory_budget_bytes = ", memory_.budget_bytes);
      }
    }
    return std::nullopt;
  }
  bool Budgeted() const {
    return memory_.budget_bytes > 0 && memory_.predictor != nullptr &&
           memory_.bytes_in_use.has_value();
  }

  ChangeRecord CompileRecord(size_t k, std::string reason) const {
    double served = 0;
    const double gain = GainOf(k, &served);
    return ChangeRecord{dims_,
                        ChangeAction::kCompile,
                        0,
                        0,
                        gain,
                        compile_cost_,
                        gain - compile_cost_,
                        std::move(reason),
                        Combination(k)};
  }

  // Compiles combination k: every cell it serves better runs on it.
  void AddToSet(size_t k, std::string reason) {
    out_->record.changes.push_back(CompileRecord(k, std::move(reason)));
    in_set_[k] = 1;
    ForEachServed(k / n1_, k % n1_, [&](size_t i, size_t j) {
      const size_t c = At(i, j);
      if (weight_[c] <= 0) return;
      best_cost_[c] = std::min(best_cost_[c], weight_[c] * RunTime(k / n1_, k % n1_));
      Served(c, k);
    });
  }

  // Compile what pays, best first. Gains only shrink as the set grows (each
  // cell keeps its best), so a stale gain is an upper bound: pop,
  // re-evaluate, take it if it still leads. Then, while the cap and the
  // budget allow, what keeps the uncompiled share within its bound (Cover).
  void Compile() {
    Assign();
    std::vector<std::pair<double, size_t>> queue;
    for (size_t c : traffic_) {
      if (!in_set_[c]) queue.push_back({JudgedGain(c), c});
    }
    std::make_heap(queue.begin(), queue.end());
    const double threshold = o_.min_gain_ratio * compile_cost_;
    size_t in_use = InUse();
    int64_t bytes = Budgeted() ? BytesAfterDrops() : 0;
    std::optional<ChangeRecord> declined;
    bool full = false;  // the cap stopped the compiles
    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end());
      const size_t k = queue.back().second;
      queue.pop_back();
      const double gain = JudgedGain(k);
      if (!queue.empty() && gain < queue.front().first) {
        queue.push_back({gain, k});
        std::push_heap(queue.begin(), queue.end());
        continue;
      }
      if (gain < threshold) {
        double served = 0;
        GainOf(k, &served);
        declined = CompileRecord(
            k,
            served < o_.min_window_weight
                ? Cat("too little traffic for it in the window (", served, " < min_window_weight)")
                : Cat("outside the hysteresis band (gain must reach ", threshold, " s)"));
        break;
      }
      int64_t added = 0;
      bool skip_only = false;
      if (auto refused = Refusal(k, in_use, bytes, &added, &skip_only)) {
        declined = CompileRecord(k, *refused);
        if (skip_only) continue;  // the next best may compile
        full = in_use >= cap_;    // past the byte budget, a smaller one may still cover
        break;
      }
      bytes += added;
      ++in_use;
      AddToSet(k, "gain clears the hysteresis");
    }
    if (!full) Cover(&in_use, &bytes, &declined);
    if (declined) out_->record.declined.push_back(*declined);
  }

  // Past what pays: while more than max_uncompiled_share of the window's
  // variants would run uncompiled, compile, of the combinations that would
  // serve some of them, the one that gains most (the least padding for what
  // it serves: on a joint set the cell's own combination before a larger
  // one covering more cells), within the cap and the memory budget. Gains
  // only shrink as the set grows: a lazy heap, as above.
  void Cover(size_t* in_use, int64_t* bytes, std::optional<ChangeRecord>* declined) {
    const double total = traffic_weight_;
    const double bound = UncompiledBound();
    double uncompiled = UncompiledWeight();
    if (uncompiled <= bound) return;
    auto unserved = [&](size_t k) {
      double w = 0;
      ForEachServed(k / n1_, k % n1_, [&](size_t i, size_t j) {
        const size_t c = At(i, j);
        if (weight_[c] > 0 && servers_[c] == 0) w += weight_[c];
      });
      return w;
    };
    double served = 0;
    std::vector<std::pair<double, size_t>> queue;
    for (size_t k = 0; k < n0_ * n1_; ++k) {
      if (!in_set_[k] && !dropped_[k] && unserved(k) > 0) queue.push_back({GainOf(k, &served), k});
    }
    std::make_heap(queue.begin(), queue.end());
    while (uncompiled > bound && !queue.empty()) {
      std::pop_heap(queue.begin(), queue.end());
      const size_t k = queue.back().second;
      queue.pop_back();
      const double w = unserved(k);
      if (w <= 0) continue;
      if (const double gain = GainOf(k, &served); !queue.empty() && gain < queue.front().first) {
        queue.push_back({gain, k});
        std::push_heap(queue.begin(), queue.end());
        continue;
      }
      const std::string why =
          Cat("the window's uncompiled variants, ", uncompiled / total,
              " of them, are above replan.max_uncompiled_share = ", o_.max_uncompiled_share,
              "; it serves ", w, " of them");
      int64_t added = 0;
      bool skip_only = false;
      if (auto refused = Refusal(k, *in_use, *bytes, &added, &skip_only)) {
        *declined = CompileRecord(k, Cat(why, ", but ", *refused));
        if (skip_only || *in_use < cap_) continue;  // a smaller one may fit the byte budget
        break;
      }
      *bytes += added;
      ++*in_use;
      AddToSet(k, why);
      uncompiled -= w;
      if (declined->has_value() && (*declined)->combination == Combination(k)) declined->reset();
    }
  }

  const GearSet& current_;
  const MemoryState& memory_;
  const ReplanOptions& o_;
  const double now_;
  UpdateDecision* out_;
  const std::map<GearCombination, double> created_;
  const std::map<GearCombination, double> removed_at_;
  const std::vector<int64_t>& g0_;
  const std::vector<int64_t>& g1_;
  const size_t n0_, n1_;
  const GearCostModel& m_;
  const std::string dims_;
  const double compile_cost_;
  const double holding_;
  const size_t cap_;  // most compiled combinations: max_combinations, max_graphs
  const double ratio_;
  double scale_ = 0;
  std::vector<double> cell_volume_, cell_run_, cell_memory_;
  std::vector<double> weight_, uncompiled_;
  std::vector<size_t> traffic_;  // cells with traffic
  double traffic_weight_ = 0;    // their decayed variants: what a graph could serve
  std::vector<char> in_set_;
  std::vector<double> best_cost_, second_cost_;
  std::vector<int64_t> best_at_;
  std::vector<char> servers_;  // per cell: compiled combinations serving it (0, 1, 2 or more)
  std::vector<size_t> sole_;   // per cell served by one: that combination
  std::vector<char> dropped_;  // dropped by this decision: Cover does not take them back
};

}  // namespace

void DecideCombinations(const GearSet& current, const WindowStats& stats, const MemoryState& memory,
                        const AdaptiveOptions& adaptive, const ReplanOptions& o, double now,
                        UpdateDecision* out) {
  CombinationChooser(current, stats, memory, adaptive, o, now, out).Run();
}

}  // namespace gearbox::internal
