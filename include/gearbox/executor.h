// GearedExecutor: the whole request path of the seed (§3.1) on real tensors:
// snapshot -> plan -> transform (pad / split the inputs) -> compile on miss
// (one compile per gear combination however many threads miss at once;
// compiled outside every lock; failures reported, never cached) -> run ->
// record -> recover (slice padding off, concatenate chunks into the
// outputs). Compiled executables live in the runtime's GraphResourcePool
// under cleanup keys attached to their gears (§3.4): an evicted gear's
// executable is released only after every run that uses it has finished,
// and a request never fails because of a concurrent eviction.
//
// Thread-safety: Run may be called from any number of threads.
#ifndef GEARBOX_EXECUTOR_H_
#define GEARBOX_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/runtime.h"

namespace gearbox {

struct ExecutorOptions {
  // Value written into padding of every input (converted to its dtype).
  double pad_value = 0.0;
};

struct ExecutorStats {
  uint64_t requests = 0;
  uint64_t failed_requests = 0;
  uint64_t variants = 0;
  uint64_t zero_copy_requests = 0;  // ran on the caller's tensors, no padding or split
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  double compile_seconds = 0.0;
  uint64_t eager_variants = 0;      // compiled for one run at the exact size, not cached
};

class GearedExecutor {
 public:
  // `runtime` and `backend` must outlive the executor. The backend's
  // signature must bind axes only to the runtime's dimensions, and every
  // runtime dimension must be bound by at least one input.
  static absl::StatusOr<std::unique_ptr<GearedExecutor>> Create(AdaptiveGearRuntime* runtime,
                                                                Backend* backend,
                                                                ExecutorOptions options = {});
  ~GearedExecutor();

  // Runs one request. `inputs` and `outputs` follow the backend's signature
  // with the bound axes at the request's sizes (outputs are written).
  // Host tensors may be strided (they are staged); errors name the tensor
  // and the field, and leave the outputs unspecified.
  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs);

  ExecutorStats stats() const;
  // Gear combinations with a cached executable (some may have been evicted
  // since; they are dropped on their next use).
  size_t cached_executables() const;

 private:
  GearedExecutor(AdaptiveGearRuntime* runtime, Backend* backend, ExecutorOptions options);
  class Cache;

  absl::Status CheckTensors(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                            int64_t* raw) const;
  absl::StatusOr<std::shared_ptr<Executable>> Acquire(std::span<const int64_t> gears, bool eager);

  AdaptiveGearRuntime* const runtime_;
  Backend* const backend_;
  const ExecutorOptions options_;
  std::unique_ptr<Cache> cache_;
  // Statistics only (relaxed).
  std::atomic<uint64_t> requests_{0}, failed_{0}, variants_{0}, zero_copy_{0};
  std::atomic<uint64_t> compiles_{0}, compile_failures_{0}, eager_{0};
  std::atomic<uint64_t> compile_nanos_{0};
};

// Memory probe for host backends: the bytes the pool's executables hold
// against a byte budget (usage = pool bytes / budget).
class PoolBudgetMemoryProbe final : public MemoryProbe {
 public:
  PoolBudgetMemoryProbe(const GraphResourcePool* pool, int64_t budget_bytes)
      : pool_(pool), budget_(budget_bytes) {}
  absl::StatusOr<double> UsageFraction() override;

 private:
  const GraphResourcePool* pool_;
  int64_t budget_;
};

}  // namespace gearbox

#endif  // GEARBOX_EXECUTOR_H_
