#include "gearbox/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "src/policy/gear_bytes.h"

namespace gearbox {
namespace {

// Zero-use gears first, then gears below min_samples_per_gear, then the rest.
int EvictionTier(const GearStats& s, const AdaptiveOptions& o) {
  if (s.sample_count == 0) return 0;
  if (static_cast<int64_t>(s.sample_count) < o.min_samples_per_gear) return 1;
  return 2;
}

// Statistics of a gear by value; gears absent from the window statistics are
// unused and unprotected.
class DimensionView {
 public:
  DimensionView(const DimensionView&) = delete;
  DimensionView& operator=(const DimensionView&) = delete;
  DimensionView(const DimensionStats* dim, std::span<const int64_t> gears) {
    total_ = 0.0;
    if (dim != nullptr) {
      for (const GearStats& g : dim->gears) {
        by_gear_[g.gear] = &g;
        total_ += g.weighted_hits;
      }
    }
    for (int64_t gear : gears) {
      if (!by_gear_.count(gear)) {
        GearStats& empty = absent_.emplace_back();
        empty.gear = gear;
        empty.created_ts = -std::numeric_limits<double>::infinity();
        empty.last_hit_ts = -std::numeric_limits<double>::infinity();
      }
    }
    for (const GearStats& g : absent_) by_gear_[g.gear] = &g;
  }
  const GearStats& at(int64_t gear) const { return *by_gear_.at(gear); }
  double total() const { return total_; }

 private:
  std::map<int64_t, const GearStats*> by_gear_;
  std::vector<GearStats> absent_;  // complete before by_gear_ points into it
  double total_;
};

// The optional evidence guard (addition_confidence_sigmas = k > 0; not in
// the seed): a new gear must be confidently in use, i.e. the samples it would
// serve, less k standard deviations of Poisson noise, still reach
// min_samples_per_gear (and at least 1). Otherwise a window that happens to
// bring it no traffic makes it a zero-use gear that the eviction rule
// removes, and the addition rule re-adds later: a flap.
// n - k sqrt(n) >= m  <=>  n >= ((k + sqrt(k^2 + 4m)) / 2)^2
// (k = 3: 11 for m = 1, 18 for m = 5).
int64_t MinConfidentShare(int64_t min_samples_per_gear, double sigmas) {
  const double m = static_cast<double>(std::max<int64_t>(min_samples_per_gear, 1));
  const double root = (sigmas + std::sqrt(sigmas * sigmas + 4.0 * m)) / 2.0;
  return static_cast<int64_t>(std::ceil(root * root - 1e-9));
}

// Whether the optional evidence guard holds a proposal back as "thin".
bool IsThin(uint64_t share, const AdaptiveOptions& o) {
  if (o.addition_confidence_sigmas <= 0) return false;  // the seed: no such rule
  return static_cast<int64_t>(share) <
         MinConfidentShare(o.min_samples_per_gear, o.addition_confidence_sigmas);
}

struct Proposal {
  int dimension;
  AdditionRecord record;
};

// With a byte budget (not in the seed): whether the gear above `gear` in
// `current`, which its samples would move to once it is evicted, is not
// held and can never fit the budget (internal::GearBytes::NeverFits).
bool ReplacementNeverFits(const internal::GearBytes& bytes, int d,
                          const std::vector<int64_t>& current, int64_t gear, int min_count) {
  if (!bytes.budgeted()) return false;
  auto above = std::upper_bound(current.begin(), current.end(), gear);
  if (above == current.end() || bytes.Freed(d, *above) > 0) return false;
  return !bytes.NeverFits(d, *above, min_count).empty();
}

// With a byte budget: records the proposal's predicted bytes, and whether
// they would take the gears' memory (`projected`, after this update's
// evictions and earlier additions) past the budget.
bool PastByteBudget(const internal::GearBytes& bytes, int64_t projected, Proposal& p) {
  if (!bytes.budgeted()) return false;
  p.record.predicted_bytes = bytes.Added(p.dimension, p.record.gear);
  return !bytes.PastBudget(projected, p.record.predicted_bytes).empty();
}

}  // namespace

double GearScore(const GearStats& s, const AdaptiveOptions& o) {
  return o.weight_hit * s.hit_rate - o.weight_pad * s.avg_pad_ratio -
         o.weight_split * s.avg_split_ratio;
}

std::pair<double, int64_t> ReplacementLoss(const GearStats& stats,
                                           const std::vector<int64_t>& gears) {
  std::vector<int64_t> remaining;
  remaining.reserve(gears.size());
  for (int64_t g : gears) {
    if (g != stats.gear) remaining.push_back(g);
  }
  if (remaining.empty()) return {std::numeric_limits<double>::infinity(), 0};
  auto next = std::upper_bound(remaining.begin(), remaining.end(), stats.gear);
  const int64_t replacement = next != remaining.end() ? *next : remaining.back();
  if (stats.raw_samples.empty()) return {0.0, replacement};
  double loss = 0.0;
  stats.raw_samples.ForEachBin([&](int64_t raw, uint64_t count) {
    auto target = std::lower_bound(remaining.begin(), remaining.end(), raw);
    double sample_loss;
    if (target != remaining.end()) {
      sample_loss = static_cast<double>(*target - raw) / static_cast<double>(*target);
    } else {
      sample_loss = static_cast<double>(raw - remaining.back()) / static_cast<double>(raw);
    }
    loss += sample_loss * static_cast<double>(count);
  });
  return {loss / static_cast<double>(stats.raw_samples.total()), replacement};
}

namespace {

// A decision that changes nothing yet: the gears as they are, the record's
// header filled. The static and adaptive policies start from it.
UpdateDecision UnchangedDecision(const GearSet& gears, const MemoryState& memory, double now) {
  UpdateDecision out;
  const int num_dims = gears.num_dimensions();
  UpdateRecord& rec = out.record;
  rec.time = now;
  rec.memory = memory;
  rec.version_before = gears.version();
  rec.removed.resize(num_dims);
  rec.added.resize(num_dims);
  out.removed.resize(num_dims);
  out.added.resize(num_dims);
  for (int d = 0; d < num_dims; ++d) {
    rec.dimensions.push_back(gears.dimension(d).name);
    out.next_gears.emplace_back(gears.gears(d).begin(), gears.gears(d).end());
  }
  out.next_combinations = gears.combinations();
  rec.gears_after = out.next_gears;
  return out;
}

}  // namespace

UpdateDecision DecideStatic(const GearSet& gears, const MemoryState& memory, double now) {
  UpdateDecision out = UnchangedDecision(gears, memory, now);
  out.record.policy = UpdatePolicy::kStatic;
  return out;
}

UpdateDecision DecideUpdate(const GearSet& gears, const WindowStats& stats,
                            const MemoryState& memory, const AdaptiveOptions& o, double now) {
  UpdateDecision out = UnchangedDecision(gears, memory, now);
  const int num_dims = gears.num_dimensions();
  UpdateRecord& rec = out.record;

  std::vector<std::unique_ptr<DimensionView>> views;
  for (int d = 0; d < num_dims; ++d) {
    const DimensionStats* ds = nullptr;
    for (const DimensionStats& candidate : stats.dimensions) {
      if (candidate.name == gears.dimension(d).name) ds = &candidate;
    }
    views.push_back(std::make_unique<DimensionView>(ds, gears.gears(d)));
  }

  // The byte budget's view of the gears as they are (for the eviction rule
  // ReplacementNeverFits; not in the seed).
  std::vector<std::vector<int64_t>> grid;
  for (int d = 0; d < num_dims; ++d)
    grid.emplace_back(gears.gears(d).begin(), gears.gears(d).end());
  const internal::GearBytes bytes(grid, memory);

  // --- scores and eviction, one dimension at a time ---
  for (int d = 0; d < num_dims; ++d) {
    const DimensionView& view = *views[d];
    const std::vector<int64_t> current(gears.gears(d).begin(), gears.gears(d).end());
    const int64_t max_gear = current.back();
    std::vector<size_t> candidates;  // indexes into rec.gears
    for (int64_t gear : current) {
      const GearStats& s = view.at(gear);
      GearRecord& r = rec.gears.emplace_back();
      r.dimension = gears.dimension(d).name;
      r.gear = gear;
      r.weighted_hits = s.weighted_hits;
      r.hit_rate = view.total() > 0 ? s.weighted_hits / view.total() : 0.0;
      r.avg_pad_ratio = s.avg_pad_ratio;
      r.avg_split_ratio = s.avg_split_ratio;
      GearStats scored = s;
      scored.hit_rate = r.hit_rate;
      r.score = GearScore(scored, o);
      r.samples = s.sample_count;
      r.pad_samples = s.pad_sample_count;
      r.split_samples = s.split_sample_count;
      r.median_raw = s.raw_samples.Median();
      r.tier = EvictionTier(s, o);
      const double anchor = std::max(s.created_ts, s.last_hit_ts);
      if (gear == max_gear) {
        r.verdict = GearVerdict::kMaxGear;
      } else if (now - anchor < o.recent_use_protect_seconds) {
        r.verdict = GearVerdict::kProtected;
      } else if (static_cast<int>(current.size()) <= o.min_gear_count_per_type) {
        r.verdict = GearVerdict::kMinCount;
      } else if (ReplacementNeverFits(bytes, d, current, gear, o.min_gear_count_per_type)) {
        r.verdict = GearVerdict::kReplacementNeverFits;
      } else {
        r.verdict = GearVerdict::kCandidate;
        candidates.push_back(rec.gears.size() - 1);
      }
    }
    if (candidates.empty()) continue;
    const size_t chosen_index =
        *std::min_element(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
          const GearRecord& x = rec.gears[a];
          const GearRecord& y = rec.gears[b];
          if (x.tier != y.tier) return x.tier < y.tier;
          if (x.score != y.score) return x.score < y.score;
          return x.gear < y.gear;
        });
    GearRecord& chosen = rec.gears[chosen_index];
    chosen.examined = true;
    const GearStats& cs = view.at(chosen.gear);
    auto [loss, replacement] = ReplacementLoss(cs, current);
    chosen.replace_loss = loss;
    chosen.replacement_gear = replacement;
    if (loss > o.replace_loss_threshold) {
      chosen.verdict = GearVerdict::kReplaceLoss;
      out.protect.emplace_back(d, chosen.gear);
      continue;
    }
    // Hysteresis: where would the addition rule stand once the samples of
    // `chosen` moved to the next gear up (the one they map to)? If the move
    // makes the rule propose a gear it would not propose today, evicting
    // now would be undone on the next update: keep the gear. The margin
    // absorbs the noise of stationary traffic around the threshold.
    if (cs.unsplit_sample_count > 0) {
      const GearStats& receiver = view.at(replacement);
      const double g_next = static_cast<double>(replacement);
      const double weight_after = receiver.weighted_hits + cs.weighted_hits;
      const double pad_weight_after = receiver.avg_pad_ratio * receiver.weighted_hits +
                                      (cs.unsplit_weight - cs.unsplit_raw_weighted / g_next);
      const double pad_after = weight_after > 0 ? pad_weight_after / weight_after : 0.0;
      const uint64_t pad_count_after = receiver.pad_sample_count + cs.unsplit_sample_count;
      RawSampleHistogram merged = receiver.raw_samples;
      merged.Merge(cs.raw_samples);
      const int64_t proposal_after = merged.Median();
      chosen.readd_pad_ratio = pad_after;
      const bool fires_after = static_cast<int64_t>(pad_count_after) >= o.add_min_samples &&
                               pad_after >= o.pad_add_threshold - o.hysteresis_margin;
      const bool fires_now = static_cast<int64_t>(receiver.pad_sample_count) >= o.add_min_samples &&
                             receiver.avg_pad_ratio >= o.pad_add_threshold;
      const bool proposal_is_new =
          proposal_after == chosen.gear ||
          !std::binary_search(current.begin(), current.end(), proposal_after);
      const bool same_as_today = fires_now && receiver.raw_samples.Median() == proposal_after;
      if (fires_after && proposal_is_new && !same_as_today) {
        chosen.readd_candidate = proposal_after;
        chosen.verdict = GearVerdict::kWouldReadd;
        out.protect.emplace_back(d, chosen.gear);
        continue;
      }
    }
    chosen.verdict = GearVerdict::kEvicted;
    out.removed[d].push_back(chosen.gear);
    auto& next = out.next_gears[d];
    next.erase(std::find(next.begin(), next.end(), chosen.gear));
  }

  // --- additions ---
  std::vector<Proposal> proposals;
  for (int d = 0; d < num_dims; ++d) {
    const DimensionView& view = *views[d];
    const int64_t max_gear = gears.max_gear(d);
    for (int64_t gear : gears.gears(d)) {
      const GearStats& s = view.at(gear);
      if (s.sample_count == 0) continue;
      auto propose = [&](AdditionTrigger trigger, double ratio, double threshold) {
        Proposal p;
        p.dimension = d;
        p.record.dimension = gears.dimension(d).name;
        p.record.gear = s.raw_samples.Median();
        p.record.trigger = trigger;
        p.record.source_gear = gear;
        p.record.ratio = ratio;
        p.record.pressure = ratio - threshold;
        p.record.samples = s.sample_count;
        // What the new gear would serve on this evidence: the padded samples
        // at or below it, or every oversize request for a new max.
        p.record.share = trigger == AdditionTrigger::kSplit
                             ? s.split_sample_count
                             : s.raw_samples.CountAtMost(p.record.gear);
        proposals.push_back(std::move(p));
      };
      if (gear == max_gear && static_cast<int64_t>(s.split_sample_count) >= o.add_min_samples &&
          s.avg_split_ratio >= o.split_add_threshold) {
        propose(AdditionTrigger::kSplit, s.avg_split_ratio, o.split_add_threshold);
      }
      if (static_cast<int64_t>(s.pad_sample_count) >= o.add_min_samples &&
          s.avg_pad_ratio >= o.pad_add_threshold) {
        propose(AdditionTrigger::kPad, s.avg_pad_ratio, o.pad_add_threshold);
      }
    }
  }
  std::stable_sort(proposals.begin(), proposals.end(), [](const Proposal& a, const Proposal& b) {
    if (a.record.pressure != b.record.pressure) return a.record.pressure > b.record.pressure;
    if (a.record.samples != b.record.samples) return a.record.samples > b.record.samples;
    if (a.dimension != b.dimension) return a.dimension < b.dimension;
    return a.record.gear < b.record.gear;
  });
  int64_t removed_total = 0;
  for (const auto& r : out.removed) removed_total += static_cast<int64_t>(r.size());
  std::optional<int64_t> budget;
  if (memory.high) budget = removed_total;
  rec.addition_budget = budget;
  // The byte budget (memory_budget_bytes; not in the seed): this update's
  // evictions free their bytes first, then each addition must fit.
  int64_t projected = bytes.in_use();
  for (int d = 0; d < num_dims; ++d) {
    for (int64_t g : out.removed[d]) projected -= bytes.Freed(d, g);
  }
  for (Proposal& p : proposals) {
    auto& next = out.next_gears[p.dimension];
    const int64_t g = p.record.gear;
    const auto& removed = out.removed[p.dimension];
    if (std::binary_search(next.begin(), next.end(), g)) {
      p.record.outcome = AdditionOutcome::kDuplicate;
    } else if (std::find(removed.begin(), removed.end(), g) != removed.end()) {
      p.record.outcome = AdditionOutcome::kJustEvicted;
    } else if (internal::OutOfMemoryAt(memory, p.dimension, g).has_value()) {
      p.record.outcome = AdditionOutcome::kOutOfMemory;  // within the cooldown (not in the seed)
    } else if (IsThin(p.record.share, o)) {
      p.record.outcome = AdditionOutcome::kThin;
    } else if (budget.has_value() && *budget <= 0) {
      p.record.outcome = AdditionOutcome::kBudget;
    } else if (static_cast<int>(next.size()) >= o.max_gears_per_type) {
      p.record.outcome = AdditionOutcome::kCap;
    } else if (PastByteBudget(bytes, projected, p)) {
      p.record.outcome = AdditionOutcome::kMemoryBytes;
    } else {
      p.record.outcome = AdditionOutcome::kAdded;
      next.insert(std::lower_bound(next.begin(), next.end(), g), g);
      out.added[p.dimension].push_back(g);
      if (budget.has_value()) --*budget;
      if (p.record.predicted_bytes.has_value()) projected += *p.record.predicted_bytes;
    }
    rec.additions.push_back(p.record);
  }

  for (int d = 0; d < num_dims; ++d) {
    std::sort(out.added[d].begin(), out.added[d].end());
    if (!out.removed[d].empty() || !out.added[d].empty()) out.changed = true;
  }
  rec.removed = out.removed;
  rec.added = out.added;
  rec.gears_after = out.next_gears;
  rec.changed = out.changed;
  // Not in the seed (with a byte budget only): gears the budget can never hold.
  internal::DeclineNeverFitting(out.next_gears, rec.dimensions, memory, o.min_gear_count_per_type,
                                &rec.declined);
  return out;
}

std::string_view TriggerName(UpdateTrigger trigger) {
  switch (trigger) {
    case UpdateTrigger::kManual:
      return "manual";
    case UpdateTrigger::kInterval:
      return "interval";
    case UpdateTrigger::kMemory:
      return "memory";
    case UpdateTrigger::kCombinations:
      return "combinations";
  }
  return "unknown";
}

std::string_view VerdictName(GearVerdict verdict) {
  switch (verdict) {
    case GearVerdict::kMaxGear:
      return "max_gear";
    case GearVerdict::kProtected:
      return "protected";
    case GearVerdict::kMinCount:
      return "min_count";
    case GearVerdict::kReplacementNeverFits:
      return "replacement_never_fits";
    case GearVerdict::kCandidate:
      return "candidate";
    case GearVerdict::kReplaceLoss:
      return "replace_loss";
    case GearVerdict::kWouldReadd:
      return "would_readd";
    case GearVerdict::kEvicted:
      return "evicted";
    case GearVerdict::kKept:
      return "kept";
  }
  return "unknown";
}

std::string_view AdditionTriggerName(AdditionTrigger trigger) {
  return trigger == AdditionTrigger::kSplit ? "split" : "pad";
}

std::string_view ChangeActionName(ChangeAction action) {
  switch (action) {
    case ChangeAction::kAdd:
      return "add";
    case ChangeAction::kRemove:
      return "remove";
    case ChangeAction::kReplace:
      return "replace";
    case ChangeAction::kReplan:
      return "replan";
    case ChangeAction::kCompile:
      return "compile";
    case ChangeAction::kDrop:
      return "drop";
    case ChangeAction::kNone:
      return "none";
  }
  return "?";
}

std::string_view OutcomeName(AdditionOutcome outcome) {
  switch (outcome) {
    case AdditionOutcome::kAdded:
      return "added";
    case AdditionOutcome::kDuplicate:
      return "duplicate";
    case AdditionOutcome::kJustEvicted:
      return "just_evicted";
    case AdditionOutcome::kThin:
      return "thin";
    case AdditionOutcome::kCap:
      return "cap";
    case AdditionOutcome::kBudget:
      return "budget";
    case AdditionOutcome::kMemoryBytes:
      return "memory_bytes";
    case AdditionOutcome::kOutOfMemory:
      return "out_of_memory";
  }
  return "unknown";
}

}  // namespace gearbox
