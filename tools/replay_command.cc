// `gearbox replay`: what would gearbox do on this traffic, and how much would
// it save against a static ladder? Runs the real runtime on the trace (see
// gearbox/replay.h) for each policy and prints a side-by-side table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "fmt/format.h"
#include "gearbox/backends/builtin.h"
#include "gearbox/config.h"
#include "gearbox/executed_replay.h"
#include "gearbox/fleet_replay.h"
#include "gearbox/replay.h"
#include "gearbox/replay_summary.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace gearbox::tools {
namespace {

struct ReplayFlags {
  std::string config;
  std::string trace;
  std::string policies{UpdatePolicyName(kDefaultUpdatePolicy)};
  std::string schemes;  // empty: the config's
  std::string decisions;
  std::string summary;
  std::string plot;
  std::string update_at;
  bool optimum = false;
  double bucket_seconds = ReplayOptions{}.timeline_bucket_seconds;
  // Executed replay.
  std::string execute;
  std::vector<std::string> backend_params;
  double size_scale = 1.0;
  size_t max_requests = ExecutedReplayOptions{}.max_requests;
  double memory_budget_mb = 0.0;
  // Exit 3 when a policy rejects more than this share of the requests.
  double max_reject_ratio = 0.01;
  size_t max_updates = ReplayRunOptions{}.max_updates;
  // Fleet replay (gearbox/fleet_replay.h): 0 = the single-runtime replay.
  int replicas = 0;
  std::string store;                 // redis://HOST:PORT; empty: the in-process stand-in
  std::string replica_split;         // round-robin (default) or hash:COLUMN
  std::string join_at;               // trace seconds; empty: every replica from the start
  std::string store_outage;          // T1:T2
  bool isolated = false;             // replicas that do not share (the baseline)
  std::string fleet_weighting;       // total (default) or mean
  bool fleet_plan = false;           // one plan per fleet (replica 0 leads)
  bool share_artifacts = false;      // compiled artifacts shared through the store
  int64_t artifact_bytes = 0;        // bytes of one simulated artifact; 0: the library's default
  double artifact_poll_seconds = 0;  // 0: the library's default
  double pace = 0;                   // trace seconds per wall second; 0: unpaced
  int replica_index = -1;            // >= 0: simulate only this replica (a fleet of processes)
  std::string fleet_id;              // the fingerprint's model id (processes of one fleet share it)
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "gearbox replay: %s\n", std::string(s.message()).c_str());
  return 2;
}

absl::StatusOr<std::vector<double>> ParseTimes(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const double t = std::stod(item, &used);
      if (used != item.size() || !std::isfinite(t)) throw std::invalid_argument(item);
      out.push_back(t);
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(fmt::format(
          "--update-at: \"{}\" is not allowed; comma-separated times in seconds", item));
    }
  }
  return out;
}

std::string Percent(double x) { return fmt::format("{:.2f}%", 100.0 * x); }

// One replay per (scheme, policy): the schemes named, else the config's.
absl::StatusOr<std::vector<ReplayRunOptions>> ParseRuns(const ReplayFlags& f) {
  std::vector<UpdatePolicy> policies;
  std::stringstream policy_names(f.policies);
  for (std::string name; std::getline(policy_names, name, ',');) {
    auto p = ParseUpdatePolicy(name, "--policy");
    if (!p.ok()) return p.status();
    if (std::find(policies.begin(), policies.end(), *p) != policies.end()) {
      return absl::InvalidArgumentError(
          fmt::format("--policy: \"{}\" is named twice; name each policy once", name));
    }
    policies.push_back(*p);
  }
  if (policies.empty()) return absl::InvalidArgumentError("--policy: name at least one policy");
  std::vector<std::optional<GearScheme>> schemes;
  std::stringstream scheme_names(f.schemes);
  for (std::string name; std::getline(scheme_names, name, ',');) {
    auto s = ParseGearScheme(name, "--scheme");
    if (!s.ok()) return s.status();
    if (std::find(schemes.begin(), schemes.end(), std::optional<GearScheme>(*s)) != schemes.end()) {
      return absl::InvalidArgumentError(
          fmt::format("--scheme: \"{}\" is named twice; name each scheme once", name));
    }
    schemes.push_back(*s);
  }
  const bool only_static = std::all_of(policies.begin(), policies.end(),
                                       [](UpdatePolicy p) { return p == UpdatePolicy::kStatic; });
  if (!f.update_at.empty() && only_static) {
    return absl::InvalidArgumentError(
        "--update-at: the static policy runs no updates; add --policy adaptive or replan");
  }
  if (schemes.empty()) schemes.push_back(std::nullopt);
  std::vector<double> update_at;
  if (!f.update_at.empty()) {
    auto times = ParseTimes(f.update_at);
    if (!times.ok()) return times.status();
    update_at = *times;
  }
  std::vector<ReplayRunOptions> runs;
  for (const auto& scheme : schemes) {
    for (UpdatePolicy policy : policies) {
      ReplayRunOptions run;
      run.policy = policy;
      run.scheme = scheme;
      run.update_at = update_at;
      run.max_updates = f.max_updates;
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

// Flags that only make sense together, and values CLI11's checks let through.
// The trace file, its columns named as the config's dimensions.
absl::StatusOr<Trace> LoadTraceOf(const std::string& path, const RuntimeConfig& config) {
  std::vector<std::string> dims;
  for (const auto& d : config.dims) dims.push_back(d.name);
  return LoadTraceFile(path, dims);
}

absl::Status CheckFlagCombinations(const ReplayFlags& f) {
  if (f.execute.empty()) {
    if (f.size_scale != 1.0)
      return absl::InvalidArgumentError("--size-scale: applies to --execute only");
    if (!f.backend_params.empty())
      return absl::InvalidArgumentError("--backend-param: applies to --execute only");
    if (f.max_requests != 0)
      return absl::InvalidArgumentError("--max-requests: applies to --execute only");
    if (f.memory_budget_mb != 0.0) {
      return absl::InvalidArgumentError("--memory-budget-mb: applies to --execute only");
    }
  }
  if (!std::isfinite(f.memory_budget_mb) || f.memory_budget_mb < 0 || f.memory_budget_mb > 1e12) {
    return absl::InvalidArgumentError(
        fmt::format("--memory-budget-mb: {} is not allowed; megabytes in [0, 1e12] (0: no budget)",
                    f.memory_budget_mb));
  }
  if (!(f.max_reject_ratio >= 0.0 && f.max_reject_ratio <= 1.0)) {
    return absl::InvalidArgumentError(fmt::format(
        "--max-reject-ratio: {} is not allowed; a fraction in [0, 1]", f.max_reject_ratio));
  }
  if (!std::isfinite(f.bucket_seconds)) {
    return absl::InvalidArgumentError(
        fmt::format("--bucket-seconds: {} is not allowed; finite seconds > 0", f.bucket_seconds));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ReplayResult>> RunSimulated(const ReplayFlags& f,
                                                       const RuntimeConfig& config,
                                                       const Trace& trace,
                                                       const std::vector<ReplayRunOptions>& runs,
                                                       AtomicFile* decisions) {
  std::vector<ReplayResult> results;
  for (const ReplayRunOptions& run : runs) {
    ReplayOptions options;
    static_cast<ReplayRunOptions&>(options) = run;
    options.timeline_bucket_seconds = f.bucket_seconds;
    if (decisions != nullptr) {
      options.on_update = [decisions](const UpdateRecord& r) {
        decisions->stream() << UpdateRecordToJson(r) << '\n';
      };
    }
    ProgressBar bar("replay " + std::string(UpdatePolicyName(run.policy)) +
                    (run.scheme ? "/" + std::string(GearSchemeName(*run.scheme)) : ""));
    options.progress = [&bar](size_t done, size_t total) { bar.Update(done, total); };
    auto result = Replay(config, trace, options);
    bar.Finish();
    if (!result.ok()) return result.status();
    results.push_back(*std::move(result));
  }
  return results;
}

// The side-by-side table of the simulated replays.
void PrintTable(const ReplayFlags& f, const RuntimeConfig& config, const Trace& trace,
                const std::vector<ReplayResult>& results,
                const std::vector<std::vector<DimensionOptimum>>& optimum) {
  const size_t dims = config.dims.size();
  std::string out = fmt::format("trace {}: {} requests over {:.1f} min\n", f.trace, trace.rows(),
                                trace.duration() / 60.0);
  auto row = [&](const std::string& label, auto cell) {
    out += fmt::format("  {:<34}", label);
    for (size_t i = 0; i < results.size(); ++i) out += fmt::format("{:>19}", cell(i));
    out += '\n';
  };
  out += fmt::format("  {:<34}", "");
  for (const ReplayResult& r : results) out += fmt::format("{:>19}", r.policy);
  out += '\n';
  const auto& rs = results;
  row("padding waste (all dimensions)", [&](size_t i) { return Percent(rs[i].padding_waste); });
  for (size_t d = 0; d < dims; ++d) {
    const std::string& name = config.dims[d].name;
    if (dims > 1) {
      row(fmt::format("  {} alone", name),
          [&, d](size_t i) { return Percent(rs[i].dimension_waste(static_cast<int>(d))); });
    }
    row(fmt::format("avg gears {}", name),
        [&, d](size_t i) { return fmt::format("{:.1f}", rs[i].avg_gears[d]); });
    if (!optimum.empty()) {
      row("  offline optimum, same gear count", [&, d](size_t i) {
        const DimensionOptimum& o = optimum[i][d];
        return fmt::format("{} ({})", Percent(o.plan.waste()), o.gears);
      });
      if (dims == 1) {
        row("  ... same compiled-graph count", [&, d](size_t i) {
          const DimensionOptimum& o = optimum[i][d];
          return fmt::format("{} ({})", Percent(o.same_graph_count.waste()), o.graph_count);
        });
        row("  ... planned on the other half", [&, d](size_t i) {
          const DimensionOptimum& o = optimum[i][d];
          return o.other_half_waste.has_value() ? Percent(*o.other_half_waste) : std::string("-");
        });
      }
      if (config.dims[d].splittable) {
        row("  ... splitting allowed", [&, d](size_t i) {
          const DimensionOptimum& o = optimum[i][d];
          return fmt::format("{} ({})", Percent(o.with_splitting->waste()), o.gears);
        });
      }
    }
    row(fmt::format("final gears {}", name),
        [&, d](size_t i) { return fmt::format("{}", rs[i].final_gears[d].size()); });
  }
  row("compiles (per hour)", [&](size_t i) {
    return fmt::format("{} ({:.1f})", rs[i].compiles, rs[i].compiles_per_hour);
  });
  row("gears evicted < 1 h after added", [&](size_t i) {
    return fmt::format("{} (max {}/gear)", rs[i].short_lived_gears, rs[i].max_gear_cycles_per_hour);
  });
  row("updates (changed the gears)",
      [&](size_t i) { return fmt::format("{} ({})", rs[i].updates, rs[i].updates_changed); });
  row("most gear changes in 25 updates",
      [&](size_t i) { return fmt::format("{}", rs[i].max_gear_set_changes_in_25_updates); });
  row("looks at the combinations (changed)", [&](size_t i) {
    return fmt::format("{} ({})", rs[i].combination_looks, rs[i].combination_looks_changed);
  });
  row("split / eager / rejected requests", [&](size_t i) {
    return fmt::format("{}/{}/{}", rs[i].split_requests, rs[i].eager_requests,
                       rs[i].rejected_requests);
  });
  row("graphs alive: average / peak",
      [&](size_t i) { return fmt::format("{:.1f} / {}", rs[i].avg_graphs, rs[i].peak_graphs); });
  if (config.memory_model) {
    row("peak graph memory (GiB)",
        [&](size_t i) { return fmt::format("{:.2f}", rs[i].peak_graph_bytes / (1 << 30)); });
  }
  row("replay speed (requests/s)", [&](size_t i) {
    return fmt::format(
        "{:.2f}M", static_cast<double>(rs[i].requests) / std::max(rs[i].wall_seconds, 1e-9) / 1e6);
  });
  std::fputs(out.c_str(), stdout);
  for (const ReplayResult& r : results) {
    if (r.rejected_requests > 0) {
      std::fprintf(stderr, "gearbox replay: %s rejected %llu requests; first: %s\n",
                   r.policy.c_str(), static_cast<unsigned long long>(r.rejected_requests),
                   r.first_rejection.c_str());
    }
  }
}

// The backend's parameters: the batch and sequence dimensions found by name,
// then the --backend-param pairs.
absl::StatusOr<BackendParams> ExecuteParams(const ReplayFlags& f, const RuntimeConfig& config) {
  BackendParams params;
  int seq = -1, batch = -1;
  for (size_t d = 0; d < config.dims.size(); ++d) {
    if (config.dims[d].name == "BATCHSIZE") batch = static_cast<int>(d);
    if (config.dims[d].name == "SEQLEN") seq = static_cast<int>(d);
  }
  if (seq < 0) seq = batch == 0 && config.dims.size() > 1 ? 1 : 0;
  params["batch_dim"] = std::to_string(batch);
  params["seq_dim"] = std::to_string(seq);
  for (const std::string& kv : f.backend_params) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError("--backend-param: \"" + kv +
                                        "\" is not allowed; key=value");
    }
    params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return params;
}

// `decisions` (null: none) gets each executed update's record.
absl::StatusOr<std::vector<ExecutedReplayResult>> RunExecuted(
    const ReplayFlags& f, const RuntimeConfig& config, const Trace& trace,
    const std::vector<ReplayRunOptions>& runs, AtomicFile* decisions) {
  if (auto s = RegisterBuiltinBackends(); !s.ok()) return s;
  auto params = ExecuteParams(f, config);
  if (!params.ok()) return params.status();
  const RuntimeConfig scaled_config = ScaleConfigGears(config, f.size_scale);
  const Trace scaled_trace = ScaleTraceSizes(trace, f.size_scale);
  std::vector<ExecutedReplayResult> executed;
  for (const ReplayRunOptions& run : runs) {
    ExecutedReplayOptions options;
    static_cast<ReplayRunOptions&>(options) = run;
    options.max_requests = f.max_requests;
    options.memory_budget_bytes = static_cast<int64_t>(f.memory_budget_mb * 1024 * 1024);
    // No budget: the probe matching the backend's memory (host or CUDA).
    options.make_memory_probe = [](const Backend& b) { return MakeMemoryProbeFor(b); };
    if (decisions != nullptr) {
      options.on_update = [decisions](const UpdateRecord& r) {
        decisions->stream() << UpdateRecordToJson(r) << '\n';
      };
    }
    ProgressBar bar("execute " + std::string(UpdatePolicyName(run.policy)));
    options.progress = [&bar](size_t done, size_t total) { bar.Update(done, total); };
    auto r = ExecutedReplay(
        scaled_config, scaled_trace,
        [&]() { return BackendRegistry::Global().Create(f.execute, *params); }, options);
    bar.Finish();
    if (!r.ok()) return r.status();
    executed.push_back(*std::move(r));
  }
  return executed;
}

void PrintExecutedTable(const ReplayFlags& f, const std::vector<ExecutedReplayResult>& executed) {
  std::string t =
      fmt::format("executed on {} ({} requests{}):\n", f.execute, executed.front().requests,
                  f.size_scale > 1 ? fmt::format(", sizes divided by {}", f.size_scale) : "");
  auto erow = [&](const std::string& label, auto cell) {
    t += fmt::format("  {:<34}", label);
    for (const ExecutedReplayResult& r : executed) t += fmt::format("{:>19}", cell(r));
    t += '\n';
  };
  erow("", [](const ExecutedReplayResult& r) { return r.policy; });
  erow("requests/s",
       [](const ExecutedReplayResult& r) { return fmt::format("{:.0f}", r.requests_per_second); });
  erow("latency p50 / p99 (ms)", [](const ExecutedReplayResult& r) {
    return fmt::format("{:.3f} / {:.3f}", r.latency_p50_ms, r.latency_p99_ms);
  });
  erow("compiles (total compile s)", [](const ExecutedReplayResult& r) {
    return fmt::format("{} ({:.2f})", r.compiles, r.compile_seconds);
  });
  erow("peak gear memory (MiB)", [](const ExecutedReplayResult& r) {
    return fmt::format("{:.1f}", static_cast<double>(r.peak_gear_bytes) / (1 << 20));
  });
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  erow("  per gear / arena (MiB)", [&](const ExecutedReplayResult& r) {
    return fmt::format("{:.1f} / {:.1f}", mib(r.peak_per_gear_bytes), mib(r.peak_arena_bytes));
  });
  erow("  arena slots x largest gear (MiB)", [&](const ExecutedReplayResult& r) {
    return fmt::format("{} x {:.1f}", r.arena_slots, mib(r.largest_gear_bytes));
  });
  erow("memory prediction error mean / max", [](const ExecutedReplayResult& r) {
    return r.memory_predictions == 0
               ? std::string("-")
               : fmt::format("{} / {}", Percent(r.memory_prediction_mean_error),
                             Percent(r.memory_prediction_max_error));
  });
  erow("peak RSS (MiB, at start)", [&](const ExecutedReplayResult& r) {
    return fmt::format("{:.0f} ({:.0f}){}", mib(r.peak_rss_bytes), mib(r.start_rss_bytes),
                       r.peak_rss_reset ? "" : "*");
  });
  if (f.memory_budget_mb > 0) {
    erow("runs over budget (not cached)",
         [](const ExecutedReplayResult& r) { return fmt::format("{}", r.over_budget_runs); });
    erow("  refused before compile (predicted)", [](const ExecutedReplayResult& r) {
      return fmt::format("{}", r.predicted_over_budget_runs);
    });
  }
  if (std::any_of(executed.begin(), executed.end(),
                  [](const ExecutedReplayResult& r) { return r.out_of_memory_fallbacks > 0; })) {
    erow("out-of-memory fallbacks (larger/split/exact)", [](const ExecutedReplayResult& r) {
      return fmt::format("{} ({}/{}/{})", r.out_of_memory_fallbacks, r.out_of_memory_larger,
                         r.out_of_memory_split, r.out_of_memory_exact);
    });
  }
  erow("padding waste", [](const ExecutedReplayResult& r) { return Percent(r.padding_waste); });
  erow("failed requests",
       [](const ExecutedReplayResult& r) { return fmt::format("{}", r.failed_requests); });
  if (std::any_of(executed.begin(), executed.end(),
                  [](const ExecutedReplayResult& r) { return !r.peak_rss_reset; })) {
    t += "  * peak RSS since the process started (/proc/self/clear_refs not writable)\n";
  }
  std::fputs(t.c_str(), stdout);
  for (const ExecutedReplayResult& r : executed) {
    if (r.failed_requests > 0) {
      std::fprintf(stderr, "gearbox replay: %s: %llu requests failed; first: %s\n",
                   r.policy.c_str(), static_cast<unsigned long long>(r.failed_requests),
                   r.first_failure.c_str());
    }
  }
}

// The outputs, each written to a temporary file next to its path and
// renamed into place only when every one of them is complete.
struct Outputs {
  std::unique_ptr<AtomicFile> decisions, summary, plot;
  std::string gnuplot;

  absl::Status Open(const ReplayFlags& f) {
    if (auto s = CheckOutputPaths(
            {{"--config", f.config}, {"--trace", f.trace}},
            {{"--decisions", f.decisions}, {"--summary", f.summary}, {"--plot", f.plot}});
        !s.ok()) {
      return s;
    }
    if (!f.plot.empty()) {
      auto found = FindGnuplot();
      if (!found.ok()) return found.status();
      gnuplot = *found;
    }
    for (auto [file, path] :
         {std::pair{&decisions, &f.decisions}, {&summary, &f.summary}, {&plot, &f.plot}}) {
      if (path->empty()) continue;
      *file = std::make_unique<AtomicFile>(*path);
      if (auto s = (*file)->status(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status CommitAll() {
    for (auto* file : {&decisions, &summary, &plot}) {
      if (*file == nullptr) continue;
      if (auto s = (*file)->Commit(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

// Everything checked before the first replay: the executed replay's backend
// and sizes too, so no late error wastes the simulated runs.
absl::Status CheckBeforeWork(const ReplayFlags& f, const RuntimeConfig& config, const Trace& trace,
                             const std::vector<ReplayRunOptions>& runs) {
  const double span = trace.time.back() - trace.time.front();
  if (span / f.bucket_seconds >= static_cast<double>(kMaxTimelineBuckets)) {
    return absl::InvalidArgumentError(
        fmt::format("--bucket-seconds: {} is not allowed; at most {} buckets over the trace's {} s "
                    "(at least {})",
                    f.bucket_seconds, kMaxTimelineBuckets, span,
                    span / static_cast<double>(kMaxTimelineBuckets)));
  }
  for (const ReplayRunOptions& run : runs) {
    if (auto s = CheckReplayRun(config, trace, run); !s.ok()) return s;
  }
  if (f.execute.empty()) return absl::OkStatus();
  if (auto s = RegisterBuiltinBackends(); !s.ok()) return s;
  auto params = ExecuteParams(f, config);
  if (!params.ok()) return params.status();
  auto backend = BackendRegistry::Global().Create(f.execute, *params);
  if (!backend.ok()) return backend.status();
  const RuntimeConfig scaled_config = ScaleConfigGears(config, f.size_scale);
  const Trace scaled_trace = ScaleTraceSizes(trace, f.size_scale);
  return CheckExecutedTensorSizes(scaled_config, scaled_trace, (*backend)->signature(),
                                  f.max_requests);
}

// Exit 3 when a policy rejected more than --max-reject-ratio of the requests.
int CheckRejections(const ReplayFlags& f, const std::vector<ReplayResult>& results) {
  for (const ReplayResult& r : results) {
    const double ratio = static_cast<double>(r.rejected_requests) /
                         static_cast<double>(std::max<uint64_t>(1, r.requests));
    if (ratio > f.max_reject_ratio) {
      std::fprintf(
          stderr,
          "gearbox replay: %s rejected %.2f%% of the requests, more than --max-reject-ratio %g; "
          "the figures describe the requests served\n",
          r.policy.c_str(), 100.0 * ratio, f.max_reject_ratio);
      return 3;
    }
  }
  return 0;
}

// --replicas: one fleet replay per run; a table per run, the summary a JSON array.
int RunFleetReplay(const ReplayFlags& f) {
  for (const auto& [flag, set] : {std::pair{"--execute", !f.execute.empty()},
                                  {"--optimum", f.optimum},
                                  {"--plot", !f.plot.empty()},
                                  {"--update-at", !f.update_at.empty()}}) {
    if (set) return Fail(absl::InvalidArgumentError(fmt::format("{}: not with --replicas", flag)));
  }
  FleetReplayOptions base;
  base.replicas = f.replicas;
  base.store_url = f.store;
  base.share_stats = !f.isolated;
  base.fleet_plan = f.fleet_plan;
  base.share_artifacts = f.share_artifacts;
  if (f.artifact_bytes != 0) base.artifact_bytes = f.artifact_bytes;
  if (f.artifact_poll_seconds != 0) base.artifact_poll_seconds = f.artifact_poll_seconds;
  base.pace = f.pace;
  if (f.replica_index >= 0) base.only_replica = f.replica_index;
  base.fingerprint.model_id = f.fleet_id;
  base.bucket_seconds = f.bucket_seconds;
  base.max_updates = f.max_updates;
  if (!f.store.empty()) {
    if (auto e = ParseRedisUrl(f.store, "--store"); !e.ok()) return Fail(e.status());
  }
  if (f.fleet_weighting == "total") {
    base.weighting = FleetWeighting::kFleetTotal;
  } else if (f.fleet_weighting == "mean") {
    base.weighting = FleetWeighting::kPerReplicaMean;
  } else if (!f.fleet_weighting.empty()) {
    return Fail(absl::InvalidArgumentError(
        fmt::format("--fleet-weighting: \"{}\" is not allowed; mean or total", f.fleet_weighting)));
  }
  if (!f.replica_split.empty()) {
    if (auto s = ParseReplicaSplit(f.replica_split, &base); !s.ok()) return Fail(s);
  }
  if (!f.join_at.empty()) {
    auto t = ParseTimes(f.join_at);
    if (!t.ok() || t->size() != 1) {
      return Fail(absl::InvalidArgumentError(
          fmt::format("--join-at: \"{}\" is not allowed; one trace time in seconds", f.join_at)));
    }
    base.join_at = t->front();
  }
  if (!f.store_outage.empty()) {
    auto o = ParseStoreOutage(f.store_outage);
    if (!o.ok()) return Fail(o.status());
    base.store_outage = *o;
  }
  auto runs = ParseRuns(f);
  if (!runs.ok()) return Fail(runs.status());
  auto config = LoadConfigFile(f.config);
  if (!config.ok()) return Fail(config.status());
  auto trace = LoadTraceOf(f.trace, *config);
  if (!trace.ok()) return Fail(trace.status());
  Outputs outputs;
  if (auto s = outputs.Open(f); !s.ok()) return Fail(s);
  std::string json = "[";
  for (const ReplayRunOptions& run : *runs) {
    FleetReplayOptions o = base;
    static_cast<ReplayRunOptions&>(o) = run;
    o.max_updates = f.max_updates;
    if (AtomicFile* decisions = outputs.decisions.get()) {
      // One line per replica's update: its record with the replica first.
      o.on_replica_update = [decisions](int replica, const UpdateRecord& rec) {
        const std::string line = UpdateRecordToJson(rec);
        decisions->stream() << "{\"replica\":" << replica << (line.size() > 2 ? "," : "")
                            << line.substr(1) << '\n';
      };
    }
    auto r = FleetReplay(*config, *trace, o);
    if (!r.ok()) return Fail(r.status());
    std::printf("fleet replay: %s, %zu replicas, store %s%s%s\n", r->policy.c_str(),
                r->replicas.size(), r->store.c_str(), r->share_stats ? "" : " (isolated)",
                !r->fleet_plan               ? ""
                : o.only_replica.has_value() ? ", one plan (the lease decides who leads)"
                                             : ", one plan (replica 0 leads)");
    std::printf("%8s %9s %10s %9s %8s %7s %7s %8s %7s\n", "replica", "joined", "requests", "waste",
                "compiles", "graphs", "updates", "merges", "loads");
    for (const ReplicaReplayResult& x : r->replicas) {
      std::printf("%8d %9.0f %10llu %9s %8llu %7llu %7llu %8llu %7llu\n", x.replica, x.joined_at,
                  static_cast<unsigned long long>(x.requests), Percent(x.padding_waste).c_str(),
                  static_cast<unsigned long long>(x.compiles),
                  static_cast<unsigned long long>(x.final_graphs),
                  static_cast<unsigned long long>(x.updates),
                  static_cast<unsigned long long>(x.fleet.merges),
                  static_cast<unsigned long long>(x.artifact_loads));
    }
    std::printf("%8s %9s %10llu %9s %8llu %7llu %7s %8s %7llu\n", "fleet", "",
                static_cast<unsigned long long>(r->requests), Percent(r->padding_waste).c_str(),
                static_cast<unsigned long long>(r->compiles),
                static_cast<unsigned long long>(r->final_graphs), "", "",
                static_cast<unsigned long long>(r->artifact_loads));
    if (r->fleet_plan) {
      for (const ReplicaReplayResult& x : r->replicas) {
        std::printf(
            "plan: replica %d published %llu versions, adopted %llu (%llu on an announcement)\n",
            x.replica, static_cast<unsigned long long>(x.plan_publications),
            static_cast<unsigned long long>(x.plan_adoptions),
            static_cast<unsigned long long>(x.plan_notified_adoptions));
      }
    }
    std::printf(
        "store: %llu calls (%llu failed, %llu refused by the breaker), %llu bytes sent, "
        "%llu received\n",
        static_cast<unsigned long long>(r->store_counters.calls),
        static_cast<unsigned long long>(r->store_counters.failures),
        static_cast<unsigned long long>(r->store_counters.skipped),
        static_cast<unsigned long long>(r->store_counters.bytes_sent),
        static_cast<unsigned long long>(r->store_counters.bytes_received));
    if (o.join_at.has_value()) {
      if (r->join_converged_seconds.has_value()) {
        std::printf(
            "joining replica: reached the others' waste %.0f s after joining (%llu "
            "updates)\n",
            *r->join_converged_seconds,
            static_cast<unsigned long long>(r->join_converged_updates.value_or(0)));
      } else {
        std::printf("joining replica: never reached the others' waste\n");
      }
    }
    json += (json.size() > 1 ? ",\n" : "") + FleetReplayResultJson(*r);
  }
  json += "]\n";
  if (outputs.summary) outputs.summary->stream() << json;
  if (auto s = outputs.CommitAll(); !s.ok()) return Fail(s);
  return 0;
}

int RunReplay(const ReplayFlags& f) {
  if (f.replicas != 0) return RunFleetReplay(f);
  for (const auto& [flag, set] : {std::pair{"--store", !f.store.empty()},
                                  {"--replica-split", !f.replica_split.empty()},
                                  {"--join-at", !f.join_at.empty()},
                                  {"--store-outage", !f.store_outage.empty()},
                                  {"--isolated", f.isolated},
                                  {"--fleet-weighting", !f.fleet_weighting.empty()},
                                  {"--fleet-plan", f.fleet_plan},
                                  {"--share-artifacts", f.share_artifacts},
                                  {"--artifact-bytes", f.artifact_bytes != 0},
                                  {"--artifact-poll-seconds", f.artifact_poll_seconds != 0},
                                  {"--pace", f.pace != 0},
                                  {"--replica-index", f.replica_index >= 0},
                                  {"--fleet-id", !f.fleet_id.empty()}}) {
    if (set) return Fail(absl::InvalidArgumentError(fmt::format("{}: needs --replicas", flag)));
  }
  if (auto s = CheckFlagCombinations(f); !s.ok()) return Fail(s);
  auto runs = ParseRuns(f);
  if (!runs.ok()) return Fail(runs.status());
  auto config = LoadConfigFile(f.config);
  if (!config.ok()) return Fail(config.status());
  auto trace = LoadTraceOf(f.trace, *config);
  if (!trace.ok()) return Fail(trace.status());
  if (auto s = CheckBeforeWork(f, *config, *trace, *runs); !s.ok()) return Fail(s);
  Outputs outputs;
  if (auto s = outputs.Open(f); !s.ok()) return Fail(s);

  ReplaySummary summary;
  summary.trace = f.trace;
  summary.max_reject_ratio = f.max_reject_ratio;
  // --decisions: the executed replay's records with --execute (they carry
  // the memory it measured), else the simulated replay's.
  auto results = RunSimulated(f, *config, *trace, *runs,
                              f.execute.empty() ? outputs.decisions.get() : nullptr);
  if (!results.ok()) return Fail(results.status());
  summary.results = *std::move(results);
  if (f.optimum) {
    auto optimum = OfflineOptimum(*config, *trace, summary.results);
    if (!optimum.ok()) return Fail(optimum.status());
    summary.optimum = *std::move(optimum);
  }
  PrintTable(f, *config, *trace, summary.results, summary.optimum);

  if (!f.execute.empty()) {
    auto executed = RunExecuted(f, *config, *trace, *runs, outputs.decisions.get());
    if (!executed.ok()) return Fail(executed.status());
    summary.executed = *std::move(executed);
    summary.backend = f.execute;
    summary.size_scale = f.size_scale;
    PrintExecutedTable(f, summary.executed);
  }

  if (outputs.summary) outputs.summary->stream() << ReplaySummaryJson(summary) << "\n";
  if (outputs.plot) {
    if (auto s = WriteReplayPlot(summary.results, outputs.gnuplot, outputs.plot.get()); !s.ok())
      return Fail(s);
  }
  if (auto s = outputs.CommitAll(); !s.ok()) return Fail(s);
  return CheckRejections(f, summary.results);
}

}  // namespace

Command AddReplayCommand(CLI::App& app) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd =
      app.add_subcommand("replay", "replay a trace through the runtime on a virtual clock");
  cmd->add_option("--config", f->config, "config JSON (dims, adaptive, memory_model)")->required();
  cmd->add_option("--trace", f->trace,
                  "trace CSV (t, one column per dimension, optional mem_usage)")
      ->required();
  cmd->add_option("--policy", f->policies,
                  fmt::format("static, adaptive or replan (default {}), or a comma-separated list",
                              f->policies));
  cmd->add_option(
      "--scheme", f->schemes,
      "gear scheme of two-dimensional configs: independent, joint, sparse, or a comma-separated "
      "list (each with every --policy); default: the config's");
  cmd->add_option("--decisions", f->decisions,
                  "write each update's record here (JSON Lines; with --execute, the executed "
                  "replay's)");
  cmd->add_option("--summary", f->summary, "write the figures here (JSON)");
  cmd->add_option("--plot", f->plot, "write gears and padding waste over time here (PNG)");
  cmd->add_option("--update-at", f->update_at,
                  "run updates exactly at these trace times (comma-separated seconds)");
  cmd->add_flag("--optimum", f->optimum,
                "also compute the offline-optimal gears at each policy's average gear count");
  cmd->add_option(
         "--bucket-seconds", f->bucket_seconds,
         fmt::format("width of the waste timeline buckets (default {})", f->bucket_seconds))
      ->check(NumberIn(0, 1e15, "seconds > 0", true));
  cmd->add_option(
      "--execute", f->execute,
      "also run every request through the executor on this backend (onednn, cuda_graph)");
  cmd->add_option("--backend-param", f->backend_params, "backend parameter key=value (repeatable)");
  cmd->add_option("--size-scale", f->size_scale,
                  "executed replay: divide trace sizes and initial gears by this (rounding up)")
      ->check(NumberIn(1, 1e9, "a factor in [1, 1e9]"));
  cmd->add_option("--max-requests", f->max_requests, "executed replay: at most this many rows");
  cmd->add_option("--memory-budget-mb", f->memory_budget_mb,
                  "executed replay: memory probe = gear memory / this budget")
      ->check(NumberIn(0, 1e12, "megabytes in [0, 1e12] (0: no budget)"));
  cmd->add_option(
         "--max-updates", f->max_updates,
         fmt::format("at most this many update checks or --update-at times per replay (default {})",
                     f->max_updates))
      ->check(NumberIn(1, 1e12, "an integer in [1, 1e12]"));
  cmd->add_option(
      "--max-reject-ratio", f->max_reject_ratio,
      fmt::format("exit 3 when a policy rejects more than this share of the requests (default {})",
                  f->max_reject_ratio));
  cmd->add_option("--replicas", f->replicas,
                  "fleet replay: split the trace across this many simulated replicas sharing "
                  "statistics (docs/FLEET.md)")
      ->check(NumberIn(1, 256, "an integer in [1, 256]"));
  cmd->add_option("--store", f->store,
                  "fleet replay: redis://127.0.0.1:PORT (default: the in-process stand-in)");
  cmd->add_option("--replica-split", f->replica_split,
                  "fleet replay: round-robin (default) or hash:COLUMN");
  cmd->add_option("--join-at", f->join_at, "fleet replay: the last replica joins at this time (s)");
  cmd->add_option("--store-outage", f->store_outage,
                  "fleet replay: the store is down from T1 to T2 (trace seconds, T1:T2)");
  cmd->add_flag("--isolated", f->isolated,
                "fleet replay: the replicas do not share statistics (the baseline)");
  cmd->add_flag(
      "--fleet-plan", f->fleet_plan,
      "fleet replay: one plan per fleet (replica 0 plans and publishes, the others adopt)");
  cmd->add_option("--fleet-weighting", f->fleet_weighting,
                  "fleet replay: plan from the fleet's whole traffic (total, default) or the "
                  "mean replica's (mean)");
  cmd->add_flag("--share-artifacts", f->share_artifacts,
                "fleet replay: replicas load the gears' artifacts another put in the store "
                "instead of compiling them (single-flight compiles)");
  cmd->add_option("--artifact-bytes", f->artifact_bytes,
                  "fleet replay: bytes of one simulated artifact (default 65536)")
      ->check(NumberIn(1, 64 << 20, "bytes in [1, 67108864]"));
  cmd->add_option("--pace", f->pace,
                  "fleet replay: trace seconds replayed per wall second at most (default 0: as "
                  "fast as it can)")
      ->check(NumberIn(0, 1e9, "trace seconds per wall second in [0, 1e9]"));
  cmd->add_option("--artifact-poll-seconds", f->artifact_poll_seconds,
                  "fleet replay: seconds between two looks for the others' artifacts of gears a "
                  "replica has no graph for, before its first plan (default 0.1)")
      ->check(NumberIn(0, 3600, "seconds in (0, 3600]", true));
  cmd->add_option("--replica-index", f->replica_index,
                  "fleet replay: simulate only replica I (0-based) of --replicas N, its share "
                  "of the trace, against --store (a fleet of processes; needs --fleet-id)")
      ->check(NumberIn(0, 255, "an integer in [0, 255]"));
  cmd->add_option("--fleet-id", f->fleet_id,
                  "fleet replay: the fleet's model id (the key prefix); processes of one fleet "
                  "pass the same (default: a fresh one per run)");
  return [f] { return RunReplay(*f); };
}

}  // namespace gearbox::tools
