// The expiry a fleet store accepts (both stores check it the same way).
#ifndef GEARBOX_SRC_FLEET_TTL_H_
#define GEARBOX_SRC_FLEET_TTL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "src/common/errors.h"

namespace gearbox::internal {

// ttl_ms in [1, one year] ms, or [0, one year] when `zero_ok` (0: no expiry).
inline absl::Status CheckTtl(int64_t ttl_ms, bool zero_ok) {
  if (ttl_ms < (zero_ok ? 0 : 1) || ttl_ms > int64_t{365} * 24 * 3600 * 1000) {
    return InvalidFieldValue(
        "ttl_ms", ttl_ms,
        zero_ok ? "milliseconds in [0, one year] (0: no expiry)" : "milliseconds in [1, one year]");
  }
  return absl::OkStatus();
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_FLEET_TTL_H_
