// Fuzzes every trace reader: the trace CSV (fixed and free dimensions) and
// the Azure, Mooncake and length-list converters, plus the decode view.
// Accepted traces must satisfy the format's invariants.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "gearbox/trace.h"
#include "gearbox/trace_convert.h"

namespace {

void CheckTrace(const gearbox::Trace& t) {
  if (t.sizes.size() != t.rows() * t.dimensions.size()) __builtin_trap();
  for (size_t i = 1; i < t.rows(); ++i) {
    if (!(t.time[i] >= t.time[i - 1])) __builtin_trap();
  }
  for (int64_t s : t.sizes) {
    if (s < 1) __builtin_trap();
  }
  for (double m : t.mem_usage) {
    if (!(m >= 0 && m <= 1)) __builtin_trap();
  }
}

void CheckRequests(const std::vector<gearbox::RequestRecord>& r) {
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].prompt_tokens < 1 || r[i].output_tokens < 0) __builtin_trap();
    if (i > 0 && !(r[i].arrival >= r[i - 1].arrival)) __builtin_trap();
  }
  if (r.size() > 200) return;  // keep the decode simulation cheap
  auto decode = gearbox::DecodeView(r, {0.5, 4, 100000});
  if (decode.ok()) CheckTrace(*decode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 5;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  switch (mode) {
    case 0: {
      auto t = gearbox::ReadTraceCsv(in, {"SEQLEN", "BATCHSIZE"}, "fuzz");
      if (t.ok()) CheckTrace(*t);
      break;
    }
    case 1: {
      auto t = gearbox::ReadTraceCsvAnyDimensions(in, "fuzz");
      if (t.ok()) CheckTrace(*t);
      break;
    }
    case 2: {
      auto r = gearbox::ReadAzureTrace(in, "fuzz");
      if (r.ok()) CheckRequests(*r);
      break;
    }
    case 3: {
      auto r = gearbox::ReadMooncakeTrace(in, "fuzz");
      if (r.ok()) CheckRequests(*r);
      break;
    }
    case 4: {
      auto r = gearbox::ReadLengthList(in, "fuzz", 3.0, 1);
      if (r.ok()) CheckRequests(*r);
      break;
    }
  }
  return 0;
}
