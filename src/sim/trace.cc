#include "gearbox/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "fmt/format.h"
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

absl::Status FieldError(const std::string& source, size_t line, std::string_view column,
                        std::string_view value, std::string_view allowed) {
  return absl::InvalidArgumentError(Cat(source, " line ", line, ", column ", PrintableText(column),
                                        ": \"", PrintableText(value), "\" is not allowed; ",
                                        allowed));
}

absl::Status SplitOrError(std::string_view line, std::string* scratch,
                          std::vector<std::string_view>* fields, const std::string& source,
                          size_t line_no) {
  if (SplitCsvLine(line, scratch, fields)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      Cat(source, " line ", line_no, ": \"", PrintableText(line),
          "\" has an unterminated quote or text after a closing quote"));
}

absl::StatusOr<Trace> Read(std::istream& in, const std::vector<std::string>* wanted,
                           const std::string& source) {
  std::string line;
  size_t line_no = 0;
  // Header.
  bool have_header = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!Trim(line).empty()) {
      have_header = true;
      break;
    }
  }
  if (!have_header) return absl::InvalidArgumentError(Cat(source, ": empty trace (no header)"));
  std::vector<std::string_view> fields;
  std::string scratch;
  std::string header(StripUtf8Bom(line));
  std::string header_scratch;
  if (auto st = SplitOrError(header, &header_scratch, &fields, source, line_no); !st.ok())
    return st;
  int time_col = -1;
  int mem_col = -1;
  std::map<std::string, int> dim_cols;
  for (size_t c = 0; c < fields.size(); ++c) {
    const std::string name(Trim(fields[c]));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          Cat(source, " line ", line_no, ": column ", c + 1, " has an empty name"));
    }
    const bool seen = (name == "t" && time_col >= 0) || (name == "mem_usage" && mem_col >= 0) ||
                      dim_cols.count(name);
    if (seen) {
      return absl::InvalidArgumentError(
          Cat(source, " line ", line_no, ": column \"", PrintableText(name), "\" appears twice"));
    }
    if (name == "t") {
      time_col = static_cast<int>(c);
    } else if (name == "mem_usage") {
      mem_col = static_cast<int>(c);
    } else {
      if (wanted != nullptr && std::find(wanted->begin(), wanted->end(), name) == wanted->end()) {
        std::string allowed = "t";
        for (const auto& w : *wanted) allowed += ", " + w;
        allowed += ", mem_usage";
        return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": unknown column \"",
                                              PrintableText(name), "\"; allowed: ", allowed));
      }
      dim_cols[name] = static_cast<int>(c);
    }
  }
  if (time_col < 0) {
    return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": missing column \"t\""));
  }
  Trace trace;
  if (wanted != nullptr) {
    for (const auto& w : *wanted) {
      if (!dim_cols.count(w)) {
        return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": missing column \"", w,
                                              "\" (a dimension of the config)"));
      }
    }
    trace.dimensions = *wanted;
  } else {
    // Header order.
    std::vector<std::pair<int, std::string>> by_col;
    for (const auto& [name, col] : dim_cols) by_col.emplace_back(col, name);
    std::sort(by_col.begin(), by_col.end());
    for (const auto& [col, name] : by_col) trace.dimensions.push_back(name);
    if (trace.dimensions.empty()) {
      return absl::InvalidArgumentError(
          Cat(source, " line ", line_no, ": no dimension column besides t and mem_usage"));
    }
  }
  std::vector<int> cols;
  for (const auto& d : trace.dimensions) cols.push_back(dim_cols[d]);
  const size_t expected_fields = fields.size();

  double previous = -INFINITY;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    if (auto st = SplitOrError(line, &scratch, &fields, source, line_no); !st.ok()) return st;
    if (fields.size() != expected_fields) {
      return absl::InvalidArgumentError(Cat(source, " line ", line_no, ": ", fields.size(),
                                            " fields, the header has ", expected_fields));
    }
    const std::string_view t_text = Trim(fields[static_cast<size_t>(time_col)]);
    double t = 0;
    auto [tp, te] = std::from_chars(t_text.data(), t_text.data() + t_text.size(), t);
    if (te != std::errc() || tp != t_text.data() + t_text.size() ||
        !(std::fabs(t) <= kMaxTraceSeconds)) {
      return FieldError(
          source, line_no, "t", t_text,
          "a number of seconds in [-1e11, 1e11] (convert ms, us or ns timestamps to seconds)");
    }
    if (t < previous) {
      return FieldError(source, line_no, "t", t_text,
                        Cat("rows must be sorted by t; the previous row has t = ", previous));
    }
    previous = t;
    for (size_t d = 0; d < cols.size(); ++d) {
      const std::string_view v = Trim(fields[static_cast<size_t>(cols[d])]);
      int64_t size = 0;
      auto [p, e] = std::from_chars(v.data(), v.data() + v.size(), size);
      if (e != std::errc() || p != v.data() + v.size() || size < 1) {
        return FieldError(source, line_no, trace.dimensions[d], v,
                          e == std::errc::result_out_of_range ? "an integer in [1, 2^63 - 1]"
                                                              : "an integer >= 1");
      }
      trace.sizes.push_back(size);
    }
    if (mem_col >= 0) {
      const std::string_view v = Trim(fields[static_cast<size_t>(mem_col)]);
      double m = 0;
      auto [p, e] = std::from_chars(v.data(), v.data() + v.size(), m);
      if (e != std::errc() || p != v.data() + v.size() || !(m >= 0.0 && m <= 1.0)) {
        return FieldError(source, line_no, "mem_usage", v, "a fraction in [0, 1]");
      }
      trace.mem_usage.push_back(m);
    }
    trace.time.push_back(t);
  }
  if (trace.time.empty()) return absl::InvalidArgumentError(Cat(source, ": the trace has no rows"));
  return trace;
}

}  // namespace

bool SplitCsvLine(std::string_view line, std::string* scratch,
                  std::vector<std::string_view>* fields) {
  fields->clear();
  if (line.find('"') == std::string_view::npos) {
    size_t start = 0;
    while (true) {
      const size_t comma = line.find(',', start);
      fields->push_back(
          Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
      if (comma == std::string_view::npos) return true;
      start = comma + 1;
    }
  }
  // Quoted fields: unquote into `scratch`, reserved so the views stay valid.
  scratch->clear();
  scratch->reserve(line.size());
  std::vector<std::pair<size_t, size_t>> spans;  // offset, length in scratch
  size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t begin = scratch->size();
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            scratch->push_back('"');
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        scratch->push_back(line[i++]);
      }
      if (!closed) return false;
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      if (i < line.size() && line[i] != ',') return false;
    } else {
      const size_t comma = std::min(line.find(',', i), line.size());
      const std::string_view raw = Trim(line.substr(i, comma - i));
      if (raw.find('"') != std::string_view::npos) return false;
      scratch->append(raw);
      i = comma;
    }
    spans.emplace_back(begin, scratch->size() - begin);
    if (i >= line.size()) break;
    ++i;  // the comma
  }
  for (const auto& [offset, length] : spans)
    fields->push_back(std::string_view(*scratch).substr(offset, length));
  return true;
}

std::string_view StripUtf8Bom(std::string_view line) {
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  if (line.substr(0, kBom.size()) == kBom) line.remove_prefix(kBom.size());
  return line;
}

std::string PrintableText(std::string_view text) {
  constexpr size_t kMaxShown = 80;
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= kMaxShown) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02X}", c);
    }
  }
  return out;
}

absl::StatusOr<Trace> ReadTraceCsv(std::istream& in, const std::vector<std::string>& dimensions,
                                   const std::string& source) {
  return Read(in, &dimensions, source);
}

absl::StatusOr<Trace> ReadTraceCsvAnyDimensions(std::istream& in, const std::string& source) {
  return Read(in, nullptr, source);
}

absl::StatusOr<Trace> LoadTraceFile(const std::string& path,
                                    const std::vector<std::string>& dimensions) {
  // A device or pipe (/dev/zero) could be endless: only regular files.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        Cat(path, ": not a regular file (a directory, device or pipe); name a trace file"));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open the trace file"));
  return dimensions.empty() ? Read(in, nullptr, path) : Read(in, &dimensions, path);
}

void WriteTraceCsv(const Trace& trace, std::ostream& out) {
  std::string buffer = "t";
  for (const auto& d : trace.dimensions) buffer += "," + d;
  if (!trace.mem_usage.empty()) buffer += ",mem_usage";
  buffer += '\n';
  const size_t n = trace.dimensions.size();
  for (size_t i = 0; i < trace.rows(); ++i) {
    fmt::format_to(std::back_inserter(buffer), "{:.6f}", trace.time[i]);
    for (size_t d = 0; d < n; ++d)
      fmt::format_to(std::back_inserter(buffer), ",{}", trace.sizes[i * n + d]);
    if (!trace.mem_usage.empty())
      fmt::format_to(std::back_inserter(buffer), ",{}", trace.mem_usage[i]);
    buffer += '\n';
    if (buffer.size() > (1 << 20)) {
      out << buffer;
      buffer.clear();
    }
  }
  out << buffer;
}

}  // namespace gearbox
