// gearbox: command-line front end over the library.
#include <cstdio>
#include <map>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"gearbox: adaptive shape-specialized gears for dynamic-shape serving"};
  app.require_subcommand(1);
  std::map<std::string, gearbox::tools::Command> commands;
  commands["demo"] = gearbox::tools::AddDemoCommand(app);
  commands["replay"] = gearbox::tools::AddReplayCommand(app);
  commands["plan"] = gearbox::tools::AddPlanCommand(app);
  commands["trace"] = gearbox::tools::AddTraceCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = commands.find(sub->get_name());
    if (it != commands.end()) return it->second();
  }
  return 1;
}
