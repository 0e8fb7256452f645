// `gearbox validate`: checks a config (and a trace against it) the way
// `replay` would, and runs nothing. One line per problem; exit 2 on any.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gearbox/config.h"
#include "gearbox/replay.h"
#include "gearbox/trace.h"
#include "tools/commands.h"

namespace gearbox::tools {
namespace {

struct ValidateFlags {
  std::string config;
  std::string trace;
};

// The trace's problems against a config that loaded: its rows, then each
// policy as replay would run it (the config's own scheme).
std::vector<std::string> TraceProblems(const RuntimeConfig& config, const std::string& path) {
  std::vector<std::string> dims;
  for (const auto& d : config.dims) dims.push_back(d.name);
  auto trace = LoadTraceFile(path, dims);
  if (!trace.ok()) return {std::string(trace.status().message())};
  std::vector<std::string> problems;
  for (UpdatePolicy policy :
       {UpdatePolicy::kStatic, UpdatePolicy::kAdaptive, UpdatePolicy::kReplan}) {
    ReplayRunOptions run;
    run.policy = policy;
    if (auto s = CheckReplayRun(config, *trace, run); !s.ok()) {
      problems.push_back(std::string(UpdatePolicyName(policy)) + ": " + std::string(s.message()));
    }
  }
  return problems;
}

// Every problem of the config (one line each), then of the trace: against
// the config when it has none, else (the columns unknown) its syntax alone.
std::vector<std::string> AllProblems(const ValidateFlags& f) {
  std::vector<std::string> problems;
  for (const absl::Status& s : ConfigFileProblems(f.config)) problems.emplace_back(s.message());
  if (f.trace.empty()) return problems;
  if (!problems.empty()) {
    auto trace = LoadTraceFile(f.trace, {});
    if (!trace.ok()) problems.emplace_back(trace.status().message());
    return problems;
  }
  auto config = LoadConfigFile(f.config);
  if (!config.ok()) return {std::string(config.status().message())};
  return TraceProblems(*config, f.trace);
}

int RunValidate(const ValidateFlags& f) {
  const std::vector<std::string> problems = AllProblems(f);
  for (const std::string& p : problems) std::fprintf(stderr, "gearbox validate: %s\n", p.c_str());
  if (!problems.empty()) return 2;
  std::printf("gearbox validate: %s%s%s: ok\n", f.config.c_str(), f.trace.empty() ? "" : " with ",
              f.trace.c_str());
  return 0;
}

}  // namespace

Command AddValidateCommand(CLI::App& app) {
  auto f = std::make_shared<ValidateFlags>();
  CLI::App* cmd =
      app.add_subcommand("validate", "check a config (and a trace against it); runs nothing");
  cmd->add_option("--config", f->config, "config JSON")->required();
  cmd->add_option("--trace", f->trace, "trace CSV to check against the config");
  return [f] { return RunValidate(*f); };
}

}  // namespace gearbox::tools
