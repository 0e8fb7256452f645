// A gear plan in the syntax of the inference servers users already run:
// vLLM's CUDA-graph capture sizes, SGLang's --cuda-graph-bs, TensorRT-LLM's
// cuda_graph_config.batch_sizes, with each server's own limits checked.
// Used by `gearbox plan --emit`; pure functions (no I/O).
//
// The gears count sequences per batch (a decode batch: the BATCHSIZE column
// of `gearbox trace convert --view decode`). Where each rule comes from, by
// server version: README "Using gearbox's plan in vLLM / SGLang / TensorRT-LLM".
#ifndef GEARBOX_SERVER_CONFIG_H_
#define GEARBOX_SERVER_CONFIG_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"

namespace gearbox {

enum class ServerKind {
  kVllm,    // vllm serve: --compilation-config '{"cudagraph_capture_sizes": [...]}'
  kSglang,  // python -m sglang.launch_server: --cuda-graph-bs ...
  kTrtllm,  // trtllm-serve: cuda_graph_config.batch_sizes (extra LLM API options YAML)
};
GEARBOX_EXPORT std::string_view ServerKindName(ServerKind server);  // "vllm", "sglang", "trtllm"
// Errors name `field` (e.g. "--emit"), the value and the allowed names.
GEARBOX_EXPORT absl::StatusOr<ServerKind> ParseServerKind(std::string_view name,
                                                          std::string_view field = "--emit");

// vLLM's spellings of the same list.
enum class VllmSyntax {
  kCompilationConfig,      // --compilation-config '{"cudagraph_capture_sizes": [...]}' (V1, >= 0.7)
  kCudaGraphSizes,         // --cuda-graph-sizes 1 2 4 (vLLM 0.9 .. 0.12; deprecated from 0.11.1)
  kCudagraphCaptureSizes,  // --cudagraph-capture-sizes 1 2 4 (vLLM >= 0.11.1)
};
// "compilation-config", "cuda-graph-sizes", "cudagraph-capture-sizes"
GEARBOX_EXPORT std::string_view VllmSyntaxName(VllmSyntax syntax);
GEARBOX_EXPORT absl::StatusOr<VllmSyntax> ParseVllmSyntax(std::string_view name,
                                                          std::string_view field = "--vllm-syntax");

struct ServerConfigOptions {
  ServerKind server = ServerKind::kVllm;
  VllmSyntax vllm_syntax = VllmSyntax::kCompilationConfig;
  // The server's most sequences per batch (0: not given, unchecked): vLLM
  // --max-num-seqs, SGLang --max-running-requests, TensorRT-LLM --max_batch_size.
  int64_t max_num_seqs = 0;
  // vLLM --max-num-batched-tokens (0: not given). vLLM only.
  int64_t max_num_batched_tokens = 0;
  // vLLM speculative decoding: num_speculative_tokens N. A decode step of B
  // sequences then runs B * (1 + N) tokens, and vLLM rounds every capture
  // size up to a multiple of 1 + N; the sizes emitted are B * (1 + N).
  // vLLM only (SGLang's and TensorRT-LLM's lists count sequences).
  int64_t speculative_tokens = 0;
  // A size above the server's cap: an error naming it (false), or dropped
  // with the cap itself added so the largest batches keep a graph (true).
  bool clip_to_max = false;
};

// The server's list: ascending, distinct, each >= 1 (vLLM: tokens; SGLang and
// TensorRT-LLM: sequences). Errors name the option, the value and what is allowed.
GEARBOX_EXPORT absl::StatusOr<std::vector<int64_t>> ServerSizes(std::span<const int64_t> gears,
                                                                const ServerConfigOptions& options);

// ServerSizes in the server's own syntax, ending in a newline: one line of
// command-line flags (vLLM, SGLang) or a YAML document (TensorRT-LLM).
GEARBOX_EXPORT absl::StatusOr<std::string> EmitServerConfig(std::span<const int64_t> gears,
                                                            const ServerConfigOptions& options);

}  // namespace gearbox

#endif  // GEARBOX_SERVER_CONFIG_H_
