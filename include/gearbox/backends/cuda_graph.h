// The CUDA Graph backend (optional: built when the CUDA toolkit is found;
// runtime API only). Per gear combination it captures a launch sequence on a
// stream into a CUDA graph, instantiates it once and replays it for every
// run; Release() destroys the graph.
//
// Memory: one device arena per backend, of execution slots (one per
// concurrent run, each a stream and a device buffer). A slot's buffer holds
// a gear's inputs, outputs and device array of the run's valid sizes per
// dimension (int64, so kernels can mask padding), at offsets from its base;
// each gear's graph is captured per slot against those addresses, so a slot
// is the largest live gear's buffers, not their sum (Executable::arena_bytes,
// Backend::arena_usage). A slot grows when a run needs more than it holds
// and shrinks when the largest live gear is released; a gear's graph
// captured on a slot before such a move is captured again at its next run
// there. A run checks a slot out, copies the (host) inputs in, replays the
// graph and copies the outputs out on the slot's stream, and returns it:
// runs on different slots proceed at once (docs/MEMORY.md).
#ifndef GEARBOX_BACKENDS_CUDA_GRAPH_H_
#define GEARBOX_BACKENDS_CUDA_GRAPH_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/export.h"
#include "gearbox/memory_probe.h"

namespace gearbox {

// Enqueues the model's kernels on `stream` (being captured) for `gears`.
// `inputs`/`outputs`: device buffers in signature order; `valid_sizes`: a
// device array with the run's valid size per gear dimension.
using CudaLaunchSequence = std::function<absl::Status(
    cudaStream_t stream, std::span<const int64_t> gears, std::span<void* const> inputs,
    std::span<void* const> outputs, const int64_t* valid_sizes)>;

struct CudaGraphOptions {
  ModelSignature signature;  // host tensors cross the executor; f32 or any whole-byte dtype
  CudaLaunchSequence launch;
  int device = 0;
};

// True when a CUDA device can be used (tests skip otherwise).
GEARBOX_EXPORT bool CudaDeviceAvailable();

GEARBOX_EXPORT absl::StatusOr<std::unique_ptr<Backend>> MakeCudaGraphBackend(
    CudaGraphOptions options);

// Registry name "cuda_graph": a built-in model over x [B, S, H] -> y
// (y = tanh(x w + b) at valid positions, plus its mean over the valid
// sequence positions; padding is masked). Params: hidden, batch_dim
// (-1 for none), seq_dim, device.
GEARBOX_EXPORT absl::Status RegisterCudaGraphBackend(BackendRegistry& registry);

// 1 - free / total of the device's memory (cudaMemGetInfo).
class GEARBOX_EXPORT CudaMemoryProbe final : public MemoryProbe {
 public:
  explicit CudaMemoryProbe(int device = 0) : device_(device) {}
  absl::StatusOr<double> UsageFraction() override;

 private:
  int device_;
};

}  // namespace gearbox

#endif  // GEARBOX_BACKENDS_CUDA_GRAPH_H_
