// The command-line tools as functions: replay (`gearbox replay --summary`),
// plan_gears (`gearbox plan --json`) and convert_trace (`gearbox trace
// convert`), over the same library calls the CLI makes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "convert.h"
#include "gearbox/config.h"
#include "gearbox/planners.h"
#include "gearbox/replay.h"
#include "gearbox/replay_summary.h"
#include "gearbox/server_config.h"
#include "gearbox/trace.h"
#include "gearbox/trace_convert.h"
#include "nlohmann/json.hpp"
#include "runtime.h"

namespace gearbox::python {
namespace {

std::string Str(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string PathFromPython(const py::handle& path, const char* what) {
  const py::object os = py::module_::import("os");
  if (py::isinstance<py::str>(path) || py::isinstance(path, os.attr("PathLike"))) {
    return os.attr("fspath")(path).cast<std::string>();
  }
  throw py::type_error(std::string(what) + ": " +
                       std::string(py::str(py::type::handle_of(path).attr("__name__"))) +
                       " is not allowed; a path (str or os.PathLike)");
}

// A trace from a numpy array [rows, 1 + dims (+ 1)]: column 0 the time in
// seconds, then one integer size per config dimension, in the config's
// order, then optionally mem_usage. Checked as the CSV reader checks a
// file's rows.
Trace TraceFromArray(const py::handle& object, const std::vector<std::string>& dims) {
  if (object.is_none()) {
    throw py::type_error("trace: None is not allowed; a trace CSV path or a numpy array");
  }
  const auto array = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(object);
  if (!array) throw py::type_error("trace: not convertible to a numpy array of numbers");
  const size_t columns = array.ndim() == 2 ? static_cast<size_t>(array.shape(1)) : 0;
  const bool with_memory = columns == dims.size() + 2;
  if (array.ndim() != 2 || (columns != dims.size() + 1 && !with_memory)) {
    std::string shape;
    for (py::ssize_t i = 0; i < array.ndim(); ++i) {
      shape += (i ? ", " : "") + std::to_string(array.shape(i));
    }
    throw py::value_error("trace: an array of shape (" + shape + ") is not allowed; shape (rows, " +
                          std::to_string(dims.size() + 1) +
                          "): t, then one column per dimension (and optionally mem_usage)");
  }
  const auto rows = static_cast<size_t>(array.shape(0));
  if (rows == 0) throw py::value_error("trace: the trace has no rows");
  Trace trace;
  trace.dimensions = dims;
  trace.time.reserve(rows);
  trace.sizes.reserve(rows * dims.size());
  const double* data = array.data();
  auto cell = [](size_t row, const std::string& column, double v, const std::string& allowed) {
    return py::value_error("trace row " + std::to_string(row) + ", " + column + ": " + Str(v) +
                           " is not allowed; " + allowed);
  };
  double previous = -kMaxTraceSeconds;
  for (size_t r = 0; r < rows; ++r) {
    const double t = data[r * columns];
    if (!std::isfinite(t) || std::abs(t) > kMaxTraceSeconds) {
      throw cell(r, "t", t, "finite seconds with |t| <= 1e11");
    }
    if (t < previous) throw cell(r, "t", t, "rows must be sorted by t");
    previous = t;
    trace.time.push_back(t);
    for (size_t d = 0; d < dims.size(); ++d) {
      const double v = data[r * columns + 1 + d];
      if (!(v >= 1.0 && v <= 9.2e18) || v != std::floor(v)) {
        throw cell(r, dims[d], v, "an integer >= 1");
      }
      trace.sizes.push_back(static_cast<int64_t>(v));
    }
    if (with_memory) {
      const double m = data[r * columns + columns - 1];
      if (!(m >= 0.0 && m <= 1.0)) throw cell(r, "mem_usage", m, "a fraction in [0, 1]");
      trace.mem_usage.push_back(m);
    }
  }
  return trace;
}

absl::StatusOr<std::optional<GearScheme>> SchemeFromPython(const std::optional<std::string>& name) {
  if (!name.has_value()) return std::optional<GearScheme>();
  auto s = ParseGearScheme(*name, "scheme");
  if (!s.ok()) return s.status();
  return std::optional<GearScheme>(*s);
}

py::object ReplayFunction(const py::handle& config_object, const py::handle& trace_object,
                          const std::string& policy, const std::optional<std::string>& scheme,
                          const std::optional<std::vector<double>>& update_at, int64_t max_updates,
                          double bucket_seconds, bool optimum, double max_reject_ratio,
                          const py::object& decisions) {
  const RuntimeConfig config = ConfigFromPython(config_object);
  std::vector<std::string> dims;
  for (const auto& d : config.dims) dims.push_back(d.name);
  if (max_updates < 1) {
    throw py::value_error("max_updates: " + std::to_string(max_updates) +
                          " is not allowed; at least 1");
  }
  if (!(bucket_seconds > 0.0) || !std::isfinite(bucket_seconds)) {
    throw py::value_error("bucket_seconds: " + Str(bucket_seconds) +
                          " is not allowed; finite seconds > 0");
  }
  if (!(max_reject_ratio >= 0.0 && max_reject_ratio <= 1.0)) {
    throw py::value_error("max_reject_ratio: " + Str(max_reject_ratio) +
                          " is not allowed; a fraction in [0, 1]");
  }
  const bool collect = !decisions.is_none();
  if (collect && !py::isinstance<py::list>(decisions)) {
    throw py::type_error("decisions: a list to append each update record to, or None");
  }
  ReplayOptions options;
  options.policy = ValueOrThrow(ParseUpdatePolicy(policy, "policy"));
  options.scheme = ValueOrThrow(SchemeFromPython(scheme));
  if (update_at.has_value()) options.update_at = *update_at;
  options.max_updates = static_cast<size_t>(max_updates);
  options.timeline_bucket_seconds = bucket_seconds;
  std::vector<std::string> records;
  if (collect) {
    options.on_update = [&records](const UpdateRecord& r) {
      records.push_back(UpdateRecordToJson(r));
    };
  }
  const bool from_file = py::isinstance<py::str>(trace_object) ||
                         py::isinstance(trace_object, py::module_::import("os").attr("PathLike"));
  std::optional<Trace> in_memory;
  std::string trace_path;
  if (from_file) {
    trace_path = PathFromPython(trace_object, "trace");
  } else {
    in_memory = TraceFromArray(trace_object, dims);
  }
  ReplaySummary summary;
  summary.max_reject_ratio = max_reject_ratio;
  absl::Status status;
  {
    GilRelease release;
    status = [&]() -> absl::Status {
      if (from_file) {
        auto loaded = LoadTraceFile(trace_path, dims);
        if (!loaded.ok()) return loaded.status();
        in_memory = *std::move(loaded);
      }
      summary.trace = trace_path;
      if (auto s = CheckReplayRun(config, *in_memory, options); !s.ok()) return s;
      auto result = Replay(config, *in_memory, options);
      if (!result.ok()) return result.status();
      summary.results.push_back(*std::move(result));
      if (optimum) {
        auto o = OfflineOptimum(config, *in_memory, summary.results);
        if (!o.ok()) return o.status();
        summary.optimum = *std::move(o);
      }
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  if (collect) {
    py::list list = py::reinterpret_borrow<py::list>(decisions);
    for (const std::string& r : records) list.append(JsonToPython(r));
  }
  return JsonToPython(ReplaySummaryJson(summary));
}

// The cost model from a dict of GearCostModel's field names.
GearCostModel CostFromPython(const std::optional<py::dict>& cost) {
  GearCostModel m;
  if (!cost.has_value()) return m;
  for (const auto& [key, value] : *cost) {
    const std::string k = py::str(key);
    double* field = k == "compile_seconds"         ? &m.compile_seconds
                    : k == "seconds_per_unit"      ? &m.seconds_per_unit
                    : k == "seconds_per_run"       ? &m.seconds_per_run
                    : k == "runtime_exponent"      ? &m.runtime_exponent
                    : k == "memory_fixed_bytes"    ? &m.memory_fixed_bytes
                    : k == "memory_bytes_per_unit" ? &m.memory_bytes_per_unit
                    : k == "memory_exponent"       ? &m.memory_exponent
                    : k == "alpha"                 ? &m.alpha
                    : k == "beta"                  ? &m.beta
                    : k == "gamma"                 ? &m.gamma
                                                   : nullptr;
    if (field == nullptr) {
      throw py::value_error(
          "cost." + k +
          ": unknown key; allowed: compile_seconds, seconds_per_unit, seconds_per_run, "
          "runtime_exponent, memory_fixed_bytes, memory_bytes_per_unit, memory_exponent, alpha, "
          "beta, gamma");
    }
    *field = value.cast<double>();
  }
  ThrowIfError(ValidateCostModel(m));
  return m;
}

void CheckCount(const char* what, int64_t n) {
  if (n < 1 || n > 4096) {
    throw py::value_error(std::string(what) + ": " + std::to_string(n) +
                          " is not allowed; an integer in [1, 4096]");
  }
}

// `gearbox plan --json` for one method, on these sizes.
// gearbox plan --emit: a gear list as an inference server's CUDA-graph sizes.
py::dict EmitServerConfigFunction(const py::handle& gears_object, const std::string& server,
                                  int64_t max_num_seqs, int64_t max_num_batched_tokens,
                                  int64_t speculative_tokens, bool clip_to_max,
                                  const std::string& vllm_syntax) {
  const std::vector<int64_t> gears = SizesFromPython(gears_object, "gears");
  ServerConfigOptions options;
  options.server = ValueOrThrow(ParseServerKind(server, "server"));
  options.vllm_syntax = ValueOrThrow(ParseVllmSyntax(vllm_syntax, "vllm_syntax"));
  options.max_num_seqs = max_num_seqs;
  options.max_num_batched_tokens = max_num_batched_tokens;
  options.speculative_tokens = speculative_tokens;
  options.clip_to_max = clip_to_max;
  std::vector<int64_t> sizes = ValueOrThrow(ServerSizes(gears, options));
  std::string text = ValueOrThrow(EmitServerConfig(gears, options));
  py::dict out;
  out["server"] = std::string(ServerKindName(options.server));
  out["sizes"] = sizes;
  out["text"] = text;
  return out;
}

py::object PlanGearsFunction(const py::handle& sizes_object, std::optional<int64_t> k,
                             std::optional<int64_t> budget, const std::string& method_name,
                             bool splittable, uint64_t seed,
                             const std::optional<py::dict>& cost_dict) {
  if (k.has_value() == budget.has_value()) {
    throw py::value_error("plan_gears: give exactly one of k and budget");
  }
  if (k) CheckCount("k", *k);
  if (budget) CheckCount("budget", *budget);
  const PlanMethod method = ValueOrThrow(ParsePlanMethod(method_name));
  const GearCostModel model = CostFromPython(cost_dict);
  const auto sizes = IntArrayFromPython(sizes_object, "sizes");
  const std::span<const int64_t> view(sizes.data(), static_cast<size_t>(sizes.size()));
  if (view.empty()) throw py::value_error("sizes: empty is not allowed; at least one size");
  GearPlan plan;
  CostBreakdown cost;
  absl::Status status;
  {
    GilRelease release;
    status = [&]() -> absl::Status {
      for (size_t i = 0; i < view.size(); ++i) {
        if (view[i] < 1) {
          return absl::InvalidArgumentError("sizes[" + std::to_string(i) +
                                            "]: " + std::to_string(view[i]) +
                                            " is not allowed; sizes >= 1");
        }
      }
      const SizeHistogram hist = SizeHistogram::FromSizes(view);
      if (budget) {
        auto p = PlanWithCostModel(hist, static_cast<int>(*budget), method, model, seed);
        if (!p.ok()) return p.status();
        plan = p->plan;
        cost = p->cost;
      } else if (method == PlanMethod::kDp) {
        auto p = OptimalGears(hist, static_cast<int>(*k), splittable);
        if (!p.ok()) return p.status();
        plan = *p;
        if (!splittable) {
          auto c = EvaluateCost(hist, plan.gears, model);
          if (!c.ok()) return c.status();
          cost = *c;
        }
      } else {
        auto g = PlanGears(hist, static_cast<int>(*k), method, seed);
        if (!g.ok()) return g.status();
        plan.gears = *g;
        plan.raw = hist.total_size();
        auto padded = PaddedTotal(hist, plan.gears, false);
        if (!padded.ok()) return padded.status();
        plan.padded = *padded;
        plan.search = "rule";
        auto c = EvaluateCost(hist, plan.gears, model);
        if (!c.ok()) return c.status();
        cost = *c;
      }
      return absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  py::dict c;
  c["compile_seconds"] = cost.compile_seconds;
  c["padding_seconds"] = cost.padding_seconds;
  c["memory_gib"] = cost.memory_gib;
  c["total"] = cost.total;
  py::dict out;
  out["method"] = std::string(PlanMethodName(method));
  out["gears"] = plan.gears;
  out["padding_waste"] = plan.waste();
  out["cost"] = c;
  out["search"] = plan.search;
  out["padded"] = plan.padded;
  out["raw"] = plan.raw;
  return out;
}

absl::StatusOr<std::vector<RequestRecord>> ReadRequests(const std::string& path,
                                                        const std::string& format, double rate,
                                                        uint64_t seed) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        path + ": not a regular file (a directory, device or pipe); name a file");
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  if (format == "azure") return ReadAzureTrace(in, path);
  if (format == "mooncake") return ReadMooncakeTrace(in, path);
  return ReadLengthList(in, path, rate, seed);
}

absl::Status WriteCsv(const Trace& trace, const std::string& path) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out) return absl::NotFoundError(path + ": cannot open for writing");
    WriteTraceCsv(trace, out);
    out.flush();
    if (!out) return absl::InternalError(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) return absl::InternalError(path + ": cannot rename into place: " + ec.message());
  return absl::OkStatus();
}

py::tuple ConvertTraceFunction(const py::handle& input_object, const std::string& format,
                               const std::string& view, double rate, uint64_t seed, double step_ms,
                               int64_t max_running, const py::object& output_object) {
  const std::string input = PathFromPython(input_object, "input");
  if (format != "azure" && format != "mooncake" && format != "lengths") {
    throw py::value_error("format: \"" + format + "\" is not allowed; azure, mooncake or lengths");
  }
  if (view != "prefill" && view != "decode") {
    throw py::value_error("view: \"" + view + "\" is not allowed; prefill or decode");
  }
  if (!(rate > 0.0 && rate <= 1e9)) {
    throw py::value_error("rate: " + Str(rate) +
                          " is not allowed; arrivals per second in (0, 1e9]");
  }
  if (!(step_ms > 0.0 && step_ms <= 1e9)) {
    throw py::value_error("step_ms: " + Str(step_ms) + " is not allowed; milliseconds > 0");
  }
  if (max_running < 1 || max_running > 1'000'000) {
    throw py::value_error("max_running: " + std::to_string(max_running) +
                          " is not allowed; sequences in [1, 1000000]");
  }
  const std::optional<std::string> output =
      output_object.is_none() ? std::nullopt
                              : std::optional<std::string>(PathFromPython(output_object, "output"));
  Trace trace;
  absl::Status status;
  {
    GilRelease release;
    status = [&]() -> absl::Status {
      auto requests = ReadRequests(input, format, rate, seed);
      if (!requests.ok()) return requests.status();
      if (view == "prefill") {
        trace = PrefillView(*requests);
      } else {
        auto t = DecodeView(*requests, {step_ms / 1000.0, max_running});
        if (!t.ok()) return t.status();
        trace = *std::move(t);
      }
      return output ? WriteCsv(trace, *output) : absl::OkStatus();
    }();
  }
  ThrowIfError(status);
  const size_t rows = trace.rows(), dims = trace.dimensions.size();
  py::array_t<double> data({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(dims + 1)});
  double* out = data.mutable_data();
  for (size_t r = 0; r < rows; ++r) {
    *out++ = trace.time[r];
    for (size_t d = 0; d < dims; ++d) *out++ = static_cast<double>(trace.sizes[r * dims + d]);
  }
  std::vector<std::string> columns{"t"};
  columns.insert(columns.end(), trace.dimensions.begin(), trace.dimensions.end());
  return py::make_tuple(data, columns);
}

}  // namespace

void BindTools(py::module_& m) {
  m.def("replay", &ReplayFunction, py::arg("config"), py::arg("trace"), py::kw_only(),
        py::arg("policy") = "replan", py::arg("scheme") = py::none(),
        py::arg("update_at") = py::none(), py::arg("max_updates") = int64_t{kMaxReplayUpdates},
        py::arg("bucket_seconds") = 60.0, py::arg("optimum") = false,
        py::arg("max_reject_ratio") = 0.01, py::arg("decisions") = py::none(),
        "Replays a trace through the runtime on a virtual clock for one policy and returns the "
        "summary dict `gearbox replay --summary` writes for it.\n\n"
        "config: JSON text, dict or path. trace: a trace CSV path, or a numpy array [rows, 1 + "
        "dims] (t, then the sizes in the config's dimension order; one more column: "
        "mem_usage). policy: static | adaptive | "
        "replan. scheme: independent | joint | sparse (default: the config's). update_at: run "
        "updates exactly at these times instead of the worker's schedule. optimum: add the "
        "offline optimum (--optimum). decisions: a list each update record (dict) is appended "
        "to. Runs with the GIL released.");
  m.def("plan_gears", &PlanGearsFunction, py::arg("sizes"), py::arg("k") = py::none(),
        py::kw_only(), py::arg("budget") = py::none(), py::arg("method") = "dp",
        py::arg("splittable") = false, py::arg("seed") = 1, py::arg("cost") = py::none(),
        "Offline gear planning for one dimension, as `gearbox plan --json`: k gears (at most), "
        "or with budget the count (1..budget) and gears minimising the cost model.\n\n"
        "sizes: a sequence of ints or an integer numpy array (int64 contiguous: read without a "
        "copy). method: uniform | quantile | kmeans | dp. splittable: dp with k only. cost: a "
        "dict of cost-model fields (compile_seconds, seconds_per_unit, seconds_per_run, "
        "runtime_exponent, memory_fixed_bytes, memory_bytes_per_unit, memory_exponent, alpha, "
        "beta, gamma). Returns {method, gears, padding_waste, cost, search, padded, raw}.");
  m.def("emit_server_config", &EmitServerConfigFunction, py::arg("gears"), py::kw_only(),
        py::arg("server") = "vllm", py::arg("max_num_seqs") = 0,
        py::arg("max_num_batched_tokens") = 0, py::arg("speculative_tokens") = 0,
        py::arg("clip_to_max") = false, py::arg("vllm_syntax") = "compilation-config",
        "A gear list (e.g. plan_gears(...)[\"gears\"] of a decode BATCHSIZE) as an inference "
        "server's CUDA-graph sizes, as `gearbox plan --emit`: server vllm | sglang | trtllm; "
        "max_num_seqs (vLLM --max-num-seqs, SGLang --max-running-requests, TensorRT-LLM "
        "max_batch_size; 0: unchecked), max_num_batched_tokens and speculative_tokens (vLLM "
        "only), clip_to_max (drop sizes above the cap and add the cap, instead of ValueError), "
        "vllm_syntax compilation-config | cudagraph-capture-sizes | cuda-graph-sizes. Returns "
        "{server, sizes, text}: text is what the CLI prints on stdout.");
  m.def("convert_trace", &ConvertTraceFunction, py::arg("input"), py::kw_only(), py::arg("format"),
        py::arg("view") = "prefill", py::arg("rate") = 1.0, py::arg("seed") = 1,
        py::arg("step_ms") = 20.0, py::arg("max_running") = 256, py::arg("output") = py::none(),
        "Converts a public request trace, as `gearbox trace convert`. format: azure | mooncake "
        "| lengths (rate, seed: the Poisson arrivals). view: prefill (t, SEQLEN) or decode (t, "
        "BATCHSIZE, SEQLEN; step_ms, max_running). Returns (data, columns): a float64 numpy "
        "array [rows, 1 + dims] and the column names; output: also write the trace CSV there.");
}

}  // namespace gearbox::python
