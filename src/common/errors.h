// Error constructors shared by every component: each names the field, the
// offending value and what is allowed, so a user can fix the input at once.
#ifndef GEARBOX_SRC_COMMON_ERRORS_H_
#define GEARBOX_SRC_COMMON_ERRORS_H_

#include <iterator>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace gearbox::internal {

// Concatenates the text forms of its arguments (numbers as fmt prints them).
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

// "<field>: <value> is not allowed; <allowed>"
inline absl::Status InvalidField(std::string_view field, std::string_view value,
                                 std::string_view allowed) {
  return absl::InvalidArgumentError(
      fmt::format("{}: {} is not allowed; {}", field, value, allowed));
}

template <typename T>
inline absl::Status InvalidFieldValue(std::string_view field, const T& value,
                                      std::string_view allowed) {
  return InvalidField(field, fmt::format("{}", value), allowed);
}

// The message of a status as a std::string (absl's string_view is not std's here).
inline std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Prefixes a status message with a location ("line 7", "dims[1]").
inline absl::Status WithContext(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), fmt::format("{}: {}", context, Message(status)));
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_COMMON_ERRORS_H_
