// `gearbox plan --emit vllm|sglang|trtllm`: stdout holds the server's
// configuration alone, diagnostics go to stderr, bad flags exit 2 naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

std::string Join(const std::vector<int64_t>& values, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? separator : "") + std::to_string(values[i]);
  }
  return out;
}

struct ToolRun {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

class CliEmit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gearbox-cli-emit-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // Decode batches of 1..40 sequences, small ones more often.
    std::string trace = "t,BATCHSIZE\n";
    for (int i = 0; i < 3000; ++i) {
      const int batch = i % 3 == 0 ? 1 + (i * 37) % 40 : 1 + (i * 5) % 12;
      trace += std::to_string(i * 0.02) + "," + std::to_string(batch) + "\n";
    }
    std::ofstream(dir_ / "decode.csv") << trace;
    std::ofstream(dir_ / "prefill.csv") << "t,SEQLEN\n0,5\n1,9\n2,17\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `gearbox plan --trace decode.csv --dim BATCHSIZE <args>`, stdout and stderr apart.
  ToolRun Plan(const std::string& args, const std::string& trace = "decode.csv",
               const std::string& dim = "BATCHSIZE") const {
    const std::string err = (dir_ / "stderr.txt").string();
    const std::string command = std::string(GEARBOX_TOOL) + " plan --trace " +
                                (dir_ / trace).string() + " --dim " + dim + " " + args + " 2>" +
                                err;
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
    const int status = pclose(pipe);
    std::ifstream in(err);
    std::string err_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err_text};
  }

  // The 4-gear plan's gears, as `--json` prints them.
  std::vector<int64_t> Gears() const {
    const ToolRun json = Plan("--gears 4 --splittable false --json");
    EXPECT_EQ(json.code, 0) << json.err;
    return nlohmann::json::parse(json.out)["gears"];
  }

  fs::path dir_;
};

TEST_F(CliEmit, EachServerGetsOnlyItsConfigurationOnStdout) {
  // The plan as `--json` prints it; --emit plans a non-splittable dimension
  // (the servers run batches above their largest graph without one).
  const std::vector<int64_t> gears = Gears();
  ASSERT_EQ(gears.size(), 4u);
  EXPECT_EQ(gears.back(), 40);  // the largest batch is covered
  const std::string comma = Join(gears, ", ");
  const std::string space = Join(gears, " ");

  const ToolRun vllm = Plan("--gears 4 --emit vllm");
  ASSERT_EQ(vllm.code, 0) << vllm.err;
  EXPECT_EQ(vllm.out, "--compilation-config '{\"cudagraph_capture_sizes\": [" + comma + "]}'\n");
  EXPECT_THAT(vllm.err, HasSubstr("gearbox plan: BATCHSIZE: 4 gears"));
  EXPECT_THAT(vllm.err, HasSubstr("-> vllm: " + Join(gears, ",")));
  const ToolRun flag = Plan("--gears 4 --emit vllm --vllm-syntax cuda-graph-sizes");
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_EQ(flag.out, "--cuda-graph-sizes " + space + "\n");
  const ToolRun newer = Plan("--gears 4 --emit vllm --vllm-syntax cudagraph-capture-sizes");
  ASSERT_EQ(newer.code, 0) << newer.err;
  EXPECT_EQ(newer.out, "--cudagraph-capture-sizes " + space + "\n");
  const ToolRun sglang = Plan("--gears 4 --emit sglang");
  ASSERT_EQ(sglang.code, 0) << sglang.err;
  EXPECT_EQ(sglang.out, "--cuda-graph-bs " + space + "\n");
  const ToolRun trtllm = Plan("--gears 4 --emit trtllm");
  ASSERT_EQ(trtllm.code, 0) << trtllm.err;
  EXPECT_EQ(trtllm.out,
            "cuda_graph_config:\n  enable_padding: true\n  batch_sizes: [" + comma + "]\n");
  // Spec decode: B sequences of 1 + 2 tokens each.
  const ToolRun spec = Plan("--gears 4 --emit vllm --speculative-tokens 2");
  ASSERT_EQ(spec.code, 0) << spec.err;
  std::vector<int64_t> tokens;
  for (int64_t g : gears) tokens.push_back(3 * g);
  EXPECT_EQ(spec.out,
            "--compilation-config '{\"cudagraph_capture_sizes\": [" + Join(tokens, ", ") + "]}'\n");
}

TEST_F(CliEmit, ServerLimitsAreCheckedAndClipped) {
  // The largest gear is the largest batch, 40; a cap of 39 excludes it alone.
  std::vector<int64_t> clipped = Gears();
  ASSERT_EQ(clipped.back(), 40);
  ASSERT_LT(clipped[clipped.size() - 2], 39);
  clipped.back() = 39;
  ToolRun r = Plan("--gears 4 --emit vllm --max-num-seqs 39");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("gearbox plan: gear 40 is above the vLLM cap of 39 "
                               "(--max-num-seqs 39); allowed: sizes up to 39, or --clip-to-max"));
  r = Plan("--gears 4 --emit vllm --max-num-seqs 39 --clip-to-max");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "--compilation-config '{\"cudagraph_capture_sizes\": [" + Join(clipped, ", ") +
                       "]}'\n");
  r = Plan("--gears 4 --emit sglang --max-running-requests 39 --clip-to-max");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "--cuda-graph-bs " + Join(clipped, " ") + "\n");
  r = Plan("--gears 4 --emit trtllm --max-batch-size 39");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("(--max_batch_size 39)"));
  r = Plan("--gears 4 --emit vllm --speculative-tokens 1 --max-num-batched-tokens 79");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("gear 40 (80 tokens) is above the vLLM cap of 78"));
}

TEST_F(CliEmit, BadInputExitsTwoNamingTheFlag) {
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"--gears 4 --emit tgi", "--emit: \"tgi\" is not allowed; vllm, sglang or trtllm"},
      {"--gears 4 --emit vllm --vllm-syntax yaml",
       "--vllm-syntax: \"yaml\" is not allowed; compilation-config, cuda-graph-sizes or "
       "cudagraph-capture-sizes"},
      {"--gears 4 --emit sglang --vllm-syntax cuda-graph-sizes",
       "--vllm-syntax cuda-graph-sizes applies to --emit vllm only"},
      {"--gears 4 --emit vllm --compare", "--emit prints one plan; drop --compare"},
      {"--gears 4 --emit vllm --joint A,B --graphs 4", "--emit plans one dimension; drop --joint"},
      {"--gears 4 --emit vllm --json", "--emit and --json both set stdout's format"},
      {"--gears 4 --max-num-seqs 8", "--max-num-seqs applies to --emit vllm|sglang|trtllm only"},
      {"--gears 4 --emit sglang --speculative-tokens 2",
       "--speculative-tokens: 2 is not allowed; only with --emit vllm"},
      {"--gears 1 --emit vllm --vllm-syntax cuda-graph-sizes",
       "--vllm-syntax: cuda-graph-sizes with one size is not allowed"},
      {"--gears 4 --emit vllm --max-num-seqs 0", "--max-num-seqs"},
      {"--gears 4 --emit vllm --speculative-tokens -1", "--speculative-tokens"},
  };
  for (const Case& c : cases) {
    const ToolRun r = Plan(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
  }
}

TEST_F(CliEmit, AColumnOtherThanBatchsizeIsAllowedWithAWarning) {
  const ToolRun r = Plan("--gears 2 --emit sglang", "prefill.csv", "SEQLEN");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "--cuda-graph-bs 9 17\n");
  EXPECT_THAT(r.err, HasSubstr("warning: the servers' lists count sequences per batch"));
  const ToolRun batch = Plan("--gears 4 --emit sglang");
  EXPECT_THAT(batch.err, Not(HasSubstr("warning")));
}

}  // namespace
