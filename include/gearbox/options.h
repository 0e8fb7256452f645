// Options of the adaptive gear mechanism. Field names are the seed's
// configuration keys, verbatim, so a config written for the reference
// implementation reads the same here (see README "Config").
#ifndef GEARBOX_OPTIONS_H_
#define GEARBOX_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gearbox/export.h"

namespace gearbox {

// Which policy decides the updates: the runtime, the replay tool, the CLI
// (`--policy`) and update records ("policy") all use these names.
enum class UpdatePolicy {
  kStatic,    // never changes the gears ("static")
  kAdaptive,  // the seed's rules (policy.h; "adaptive")
  kReplan,    // re-plan from the window with the cost model (replan_policy.h; "replan")
};
// The default everywhere: on every real trace replayed it wastes a fraction
// of the seed policy's padding at a bounded compile rate (docs/POLICY.md).
inline constexpr UpdatePolicy kDefaultUpdatePolicy = UpdatePolicy::kReplan;
GEARBOX_EXPORT std::string_view UpdatePolicyName(UpdatePolicy policy);
// "static", "adaptive" or "replan"; `field` names the setting in errors.
GEARBOX_EXPORT absl::StatusOr<UpdatePolicy> ParseUpdatePolicy(std::string_view name,
                                                              std::string_view field = "policy");

// What a variant runs as when its gear's compile or run fails for memory
// (ExecutorOptions::out_of_memory_fallback, JSON config
// "executor.out_of_memory_fallback"; docs/MEMORY.md): the names in quotes.
enum class OutOfMemoryFallback {
  // "larger": on the smallest cached gear combination at or above the
  // variant's gears in every dimension (already compiled: no new memory),
  // padded. Impossible when none is cached.
  kLarger,
  // "split": on the first splittable dimension with a smaller cached gear
  // (the other dimensions' gears unchanged), as chunks of the largest such
  // gear and a remainder on the smallest cached one that holds it.
  // Impossible when no splittable dimension has one.
  kSplit,
  // "exact": on an executable compiled for the variant's exact sizes,
  // cached nowhere. Impossible when the variant is at its exact sizes.
  kExact,
};
// The default order: no new memory first, then smaller pieces, then a compile.
inline constexpr OutOfMemoryFallback kDefaultOutOfMemoryFallbacks[] = {
    OutOfMemoryFallback::kLarger, OutOfMemoryFallback::kSplit, OutOfMemoryFallback::kExact};
GEARBOX_EXPORT std::string_view OutOfMemoryFallbackName(OutOfMemoryFallback fallback);
// "larger", "split" or "exact"; `field` names the setting in errors.
GEARBOX_EXPORT absl::StatusOr<OutOfMemoryFallback> ParseOutOfMemoryFallback(
    std::string_view name, std::string_view field = "out_of_memory_fallback");
// An order of fallbacks is valid when it names each kind at most once (it
// may be empty: no fallback, the request fails with the memory error).
GEARBOX_EXPORT absl::Status ValidateOutOfMemoryFallbacks(
    std::span<const OutOfMemoryFallback> order, std::string_view field = "out_of_memory_fallback");

struct AdaptiveOptions {
  // --- window statistics ---
  // Length of the statistics window, seconds.
  double window_seconds = 300.0;
  // Half-life of the event decay weight exp(-ln2 * age / half_life), seconds.
  double half_life_seconds = 150.0;
  // Time slots the window is kept in; the window edge is resolved to
  // window_seconds / window_slots (10 s by default). Memory per gear grows
  // with this, never with the request rate.
  int window_slots = 30;

  // --- scoring: score = weight_hit * H - weight_pad * P - weight_split * SP ---
  double weight_hit = 0.60;
  double weight_pad = 0.20;
  double weight_split = 0.20;

  // --- additions ---
  // A gear whose weighted average pad ratio reaches this proposes a new gear
  // at the median of its raw sizes.
  double pad_add_threshold = 0.35;
  // The largest gear whose weighted average split ratio reaches this
  // proposes a new gear at the median of its raw sizes (usually a new max).
  double split_add_threshold = 0.20;
  // Padded (or split) samples a gear needs in the window before it may
  // propose an addition.
  int64_t add_min_samples = 5;
  // Samples a gear needs in the window to count as in use. Gears below it
  // are evicted before any gear at or above it (zero-use gears first of
  // all), whatever their scores; 0 leaves only the zero-use tier.
  int64_t min_samples_per_gear = 5;
  // Gears per dimension: never evict below the minimum, never add above the
  // maximum (at most kMaxGearsPerDimension).
  int min_gear_count_per_type = 1;
  int max_gears_per_type = 64;

  // --- eviction ---
  // A gear created, hit, or protected within this many seconds is not evicted.
  double recent_use_protect_seconds = 300.0;
  // A gear whose samples would lose more than this (mean pad or split ratio
  // on the gear they would move to) is kept and its protection extended.
  double replace_loss_threshold = 0.60;
  // Hysteresis: a gear is evicted only if the gear receiving its samples
  // would then stay at least this far below pad_add_threshold, so the
  // addition rule cannot undo the eviction on unchanged evidence.
  double hysteresis_margin = 0.05;
  // Evidence guard on additions (not in the seed; off by default): with
  // k > 0, a proposed gear must serve n samples of the window with
  // n - k * sqrt(n) >= max(min_samples_per_gear, 1) (k = 3: n >= 18 by
  // default, 11 when min_samples_per_gear <= 1), otherwise its outcome is
  // "thin". 0 adds what the seed adds.
  double addition_confidence_sigmas = 0.0;

  // --- memory and schedule ---
  // Fraction of device memory in use at which an update runs at once and
  // additions are limited to the number of evictions. nullopt disables
  // memory-pressure handling.
  std::optional<double> device_memory_usage_threshold_ratio = 0.90;
  // Budget for the gears' memory, bytes (not in the seed; 0 = none). When
  // set and the runtime has a gear-bytes predictor (MemoryState), an
  // addition whose predicted bytes would take the gears' memory past it is
  // not made (removals of the same update free their bytes first), decided
  // before the compile (docs/MEMORY.md, "The budget in the policies").
  int64_t memory_budget_bytes = 0;
  // After a compile of a gear ran out of memory (reported to the runtime),
  // the policies do not add that gear again for this many seconds (not in
  // the seed; the update that sees the failure runs under memory pressure).
  double out_of_memory_cooldown_seconds = 600.0;
  // The worker wakes this often, seconds.
  double check_interval_seconds = 60.0;
  // ...and runs an update when this many seconds have passed since the last
  // one (or memory usage is at or above the threshold).
  double update_interval_seconds = 300.0;
};

// OK, or InvalidArgument naming the field, its value and what is allowed.
GEARBOX_EXPORT absl::Status ValidateAdaptiveOptions(const AdaptiveOptions& options);

}  // namespace gearbox

#endif  // GEARBOX_OPTIONS_H_
