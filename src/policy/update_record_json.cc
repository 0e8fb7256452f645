#include <cmath>
#include <iterator>
#include <string>

#include "gearbox/update_record.h"
#include "nlohmann/json.hpp"

namespace gearbox {
namespace {

using nlohmann::ordered_json;

// Six significant decimals keep the lines short and stable across runs.
double Round6(double v) {
  if (!std::isfinite(v)) return v;  // written as null
  return std::round(v * 1e6) / 1e6;
}

ordered_json PerDimension(const std::vector<std::string>& names,
                          const std::vector<std::vector<int64_t>>& lists, bool skip_empty) {
  ordered_json out = ordered_json::object();
  for (size_t d = 0; d < names.size() && d < lists.size(); ++d) {
    if (skip_empty && lists[d].empty()) continue;
    out[names[d]] = lists[d];
  }
  return out;
}

ordered_json GearsWithVerdict(const UpdateRecord& r, GearVerdict verdict) {
  ordered_json out = ordered_json::object();
  for (const GearRecord& g : r.gears) {
    if (g.verdict != verdict) continue;
    if (!out.contains(g.dimension)) out[g.dimension] = ordered_json::array();
    out[g.dimension].push_back(g.gear);
  }
  return out;
}

}  // namespace

std::string UpdateRecordToJson(const UpdateRecord& r) {
  ordered_json j;
  j["policy"] = UpdatePolicyName(r.policy);
  j["sequence"] = r.sequence;
  j["time"] = Round6(r.time);
  j["trigger"] = TriggerName(r.trigger);
  j["changed"] = r.changed;
  j["version"] = r.version_after;
  ordered_json mem;
  mem["usage"] = r.memory.usage ? ordered_json(Round6(*r.memory.usage)) : ordered_json(nullptr);
  mem["threshold"] =
      r.memory.threshold ? ordered_json(Round6(*r.memory.threshold)) : ordered_json(nullptr);
  mem["high"] = r.memory.high;
  if (!r.memory.error.empty()) mem["error"] = r.memory.error;
  if (r.memory.budget_bytes > 0) mem["budget_bytes"] = r.memory.budget_bytes;
  if (r.memory.bytes_in_use.has_value()) mem["bytes_in_use"] = *r.memory.bytes_in_use;
  j["memory"] = mem;
  j["addition_budget"] =
      r.addition_budget ? ordered_json(*r.addition_budget) : ordered_json(nullptr);
  j["removed"] = PerDimension(r.dimensions, r.removed, true);
  j["added"] = PerDimension(r.dimensions, r.added, true);
  j["kept_by_replace_loss"] = GearsWithVerdict(r, GearVerdict::kReplaceLoss);
  j["kept_by_hysteresis"] = GearsWithVerdict(r, GearVerdict::kWouldReadd);
  j["gears"] = PerDimension(r.dimensions, r.gears_after, false);
  j["cleanup_keys"] = r.cleanup_keys;
  j["graphs_released_idle"] = PerDimension(r.dimensions, r.graphs_released_idle, true);
  j["events_dropped"] = r.events_dropped;
  if (!r.out_of_memory.empty()) {
    ordered_json oom = ordered_json::array();
    for (const OutOfMemoryEvent& e : r.out_of_memory) {
      ordered_json x;
      ordered_json gears = ordered_json::object();
      for (size_t d = 0; d < e.gears.size() && d < r.dimensions.size(); ++d)
        gears[r.dimensions[d]] = e.gears[d];
      x["gears"] = std::move(gears);
      x["stage"] = e.stage == OutOfMemoryStage::kRun ? "run" : "compile";
      x["bytes"] = e.bytes ? ordered_json(*e.bytes) : ordered_json(nullptr);
      x["time"] = Round6(e.time);
      x["count"] = e.count;
      ordered_json served = ordered_json::object();
      for (size_t k = 0; k < std::size(e.served); ++k) {
        if (e.served[k] == 0) continue;
        served[std::string(OutOfMemoryFallbackName(static_cast<OutOfMemoryFallback>(k)))] =
            e.served[k];
      }
      x["served"] = std::move(served);
      oom.push_back(std::move(x));
    }
    j["out_of_memory"] = std::move(oom);
  }
  ordered_json gears = ordered_json::array();
  for (const GearRecord& g : r.gears) {
    ordered_json e;
    e["dim"] = g.dimension;
    e["gear"] = g.gear;
    e["hits"] = Round6(g.weighted_hits);
    e["hit_rate"] = Round6(g.hit_rate);
    e["pad"] = Round6(g.avg_pad_ratio);
    e["split"] = Round6(g.avg_split_ratio);
    e["score"] = Round6(g.score);
    e["samples"] = g.samples;
    e["pad_samples"] = g.pad_samples;
    e["split_samples"] = g.split_samples;
    e["median"] = g.median_raw;
    e["tier"] = g.tier;
    e["verdict"] = VerdictName(g.verdict);
    if (g.examined) {
      e["replace_loss"] = Round6(g.replace_loss);
      e["replacement"] = g.replacement_gear;
      e["readd_pad"] = Round6(g.readd_pad_ratio);
      if (g.readd_candidate != 0) e["readd_candidate"] = g.readd_candidate;
    }
    gears.push_back(std::move(e));
  }
  j["gear_stats"] = std::move(gears);
  ordered_json additions = ordered_json::array();
  for (const AdditionRecord& a : r.additions) {
    ordered_json e;
    e["dim"] = a.dimension;
    e["gear"] = a.gear;
    e["trigger"] = AdditionTriggerName(a.trigger);
    e["source"] = a.source_gear;
    e["ratio"] = Round6(a.ratio);
    e["pressure"] = Round6(a.pressure);
    e["samples"] = a.samples;
    e["share"] = a.share;
    e["outcome"] = OutcomeName(a.outcome);
    if (a.predicted_bytes.has_value()) e["predicted_bytes"] = *a.predicted_bytes;
    additions.push_back(std::move(e));
  }
  j["additions"] = std::move(additions);
  auto changes = [](const std::vector<ChangeRecord>& list) {
    ordered_json out = ordered_json::array();
    for (const ChangeRecord& c : list) {
      ordered_json e;
      e["dim"] = c.dimension;
      e["action"] = ChangeActionName(c.action);
      if (c.action == ChangeAction::kCompile || c.action == ChangeAction::kDrop) {
        e["combination"] = c.combination;
      } else {
        e["gear"] = c.gear;
      }
      if (c.action == ChangeAction::kReplace) e["replaced"] = c.replaced;
      e["gain_s"] = Round6(c.gain_seconds);
      e["compile_s"] = Round6(c.compile_seconds);
      e["net_s"] = Round6(c.net_seconds);
      e["reason"] = c.reason;
      out.push_back(std::move(e));
    }
    return out;
  };
  if (r.policy == UpdatePolicy::kReplan) {
    j["targets"] = PerDimension(r.dimensions, r.targets, false);
    ordered_json drift = ordered_json::object();
    for (size_t d = 0; d < r.drift.size() && d < r.dimensions.size(); ++d) {
      const UpdateRecord::Drift& x = r.drift[d];
      if (x.bins == 0) continue;
      drift[r.dimensions[d]] = {{"per_second", x.per_second},
                                {"agreement", Round6(x.agreement)},
                                {"bins", x.bins},
                                {"followed", x.followed}};
    }
    if (!drift.empty()) j["drift"] = std::move(drift);
    ordered_json regime = ordered_json::object();
    for (size_t d = 0; d < r.regime.size() && d < r.dimensions.size(); ++d) {
      const UpdateRecord::Regime& x = r.regime[d];
      if (x.seconds <= 0) continue;
      regime[r.dimensions[d]] = {{"seconds", Round6(x.seconds)},
                                 {"statistic", Round6(x.statistic)},
                                 {"critical", Round6(x.critical)}};
      if (!x.reviewed.empty()) regime[r.dimensions[d]]["reviewed"] = x.reviewed;
    }
    if (!regime.empty()) j["regime"] = std::move(regime);
    j["changes"] = changes(r.changes);
    j["declined"] = changes(r.declined);
  } else if (!r.declined.empty()) {
    j["declined"] = changes(r.declined);  // the adaptive policy's never-fitting gears
  }
  if (r.scheme != GearScheme::kIndependent) {
    j["scheme"] = GearSchemeName(r.scheme);
    j["combinations"] = r.combinations_after;
    j["combinations_added"] = r.combinations_added;
    j["combinations_removed"] = r.combinations_removed;
  }
  return j.dump();
}

}  // namespace gearbox
