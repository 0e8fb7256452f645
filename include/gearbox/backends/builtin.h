// Registers the backends this build has: "onednn" always, "cuda_graph" when
// the CUDA toolkit was found at configure time. Idempotent, thread-safe.
#ifndef GEARBOX_BACKENDS_BUILTIN_H_
#define GEARBOX_BACKENDS_BUILTIN_H_

#include "absl/status/status.h"
#include "gearbox/backend.h"
#include "gearbox/export.h"

namespace gearbox {

GEARBOX_EXPORT absl::Status RegisterBuiltinBackends(
    BackendRegistry& registry = BackendRegistry::Global());

}  // namespace gearbox

#endif  // GEARBOX_BACKENDS_BUILTIN_H_
