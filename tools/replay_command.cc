// `gearbox replay`: what would gearbox do on this traffic, and how much would
// it save against a static ladder? Runs the real runtime on the trace (see
// gearbox/replay.h) for each policy and prints a side-by-side table.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "fmt/format.h"
#include "gearbox/backends/builtin.h"
#include "gearbox/config.h"
#include "gearbox/executed_replay.h"
#include "gearbox/planners.h"
#include "gearbox/replay.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"
#include "tools/output.h"

namespace gearbox::tools {
namespace {

struct ReplayFlags {
  std::string config;
  std::string trace;
  std::string policies = "replan";
  std::string schemes;  // empty: the config's
  std::string decisions;
  std::string summary;
  std::string plot;
  std::string update_at;
  bool optimum = false;
  double bucket_seconds = 60.0;
  // Executed replay.
  std::string execute;
  std::vector<std::string> backend_params;
  double size_scale = 1.0;
  size_t max_requests = 0;
  double memory_budget_mb = 0.0;
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
      return absl::InvalidArgumentError(
          fmt::format("--update-at: \"{}\" is not allowed; comma-separated times in seconds", item));
    }
  }
  return out;
}

// The offline optimum of one dimension at a gear count.
struct Optimum {
  int gears = 0;
  GearPlan plan;
};

std::string Percent(double x) { return fmt::format("{:.2f}%", 100.0 * x); }

// One dimension: the time-weighted count of compiled graphs (gears with a
// graph: the ones a gear set's traffic used), the yardstick besides the
// gear count. 0 (not shown) for several dimensions, whose graphs are
// combinations.
int GraphCount(const ReplayResult& r) {
  return r.dimensions.size() == 1 ? std::max(1, static_cast<int>(std::lround(r.avg_graphs))) : 0;
}

int RunReplay(const ReplayFlags& f) {
  auto config = LoadConfigFile(f.config);
  if (!config.ok()) return Fail(config.status());
  std::vector<std::string> dims;
  for (const auto& d : config->dims) dims.push_back(d.name);
  auto trace = LoadTraceFile(f.trace, dims);
  if (!trace.ok()) return Fail(trace.status());
  std::vector<ReplayPolicy> policies;
  {
    std::stringstream in(f.policies);
    std::string name;
    while (std::getline(in, name, ',')) {
      auto p = ParseReplayPolicy(name);
      if (!p.ok()) return Fail(p.status());
      policies.push_back(*p);
    }
    if (policies.empty()) return Fail(absl::InvalidArgumentError("--policy: name at least one policy"));
  }
  // One run per (scheme, policy): the schemes named, else the config's.
  std::vector<std::optional<GearScheme>> schemes;
  {
    std::stringstream in(f.schemes);
    std::string name;
    while (std::getline(in, name, ',')) {
      auto s = ParseGearScheme(name, "--scheme");
      if (!s.ok()) return Fail(s.status());
      schemes.push_back(*s);
    }
    if (schemes.empty()) schemes.push_back(std::nullopt);
  }
  struct Run {
    ReplayPolicy policy;
    std::optional<GearScheme> scheme;
  };
  std::vector<Run> runs;
  for (const auto& scheme : schemes) {
    for (ReplayPolicy policy : policies) runs.push_back({policy, scheme});
  }
  std::vector<double> update_at;
  if (!f.update_at.empty()) {
    auto times = ParseTimes(f.update_at);
    if (!times.ok()) return Fail(times.status());
    update_at = *times;
  }
  std::unique_ptr<AtomicFile> decisions;
  if (!f.decisions.empty()) {
    decisions = std::make_unique<AtomicFile>(f.decisions);
    if (auto s = decisions->status(); !s.ok()) return Fail(s);
  }

  std::vector<ReplayResult> results;
  for (const Run& run : runs) {
    ReplayOptions options;
    options.policy = run.policy;
    options.scheme = run.scheme;
    options.update_at = update_at;
    options.timeline_bucket_seconds = f.bucket_seconds;
    const std::string name = std::string(ReplayPolicyName(run.policy)) +
                             (run.scheme ? "/" + std::string(GearSchemeName(*run.scheme)) : "");
    if (decisions) {
      options.on_update = [&decisions](const UpdateRecord& r) {
        decisions->stream() << UpdateRecordToJson(r) << '\n';
      };
    }
    ProgressBar bar("replay " + name);
    options.progress = [&bar](size_t done, size_t total) { bar.Update(done, total); };
    auto result = Replay(*config, *trace, options);
    bar.Finish();
    if (!result.ok()) return Fail(result.status());
    results.push_back(*std::move(result));
  }

  // Offline optimum per dimension at each policy's (rounded) average gear
  // count: covering the largest size (no splitting), and, for splittable
  // dimensions, with splitting allowed (where padding alone favours many
  // small chunks, so it is shown apart).
  std::vector<std::map<int, GearPlan>> optimum(dims.size());
  std::vector<std::map<int, GearPlan>> optimum_split(dims.size());
  if (f.optimum) {
    for (size_t d = 0; d < dims.size(); ++d) {
      std::vector<int64_t> sizes;
      sizes.reserve(trace->rows());
      for (size_t i = 0; i < trace->rows(); ++i) sizes.push_back(trace->row(i)[d]);
      const SizeHistogram hist = SizeHistogram::FromSizes(sizes);
      for (const ReplayResult& r : results) {
        for (int k : {std::max(1, static_cast<int>(std::lround(r.avg_gears[d]))), GraphCount(r)}) {
          if (k < 1 || optimum[d].count(k)) continue;
          auto plan = OptimalGears(hist, k, /*splittable=*/false);
          if (!plan.ok()) return Fail(plan.status());
          optimum[d][k] = *std::move(plan);
        }
        const int k = std::max(1, static_cast<int>(std::lround(r.avg_gears[d])));
        if (optimum_split[d].count(k)) continue;
        if (config->dims[d].splittable) {
          auto split = OptimalGears(hist, k, /*splittable=*/true);
          if (!split.ok()) return Fail(split.status());
          optimum_split[d][k] = *std::move(split);
        }
      }
    }
  }

  // The table.
  std::string out = fmt::format("trace {}: {} requests over {:.1f} min\n", f.trace, trace->rows(),
                                trace->duration() / 60.0);
  auto row = [&](const std::string& label, auto cell) {
    out += fmt::format("  {:<34}", label);
    for (const ReplayResult& r : results) out += fmt::format("{:>19}", cell(r));
    out += '\n';
  };
  out += fmt::format("  {:<34}", "");
  for (const ReplayResult& r : results) out += fmt::format("{:>19}", r.policy);
  out += '\n';
  row("padding waste (all dimensions)", [](const ReplayResult& r) { return Percent(r.padding_waste); });
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims.size() > 1) {
      row(fmt::format("  {} alone", dims[d]),
          [d](const ReplayResult& r) { return Percent(r.dimension_waste(static_cast<int>(d))); });
    }
    row(fmt::format("avg gears {}", dims[d]),
        [d](const ReplayResult& r) { return fmt::format("{:.1f}", r.avg_gears[d]); });
    if (f.optimum) {
      row(fmt::format("  offline optimum, same gear count"), [&, d](const ReplayResult& r) {
        const int k = std::max(1, static_cast<int>(std::lround(r.avg_gears[d])));
        return fmt::format("{} ({})", Percent(optimum[d].at(k).waste()), k);
      });
      if (dims.size() == 1) {
        row("  ... same compiled-graph count", [&, d](const ReplayResult& r) {
          const int k = GraphCount(r);
          return fmt::format("{} ({})", Percent(optimum[d].at(k).waste()), k);
        });
      }
      if (config->dims[d].splittable) {
        row(fmt::format("  ... splitting allowed"), [&, d](const ReplayResult& r) {
          const int k = std::max(1, static_cast<int>(std::lround(r.avg_gears[d])));
          return fmt::format("{} ({})", Percent(optimum_split[d].at(k).waste()), k);
        });
      }
    }
    row(fmt::format("final gears {}", dims[d]),
        [d](const ReplayResult& r) { return fmt::format("{}", r.final_gears[d].size()); });
  }
  row("compiles (per hour)", [](const ReplayResult& r) {
    return fmt::format("{} ({:.1f})", r.compiles, r.compiles_per_hour);
  });
  row("gears evicted < 1 h after added", [](const ReplayResult& r) {
    return fmt::format("{} (max {}/gear)", r.short_lived_gears, r.max_gear_cycles_per_hour);
  });
  row("updates (changed the gears)",
      [](const ReplayResult& r) { return fmt::format("{} ({})", r.updates, r.updates_changed); });
  row("split / eager / rejected requests", [](const ReplayResult& r) {
    return fmt::format("{}/{}/{}", r.split_requests, r.eager_requests, r.rejected_requests);
  });
  row("graphs alive: average / peak", [](const ReplayResult& r) {
    return fmt::format("{:.1f} / {}", r.avg_graphs, r.peak_graphs);
  });
  if (config->memory_model) {
    row("peak graph memory (GiB)",
        [](const ReplayResult& r) { return fmt::format("{:.2f}", r.peak_graph_bytes / (1 << 30)); });
  }
  row("replay speed (requests/s)", [](const ReplayResult& r) {
    return fmt::format("{:.2f}M", static_cast<double>(r.requests) / std::max(r.wall_seconds, 1e-9) / 1e6);
  });
  std::fputs(out.c_str(), stdout);
  for (const ReplayResult& r : results) {
    if (r.rejected_requests > 0) {
      std::fprintf(stderr, "gearbox replay: %s rejected %llu requests; first: %s\n", r.policy.c_str(),
                   static_cast<unsigned long long>(r.rejected_requests), r.first_rejection.c_str());
    }
  }

  // Executed replay on a real backend.
  std::vector<ExecutedReplayResult> executed;
  if (!f.execute.empty()) {
    if (auto s = RegisterBuiltinBackends(); !s.ok()) return Fail(s);
    BackendParams params;
    // Defaults that follow the config: the batch and sequence dimensions by name.
    int seq = -1, batch = -1;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] == "BATCHSIZE") batch = static_cast<int>(d);
      if (dims[d] == "SEQLEN") seq = static_cast<int>(d);
    }
    if (seq < 0) seq = batch == 0 && dims.size() > 1 ? 1 : 0;
    params["batch_dim"] = std::to_string(batch);
    params["seq_dim"] = std::to_string(seq);
    for (const std::string& kv : f.backend_params) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Fail(absl::InvalidArgumentError("--backend-param: \"" + kv + "\" is not allowed; key=value"));
      }
      params[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    const RuntimeConfig scaled_config = ScaleConfigGears(*config, f.size_scale);
    const Trace scaled_trace = ScaleTraceSizes(*trace, f.size_scale);
    for (const Run& run : runs) {
      ExecutedReplayOptions options;
      options.policy = run.policy;
      options.scheme = run.scheme;
      options.update_at = update_at;
      options.max_requests = f.max_requests;
      options.memory_budget_bytes = static_cast<int64_t>(f.memory_budget_mb * 1024 * 1024);
      ProgressBar bar("execute " + std::string(ReplayPolicyName(run.policy)));
      options.progress = [&bar](size_t done, size_t total) { bar.Update(done, total); };
      auto r = ExecutedReplay(scaled_config, scaled_trace,
                              [&]() { return BackendRegistry::Global().Create(f.execute, params); }, options);
      bar.Finish();
      if (!r.ok()) return Fail(r.status());
      executed.push_back(*std::move(r));
    }
    std::string t = fmt::format("executed on {} ({} requests{}):\n", f.execute, executed.front().requests,
                                f.size_scale > 1 ? fmt::format(", sizes divided by {}", f.size_scale) : "");
    auto erow = [&](const std::string& label, auto cell) {
      t += fmt::format("  {:<34}", label);
      for (const ExecutedReplayResult& r : executed) t += fmt::format("{:>19}", cell(r));
      t += '\n';
    };
    erow("", [](const ExecutedReplayResult& r) { return r.policy; });
    erow("requests/s", [](const ExecutedReplayResult& r) { return fmt::format("{:.0f}", r.requests_per_second); });
    erow("latency p50 / p99 (ms)", [](const ExecutedReplayResult& r) {
      return fmt::format("{:.3f} / {:.3f}", r.latency_p50_ms, r.latency_p99_ms);
    });
    erow("compiles (total compile s)", [](const ExecutedReplayResult& r) {
      return fmt::format("{} ({:.2f})", r.compiles, r.compile_seconds);
    });
    erow("peak gear memory (MiB)", [](const ExecutedReplayResult& r) {
      return fmt::format("{:.1f}", static_cast<double>(r.peak_gear_bytes) / (1 << 20));
    });
    erow("padding waste", [](const ExecutedReplayResult& r) { return Percent(r.padding_waste); });
    erow("failed requests", [](const ExecutedReplayResult& r) { return fmt::format("{}", r.failed_requests); });
    std::fputs(t.c_str(), stdout);
    for (const ExecutedReplayResult& r : executed) {
      if (r.failed_requests > 0) {
        std::fprintf(stderr, "gearbox replay: %s: %llu requests failed; first: %s\n", r.policy.c_str(),
                     static_cast<unsigned long long>(r.failed_requests), r.first_failure.c_str());
      }
    }
  }

  if (!f.summary.empty()) {
    nlohmann::ordered_json summary;
    auto one = [&](const ReplayResult& r) {
      nlohmann::ordered_json j = nlohmann::ordered_json::parse(ReplayResultJson(r));
      if (f.optimum) {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (size_t d = 0; d < dims.size(); ++d) {
          const int k = std::max(1, static_cast<int>(std::lround(r.avg_gears[d])));
          const GearPlan& p = optimum[d].at(k);
          o[dims[d]] = {{"gears", k}, {"waste", p.waste()}, {"gear_list", p.gears}};
          if (dims.size() == 1) {
            const GearPlan& g = optimum[d].at(GraphCount(r));
            o[dims[d]]["same_graph_count"] = {{"gears", GraphCount(r)}, {"waste", g.waste()}};
          }
          if (config->dims[d].splittable) {
            const GearPlan& q = optimum_split[d].at(k);
            o[dims[d]]["with_splitting"] = {
                {"waste", q.waste()}, {"gear_list", q.gears}, {"search", q.search}};
          }
        }
        j["offline_optimum"] = o;
      }
      return j;
    };
    std::vector<nlohmann::ordered_json> each;
    for (size_t i = 0; i < results.size(); ++i) {
      nlohmann::ordered_json j = one(results[i]);
      if (i < executed.size()) {
        j["executed"] = nlohmann::ordered_json::parse(ExecutedReplayResultJson(executed[i]));
        j["executed"]["backend"] = f.execute;
        j["executed"]["size_scale"] = f.size_scale;
      }
      each.push_back(std::move(j));
    }
    if (results.size() == 1) {
      summary = each.front();
    } else {
      summary["trace"] = f.trace;
      summary["policies"] = nlohmann::ordered_json::object();
      for (size_t i = 0; i < results.size(); ++i) summary["policies"][results[i].policy] = each[i];
    }
    if (auto s = WriteFileAtomically(f.summary, summary.dump(2) + "\n"); !s.ok()) return Fail(s);
  }
  if (!f.plot.empty()) {
    if (auto s = WriteReplayPlot(results, f.plot); !s.ok()) return Fail(s);
  }
  if (decisions) {
    if (auto s = decisions->Commit(); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace

Command AddReplayCommand(CLI::App& app) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand("replay", "replay a trace through the runtime on a virtual clock");
  cmd->add_option("--config", f->config, "config JSON (dims, adaptive, memory_model)")->required();
  cmd->add_option("--trace", f->trace, "trace CSV (t, one column per dimension, optional mem_usage)")
      ->required();
  cmd->add_option("--policy", f->policies, "replan (default), adaptive, static, or a comma-separated list");
  cmd->add_option("--scheme", f->schemes,
                  "gear scheme of two-dimensional configs: independent, joint, sparse, or a comma-separated "
                  "list (each with every --policy); default: the config's");
  cmd->add_option("--decisions", f->decisions, "write each update's record here (JSON Lines)");
  cmd->add_option("--summary", f->summary, "write the figures here (JSON)");
  cmd->add_option("--plot", f->plot, "write gears and padding waste over time here (PNG)");
  cmd->add_option("--update-at", f->update_at,
                  "run updates exactly at these trace times (comma-separated seconds)");
  cmd->add_flag("--optimum", f->optimum,
                "also compute the offline-optimal gears at each policy's average gear count");
  cmd->add_option("--bucket-seconds", f->bucket_seconds, "width of the waste timeline buckets")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--execute", f->execute,
                  "also run every request through the executor on this backend (onednn, cuda_graph)");
  cmd->add_option("--backend-param", f->backend_params, "backend parameter key=value (repeatable)");
  cmd->add_option("--size-scale", f->size_scale,
                  "executed replay: divide trace sizes and initial gears by this (rounding up)")
      ->check(CLI::Range(1.0, 1e9));
  cmd->add_option("--max-requests", f->max_requests, "executed replay: at most this many rows");
  cmd->add_option("--memory-budget-mb", f->memory_budget_mb,
                  "executed replay: memory probe = gear memory / this budget")
      ->check(CLI::NonNegativeNumber);
  return [f] { return RunReplay(*f); };
}

}  // namespace gearbox::tools
