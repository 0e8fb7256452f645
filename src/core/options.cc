#include "gearbox/options.h"

#include <cmath>

#include "gearbox/gear_set.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::InvalidFieldValue;

absl::Status CheckRange(const char* field, double value, double lo, bool lo_open, double hi,
                        bool hi_open, const char* allowed) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                  (hi_open ? value < hi : value <= hi);
  return ok ? absl::OkStatus() : InvalidFieldValue(field, value, allowed);
}

}  // namespace

absl::Status ValidateAdaptiveOptions(const AdaptiveOptions& o) {
  constexpr double kInf = INFINITY;
  const absl::Status checks[] = {
      CheckRange("window_seconds", o.window_seconds, 0, true, kInf, true,
                 "a finite number of seconds > 0"),
      CheckRange("half_life_seconds", o.half_life_seconds, 0, true, kInf, true,
                 "a finite number of seconds > 0"),
      CheckRange("weight_hit", o.weight_hit, 0, false, kInf, true, "a finite weight >= 0"),
      CheckRange("weight_pad", o.weight_pad, 0, false, kInf, true, "a finite weight >= 0"),
      CheckRange("weight_split", o.weight_split, 0, false, kInf, true, "a finite weight >= 0"),
      CheckRange("pad_add_threshold", o.pad_add_threshold, 0, true, 1, false, "a ratio in (0, 1]"),
      CheckRange("split_add_threshold", o.split_add_threshold, 0, true, 1, false,
                 "a ratio in (0, 1]"),
      CheckRange("recent_use_protect_seconds", o.recent_use_protect_seconds, 0, false, kInf, true,
                 "a finite number of seconds >= 0"),
      CheckRange("replace_loss_threshold", o.replace_loss_threshold, 0, false, kInf, true,
                 "a finite ratio >= 0 (above 1 disables the filter)"),
      CheckRange("hysteresis_margin", o.hysteresis_margin, 0, false, o.pad_add_threshold, true,
                 "a ratio >= 0 and below pad_add_threshold"),
      CheckRange("addition_confidence_sigmas", o.addition_confidence_sigmas, 0, false, kInf, true,
                 "a finite number of standard deviations >= 0 (0 disables the guard)"),
      CheckRange("check_interval_seconds", o.check_interval_seconds, 0, true, kInf, true,
                 "a finite number of seconds > 0"),
      CheckRange("update_interval_seconds", o.update_interval_seconds, 0, false, kInf, true,
                 "a finite number of seconds >= 0"),
  };
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  if (o.window_slots < 1 || o.window_slots > 3600) {
    return InvalidFieldValue("window_slots", o.window_slots, "an integer in [1, 3600]");
  }
  if (o.add_min_samples < 1) {
    return InvalidFieldValue("add_min_samples", o.add_min_samples, "an integer >= 1");
  }
  if (o.min_samples_per_gear < 0) {
    return InvalidFieldValue("min_samples_per_gear", o.min_samples_per_gear, "an integer >= 0");
  }
  if (o.max_gears_per_type < 1 || o.max_gears_per_type > kMaxGearsPerDimension) {
    return InvalidFieldValue("max_gears_per_type", o.max_gears_per_type,
                             internal::Cat("an integer in [1, ", kMaxGearsPerDimension, "]"));
  }
  if (o.min_gear_count_per_type < 1 || o.min_gear_count_per_type > o.max_gears_per_type) {
    return InvalidFieldValue(
        "min_gear_count_per_type", o.min_gear_count_per_type,
        internal::Cat("an integer in [1, max_gears_per_type = ", o.max_gears_per_type, "]"));
  }
  if (o.device_memory_usage_threshold_ratio.has_value()) {
    const double r = *o.device_memory_usage_threshold_ratio;
    if (!(std::isfinite(r) && r > 0 && r <= 1)) {
      return InvalidFieldValue("device_memory_usage_threshold_ratio", r,
                               "a ratio in (0, 1], or null to disable memory handling");
    }
  }
  if (o.memory_budget_bytes < 0) {
    return InvalidFieldValue("memory_budget_bytes", o.memory_budget_bytes,
                             "an integer number of bytes >= 0 (0: no budget)");
  }
  if (!(std::isfinite(o.out_of_memory_cooldown_seconds) && o.out_of_memory_cooldown_seconds >= 0)) {
    return InvalidFieldValue("out_of_memory_cooldown_seconds", o.out_of_memory_cooldown_seconds,
                             "a finite number of seconds >= 0");
  }
  return absl::OkStatus();
}

std::string_view UpdatePolicyName(UpdatePolicy policy) {
  switch (policy) {
    case UpdatePolicy::kStatic:
      return "static";
    case UpdatePolicy::kAdaptive:
      return "adaptive";
    case UpdatePolicy::kReplan:
      return "replan";
  }
  return "?";
}

absl::StatusOr<UpdatePolicy> ParseUpdatePolicy(std::string_view name, std::string_view field) {
  for (UpdatePolicy p : {UpdatePolicy::kStatic, UpdatePolicy::kAdaptive, UpdatePolicy::kReplan}) {
    if (name == UpdatePolicyName(p)) return p;
  }
  return internal::InvalidField(field, internal::Cat("\"", name, "\""),
                                "\"static\", \"adaptive\" or \"replan\"");
}

std::string_view OutOfMemoryFallbackName(OutOfMemoryFallback fallback) {
  switch (fallback) {
    case OutOfMemoryFallback::kLarger:
      return "larger";
    case OutOfMemoryFallback::kSplit:
      return "split";
    case OutOfMemoryFallback::kExact:
      return "exact";
  }
  return "?";
}

absl::StatusOr<OutOfMemoryFallback> ParseOutOfMemoryFallback(std::string_view name,
                                                             std::string_view field) {
  for (OutOfMemoryFallback f :
       {OutOfMemoryFallback::kLarger, OutOfMemoryFallback::kSplit, OutOfMemoryFallback::kExact}) {
    if (name == OutOfMemoryFallbackName(f)) return f;
  }
  return internal::InvalidField(field, internal::Cat("\"", name, "\""),
                                "\"larger\", \"split\" or \"exact\"");
}

absl::Status ValidateOutOfMemoryFallbacks(std::span<const OutOfMemoryFallback> order,
                                          std::string_view field) {
  for (size_t i = 0; i < order.size(); ++i) {
    const auto kind = static_cast<int>(order[i]);
    if (kind < 0 || kind > static_cast<int>(OutOfMemoryFallback::kExact)) {
      return internal::InvalidField(internal::Cat(field, "[", i, "]"), internal::Cat(kind),
                                    "\"larger\", \"split\" or \"exact\"");
    }
    for (size_t j = 0; j < i; ++j) {
      if (order[j] == order[i]) {
        return internal::InvalidField(internal::Cat(field, "[", i, "]"),
                                      internal::Cat("\"", OutOfMemoryFallbackName(order[i]), "\""),
                                      "each of \"larger\", \"split\" and \"exact\" at most once");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gearbox
