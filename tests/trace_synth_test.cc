// The synthetic trace suite (gearbox/trace_synth.h): determinism, the
// generator's statistics against the scenarios and the bundled length
// distributions, the row bounds; and the suite's yardstick, the offline
// optimum at the same graph count, against a brute force.
#include "gearbox/trace_synth.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <set>
#include <sstream>

#include "gearbox/config.h"
#include "gearbox/replay_summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gearbox {
namespace {

using ::testing::HasSubstr;

const LengthPools& Pools() {
  static const LengthPools pools = [] {
    auto p = LoadLengthPools(GEARBOX_DATA_DIR);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : LengthPools{};
  }();
  return pools;
}

std::vector<RequestRecord> Draw(const std::string& name, SynthOptions options = {}) {
  auto scenario = FindSynthScenario(name);
  EXPECT_TRUE(scenario.ok()) << scenario.status();
  auto requests = SynthRequests(*scenario, Pools(), options);
  EXPECT_TRUE(requests.ok()) << requests.status();
  return requests.ok() ? *std::move(requests) : std::vector<RequestRecord>{};
}

std::string Csv(const Trace& trace) {
  std::ostringstream out;
  WriteTraceCsv(trace, out);
  return out.str();
}

double Quantile(std::vector<int64_t> v, double q) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]);
}

std::vector<int64_t> Prompts(const std::vector<RequestRecord>& requests) {
  std::vector<int64_t> out;
  for (const RequestRecord& r : requests) out.push_back(r.prompt_tokens);
  return out;
}

size_t CountIn(const std::vector<RequestRecord>& requests, double lo, double hi) {
  return static_cast<size_t>(std::count_if(requests.begin(), requests.end(), [&](auto& r) {
    return r.arrival >= lo && r.arrival < hi;
  }));
}

TEST(TraceSynth, AtLeastTwentyScenariosWithDistinctNamesAndDescriptions) {
  std::set<std::string> names;
  for (const SynthScenario& s : SynthScenarios()) {
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
  }
  EXPECT_GE(names.size(), 20u);
}

TEST(TraceSynth, SameSeedSameBytesOtherSeedOtherBytes) {
  SynthOptions one;
  one.seed = 7;
  one.hours = 0.1;
  SynthOptions other = one;
  other.seed = 8;
  for (const char* name : {"poisson-mix", "step-chat-to-docs", "burst-long", "tenants-shift"}) {
    const std::string a = Csv(PrefillView(Draw(name, one)));
    EXPECT_EQ(a, Csv(PrefillView(Draw(name, one)))) << name;
    EXPECT_NE(a, Csv(PrefillView(Draw(name, other)))) << name;
  }
}

// The same bytes on every standard library: the first draws are pinned
// (std:: distributions would differ between libstdc++ and libc++).
TEST(TraceSynth, FirstDrawsArePinned) {
  SynthRandom random(1);
  // mt19937_64's first output for seed 1 is 2469588189546311528.
  EXPECT_EQ(random.Uniform(), static_cast<double>(2469588189546311528ull >> 11) * 0x1.0p-53);
  SynthOptions options;
  options.hours = 0.01;
  const std::vector<RequestRecord> r = Draw("poisson-azure", options);
  ASSERT_GE(r.size(), 3u);
  EXPECT_EQ(Csv(PrefillView({r.begin(), r.begin() + 3})),
            "t,SEQLEN\n0.029331,119\n0.115764,1002\n0.131232,1089\n");
}

TEST(TraceSynth, MeanRateMatchesTheScenarioOverALongDraw) {
  SynthOptions options;
  options.hours = 4;
  for (const char* name : {"poisson-azure", "diurnal", "tenants-shift", "burst-short"}) {
    const auto scenario = FindSynthScenario(name);
    const double expected = ScenarioMeanRate(*scenario, options.hours) * options.hours * 3600;
    const double drawn = static_cast<double>(Draw(name, options).size());
    EXPECT_NEAR(drawn / expected, 1.0, 0.03) << name;
  }
}

TEST(TraceSynth, RateFlagSetsTheMeanRate) {
  SynthOptions options;
  options.rate = 20;
  const double drawn = static_cast<double>(Draw("poisson-mix", options).size());
  EXPECT_NEAR(drawn / (20 * 3600), 1.0, 0.02);
}

// At each quantile q of the source's prompt lengths, the share of drawn
// prompts at or below it is q within 0.02 (a Kolmogorov-Smirnov bound: 18,000
// draws put 0.0145 at the 0.1 % level). Compared as shares, not token counts:
// the sources have flat stretches (Azure's 90th percentile sits on a gap
// of ~150 tokens).
TEST(TraceSynth, PromptQuantilesMatchTheSourceData) {
  const std::pair<const char*, LengthSource> cases[] = {
      {"poisson-azure", LengthSource::kAzureConv},
      {"poisson-sharegpt", LengthSource::kShareGpt},
      {"poisson-arxiv", LengthSource::kArxiv}};
  for (auto [name, source] : cases) {
    std::vector<int64_t> drawn = Prompts(Draw(name));
    std::vector<int64_t> real = Prompts(Pools().of(source));
    std::sort(drawn.begin(), drawn.end());
    std::sort(real.begin(), real.end());
    auto share = [](const std::vector<int64_t>& v, int64_t x) {
      return static_cast<double>(std::upper_bound(v.begin(), v.end(), x) - v.begin()) /
             static_cast<double>(v.size());
    };
    for (double q : {0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95}) {
      const int64_t x = static_cast<int64_t>(Quantile(real, q));
      EXPECT_NEAR(share(drawn, x), share(real, x), 0.02) << name << " q" << q << " = " << x;
    }
  }
}

TEST(TraceSynth, StepChangesTheMixAtOneTime) {
  const std::vector<RequestRecord> r = Draw("step-short-to-long");
  const double span = 3600;
  // ShareGPT's shorter half before the step (drawn in the middle half of
  // the hour), its longer half after: the first quarter's prompts all lie
  // below the last quarter's.
  int64_t early_max = 0, late_min = INT64_MAX;
  for (const RequestRecord& x : r) {
    if (x.arrival < span / 4) early_max = std::max(early_max, x.prompt_tokens);
    if (x.arrival >= 3 * span / 4) late_min = std::min(late_min, x.prompt_tokens);
  }
  EXPECT_LE(early_max, late_min);
  // chat -> documents: arXiv has no prompt above 4,054 tokens.
  const std::vector<RequestRecord> docs = Draw("step-chat-to-docs");
  size_t early_long = 0, late_long = 0;
  for (const RequestRecord& x : docs) {
    early_long += x.arrival < span / 4 && x.prompt_tokens > 4054;
    late_long += x.arrival >= 3 * span / 4 && x.prompt_tokens > 4054;
  }
  EXPECT_GT(early_long, 500u);
  EXPECT_EQ(late_long, 0u);
}

TEST(TraceSynth, DiurnalPeakToTroughRatio) {
  SynthOptions options;
  options.hours = 4;
  const std::vector<RequestRecord> r = Draw("diurnal", options);
  const double day = options.hours * 3600;
  // rate 5 (1 + 0.6 sin(2 pi t / day)): peak at a quarter day, trough at
  // three quarters; over windows of a tenth of a day the mean ratio is
  // (1 + 0.6 s) / (1 - 0.6 s), s = sin(0.1 pi) / (0.1 pi), about 3.88.
  const double peak = static_cast<double>(CountIn(r, 0.2 * day, 0.3 * day));
  const double trough = static_cast<double>(CountIn(r, 0.7 * day, 0.8 * day));
  EXPECT_NEAR(peak / trough, 3.88, 0.3);
}

TEST(TraceSynth, DriftMovesTheMeanLength) {
  const std::vector<RequestRecord> r = Draw("drift-up");
  std::vector<int64_t> early, late;
  for (const RequestRecord& x : r) {
    if (x.arrival < 600) early.push_back(x.prompt_tokens);
    if (x.arrival >= 3000) late.push_back(x.prompt_tokens);
  }
  // x0.5 -> x2 geometrically: the first and last ten minutes' medians are
  // about 0.56 and 1.78 times the source's, a ratio near 3.2.
  EXPECT_NEAR(Quantile(late, 0.5) / Quantile(early, 0.5), 3.2, 0.4);
}

TEST(TraceSynth, BurstsFloodOneBand) {
  const std::vector<RequestRecord> r = Draw("burst-long");
  // Azure's prompts above 3,772 (arXiv's 90th percentile) are rare; the
  // bursts add about 3 x 180 s x 20 req/s of them.
  const size_t long_ones = static_cast<size_t>(std::count_if(r.begin(), r.end(), [](auto& x) {
    return x.prompt_tokens >= 3700 && x.prompt_tokens <= 4054;
  }));
  EXPECT_GT(long_ones, 3u * 180 * 20 * 8 / 10);
}

// The largest SEQLEN gear of a bundled config.
int64_t LargestSeqlen(const std::string& path) {
  auto config = LoadConfigFile(path);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return 0;
  for (const DimensionSpec& d : config->dims) {
    if (d.name == "SEQLEN") return d.gears.back();
  }
  ADD_FAILURE() << path << " has no SEQLEN";
  return 0;
}

TEST(TraceSynth, EveryScenarioDrawsSizesThatFitTheConfigs) {
  // The suite replays the long-context scenarios (long-*) with
  // data/configs/long-context, the others with data/configs.
  const std::string dir = GEARBOX_DATA_DIR "/configs";
  for (const char* view : {"/prefill_times.json", "/decode_times.json"}) {
    EXPECT_EQ(LargestSeqlen(dir + view), kSynthMaxTokens) << view;
    EXPECT_EQ(LargestSeqlen(dir + "/long-context" + view), kSynthLongMaxTokens) << view;
  }
  SynthOptions options;
  options.hours = 0.02;
  for (const SynthScenario& s : SynthScenarios()) {
    EXPECT_EQ(s.max_tokens, s.name.starts_with("long-") ? kSynthLongMaxTokens : kSynthMaxTokens)
        << s.name;
    auto r = SynthRequests(s, Pools(), options);
    ASSERT_TRUE(r.ok()) << s.name << ": " << r.status();
    EXPECT_FALSE(r->empty()) << s.name;
    for (const RequestRecord& x : *r) {
      ASSERT_GE(x.prompt_tokens, 1) << s.name;
      ASSERT_LE(x.prompt_tokens + x.output_tokens, s.max_tokens) << s.name;
      ASSERT_LT(x.arrival, options.hours * 3600) << s.name;
    }
    EXPECT_TRUE(std::is_sorted(r->begin(), r->end(), [](auto& a, auto& b) {
      return a.arrival < b.arrival;
    })) << s.name;
  }
}

TEST(TraceSynth, StationaryScenariosKeepOneRateAndOneDistribution) {
  std::set<std::string> stationary;
  for (const SynthScenario& s : SynthScenarios()) {
    if (IsStationary(s)) stationary.insert(s.name);
  }
  EXPECT_EQ(stationary, (std::set<std::string>{"poisson-azure", "poisson-sharegpt", "poisson-arxiv",
                                               "poisson-mix", "low-rate", "low-rate-24h",
                                               "high-rate", "narrow-band", "bimodal", "long-chat",
                                               "long-docs", "long-mix"}));
  SynthScenario s = *FindSynthScenario("poisson-azure");
  s.tenants[0].diurnal_amplitude = 0.1;
  EXPECT_FALSE(IsStationary(s));
}

TEST(TraceSynth, LongContextStretchesTheSourcesPrompts) {
  // long-chat: ShareGPT's prompts x8, clamped to 131072 with the output.
  const std::vector<int64_t> source = Prompts(Pools().of(LengthSource::kShareGpt));
  const std::vector<int64_t> prompts = Prompts(Draw("long-chat"));
  ASSERT_GT(prompts.size(), 1000u);
  for (double q : {0.1, 0.5, 0.9}) {
    EXPECT_NEAR(Quantile(prompts, q) / (8.0 * Quantile(source, q)), 1.0, 0.1) << "quantile " << q;
  }
  EXPECT_GT(Quantile(prompts, 1.0), kSynthMaxTokens);  // past the short scenarios' clamp
  // long-mix spans 2 to over 100k tokens: Azure's chat beside ShareGPT x16.
  int64_t shortest = kSynthLongMaxTokens, longest = 0;
  for (const RequestRecord& x : Draw("long-mix")) {
    shortest = std::min(shortest, x.prompt_tokens);
    longest = std::max(longest, x.prompt_tokens + x.output_tokens);
  }
  EXPECT_LT(shortest, 16);
  EXPECT_GT(longest, 100000);
  EXPECT_LE(longest, kSynthLongMaxTokens);
}

TEST(TraceSynth, DecodeViewIsTwoDimensional) {
  SynthOptions options;
  options.hours = 0.05;
  auto view = SynthDecodeView(Draw("poisson-sharegpt", options), DecodeSimulation{}, 1'000'000);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(view->dimensions, ::testing::ElementsAre("BATCHSIZE", "SEQLEN"));
  EXPECT_GT(view->rows(), 1000u);
}

TEST(TraceSynth, RowBoundsNameTheFlag) {
  const auto scenario = FindSynthScenario("high-rate");
  SynthOptions options;
  options.hours = 24;  // 86.4 million requests
  auto r = SynthRequests(*scenario, Pools(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--max-rows"));
  EXPECT_THAT(r.status().message(), HasSubstr("--hours or --rate"));

  options.hours = 0;
  options.rate = -1;
  EXPECT_THAT(SynthRequests(*scenario, Pools(), options).status().message(), HasSubstr("--rate"));
  options.rate = 0;
  options.max_rows = kMaxSynthMaxRows + 1;
  EXPECT_THAT(SynthRequests(*scenario, Pools(), options).status().message(),
              HasSubstr("--max-rows"));
  EXPECT_THAT(FindSynthScenario("nope").status().message(), HasSubstr("--scenario"));

  SynthOptions small;
  small.hours = 0.05;
  auto view = SynthDecodeView(Draw("poisson-sharegpt", small), DecodeSimulation{}, 1000);
  ASSERT_FALSE(view.ok());
  EXPECT_THAT(view.status().message(), HasSubstr("--max-rows"));
}

// A SEQLEN trace of min_rows + [0, more_rows) rows `apart` seconds apart,
// sizes uniform in 1..max_size.
Trace RandomSeqlenTrace(SynthRandom& random, size_t min_rows, size_t more_rows, double apart,
                        size_t max_size) {
  Trace trace;
  trace.dimensions = {"SEQLEN"};
  const size_t rows = min_rows + random.Index(more_rows);
  for (size_t i = 0; i < rows; ++i) {
    trace.time.push_back(static_cast<double>(i) * apart);
    trace.sizes.push_back(1 + static_cast<int64_t>(random.Index(max_size)));
  }
  return trace;
}

// OfflineOptimum of one run on a one-column SEQLEN trace (not splittable)
// whose compiled graphs averaged `avg_graphs`.
absl::StatusOr<DimensionOptimum> OptimumOfOneRun(const Trace& trace, double avg_graphs) {
  RuntimeConfig config;
  config.dims.resize(1);
  config.dims[0].name = "SEQLEN";
  config.dims[0].splittable = false;
  ReplayResult result;
  result.dimensions = {"SEQLEN"};
  result.avg_gears = {avg_graphs};
  result.avg_graphs = avg_graphs;
  auto optimum = OfflineOptimum(config, trace, std::span<const ReplayResult>(&result, 1));
  if (!optimum.ok()) return optimum.status();
  return (*optimum)[0][0];
}

// The suite's yardstick: OfflineOptimum's "same graph count" plan is the
// best one of round(avg_graphs) gears covering the largest size; checked
// against every subset of the distinct sizes. (OptimalGears alone has its
// own brute force in planner_test.cc, MatchesBruteForceOnRandomInputs.)
TEST(SuiteOptimum, SameGraphCountMatchesBruteForce) {
  SynthRandom random(3);
  for (int trial = 0; trial < 30; ++trial) {
    const Trace trace = RandomSeqlenTrace(random, 5, 20, 1.0, 12);
    std::vector<int64_t> distinct(trace.sizes);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const double avg_graphs = 0.6 + static_cast<double>(random.Index(4));  // rounds to 1..4
    const int k = static_cast<int>(std::lround(avg_graphs));
    auto optimum = OptimumOfOneRun(trace, avg_graphs);
    ASSERT_TRUE(optimum.ok()) << optimum.status();
    const DimensionOptimum& o = *optimum;
    ASSERT_EQ(o.graph_count, k);
    // Brute force: every set of at most k gears among the distinct sizes
    // that holds the largest one.
    double best = 1e300;
    const size_t m = distinct.size();
    for (uint64_t mask = 0; mask < (uint64_t{1} << m); ++mask) {
      if (!(mask >> (m - 1) & 1) || std::popcount(mask) > k) continue;
      double padded = 0;
      for (int64_t size : trace.sizes) {
        for (size_t j = 0; j < m; ++j) {
          if ((mask >> j & 1) && distinct[j] >= size) {
            padded += static_cast<double>(distinct[j]);
            break;
          }
        }
      }
      best = std::min(best, padded);
    }
    EXPECT_DOUBLE_EQ(o.same_graph_count.padded, best) << "trial " << trial;
  }
}

// The other-half optimum (OtherHalfWaste): each half of the trace (alternate
// minutes) is planned with the trace's largest size and pads the other.
TEST(SuiteOptimum, OtherHalfPlansEachHalfAndRunsTheOther) {
  Trace trace;
  trace.dimensions = {"SEQLEN"};
  // Minute 0: sizes 2 and 3; minute 1: 5 and 8; minute 2 (the first half again): 3.
  trace.time = {0, 1, 60, 61, 120};
  trace.sizes = {2, 3, 5, 8, 3};
  // Two gears planned on {2, 3, 3} and the largest, 8: {3, 8}; 5 and 8 pad to
  // 16. On {5, 8} and 8: {5, 8}; 2, 3, 3 pad to 15. 31 padded of 21.
  auto waste = OtherHalfWaste(trace, 0, 2);
  ASSERT_TRUE(waste.ok()) << waste.status();
  ASSERT_TRUE(waste->has_value());
  EXPECT_DOUBLE_EQ(**waste, 31.0 / 21.0 - 1.0);
  // Through OfflineOptimum beside the in-sample optimum at the same count,
  // which knows 5 will come: {3, 8} pads 2, 3, 3 to 9 and 5, 8 to 16, 25 of 21.
  auto optimum = OptimumOfOneRun(trace, 2.0);
  ASSERT_TRUE(optimum.ok()) << optimum.status();
  EXPECT_DOUBLE_EQ(optimum->same_graph_count.waste(), 25.0 / 21.0 - 1.0);
  EXPECT_EQ(optimum->other_half_waste, **waste);
  // Within one minute there is no other half; a column the trace lacks is an error.
  trace.time = {0, 1, 2, 3, 4};
  auto none = OtherHalfWaste(trace, 0, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto bad = OtherHalfWaste(trace, 1, 2);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("column 1"));
  // A hand-made trace's times: unsorted ones still split by minute; a
  // non-finite one is refused, naming the row.
  trace.time = {60, 1, 0, 61, 125};
  auto unsorted = OtherHalfWaste(trace, 0, 2);
  ASSERT_TRUE(unsorted.ok()) << unsorted.status();
  EXPECT_TRUE(unsorted->has_value());
  trace.time[3] = std::nan("");
  auto nan = OtherHalfWaste(trace, 0, 2);
  EXPECT_FALSE(nan.ok());
  EXPECT_THAT(nan.status().message(), HasSubstr("row 4"));
}

// On random traces it is never below the in-sample optimum of each half on
// its own sizes (a plan cannot pad a half less than that half's optimum).
TEST(SuiteOptimum, OtherHalfIsNeverBelowEachHalfsOwnOptimum) {
  SynthRandom random(7);
  for (int trial = 0; trial < 30; ++trial) {
    const Trace trace = RandomSeqlenTrace(random, 6, 30, 20.0, 40);  // three rows a minute
    const size_t rows = trace.rows();
    const int k = 1 + static_cast<int>(random.Index(4));
    auto waste = OtherHalfWaste(trace, 0, k);
    ASSERT_TRUE(waste.ok()) << waste.status();
    ASSERT_TRUE(waste->has_value());
    std::vector<int64_t> half[2];
    const int64_t largest = *std::max_element(trace.sizes.begin(), trace.sizes.end());
    for (size_t i = 0; i < rows; ++i) half[(i / 3) % 2].push_back(trace.sizes[i]);
    double own = 0, raw = 0;
    for (const auto& sizes : half) {
      std::vector<int64_t> with_largest = sizes;
      with_largest.push_back(largest);
      auto plan = OptimalGears(SizeHistogram::FromSizes(with_largest), k, false);
      ASSERT_TRUE(plan.ok());
      const SizeHistogram h = SizeHistogram::FromSizes(sizes);
      auto padded = PaddedTotal(h, plan->gears, false);
      ASSERT_TRUE(padded.ok());
      own += *padded;
      raw += h.total_size();
    }
    EXPECT_GE(**waste + 1e-12, own / raw - 1.0) << "trial " << trial;
  }
}

}  // namespace
}  // namespace gearbox
