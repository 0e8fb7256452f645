#include "gearbox/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Config, ParsesDimsAdaptiveAndMemoryModel) {
  auto c = ParseConfig(R"({
    "dims": [
      {"name": "BATCHSIZE", "gears": [4, 1, 2, 2]},
      {"name": "SEQLEN", "policy": "TIMES", "min": 3, "max": 100, "eager_fallback": true}
    ],
    "adaptive": {"window_seconds": 120, "add_min_samples": 3,
                 "device_memory_usage_threshold_ratio": null, "max_gears_per_type": 32},
    "memory_model": {"device_bytes": 1000, "base_bytes": 100, "graph_fixed_bytes": 10,
                     "graph_bytes_per_element": 0.5}
  })");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->dims.size(), 2u);
  EXPECT_THAT(c->dims[0].gears, ElementsAre(1, 2, 4));
  EXPECT_TRUE(c->dims[0].splittable);  // BATCHSIZE default
  EXPECT_THAT(c->dims[1].gears, ElementsAre(3, 4, 8, 16, 32, 64, 100));
  EXPECT_FALSE(c->dims[1].splittable);
  EXPECT_TRUE(c->dims[1].eager_fallback);
  EXPECT_EQ(c->adaptive.window_seconds, 120);
  EXPECT_EQ(c->adaptive.add_min_samples, 3);
  EXPECT_EQ(c->adaptive.max_gears_per_type, 32);
  EXPECT_FALSE(c->adaptive.device_memory_usage_threshold_ratio.has_value());
  EXPECT_EQ(c->adaptive.pad_add_threshold, 0.35);  // untouched default
  ASSERT_TRUE(c->memory_model.has_value());
  const int64_t g[] = {4, 10};
  EXPECT_DOUBLE_EQ(c->memory_model->GraphBytes(g), 10 + 0.5 * 40);
}

TEST(Config, MemoryBudgetAndOutOfMemoryCooldownAreAdaptiveKeysValidated) {
  auto c = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}],
                           "adaptive": {"memory_budget_bytes": 67108864}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->adaptive.memory_budget_bytes, 67108864);
  auto none = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}]})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->adaptive.memory_budget_bytes, 0);  // absent: no budget
  auto negative = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}],
                                  "adaptive": {"memory_budget_bytes": -1}})");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("memory_budget_bytes"));
  EXPECT_THAT(negative.status().message(), HasSubstr("-1"));
  auto fraction = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}],
                                  "adaptive": {"memory_budget_bytes": 1.5}})");
  ASSERT_FALSE(fraction.ok());
  EXPECT_THAT(fraction.status().message(), HasSubstr("adaptive.memory_budget_bytes"));
  auto cooldown = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}],
                                  "adaptive": {"out_of_memory_cooldown_seconds": -5}})");
  ASSERT_FALSE(cooldown.ok());
  EXPECT_THAT(cooldown.status().message(), HasSubstr("out_of_memory_cooldown_seconds"));
  EXPECT_THAT(cooldown.status().message(), HasSubstr("-5"));
  auto set = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": [1, 8]}],
                             "adaptive": {"out_of_memory_cooldown_seconds": 60}})");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->adaptive.out_of_memory_cooldown_seconds, 60.0);
}

TEST(Config, ParsesTheReplanPolicysKeys) {
  auto c = ParseConfig(R"({
    "dims": [{"name": "SEQLEN", "policy": "TIMES", "min": 1, "max": 4096}],
    "replan": {"compile_seconds": 0.5, "seconds_per_unit": 3e-7, "runtime_exponent": 2,
               "payback_seconds": 1800, "min_gain_ratio": 2, "warmup_check_seconds": 5,
               "combination_interval_seconds": 0, "max_uncompiled_share": 0.02,
               "max_changes_per_update": 4, "tail_ratio": 3, "max_graphs": 48,
               "idle_graph_release_seconds": 900, "gain_confidence_sigmas": 0.5,
               "regime_seconds": 900, "cold_start_review_seconds": 900}
  })");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->replan.cost.compile_seconds, 0.5);
  EXPECT_EQ(c->replan.cost.seconds_per_unit, 3e-7);
  EXPECT_EQ(c->replan.cost.runtime_exponent, 2);
  EXPECT_EQ(c->replan.payback_seconds, 1800);
  EXPECT_EQ(c->replan.min_gain_ratio, 2);
  EXPECT_EQ(c->replan.warmup_check_seconds, 5);
  EXPECT_EQ(c->replan.combination_interval_seconds, 0);  // off
  EXPECT_EQ(c->replan.max_uncompiled_share, 0.02);
  EXPECT_EQ(c->replan.max_changes_per_update, 4);
  EXPECT_EQ(c->replan.tail_ratio, 3);
  EXPECT_EQ(c->replan.max_graphs, 48);
  EXPECT_EQ(c->replan.idle_graph_release_seconds, 900);
  EXPECT_EQ(c->replan.gain_confidence_sigmas, 0.5);
  EXPECT_EQ(c->replan.regime_seconds, 900);
  EXPECT_EQ(c->replan.cold_start_review_seconds, 900);
  EXPECT_EQ(c->replan.min_gear_lifetime_seconds,
            ReplanOptions{}.min_gear_lifetime_seconds);  // untouched default
}

TEST(Config, ABadReplanNumberNamesTheKey) {
  for (const char* key : {"idle_graph_release_seconds", "gain_confidence_sigmas", "regime_seconds",
                          "cold_start_review_seconds"}) {
    for (const char* bad : {"-1", "\"600\"", "null", "true"}) {
      auto c =
          ParseConfig(std::string(R"({"dims": [{"name": "SEQLEN", "gears": [8]}], "replan": {")") +
                      key + "\": " + bad + "}}");
      ASSERT_FALSE(c.ok()) << key << " " << bad;
      EXPECT_THAT(c.status().message(), HasSubstr(std::string("replan.") + key)) << bad;
    }
  }
}

TEST(Config, ParsesJointGearSets) {
  auto c = ParseConfig(R"({
    "dims": [{"name": "BATCHSIZE", "gears": [1, 8, 64]}, {"name": "SEQLEN", "gears": [512, 4096]}],
    "scheme": "joint", "combinations": [[64, 4096], [8, 512]], "cover_ratio": null
  })");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->combination_spec.scheme, GearScheme::kJoint);
  EXPECT_THAT(c->combination_spec.combinations,
              ElementsAre(GearCombination{64, 4096}, GearCombination{8, 512}));
  EXPECT_TRUE(std::isinf(c->combination_spec.cover_ratio));
  auto sparse =
      ParseConfig(R"({"dims": [{"name": "A", "gears": [1, 2]}, {"name": "B", "gears": [3]}],
                                "scheme": "sparse"})");
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_TRUE(
      sparse->combination_spec.combinations.empty());  // every cell, when the runtime starts
}

TEST(Config, NamedLadders) {
  EXPECT_THAT(*MakeNamedGears("POW2", 3, 100, "d"), ElementsAre(4, 8, 16, 32, 64, 128));
  EXPECT_THAT(*MakeNamedGears("TIMES", 3, 100, "d"), ElementsAre(3, 4, 8, 16, 32, 64, 100));
  auto vllm = MakeNamedGears("VLLM", std::nullopt, std::nullopt, "d");
  ASSERT_TRUE(vllm.ok());
  EXPECT_EQ(vllm->size(), 51u);
  EXPECT_THAT(std::vector<int64_t>(vllm->begin(), vllm->begin() + 5), ElementsAre(1, 2, 4, 8, 16));
  EXPECT_EQ((*vllm)[33], 248);
  EXPECT_EQ((*vllm)[34], 256);
  EXPECT_EQ(vllm->back(), 512);
  EXPECT_THAT(*MakeNamedGears("VLLM", 100, 200, "d"),
              ElementsAre(104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200));
  auto c = ParseConfig(R"({"dims": [{"name": "BATCHSIZE", "gears": "VLLM"}]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dims[0].gears.size(), 51u);
  EXPECT_THAT(MakeNamedGears("FIBONACCI", 1, 2, "dims[0]").status().message(),
              HasSubstr("dims[0].policy: \"FIBONACCI\""));
}

struct BadConfig {
  const char* json;
  const char* message;
};

class ConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ConfigErrors, NameTheFieldAndWhatIsAllowed) {
  auto c = ParseConfig(GetParam().json);
  ASSERT_FALSE(c.ok()) << GetParam().json;
  EXPECT_THAT(c.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigErrors,
    ::testing::Values(
        BadConfig{"{\"dims\": [", "config line 1: not valid JSON"},
        BadConfig{"{\n\"dims\": [\n{\"name\": \"A\", \"gears\": [1,]}]}", "config line 3"},
        BadConfig{"[]", "config: [] is not allowed"},
        BadConfig{R"({"dimz": []})", "dimz: this key is not allowed; unknown key"},
        BadConfig{R"({"dims": []})", "dims: [] is not allowed"},
        BadConfig{R"({"dims": [{"gears": [1]}]})", "dims[0].name: missing"},
        BadConfig{R"({"dims": [{"name": "A"}]})", "neither gears nor policy"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1], "policy": "TIMES"}]})",
                  "both gears and policy"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1, "2"]}]})", "dims[0].gears[1]: \"2\""},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1.5]}]})", "dims[0].gears[0]: 1.5"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [0]}]})", "dims[0].gears[0]: 0"},
        BadConfig{R"({"dims": [{"name": "A", "policy": "TIMES", "min": 5}]})",
                  "dims[0].max: missing"},
        BadConfig{R"({"dims": [{"name": "A", "policy": "TIMES", "min": 5, "max": 2}]})",
                  "dims[0].max: 2"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1], "min": 1}]})",
                  "min/max go with a named ladder"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1], "splittable": "yes"}]})",
                  "dims[0].splittable: \"yes\""},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1], "color": 1}]})", "dims[0].color"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}, {"name": "A", "gears": [2]}]})",
                  "dims[1].name: \"A\""},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "adaptive": {"window_secs": 1}})",
                  "adaptive.window_secs: this key is not allowed"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}], "adaptive": {"pad_add_threshold": 2}})",
            "adaptive: pad_add_threshold: 2"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}], "adaptive": {"add_min_samples": "5"}})",
            "adaptive.add_min_samples: \"5\""},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1, 2, 3]}], "adaptive": {"max_gears_per_type": 2}})",
            "dims[0].gears: 3 gears"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"compile_secs": 1}})",
                  "replan.compile_secs: this key is not allowed"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"warmup_check_seconds": 0}})",
            "replan.warmup_check_seconds: 0"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}],
                      "replan": {"max_uncompiled_share": -0.1}})",
                  "replan.max_uncompiled_share: -0.1 is not allowed; a share in [0, 1]"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}],
                      "replan": {"combination_interval_seconds": 1e-6}})",
                  "replan.combination_interval_seconds: 1e-06 is not allowed; 0 (only at "
                  "updates) or a finite number of seconds >= 0.001"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"max_changes_per_update": 0}})",
            "replan.max_changes_per_update: 0"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"max_graphs": 0}})",
                  "replan.max_graphs: 0 is not allowed; an integer in [1, 65536]"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"tail_ratio": "2"}})",
                  "replan.tail_ratio: \"2\""},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}, {"name": "B", "gears": [2]}], "scheme": "diagonal"})",
            "scheme: \"diagonal\" is not allowed"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "scheme": "joint"})",
                  "exactly 2 dimensions"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}, {"name": "B", "gears": [2]}], "scheme": "joint",
                      "combinations": [[1, 3]]})",
            "combinations[0][1]: 3"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}, {"name": "B", "gears": [2]}], "scheme": "joint",
                      "combinations": [[1]]})",
            "combinations[0]: [1] is not allowed"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}, {"name": "B", "gears": [2]}], "scheme": "joint",
                      "cover_ratio": 0.5})",
            "cover_ratio: 0.5"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "combinations": [[1, 1]]})",
                  "combinations go with the joint and sparse schemes only"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "memory_model": {"base_bytes": 1}})",
                  "memory_model.device_bytes: missing"},
        BadConfig{
            R"({"dims": [{"name": "A", "gears": [1]}], "memory_model": {"device_bytes": -5}})",
            "memory_model.device_bytes: -5"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}],
                      "executor": {"out_of_memory_fallback": "bigger"}})",
                  "executor.out_of_memory_fallback: \"bigger\" is not allowed; \"larger\", "
                  "\"split\" or \"exact\""},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}],
                      "executor": {"out_of_memory_fallback": ["split", 3]}})",
                  "executor.out_of_memory_fallback[1]: 3 is not allowed"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}],
                      "executor": {"out_of_memory_fallback": ["exact", "split", "exact"]}})",
                  "executor.out_of_memory_fallback[2]: \"exact\" is not allowed; each of"},
        BadConfig{R"({"dims": [{"name": "A", "gears": [1]}], "executor": {"fallback": "exact"}})",
                  "executor.fallback: this key is not allowed; unknown key; allowed here: "
                  "out_of_memory_fallback"}));

// The executor section: one name, a list in order, an empty list (no
// fallback), and the default when absent.
TEST(Config, ExecutorOutOfMemoryFallbackIsOneNameOrAnOrderedList) {
  const std::string dims = R"("dims": [{"name": "A", "gears": [1]}])";
  auto c = ParseConfig("{" + dims + "}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->executor.out_of_memory_fallback,
              ElementsAre(OutOfMemoryFallback::kLarger, OutOfMemoryFallback::kSplit,
                          OutOfMemoryFallback::kExact));
  c = ParseConfig("{" + dims + R"(, "executor": {"out_of_memory_fallback": "split"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->executor.out_of_memory_fallback, ElementsAre(OutOfMemoryFallback::kSplit));
  c = ParseConfig("{" + dims + R"(, "executor": {"out_of_memory_fallback": ["exact", "larger"]}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->executor.out_of_memory_fallback,
              ElementsAre(OutOfMemoryFallback::kExact, OutOfMemoryFallback::kLarger));
  c = ParseConfig("{" + dims + R"(, "executor": {"out_of_memory_fallback": []}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->executor.out_of_memory_fallback.empty());
}

// Issue 11 (defects 1, 3, 9, 10): configs that used to pass, or to fail
// with a misleading message.
struct BadConfigCase {
  const char* name;
  const char* json;
  const char* error;
};

class BadConfigs : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(BadConfigs, AreRefusedNamingTheField) {
  auto c = ParseConfig(GetParam().json);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().error));
}

INSTANTIATE_TEST_SUITE_P(
    Issue11, BadConfigs,
    ::testing::Values(
        BadConfigCase{"base_above_device",
                      R"({"dims": [{"name": "S", "gears": [4]}],
                          "memory_model": {"device_bytes": 1000, "base_bytes": 2000}})",
                      "memory_model.base_bytes: 2000 is not allowed; at most device_bytes (1000)"},
        BadConfigCase{
            "tiny_check_interval",
            R"({"dims": [{"name": "S", "gears": [4]}], "adaptive": {"check_interval_seconds": 1e-7}})",
            "adaptive.check_interval_seconds: 1e-07 is not allowed; seconds >= 0.001"},
        BadConfigCase{
            "tiny_warmup_check",
            R"({"dims": [{"name": "S", "gears": [4]}], "replan": {"warmup_check_seconds": 1e-300}})",
            "replan.warmup_check_seconds: 1e-300 is not allowed; seconds >= 0.001"},
        BadConfigCase{"gears_as_a_string", R"({"dims": [{"name": "S", "gears": "16,32"}]})",
                      "dims[0].gears: \"16,32\" is not allowed; a JSON list of integers"},
        BadConfigCase{"duplicated_key", R"({"dims": [{"name": "S", "gears": [4], "gears": [8]}]})",
                      "config key \"gears\": given twice is not allowed"},
        BadConfigCase{"duplicated_top_key",
                      R"({"dims": [{"name": "S", "gears": [4]}], "adaptive": {}, "adaptive": {}})",
                      "config key \"adaptive\": given twice"},
        BadConfigCase{"vllm_min_above_max",
                      R"({"dims": [{"name": "S", "policy": "VLLM", "min": 64, "max": 8}]})",
                      "dims[0].max: 8 is not allowed; max >= min (64)"}),
    [](const ::testing::TestParamInfo<BadConfigCase>& i) { return std::string(i.param.name); });

// Issue 11: validate lists every problem of a config, not just the first.
std::vector<std::string> Messages(const std::vector<absl::Status>& problems) {
  std::vector<std::string> out;
  for (const absl::Status& p : problems) out.emplace_back(p.message());
  return out;
}

std::string ParseError(std::string_view json) {
  auto c = ParseConfig(json);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigProblems, ListsEveryIndependentProblemInOrder) {
  const char* json = R"({"dims": [{"name": "A", "gears": [0]}, {"name": "B", "gears": [1, 2, 3]}],
                         "adaptive": {"window_secs": 300, "max_gears_per_type": 2},
                         "replan": {"compile_seconds": "2"},
                         "memory_model": {"base_bytes": 1},
                         "extra": 1})";
  const auto problems = Messages(ConfigProblems(json));
  ASSERT_EQ(problems.size(), 5u) << ::testing::PrintToString(problems);
  EXPECT_THAT(problems[0], HasSubstr("extra: this key is not allowed; unknown key"));
  EXPECT_THAT(problems[1], HasSubstr("dims[0].gears[0]: 0"));
  EXPECT_THAT(problems[2], HasSubstr("adaptive.window_secs: this key is not allowed"));
  EXPECT_THAT(problems[3], HasSubstr("replan.compile_seconds: \"2\" is not allowed; a number"));
  EXPECT_THAT(problems[4], HasSubstr("memory_model.device_bytes: missing"));
  EXPECT_EQ(problems[0], ParseError(json));  // the first is ParseConfig's error
}

TEST(ConfigProblems, EachProblemIsTheMessageParseConfigGivesForItAlone) {
  const char* dims = R"({"dims": [{"name": "A", "gears": [1, "x"]}]})";
  const char* adaptive =
      R"({"dims": [{"name": "A", "gears": [1]}], "adaptive": {"window_secs": 300}})";
  const char* replan =
      R"({"dims": [{"name": "A", "gears": [1]}], "replan": {"compile_seconds": -1}})";
  const char* all = R"({"dims": [{"name": "A", "gears": [1, "x"]}],
                        "adaptive": {"window_secs": 300}, "replan": {"compile_seconds": -1}})";
  EXPECT_THAT(Messages(ConfigProblems(all)),
              ElementsAre(ParseError(dims), ParseError(adaptive), ParseError(replan)));
  for (const char* one : {dims, adaptive, replan}) {
    EXPECT_THAT(Messages(ConfigProblems(one)), ElementsAre(ParseError(one))) << one;
  }
}

TEST(ConfigProblems, DependentChecksRunOnlyWhenTheirPartsParsed) {
  // dims[1] is fine but needs 3 gears > 2; dims[0] failed, so no gear set is built.
  EXPECT_THAT(Messages(ConfigProblems(R"({"dims": [{"name": "A", "gears": [0]},
                                                   {"name": "B", "gears": [1, 2, 3]}],
                                          "adaptive": {"max_gears_per_type": 2}})")),
              ElementsAre(HasSubstr("dims[0].gears[0]: 0"), HasSubstr("dims[1].gears: 3 gears")));
  // A bad adaptive section: its max_gears_per_type is not compared.
  EXPECT_THAT(Messages(ConfigProblems(R"({"dims": [{"name": "A", "gears": [1, 2, 3]}],
                                          "adaptive": {"max_gears_per_type": 2, "x": 1}})")),
              ElementsAre(HasSubstr("adaptive.x: this key is not allowed")));
  // The gear set is checked once dims and combinations parsed; a bad scheme stops it.
  EXPECT_THAT(Messages(ConfigProblems(R"({"dims": [{"name": "A", "gears": [1]}],
                                          "scheme": "joint", "cover_ratio": "x"})")),
              ElementsAre(HasSubstr("cover_ratio: \"x\"")));
  EXPECT_THAT(Messages(ConfigProblems(R"({"dims": [{"name": "A", "gears": [1]}],
                                          "scheme": "joint", "memory_model": 1})")),
              ElementsAre(HasSubstr("exactly 2 dimensions"), HasSubstr("memory_model: 1")));
}

TEST(ConfigProblems, SyntaxErrorsAndDuplicateKeysAreOneProblem) {
  EXPECT_THAT(Messages(ConfigProblems("{\"dims\": [")),
              ElementsAre(HasSubstr("config line 1: not valid JSON")));
  EXPECT_THAT(Messages(ConfigProblems(R"({"dims": 1, "adaptive": {}, "adaptive": {}})")),
              ElementsAre(HasSubstr("config key \"adaptive\": given twice")));
  EXPECT_THAT(Messages(ConfigProblems("[]")), ElementsAre(HasSubstr("config: [] is not allowed")));
}

TEST(ConfigProblems, NoneForAValidConfig) {
  EXPECT_THAT(ConfigProblems(R"({"dims": [{"name": "A", "gears": [1, 2]}],
                                 "adaptive": {"window_seconds": 60}, "replan": {}})"),
              ::testing::IsEmpty());
}

TEST_P(ConfigErrors, ConfigProblemsStartsWithTheSameMessage) {
  auto c = ParseConfig(GetParam().json);
  const auto problems = ConfigProblems(GetParam().json);
  ASSERT_FALSE(problems.empty()) << GetParam().json;
  EXPECT_EQ(problems.front(), c.status());
}

TEST(Config, SameKeyInDifferentObjectsIsFine) {
  auto c = ParseConfig(R"({"dims": [{"name": "A", "gears": [4]}, {"name": "B", "gears": [8]}]})");
  ASSERT_TRUE(c.ok()) << c.status();
}

}  // namespace
}  // namespace gearbox
