// ValidateReplanOptions: every ReplanOptions field against what it allows.
#include <cmath>
#include <utility>

#include "gearbox/replan_policy.h"
#include "src/common/errors.h"

namespace gearbox {

absl::Status ValidateReplanOptions(const ReplanOptions& o) {
  if (auto s = ValidateCostModel(o.cost); !s.ok()) return internal::WithContext(s, "replan.cost");
  const std::pair<const char*, double> positive[] = {{"replan.payback_seconds", o.payback_seconds},
                                                     {"replan.min_gain_ratio", o.min_gain_ratio},
                                                     {"replan.tail_ratio", o.tail_ratio}};
  for (const auto& [name, v] : positive) {
    if (!(std::isfinite(v) && v > 0))
      return internal::InvalidFieldValue(name, v, "a finite number > 0");
  }
  if (o.min_gain_ratio < 1) {
    return internal::InvalidFieldValue("replan.min_gain_ratio", o.min_gain_ratio, "a ratio >= 1");
  }
  if (o.tail_ratio <= 1)
    return internal::InvalidFieldValue("replan.tail_ratio", o.tail_ratio, "a ratio > 1");
  const std::pair<const char*, double> nonnegative[] = {
      {"replan.gear_holding_seconds", o.gear_holding_seconds},
      {"replan.gain_confidence_sigmas", o.gain_confidence_sigmas},
      {"replan.min_gear_lifetime_seconds", o.min_gear_lifetime_seconds},
      {"replan.readd_cooldown_seconds", o.readd_cooldown_seconds},
      {"replan.min_window_weight", o.min_window_weight},
      {"replan.drift_lead_seconds", o.drift_lead_seconds},
      {"replan.regime_seconds", o.regime_seconds},
      {"replan.cold_start_review_seconds", o.cold_start_review_seconds},
      {"replan.idle_graph_release_seconds", o.idle_graph_release_seconds}};
  if (!(std::isfinite(o.uncompiled_slowdown) && o.uncompiled_slowdown >= 1)) {
    return internal::InvalidFieldValue("replan.uncompiled_slowdown", o.uncompiled_slowdown,
                                       "a ratio >= 1");
  }
  if (o.max_combinations < 1 || o.max_combinations > 4096) {
    return internal::InvalidFieldValue("replan.max_combinations", o.max_combinations,
                                       "an integer in [1, 4096]");
  }
  if (o.max_graphs < 1 || o.max_graphs > 65536) {
    return internal::InvalidFieldValue("replan.max_graphs", o.max_graphs,
                                       "an integer in [1, 65536]");
  }
  if (!(o.combination_interval_seconds == 0 || (std::isfinite(o.combination_interval_seconds) &&
                                                o.combination_interval_seconds >= 0.001))) {
    return internal::InvalidFieldValue(
        "replan.combination_interval_seconds", o.combination_interval_seconds,
        "0 (only at updates) or a finite number of seconds >= 0.001");
  }
  if (!(o.max_uncompiled_share >= 0 && o.max_uncompiled_share <= 1)) {
    return internal::InvalidFieldValue("replan.max_uncompiled_share", o.max_uncompiled_share,
                                       "a share in [0, 1] (1: compile only what pays)");
  }
  if (!(std::isfinite(o.warmup_check_seconds) && o.warmup_check_seconds > 0)) {
    return internal::InvalidFieldValue("replan.warmup_check_seconds", o.warmup_check_seconds,
                                       "a finite number of seconds > 0");
  }
  for (const auto& [name, v] : nonnegative) {
    if (!(std::isfinite(v) && v >= 0))
      return internal::InvalidFieldValue(name, v, "a finite number >= 0");
  }
  if (!(std::isfinite(o.update_interval_seconds) && o.update_interval_seconds >= 0)) {
    return internal::InvalidFieldValue("replan.update_interval_seconds", o.update_interval_seconds,
                                       "a finite number of seconds >= 0");
  }
  if (!(o.drift_agreement >= 0.5 && o.drift_agreement <= 1.0)) {
    return internal::InvalidFieldValue("replan.drift_agreement", o.drift_agreement,
                                       "a share in [0.5, 1] (0.5: any trend)");
  }
  if (o.drift_min_bins < 2 || o.drift_min_bins > kSizeDriftBins) {
    return internal::InvalidFieldValue(
        "replan.drift_min_bins", o.drift_min_bins,
        internal::Cat("an integer in [2, ", kSizeDriftBins, "] (the bins kept)"));
  }
  if (o.max_changes_per_update < 1 || o.max_changes_per_update > 1024) {
    return internal::InvalidFieldValue("replan.max_changes_per_update", o.max_changes_per_update,
                                       "an integer in [1, 1024]");
  }
  return absl::OkStatus();
}

}  // namespace gearbox
