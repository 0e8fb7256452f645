// `gearbox trace convert`: public request traces into the trace CSV.
// `gearbox trace synth`: a named synthetic scenario (gearbox/trace_synth.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gearbox/trace_convert.h"
#include "gearbox/trace_synth.h"
#include "tools/commands.h"
#include "tools/output.h"

namespace gearbox::tools {
namespace {

struct ConvertFlags {
  std::string format;
  std::string input;
  std::string output;
  std::string view = "prefill";
  double rate = 1.0;
  uint64_t seed = 1;
  double step_ms = DecodeSimulation{}.step_seconds * 1000.0;
  int64_t max_running = DecodeSimulation{}.max_running;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "gearbox trace convert: %s\n", std::string(s.message()).c_str());
  return 2;
}

int RunConvert(const ConvertFlags& f) {
  if (f.format != "azure" && f.format != "mooncake" && f.format != "lengths") {
    return Fail(absl::InvalidArgumentError("--format: \"" + f.format +
                                           "\" is not allowed; azure, mooncake or lengths"));
  }
  if (f.view != "prefill" && f.view != "decode") {
    return Fail(
        absl::InvalidArgumentError("--view: \"" + f.view + "\" is not allowed; prefill or decode"));
  }
  std::error_code ec;
  if (std::filesystem::exists(f.input, ec) && !std::filesystem::is_regular_file(f.input, ec)) {
    return Fail(absl::InvalidArgumentError(
        f.input + ": not a regular file (a directory, device or pipe); name a file"));
  }
  std::ifstream in(f.input);
  if (!in) return Fail(absl::NotFoundError(f.input + ": cannot open"));
  if (auto s = CheckOutputPaths({{"--input", f.input}}, {{"--output", f.output}}); !s.ok())
    return Fail(s);
  AtomicFile out(f.output);
  if (auto s = out.status(); !s.ok()) return Fail(s);
  absl::StatusOr<std::vector<RequestRecord>> requests;
  if (f.format == "azure") {
    requests = ReadAzureTrace(in, f.input);
  } else if (f.format == "mooncake") {
    requests = ReadMooncakeTrace(in, f.input);
  } else if (f.format == "lengths") {
    requests = ReadLengthList(in, f.input, f.rate, f.seed);
  } else {
    return Fail(absl::InvalidArgumentError("--format: \"" + f.format +
                                           "\" is not allowed; azure, mooncake or lengths"));
  }
  if (!requests.ok()) return Fail(requests.status());
  absl::StatusOr<Trace> trace;
  if (f.view == "prefill") {
    trace = PrefillView(*requests);
  } else if (f.view == "decode") {
    trace =
        DecodeView(*requests, {.step_seconds = f.step_ms / 1000.0, .max_running = f.max_running});
  } else {
    return Fail(
        absl::InvalidArgumentError("--view: \"" + f.view + "\" is not allowed; prefill or decode"));
  }
  if (!trace.ok()) return Fail(trace.status());
  WriteTraceCsv(*trace, out.stream());
  if (auto s = out.Commit(); !s.ok()) return Fail(s);
  std::fprintf(stderr, "gearbox trace convert: %zu requests -> %zu rows (%s view) in %s\n",
               requests->size(), trace->rows(), f.view.c_str(), f.output.c_str());
  return 0;
}

struct SynthFlags {
  bool list = false;
  std::string scenario;
  std::string output;
  std::string view = "prefill";
  std::string data_dir = "data";
  SynthOptions options;
  double step_ms = 20.0;
  int64_t max_running = 256;
};

int SynthFail(const absl::Status& s) {
  std::fprintf(stderr, "gearbox trace synth: %s\n", std::string(s.message()).c_str());
  return 2;
}

int ListScenarios() {
  for (const SynthScenario& s : SynthScenarios()) {
    std::printf("%-20s %-10s %s\n", s.name.c_str(), IsStationary(s) ? "stationary" : "changing",
                s.description.c_str());
  }
  return 0;
}

int RunSynth(const SynthFlags& f) {
  if (f.list) return ListScenarios();
  if (f.scenario.empty())
    return SynthFail(absl::InvalidArgumentError("--scenario: name one (--list)"));
  if (f.output.empty())
    return SynthFail(absl::InvalidArgumentError("--output: name the trace CSV to write"));
  if (f.view != "prefill" && f.view != "decode") {
    return SynthFail(
        absl::InvalidArgumentError("--view: \"" + f.view + "\" is not allowed; prefill or decode"));
  }
  auto scenario = FindSynthScenario(f.scenario);
  if (!scenario.ok()) return SynthFail(scenario.status());
  if (auto s = CheckOutputPaths({}, {{"--output", f.output}}); !s.ok()) return SynthFail(s);
  auto pools = LoadLengthPools(f.data_dir);
  if (!pools.ok()) return SynthFail(pools.status());
  auto requests = SynthRequests(*scenario, *pools, f.options);
  if (!requests.ok()) return SynthFail(requests.status());
  if (requests->empty())
    return SynthFail(
        absl::InvalidArgumentError("--rate: no requests drawn; raise --rate or --hours"));
  absl::StatusOr<Trace> trace;
  if (f.view == "prefill") {
    trace = PrefillView(*requests);
  } else {
    trace = SynthDecodeView(*requests, {f.step_ms / 1000.0, f.max_running}, f.options.max_rows);
  }
  if (!trace.ok()) return SynthFail(trace.status());
  AtomicFile out(f.output);
  if (auto s = out.status(); !s.ok()) return SynthFail(s);
  WriteTraceCsv(*trace, out.stream());
  if (auto s = out.Commit(); !s.ok()) return SynthFail(s);
  std::fprintf(stderr,
               "gearbox trace synth: %s seed %llu: %zu requests -> %zu rows (%s view) in %s\n",
               f.scenario.c_str(), static_cast<unsigned long long>(f.options.seed),
               requests->size(), trace->rows(), f.view.c_str(), f.output.c_str());
  return 0;
}

void AddSynth(CLI::App& trace, const std::shared_ptr<SynthFlags>& f) {
  CLI::App* cmd = trace.add_subcommand(
      "synth", "write a named synthetic scenario (real length distributions, realistic arrivals)");
  cmd->add_flag("--list", f->list,
                "print every scenario: its name, whether its traffic is stationary, a one-line "
                "description");
  cmd->add_option("--scenario", f->scenario, "scenario name (--list)");
  cmd->add_option("--output", f->output, "trace CSV to write");
  cmd->add_option("--view", f->view, "prefill (t,SEQLEN) or decode (t,BATCHSIZE,SEQLEN)");
  cmd->add_option("--seed", f->options.seed, "random seed (same seed, same bytes)");
  cmd->add_option("--hours", f->options.hours, "trace length in hours (default: the scenario's)")
      ->check(NumberIn(0, 168, "hours in (0, 168]", true));
  cmd->add_option("--rate", f->options.rate,
                  "mean requests per second, every tenant scaled (default: the scenario's)")
      ->check(NumberIn(0, 1e5, "mean requests per second in (0, 100000]", true));
  cmd->add_option("--max-rows", f->options.max_rows,
                  "refuse a trace above this many rows (default 20000000)")
      ->check(NumberIn(1, static_cast<double>(kMaxSynthMaxRows), "an integer in [1, 200000000]"));
  cmd->add_option("--data-dir", f->data_dir,
                  "directory of the bundled length distributions (default data)");
  cmd->add_option("--step-ms", f->step_ms, "decode: step time in milliseconds")
      ->check(NumberIn(0, 1e9, "milliseconds > 0", true));
  cmd->add_option("--max-running", f->max_running, "decode: most running sequences")
      ->check(NumberIn(1, 1e6, "sequences in [1, 1000000]"));
}

}  // namespace

Command AddTraceCommand(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
  auto synth = std::make_shared<SynthFlags>();
  CLI::App* trace = app.add_subcommand("trace", "trace utilities");
  CLI::App* cmd = trace->add_subcommand("convert", "convert a public trace into the trace CSV");
  trace->require_subcommand(1);
  cmd->add_option("--format", f->format, "azure, mooncake or lengths")->required();
  cmd->add_option("--input", f->input, "input file")->required();
  cmd->add_option("--output", f->output, "trace CSV to write")->required();
  cmd->add_option("--view", f->view, "prefill (t,SEQLEN) or decode (t,BATCHSIZE,SEQLEN)");
  cmd->add_option("--rate", f->rate, "lengths: arrivals per second (Poisson)")
      ->check(NumberIn(0, 1e9, "arrivals per second in (0, 1e9]", true));
  cmd->add_option("--seed", f->seed, "lengths: arrival process seed");
  cmd->add_option("--step-ms", f->step_ms, "decode: step time in milliseconds")
      ->check(NumberIn(0, 1e9, "milliseconds > 0", true));
  cmd->add_option("--max-running", f->max_running, "decode: most running sequences")
      ->check(NumberIn(1, 1e6, "sequences in [1, 1000000]"));
  AddSynth(*trace, synth);
  CLI::App* synth_cmd = trace->get_subcommand("synth");
  return [f, synth, synth_cmd] { return synth_cmd->parsed() ? RunSynth(*synth) : RunConvert(*f); };
}

}  // namespace gearbox::tools
