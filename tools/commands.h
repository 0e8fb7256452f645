// Subcommands of the `gearbox` tool. Each registers its flags on the app and
// returns the function that runs it; the tools stay thin over the library.
#ifndef GEARBOX_TOOLS_COMMANDS_H_
#define GEARBOX_TOOLS_COMMANDS_H_

#include <cmath>
#include <functional>
#include <string>

#include "CLI/CLI.hpp"

namespace gearbox::tools {

using Command = std::function<int()>;

// A flag's number in [lo, hi] (finite; `lo_open`: above lo). The message
// says `allowed` ("seconds > 0") rather than printing the limits' digits.
inline CLI::Validator NumberIn(double lo, double hi, std::string allowed, bool lo_open = false) {
  return CLI::Validator(
      [lo, hi, allowed, lo_open](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) v = NAN;
        } catch (const std::exception&) {
          v = NAN;
        }
        const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
        return ok ? std::string() : "\"" + text + "\" is not allowed; " + allowed;
      },
      allowed);
}

Command AddDemoCommand(CLI::App& app);
Command AddReplayCommand(CLI::App& app);
Command AddPlanCommand(CLI::App& app);
Command AddTraceCommand(CLI::App& app);
Command AddValidateCommand(CLI::App& app);

}  // namespace gearbox::tools

#endif  // GEARBOX_TOOLS_COMMANDS_H_
