// Converting public request traces into the trace CSV (`gearbox trace convert`).
//
// Inputs (one request per row):
//  - Azure LLM inference trace: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`,
//    TIMESTAMP like "2023-11-16 18:15:46.6805900" (UTC).
//  - Mooncake trace: JSON Lines {"timestamp": ms, "input_length": n,
//    "output_length": n, ...} (other fields ignored), or a CSV with those columns.
//  - Length lists without timestamps: a CSV with a prompt-length column
//    (num_prefill_tokens, prompt_tokens, input_length or ContextTokens) and an
//    output-length column (num_decode_tokens, output_tokens, output_length or
//    GeneratedTokens); arrivals are drawn as a Poisson process at a chosen rate.
//
// Views (outputs):
//  - prefill: one row per request, `t,SEQLEN` (SEQLEN = prompt tokens).
//  - decode: one row per decode step of a continuous-batching simulation,
//    `t,BATCHSIZE,SEQLEN` (BATCHSIZE = running sequences, SEQLEN = the
//    longest context among them, prompt plus tokens generated so far).
#ifndef GEARBOX_TRACE_CONVERT_H_
#define GEARBOX_TRACE_CONVERT_H_

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/trace.h"

namespace gearbox {

struct RequestRecord {
  double arrival = 0.0;  // seconds from the first request
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

GEARBOX_EXPORT absl::StatusOr<std::vector<RequestRecord>> ReadAzureTrace(std::istream& in,
                                                                         const std::string& source);
GEARBOX_EXPORT absl::StatusOr<std::vector<RequestRecord>> ReadMooncakeTrace(
    std::istream& in, const std::string& source);
// `rate`: mean arrivals per second (> 0); `seed`: the arrival process's seed.
GEARBOX_EXPORT absl::StatusOr<std::vector<RequestRecord>> ReadLengthList(std::istream& in,
                                                                         const std::string& source,
                                                                         double rate,
                                                                         uint64_t seed);

GEARBOX_EXPORT Trace PrefillView(const std::vector<RequestRecord>& requests);

// Continuous batching: a step every `step_seconds`; at each step, waiting
// requests that have arrived join (first come, first served) while fewer
// than `max_running` run; every running sequence generates one token; a
// sequence leaves after its last output token. Prefill takes no step time.
// Steps with nothing running are skipped.
struct DecodeSimulation {
  double step_seconds = 0.02;
  int64_t max_running = 256;
  // Refuse inputs whose output tokens (a bound on the rows) exceed this.
  int64_t max_rows = 50'000'000;
};
GEARBOX_EXPORT absl::StatusOr<Trace> DecodeView(const std::vector<RequestRecord>& requests,
                                                const DecodeSimulation& simulation);

}  // namespace gearbox

#endif  // GEARBOX_TRACE_CONVERT_H_
