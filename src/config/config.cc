#include "gearbox/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "nlohmann/json.hpp"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;
using internal::InvalidField;
using nlohmann::json;

std::string Shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// One problem per key of `object` outside `allowed`, in the object's order.
std::vector<absl::Status> UnknownKeys(const json& object, std::string_view path,
                                      const std::set<std::string>& allowed) {
  std::vector<absl::Status> problems;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      problems.push_back(InvalidField(Cat(path, path.empty() ? "" : ".", it.key()), "this key",
                                      Cat("unknown key; allowed here: ", list)));
    }
  }
  return problems;
}

absl::Status CheckKeys(const json& object, std::string_view path,
                       const std::set<std::string>& allowed) {
  const std::vector<absl::Status> problems = UnknownKeys(object, path, allowed);
  return problems.empty() ? absl::OkStatus() : problems.front();
}

absl::StatusOr<int64_t> GetInt(const json& v, const std::string& field) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidField(field, Shown(v), "an integer below 2^63");
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  return InvalidField(field, Shown(v), "an integer");
}

absl::StatusOr<double> GetNumber(const json& v, const std::string& field) {
  if (v.is_number()) return v.get<double>();
  return InvalidField(field, Shown(v), "a number");
}

absl::StatusOr<bool> GetBool(const json& v, const std::string& field) {
  if (v.is_boolean()) return v.get<bool>();
  return InvalidField(field, Shown(v), "true or false");
}

absl::StatusOr<std::vector<int64_t>> GetIntList(const json& v, const std::string& field) {
  if (!v.is_array()) return InvalidField(field, Shown(v), "a list of integers or a ladder name");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    auto x = GetInt(v[i], Cat(field, "[", i, "]"));
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<DimensionSpec> ParseDimension(const json& d, size_t index) {
  const std::string path = Cat("dims[", index, "]");
  if (!d.is_object()) return InvalidField(path, Shown(d), "an object");
  if (auto s = CheckKeys(d, path,
                         {"name", "gears", "policy", "min", "max", "splittable", "eager_fallback"});
      !s.ok()) {
    return s;
  }
  DimensionSpec spec;
  if (!d.contains("name") || !d["name"].is_string()) {
    return InvalidField(Cat(path, ".name"), d.contains("name") ? Shown(d["name"]) : "missing",
                        "a string naming the dimension");
  }
  spec.name = d["name"].get<std::string>();
  std::optional<int64_t> min, max;
  if (d.contains("min")) {
    auto v = GetInt(d["min"], Cat(path, ".min"));
    if (!v.ok()) return v.status();
    min = *v;
  }
  if (d.contains("max")) {
    auto v = GetInt(d["max"], Cat(path, ".max"));
    if (!v.ok()) return v.status();
    max = *v;
  }
  const bool has_gears = d.contains("gears");
  const bool has_policy = d.contains("policy");
  if (has_gears == has_policy) {
    return InvalidField(path, has_gears ? "both gears and policy" : "neither gears nor policy",
                        "exactly one of \"gears\" (a list or a ladder name) and \"policy\"");
  }
  if (has_gears && d["gears"].is_array()) {
    if (min || max) {
      return InvalidField(Cat(path, ".min"), "with an explicit gear list",
                          "min/max go with a named ladder only");
    }
    auto list = GetIntList(d["gears"], Cat(path, ".gears"));
    if (!list.ok()) return list.status();
    auto gears = NormalizeGears(*std::move(list), Cat(path, ".gears"));
    if (!gears.ok()) return gears.status();
    spec.gears = *std::move(gears);
  } else {
    const json& name = has_gears ? d["gears"] : d["policy"];
    const std::string field = Cat(path, has_gears ? ".gears" : ".policy");
    if (!name.is_string())
      return InvalidField(field, Shown(name), "\"TIMES\", \"POW2\" or \"VLLM\"");
    const std::string ladder = name.get<std::string>();
    if (has_gears && ladder != "TIMES" && ladder != "POW2" && ladder != "VLLM") {
      return InvalidField(field, Shown(name),
                          "a JSON list of integers (e.g. [16, 32]) or a ladder name: \"TIMES\", "
                          "\"POW2\", \"VLLM\"");
    }
    auto gears = MakeNamedGears(name.get<std::string>(), min, max, path);
    if (!gears.ok()) return gears.status();
    spec.gears = *std::move(gears);
  }
  spec.splittable = DefaultSplittable(spec.name);
  if (d.contains("splittable")) {
    auto v = GetBool(d["splittable"], Cat(path, ".splittable"));
    if (!v.ok()) return v.status();
    spec.splittable = *v;
  }
  if (d.contains("eager_fallback")) {
    auto v = GetBool(d["eager_fallback"], Cat(path, ".eager_fallback"));
    if (!v.ok()) return v.status();
    spec.eager_fallback = *v;
  }
  return spec;
}

// Worker intervals: a shorter one is a typo (ms for s) and would make every
// replay's schedule millions of checks long.
constexpr double kMinIntervalSeconds = 0.001;
absl::Status CheckMinimumSeconds(std::string_view field, double seconds) {
  if (std::isfinite(seconds) && seconds < kMinIntervalSeconds) {
    return internal::InvalidFieldValue(field, seconds, Cat("seconds >= ", kMinIntervalSeconds));
  }
  return absl::OkStatus();
}

absl::Status ParseAdaptive(const json& a, AdaptiveOptions* o) {
  if (!a.is_object()) return InvalidField("adaptive", Shown(a), "an object");
  struct NumberKey {
    const char* key;
    double* field;
  };
  struct IntKey {
    const char* key;
    int64_t* field;
  };
  const NumberKey numbers[] = {
      {"window_seconds", &o->window_seconds},
      {"half_life_seconds", &o->half_life_seconds},
      {"weight_hit", &o->weight_hit},
      {"weight_pad", &o->weight_pad},
      {"weight_split", &o->weight_split},
      {"pad_add_threshold", &o->pad_add_threshold},
      {"split_add_threshold", &o->split_add_threshold},
      {"recent_use_protect_seconds", &o->recent_use_protect_seconds},
      {"replace_loss_threshold", &o->replace_loss_threshold},
      {"hysteresis_margin", &o->hysteresis_margin},
      {"addition_confidence_sigmas", &o->addition_confidence_sigmas},
      {"out_of_memory_cooldown_seconds", &o->out_of_memory_cooldown_seconds},
      {"check_interval_seconds", &o->check_interval_seconds},
      {"update_interval_seconds", &o->update_interval_seconds},
  };
  int64_t window_slots = o->window_slots;
  int64_t min_count = o->min_gear_count_per_type;
  int64_t max_count = o->max_gears_per_type;
  const IntKey ints[] = {
      {"add_min_samples", &o->add_min_samples}, {"min_samples_per_gear", &o->min_samples_per_gear},
      {"window_slots", &window_slots},          {"min_gear_count_per_type", &min_count},
      {"max_gears_per_type", &max_count},       {"memory_budget_bytes", &o->memory_budget_bytes},
  };
  std::set<std::string> allowed = {"device_memory_usage_threshold_ratio"};
  for (const auto& k : numbers) allowed.insert(k.key);
  for (const auto& k : ints) allowed.insert(k.key);
  if (auto s = CheckKeys(a, "adaptive", allowed); !s.ok()) return s;
  for (const auto& k : numbers) {
    if (!a.contains(k.key)) continue;
    auto v = GetNumber(a[k.key], Cat("adaptive.", k.key));
    if (!v.ok()) return v.status();
    *k.field = *v;
  }
  for (const auto& k : ints) {
    if (!a.contains(k.key)) continue;
    auto v = GetInt(a[k.key], Cat("adaptive.", k.key));
    if (!v.ok()) return v.status();
    *k.field = *v;
  }
  auto narrow = [](int64_t v, int* out, const char* key) -> absl::Status {
    if (v < INT32_MIN || v > INT32_MAX) {
      return internal::InvalidFieldValue(Cat("adaptive.", key), v, "a small integer");
    }
    *out = static_cast<int>(v);
    return absl::OkStatus();
  };
  if (auto s = narrow(window_slots, &o->window_slots, "window_slots"); !s.ok()) return s;
  if (auto s = narrow(min_count, &o->min_gear_count_per_type, "min_gear_count_per_type"); !s.ok()) {
    return s;
  }
  if (auto s = narrow(max_count, &o->max_gears_per_type, "max_gears_per_type"); !s.ok()) return s;
  if (a.contains("device_memory_usage_threshold_ratio")) {
    const json& v = a["device_memory_usage_threshold_ratio"];
    if (v.is_null()) {
      o->device_memory_usage_threshold_ratio.reset();
    } else {
      auto r = GetNumber(v, "adaptive.device_memory_usage_threshold_ratio");
      if (!r.ok()) return r.status();
      o->device_memory_usage_threshold_ratio = *r;
    }
  }
  if (auto s = CheckMinimumSeconds("adaptive.check_interval_seconds", o->check_interval_seconds);
      !s.ok()) {
    return s;
  }
  return internal::WithContext(ValidateAdaptiveOptions(*o), "adaptive");
}

absl::Status ParseReplan(const json& r, ReplanOptions* o) {
  if (!r.is_object()) return InvalidField("replan", Shown(r), "an object");
  struct NumberKey {
    const char* key;
    double* field;
  };
  const NumberKey numbers[] = {
      {"compile_seconds", &o->cost.compile_seconds},
      {"seconds_per_unit", &o->cost.seconds_per_unit},
      {"seconds_per_run", &o->cost.seconds_per_run},
      {"runtime_exponent", &o->cost.runtime_exponent},
      {"memory_fixed_bytes", &o->cost.memory_fixed_bytes},
      {"memory_bytes_per_unit", &o->cost.memory_bytes_per_unit},
      {"memory_exponent", &o->cost.memory_exponent},
      {"alpha", &o->cost.alpha},
      {"beta", &o->cost.beta},
      {"gamma", &o->cost.gamma},
      {"payback_seconds", &o->payback_seconds},
      {"min_gain_ratio", &o->min_gain_ratio},
      {"gear_holding_seconds", &o->gear_holding_seconds},
      {"gain_confidence_sigmas", &o->gain_confidence_sigmas},
      {"min_gear_lifetime_seconds", &o->min_gear_lifetime_seconds},
      {"drift_lead_seconds", &o->drift_lead_seconds},
      {"drift_agreement", &o->drift_agreement},
      {"regime_seconds", &o->regime_seconds},
      {"cold_start_review_seconds", &o->cold_start_review_seconds},
      {"readd_cooldown_seconds", &o->readd_cooldown_seconds},
      {"tail_ratio", &o->tail_ratio},
      {"min_window_weight", &o->min_window_weight},
      {"update_interval_seconds", &o->update_interval_seconds},
      {"warmup_check_seconds", &o->warmup_check_seconds},
      {"combination_interval_seconds", &o->combination_interval_seconds},
      {"uncompiled_slowdown", &o->uncompiled_slowdown},
      {"max_uncompiled_share", &o->max_uncompiled_share},
      {"idle_graph_release_seconds", &o->idle_graph_release_seconds},
  };
  struct IntKey {
    const char* key;
    int* field;
    int64_t max;
  };
  const IntKey integers[] = {{"max_changes_per_update", &o->max_changes_per_update, 1024},
                             {"drift_min_bins", &o->drift_min_bins, 1024},
                             {"max_combinations", &o->max_combinations, 4096},
                             {"max_graphs", &o->max_graphs, 65536}};
  std::set<std::string> allowed;
  for (const auto& k : numbers) allowed.insert(k.key);
  for (const auto& k : integers) allowed.insert(k.key);
  if (auto s = CheckKeys(r, "replan", allowed); !s.ok()) return s;
  for (const auto& k : numbers) {
    if (!r.contains(k.key)) continue;
    auto v = GetNumber(r[k.key], Cat("replan.", k.key));
    if (!v.ok()) return v.status();
    *k.field = *v;
  }
  for (const auto& k : integers) {
    if (!r.contains(k.key)) continue;
    const std::string field = Cat("replan.", k.key);
    auto v = GetInt(r[k.key], field);
    if (!v.ok()) return v.status();
    if (*v < 1 || *v > k.max)
      return internal::InvalidFieldValue(field, *v, Cat("an integer in [1, ", k.max, "]"));
    *k.field = static_cast<int>(*v);
  }
  if (auto s = CheckMinimumSeconds("replan.warmup_check_seconds", o->warmup_check_seconds); !s.ok())
    return s;
  return ValidateReplanOptions(*o);
}

absl::Status ParseExecutor(const json& e, RuntimeConfig::Executor* o) {
  if (!e.is_object()) return InvalidField("executor", Shown(e), "an object");
  if (auto s = CheckKeys(e, "executor", {"out_of_memory_fallback"}); !s.ok()) return s;
  if (!e.contains("out_of_memory_fallback")) return absl::OkStatus();
  const std::string field = "executor.out_of_memory_fallback";
  const json& f = e["out_of_memory_fallback"];
  const json list = f.is_array() ? f : json::array({f});
  constexpr const char* kAllowed =
      "\"larger\", \"split\" or \"exact\", or a list of them, each at most once";
  std::vector<OutOfMemoryFallback> order;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = f.is_array() ? Cat(field, "[", i, "]") : field;
    if (!list[i].is_string()) return InvalidField(at, Shown(list[i]), kAllowed);
    auto kind = ParseOutOfMemoryFallback(list[i].get<std::string>(), at);
    if (!kind.ok()) return kind.status();
    order.push_back(*kind);
  }
  if (auto s = ValidateOutOfMemoryFallbacks(order, field); !s.ok()) return s;
  o->out_of_memory_fallback = std::move(order);
  return absl::OkStatus();
}

absl::StatusOr<MemoryModel> ParseMemoryModel(const json& m) {
  if (!m.is_object()) return InvalidField("memory_model", Shown(m), "an object");
  if (auto s =
          CheckKeys(m, "memory_model",
                    {"device_bytes", "base_bytes", "graph_fixed_bytes", "graph_bytes_per_element"});
      !s.ok()) {
    return s;
  }
  MemoryModel model;
  struct Key {
    const char* key;
    double* field;
    bool required;
  };
  const Key keys[] = {{"device_bytes", &model.device_bytes, true},
                      {"base_bytes", &model.base_bytes, false},
                      {"graph_fixed_bytes", &model.graph_fixed_bytes, false},
                      {"graph_bytes_per_element", &model.graph_bytes_per_element, false}};
  for (const Key& k : keys) {
    const std::string field = Cat("memory_model.", k.key);
    if (!m.contains(k.key)) {
      if (k.required) return InvalidField(field, "missing", "a number of bytes > 0");
      continue;
    }
    auto v = GetNumber(m[k.key], field);
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v) || *v < 0 || (k.required && *v <= 0)) {
      return internal::InvalidFieldValue(field, *v,
                                         k.required ? "a number of bytes > 0" : "bytes >= 0");
    }
    *k.field = *v;
  }
  if (model.base_bytes > model.device_bytes) {
    return internal::InvalidFieldValue("memory_model.base_bytes", model.base_bytes,
                                       Cat("at most device_bytes (", model.device_bytes, ")"));
  }
  return model;
}

// The document as JSON: syntax errors (with their line) and keys given twice
// in one object are problems of the whole text.
absl::StatusOr<json> ParseJson(std::string_view json_text) {
  try {
    // Keys seen per open object: a key given twice is an error, not "last wins".
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    const json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) open_objects.emplace_back();
      if (event == json::parse_event_t::object_end && !open_objects.empty())
        open_objects.pop_back();
      if (event == json::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
          !open_objects.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    };
    json root = json::parse(json_text.begin(), json_text.end(), on_event);
    if (!duplicate.empty()) {
      return InvalidField(Cat("config key \"", duplicate, "\""), "given twice",
                          "each key once per object");
    }
    return root;
  } catch (const json::parse_error& e) {
    // Line of the byte where parsing stopped.
    const size_t at = std::min(e.byte, json_text.size());
    const size_t line =
        1 + static_cast<size_t>(std::count(
                json_text.begin(), json_text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    return absl::InvalidArgumentError(
        Cat("config line ", line, ": not valid JSON (", e.what(), ")"));
  } catch (const json::exception& e) {  // e.g. a number too large to represent
    return absl::InvalidArgumentError(Cat("config: not valid JSON (", e.what(), ")"));
  }
}

using Problems = std::vector<absl::Status>;

// Adds `s` to `problems` when it is an error; true when it is not.
bool Note(const absl::Status& s, Problems* problems) {
  if (!s.ok()) problems->push_back(s);
  return s.ok();
}

// Each dims entry on its own: one slot per entry, empty where it failed.
std::vector<std::optional<DimensionSpec>> CollectDims(const json& root, Problems* problems) {
  if (!root.contains("dims") || !root["dims"].is_array() || root["dims"].empty()) {
    problems->push_back(InvalidField("dims",
                                     root.contains("dims") ? Shown(root["dims"]) : "missing",
                                     "a non-empty list of dimensions"));
    return {};
  }
  std::vector<std::optional<DimensionSpec>> dims;
  for (size_t i = 0; i < root["dims"].size(); ++i) {
    auto dim = ParseDimension(root["dims"][i], i);
    dims.push_back(Note(dim.status(), problems) ? std::optional(*std::move(dim)) : std::nullopt);
  }
  return dims;
}

absl::Status ParseScheme(const json& scheme, CombinationSpec* spec) {
  if (!scheme.is_string()) {
    return InvalidField("scheme", Shown(scheme), "\"independent\", \"joint\" or \"sparse\"");
  }
  auto parsed = ParseGearScheme(scheme.get<std::string>(), "scheme");
  if (!parsed.ok()) return parsed.status();
  spec->scheme = *parsed;
  return absl::OkStatus();
}

absl::Status ParseCombinations(const json& list, CombinationSpec* spec) {
  if (!list.is_array())
    return InvalidField("combinations", Shown(list), "a list of [gear, gear] pairs");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Cat("combinations[", i, "]");
    if (!list[i].is_array() || list[i].size() != kJointDimensions) {
      return InvalidField(field, Shown(list[i]), "a [gear, gear] pair (one gear per dimension)");
    }
    GearCombination c{};
    for (int d = 0; d < kJointDimensions; ++d) {
      auto v = GetInt(list[i][static_cast<size_t>(d)], Cat(field, "[", d, "]"));
      if (!v.ok()) return v.status();
      c[static_cast<size_t>(d)] = *v;
    }
    spec->combinations.push_back(c);
  }
  return absl::OkStatus();
}

absl::Status ParseCoverRatio(const json& ratio, CombinationSpec* spec) {
  if (ratio.is_null()) {
    spec->cover_ratio = std::numeric_limits<double>::infinity();
    return absl::OkStatus();
  }
  auto v = GetNumber(ratio, "cover_ratio");
  if (!v.ok()) return v.status();
  spec->cover_ratio = *v;
  return absl::OkStatus();
}

// "scheme", "combinations" and "cover_ratio", each on its own; true when all parsed.
bool CollectCombinationSpec(const json& root, CombinationSpec* spec, Problems* problems) {
  bool ok = true;
  if (root.contains("scheme")) ok = Note(ParseScheme(root["scheme"], spec), problems) && ok;
  if (root.contains("combinations")) {
    ok = Note(ParseCombinations(root["combinations"], spec), problems) && ok;
  }
  if (root.contains("cover_ratio")) {
    ok = Note(ParseCoverRatio(root["cover_ratio"], spec), problems) && ok;
  }
  return ok;
}

// Each parsed dims entry within adaptive.max_gears_per_type.
void CheckGearsPerType(const std::vector<std::optional<DimensionSpec>>& dims,
                       const AdaptiveOptions& adaptive, Problems* problems) {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] && static_cast<int>(dims[d]->gears.size()) > adaptive.max_gears_per_type) {
      problems->push_back(
          InvalidField(Cat("dims[", d, "].gears"), Cat(dims[d]->gears.size(), " gears"),
                       Cat("at most adaptive.max_gears_per_type = ", adaptive.max_gears_per_type)));
    }
  }
}

// A parsed config and every problem found, in the order ParseConfig checks:
// top-level keys, dims entries, scheme, combinations, cover_ratio, the
// initial gear set, adaptive, gears per type, replan, memory_model, executor. A check
// that needs other parts runs only when they parsed.
struct Collected {
  RuntimeConfig config;
  Problems problems;
};

Collected CollectObject(const json& root) {
  Collected out;
  RuntimeConfig& config = out.config;
  Problems* problems = &out.problems;
  *problems = UnknownKeys(root, "",
                          {"dims", "adaptive", "replan", "memory_model", "scheme", "combinations",
                           "cover_ratio", "executor"});
  const auto dims = CollectDims(root, problems);
  const bool dims_ok = !dims.empty() && std::all_of(dims.begin(), dims.end(),
                                                    [](const auto& d) { return d.has_value(); });
  if (dims_ok) {
    for (const auto& d : dims) config.dims.push_back(*d);
  }
  if (CollectCombinationSpec(root, &config.combination_spec, problems) && dims_ok) {
    Note(GearSet::Create(config.dims, 1, 0.0,
                         InitialCombinations(config.dims, config.combination_spec))
             .status(),
         problems);
  }
  if (!root.contains("adaptive") ||
      Note(ParseAdaptive(root["adaptive"], &config.adaptive), problems)) {
    CheckGearsPerType(dims, config.adaptive, problems);
  }
  if (root.contains("replan")) Note(ParseReplan(root["replan"], &config.replan), problems);
  if (root.contains("memory_model")) {
    auto model = ParseMemoryModel(root["memory_model"]);
    if (Note(model.status(), problems)) config.memory_model = *model;
  }
  if (root.contains("executor")) Note(ParseExecutor(root["executor"], &config.executor), problems);
  return out;
}

Collected Collect(std::string_view json_text) {
  auto root = ParseJson(json_text);
  if (!root.ok()) return {.config = {}, .problems = {root.status()}};
  if (!root->is_object()) {
    return {.config = {}, .problems = {InvalidField("config", Shown(*root), "a JSON object")}};
  }
  return CollectObject(*root);
}

// The text of a config file; only regular files (a device or pipe such as
// /dev/zero could be endless).
absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        Cat(path, ": not a regular file (a directory, device or pipe); name a config file"));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open the config file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

double MemoryModel::GraphBytes(std::span<const int64_t> gears) const {
  double elements = 1.0;
  for (int64_t g : gears) elements *= static_cast<double>(g);
  return graph_fixed_bytes + graph_bytes_per_element * elements;
}

absl::StatusOr<std::vector<int64_t>> MakeNamedGears(std::string_view name,
                                                    std::optional<int64_t> min,
                                                    std::optional<int64_t> max,
                                                    std::string_view field) {
  if (name == "TIMES" || name == "POW2") {
    if (!min || !max) {
      return InvalidField(Cat(field, min ? ".max" : ".min"), "missing",
                          Cat("the ", name, " ladder needs min and max"));
    }
    if (name == "TIMES") return MakeTimesGears(*min, *max, field);
    if (*min < 1) return internal::InvalidFieldValue(Cat(field, ".min"), *min, "an integer >= 1");
    if (*max < *min) {
      return internal::InvalidFieldValue(Cat(field, ".max"), *max, Cat("max >= min (", *min, ")"));
    }
    if (*max > (int64_t{1} << 62)) {
      return internal::InvalidFieldValue(Cat(field, ".max"), *max, "at most 2^62");
    }
    std::vector<int64_t> gears;
    int64_t p = 1;
    while (p < *min) p <<= 1;
    gears.push_back(p);
    while (gears.back() < *max) gears.push_back(gears.back() << 1);
    return NormalizeGears(std::move(gears), Cat(field, ".gears"));
  }
  if (name == "VLLM") {
    if (min && max && *max < *min) {
      return internal::InvalidFieldValue(Cat(field, ".max"), *max, Cat("max >= min (", *min, ")"));
    }
    std::vector<int64_t> all = {1, 2, 4};
    for (int64_t g = 8; g <= 248; g += 8) all.push_back(g);
    for (int64_t g = 256; g <= 512; g += 16) all.push_back(g);
    std::vector<int64_t> gears;
    for (int64_t g : all) {
      if ((!min || g >= *min) && (!max || g <= *max)) gears.push_back(g);
    }
    if (max && *max > 512 && (gears.empty() || gears.back() != *max)) gears.push_back(*max);
    return NormalizeGears(std::move(gears), Cat(field, ".gears"));
  }
  return InvalidField(Cat(field, ".policy"), Cat("\"", name, "\""),
                      "one of \"TIMES\", \"POW2\", \"VLLM\"");
}

std::vector<absl::Status> ConfigProblems(std::string_view json_text) {
  return Collect(json_text).problems;
}

absl::StatusOr<RuntimeConfig> ParseConfig(std::string_view json_text) {
  Collected collected = Collect(json_text);
  if (!collected.problems.empty()) return collected.problems.front();
  return std::move(collected.config);
}

std::vector<absl::Status> ConfigFileProblems(const std::string& path) {
  auto text = ReadConfigFile(path);
  if (!text.ok()) return {text.status()};
  std::vector<absl::Status> problems = ConfigProblems(*text);
  for (absl::Status& p : problems) p = internal::WithContext(p, path);
  return problems;
}

absl::StatusOr<RuntimeConfig> LoadConfigFile(const std::string& path) {
  auto text = ReadConfigFile(path);
  if (!text.ok()) return text.status();
  auto config = ParseConfig(*text);
  if (!config.ok()) return internal::WithContext(config.status(), path);
  return config;
}

}  // namespace gearbox
