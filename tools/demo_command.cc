// `gearbox demo`: a synthetic request stream through the real runtime on a
// virtual clock, printing the gear set as the worker's schedule evolves it.
// The traffic shifts halfway (small batches and short prompts, then larger
// ones), so the run shows both eviction and addition.
#include <cstdio>
#include <random>

#include "fmt/format.h"
#include "gearbox/gearbox.h"
#include "tools/commands.h"

namespace gearbox::tools {
namespace {

struct DemoFlags {
  double minutes = 60;
  double rate = 20;
  uint64_t seed = 1;
  bool json = false;
};

int RunDemo(const DemoFlags& flags) {
  ManualClock clock(0.0);
  FixedMemoryProbe probe(0.5);
  // At most 1e8 requests (about a minute): minutes x rate bounds the run.
  if (flags.minutes * 60.0 * flags.rate > 1e8) {
    std::fprintf(stderr, "gearbox demo: --minutes %g at --rate %g is %g requests; at most 1e8\n",
                 flags.minutes, flags.rate, flags.minutes * 60.0 * flags.rate);
    return 2;
  }
  GraphResourcePool pool;
  RuntimeOptions options;
  options.clock = &clock;
  options.memory_probe = &probe;
  options.pool = &pool;
  options.start_worker = false;  // the demo drives the worker's checks on virtual time
  if (flags.json) {
    options.on_update = [](const UpdateRecord& r) {
      std::printf("%s\n", UpdateRecordToJson(r).c_str());
    };
  }
  auto runtime = AdaptiveGearRuntime::Create({{"BATCHSIZE", *MakeTimesGears(1, 64), true, false},
                                              {"SEQLEN", *MakeTimesGears(16, 4096), false, true}},
                                             options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "gearbox demo: %s\n", std::string(runtime.status().message()).c_str());
    return 2;
  }
  AdaptiveGearRuntime& rt = **runtime;
  GearUpdateWorker& worker = *rt.worker();
  std::mt19937_64 rng(flags.seed);
  const double end = flags.minutes * 60.0;
  const double check = rt.options().check_interval_seconds;
  double next_check = check;
  double padded = 0, useful = 0;
  uint64_t requests = 0;
  if (!flags.json) std::printf("t=%6.0fs  %s\n", 0.0, rt.GetSnapshot()->DebugString().c_str());
  std::exponential_distribution<double> gap(flags.rate);
  for (double t = gap(rng); t < end; t += gap(rng)) {
    while (t >= next_check) {
      clock.Set(next_check);
      const uint64_t before = rt.counters().updates_changed;
      worker.CheckOnce(next_check);
      if (!flags.json && rt.counters().updates_changed != before) {
        std::printf("t=%6.0fs  %s\n", next_check, rt.GetSnapshot()->DebugString().c_str());
      }
      next_check += check;
    }
    clock.Set(t);
    const bool later = t > end / 2;
    std::lognormal_distribution<double> seq(later ? 6.5 : 5.0, 0.6);
    std::geometric_distribution<int64_t> batch(later ? 0.08 : 0.3);
    const int64_t raw[] = {1 + batch(rng), std::max<int64_t>(1, static_cast<int64_t>(seq(rng)))};
    SnapshotRef snap = rt.GetSnapshot();
    Plan plan;
    if (!MakePlan(*snap, raw, &plan).ok()) continue;
    rt.RecordPlan(plan, t);
    padded += plan.padded_volume();
    useful += plan.raw_volume();
    ++requests;
  }
  if (!flags.json) {
    std::printf("%llu requests, padding waste %.1f%%, %llu updates (%llu changed the gears)\n",
                static_cast<unsigned long long>(requests), 100.0 * (padded / useful - 1.0),
                static_cast<unsigned long long>(rt.counters().updates),
                static_cast<unsigned long long>(rt.counters().updates_changed));
  }
  return 0;
}

}  // namespace

Command AddDemoCommand(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd =
      app.add_subcommand("demo", "synthetic traffic through the runtime on a virtual clock");
  cmd->add_option("--minutes", flags->minutes, "virtual minutes to run")
      ->check(NumberIn(0, 1e4, "minutes in (0, 10000]", true));
  cmd->add_option("--rate", flags->rate, "requests per second")
      ->check(NumberIn(0, 1e5, "requests per second in (0, 100000]", true));
  cmd->add_option("--seed", flags->seed, "random seed");
  cmd->add_flag("--json", flags->json, "print each update's record as a JSON line");
  return [flags] { return RunDemo(*flags); };
}

}  // namespace gearbox::tools
