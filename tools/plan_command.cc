// `gearbox plan`: the offline-optimal K gears of one dimension of a trace.
#include <cstdio>
#include <memory>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gearbox/gear_set.h"
#include "gearbox/planners.h"
#include "gearbox/trace.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace gearbox::tools {
namespace {

struct PlanFlags {
  std::string trace;
  std::string dim;
  int gears = 0;
  std::string splittable = "auto";
  bool json = false;
};

int RunPlan(const PlanFlags& f) {
  auto trace = LoadTraceFile(f.trace, {});
  if (!trace.ok()) {
    std::fprintf(stderr, "gearbox plan: %s\n", std::string(trace.status().message()).c_str());
    return 2;
  }
  int d = -1;
  for (size_t i = 0; i < trace->dimensions.size(); ++i) {
    if (trace->dimensions[i] == f.dim) d = static_cast<int>(i);
  }
  if (d < 0) {
    std::fprintf(stderr, "gearbox plan: --dim: \"%s\" is not a column of %s; columns: %s\n",
                 f.dim.c_str(), f.trace.c_str(), fmt::format("{}", fmt::join(trace->dimensions, ", ")).c_str());
    return 2;
  }
  bool splittable = DefaultSplittable(f.dim);
  if (f.splittable == "true") splittable = true;
  else if (f.splittable == "false") splittable = false;
  else if (f.splittable != "auto") {
    std::fprintf(stderr, "gearbox plan: --splittable: \"%s\" is not allowed; true, false or auto\n",
                 f.splittable.c_str());
    return 2;
  }
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < trace->rows(); ++i) sizes.push_back(trace->row(i)[d]);
  auto plan = OptimalGears(SizeHistogram::FromSizes(sizes), f.gears, splittable);
  if (!plan.ok()) {
    std::fprintf(stderr, "gearbox plan: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  if (f.json) {
    nlohmann::ordered_json j;
    j["dim"] = f.dim;
    j["requested_gears"] = f.gears;
    j["gears"] = plan->gears;
    j["padding_waste"] = plan->waste();
    j["padded"] = plan->padded;
    j["raw"] = plan->raw;
    j["splittable"] = splittable;
    j["search"] = plan->search;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: %zu offline-optimal gears (%s; %s)\n  %s\n  padding waste %.2f%%\n",
                f.dim.c_str(), plan->gears.size(), splittable ? "splittable" : "not splittable",
                plan->search.c_str(), fmt::format("{}", fmt::join(plan->gears, ",")).c_str(),
                100.0 * plan->waste());
  }
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "offline-optimal gears of one dimension of a trace");
  cmd->add_option("--trace", f->trace, "trace CSV")->required();
  cmd->add_option("--dim", f->dim, "dimension (column) to plan")->required();
  cmd->add_option("--gears", f->gears, "number of gears K")->required()->check(CLI::Range(1, 4096));
  cmd->add_option("--splittable", f->splittable, "true, false, or auto (BATCHSIZE splits)");
  cmd->add_flag("--json", f->json, "print one JSON object");
  return [f] { return RunPlan(*f); };
}

}  // namespace gearbox::tools
