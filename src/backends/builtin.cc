#include "gearbox/backends/builtin.h"

#include "gearbox/backends/onednn.h"
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

}  // namespace gearbox
