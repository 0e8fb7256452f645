#include "gearbox/trace_convert.h"

#include <charconv>
#include <cmath>
#include <deque>
#include <random>

#include "nlohmann/json.hpp"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::Cat;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The fields of a CSV line (RFC 4180 quoting; a leading byte-order mark
// skipped); a malformed quote leaves the line as one field, so the field
// count check reports it.
std::vector<std::string> Split(std::string_view line) {
  std::string scratch;
  std::vector<std::string_view> views;
  line = StripUtf8Bom(line);
  if (!SplitCsvLine(line, &scratch, &views)) return {std::string(line)};
  return {views.begin(), views.end()};
}

absl::Status RowError(const std::string& source, size_t line, std::string_view column,
                      std::string_view value, std::string_view allowed) {
  return absl::InvalidArgumentError(Cat(source, " line ", line, ", column ", PrintableText(column),
                                        ": \"", PrintableText(value), "\" is not allowed; ",
                                        allowed));
}

bool ParseInt(std::string_view s, int64_t* out) {
  auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return e == std::errc() && p == s.data() + s.size();
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "2023-11-16 18:15:46.6805900" -> Unix seconds; false when malformed.
bool ParseTimestamp(std::string_view s, double* out) {
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return false;
  }
  int64_t y, mo, d, h, mi, sec;
  if (!ParseInt(s.substr(0, 4), &y) || !ParseInt(s.substr(5, 2), &mo) ||
      !ParseInt(s.substr(8, 2), &d) || !ParseInt(s.substr(11, 2), &h) ||
      !ParseInt(s.substr(14, 2), &mi) || !ParseInt(s.substr(17, 2), &sec)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return false;
  double fraction = 0.0;
  if (s.size() > 19) {
    if (s[19] != '.') return false;
    std::string_view digits = s.substr(20);
    if (digits.empty()) return false;
    double scale = 0.1;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      fraction += (c - '0') * scale;
      scale /= 10;
    }
  }
  *out = static_cast<double>(DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec) + fraction;
  return true;
}

// Header column index by any of the accepted names, or -1.
int FindColumn(const std::vector<std::string>& header,
               std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
  }
  return -1;
}

absl::Status CheckSizes(const std::string& source, size_t line, int64_t prompt, int64_t output,
                        std::string_view prompt_col, std::string_view output_col) {
  if (prompt < 1) return RowError(source, line, prompt_col, std::to_string(prompt), "tokens >= 1");
  if (output < 0) return RowError(source, line, output_col, std::to_string(output), "tokens >= 0");
  return absl::OkStatus();
}

void MakeRelative(std::vector<RequestRecord>* requests) {
  if (requests->empty()) return;
  const double t0 = requests->front().arrival;
  for (RequestRecord& r : *requests) r.arrival -= t0;
}

}  // namespace

absl::StatusOr<std::vector<RequestRecord>> ReadAzureTrace(std::istream& in,
                                                          const std::string& source) {
  std::string line;
  size_t line_no = 0;
  if (!std::getline(in, line)) return absl::InvalidArgumentError(Cat(source, ": empty file"));
  ++line_no;
  const auto header = Split(line);
  const int tc = FindColumn(header, {"TIMESTAMP"});
  const int pc = FindColumn(header, {"ContextTokens"});
  const int oc = FindColumn(header, {"GeneratedTokens"});
  if (tc < 0 || pc < 0 || oc < 0) {
    return absl::InvalidArgumentError(
        Cat(source, " line 1: expected the columns TIMESTAMP, ContextTokens, GeneratedTokens"));
  }
  std::vector<RequestRecord> out;
  double previous = -INFINITY;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    const auto f = Split(line);
    if (f.size() != header.size()) {
      return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": ", f.size(),
                                            " fields, the header has ", header.size()));
    }
    RequestRecord r;
    if (!ParseTimestamp(f[static_cast<size_t>(tc)], &r.arrival)) {
      return RowError(source, line_no, "TIMESTAMP", f[static_cast<size_t>(tc)],
                      "a UTC time like 2023-11-16 18:15:46.6805900");
    }
    if (r.arrival < previous) {
      return RowError(source, line_no, "TIMESTAMP", f[static_cast<size_t>(tc)],
                      "rows must be sorted by time");
    }
    previous = r.arrival;
    if (!ParseInt(f[static_cast<size_t>(pc)], &r.prompt_tokens)) {
      return RowError(source, line_no, "ContextTokens", f[static_cast<size_t>(pc)], "an integer");
    }
    if (!ParseInt(f[static_cast<size_t>(oc)], &r.output_tokens)) {
      return RowError(source, line_no, "GeneratedTokens", f[static_cast<size_t>(oc)], "an integer");
    }
    if (auto s = CheckSizes(source, line_no, r.prompt_tokens, r.output_tokens, "ContextTokens",
                            "GeneratedTokens");
        !s.ok()) {
      return s;
    }
    out.push_back(r);
  }
  if (out.empty()) return absl::InvalidArgumentError(Cat(source, ": no requests"));
  MakeRelative(&out);
  return out;
}

absl::StatusOr<std::vector<RequestRecord>> ReadMooncakeTrace(std::istream& in,
                                                             const std::string& source) {
  std::string line;
  size_t line_no = 0;
  std::vector<RequestRecord> out;
  double previous = -INFINITY;
  std::vector<std::string> header;
  std::string header_line;
  int tc = -1, pc = -1, oc = -1;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string_view text = Trim(line_no == 1 ? StripUtf8Bom(line) : std::string_view(line));
    if (text.empty()) continue;
    RequestRecord r;
    double ms = 0;
    if (text.front() == '{') {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(
            Cat(source, " line ", line_no, ": not valid JSON (", e.what(), ")"));
      }
      for (const char* key : {"timestamp", "input_length", "output_length"}) {
        if (!j.contains(key) || !j[key].is_number()) {
          return RowError(source, line_no, key, j.contains(key) ? j[key].dump() : "missing",
                          "a number");
        }
      }
      ms = j["timestamp"].get<double>();
      const double in_len = j["input_length"].get<double>();
      const double out_len = j["output_length"].get<double>();
      for (auto [key, v] :
           {std::pair<const char*, double>{"input_length", in_len}, {"output_length", out_len}}) {
        if (v != std::floor(v) || !(std::fabs(v) < 4e18)) {
          return RowError(source, line_no, key, j[key].dump(),
                          "a whole number of tokens below 4e18");
        }
      }
      r.prompt_tokens = static_cast<int64_t>(in_len);
      r.output_tokens = static_cast<int64_t>(out_len);
    } else if (header.empty()) {
      header_line = std::string(text);
      header = Split(header_line);
      tc = FindColumn(header, {"timestamp"});
      pc = FindColumn(header, {"input_length"});
      oc = FindColumn(header, {"output_length"});
      if (tc < 0 || pc < 0 || oc < 0) {
        return absl::InvalidArgumentError(Cat(
            source, " line ", line_no,
            ": expected JSON lines or a CSV header with timestamp, input_length, output_length"));
      }
      continue;
    } else {
      const auto f = Split(text);
      if (f.size() != header.size()) {
        return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": ", f.size(),
                                              " fields, the header has ", header.size()));
      }
      const std::string_view ts = f[static_cast<size_t>(tc)];
      auto [p, e] = std::from_chars(ts.data(), ts.data() + ts.size(), ms);
      if (e != std::errc() || p != ts.data() + ts.size()) {
        return RowError(source, line_no, "timestamp", ts, "milliseconds");
      }
      if (!ParseInt(f[static_cast<size_t>(pc)], &r.prompt_tokens)) {
        return RowError(source, line_no, "input_length", f[static_cast<size_t>(pc)], "an integer");
      }
      if (!ParseInt(f[static_cast<size_t>(oc)], &r.output_tokens)) {
        return RowError(source, line_no, "output_length", f[static_cast<size_t>(oc)], "an integer");
      }
    }
    if (!std::isfinite(ms))
      return RowError(source, line_no, "timestamp", "non-finite", "milliseconds");
    r.arrival = ms / 1000.0;
    if (r.arrival < previous) {
      return RowError(source, line_no, "timestamp", std::to_string(ms), "rows sorted by time");
    }
    previous = r.arrival;
    if (auto s = CheckSizes(source, line_no, r.prompt_tokens, r.output_tokens, "input_length",
                            "output_length");
        !s.ok()) {
      return s;
    }
    out.push_back(r);
  }
  if (out.empty()) return absl::InvalidArgumentError(Cat(source, ": no requests"));
  MakeRelative(&out);
  return out;
}

absl::StatusOr<std::vector<RequestRecord>> ReadLengthList(std::istream& in,
                                                          const std::string& source, double rate,
                                                          uint64_t seed) {
  if (!(rate > 0) || !std::isfinite(rate)) {
    return internal::InvalidFieldValue("--rate", rate, "requests per second > 0");
  }
  std::string line;
  size_t line_no = 0;
  if (!std::getline(in, line)) return absl::InvalidArgumentError(Cat(source, ": empty file"));
  ++line_no;
  const std::string header_line = line;
  const auto header = Split(header_line);
  const int pc =
      FindColumn(header, {"num_prefill_tokens", "prompt_tokens", "input_length", "ContextTokens"});
  const int oc = FindColumn(
      header, {"num_decode_tokens", "output_tokens", "output_length", "GeneratedTokens"});
  if (pc < 0 || oc < 0) {
    return absl::InvalidArgumentError(
        Cat(source,
            " line 1: expected a prompt-length column (num_prefill_tokens, prompt_tokens, "
            "input_length or ContextTokens) and an output-length column (num_decode_tokens, "
            "output_tokens, output_length or GeneratedTokens)"));
  }
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<RequestRecord> out;
  double t = 0.0;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    const auto f = Split(line);
    if (f.size() != header.size()) {
      return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": ", f.size(),
                                            " fields, the header has ", header.size()));
    }
    RequestRecord r;
    if (!ParseInt(f[static_cast<size_t>(pc)], &r.prompt_tokens)) {
      return RowError(source, line_no, header[static_cast<size_t>(pc)], f[static_cast<size_t>(pc)],
                      "an integer");
    }
    if (!ParseInt(f[static_cast<size_t>(oc)], &r.output_tokens)) {
      return RowError(source, line_no, header[static_cast<size_t>(oc)], f[static_cast<size_t>(oc)],
                      "an integer");
    }
    if (auto s = CheckSizes(source, line_no, r.prompt_tokens, r.output_tokens,
                            header[static_cast<size_t>(pc)], header[static_cast<size_t>(oc)]);
        !s.ok()) {
      return s;
    }
    r.arrival = out.empty() ? 0.0 : (t += gap(rng));
    out.push_back(r);
  }
  if (out.empty()) return absl::InvalidArgumentError(Cat(source, ": no requests"));
  return out;
}

Trace PrefillView(const std::vector<RequestRecord>& requests) {
  Trace trace;
  trace.dimensions = {"SEQLEN"};
  trace.time.reserve(requests.size());
  trace.sizes.reserve(requests.size());
  for (const RequestRecord& r : requests) {
    trace.time.push_back(r.arrival);
    trace.sizes.push_back(r.prompt_tokens);
  }
  return trace;
}

absl::StatusOr<Trace> DecodeView(const std::vector<RequestRecord>& requests,
                                 const DecodeSimulation& sim) {
  if (!(sim.step_seconds > 0) || !std::isfinite(sim.step_seconds)) {
    return internal::InvalidFieldValue("--step-ms", sim.step_seconds * 1000, "milliseconds > 0");
  }
  // Bound the step count of the arrival span: a step index must stay exact.
  const double span = requests.empty() ? 0.0 : requests.back().arrival - requests.front().arrival;
  constexpr double kMaxSteps = 1e15;
  if (!(span / sim.step_seconds <= kMaxSteps)) {
    return internal::InvalidFieldValue("--step-ms", sim.step_seconds * 1000,
                                       Cat("at most 1e15 steps over the arrivals' ", span,
                                           " s (at least ", span / kMaxSteps * 1000, " ms)"));
  }
  if (sim.max_running < 1) {
    return internal::InvalidFieldValue("--max-running", sim.max_running, "an integer >= 1");
  }
  // Bound the output: every decode step is a row.
  double tokens = 0;
  for (const RequestRecord& r : requests) tokens += static_cast<double>(r.output_tokens);
  if (tokens > static_cast<double>(sim.max_rows)) {
    return internal::InvalidField(
        "decode view", Cat(tokens, " output tokens"),
        Cat("at most ", sim.max_rows, " (every token is a decode step of one sequence)"));
  }
  struct Running {
    int64_t context;    // prompt + tokens generated so far
    int64_t remaining;  // tokens still to generate
  };
  Trace trace;
  trace.dimensions = {"BATCHSIZE", "SEQLEN"};
  std::deque<size_t> waiting;
  std::vector<Running> running;
  size_t next = 0;
  int64_t step = 0;
  const double t0 = requests.empty() ? 0.0 : requests.front().arrival;
  while (next < requests.size() || !waiting.empty() || !running.empty()) {
    double now = t0 + static_cast<double>(step) * sim.step_seconds;
    if (running.empty() && waiting.empty() && next < requests.size() &&
        requests[next].arrival > now) {
      // Idle: jump to the step at or after the next arrival.
      step =
          static_cast<int64_t>(std::ceil((requests[next].arrival - t0) / sim.step_seconds - 1e-9));
      now = t0 + static_cast<double>(step) * sim.step_seconds;
    }
    while (next < requests.size() && requests[next].arrival <= now + 1e-12)
      waiting.push_back(next++);
    while (!waiting.empty() && static_cast<int64_t>(running.size()) < sim.max_running) {
      const RequestRecord& r = requests[waiting.front()];
      waiting.pop_front();
      if (r.output_tokens > 0) running.push_back({r.prompt_tokens, r.output_tokens});
    }
    if (!running.empty()) {
      int64_t longest = 0;
      for (const Running& s : running) longest = std::max(longest, s.context + 1);
      trace.time.push_back(now);
      trace.sizes.push_back(static_cast<int64_t>(running.size()));
      trace.sizes.push_back(longest);
      for (Running& s : running) {
        ++s.context;
        --s.remaining;
      }
      running.erase(std::remove_if(running.begin(), running.end(),
                                   [](const Running& s) { return s.remaining <= 0; }),
                    running.end());
    }
    ++step;
  }
  if (trace.time.empty())
    return absl::InvalidArgumentError("decode view: no decode steps (all outputs empty)");
  return trace;
}

}  // namespace gearbox
