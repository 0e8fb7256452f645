// Fuzzes the whole `gearbox` command line (tools/cli.h). Two input forms:
//   * a list of arguments, one per line, run on the small config and trace
//     written at start-up (c.json, t.csv, a.csv);
//   * "@pair\n<config JSON>\n@@\n<trace CSV>": the pair is written to
//     p.json / p.csv and replayed with every policy (and validated).
// Every command line must return a documented exit code (never crash, hang
// or abort); libFuzzer's -timeout and -rss_limit_mb bound each input, and
// the replay bounds (kMaxReplayUpdates, kMaxTimelineBuckets) keep every
// accepted pair small.
//
// Run it with -artifact_prefix=<dir>/: it changes into its own directory.
// Safety: the harness works in a private temporary directory and drops any
// argument that could reach outside it (a '/', a leading '-' followed by a
// path is still relative) or start heavy or external work (--execute, --plot,
// demo), so outputs the fuzzer names are only ever written in that directory.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/cli.h"

namespace {

// Written once: the files the corpus names (c.json, t.csv, a.csv).
void SetUpDirectory() {
  static bool done = false;
  if (done) return;
  done = true;
  std::string pattern =
      (std::filesystem::temp_directory_path() / "gearbox-cli-fuzz-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr || chdir(pattern.c_str()) != 0) std::abort();
  // Removed at exit (libFuzzer's artifacts go to -artifact_prefix, not here).
  static const std::string directory = pattern;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(directory, ec);
  });
  std::ofstream("c.json") << R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16]}],
    "adaptive": {"check_interval_seconds": 5}, "replan": {"warmup_check_seconds": 5}})";
  std::ofstream trace("t.csv");
  trace << "t,SEQLEN\n";
  for (int i = 0; i < 50; ++i) trace << i << "," << (1 + i % 20) << "\n";
  std::ofstream("a.csv")
      << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n"
         "2023-11-16 18:15:47.0,396,109\n";
  // The tools' tables go to stdout: keep the fuzzer's output readable.
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, STDOUT_FILENO);
}

bool Allowed(std::string_view arg) {
  if (arg.find('/') != std::string_view::npos) return false;
  for (std::string_view banned : {"--execute", "--plot", "demo"}) {
    if (arg.find(banned) != std::string_view::npos) return false;
  }
  // CLI11 also reads "--opt=value" and "-abc" forms; none of the above may hide there.
  return arg.size() <= 256;
}

int Run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return gearbox::tools::RunCli(static_cast<int>(args.size()), argv.data());
}

void CheckExitCode(int code) {
  if (code < 0 || code > 3) __builtin_trap();  // the documented exit codes only
}

// "@pair\n<config>\n@@\n<trace>": validate and replay the pair.
void RunPair(std::string_view text) {
  const size_t split = text.find("\n@@\n");
  if (split == std::string_view::npos) return;
  std::ofstream("p.json", std::ios::trunc) << text.substr(0, split);
  std::ofstream("p.csv", std::ios::trunc) << text.substr(split + 4);
  CheckExitCode(Run({"gearbox", "validate", "--config", "p.json", "--trace", "p.csv"}));
  CheckExitCode(Run({"gearbox", "replay", "--config", "p.json", "--trace", "p.csv", "--policy",
                     "static,adaptive,replan", "--bucket-seconds", "3600", "--max-updates", "2000",
                     "--summary", "p.out.json"}));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SetUpDirectory();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.substr(0, 6) == "@pair\n") {
    RunPair(text.substr(6));
    return 0;
  }
  std::vector<std::string> args = {"gearbox"};
  size_t start = 0;
  while (start <= text.size() && args.size() < 32) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view arg = text.substr(start, end - start);
    if (!Allowed(arg)) return 0;
    args.emplace_back(arg);
    start = end + 1;
  }
  CheckExitCode(Run(std::move(args)));
  return 0;
}
