// Subcommands of the `gearbox` tool. Each registers its flags on the app and
// returns the function that runs it; the tools stay thin over the library.
#ifndef GEARBOX_TOOLS_COMMANDS_H_
#define GEARBOX_TOOLS_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace gearbox::tools {

using Command = std::function<int()>;

Command AddDemoCommand(CLI::App& app);
Command AddReplayCommand(CLI::App& app);
Command AddPlanCommand(CLI::App& app);
Command AddTraceCommand(CLI::App& app);

}  // namespace gearbox::tools

#endif  // GEARBOX_TOOLS_COMMANDS_H_
