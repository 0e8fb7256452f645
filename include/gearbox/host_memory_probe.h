// A memory probe that reads the host: the process's cgroup v2 memory against
// its limit, else the machine's memory from /proc/meminfo, or, with a byte
// budget, the process's bytes against that budget. Linux only (it reads /proc
// and /sys); on a system without those files it reports an error, which the
// runtime records as an "unknown" reading (no pressure).
//
// Sources, first that applies:
//  * budget_bytes > 0: used / budget_bytes, where used is memory.current of
//    the process's cgroup v2 (everything charged to the cgroup: the process,
//    other processes in it, page cache) when that file exists, else the
//    process's resident set (/proc/self/statm, resident pages x page size).
//  * cgroup v2 with a limit: the line "0::<path>" of /proc/self/cgroup names
//    the cgroup; for it and each of its ancestors under the cgroup mount whose
//    memory.max is a number, memory.current / memory.max; the largest ratio
//    (the limit nearest to binding). "max" (no limit), a missing memory.max or
//    no "0::" line (cgroup v1 only) fall through to:
//  * /proc/meminfo: (MemTotal - MemAvailable) / MemTotal.
// source() says which was read, for the update record and logs.
#ifndef GEARBOX_HOST_MEMORY_PROBE_H_
#define GEARBOX_HOST_MEMORY_PROBE_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gearbox/export.h"
#include "gearbox/memory_probe.h"

namespace gearbox {

struct HostMemoryProbeOptions {
  // Filesystem root the probe reads under ("/" on a real machine; tests point
  // it at a directory with fake proc/ and sys/ files).
  std::string root = "/";
  // Where cgroup v2 is mounted, relative to root.
  std::string cgroup_mount = "sys/fs/cgroup";
  // > 0: usage = the process's bytes / budget_bytes (see above); 0: no budget.
  int64_t budget_bytes = 0;
};

class GEARBOX_EXPORT HostMemoryProbe final : public MemoryProbe {
 public:
  explicit HostMemoryProbe(HostMemoryProbeOptions options = {});
  absl::StatusOr<double> UsageFraction() override;
  // What the last successful reading came from: "cgroup v2: <dir>/memory.max",
  // "meminfo", "cgroup v2 memory.current vs budget" or "rss vs budget"; empty
  // before the first. Thread-safe.
  std::string source() const;

 private:
  absl::StatusOr<double> Read(std::string& source) const;
  HostMemoryProbeOptions options_;
  mutable std::mutex mu_;
  std::string source_;
};

// /proc/meminfo's MemTotal and MemAvailable, in bytes.
struct MeminfoBytes {
  int64_t total = 0;
  int64_t available = 0;
};

// Parses /proc/meminfo text ("MemTotal:  16384 kB" lines). `file` names the
// file in errors. An error when MemTotal or MemAvailable is missing, not a
// number, or MemTotal is 0.
GEARBOX_EXPORT absl::StatusOr<MeminfoBytes> ParseMeminfo(std::string_view text,
                                                         std::string_view file);

// The cgroup v2 path from /proc/self/cgroup text (the "0::<path>" line), or
// nullopt when there is none (cgroup v1 only). An error when that path is not
// absolute.
GEARBOX_EXPORT absl::StatusOr<std::optional<std::string>> ParseCgroupPath(std::string_view text,
                                                                          std::string_view file);

// memory.max text: a byte count, or "max" (no limit: nullopt).
GEARBOX_EXPORT absl::StatusOr<std::optional<int64_t>> ParseCgroupMax(std::string_view text,
                                                                     std::string_view file);

// A file holding one non-negative byte count (memory.current).
GEARBOX_EXPORT absl::StatusOr<int64_t> ParseByteCount(std::string_view text, std::string_view file);

}  // namespace gearbox

#endif  // GEARBOX_HOST_MEMORY_PROBE_H_
