// The configuration file (JSON): dimensions and their initial gears, the
// adaptive options (the seed's key names, verbatim) and an optional memory
// model for replays. Unknown keys are errors naming the key.
//
//   {
//     "dims": [
//       {"name": "BATCHSIZE", "gears": [1, 2, 4, 8], "splittable": true},
//       {"name": "SEQLEN", "policy": "TIMES", "min": 16, "max": 8192, "eager_fallback": true},
//       {"name": "DECODE", "gears": "VLLM"}
//     ],
//     "adaptive": {"window_seconds": 300, "pad_add_threshold": 0.35, ...},
//     "replan": {"compile_seconds": 2.0, ...},
//     "scheme": "joint", "combinations": [[8, 1024], [64, 4096]],
//     "memory_model": {"device_bytes": 8e10, "base_bytes": 6e10,
//                      "graph_fixed_bytes": 2e7, "graph_bytes_per_element": 4096},
//     "executor": {"out_of_memory_fallback": ["larger", "split", "exact"]}
//   }
//
// Gear lists: an explicit list, or a named ladder: "TIMES" (the seed's:
// min, powers of two above it, max), "POW2" (powers of two from the first
// >= min to the first >= max) or "VLLM" (vLLM's default CUDA-graph capture
// sizes: 1, 2, 4, 8..248 step 8, 256..512 step 16; min/max, if given, keep
// the part inside [min, max]).
#ifndef GEARBOX_CONFIG_H_
#define GEARBOX_CONFIG_H_

#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/gear_set.h"
#include "gearbox/options.h"
#include "gearbox/replan_policy.h"

namespace gearbox {

// Simulated device memory for replays: usage = (base_bytes + sum over
// compiled graphs of graph_fixed_bytes + graph_bytes_per_element * product
// of the graph's gear sizes) / device_bytes.
struct GEARBOX_EXPORT MemoryModel {
  double device_bytes = 0.0;
  double base_bytes = 0.0;
  double graph_fixed_bytes = 0.0;
  double graph_bytes_per_element = 0.0;

  double GraphBytes(std::span<const int64_t> gears) const;
};

struct RuntimeConfig {
  std::vector<DimensionSpec> dims;
  AdaptiveOptions adaptive;
  ReplanOptions replan;  // the "replan" section (used by the replan policy)
  // "scheme" (default "independent"), the initial "combinations" of a joint
  // or sparse gear set (empty: every cell of the gears) and "cover_ratio"
  // (joint; a number, or null: any) (gear_set.h).
  CombinationSpec combination_spec;
  std::optional<MemoryModel> memory_model;
  // The "executor" section (executed replays pass it to ExecutorOptions):
  // "out_of_memory_fallback", one name or a list of distinct names among
  // "larger", "split" and "exact" (ExecutorOptions::out_of_memory_fallback).
  struct Executor {
    std::vector<OutOfMemoryFallback> out_of_memory_fallback{
        std::begin(kDefaultOutOfMemoryFallbacks), std::end(kDefaultOutOfMemoryFallbacks)};
  };
  Executor executor;
};

// A named gear ladder (see above); `field` names the setting in errors.
GEARBOX_EXPORT absl::StatusOr<std::vector<int64_t>> MakeNamedGears(std::string_view name,
                                                                   std::optional<int64_t> min,
                                                                   std::optional<int64_t> max,
                                                                   std::string_view field);

// Parses and validates a configuration. Errors name the key path
// ("dims[1].max", "adaptive.window_secs") and, for syntax errors, the line.
GEARBOX_EXPORT absl::StatusOr<RuntimeConfig> ParseConfig(std::string_view json_text);
GEARBOX_EXPORT absl::StatusOr<RuntimeConfig> LoadConfigFile(const std::string& path);

// Every problem of a configuration in one pass (empty: ParseConfig accepts
// it). Each independent part is checked on its own: the top-level keys, each
// dims entry, scheme, combinations, cover_ratio, adaptive, replan,
// memory_model and executor; a check that needs other parts (the initial gear set from
// dims and combinations, max_gears_per_type against each entry's gears) runs
// only when those parsed. Problems come in the order ParseConfig checks, so
// the first is ParseConfig's error, message for message. A JSON syntax error
// or a key given twice is the one problem (nothing else can be read).
GEARBOX_EXPORT std::vector<absl::Status> ConfigProblems(std::string_view json_text);
// The same for a file; each problem starts with the path, as LoadConfigFile's.
GEARBOX_EXPORT std::vector<absl::Status> ConfigFileProblems(const std::string& path);

}  // namespace gearbox

#endif  // GEARBOX_CONFIG_H_
