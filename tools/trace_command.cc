// `gearbox trace convert`: public request traces into the trace CSV.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gearbox/trace_convert.h"
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

}  // namespace

Command AddTraceCommand(CLI::App& app) {
  auto f = std::make_shared<ConvertFlags>();
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
  return [f] { return RunConvert(*f); };
}

}  // namespace gearbox::tools
