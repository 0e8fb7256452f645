// Where gearbox's own messages go (update failures, probe errors).
#ifndef GEARBOX_LOG_H_
#define GEARBOX_LOG_H_

#include <functional>
#include <string_view>

#include "gearbox/export.h"

namespace gearbox {

enum class LogLevel { kInfo, kWarning, kError };

// Receives one message at a time; must be thread-safe.
using LogSink = std::function<void(LogLevel, std::string_view)>;

// Writes "gearbox <level>: <message>" lines to stderr.
GEARBOX_EXPORT void StderrLogSink(LogLevel level, std::string_view message);

}  // namespace gearbox

#endif  // GEARBOX_LOG_H_
