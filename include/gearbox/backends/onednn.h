// The oneDNN backend (CPU, the default): a transformer-style block built
// from oneDNN primitives created for each gear's exact shape.
//
//   x [B, S, H] -> LayerNorm -> QKV matmul (+bias) -> per head
//   softmax(Q K^T / sqrt(d) + key mask) V -> output projection (+bias,
//   +x) -> LayerNorm -> MLP up (+bias, GELU) -> MLP down (+bias, +residual)
//   -> y [B, S, H]
//
// The key mask hides padded sequence positions, so padding never leaks into
// valid rows. Weights are created once (deterministic from the seed) and
// shared by every gear; each gear owns its primitives. A run's activations,
// key mask and (user-mode) scratchpad lie in one workspace: by default in
// the backend's arena, one workspace per concurrent execution slot shared by
// every gear and sized to the largest live gear (docs/MEMORY.md has the
// rules); with shared_arena = false each gear owns its workspaces (one per
// concurrent run of it), the per-gear mode. oneDNN's own primitive cache is
// disabled so a gear's compile cost and memory are its own.
#ifndef GEARBOX_BACKENDS_ONEDNN_H_
#define GEARBOX_BACKENDS_ONEDNN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/export.h"

namespace gearbox {

struct TransformerBlockOptions {
  int64_t hidden = 64;    // H
  int64_t heads = 4;      // H must be a multiple
  int64_t mlp_ratio = 4;  // MLP width = mlp_ratio * H
  uint64_t seed = 1;      // weights
  // Which gear dimension the batch axis follows (-1: batch fixed at 1) and
  // which the sequence axis follows.
  int batch_dimension = 0;
  int seq_dimension = 1;
  // true: workspaces in the backend's arena (one per concurrent run, shared
  // by every gear: memory ~ slots x largest gear); false: each gear owns its
  // workspaces (memory ~ sum over gears). Results are bit-identical.
  bool shared_arena = true;
  // With shared_arena: the most bytes the arena's buffers may hold in all
  // (0: no limit). A slot's growth past it fails as an allocation that finds
  // no memory does (the run returns ResourceExhausted, which the executor
  // survives): a hard cap on the workspaces, and how tests make the arena's
  // growth run out of memory.
  int64_t arena_limit_bytes = 0;
};

// Registry name "onednn"; params: hidden, heads, mlp_ratio, seed,
// batch_dim (-1 for none), seq_dim, arena (1: shared_arena, the default; 0:
// per-gear workspaces), arena_limit (arena_limit_bytes).
GEARBOX_EXPORT absl::StatusOr<std::unique_ptr<Backend>> MakeOneDnnTransformerBackend(
    const TransformerBlockOptions& options);
GEARBOX_EXPORT absl::Status RegisterOneDnnBackend(BackendRegistry& registry);

}  // namespace gearbox

#endif  // GEARBOX_BACKENDS_ONEDNN_H_
