#include "gearbox/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "gearbox/trace_convert.h"

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<Trace> Read(const std::string& text, std::vector<std::string> dims = {"SEQLEN"}) {
  std::istringstream in(text);
  return ReadTraceCsv(in, dims, "T.csv");
}

TEST(TraceCsv, ReadsColumnsInAnyOrderWithMemory) {
  auto t = Read("SEQLEN,t,mem_usage,BATCHSIZE\n100,0.5,0.25,3\n\n200,1.5,0.5,4\n",
                {"BATCHSIZE", "SEQLEN"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->rows(), 2u);
  EXPECT_THAT(t->dimensions, ElementsAre("BATCHSIZE", "SEQLEN"));
  EXPECT_THAT(t->sizes, ElementsAre(3, 100, 4, 200));
  EXPECT_THAT(t->time, ElementsAre(0.5, 1.5));
  EXPECT_THAT(t->mem_usage, ElementsAre(0.25, 0.5));
  EXPECT_DOUBLE_EQ(t->duration(), 1.0);
}

TEST(TraceCsv, RoundTrips) {
  auto t = Read("t,SEQLEN\n0,5\n0.25,7\n");
  ASSERT_TRUE(t.ok());
  std::ostringstream out;
  WriteTraceCsv(*t, out);
  EXPECT_EQ(out.str(), "t,SEQLEN\n0.000000,5\n0.250000,7\n");
}

struct BadTrace {
  const char* text;
  const char* message;
};
class TraceErrors : public ::testing::TestWithParam<BadTrace> {};

TEST_P(TraceErrors, GiveTheLineAndTheField) {
  auto t = Read(GetParam().text);
  ASSERT_FALSE(t.ok()) << GetParam().text;
  EXPECT_THAT(t.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, TraceErrors,
    ::testing::Values(BadTrace{"", "T.csv: empty trace"},
                      BadTrace{"t,SEQLEN\n", "T.csv: the trace has no rows"},
                      BadTrace{"SEQLEN\n5\n", "line 1: missing column \"t\""},
                      BadTrace{"t\n5\n", "line 1: missing column \"SEQLEN\""},
                      BadTrace{"t,SEQLEN,color\n0,5,red\n",
                               "line 1: unknown column \"color\"; allowed: t, SEQLEN, mem_usage"},
                      BadTrace{"t,SEQLEN,SEQLEN\n", "column \"SEQLEN\" appears twice"},
                      BadTrace{"t,SEQLEN\n0,5\n1,abc\n", "T.csv line 3, column SEQLEN: \"abc\""},
                      BadTrace{"t,SEQLEN\n0,5\n1,0\n",
                               "line 3, column SEQLEN: \"0\" is not allowed; an integer >= 1"},
                      BadTrace{"t,SEQLEN\n0,5\n1,2.5\n", "line 3, column SEQLEN: \"2.5\""},
                      BadTrace{"t,SEQLEN\nx,5\n", "line 2, column t: \"x\""},
                      BadTrace{"t,SEQLEN\n2,5\n1,5\n",
                               "line 3, column t: \"1\" is not allowed; rows must be sorted by t"},
                      BadTrace{"t,SEQLEN\n0,5,6\n", "line 2: 3 fields, the header has 2"},
                      BadTrace{"t,SEQLEN,mem_usage\n0,5,1.5\n",
                               "line 2, column mem_usage: \"1.5\""}));

TEST(Convert, AzureTimestampsBecomeSecondsFromTheFirstRequest) {
  std::istringstream in(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n"
      "2023-11-17 00:00:00,10,1");  // no trailing newline, next day
  auto r = ReadAzureTrace(in, "azure.csv");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_DOUBLE_EQ((*r)[0].arrival, 0.0);
  EXPECT_NEAR((*r)[1].arrival, 4.314579, 1e-6);
  EXPECT_NEAR((*r)[2].arrival, (24 * 3600 - (18 * 3600 + 15 * 60 + 46.68059)), 1e-6);
  EXPECT_EQ((*r)[1].prompt_tokens, 396);
  EXPECT_EQ((*r)[1].output_tokens, 109);
  const Trace t = PrefillView(*r);
  EXPECT_THAT(t.dimensions, ElementsAre("SEQLEN"));
  EXPECT_THAT(t.sizes, ElementsAre(374, 396, 10));
}

TEST(Convert, AzureErrors) {
  std::istringstream bad_time("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:15:46,1,1\n");
  EXPECT_THAT(ReadAzureTrace(bad_time, "a.csv").status().message(),
              HasSubstr("a.csv line 2, column TIMESTAMP"));
  std::istringstream unsorted(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,1\n2023-11-16 "
      "18:15:46,1,1\n");
  EXPECT_THAT(ReadAzureTrace(unsorted, "a.csv").status().message(), HasSubstr("line 3"));
  std::istringstream zero("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,0,1\n");
  EXPECT_THAT(ReadAzureTrace(zero, "a.csv").status().message(),
              HasSubstr("column ContextTokens: \"0\""));
  std::istringstream header("time,a,b\n");
  EXPECT_THAT(ReadAzureTrace(header, "a.csv").status().message(),
              HasSubstr("expected the columns"));
}

TEST(Convert, MooncakeJsonLinesAndCsv) {
  std::istringstream jsonl(
      "{\"timestamp\": 1000, \"input_length\": 500, \"output_length\": 20, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 3500, \"input_length\": 700, \"output_length\": 5}\n");
  auto r = ReadMooncakeTrace(jsonl, "m.jsonl");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_DOUBLE_EQ((*r)[1].arrival, 2.5);
  EXPECT_EQ((*r)[1].prompt_tokens, 700);
  std::istringstream csv("timestamp,input_length,output_length\n0,10,1\n250,20,2\n");
  auto c = ReadMooncakeTrace(csv, "m.csv");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ((*c)[1].arrival, 0.25);
  std::istringstream huge("{\"timestamp\": 1, \"input_length\": 8.4e72, \"output_length\": 1}\n");
  EXPECT_THAT(ReadMooncakeTrace(huge, "m").status().message(),
              HasSubstr("column input_length"));  // found by fuzzing
  std::istringstream missing("{\"timestamp\": 1, \"input_length\": 5}\n");
  EXPECT_THAT(ReadMooncakeTrace(missing, "m").status().message(),
              HasSubstr("line 1, column output_length"));
}

TEST(Convert, LengthListsGetPoissonArrivals) {
  std::string text = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n";
  for (int i = 1; i <= 2000; ++i)
    text += std::to_string(i) + ",3," + std::to_string(i + 3) + ",1.0\n";
  std::istringstream in(text);
  auto r = ReadLengthList(in, "l.csv", 10.0, 7);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2000u);
  EXPECT_EQ((*r)[0].arrival, 0.0);
  // Mean gap 0.1 s: 1999 gaps ~ 199.9 s (within 10%).
  EXPECT_NEAR(r->back().arrival, 199.9, 20.0);
  for (size_t i = 1; i < r->size(); ++i) ASSERT_GE((*r)[i].arrival, (*r)[i - 1].arrival);
  std::istringstream again(text);
  EXPECT_EQ(ReadLengthList(again, "l.csv", 10.0, 7)->back().arrival, r->back().arrival);  // seeded
  std::istringstream bad_rate(text);
  EXPECT_THAT(ReadLengthList(bad_rate, "l.csv", 0.0, 7).status().message(), HasSubstr("--rate: 0"));
}

TEST(Convert, DecodeViewSimulatesContinuousBatching) {
  // A at 0 s: prompt 10, 3 tokens; B at 0.015 s: prompt 100, 2 tokens; C at
  // 1 s: prompt 5, 1 token. Steps every 0.01 s; at most 1 running at first.
  const std::vector<RequestRecord> reqs = {{0.0, 10, 3}, {0.015, 100, 2}, {1.0, 5, 1}};
  auto t = DecodeView(reqs, {0.01, 2});
  ASSERT_TRUE(t.ok()) << t.status();
  // step 0 (t=0): A alone, context 11; step 1 (0.01): A, context 12;
  // step 2 (0.02): A and B joined, contexts 13 / 101 -> batch 2, SEQLEN 101;
  // A is done after step 2; step 3 (0.03): B alone, context 102; then idle
  // until C at 1.0: batch 1, context 6.
  EXPECT_THAT(t->dimensions, ElementsAre("BATCHSIZE", "SEQLEN"));
  ASSERT_EQ(t->rows(), 5u);
  EXPECT_THAT(t->sizes, ElementsAre(1, 11, 1, 12, 2, 101, 1, 102, 1, 6));
  EXPECT_NEAR(t->time[2], 0.02, 1e-12);
  EXPECT_NEAR(t->time[4], 1.0, 1e-12);
  auto capped = DecodeView(reqs, {0.01, 1});
  ASSERT_TRUE(capped.ok());
  // With one slot B waits for A: steps 0-2 are A (batch 1), 3-4 are B.
  EXPECT_THAT(std::vector<int64_t>(capped->sizes.begin(), capped->sizes.begin() + 10),
              ElementsAre(1, 11, 1, 12, 1, 13, 1, 101, 1, 102));
  EXPECT_THAT(DecodeView(reqs, {0.0, 2}).status().message(), HasSubstr("--step-ms"));
}

// Issue 11 defect 8: byte-order marks, RFC 4180 quoting, unprintable bytes.
TEST(TraceCsv, SkipsAByteOrderMarkAndReadsQuotedFields) {
  auto t = Read("\xEF\xBB\xBFt,\"SEQLEN\"\n\"0.5\",\"4\"\n 1.5 , \"8\" \n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->sizes, ElementsAre(4, 8));
  EXPECT_THAT(t->time, ElementsAre(0.5, 1.5));
}

TEST(TraceCsv, QuotedCommasAndQuotesAreOneField) {
  std::string scratch;
  std::vector<std::string_view> fields;
  ASSERT_TRUE(SplitCsvLine(R"(a,"b,c","say ""hi""",,  d )", &scratch, &fields));
  EXPECT_THAT(fields, ElementsAre("a", "b,c", "say \"hi\"", "", "d"));
  EXPECT_FALSE(SplitCsvLine(R"(a,"b)", &scratch, &fields));
  EXPECT_FALSE(SplitCsvLine(R"(a,"b"c)", &scratch, &fields));
}

TEST(TraceCsv, UnprintableBytesAreEscapedInErrors) {
  auto t = Read(std::string("t,SEQLEN\n0,4\x00x\n", 15));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("column SEQLEN: \"4\\x00x\" is not allowed"));
  auto q = Read("t,SEQLEN\n0,\"4\n");
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(std::string(q.status().message()),
              HasSubstr(R"(T.csv line 2: "0,"4" has an unterminated quote)"));
}

// Issue 11 defects 2, 3 and 9: timestamps and sizes out of range.
TEST(TraceCsv, TimestampsAndSizesOutOfRangeSayWhatIsAllowed) {
  auto t = Read("t,SEQLEN\n0,4\n1e12,4\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("line 3, column t: \"1e12\" is not allowed; a number of "
                        "seconds in [-1e11, 1e11]"));
  auto s = Read("t,SEQLEN\n0,99999999999999999999\n");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("an integer in [1, 2^63 - 1]"));
}

TEST(AzureTrace, SkipsAByteOrderMarkAndReadsQuotedFields) {
  std::istringstream in(
      "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n\"2023-11-16 "
      "18:15:46.5\",\"374\",44\n");
  auto r = ReadAzureTrace(in, "A.csv");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].prompt_tokens, 374);
}

TEST(DecodeView, AStepTooSmallForTheSpanIsAnError) {
  std::vector<RequestRecord> requests(2);
  requests[0] = {0.0, 10, 2};
  requests[1] = {100.0, 10, 2};
  auto t = DecodeView(requests, {1e-300, 8});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("--step-ms"));
}

}  // namespace
}  // namespace gearbox
