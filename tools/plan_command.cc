// `gearbox plan`: offline gear planning for one dimension of a trace.
//   --gears K               exactly K gears (at most), minimal padding (dp) or by rule
//   --budget N              the count (1..N) and gears minimising the cost model
//   --method M              uniform | quantile | kmeans | dp (default dp)
//   --compare               every method side by side
//   --emit S                the plan as vllm / sglang / trtllm configuration
//                           on stdout (and nothing else there); see
//                           include/gearbox/server_config.h
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gearbox/gear_set.h"
#include "gearbox/planners.h"
#include "gearbox/server_config.h"
#include "gearbox/trace.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace gearbox::tools {
namespace {

int Fail(const std::string& message);

struct PlanFlags {
  std::string trace;
  std::string dim;
  int gears = 0;
  int budget = 0;
  std::string method = "dp";
  bool compare = false;
  std::string splittable = "auto";
  bool json = false;
  uint64_t seed = 1;
  GearCostModel cost;
  std::string weights;
  std::string joint;                                 // "A,B": two-dimensional schemes
  std::string schemes = "independent,joint,sparse";  // with --joint
  int graphs = 0;
  // --emit: the plan in an inference server's syntax.
  std::string emit;
  std::string vllm_syntax = "compilation-config";
  ServerConfigOptions server;
};

int RunJoint(const PlanFlags& f) {
  const size_t comma = f.joint.find(',');
  if (comma == std::string::npos)
    return Fail(fmt::format("--joint: \"{}\" is not allowed; two columns A,B", f.joint));
  const std::string a = f.joint.substr(0, comma), b = f.joint.substr(comma + 1);
  auto trace = LoadTraceFile(f.trace, {});
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  int ia = -1, ib = -1;
  for (size_t i = 0; i < trace->dimensions.size(); ++i) {
    if (trace->dimensions[i] == a) ia = static_cast<int>(i);
    if (trace->dimensions[i] == b) ib = static_cast<int>(i);
  }
  if (ia < 0 || ib < 0 || ia == ib) {
    return Fail(fmt::format("--joint: \"{}\" must name two different columns of {}; columns: {}",
                            f.joint, f.trace, fmt::join(trace->dimensions, ", ")));
  }
  if (f.graphs < 1) return Fail("--joint needs --graphs G (the compiled-graph budget)");
  std::map<std::pair<int64_t, int64_t>, double> counts;
  for (size_t i = 0; i < trace->rows(); ++i) counts[{trace->row(i)[ia], trace->row(i)[ib]}] += 1;
  std::vector<Size2D> sizes;
  for (const auto& [k, n] : counts) sizes.push_back({k.first, k.second, n});
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  std::string text =
      fmt::format("{} x {}: {} rows, {} distinct pairs, at most {} compiled graphs\n", a, b,
                  trace->rows(), sizes.size(), f.graphs);
  std::vector<GearScheme> schemes;
  std::stringstream names(f.schemes);
  for (std::string name; std::getline(names, name, ',');) {
    auto scheme = ParseGearScheme(name, "--scheme");
    if (!scheme.ok()) return Fail(std::string(scheme.status().message()));
    schemes.push_back(*scheme);
  }
  if (schemes.empty()) return Fail("--scheme: name at least one of independent, joint, sparse");
  for (GearScheme scheme : schemes) {
    auto p = PlanJoint(sizes, f.graphs, scheme, f.seed);
    if (!p.ok()) return Fail(std::string(p.status().message()));
    text += fmt::format("  {:<12} {:>4} graphs  waste {:>8.2f}%  uncompiled requests {:>6.2f}%\n",
                        GearSchemeName(scheme), p->graphs.size(), 100.0 * p->waste(),
                        100.0 * p->fallback_share);
    nlohmann::ordered_json j;
    j["scheme"] = GearSchemeName(scheme);
    j["graphs"] = p->graphs.size();
    j["padding_waste"] = p->waste();
    j["uncompiled_share"] = p->fallback_share;
    j["combinations"] = p->graphs;
    all.push_back(j);
  }
  if (f.json) {
    std::printf("%s\n", all.dump().c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

int Fail(const std::string& message);

int Fail(const std::string& message) {
  std::fprintf(stderr, "gearbox plan: %s\n", message.c_str());
  return 2;
}

// --emit: one plan, printed alone on stdout; the server options parsed.
absl::Status CheckEmitFlags(PlanFlags& f) {
  if (f.emit.empty()) {
    const char* given = f.server.max_num_seqs > 0               ? "--max-num-seqs"
                        : f.server.max_num_batched_tokens > 0   ? "--max-num-batched-tokens"
                        : f.server.speculative_tokens > 0       ? "--speculative-tokens"
                        : f.server.clip_to_max                  ? "--clip-to-max"
                        : f.vllm_syntax != "compilation-config" ? "--vllm-syntax"
                                                                : nullptr;
    if (given != nullptr) {
      return absl::InvalidArgumentError(
          fmt::format("{} applies to --emit vllm|sglang|trtllm only; add --emit", given));
    }
    return absl::OkStatus();
  }
  auto server = ParseServerKind(f.emit, "--emit");
  if (!server.ok()) return server.status();
  auto syntax = ParseVllmSyntax(f.vllm_syntax, "--vllm-syntax");
  if (!syntax.ok()) return syntax.status();
  f.server.server = *server;
  f.server.vllm_syntax = *syntax;
  if (*server != ServerKind::kVllm && *syntax != VllmSyntax::kCompilationConfig) {
    return absl::InvalidArgumentError(
        fmt::format("--vllm-syntax {} applies to --emit vllm only", f.vllm_syntax));
  }
  if (!f.joint.empty()) {
    return absl::InvalidArgumentError("--emit plans one dimension; drop --joint");
  }
  if (f.compare) return absl::InvalidArgumentError("--emit prints one plan; drop --compare");
  if (f.json) {
    return absl::InvalidArgumentError("--emit and --json both set stdout's format; give one");
  }
  return absl::OkStatus();
}

// Whether sizes above the largest gear split into chunks. The servers run a
// batch above their largest CUDA graph without one instead, so a plan for
// --emit covers the largest batch unless --splittable true says otherwise.
absl::StatusOr<bool> Splittable(const PlanFlags& f) {
  if (f.splittable == "true") return true;
  if (f.splittable == "false") return false;
  if (f.splittable != "auto") {
    return absl::InvalidArgumentError(
        fmt::format("--splittable: \"{}\" is not allowed; true, false or auto", f.splittable));
  }
  return f.emit.empty() && DefaultSplittable(f.dim);
}

// Prints the plan as server configuration: stdout holds the configuration
// alone (for pasting, a file or $(...)); the summary goes to stderr.
int EmitPlan(const PlanFlags& f, const GearPlan& plan) {
  auto text = EmitServerConfig(plan.gears, f.server);
  if (!text.ok()) return Fail(std::string(text.status().message()));
  auto sizes = ServerSizes(plan.gears, f.server);
  if (!sizes.ok()) return Fail(std::string(sizes.status().message()));
  const std::string gears = fmt::format("{}", fmt::join(plan.gears, ","));
  const std::string server_sizes = fmt::format("{}", fmt::join(*sizes, ","));
  std::fprintf(stderr, "gearbox plan: %s: %zu gears %s (padding waste %.2f%%) -> %s: %s\n",
               f.dim.c_str(), plan.gears.size(), gears.c_str(), 100.0 * plan.waste(),
               std::string(ServerKindName(f.server.server)).c_str(), server_sizes.c_str());
  if (f.dim != "BATCHSIZE") {
    std::fprintf(stderr,
                 "gearbox plan: warning: the servers' lists count sequences per batch; --dim %s "
                 "is not BATCHSIZE\n",
                 f.dim.c_str());
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}

int RunPlan(PlanFlags f) {
  if (auto s = CheckEmitFlags(f); !s.ok()) return Fail(std::string(s.message()));
  if (!f.joint.empty()) return RunJoint(f);
  if (f.dim.empty()) return Fail("--dim is required (or --joint A,B with --graphs G)");
  if ((f.gears > 0) == (f.budget > 0)) return Fail("give exactly one of --gears K and --budget N");
  auto trace = LoadTraceFile(f.trace, {});
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  int d = -1;
  for (size_t i = 0; i < trace->dimensions.size(); ++i) {
    if (trace->dimensions[i] == f.dim) d = static_cast<int>(i);
  }
  if (d < 0) {
    return Fail(fmt::format("--dim: \"{}\" is not a column of {}; columns: {}", f.dim, f.trace,
                            fmt::join(trace->dimensions, ", ")));
  }
  auto split = Splittable(f);
  if (!split.ok()) return Fail(std::string(split.status().message()));
  const bool splittable = *split;
  if (!f.weights.empty()) {
    std::stringstream in(f.weights);
    std::string item;
    std::vector<double> w;
    while (std::getline(in, item, ',')) {
      try {
        size_t used = 0;
        const double v = std::stod(item, &used);
        if (used != item.size() || !std::isfinite(v)) throw std::invalid_argument(item);
        w.push_back(v);
      } catch (const std::exception&) {
        w.clear();
        break;
      }
    }
    if (w.size() != 3)
      return Fail(fmt::format("--weights: \"{}\" is not allowed; alpha,beta,gamma", f.weights));
    f.cost.alpha = w[0];
    f.cost.beta = w[1];
    f.cost.gamma = w[2];
  }
  if (auto s = ValidateCostModel(f.cost); !s.ok()) return Fail(std::string(s.message()));
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < trace->rows(); ++i) sizes.push_back(trace->row(i)[d]);
  const SizeHistogram hist = SizeHistogram::FromSizes(sizes);

  std::vector<PlanMethod> methods;
  if (f.compare) {
    methods = {PlanMethod::kUniform, PlanMethod::kQuantile, PlanMethod::kKMeans, PlanMethod::kDp};
  } else {
    auto m = ParsePlanMethod(f.method);
    if (!m.ok()) return Fail(std::string(m.status().message()));
    methods = {*m};
  }
  std::vector<GearPlan> plans;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  std::string text = fmt::format("{}: {} requests, sizes {}..{}\n", f.dim, trace->rows(),
                                 hist.values.front(), hist.values.back());
  for (PlanMethod method : methods) {
    GearPlan plan;
    CostBreakdown cost;
    if (f.budget > 0) {
      auto p = PlanWithCostModel(hist, f.budget, method, f.cost, f.seed);
      if (!p.ok()) return Fail(std::string(p.status().message()));
      plan = p->plan;
      cost = p->cost;
    } else if (method == PlanMethod::kDp) {
      auto p = OptimalGears(hist, f.gears, splittable);
      if (!p.ok()) return Fail(std::string(p.status().message()));
      plan = *p;
      if (!splittable) cost = *EvaluateCost(hist, plan.gears, f.cost);
    } else {
      auto g = PlanGears(hist, f.gears, method, f.seed);
      if (!g.ok()) return Fail(std::string(g.status().message()));
      plan.gears = *g;
      plan.raw = hist.total_size();
      plan.padded = *PaddedTotal(hist, plan.gears, false);
      plan.search = "rule";
      cost = *EvaluateCost(hist, plan.gears, f.cost);
    }
    nlohmann::ordered_json j;
    j["dim"] = f.dim;
    j["method"] = PlanMethodName(method);
    j["gears"] = plan.gears;
    j["padding_waste"] = plan.waste();
    j["cost"] = {{"compile_seconds", cost.compile_seconds},
                 {"padding_seconds", cost.padding_seconds},
                 {"memory_gib", cost.memory_gib},
                 {"total", cost.total}};
    j["search"] = plan.search;
    all.push_back(j);
    plans.push_back(plan);
    text += fmt::format(
        "  {:<9} {:>3} gears  waste {:>7.2f}%  cost {:>10.3f} (compile {:.1f} s, padding {:.2f} s, "
        "memory {:.3f} GiB)\n    {}\n",
        PlanMethodName(method), plan.gears.size(), 100.0 * plan.waste(), cost.total,
        cost.compile_seconds, cost.padding_seconds, cost.memory_gib,
        fmt::format("{}", fmt::join(plan.gears, ",")));
  }
  for (const auto& j : all) {
    if (j["gears"].size() > static_cast<size_t>(kMaxGearsPerDimension)) {
      std::fprintf(
          stderr,
          "gearbox plan: warning: %s plans %zu gears; the runtime holds at most %d per dimension\n",
          j["method"].get<std::string>().c_str(), j["gears"].size(), kMaxGearsPerDimension);
    }
  }
  if (!f.emit.empty()) return EmitPlan(f, plans.front());
  if (f.json) {
    std::printf("%s\n", (all.size() == 1 ? all[0] : all).dump().c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "offline gear planning for one dimension of a trace");
  cmd->add_option("--trace", f->trace, "trace CSV")->required();
  cmd->add_option("--dim", f->dim, "dimension (column) to plan");
  cmd->add_option("--joint", f->joint,
                  "two columns A,B: compare independent, joint and sparse 2-D gears");
  cmd->add_option("--graphs", f->graphs, "with --joint: the compiled-graph budget")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--scheme", f->schemes,
                  "with --joint: the schemes to plan, comma-separated (default all three)");
  cmd->add_option("--gears", f->gears, "plan exactly K gears")->check(CLI::Range(1, 4096));
  cmd->add_option("--budget", f->budget, "choose the count (1..N) by the cost model")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--method", f->method, "uniform, quantile, kmeans or dp");
  cmd->add_flag("--compare", f->compare, "every method side by side");
  cmd->add_option("--splittable", f->splittable,
                  "true, false, or auto (BATCHSIZE splits); dp with --gears only");
  cmd->add_option("--seed", f->seed, "k-means++ seed");
  cmd->add_option("--compile-seconds", f->cost.compile_seconds,
                  "cost model: compile time per gear");
  cmd->add_option("--seconds-per-unit", f->cost.seconds_per_unit,
                  "cost model: run time per unit of size");
  cmd->add_option("--seconds-per-run", f->cost.seconds_per_run,
                  "cost model: run time of every executed variant whatever its size");
  cmd->add_option("--runtime-exponent", f->cost.runtime_exponent,
                  "cost model: run time ~ size^exponent");
  cmd->add_option("--memory-fixed-bytes", f->cost.memory_fixed_bytes, "cost model: bytes per gear");
  cmd->add_option("--memory-bytes-per-unit", f->cost.memory_bytes_per_unit,
                  "cost model: bytes per unit of gear size");
  cmd->add_option("--weights", f->weights,
                  "cost model: alpha,beta,gamma (compile, padding runtime, memory)");
  cmd->add_flag("--json", f->json, "print JSON");
  cmd->add_option("--emit", f->emit,
                  "print the plan as vllm, sglang or trtllm configuration (stdout: that alone)");
  cmd->add_option("--vllm-syntax", f->vllm_syntax,
                  "with --emit vllm: compilation-config (default), cuda-graph-sizes or "
                  "cudagraph-capture-sizes");
  cmd->add_option("--max-num-seqs,--max-running-requests,--max-batch-size", f->server.max_num_seqs,
                  "with --emit: the server's most sequences per batch (vLLM --max-num-seqs, "
                  "SGLang --max-running-requests, TensorRT-LLM --max_batch_size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--max-num-batched-tokens", f->server.max_num_batched_tokens,
                  "with --emit vllm: vLLM's --max-num-batched-tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--speculative-tokens", f->server.speculative_tokens,
                  "with --emit vllm: num_speculative_tokens (sizes become B x (1 + N) tokens)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->add_flag("--clip-to-max", f->server.clip_to_max,
                "with --emit: drop sizes above the server's cap and add the cap (else an error)");
  return [f] { return RunPlan(*f); };
}

}  // namespace gearbox::tools
