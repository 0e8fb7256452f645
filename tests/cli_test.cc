// The `gearbox` tool end to end: outputs appear whole or not at all, errors
// name the line and the field, exit codes say what happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gearbox/replay.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct ToolRun {
  int code;
  std::string output;  // stdout and stderr
};

// Runs a shell command line.
ToolRun Shell(const std::string& line) {
  const std::string command = "( " + line + " ) 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Without string operator+: GCC 12 at -O3 reports a false -Warray-bounds on
// it for some lengths of the tool's path.
ToolRun Tool(const std::string& args) {
  std::string line = GEARBOX_TOOL;
  line.append(" ").append(args);
  return Shell(line);
}

// `text` as one single-quoted shell word.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gearbox-cli-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    Write("config.json", R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16]}],
                             "adaptive": {"recent_use_protect_seconds": 0}})");
    std::string trace = "t,SEQLEN\n";
    for (int i = 0; i < 2000; ++i)
      trace += std::to_string(i) + "," + std::to_string(1 + i % 15) + "\n";
    Write("trace.csv", trace);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
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
  // ... and that count planned on the other half of the trace (2,000 s: many minutes).
  EXPECT_THAT(r.output, HasSubstr("planned on the other half"));
  const auto& same = j["policies"]["static"]["offline_optimum"]["SEQLEN"]["same_graph_count"];
  ASSERT_TRUE(same.contains("other_half_waste")) << same.dump();
  EXPECT_TRUE(same["other_half_waste"].is_number());
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

TEST_F(Cli, ReplayDefaultsAreTheLibrarysDefaults) {
  const std::string policy(gearbox::UpdatePolicyName(gearbox::kDefaultUpdatePolicy));
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                         " --summary " + P("s.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_EQ(j["policy"], policy);  // one policy: the summary is its figures
  const ToolRun help = Tool("replay --help");
  EXPECT_THAT(help.output, HasSubstr("(default " + policy + ")"));
  EXPECT_THAT(help.output,
              HasSubstr("(default " + std::to_string(gearbox::kMaxReplayUpdates) + ")"));
}

TEST_F(Cli, ReplayComparesGearSchemesOnTwoDimensions) {
  Write("two.json", R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 2, 4, 8], "splittable": true},
                                 {"name": "SEQLEN", "gears": [64, 256, 1024]}]})");
  std::string trace = "t,BATCHSIZE,SEQLEN\n";
  for (int i = 0; i < 3000; ++i) {
    trace += std::to_string(i * 0.2) + "," + std::to_string(1 + i % 7) + "," +
             std::to_string(40 + (i * 37) % 900) + "\n";
  }
  Write("two.csv", trace);
  const ToolRun r = Tool("replay --config " + P("two.json") + " --trace " + P("two.csv") +
                         " --policy static,replan --scheme independent,joint,sparse --summary " +
                         P("s.json") + " --decisions " + P("d.jsonl"));
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
  const ToolRun bad =
      Tool("replay --config " + P("two.json") + " --trace " + P("two.csv") + " --scheme diagonal");
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
  for (std::string line; std::getline(decisions, line);)
    times.push_back(nlohmann::json::parse(line)["time"]);
  EXPECT_THAT(times, ::testing::ElementsAre(1000.0, 2500.0, 3000.0));
}

TEST_F(Cli, ExecutedReplayRunsRequestedUpdatesAfterItsLastRow) {
  // 40 rows (0..39 s) through a tiny oneDNN block; 100 comes after the last one.
  const ToolRun r =
      Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
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

// With --execute, --decisions holds the executed replay's update records:
// they carry what the executor measured (the byte budget and the gears'
// bytes in use, which the simulated replay has no predictor for).
TEST_F(Cli, ExecutedReplayDecisionsAreTheExecutedReplaysRecords) {
  const ToolRun r =
      Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
           " --policy adaptive --update-at 20,100 --execute onednn --backend-param hidden=8"
           " --backend-param heads=2 --max-requests 40 --memory-budget-mb 64 --decisions " +
           P("d.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream decisions(P("d.jsonl"));
  std::vector<double> times;
  for (std::string line; std::getline(decisions, line);) {
    auto j = nlohmann::json::parse(line);  // not const: a missing key reads as null
    times.push_back(j["time"]);
    EXPECT_EQ(j["memory"]["budget_bytes"], 64 << 20) << line;
    EXPECT_TRUE(j["memory"].contains("bytes_in_use")) << line;
  }
  EXPECT_THAT(times, ::testing::ElementsAre(20.0, 100.0));  // the executed run's two updates
  // Without --execute: the simulated replay's (no predictor, no bytes in use).
  const ToolRun sim = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                           " --policy adaptive --update-at 20,100 --decisions " + P("d.jsonl"));
  ASSERT_EQ(sim.code, 0) << sim.output;
  std::ifstream simulated(P("d.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(simulated, line); ++lines)
    EXPECT_FALSE(nlohmann::json::parse(line)["memory"].contains("bytes_in_use")) << line;
  EXPECT_EQ(lines, 2);
}

TEST_F(Cli, BadTraceFailsWithTheLineAndLeavesNoOutputs) {
  Write("bad.csv", "t,SEQLEN\n0,4\n1,four\n");
  const ToolRun r =
      Tool("replay --config " + P("config.json") + " --trace " + P("bad.csv") + " --decisions " +
           P("d.jsonl") + " --summary " + P("s.json") + " --plot " + P("p.png"));
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
  Write("azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n"
        "2023-11-16 18:15:47.0,396,109\n");
  ToolRun r =
      Tool("trace convert --format azure --input " + P("azure.csv") + " --output " + P("out.csv"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream out(P("out.csv"));
  std::stringstream text;
  text << out.rdbuf();
  EXPECT_EQ(text.str(), "t,SEQLEN\n0.000000,374\n0.500000,396\n");
  Write("broken.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,x,44\n");
  r = Tool("trace convert --format azure --input " + P("broken.csv") + " --output " +
           P("out2.csv"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.output, HasSubstr("line 2, column ContextTokens"));
  EXPECT_FALSE(fs::exists(P("out2.csv")));
}

// Issue 11: every entry point refuses bad input with exit 2 and a message
// naming the flag or field, before any work; none crashes, hangs, overwrites
// an input or runs anything.

std::string Replay(const std::string& config, const std::string& trace) {
  return "replay --config " + Quote(config) + " --trace " + Quote(trace);
}

// Defect 2: aborts.
TEST_F(Cli, TraceSpanningATrillionSecondsIsAnErrorNotAnAbort) {
  Write("far.csv", "t,SEQLEN\n0,4\n1000000000000,8\n");
  const ToolRun r = Tool(Replay(P("config.json"), P("far.csv")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("far.csv line 3, column t: \"1000000000000\""));
  EXPECT_THAT(r.output, HasSubstr("convert ms, us or ns timestamps to seconds"));
}

TEST_F(Cli, TinyBucketSecondsIsAnErrorBeforeAnyWork) {
  const ToolRun r = Tool(Replay(P("config.json"), P("trace.csv")) +
                         " --bucket-seconds 1e-9 --summary " + P("s.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--bucket-seconds: 1e-09 is not allowed; at most 1000000 buckets"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("padding waste")));
  EXPECT_FALSE(fs::exists(P("s.json")));
}

TEST_F(Cli, ExecuteWithAHugeSizeIsAnErrorNamingTheLimit) {
  Write("huge.csv", "t,SEQLEN\n0,4\n1,1000000000\n");
  const ToolRun r =
      Tool(Replay(P("config.json"), P("huge.csv")) +
           " --policy static --execute onednn --backend-param hidden=8 --backend-param heads=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SEQLEN 1000000000"));
  EXPECT_THAT(r.output, HasSubstr("at most 268435456 per tensor"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("padding waste")));  // before the simulated runs
}

TEST_F(Cli, EndlessInputsAreRefused) {
  for (const std::string& args :
       {Replay(P("config.json"), "/dev/zero"), Replay("/dev/zero", P("trace.csv")),
        "trace convert --format azure --input /dev/zero --output " + P("o.csv"),
        Replay(P("config.json"), dir_.string())}) {
    const ToolRun r = Tool(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("not a regular file")) << args;
  }
}

// Defect 3: hangs.
TEST_F(Cli, TinyCheckIntervalsAreConfigErrors) {
  Write("tiny.json", R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16]}],
                         "adaptive": {"check_interval_seconds": 1e-9}})");
  ToolRun r = Tool(Replay(P("tiny.json"), P("trace.csv")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("adaptive.check_interval_seconds: 1e-09 is not allowed; seconds >= 0.001"));
  Write("warm.json", R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16]}],
                         "replan": {"warmup_check_seconds": 1e-12}})");
  r = Tool(Replay(P("warm.json"), P("trace.csv")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("replan.warmup_check_seconds"));
}

TEST_F(Cli, UpdateChecksAreBoundedByTheDocumentedMaximum) {
  // Milliseconds read as seconds: 2e10 s at one check a minute is 3.3e8 checks.
  Write("ms.csv", "t,SEQLEN\n0,4\n20000000000,8\n");
  const ToolRun r =
      Tool(Replay(P("config.json"), P("ms.csv")) + " --policy adaptive --bucket-seconds 1e6");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("at most 1000000 per replay"));
  EXPECT_THAT(r.output, HasSubstr("adaptive.check_interval_seconds = 60"));
  // The bound is --max-updates (default 1000000): 1999 s at one check a minute is 34 checks.
  const ToolRun low =
      Tool(Replay(P("config.json"), P("trace.csv")) + " --policy adaptive --max-updates 10");
  EXPECT_EQ(low.code, 2) << low.output;
  EXPECT_THAT(low.output, HasSubstr("at most 10 per replay (raise the interval or --max-updates"));
  const ToolRun raised =
      Tool(Replay(P("config.json"), P("trace.csv")) + " --policy adaptive --max-updates 40");
  EXPECT_EQ(raised.code, 0) << raised.output;
  // The static policy runs no checks: the same trace replays.
  const ToolRun ok =
      Tool(Replay(P("config.json"), P("ms.csv")) + " --policy static --bucket-seconds 1e6");
  EXPECT_EQ(ok.code, 0) << ok.output;
}

TEST_F(Cli, TheLooksAtTheCombinationsCountInTheUpdateBound) {
  // A sparse set looks at its combinations every combination_interval_seconds:
  // 1999 s at one look a second is 1999 checks, refused up front, naming it.
  Write("two.json", R"({"dims": [{"name": "BATCHSIZE", "gears": [4, 8], "splittable": true},
                                  {"name": "SEQLEN", "gears": [16, 32]}],
                         "replan": {"combination_interval_seconds": 1}})");
  Write("two.csv", "t,BATCHSIZE,SEQLEN\n0,3,10\n1999,5,20\n");
  const ToolRun sparse = Tool(Replay(P("two.json"), P("two.csv")) +
                              " --scheme sparse --max-updates 1000 --bucket-seconds 1e6");
  EXPECT_EQ(sparse.code, 2) << sparse.output;
  EXPECT_THAT(sparse.output,
              HasSubstr("with replan.combination_interval_seconds = 1 that is 1999"));
  // The independent scheme has no looks: 34 checks a minute apart.
  const ToolRun independent = Tool(Replay(P("two.json"), P("two.csv")) +
                                   " --scheme independent --max-updates 1000 --bucket-seconds 1e6");
  EXPECT_EQ(independent.code, 0) << independent.output;
  // Raised, it replays; the summary counts the looks apart from the updates.
  // The worker checks every second, but a look comes only once a variant ran
  // off its cell's combination: with only (4, 16) compiled, the row at 1500 s.
  Write("one.json", R"({"dims": [{"name": "BATCHSIZE", "gears": [4, 8], "splittable": true},
                                  {"name": "SEQLEN", "gears": [16, 32]}],
                         "scheme": "sparse", "combinations": [[4, 16]],
                         "replan": {"combination_interval_seconds": 1}})");
  Write("three.csv", "t,BATCHSIZE,SEQLEN\n0,3,10\n1000,3,10\n1500,7,30\n1999,3,10\n");
  const ToolRun raised = Tool(Replay(P("one.json"), P("three.csv")) +
                              " --scheme sparse --max-updates 3000 --bucket-seconds 1e6 "
                              "--max-reject-ratio 1 --summary " +
                              P("looks.json"));
  ASSERT_EQ(raised.code, 0) << raised.output;
  std::ifstream summary(P("looks.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_GE(j["combination_looks"].get<int>(), 1);
  EXPECT_LE(j["combination_looks"].get<int>(), 3);
  EXPECT_LE(j["updates"].get<int>(), 40);
}

TEST_F(Cli, TinyDecodeStepIsAnError) {
  Write("lengths.csv", "num_prefill_tokens,num_decode_tokens\n10,3\n20,2\n30,1\n");
  const ToolRun r = Tool("trace convert --format lengths --view decode --step-ms 1e-300 --input " +
                         P("lengths.csv") + " --output " + P("out.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--step-ms"));
  EXPECT_FALSE(fs::exists(P("out.csv")));
}

// Defect 4: inputs overwritten.
TEST_F(Cli, OutputsThatAreInputsAreRefused) {
  const std::string config = ReadAll(P("config.json")), trace = ReadAll(P("trace.csv"));
  Write("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,374,44\n");
  const std::string azure = ReadAll(P("azure.csv"));
  fs::create_hard_link(P("trace.csv"), P("hard.csv"));
  fs::create_symlink(P("config.json"), P("link.json"));
  fs::create_directories(dir_ / "sub");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trace convert --format azure --input " + P("azure.csv") + " --output " + P("azure.csv"),
       "is the --input file"},
      {"trace convert --format azure --input " + P("azure.csv") + " --output " +
           P("sub/../azure.csv"),
       "is the --input file"},
      {Replay(P("config.json"), P("trace.csv")) + " --summary " + P("config.json"),
       "is the --config file"},
      {Replay(P("config.json"), P("trace.csv")) + " --decisions " + P("hard.csv"),
       "is the --trace file"},
      {Replay(P("config.json"), P("trace.csv")) + " --plot " + P("link.json"),
       "is the --config file"},
      {Replay(P("config.json"), P("trace.csv")) + " --summary " + P("s.json") + " --plot " +
           P("sub/../s.json"),
       "is also the --summary output"},
      {"-C " + Quote(dir_.string()) + " " + Replay(P("config.json"), P("trace.csv")) +
           " --summary s.json --decisions ./s.json",
       "--summary: s.json is also the --decisions output (./s.json)"},
  };
  for (const auto& [args, message] : cases) {
    const bool in_dir = args.rfind("-C ", 0) == 0;
    const ToolRun r = in_dir ? Shell("cd " + args.substr(3, args.find(' ', 3) - 3) + " && " +
                                     GEARBOX_TOOL + args.substr(args.find(' ', 3)))
                             : Tool(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << args;
  }
  EXPECT_EQ(ReadAll(P("config.json")), config);
  EXPECT_EQ(ReadAll(P("trace.csv")), trace);
  EXPECT_EQ(ReadAll(P("azure.csv")), azure);
  EXPECT_FALSE(fs::exists(P("s.json")));
}

// Defect 5: command injection through --plot.
TEST_F(Cli, HostilePlotNamesAreWrittenAsNamedAndRunNothing) {
  for (const std::string name :
       {"it's.png", "x'.system('touch PWNED').'.png", "a\"b`touch PWNED2`$(touch PWNED3).png"}) {
    const ToolRun r =
        Shell("cd " + Quote(dir_.string()) + " && " + std::string(GEARBOX_TOOL) + " " +
              Replay("config.json", "trace.csv") + " --policy static --plot " + Quote(name));
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
  }
  for (const std::string name :
       {"it's.png", "x'.system('touch PWNED').'.png", "a\"b`touch PWNED2`$(touch PWNED3).png"}) {
    EXPECT_TRUE(fs::exists(dir_ / name)) << name;
  }
  for (const char* pwned : {"PWNED", "PWNED2", "PWNED3"})
    EXPECT_FALSE(fs::exists(dir_ / pwned)) << pwned;
}

// Defect 6: all or nothing, checked before any work.
TEST_F(Cli, BadOutputLocationsFailBeforeAnyWork) {
  const ToolRun r = Tool(Replay(P("config.json"), P("trace.csv")) + " --decisions " + P("d.jsonl") +
                         " --summary " + P("s.json") + " --plot " + P("missing/p.png"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--plot: " + P("missing/p.png") + ": the directory"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("padding waste")));
  EXPECT_FALSE(fs::exists(P("d.jsonl")));
  EXPECT_FALSE(fs::exists(P("s.json")));
  const ToolRun no_gnuplot = Shell("/usr/bin/env PATH=/nonexistent " + std::string(GEARBOX_TOOL) +
                                   " " + Replay(P("config.json"), P("trace.csv")) + " --summary " +
                                   P("s.json") + " --plot " + P("p.png"));
  EXPECT_EQ(no_gnuplot.code, 2) << no_gnuplot.output;
  EXPECT_THAT(no_gnuplot.output, HasSubstr("gnuplot is not on PATH"));
  EXPECT_FALSE(fs::exists(P("s.json")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()),
            2);  // no temporaries
}

TEST_F(Cli, AnInvalidPolicySchemePairFailsBeforeTheFirstRun) {
  Write("two.json", R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 2, 4, 8]},
                                 {"name": "SEQLEN", "gears": [64, 256, 1024]}]})");
  Write("two.csv", "t,BATCHSIZE,SEQLEN\n0,1,40\n1,3,300\n");
  const ToolRun r =
      Tool(Replay(P("two.json"), P("two.csv")) + " --policy static,adaptive --scheme joint");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("adaptive/joint"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("padding waste")));
}

// Defect 7.
TEST_F(Cli, PlanUniformNearTwoToThe63HasNoNegativeGear) {
  Write("big.csv", "t,SEQLEN\n0,9223372036854775000\n1,9223372036854775807\n2,1\n");
  const ToolRun r =
      Tool("plan --trace " + P("big.csv") + " --dim SEQLEN --gears 4 --method uniform --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  for (const auto& g : j["gears"]) EXPECT_GT(g.get<int64_t>(), 0);
  EXPECT_EQ(j["gears"].back().get<int64_t>(), INT64_MAX);
}

TEST_F(Cli, PlanWarnsAboveTheRuntimesGearLimitAndRejectsBadWeights) {
  std::string trace = "t,SEQLEN\n";
  for (int i = 0; i < 200; ++i) trace += std::to_string(i) + "," + std::to_string(1 + i) + "\n";
  Write("many.csv", trace);
  ToolRun r = Tool("plan --trace " + P("many.csv") + " --dim SEQLEN --gears 100");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("warning: dp plans 100 gears; the runtime holds at most 64 per dimension"));
  r = Tool("plan --trace " + P("trace.csv") + " --dim SEQLEN --budget 4 --weights 1x,1,1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--weights: \"1x,1,1\""));
}

// Defect 9.
TEST_F(Cli, ParseErrorsExitTwoAndMistypedCommandsGetASuggestion) {
  ToolRun r =
      Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") + " --bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  r = Tool("replay --config " + P("config.json"));  // --trace missing
  EXPECT_EQ(r.code, 2) << r.output;
  r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
           " --bucket-seconds abc");
  EXPECT_EQ(r.code, 2) << r.output;
  r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
           " --bucket-seconds -1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--bucket-seconds: \"-1\" is not allowed; seconds > 0"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("1797693134862315")));  // no 309-digit limits
  r = Tool("replya --config x");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unknown command \"replya\"; did you mean \"replay\"?"));
  r = Tool("--help");
  EXPECT_EQ(r.code, 0) << r.output;
}

// Defect 10: silent acceptance.
TEST_F(Cli, ContradictoryFlagsAreRefused) {
  const std::string base = Replay(P("config.json"), P("trace.csv"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --policy replan,replan", "--policy: \"replan\" is named twice"},
      {" --policy static --update-at 10", "--update-at: the static policy runs no updates"},
      {" --size-scale 4", "--size-scale: applies to --execute only"},
      {" --execute onednn --memory-budget-mb nan", "--memory-budget-mb: \"nan\" is not allowed"},
      {" --max-reject-ratio 2", "--max-reject-ratio: 2 is not allowed"},
  };
  for (const auto& [args, message] : cases) {
    const ToolRun r = Tool(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << args;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("padding waste"))) << args;
  }
}

TEST_F(Cli, MostlyRejectedReplayExitsThree) {
  std::string trace = "t,SEQLEN\n";
  for (int i = 0; i < 100; ++i) trace += std::to_string(i) + "," + (i < 2 ? "4" : "100") + "\n";
  Write("rejected.csv", trace);
  Write("strict.json",
        R"({"dims": [{"name": "SEQLEN", "gears": [4, 8, 16], "eager_fallback": false}]})");
  ToolRun r = Tool(Replay(P("strict.json"), P("rejected.csv")) + " --policy static --summary " +
                   P("s.json"));
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_THAT(
      r.output,
      HasSubstr("static rejected 98.00% of the requests, more than --max-reject-ratio 0.01"));
  ASSERT_TRUE(fs::exists(P("s.json")));  // the figures are still written, and say so
  std::ifstream summary(P("s.json"));
  const auto j = nlohmann::json::parse(summary);
  EXPECT_DOUBLE_EQ(j["rejected_ratio"].get<double>(), 0.98);
  EXPECT_DOUBLE_EQ(j["max_reject_ratio"].get<double>(), 0.01);
  EXPECT_TRUE(j["rejected_ratio_exceeded"].get<bool>());
  r = Tool(Replay(P("strict.json"), P("rejected.csv")) + " --policy static --max-reject-ratio 1");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(Cli, ValidateChecksEverythingAndRunsNothing) {
  ToolRun r = Tool("validate --config " + P("config.json") + " --trace " + P("trace.csv"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(": ok"));
  Write("ms.csv", "t,SEQLEN\n0,4\n20000000000,8\n");
  r = Tool("validate --config " + P("config.json") + " --trace " + P("ms.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  // One line per problem: the adaptive and replan schedules; static runs no checks.
  EXPECT_THAT(r.output, HasSubstr("gearbox validate: adaptive: the trace spans"));
  EXPECT_THAT(r.output, HasSubstr("gearbox validate: replan: the trace spans"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("static:")));
  Write("bad.json", R"({"dims": [{"name": "SEQLEN", "gears": "16,32"}]})");
  r = Tool("validate --config " + P("bad.json") + " --trace " + P("trace.csv"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("dims[0].gears: \"16,32\""));
}

TEST_F(Cli, ValidateListsEveryConfigProblem) {
  Write("three.json", R"({"dims": [{"name": "SEQLEN", "gears": "16,32"}],
                          "adaptive": {"window_secs": 300}, "replan": {"compile_seconds": "2"}})");
  ToolRun r = Tool("validate --config " + P("three.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  const std::string prefix = "gearbox validate: " + P("three.json") + ": ";
  EXPECT_THAT(r.output, HasSubstr(prefix + "dims[0].gears: \"16,32\" is not allowed"));
  EXPECT_THAT(r.output, HasSubstr(prefix + "adaptive.window_secs: this key is not allowed"));
  EXPECT_THAT(r.output, HasSubstr(prefix + "replan.compile_seconds: \"2\" is not allowed"));
  size_t lines = 0;
  for (size_t at = r.output.find("gearbox validate: "); at != std::string::npos;
       at = r.output.find("gearbox validate: ", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 3u) << r.output;
}

}  // namespace

namespace {

TEST_F(Cli, FleetReplayPrintsEachReplicaAndTheFleet) {
  const ToolRun r =
      Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
           " --replicas 3 --join-at 600 --store-outage 100:200 --summary " + P("fleet.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fleet replay: replan, 3 replicas, store in-process"));
  EXPECT_THAT(r.output, HasSubstr("   fleet "));
  EXPECT_THAT(r.output, HasSubstr("joining replica:"));
  std::ifstream summary(P("fleet.json"));
  const auto j = nlohmann::json::parse(summary);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["fleet"]["requests"], 2000);
  ASSERT_EQ(j[0]["per_replica"].size(), 3u);
  EXPECT_GE(j[0]["per_replica"][2]["joined_at"], 600.0);
  EXPECT_GT(j[0]["store_traffic"]["failures"], 0);  // the outage
}

// --decisions with --replicas: one record per replica's update, each with its replica.
TEST_F(Cli, FleetReplayWritesEachReplicasDecisions) {
  const ToolRun r = Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                         " --replicas 3 --fleet-plan --decisions " + P("fleet.jsonl") +
                         " --summary " + P("fleet.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto summary = nlohmann::json::parse(ReadAll(P("fleet.json")))[0];
  std::ifstream lines(P("fleet.jsonl"));
  std::vector<uint64_t> per_replica(3, 0);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("replica") && j.contains("gears")) << line;
    ++per_replica.at(j["replica"].get<size_t>());
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(per_replica[i], summary["per_replica"][i]["updates"].get<uint64_t>()) << i;
    EXPECT_GT(per_replica[i], 0u) << i;
  }
}

// scripts/fleet-suite.sh on one short scenario: the table's row and its
// totals (no request lost; the fleet's compiles against one runtime's).
TEST_F(Cli, TheFleetSuiteTabulatesOneScenario) {
  std::string line = "GEARBOX=";
  line.append(GEARBOX_TOOL).append(" " GEARBOX_SOURCE_DIR "/scripts/fleet-suite.sh ");
  line.append("--scenarios poisson-azure --hours 0.1 --replicas 4 --jobs 1 --keep ");
  line.append(P("suite"));
  const ToolRun r = Shell(line);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("| scenario | N | compiles: one runtime / fleet |"));
  EXPECT_THAT(r.output, HasSubstr("| poisson-azure | 4 | "));
  EXPECT_THAT(r.output, HasSubstr("1 runs: "));
  EXPECT_THAT(r.output, HasSubstr("0 requests lost beyond one runtime's rejections"));
  // The compiles cell is the two summaries' figures.
  const auto single = nlohmann::json::parse(ReadAll(P("suite/poisson-azure.single.json")));
  const auto fleet = nlohmann::json::parse(ReadAll(P("suite/poisson-azure.n4.whole.json")))[0];
  EXPECT_THAT(r.output,
              HasSubstr("| poisson-azure | 4 | " + std::to_string(single["compiles"].get<int>()) +
                        " / " + std::to_string(fleet["fleet"]["compiles"].get<int>()) + " | "));
}

// scripts/fleet_sampling.py replays one runtime's gear timeline from its
// decisions: on the whole trace it gives the replay's own padding waste, and
// it prints the round-robin shares' range.
TEST_F(Cli, TheSamplingScriptReproducesOneRuntimesWaste) {
  const ToolRun replay =
      Tool("replay --config " + P("config.json") + " --trace " + P("trace.csv") + " --summary " +
           P("single.json") + " --decisions " + P("single.jsonl"));
  ASSERT_EQ(replay.code, 0) << replay.output;
  const auto single = nlohmann::json::parse(ReadAll(P("single.json")));
  const ToolRun r =
      Shell("/usr/bin/python3 " GEARBOX_SOURCE_DIR "/scripts/fleet_sampling.py " +
            P("config.json") + " " + P("trace.csv") + " " + P("single.jsonl") + " 3 --seeds 2");
  ASSERT_EQ(r.code, 0) << r.output;
  char expected[64];
  std::snprintf(expected, sizeof expected, "on the whole trace: %.2f %%",
                100.0 * single["padding_waste"].get<double>());
  EXPECT_THAT(r.output, HasSubstr(expected));
  EXPECT_THAT(r.output, HasSubstr("round-robin shares of 3: "));
  EXPECT_THAT(r.output, HasSubstr("random splits (2 seeds): worst share "));
}

TEST_F(Cli, FleetFlagsAreCheckedNamingTheFlag) {
  struct Case {
    const char* flags;
    const char* message;
  };
  const Case cases[] = {
      {" --store redis://127.0.0.1:6379", "--store: needs --replicas"},
      {" --replicas 2 --store redis://u:secretpw@127.0.0.1:6379", "<redacted>"},
      {" --replicas 2 --replica-split hash:BATCH", "hash:BATCH"},
      {" --replicas 2 --replica-split sideways", "--replica-split: \"sideways\""},
      {" --replicas 2 --store-outage 9:3", "--store-outage: \"9:3\""},
      {" --replicas 2 --join-at soon", "--join-at: \"soon\""},
      {" --replicas 2 --fleet-weighting most", "--fleet-weighting: \"most\""},
      {" --replicas 2 --optimum", "--optimum: not with --replicas"},
      {" --share-artifacts", "--share-artifacts: needs --replicas"},
      {" --replicas 2 --replica-index 2 --store redis://127.0.0.1:1 --fleet-id x",
       "--replica-index: 2 is not allowed"},
      {" --replicas 2 --replica-index 1", "only with --store"},
      {" --replicas 2 --replica-index 1 --store redis://127.0.0.1:1", "only with --fleet-id"},
      {" --replicas 2 --artifact-bytes 0", "--artifact-bytes"},
      {" --replicas 2 --fleet-id 'a b\x01'", "--fleet-id: fleet.model_id"},
  };
  const std::string base = "replay --config " + P("config.json") + " --trace " + P("trace.csv");
  for (const Case& c : cases) {
    std::string args = base;
    args.append(c.flags);
    const ToolRun r = Tool(args);
    EXPECT_EQ(r.code, 2) << c.flags << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.flags;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("secretpw"))) << c.flags;
  }
}

}  // namespace

namespace {

TEST_F(Cli, FleetReplaySharingArtifactsLoadsInsteadOfCompiling) {
  const std::string base = "replay --config " + P("config.json") + " --trace " + P("trace.csv") +
                           " --replicas 4 --summary ";
  ToolRun r = Tool(base + P("alone.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = Tool(base + P("shared.json") + " --share-artifacts --artifact-bytes 3000");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("loads"));
  const auto alone = nlohmann::json::parse(ReadAll(P("alone.json")))[0];
  const auto shared = nlohmann::json::parse(ReadAll(P("shared.json")))[0];
  EXPECT_EQ(alone["fleet"]["artifact_loads"], 0);
  EXPECT_GT(shared["fleet"]["artifact_loads"], 0);
  // Four replicas compile about what one does: fewer than alone.
  EXPECT_LT(shared["fleet"]["compiles"].get<int>(), alone["fleet"]["compiles"].get<int>());
}

// scripts/fleet-example.sh: 3 processes against one redis-server it starts.
TEST_F(Cli, AFleetOfThreeProcessesAgainstOneRedis) {
  std::string line = "GEARBOX=";
  line.append(GEARBOX_TOOL).append(" " GEARBOX_SOURCE_DIR "/scripts/fleet-example.sh ");
  line.append(P("config.json")).append(" ").append(P("trace.csv")).append(" 3");
  const ToolRun r = Shell(line);
  if (r.code == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* p : {"--- process 0", "--- process 1", "--- process 2"}) {
    EXPECT_THAT(r.output, HasSubstr(p));
  }
  // Every row served by exactly one process; artifacts shared between them.
  EXPECT_THAT(r.output, HasSubstr("fleet of 3 processes: 2000 requests"));
  const size_t at = r.output.find("compiles, ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stoi(r.output.substr(at + 10)), 0) << r.output;  // artifact loads
}

// The same with one plan: the lease in Redis decides which process plans; a
// version is published and every row is served once.
TEST_F(Cli, AFleetOfProcessesSharesOnePlanThroughRedis) {
  std::string line = "GEARBOX=";
  line.append(GEARBOX_TOOL).append(" " GEARBOX_SOURCE_DIR "/scripts/fleet-example.sh ");
  line.append(P("config.json")).append(" ").append(P("trace.csv")).append(" 3 --fleet-plan");
  const ToolRun r = Shell(line);
  if (r.code == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("one plan (the lease decides who leads)"));
  for (const char* p : {"plan: replica 0 ", "plan: replica 1 ", "plan: replica 2 "}) {
    EXPECT_THAT(r.output, HasSubstr(p));
  }
  EXPECT_THAT(r.output, HasSubstr("fleet of 3 processes: 2000 requests"));
  EXPECT_THAT(r.output, HasSubstr("on an announcement)"));  // followers watch the channel
  const size_t at = r.output.find("one plan: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stoi(r.output.substr(at + 10)), 0) << r.output;  // versions published
}

// The real store killed and restarted, empty, while three paced processes
// (--pace 400: the 2000-s trace in 5 s) share one plan through it: none
// crashes, every row is served once, the kill is felt (failed store calls),
// and the plan is found again after the restart (every process's last plan
// step saw a version, which only the leader republishing after the restart
// gives: the restart lost the old one).
TEST_F(Cli, AFleetOfProcessesSurvivesTheStoreKilledAndRestarted) {
  std::string line = "GEARBOX=";
  line.append(GEARBOX_TOOL).append(" " GEARBOX_SOURCE_DIR "/scripts/fleet-example.sh ");
  line.append(P("config.json")).append(" ").append(P("trace.csv"));
  line.append(" 3 --fleet-plan --pace 400 --kill-store-at 1.5 --store-down 1");
  const ToolRun r = Shell(line);
  if (r.code == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("redis-server killed after 1.5 s"));
  EXPECT_THAT(r.output, HasSubstr("redis-server restarted after 1 s down, empty"));
  EXPECT_THAT(r.output, HasSubstr("fleet of 3 processes: 2000 requests"));
  const size_t failed = r.output.find("store calls failed: ");
  ASSERT_NE(failed, std::string::npos) << r.output;
  EXPECT_GT(std::stoi(r.output.substr(failed + 20)), 0) << r.output;
  const std::string key = "plan version at each one's last step:";
  const size_t at = r.output.find(key);
  ASSERT_NE(at, std::string::npos) << r.output;
  std::istringstream versions(r.output.substr(at + key.size()));
  for (int i = 0; i < 3; ++i) {
    uint64_t v = 0;
    ASSERT_TRUE(versions >> v) << r.output;
    EXPECT_GT(v, 0u) << "process " << i << ": " << r.output;
  }
}

// Without a redis-server the script says so and exits 77 (a skip), starting nothing.
TEST_F(Cli, TheFleetExampleSkipsCleanlyWithoutRedis) {
  std::string line = "GEARBOX_REDIS_SERVER=/nonexistent/redis-server GEARBOX=";
  line.append(GEARBOX_TOOL).append(" " GEARBOX_SOURCE_DIR "/scripts/fleet-example.sh ");
  line.append(P("config.json")).append(" ").append(P("trace.csv"));
  const ToolRun r = Shell(line);
  EXPECT_EQ(r.code, 77) << r.output;
  EXPECT_THAT(r.output, HasSubstr("skipped: redis-server not found"));
}

}  // namespace
