// Synthetic request traces (`gearbox trace synth`): named scenarios whose
// request sizes are drawn from the bundled real length distributions
// (data/: the Azure conversation hour, ShareGPT, arXiv summarization) and
// whose arrivals follow realistic processes: stationary Poisson, a daily
// cycle compressed into the trace, a step change of mix, slow drift of the
// lengths, bursts of one tenant in one length band, tenants whose shares
// change, low and high rates, 1 h and 24 h (docs/POLICY.md, "The policy
// suite").
//
// Deterministic by seed, the same bytes on every standard library: the
// generator is std::mt19937_64 (its output is fixed by the standard) and the
// uniform, exponential and index draws are this file's own code, not the
// std:: distributions (whose algorithms differ between libraries).
//
// A scenario is a set of tenants. Each tenant draws (prompt, output) pairs
// from one source, optionally from a band of its prompt-length quantiles,
// at its own rate over time; the arrivals are a non-homogeneous Poisson
// process, drawn by thinning (candidates at the peak total rate, each kept
// with probability rate(t) / peak, its tenant chosen in proportion to the
// tenants' rates at t).
#ifndef GEARBOX_TRACE_SYNTH_H_
#define GEARBOX_TRACE_SYNTH_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/trace_convert.h"

namespace gearbox {

// The bundled length distributions, as (prompt, output) pairs in file order.
enum class LengthSource { kAzureConv, kShareGpt, kArxiv };
inline constexpr int kLengthSources = 3;
const char* LengthSourceName(LengthSource source);

struct LengthPools {
  std::vector<RequestRecord> pools[kLengthSources];  // arrival unused
  const std::vector<RequestRecord>& of(LengthSource s) const { return pools[static_cast<int>(s)]; }
};
// Reads data_dir/AzureLLMInferenceTrace_conv.csv,
// data_dir/sharegpt_8k_filtered_stats_llama2_tokenizer.csv and
// data_dir/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv.
absl::StatusOr<LengthPools> LoadLengthPools(const std::string& data_dir);

// How a tenant's rate moves between rate_start and rate_end over the trace.
enum class RateShape {
  kLinear,  // linearly from start to end (constant when they are equal)
  kStep,    // start before the scenario's step time, end after it
  kBursts,  // 0, except rate_start during the scenario's burst windows
};

struct Tenant {
  LengthSource source = LengthSource::kAzureConv;
  // Draw only from this band of the source's prompt-length quantiles.
  double band_lo = 0.0, band_hi = 1.0;
  double rate_start = 1.0, rate_end = 1.0;  // requests per second
  RateShape shape = RateShape::kLinear;
  // Daily cycle: the rate times 1 + amplitude * sin(2 pi t / day + phase),
  // one day = the whole trace (amplitude in [0, 1)).
  double diurnal_amplitude = 0.0;
  double diurnal_phase = 0.0;
  // Prompt lengths times this (a long-context service: the source's
  // distribution, stretched), before the scenario's max_tokens clamp.
  double length_scale = 1.0;
};

// Prompt plus output tokens are clamped to the scenario's max_tokens: by
// default this (the bundled configs' largest SEQLEN), so a drifted length
// still fits a decode step; the long-context scenarios' is
// kSynthLongMaxTokens (data/configs/long-context's largest SEQLEN).
inline constexpr int64_t kSynthMaxTokens = 16384;
inline constexpr int64_t kSynthLongMaxTokens = 131072;

struct SynthScenario {
  std::string name;
  std::string description;
  double hours = 1.0;  // the default length
  std::vector<Tenant> tenants;
  // Prompt lengths times a factor moving geometrically from drift_from
  // (t = 0) to drift_to (the end).
  double drift_from = 1.0, drift_to = 1.0;
  // kStep tenants switch at a time drawn uniformly in this share of the trace.
  double step_lo = 0.25, step_hi = 0.75;
  // kBursts tenants: this many windows of burst_seconds, starting at times
  // drawn uniformly (windows may overlap).
  int bursts = 0;
  double burst_seconds = 180.0;
  // Prompt plus output tokens of a request are at most this.
  int64_t max_tokens = kSynthMaxTokens;
};

// Every scenario, in a fixed order (rates at their defaults).
const std::vector<SynthScenario>& SynthScenarios();
// Whether a scenario's traffic keeps one rate and one length distribution
// throughout: no drift, and every tenant at a constant rate (no step, no
// bursts, no share that moves, no daily cycle). The policy suite holds these
// to the flapping target (docs/POLICY.md); `gearbox trace synth --list`
// marks them.
bool IsStationary(const SynthScenario& s);
absl::StatusOr<SynthScenario> FindSynthScenario(const std::string& name);

// Most rows a synthetic trace may have unless raised (`--max-rows`): a
// prefill row is a request, a decode row a step.
inline constexpr int64_t kDefaultSynthMaxRows = 20'000'000;
inline constexpr int64_t kMaxSynthMaxRows = 200'000'000;

struct SynthOptions {
  uint64_t seed = 1;
  double hours = 0.0;  // 0: the scenario's
  double rate = 0.0;   // mean requests per second; 0: the scenario's
  int64_t max_rows = kDefaultSynthMaxRows;
};

// The requests of a scenario, sorted by arrival (from 0). Errors name the
// flag (--hours, --rate, --max-rows) when the expected request count is
// above max_rows.
absl::StatusOr<std::vector<RequestRecord>> SynthRequests(const SynthScenario& scenario,
                                                         const LengthPools& pools,
                                                         const SynthOptions& options);

// The scenario's mean request rate over a trace of `hours` (0: the
// scenario's), requests per second (bursts, whose windows have a fixed
// length, and cycles included), before any --rate scaling.
double ScenarioMeanRate(const SynthScenario& scenario, double hours = 0.0);

// The decode view of synthetic requests (DecodeView), refused with an error
// naming --max-rows when its row bound (steps within the arrivals' span,
// plus steps a full batch needs for the queued tokens, plus the longest
// output) is above max_rows.
absl::StatusOr<Trace> SynthDecodeView(const std::vector<RequestRecord>& requests,
                                      const DecodeSimulation& simulation, int64_t max_rows);

// Byte-identical random draws (exposed for tests).
class SynthRandom {
 public:
  explicit SynthRandom(uint64_t seed) : engine_(seed) {}
  double Uniform();                 // [0, 1), 53 bits
  double Exponential(double rate);  // mean 1 / rate
  size_t Index(size_t n);           // [0, n)
  double UniformIn(double lo, double hi);

 private:
  std::mt19937_64 engine_;
};

}  // namespace gearbox

#endif  // GEARBOX_TRACE_SYNTH_H_
