// Gear plans as vLLM / SGLang / TensorRT-LLM configuration, with the limits
// those servers apply to their CUDA-graph lists (README "Using gearbox's plan
// in vLLM / SGLang / TensorRT-LLM" says where each rule comes from).
#include "gearbox/server_config.h"

#include <algorithm>
#include <limits>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;
using internal::InvalidField;

// Enough for any real draft length, and small enough that B * (1 + N) cannot overflow
// for any batch a server can hold.
constexpr int64_t kMaxSpeculativeTokens = 1024;

// The server's own name for its most-sequences-per-batch option.
std::string_view MaxSeqsOption(ServerKind server) {
  switch (server) {
    case ServerKind::kVllm:
      return "--max-num-seqs";
    case ServerKind::kSglang:
      return "--max-running-requests";
    case ServerKind::kTrtllm:
      return "--max_batch_size";
  }
  return "--max-num-seqs";
}

std::string_view DisplayName(ServerKind server) {
  switch (server) {
    case ServerKind::kVllm:
      return "vLLM";
    case ServerKind::kSglang:
      return "SGLang";
    case ServerKind::kTrtllm:
      return "TensorRT-LLM";
  }
  return "vLLM";
}

absl::Status CheckOptions(const ServerConfigOptions& o) {
  if (o.max_num_seqs < 0) {
    return InvalidField(MaxSeqsOption(o.server), Cat(o.max_num_seqs), ">= 1 (or 0: not given)");
  }
  if (o.max_num_batched_tokens < 0) {
    return InvalidField("--max-num-batched-tokens", Cat(o.max_num_batched_tokens),
                        ">= 1 (or 0: not given)");
  }
  if (o.speculative_tokens < 0 || o.speculative_tokens > kMaxSpeculativeTokens) {
    return InvalidField("--speculative-tokens", Cat(o.speculative_tokens),
                        Cat("0..", kMaxSpeculativeTokens));
  }
  if (o.server != ServerKind::kVllm) {
    const std::string name(DisplayName(o.server));
    if (o.max_num_batched_tokens > 0) {
      return InvalidField(
          "--max-num-batched-tokens", Cat(o.max_num_batched_tokens),
          Cat("only with --emit vllm (", name, " caps sequences: ", MaxSeqsOption(o.server), ")"));
    }
    if (o.speculative_tokens > 0) {
      return InvalidField("--speculative-tokens", Cat(o.speculative_tokens),
                          Cat("only with --emit vllm (", name,
                              "'s list counts sequences, which speculative decoding leaves as "
                              "they are)"));
    }
  }
  return absl::OkStatus();
}

// Ascending distinct gears, each >= 1.
absl::StatusOr<std::vector<int64_t>> SortedGears(std::span<const int64_t> gears) {
  if (gears.empty()) return InvalidField("gears", "[]", "at least one gear");
  for (size_t i = 0; i < gears.size(); ++i) {
    if (gears[i] < 1) return InvalidField(Cat("gears[", i, "]"), Cat(gears[i]), ">= 1");
  }
  std::vector<int64_t> out(gears.begin(), gears.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The server's unit per sequence: vLLM captures tokens, 1 + N per decoding sequence.
int64_t TokensPerSequence(const ServerConfigOptions& o) {
  return o.server == ServerKind::kVllm ? 1 + o.speculative_tokens : 1;
}

struct Cap {
  int64_t size = 0;    // in the server's unit; 0: none
  std::string reason;  // the option and value that set it
};

// The largest size the server can use: vLLM drops capture sizes above
// max_num_batched_tokens and never builds a decode step above max_num_seqs
// sequences; SGLang and TensorRT-LLM cap batches at their max sequences.
absl::StatusOr<Cap> ServerCap(const ServerConfigOptions& o) {
  const int64_t unit = TokensPerSequence(o);
  Cap cap;
  if (o.max_num_seqs > 0) {
    if (o.max_num_seqs > std::numeric_limits<int64_t>::max() / unit) {
      return InvalidField(MaxSeqsOption(o.server), Cat(o.max_num_seqs),
                          Cat("at most ", std::numeric_limits<int64_t>::max() / unit,
                              " with --speculative-tokens ", o.speculative_tokens));
    }
    cap.size = o.max_num_seqs * unit;
    cap.reason = Cat(MaxSeqsOption(o.server), " ", o.max_num_seqs);
    if (unit > 1) cap.reason += Cat(" x (1 + --speculative-tokens ", o.speculative_tokens, ")");
  }
  if (o.max_num_batched_tokens > 0) {
    // A decode step is a whole number of sequences of `unit` tokens each.
    const int64_t tokens = o.max_num_batched_tokens / unit * unit;
    if (tokens < 1) {
      return InvalidField(
          "--max-num-batched-tokens", Cat(o.max_num_batched_tokens),
          Cat("at least 1 + --speculative-tokens = ", unit, " (one decoding sequence)"));
    }
    if (cap.size == 0 || tokens < cap.size) {
      cap.size = tokens;
      cap.reason = Cat("--max-num-batched-tokens ", o.max_num_batched_tokens);
      if (unit > 1) cap.reason += Cat(", whole sequences of ", unit, " tokens");
    }
  }
  return cap;
}

absl::StatusOr<std::vector<int64_t>> ApplyCap(std::vector<int64_t> sizes, const Cap& cap,
                                              const ServerConfigOptions& o) {
  if (cap.size == 0 || sizes.back() <= cap.size) return sizes;
  if (!o.clip_to_max) {
    const int64_t unit = TokensPerSequence(o);
    const auto above =
        std::find_if(sizes.begin(), sizes.end(), [&](int64_t s) { return s > cap.size; });
    const std::string what =
        unit > 1 ? Cat("gear ", *above / unit, " (", *above, " tokens)") : Cat("gear ", *above);
    return absl::InvalidArgumentError(
        Cat(what, " is above the ", DisplayName(o.server), " cap of ", cap.size, " (", cap.reason,
            "); allowed: sizes up to ", cap.size,
            ", or --clip-to-max to drop the larger sizes and add ", cap.size));
  }
  std::erase_if(sizes, [&](int64_t s) { return s > cap.size; });
  sizes.push_back(cap.size);
  return sizes;
}

absl::Status CheckVllmSyntax(std::span<const int64_t> sizes, const ServerConfigOptions& o) {
  if (o.server != ServerKind::kVllm || o.vllm_syntax != VllmSyntax::kCudaGraphSizes ||
      sizes.size() > 1) {
    return absl::OkStatus();
  }
  return InvalidField(
      "--vllm-syntax", "cuda-graph-sizes with one size",
      Cat("two or more sizes: vLLM 0.9 to 0.11.0 read a single --cuda-graph-sizes ", sizes[0],
          " as the ladder 1, 2, 4, 8, 16, 24, ... up to ", sizes[0],
          "; use --vllm-syntax cudagraph-capture-sizes (vLLM >= 0.11.1) or compilation-config"));
}

std::string JoinSizes(std::span<const int64_t> sizes, std::string_view separator) {
  return fmt::format("{}", fmt::join(sizes, separator));
}

}  // namespace

std::string_view ServerKindName(ServerKind server) {
  switch (server) {
    case ServerKind::kVllm:
      return "vllm";
    case ServerKind::kSglang:
      return "sglang";
    case ServerKind::kTrtllm:
      return "trtllm";
  }
  return "vllm";
}

absl::StatusOr<ServerKind> ParseServerKind(std::string_view name, std::string_view field) {
  for (ServerKind s : {ServerKind::kVllm, ServerKind::kSglang, ServerKind::kTrtllm}) {
    if (name == ServerKindName(s)) return s;
  }
  return InvalidField(field, Cat("\"", name, "\""), "vllm, sglang or trtllm");
}

std::string_view VllmSyntaxName(VllmSyntax syntax) {
  switch (syntax) {
    case VllmSyntax::kCompilationConfig:
      return "compilation-config";
    case VllmSyntax::kCudaGraphSizes:
      return "cuda-graph-sizes";
    case VllmSyntax::kCudagraphCaptureSizes:
      return "cudagraph-capture-sizes";
  }
  return "compilation-config";
}

absl::StatusOr<VllmSyntax> ParseVllmSyntax(std::string_view name, std::string_view field) {
  for (VllmSyntax s : {VllmSyntax::kCompilationConfig, VllmSyntax::kCudaGraphSizes,
                       VllmSyntax::kCudagraphCaptureSizes}) {
    if (name == VllmSyntaxName(s)) return s;
  }
  return InvalidField(field, Cat("\"", name, "\""),
                      "compilation-config, cuda-graph-sizes or cudagraph-capture-sizes");
}

absl::StatusOr<std::vector<int64_t>> ServerSizes(std::span<const int64_t> gears,
                                                 const ServerConfigOptions& options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  auto sorted = SortedGears(gears);
  if (!sorted.ok()) return sorted.status();
  const int64_t unit = TokensPerSequence(options);
  if (sorted->back() > std::numeric_limits<int64_t>::max() / unit) {
    return InvalidField("gears", Cat(sorted->back()),
                        Cat("at most ", std::numeric_limits<int64_t>::max() / unit,
                            " with --speculative-tokens ", options.speculative_tokens));
  }
  std::vector<int64_t> sizes;
  for (int64_t g : *sorted) sizes.push_back(g * unit);
  auto cap = ServerCap(options);
  if (!cap.ok()) return cap.status();
  return ApplyCap(std::move(sizes), *cap, options);
}

absl::StatusOr<std::string> EmitServerConfig(std::span<const int64_t> gears,
                                             const ServerConfigOptions& options) {
  auto sizes = ServerSizes(gears, options);
  if (!sizes.ok()) return sizes.status();
  if (auto s = CheckVllmSyntax(*sizes, options); !s.ok()) return s;
  switch (options.server) {
    case ServerKind::kVllm:
      if (options.vllm_syntax != VllmSyntax::kCompilationConfig) {
        return Cat("--", VllmSyntaxName(options.vllm_syntax), " ", JoinSizes(*sizes, " "), "\n");
      }
      return Cat("--compilation-config '{\"cudagraph_capture_sizes\": [", JoinSizes(*sizes, ", "),
                 "]}'\n");
    case ServerKind::kSglang:
      return Cat("--cuda-graph-bs ", JoinSizes(*sizes, " "), "\n");
    case ServerKind::kTrtllm:
      return Cat("cuda_graph_config:\n  enable_padding: true\n  batch_sizes: [",
                 JoinSizes(*sizes, ", "), "]\n");
  }
  return absl::InternalError("unknown server");
}

}  // namespace gearbox
