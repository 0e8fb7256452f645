#include "gearbox/executed_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "gearbox/executor.h"
#include "gearbox/runtime.h"
#include "nlohmann/json.hpp"
#include "src/common/errors.h"
#include "src/sim/replay_schedule.h"

namespace gearbox {
namespace {

using internal::Cat;

int64_t ScaleDown(int64_t v, double factor) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(v) / factor)));
}

// Host tensors of a signature at a request's sizes, with reusable storage.
struct RequestTensors {
  std::vector<std::vector<float>> storage;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLTensor> tensors;

  // The trace's columns are the config's dimensions, in order.
  void Shape(const std::vector<TensorSpec>& specs, const Trace& trace, size_t row) {
    storage.resize(specs.size());
    shapes.resize(specs.size());
    tensors.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      shapes[i] = specs[i].shape;
      for (const AxisBinding& b : specs[i].bindings) {
        shapes[i][b.axis] = trace.row(row)[b.dimension];
      }
      int64_t n = 1;
      for (int64_t s : shapes[i]) n *= s;
      if (static_cast<int64_t>(storage[i].size()) < n) storage[i].resize(static_cast<size_t>(n));
      tensors[i] = DLTensor{storage[i].data(),
                            {kDLCPU, 0},
                            static_cast<int>(shapes[i].size()),
                            specs[i].dtype,
                            shapes[i].data(),
                            nullptr,
                            0};
    }
  }
};

// A "Vm...:  N kB" line of /proc/self/status, in bytes (0 if unreadable).
int64_t ProcStatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      return std::strtoll(line.c_str() + n + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0: "5" to clear_refs).
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

absl::Status CheckExecutedTensorSizes(const RuntimeConfig& config, const Trace& trace,
                                      const ModelSignature& signature, size_t rows) {
  const size_t n = config.dims.size();
  if (trace.dimensions.size() != n) return absl::OkStatus();  // CheckReplayInputs reports it
  const size_t used = rows > 0 ? std::min(rows, trace.rows()) : trace.rows();
  std::vector<int64_t> largest(n, 1);
  for (size_t d = 0; d < n; ++d) {
    if (!config.dims[d].gears.empty()) largest[d] = config.dims[d].gears.back();
    for (size_t i = 0; i < used; ++i) largest[d] = std::max(largest[d], trace.row(i)[d]);
  }
  std::vector<TensorSpec> specs = signature.inputs;
  specs.insert(specs.end(), signature.outputs.begin(), signature.outputs.end());
  for (const TensorSpec& spec : specs) {
    std::vector<int64_t> shape = spec.shape;
    for (const AxisBinding& b : spec.bindings) {
      if (b.axis >= 0 && static_cast<size_t>(b.axis) < shape.size() && b.dimension >= 0 &&
          static_cast<size_t>(b.dimension) < n) {
        shape[static_cast<size_t>(b.axis)] = largest[static_cast<size_t>(b.dimension)];
      }
    }
    double elements = 1.0;
    for (int64_t s : shape) elements *= static_cast<double>(s);
    if (elements > static_cast<double>(kMaxExecutedTensorElements)) {
      std::string sizes;
      for (size_t d = 0; d < n; ++d)
        sizes += Cat(d ? ", " : "", config.dims[d].name, " ", largest[d]);
      return absl::InvalidArgumentError(Cat(
          "--execute: tensor ", spec.name, " at the largest sizes (", sizes, ") has ", elements,
          " elements; at most ", kMaxExecutedTensorElements,
          " per tensor (divide the sizes with --size-scale, or limit rows with --max-requests)"));
    }
  }
  return absl::OkStatus();
}

Trace ScaleTraceSizes(const Trace& trace, double factor) {
  Trace out = trace;
  if (factor <= 1.0) return out;
  for (int64_t& s : out.sizes) s = ScaleDown(s, factor);
  return out;
}

RuntimeConfig ScaleConfigGears(const RuntimeConfig& config, double factor) {
  RuntimeConfig out = config;
  if (factor <= 1.0) return out;
  for (DimensionSpec& d : out.dims) {
    for (int64_t& g : d.gears) g = ScaleDown(g, factor);
    d.gears.erase(std::unique(d.gears.begin(), d.gears.end()), d.gears.end());
  }
  for (GearCombination& c : out.combination_spec.combinations) {
    for (int64_t& g : c) g = ScaleDown(g, factor);
  }
  // A unit now stands for `factor` of the trace's: the replan policy's cost
  // model keeps the trace's economics (run time and memory per request).
  GearCostModel& m = out.replan.cost;
  m.seconds_per_unit *= std::pow(factor, m.runtime_exponent);
  m.memory_bytes_per_unit *= std::pow(factor, m.memory_exponent);
  return out;
}

absl::StatusOr<ExecutedReplayResult> ExecutedReplay(
    const RuntimeConfig& config, const Trace& trace,
    const std::function<absl::StatusOr<std::unique_ptr<Backend>>()>& make_backend,
    const ExecutedReplayOptions& options) {
  const int n = static_cast<int>(config.dims.size());
  if (auto s = internal::CheckReplayInputs(config, trace, options); !s.ok()) return s;
  auto backend_or = make_backend();
  if (!backend_or.ok()) return backend_or.status();
  std::unique_ptr<Backend> backend = *std::move(backend_or);
  if (auto s = CheckExecutedTensorSizes(config, trace, backend->signature(), options.max_requests);
      !s.ok()) {
    return s;
  }

  const double t0 = trace.time.front();
  ExecutedReplayResult result;
  result.peak_rss_reset = ResetPeakRss();
  result.start_rss_bytes = ProcStatusBytes("VmRSS");
  result.policy = internal::ReplayRunName(options);
  ManualClock clock(t0);
  GraphResourcePool pool(PoolOptions{.log = [](LogLevel, std::string_view) {}});
  PoolBudgetMemoryProbe budget(&pool, options.memory_budget_bytes);
  RuntimeOptions ro = internal::ReplayRuntimeOptions(config, options, &clock, &pool);
  if (options.memory_budget_bytes > 0) ro.memory_probe = &budget;
  std::unique_ptr<MemoryProbe> backend_probe;  // outlives the runtime
  if (options.memory_budget_bytes == 0 && options.make_memory_probe) {
    auto probe = options.make_memory_probe(*backend);
    if (!probe.ok()) return probe.status();
    backend_probe = *std::move(probe);
    ro.memory_probe = backend_probe.get();
  }
  // The policies honour the same budget before any compile, pricing gears
  // by the executor's predictions (unless the config sets its own).
  if (options.memory_budget_bytes > 0 && ro.adaptive.memory_budget_bytes == 0) {
    ro.adaptive.memory_budget_bytes = options.memory_budget_bytes;
  }
  ro.on_update = [&](const UpdateRecord& r) {
    internal::CountUpdate(r, &result);
    if (options.on_update) options.on_update(r);
  };
  auto runtime_or = AdaptiveGearRuntime::Create(config.dims, ro);
  if (!runtime_or.ok()) return runtime_or.status();
  AdaptiveGearRuntime& runtime = **runtime_or;
  // The budget holds the cached executables too: a gear compiled on first
  // use that would pass it runs uncached (ExecutorStats::over_budget_runs).
  auto executor_or =
      GearedExecutor::Create(&runtime, backend.get(),
                             {.graph_memory_budget_bytes = options.memory_budget_bytes,
                              .out_of_memory_fallback = config.executor.out_of_memory_fallback});
  if (!executor_or.ok()) return executor_or.status();
  GearedExecutor& executor = **executor_or;
  budget.Watch(&executor);  // refused executables read as pressure too
  if (ro.adaptive.memory_budget_bytes > 0) executor.InstallGearBytesPredictor();

  const size_t rows =
      options.max_requests > 0 ? std::min(options.max_requests, trace.rows()) : trace.rows();
  internal::ReplaySchedule schedule(options, t0, trace.time[rows - 1], &runtime, &clock);
  const size_t step = std::max<size_t>(1, rows / 100);
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::normal_distribution<float> normal;
  RequestTensors in, out;
  std::vector<double> latency_ms;
  latency_ms.reserve(rows);
  double padded = 0, raw = 0;
  const auto wall_start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < rows; ++i) {
    const double t = trace.time[i];
    if (auto s = schedule.RunThrough(t); !s.ok()) return s;
    clock.Set(t);
    if (options.progress && i % step == 0) options.progress(i, rows);
    in.Shape(backend->signature().inputs, trace, i);
    out.Shape(backend->signature().outputs, trace, i);
    for (size_t k = 0; k < in.tensors.size(); ++k) {
      int64_t count = 1;
      for (int64_t s : in.shapes[k]) count *= s;
      for (int64_t e = 0; e < count; ++e) in.storage[k][static_cast<size_t>(e)] = normal(rng);
    }
    {
      SnapshotRef snap = runtime.GetSnapshot();
      Plan plan;
      if (MakePlan(*snap, {trace.row(i), static_cast<size_t>(n)}, &plan).ok()) {
        padded += plan.padded_volume();
        raw += plan.raw_volume();
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const absl::Status s = executor.Run(in.tensors, out.tensors);
    latency_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (!s.ok() && result.failed_requests++ == 0) {
      result.first_failure = Cat("row ", i + 1, ": ", internal::Message(s));
    }
    const int64_t per_gear = pool.bytes(), arena = backend->arena_usage().held_bytes;
    result.peak_gear_bytes = std::max(result.peak_gear_bytes, per_gear + arena);
    result.peak_per_gear_bytes = std::max(result.peak_per_gear_bytes, per_gear);
    result.peak_arena_bytes = std::max(result.peak_arena_bytes, arena);
  }
  if (options.progress) options.progress(rows, rows);
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (auto s = schedule.RunRest(); !s.ok()) return s;  // serves no request: not in wall_seconds
  result.requests = rows;
  result.requests_per_second = static_cast<double>(rows) / std::max(result.wall_seconds, 1e-9);
  std::sort(latency_ms.begin(), latency_ms.end());
  auto pct = [&](double p) {
    return latency_ms[std::min(latency_ms.size() - 1,
                               static_cast<size_t>(p * static_cast<double>(latency_ms.size())))];
  };
  result.latency_p50_ms = pct(0.50);
  result.latency_p99_ms = pct(0.99);
  double sum = 0;
  for (double l : latency_ms) sum += l;
  result.latency_mean_ms = sum / static_cast<double>(latency_ms.size());
  result.released_executables = pool.released();
  const ExecutorStats es = executor.stats();
  result.compiles = es.compiles;
  result.compile_failures = es.compile_failures;
  result.compile_seconds = es.compile_seconds;
  result.over_budget_runs = es.over_budget_runs;
  result.largest_gear_bytes = es.largest_gear_bytes;
  result.out_of_memory_fallbacks = es.out_of_memory_fallbacks;
  result.out_of_memory_larger = es.out_of_memory_larger;
  result.out_of_memory_split = es.out_of_memory_split;
  result.out_of_memory_exact = es.out_of_memory_exact;
  result.predicted_over_budget_runs = es.predicted_over_budget_runs;
  result.memory_predictions = es.memory_predictions;
  result.memory_prediction_mean_error = es.memory_prediction_mean_error;
  result.memory_prediction_max_error = es.memory_prediction_max_error;
  result.arena_slots = backend->arena_usage().slots;
  result.peak_rss_bytes = ProcStatusBytes("VmHWM");
  result.padding_waste = raw > 0 ? padded / raw - 1.0 : 0.0;
  SnapshotRef last = runtime.GetSnapshot();
  for (int d = 0; d < n; ++d)
    result.final_gears.emplace_back(last->gears(d).begin(), last->gears(d).end());
  return result;
}

std::string ExecutedReplayResultJson(const ExecutedReplayResult& r, int indent) {
  nlohmann::ordered_json j;
  j["policy"] = r.policy;
  j["requests"] = r.requests;
  j["failed_requests"] = r.failed_requests;
  if (!r.first_failure.empty()) j["first_failure"] = r.first_failure;
  j["wall_seconds"] = r.wall_seconds;
  j["requests_per_second"] = r.requests_per_second;
  j["latency_p50_ms"] = r.latency_p50_ms;
  j["latency_p99_ms"] = r.latency_p99_ms;
  j["latency_mean_ms"] = r.latency_mean_ms;
  j["compiles"] = r.compiles;
  j["compile_failures"] = r.compile_failures;
  j["compile_seconds"] = r.compile_seconds;
  j["released_executables"] = r.released_executables;
  j["peak_gear_bytes"] = r.peak_gear_bytes;
  j["peak_per_gear_bytes"] = r.peak_per_gear_bytes;
  j["peak_arena_bytes"] = r.peak_arena_bytes;
  j["arena_slots"] = r.arena_slots;
  j["largest_gear_bytes"] = r.largest_gear_bytes;
  j["out_of_memory_fallbacks"] = r.out_of_memory_fallbacks;
  j["out_of_memory_larger"] = r.out_of_memory_larger;
  j["out_of_memory_split"] = r.out_of_memory_split;
  j["out_of_memory_exact"] = r.out_of_memory_exact;
  j["predicted_over_budget_runs"] = r.predicted_over_budget_runs;
  j["memory_predictions"] = r.memory_predictions;
  j["memory_prediction_mean_error"] = r.memory_prediction_mean_error;
  j["memory_prediction_max_error"] = r.memory_prediction_max_error;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["start_rss_bytes"] = r.start_rss_bytes;
  j["peak_rss_reset"] = r.peak_rss_reset;
  j["over_budget_runs"] = r.over_budget_runs;
  j["padding_waste"] = r.padding_waste;
  j["updates"] = r.updates;
  j["updates_changed"] = r.updates_changed;
  j["combination_looks"] = r.combination_looks;
  j["combination_looks_changed"] = r.combination_looks_changed;
  j["final_gears"] = r.final_gears;
  return j.dump(indent);
}

}  // namespace gearbox
