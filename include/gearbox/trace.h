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
// probe. Errors give the line number and the column.
#ifndef GEARBOX_TRACE_H_
#define GEARBOX_TRACE_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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

// Reads a trace whose dimension columns must be exactly `dimensions` (any
// order; stored in this order). `source` names the input in errors.
absl::StatusOr<Trace> ReadTraceCsv(std::istream& in, const std::vector<std::string>& dimensions,
                                   const std::string& source);
// Reads a trace with whatever dimension columns its header has.
absl::StatusOr<Trace> ReadTraceCsvAnyDimensions(std::istream& in, const std::string& source);
absl::StatusOr<Trace> LoadTraceFile(const std::string& path,
                                    const std::vector<std::string>& dimensions);

void WriteTraceCsv(const Trace& trace, std::ostream& out);

}  // namespace gearbox

#endif  // GEARBOX_TRACE_H_
