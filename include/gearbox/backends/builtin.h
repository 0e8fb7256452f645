// Registers the backends this build has: "onednn" always, "cuda_graph" when
// the CUDA toolkit was found at configure time. Idempotent, thread-safe.
#ifndef GEARBOX_BACKENDS_BUILTIN_H_
#define GEARBOX_BACKENDS_BUILTIN_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/export.h"
#include "gearbox/host_memory_probe.h"
#include "gearbox/memory_probe.h"

namespace gearbox {

GEARBOX_EXPORT absl::Status RegisterBuiltinBackends(
    BackendRegistry& registry = BackendRegistry::Global());

// The memory probe that matches where `backend` keeps its memory (its
// device()): CudaMemoryProbe (cudaMemGetInfo) for a kDLCUDA backend,
// HostMemoryProbe (`host`: cgroup v2, else /proc/meminfo) for a host one.
// Unimplemented for a CUDA backend in a build without CUDA, or another
// device type. `gearbox replay --execute` uses it when no budget probe is
// chosen (docs/MEMORY.md).
GEARBOX_EXPORT absl::StatusOr<std::unique_ptr<MemoryProbe>> MakeMemoryProbeFor(
    const Backend& backend, HostMemoryProbeOptions host = {});

}  // namespace gearbox

#endif  // GEARBOX_BACKENDS_BUILTIN_H_
