// Gear plans in vLLM / SGLang / TensorRT-LLM syntax, and those servers' limits.
#include "gearbox/server_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gearbox {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ServerConfigOptions For(ServerKind server) {
  ServerConfigOptions o;
  o.server = server;
  return o;
}

std::string Emit(const std::vector<int64_t>& gears, const ServerConfigOptions& o) {
  auto text = EmitServerConfig(gears, o);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

std::string ErrorOf(const std::vector<int64_t>& gears, const ServerConfigOptions& o) {
  auto text = EmitServerConfig(gears, o);
  EXPECT_FALSE(text.ok()) << *text;
  return text.ok() ? std::string() : std::string(text.status().message());
}

TEST(ServerKind, NamesRoundTripAndUnknownNamesListTheAllowedOnes) {
  for (ServerKind s : {ServerKind::kVllm, ServerKind::kSglang, ServerKind::kTrtllm}) {
    EXPECT_EQ(*ParseServerKind(ServerKindName(s)), s);
  }
  auto bad = ParseServerKind("tgi");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--emit: \"tgi\" is not allowed; vllm, sglang or trtllm");
  EXPECT_THAT(ParseServerKind("VLLM", "server").status().message(), HasSubstr("server: \"VLLM\""));
  for (VllmSyntax s : {VllmSyntax::kCompilationConfig, VllmSyntax::kCudaGraphSizes,
                       VllmSyntax::kCudagraphCaptureSizes}) {
    EXPECT_EQ(*ParseVllmSyntax(VllmSyntaxName(s)), s);
  }
  EXPECT_THAT(ParseVllmSyntax("json").status().message(),
              HasSubstr("compilation-config, cuda-graph-sizes or cudagraph-capture-sizes"));
}

TEST(EmitServerConfig, EachServerInItsOwnSyntax) {
  const std::vector<int64_t> gears = {1, 2, 4, 8, 24};
  EXPECT_EQ(Emit(gears, For(ServerKind::kVllm)),
            "--compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8, 24]}'\n");
  ServerConfigOptions flag = For(ServerKind::kVllm);
  flag.vllm_syntax = VllmSyntax::kCudaGraphSizes;
  EXPECT_EQ(Emit(gears, flag), "--cuda-graph-sizes 1 2 4 8 24\n");
  flag.vllm_syntax = VllmSyntax::kCudagraphCaptureSizes;
  EXPECT_EQ(Emit(gears, flag), "--cudagraph-capture-sizes 1 2 4 8 24\n");
  EXPECT_EQ(Emit(gears, For(ServerKind::kSglang)), "--cuda-graph-bs 1 2 4 8 24\n");
  // Padding on: a batch between two sizes runs the next larger graph, as gears do.
  EXPECT_EQ(Emit(gears, For(ServerKind::kTrtllm)),
            "cuda_graph_config:\n  enable_padding: true\n  batch_sizes: [1, 2, 4, 8, 24]\n");
}

TEST(EmitServerConfig, GearsAreSortedAndDeduplicatedAndMustBePositive) {
  EXPECT_EQ(Emit({8, 2, 8, 1}, For(ServerKind::kSglang)), "--cuda-graph-bs 1 2 8\n");
  EXPECT_EQ(ErrorOf({}, For(ServerKind::kSglang)), "gears: [] is not allowed; at least one gear");
  EXPECT_EQ(ErrorOf({4, 0}, For(ServerKind::kSglang)), "gears[1]: 0 is not allowed; >= 1");
}

TEST(EmitServerConfig, SpeculativeDecodingMakesVllmSizesWholeDecodeSteps) {
  // vLLM captures tokens: B sequences with N draft tokens each are B * (1 + N),
  // a multiple of 1 + N as vLLM requires (it would round other sizes up).
  ServerConfigOptions o = For(ServerKind::kVllm);
  o.speculative_tokens = 2;
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{1, 3, 5}, o), ElementsAre(3, 9, 15));
  const auto sizes = ServerSizes(std::vector<int64_t>{1, 2, 7, 13}, o);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  for (int64_t size : *sizes) EXPECT_EQ(size % 3, 0);
  o.speculative_tokens = -1;
  EXPECT_EQ(ErrorOf({1}, o), "--speculative-tokens: -1 is not allowed; 0..1024");
  o.speculative_tokens = 1024;
  EXPECT_THAT(ErrorOf({std::numeric_limits<int64_t>::max() / 2}, o), HasSubstr("gears: "));
}

TEST(EmitServerConfig, SizesAboveVllmsMaxNumSeqsAreAnErrorNamingTheOption) {
  ServerConfigOptions o = For(ServerKind::kVllm);
  o.max_num_seqs = 64;
  EXPECT_EQ(ErrorOf({8, 32, 96, 128}, o),
            "gear 96 is above the vLLM cap of 64 (--max-num-seqs 64); allowed: sizes up to 64, "
            "or --clip-to-max to drop the larger sizes and add 64");
  EXPECT_EQ(Emit({8, 32, 64}, o),
            "--compilation-config '{\"cudagraph_capture_sizes\": [8, 32, 64]}'\n");
}

TEST(EmitServerConfig, ClipToMaxDropsLargerSizesAndAddsTheCap) {
  ServerConfigOptions o = For(ServerKind::kVllm);
  o.max_num_seqs = 64;
  o.clip_to_max = true;
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{8, 32, 96, 128}, o), ElementsAre(8, 32, 64));
  // Nothing above the cap: nothing added.
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{8, 32}, o), ElementsAre(8, 32));
}

TEST(EmitServerConfig, VllmMaxNumBatchedTokensCapsWholeDecodeSteps) {
  ServerConfigOptions o = For(ServerKind::kVllm);
  o.max_num_batched_tokens = 100;
  o.speculative_tokens = 3;  // 4 tokens per sequence: at most 25 sequences
  EXPECT_THAT(ErrorOf({4, 30}, o),
              AllOf(HasSubstr("gear 30 (120 tokens) is above the vLLM cap of 100"),
                    HasSubstr("--max-num-batched-tokens 100")));
  o.clip_to_max = true;
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{4, 30}, o), ElementsAre(16, 100));
  o.max_num_batched_tokens = 102;  // still 25 whole sequences
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{4, 30}, o), ElementsAre(16, 100));
  // The smaller of the two caps binds.
  o.max_num_seqs = 10;
  EXPECT_THAT(*ServerSizes(std::vector<int64_t>{4, 30}, o), ElementsAre(16, 40));
  o.clip_to_max = false;
  EXPECT_THAT(ErrorOf({4, 30}, o), HasSubstr("(--max-num-seqs 10 x (1 + --speculative-tokens 3))"));
  o.max_num_seqs = 0;
  o.max_num_batched_tokens = 3;
  EXPECT_EQ(ErrorOf({1}, o),
            "--max-num-batched-tokens: 3 is not allowed; at least 1 + --speculative-tokens = 4 "
            "(one decoding sequence)");
}

TEST(EmitServerConfig, SglangAndTrtllmCapsUseTheirOwnOptionNames) {
  ServerConfigOptions sglang = For(ServerKind::kSglang);
  sglang.max_num_seqs = 48;
  EXPECT_THAT(ErrorOf({16, 64}, sglang), HasSubstr("(--max-running-requests 48)"));
  sglang.clip_to_max = true;
  EXPECT_EQ(Emit({16, 64}, sglang), "--cuda-graph-bs 16 48\n");
  ServerConfigOptions trtllm = For(ServerKind::kTrtllm);
  trtllm.max_num_seqs = 48;
  EXPECT_THAT(ErrorOf({16, 64}, trtllm), HasSubstr("(--max_batch_size 48)"));
}

TEST(EmitServerConfig, VllmOnlyOptionsAreRefusedForOtherServers) {
  ServerConfigOptions o = For(ServerKind::kSglang);
  o.speculative_tokens = 2;
  EXPECT_THAT(ErrorOf({1, 2}, o), HasSubstr("--speculative-tokens: 2 is not allowed; only with "
                                            "--emit vllm"));
  o = For(ServerKind::kTrtllm);
  o.max_num_batched_tokens = 8192;
  EXPECT_THAT(ErrorOf({1, 2}, o),
              HasSubstr("--max-num-batched-tokens: 8192 is not allowed; only with --emit vllm"));
  o = For(ServerKind::kVllm);
  o.max_num_seqs = -3;
  EXPECT_EQ(ErrorOf({1}, o), "--max-num-seqs: -3 is not allowed; >= 1 (or 0: not given)");
}

TEST(EmitServerConfig, OneVllmCudaGraphSizesValueIsRefused) {
  // Older vLLM expands one --cuda-graph-sizes value into a ladder up to it.
  ServerConfigOptions o = For(ServerKind::kVllm);
  o.vllm_syntax = VllmSyntax::kCudaGraphSizes;
  EXPECT_THAT(ErrorOf({64}, o), AllOf(HasSubstr("--vllm-syntax: cuda-graph-sizes with one size"),
                                      HasSubstr("use --vllm-syntax cudagraph-capture-sizes")));
  // Newer vLLM takes the list as given, whatever its length.
  o.vllm_syntax = VllmSyntax::kCudagraphCaptureSizes;
  EXPECT_EQ(Emit({64}, o), "--cudagraph-capture-sizes 64\n");
  o.vllm_syntax = VllmSyntax::kCompilationConfig;
  EXPECT_EQ(Emit({64}, o), "--compilation-config '{\"cudagraph_capture_sizes\": [64]}'\n");
}

}  // namespace
}  // namespace gearbox
