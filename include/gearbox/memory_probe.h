// Device memory usage, as the fraction of the device's memory in use.
#ifndef GEARBOX_MEMORY_PROBE_H_
#define GEARBOX_MEMORY_PROBE_H_

#include <atomic>
#include <functional>

#include "absl/status/statusor.h"
#include "gearbox/export.h"

namespace gearbox {

class GEARBOX_EXPORT MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  // Fraction of the device's memory in use, >= 0; above 1 (over-committed)
  // is high pressure. The runtime treats an error, a throw, NaN, infinity or
  // a negative value as "unknown" (no pressure)
  // and says so in the update record.
  virtual absl::StatusOr<double> UsageFraction() = 0;
};

// A probe that returns what it was last set to (tests, replays). Thread-safe.
class GEARBOX_EXPORT FixedMemoryProbe final : public MemoryProbe {
 public:
  explicit FixedMemoryProbe(double usage = 0.0) : usage_(usage) {}
  absl::StatusOr<double> UsageFraction() override { return usage_.load(); }
  void Set(double usage) { usage_.store(usage); }

 private:
  std::atomic<double> usage_;
};

// A probe over a callable (simulated memory models, fault injection).
class GEARBOX_EXPORT FunctionMemoryProbe final : public MemoryProbe {
 public:
  explicit FunctionMemoryProbe(std::function<absl::StatusOr<double>()> fn) : fn_(std::move(fn)) {}
  absl::StatusOr<double> UsageFraction() override { return fn_(); }

 private:
  std::function<absl::StatusOr<double>()> fn_;
};

}  // namespace gearbox

#endif  // GEARBOX_MEMORY_PROBE_H_
