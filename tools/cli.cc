// The gearbox command line: subcommands, parse errors, exit codes.
#include "CLI/CLI.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "tools/commands.h"

namespace gearbox::tools {
namespace {

// Exit codes (README "Replaying your traffic"): 0 done, 2 bad input or a
// command-line error, 3 replay finished but rejected too many requests.
constexpr int kExitBadInput = 2;

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// An unknown first word: the closest command, when one is close.
bool ReportUnknownCommand(int argc, char** argv, const std::map<std::string, Command>& commands) {
  if (argc < 2 || argv[1][0] == '-' || commands.count(argv[1])) return false;
  const std::string word = argv[1];
  std::string best;
  size_t best_distance = 3;  // suggest only within two edits
  std::string all;
  for (const auto& [name, command] : commands) {
    all += (all.empty() ? "" : ", ") + name;
    const size_t d = EditDistance(word, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  std::fprintf(stderr, "gearbox: unknown command \"%s\"%s; commands: %s (gearbox --help)\n",
               word.c_str(), best.empty() ? "" : ("; did you mean \"" + best + "\"?").c_str(),
               all.c_str());
  return true;
}

}  // namespace

int RunCli(int argc, char** argv) {
  CLI::App app{"gearbox: adaptive shape-specialized gears for dynamic-shape serving"};
  app.require_subcommand(1);
  std::map<std::string, Command> commands;
  commands["demo"] = AddDemoCommand(app);
  commands["replay"] = AddReplayCommand(app);
  commands["plan"] = AddPlanCommand(app);
  commands["trace"] = AddTraceCommand(app);
  commands["validate"] = AddValidateCommand(app);
  if (ReportUnknownCommand(argc, argv, commands)) return kExitBadInput;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error exits 2, as documented.
    return app.exit(e) == 0 ? 0 : kExitBadInput;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) {
      auto it = commands.find(sub->get_name());
      if (it != commands.end()) return it->second();
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "gearbox: out of memory (the input asks for more than this machine has)\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gearbox: internal error: %s\n", e.what());
    return 1;
  }
  return 1;
}

}  // namespace gearbox::tools
