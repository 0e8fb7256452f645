// The `gearbox` tool end to end: outputs appear whole or not at all, errors
// name the line and the field, exit codes say what happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct ToolRun {
  int code;
  std::string output;  // stdout and stderr
};

ToolRun Tool(const std::string& args) {
  const std::string command = std::string(GEARBOX_TOOL) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gearbox-cli-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    Write("config.json", R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16]}],
                             "adaptive": {"recent_use_protect_seconds": 0}})");
    std::string trace = "t,SEQLEN\n";
    for (int i = 0; i < 2000; ++i) trace += std::to_string(i) + "," + std::to_string(1 + i % 15) + "\n";
    Write("trace.csv", trace);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(Cli, ReplayWritesDecisionsSummaryAndPlot) {
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                     " --policy static,adaptive --optimum --decisions " + P("d.jsonl") +
                     " --summary " + P("s.json") + " --plot " + P("p.png"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("padding waste"));
  EXPECT_THAT(r.output, HasSubstr("offline optimum"));
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["policies"]["static"]["requests"], 2000);
  EXPECT_TRUE(j["policies"]["adaptive"].contains("offline_optimum"));
  // One dimension: also the optimum at the policy's compiled-graph count.
  EXPECT_THAT(r.output, HasSubstr("same compiled-graph count"));
  EXPECT_GE(j["policies"]["static"]["offline_optimum"]["SEQLEN"]["same_graph_count"]["gears"], 1);
  std::ifstream decisions(P("d.jsonl"));
  std::string line;
  int lines = 0;
  while (std::getline(decisions, line)) {
    EXPECT_EQ(nlohmann::json::parse(line)["policy"], "adaptive");
    ++lines;
  }
  EXPECT_GT(lines, 0);
  EXPECT_GT(fs::file_size(P("p.png")), 1000u);
}

TEST_F(Cli, ReplayComparesGearSchemesOnTwoDimensions) {
  Write("two.json", R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 2, 4, 8], "splittable": true},
                                 {"name": "SEQLEN", "gears": [64, 256, 1024]}]})");
  std::string trace = "t,BATCHSIZE,SEQLEN\n";
  for (int i = 0; i < 3000; ++i) {
    trace += std::to_string(i * 0.2) + "," + std::to_string(1 + i % 7) + "," + std::to_string(40 + (i * 37) % 900) + "\n";
  }
  Write("two.csv", trace);
  const ToolRun r = Tool("replay --config " + P("two.json") + " --trace " + P("two.csv") +
                         " --policy static,replan --scheme independent,joint,sparse --summary " + P("s.json") +
                         " --decisions " + P("d.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("replan/joint"));
  EXPECT_THAT(r.output, HasSubstr("graphs alive: average / peak"));
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["policies"]["replan/sparse"]["scheme"], "sparse");
  EXPECT_EQ(j["policies"]["static/joint"]["requests"], 3000);
  bool saw_combinations = false;
  std::ifstream decisions(P("d.jsonl"));
  for (std::string line; std::getline(decisions, line);) {
    saw_combinations |= nlohmann::json::parse(line).contains("combinations");
  }
  EXPECT_TRUE(saw_combinations);
  const ToolRun bad = Tool("replay --config " + P("two.json") + " --trace " + P("two.csv") + " --scheme diagonal");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--scheme: \"diagonal\""));
}

TEST_F(Cli, ReplayRunsRequestedUpdatesAfterTheLastRow) {
  // trace.csv has rows at 0..1999 s; 2500 and 3000 come after the last row.
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                         " --policy adaptive --update-at 1000,2500,3000 --summary " + P("s.json") +
                         " --decisions " + P("d.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["updates"], 3);
  EXPECT_EQ(j["trace_seconds"], 1999.0);
  EXPECT_EQ(j["replay_seconds"], 3000.0);
  std::vector<double> times;
  std::ifstream decisions(P("d.jsonl"));
  for (std::string line; std::getline(decisions, line);) times.push_back(nlohmann::json::parse(line)["time"]);
  EXPECT_THAT(times, ::testing::ElementsAre(1000.0, 2500.0, 3000.0));
}

TEST_F(Cli, ExecutedReplayRunsRequestedUpdatesAfterItsLastRow) {
  // 40 rows (0..39 s) through a tiny oneDNN block; 100 comes after the last one.
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                         " --policy adaptive --update-at 20,100 --execute onednn --backend-param hidden=8"
                         " --backend-param heads=2 --max-requests 40 --memory-budget-mb 64 --summary " +
                         P("s.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("executed on onednn (40 requests)"));
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["updates"], 2);
  EXPECT_EQ(j["executed"]["requests"], 40);
  EXPECT_EQ(j["executed"]["failed_requests"], 0);
  EXPECT_EQ(j["executed"]["updates"], 2);
  EXPECT_EQ(j["executed"]["backend"], "onednn");
}

TEST_F(Cli, BadTraceFailsWithTheLineAndLeavesNoOutputs) {
  Write("bad.csv", "t,SEQLEN\n0,4\n1,four\n");
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("bad.csv") +
                     " --decisions " + P("d.jsonl") + " --summary " + P("s.json") + " --plot " + P("p.png"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("bad.csv line 3, column SEQLEN: \"four\""));
  for (const char* f : {"d.jsonl", "s.json", "p.png"}) EXPECT_FALSE(fs::exists(P(f))) << f;
  // No temporary files either.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

TEST_F(Cli, BadConfigNamesTheKey) {
  Write("bad.json", R"({"dims": [{"name": "SEQLEN", "gears": [4]}], "adaptive": {"windw": 3}})");
  const ToolRun r = Tool("replay --config " + P("bad.json") + " --trace " + P("trace.csv"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("adaptive.windw"));
}

TEST_F(Cli, PlanPrintsTheOptimum) {
  const ToolRun r = Tool("plan --trace " + P("trace.csv") + " --dim SEQLEN --gears 3 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["gears"].size(), 3u);
  EXPECT_EQ(j["gears"].back(), 15);
  const ToolRun bad = Tool("plan --trace " + P("trace.csv") + " --dim NOPE --gears 3");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.output, HasSubstr("--dim: \"NOPE\""));
}

TEST_F(Cli, TraceConvertAzureAndFailureLeavesNothing) {
  Write("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n"
                     "2023-11-16 18:15:47.0,396,109\n");
  ToolRun r = Tool("trace convert --format azure --input " + P("azure.csv") + " --output " + P("out.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream out(P("out.csv"));
  std::stringstream text;
  text << out.rdbuf();
  EXPECT_EQ(text.str(), "t,SEQLEN\n0.000000,374\n0.500000,396\n");
  Write("broken.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,x,44\n");
  r = Tool("trace convert --format azure --input " + P("broken.csv") + " --output " + P("out2.csv"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("line 2, column ContextTokens"));
  EXPECT_FALSE(fs::exists(P("out2.csv")));
}

}  // namespace
