// Request traces: the CSV format the replay tool reads and `gearbox trace
// convert` writes.
//
//   t,SEQLEN,BATCHSIZE[,mem_usage]
//   0.000,374,1
//   4.314,396,2
//
// `t`: seconds (float, non-decreasing); one integer column (>= 1) per
// dimension, named as in the config, in any order; optional `mem_usage`
// (fraction of device memory in use, 0..1) to drive a simulated memory
// probe. Errors give the line number and the column. A UTF-8 byte-order
// mark before the header is skipped, fields may be quoted as in RFC 4180
// ("1,5" and "" for a quote, within one line), and |t| is at most
// kMaxTraceSeconds (timestamps in ms, us or ns must be converted).
#ifndef GEARBOX_TRACE_H_
#define GEARBOX_TRACE_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"

namespace gearbox {

struct Trace {
  std::vector<std::string> dimensions;  // column names, in the order rows store them
  std::vector<double> time;             // one per row
  std::vector<int64_t> sizes;           // row-major: rows x dimensions
  std::vector<double> mem_usage;        // one per row, or empty

  size_t rows() const { return time.size(); }
  const int64_t* row(size_t i) const { return &sizes[i * dimensions.size()]; }
  double duration() const { return time.empty() ? 0.0 : time.back() - time.front(); }
};

// The largest |t| a trace may have, seconds (about 3,170 years): beyond it
// a double cannot step the worker's schedule in milliseconds.
inline constexpr double kMaxTraceSeconds = 1e11;

// Splits one CSV line into fields, each trimmed of spaces and tabs; a field
// quoted as in RFC 4180 ("a,b", "" for a quote) is unquoted into `scratch`
// (so the fields point into `line` or `scratch`). False on an unterminated
// quote or text after a closing quote.
GEARBOX_EXPORT bool SplitCsvLine(std::string_view line, std::string* scratch,
                                 std::vector<std::string_view>* fields);
// `line` without a leading UTF-8 byte-order mark.
GEARBOX_EXPORT std::string_view StripUtf8Bom(std::string_view line);
// `text` for an error message: bytes outside printable ASCII as \xNN, long
// text cut to 80 characters with "...".
GEARBOX_EXPORT std::string PrintableText(std::string_view text);

// Reads a trace whose dimension columns must be exactly `dimensions` (any
// order; stored in this order). `source` names the input in errors.
GEARBOX_EXPORT absl::StatusOr<Trace> ReadTraceCsv(std::istream& in,
                                                  const std::vector<std::string>& dimensions,
                                                  const std::string& source);
// Reads a trace with whatever dimension columns its header has.
GEARBOX_EXPORT absl::StatusOr<Trace> ReadTraceCsvAnyDimensions(std::istream& in,
                                                               const std::string& source);
GEARBOX_EXPORT absl::StatusOr<Trace> LoadTraceFile(const std::string& path,
                                                   const std::vector<std::string>& dimensions);

GEARBOX_EXPORT void WriteTraceCsv(const Trace& trace, std::ostream& out);

}  // namespace gearbox

#endif  // GEARBOX_TRACE_H_
