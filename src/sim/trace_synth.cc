#include "gearbox/trace_synth.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>

#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;

constexpr double kPi = std::numbers::pi;

// ---- The scenarios ----

Tenant Source(LengthSource source, double rate) {
  Tenant t;
  t.source = source;
  t.rate_start = t.rate_end = rate;
  return t;
}

Tenant Band(Tenant t, double lo, double hi) {
  t.band_lo = lo;
  t.band_hi = hi;
  return t;
}

Tenant Ramp(Tenant t, double end, RateShape shape = RateShape::kLinear) {
  t.rate_end = end;
  t.shape = shape;
  return t;
}

Tenant Daily(Tenant t, double amplitude, double phase = 0.0) {
  t.diurnal_amplitude = amplitude;
  t.diurnal_phase = phase;
  return t;
}

Tenant Burst(Tenant t) {
  t.shape = RateShape::kBursts;
  return t;
}

SynthScenario Make(std::string name, std::string description, double hours,
                   std::vector<Tenant> tenants) {
  SynthScenario s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.hours = hours;
  s.tenants = std::move(tenants);
  return s;
}

SynthScenario WithDrift(SynthScenario s, double from, double to) {
  s.drift_from = from;
  s.drift_to = to;
  return s;
}

Tenant Stretched(Tenant t, double scale) {
  t.length_scale = scale;
  return t;
}

SynthScenario LongContext(SynthScenario s) {
  s.max_tokens = kSynthLongMaxTokens;
  return s;
}

SynthScenario WithBursts(SynthScenario s, int count, double seconds) {
  s.bursts = count;
  s.burst_seconds = seconds;
  return s;
}

std::vector<SynthScenario> BuildScenarios() {
  using enum LengthSource;
  const Tenant azure = Source(kAzureConv, 5), chat = Source(kShareGpt, 5), docs = Source(kArxiv, 5);
  const double third = 2 * kPi / 3;
  return {
      Make("poisson-azure", "stationary Poisson, 5 req/s, Azure conversation lengths, 1 h", 1,
           {azure}),
      Make("poisson-sharegpt", "stationary Poisson, 5 req/s, ShareGPT lengths, 1 h", 1, {chat}),
      Make("poisson-arxiv", "stationary Poisson, 5 req/s, arXiv summarization lengths, 1 h", 1,
           {docs}),
      Make("poisson-mix", "stationary Poisson, 6 req/s, equal thirds of Azure, ShareGPT, arXiv", 1,
           {Source(kAzureConv, 2), Source(kShareGpt, 2), Source(kArxiv, 2)}),
      Make("low-rate", "stationary Poisson, 1 req/s, ShareGPT lengths, 1 h", 1,
           {Source(kShareGpt, 1)}),
      Make("low-rate-24h", "stationary Poisson, 1 req/s, Azure conversation lengths, 24 h", 24,
           {Source(kAzureConv, 1)}),
      Make("high-rate", "stationary Poisson, 1,000 req/s, half Azure, half ShareGPT, 1 h", 1,
           {Source(kAzureConv, 500), Source(kShareGpt, 500)}),
      Make("diurnal", "a daily cycle compressed into 1 h (peak/trough 4x), 5 req/s mean, Azure", 1,
           {Daily(azure, 0.6)}),
      Make("diurnal-24h", "a daily cycle over 24 h (peak/trough 4x), 5 req/s mean, Azure", 24,
           {Daily(azure, 0.6)}),
      Make("step-chat-to-docs",
           "ShareGPT, then arXiv from a random time in the middle half, 5 req/s, 1 h", 1,
           {Ramp(chat, 0, RateShape::kStep), Ramp(Source(kArxiv, 0), 5, RateShape::kStep)}),
      Make("step-docs-to-chat",
           "arXiv, then ShareGPT from a random time in the middle half, 5 req/s, 1 h", 1,
           {Ramp(docs, 0, RateShape::kStep), Ramp(Source(kShareGpt, 0), 5, RateShape::kStep)}),
      Make("step-short-to-long",
           "ShareGPT's shorter half, then its longer half from a random time, 5 req/s", 1,
           {Ramp(Band(chat, 0, 0.5), 0, RateShape::kStep),
            Ramp(Band(Source(kShareGpt, 0), 0.5, 1), 5, RateShape::kStep)}),
      Make("step-24h", "Azure, then arXiv from a random time in the middle half, 24 h", 24,
           {Ramp(azure, 0, RateShape::kStep), Ramp(Source(kArxiv, 0), 5, RateShape::kStep)}),
      WithDrift(
          Make("drift-up", "Azure prompt lengths drifting from x0.5 to x2 over 1 h", 1, {azure}),
          0.5, 2.0),
      WithDrift(Make("drift-down", "ShareGPT prompt lengths drifting from x2 to x0.5 over 1 h", 1,
                     {chat}),
                2.0, 0.5),
      Make("drift-mix", "the share moves linearly from ShareGPT to arXiv over 1 h, 5 req/s", 1,
           {Ramp(chat, 0), Ramp(Source(kArxiv, 0), 5)}),
      WithBursts(Make("burst-long",
                      "Azure at 5 req/s; 3 bursts of 3 min at 20 req/s of arXiv's longest decile",
                      1, {azure, Burst(Band(Source(kArxiv, 20), 0.9, 1))}),
                 3, 180),
      WithBursts(Make("burst-short",
                      "ShareGPT at 5 req/s; 4 bursts of 2 min at 30 req/s of its shortest decile",
                      1, {chat, Burst(Band(Source(kShareGpt, 30), 0, 0.1))}),
                 4, 120),
      WithBursts(Make("burst-24h",
                      "Azure over 24 h; 12 bursts of 10 min at 10 req/s of ShareGPT's top fifth",
                      24, {azure, Burst(Band(Source(kShareGpt, 10), 0.8, 1))}),
                 12, 600),
      Make(
          "tenants-shift",
          "three tenants; shares move from Azure 60/ShareGPT 30/arXiv 10 to 10/30/60 over 1 h", 1,
          {Ramp(Source(kAzureConv, 3), 0.5), Source(kShareGpt, 1.5), Ramp(Source(kArxiv, 0.5), 3)}),
      Make("tenants-timezones",
           "three tenants (Azure, ShareGPT, arXiv) with daily cycles a third of a day apart, 1 h",
           1,
           {Daily(Source(kAzureConv, 2), 0.8), Daily(Source(kShareGpt, 2), 0.8, third),
            Daily(Source(kArxiv, 2), 0.8, 2 * third)}),
      Make("tenants-24h", "tenants-timezones over 24 h", 24,
           {Daily(Source(kAzureConv, 2), 0.8), Daily(Source(kShareGpt, 2), 0.8, third),
            Daily(Source(kArxiv, 2), 0.8, 2 * third)}),
      Make("narrow-band", "one product: ShareGPT's middle decile of prompt lengths, 5 req/s", 1,
           {Band(chat, 0.45, 0.55)}),
      Make("bimodal", "ShareGPT's shortest 30% and arXiv's longest 30%, 5 req/s together", 1,
           {Band(Source(kShareGpt, 2.5), 0, 0.3), Band(Source(kArxiv, 2.5), 0.7, 1)}),
      // Long contexts (SEQLEN up to 131072: replay with data/configs/long-context).
      LongContext(Make("long-chat",
                       "long context: ShareGPT with prompts x8 (median 14k, up to 65k tokens), "
                       "1 req/s, 1 h",
                       1, {Stretched(Source(kShareGpt, 1), 8)})),
      LongContext(Make("long-docs",
                       "long context: arXiv with prompts x16 (median 44k, up to 65k tokens), "
                       "0.5 req/s, 1 h",
                       1, {Stretched(Source(kArxiv, 0.5), 16)})),
      LongContext(Make("long-mix",
                       "long context: Azure conversation at 3 req/s beside ShareGPT with prompts "
                       "x16 at 0.5 req/s (2 to 130k tokens), 1 h",
                       1, {Source(kAzureConv, 3), Stretched(Source(kShareGpt, 0.5), 16)})),
  };
}

// ---- Rates ----

// The scenario's random times: when kStep tenants switch, where bursts start.
struct Schedule {
  double span = 0.0;  // seconds
  double step_time = 0.0;
  std::vector<double> burst_starts;
  double burst_seconds = 0.0;
};

int BurstsAt(const Schedule& s, double t) {
  int n = 0;
  for (double start : s.burst_starts) n += t >= start && t < start + s.burst_seconds;
  return n;
}

// A tenant's rate at t before the daily cycle.
double BaseRate(const Tenant& tenant, const Schedule& s, double t) {
  switch (tenant.shape) {
    case RateShape::kLinear:
      return tenant.rate_start + (tenant.rate_end - tenant.rate_start) * (t / s.span);
    case RateShape::kStep:
      return t < s.step_time ? tenant.rate_start : tenant.rate_end;
    case RateShape::kBursts:
      return tenant.rate_start * BurstsAt(s, t);
  }
  return 0.0;
}

double Cycle(const Tenant& tenant, const Schedule& s, double t) {
  return 1.0 + tenant.diurnal_amplitude * std::sin(2 * kPi * t / s.span + tenant.diurnal_phase);
}

double TenantRate(const Tenant& tenant, const Schedule& s, double t) {
  return BaseRate(tenant, s, t) * Cycle(tenant, s, t);
}

// An upper bound of the tenant's rate over the trace (thinning's envelope).
double PeakRate(const Tenant& tenant, const Schedule& s) {
  const double base = tenant.shape == RateShape::kBursts
                          ? tenant.rate_start * static_cast<double>(s.burst_starts.size())
                          : std::max(tenant.rate_start, tenant.rate_end);
  return base * (1.0 + tenant.diurnal_amplitude);
}

// The mean total rate: the average over fine midpoints, bursts at their
// expected share of the span.
double MeanRate(const SynthScenario& scenario, const Schedule& s) {
  constexpr int kPoints = 20000;
  double sum = 0.0;
  for (const Tenant& tenant : scenario.tenants) {
    if (tenant.shape == RateShape::kBursts) {
      const double window = std::min(scenario.burst_seconds, s.span);
      sum += tenant.rate_start * scenario.bursts * window / s.span * kPoints;
      continue;
    }
    for (int i = 0; i < kPoints; ++i) {
      const double t = (i + 0.5) / kPoints * s.span;
      sum += TenantRate(tenant, s, t);
    }
  }
  return sum / kPoints;
}

Schedule ExpectedSchedule(const SynthScenario& scenario, double span) {
  Schedule s;
  s.span = span;
  s.step_time = span * (scenario.step_lo + scenario.step_hi) / 2;
  return s;
}

Schedule DrawSchedule(const SynthScenario& scenario, double span, SynthRandom& random) {
  Schedule s;
  s.span = span;
  s.step_time = span * random.UniformIn(scenario.step_lo, scenario.step_hi);
  s.burst_seconds = std::min(scenario.burst_seconds, span);
  for (int i = 0; i < scenario.bursts; ++i)
    s.burst_starts.push_back(random.UniformIn(0.0, span - s.burst_seconds));
  return s;
}

// ---- Lengths ----

absl::StatusOr<std::vector<RequestRecord>> ReadPool(const std::string& path, bool azure) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        Cat(path,
            ": cannot open (the bundled length distributions; --data-dir names their "
            "directory)"));
  }
  auto records = azure ? ReadAzureTrace(in, path) : ReadLengthList(in, path, 1.0, 1);
  if (!records.ok()) return records.status();
  std::sort(records->begin(), records->end(), [](const RequestRecord& a, const RequestRecord& b) {
    return a.prompt_tokens != b.prompt_tokens ? a.prompt_tokens < b.prompt_tokens
                                              : a.output_tokens < b.output_tokens;
  });
  for (RequestRecord& r : *records) r.arrival = 0.0;
  return records;
}

RequestRecord DrawLengths(const Tenant& tenant, const std::vector<RequestRecord>& pool,
                          double drift, int64_t max_tokens, SynthRandom& random) {
  const double scale = drift * tenant.length_scale;
  const double n = static_cast<double>(pool.size());
  const size_t lo = std::min(pool.size() - 1, static_cast<size_t>(std::floor(tenant.band_lo * n)));
  const size_t hi =
      std::clamp(static_cast<size_t>(std::floor(tenant.band_hi * n)), lo + 1, pool.size());
  RequestRecord r = pool[lo + random.Index(hi - lo)];
  if (scale != 1.0) {
    r.prompt_tokens =
        std::max<int64_t>(1, std::llround(static_cast<double>(r.prompt_tokens) * scale));
  }
  r.output_tokens = std::min(r.output_tokens, max_tokens - 1);
  r.prompt_tokens = std::min(r.prompt_tokens, max_tokens - r.output_tokens);
  return r;
}

double DriftScale(const SynthScenario& scenario, double t, double span) {
  if (scenario.drift_from == scenario.drift_to) return scenario.drift_from;
  return scenario.drift_from * std::pow(scenario.drift_to / scenario.drift_from, t / span);
}

absl::Status CheckOptions(const SynthOptions& options) {
  if (!(options.hours >= 0.0 && options.hours <= 24.0 * 7)) {
    return internal::InvalidFieldValue("--hours", options.hours, "hours in (0, 168]");
  }
  if (!(options.rate >= 0.0 && options.rate <= 1e5)) {
    return internal::InvalidFieldValue("--rate", options.rate,
                                       "mean requests per second in (0, 100000]");
  }
  if (options.max_rows < 1 || options.max_rows > kMaxSynthMaxRows) {
    return internal::InvalidFieldValue("--max-rows", options.max_rows,
                                       Cat("an integer in [1, ", kMaxSynthMaxRows, "]"));
  }
  return absl::OkStatus();
}

absl::Status TooManyRows(double rows, int64_t max_rows, std::string_view what) {
  return absl::InvalidArgumentError(
      Cat("--max-rows: ", what, " ", std::llround(rows), " rows, more than --max-rows ", max_rows,
          "; lower --hours or --rate, or raise --max-rows (at most ", kMaxSynthMaxRows, ")"));
}

}  // namespace

// ---- SynthRandom ----

double SynthRandom::Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double SynthRandom::Exponential(double rate) { return -std::log1p(-Uniform()) / rate; }

size_t SynthRandom::Index(size_t n) {
  // floor(u * n) is exact in double arithmetic for the pool sizes here.
  return std::min(n - 1, static_cast<size_t>(Uniform() * static_cast<double>(n)));
}

double SynthRandom::UniformIn(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

// ---- Public ----

const char* LengthSourceName(LengthSource source) {
  switch (source) {
    case LengthSource::kAzureConv:
      return "azure-conv";
    case LengthSource::kShareGpt:
      return "sharegpt";
    case LengthSource::kArxiv:
      return "arxiv";
  }
  return "?";
}

absl::StatusOr<LengthPools> LoadLengthPools(const std::string& data_dir) {
  LengthPools pools;
  const std::string files[kLengthSources] = {
      "AzureLLMInferenceTrace_conv.csv", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
      "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"};
  for (int i = 0; i < kLengthSources; ++i) {
    auto pool = ReadPool(data_dir + "/" + files[i], /*azure=*/i == 0);
    if (!pool.ok()) return pool.status();
    pools.pools[i] = *std::move(pool);
  }
  return pools;
}

bool IsStationary(const SynthScenario& s) {
  if (s.drift_from != s.drift_to) return false;
  for (const Tenant& t : s.tenants) {
    if (t.shape != RateShape::kLinear || t.rate_start != t.rate_end || t.diurnal_amplitude != 0)
      return false;
  }
  return true;
}

const std::vector<SynthScenario>& SynthScenarios() {
  static const std::vector<SynthScenario> scenarios = BuildScenarios();
  return scenarios;
}

absl::StatusOr<SynthScenario> FindSynthScenario(const std::string& name) {
  for (const SynthScenario& s : SynthScenarios()) {
    if (s.name == name) return s;
  }
  return absl::InvalidArgumentError(Cat("--scenario: \"", PrintableText(name),
                                        "\" is not allowed; one of the names --list prints"));
}

double ScenarioMeanRate(const SynthScenario& scenario, double hours) {
  const double span = (hours > 0 ? hours : scenario.hours) * 3600.0;
  return MeanRate(scenario, ExpectedSchedule(scenario, span));
}

absl::StatusOr<std::vector<RequestRecord>> SynthRequests(const SynthScenario& scenario,
                                                         const LengthPools& pools,
                                                         const SynthOptions& options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  for (int i = 0; i < kLengthSources; ++i) {
    if (pools.pools[i].empty()) {
      return absl::InvalidArgumentError(
          Cat("length source ", LengthSourceName(static_cast<LengthSource>(i)), " is empty"));
    }
  }
  const double hours = options.hours > 0 ? options.hours : scenario.hours;
  const double span = hours * 3600.0;
  const double natural = MeanRate(scenario, ExpectedSchedule(scenario, span));
  const double scale = options.rate > 0 ? options.rate / natural : 1.0;
  const double expected = natural * scale * span;
  if (expected > static_cast<double>(options.max_rows)) {
    return TooManyRows(expected, options.max_rows, "the scenario expects");
  }
  SynthRandom random(options.seed);
  const Schedule schedule = DrawSchedule(scenario, span, random);
  std::vector<double> peaks;
  double envelope = 0.0;
  for (const Tenant& tenant : scenario.tenants) {
    peaks.push_back(PeakRate(tenant, schedule) * scale);
    envelope += peaks.back();
  }
  std::vector<RequestRecord> out;
  if (envelope <= 0) return out;
  for (double t = random.Exponential(envelope); t < span; t += random.Exponential(envelope)) {
    // Keep the candidate with probability rate(t) / envelope; its tenant in
    // proportion to the tenants' rates at t.
    double pick = random.Uniform() * envelope;
    const Tenant* chosen = nullptr;
    for (const Tenant& tenant : scenario.tenants) {
      const double rate = TenantRate(tenant, schedule, t) * scale;
      if (pick < rate) {
        chosen = &tenant;
        break;
      }
      pick -= rate;
    }
    if (chosen == nullptr) continue;
    if (static_cast<int64_t>(out.size()) >= options.max_rows) {
      return TooManyRows(static_cast<double>(out.size()) + 1, options.max_rows,
                         "this draw reached");
    }
    RequestRecord r = DrawLengths(*chosen, pools.of(chosen->source), DriftScale(scenario, t, span),
                                  scenario.max_tokens, random);
    r.arrival = t;
    out.push_back(r);
  }
  return out;
}

absl::StatusOr<Trace> SynthDecodeView(const std::vector<RequestRecord>& requests,
                                      const DecodeSimulation& simulation, int64_t max_rows) {
  if (requests.empty()) return absl::InvalidArgumentError("decode view: no requests");
  if (!(simulation.step_seconds > 0) || simulation.max_running < 1) {
    return DecodeView(requests, simulation);  // its own errors
  }
  double tokens = 0.0;
  int64_t longest = 0;
  for (const RequestRecord& r : requests) {
    tokens += static_cast<double>(r.output_tokens);
    longest = std::max(longest, r.output_tokens);
  }
  // A step either has an empty queue (at most one per step time up to the
  // last arrival, then the longest output to drain) or a full batch.
  const double span = requests.back().arrival - requests.front().arrival;
  const double bound = std::ceil(span / simulation.step_seconds) + 1 +
                       std::ceil(tokens / static_cast<double>(simulation.max_running)) +
                       static_cast<double>(longest);
  if (bound > static_cast<double>(max_rows)) {
    return TooManyRows(bound, max_rows, "the decode view may have");
  }
  DecodeSimulation bounded = simulation;
  bounded.max_rows = std::max<int64_t>(bounded.max_rows, std::llround(tokens));
  return DecodeView(requests, bounded);
}

}  // namespace gearbox
