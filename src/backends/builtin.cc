#include "gearbox/backends/builtin.h"

#include "gearbox/backends/onednn.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"
#ifdef GEARBOX_HAVE_CUDA
#include "gearbox/backends/cuda_graph.h"
#endif

namespace gearbox {

absl::Status RegisterBuiltinBackends(BackendRegistry& registry) {
  static Mutex mu;
  static bool done ABSL_GUARDED_BY(mu) = false;
  MutexLock lock(&mu);
  if (done) return absl::OkStatus();
  if (auto s = RegisterOneDnnBackend(registry); !s.ok()) return s;
#ifdef GEARBOX_HAVE_CUDA
  if (auto s = RegisterCudaGraphBackend(registry); !s.ok()) return s;
#endif
  done = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MemoryProbe>> MakeMemoryProbeFor(const Backend& backend,
                                                                HostMemoryProbeOptions host) {
  const DLDevice device = backend.device();
  switch (device.device_type) {
    case kDLCPU:
      return std::unique_ptr<MemoryProbe>(std::make_unique<HostMemoryProbe>(std::move(host)));
    case kDLCUDA:
#ifdef GEARBOX_HAVE_CUDA
      return std::unique_ptr<MemoryProbe>(std::make_unique<CudaMemoryProbe>(device.device_id));
#else
      return absl::UnimplementedError(
          "memory probe: the backend's device is CUDA, but this build has no CUDA toolkit");
#endif
    default:
      return absl::UnimplementedError(
          internal::Cat("memory probe: no probe for the backend's device type ",
                        static_cast<int>(device.device_type), "; allowed: kDLCPU (host), kDLCUDA"));
  }
}

}  // namespace gearbox
