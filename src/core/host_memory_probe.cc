#include "gearbox/host_memory_probe.h"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

namespace fs = std::filesystem;

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

// Non-empty pieces of `s` between separators.
std::vector<std::string_view> Split(std::string_view s, char separator) {
  std::vector<std::string_view> pieces;
  while (!s.empty()) {
    const size_t end = s.find(separator);
    const std::string_view piece = s.substr(0, end);
    if (!piece.empty()) pieces.push_back(piece);
    if (end == std::string_view::npos) break;
    s.remove_prefix(end + 1);
  }
  return pieces;
}

// A whole non-negative decimal integer.
bool ParseCount(std::string_view s, int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

// A value as it appears in an error: quoted, at most 40 characters.
std::string Quoted(std::string_view value) {
  constexpr size_t kMax = 40;
  if (value.size() > kMax) return fmt::format("\"{}...\"", value.substr(0, kMax));
  return fmt::format("\"{}\"", value);
}

absl::Status Malformed(std::string_view file, std::string_view what, std::string_view value,
                       std::string_view allowed) {
  return internal::InvalidField(fmt::format("{}: {}", file, what), Quoted(value), allowed);
}

// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      return absl::NotFoundError(fmt::format("{}: no such file", path.string()));
    return absl::UnavailableError(fmt::format("{}: cannot be read", path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// memory.current / memory.max of one cgroup directory; nullopt when it has
// no limit (memory.max missing or "max").
absl::StatusOr<std::optional<double>> CgroupRatio(const fs::path& dir) {
  const fs::path max_file = dir / "memory.max";
  auto max_text = ReadFile(max_file);
  if (absl::IsNotFound(max_text.status())) return std::optional<double>();
  if (!max_text.ok()) return max_text.status();
  auto limit = ParseCgroupMax(*max_text, max_file.string());
  if (!limit.ok()) return limit.status();
  if (!limit->has_value()) return std::optional<double>();
  const fs::path current_file = dir / "memory.current";
  auto current_text = ReadFile(current_file);
  if (!current_text.ok()) return current_text.status();
  auto current = ParseByteCount(*current_text, current_file.string());
  if (!current.ok()) return current.status();
  if (**limit == 0) return std::optional<double>(*current > 0 ? 2.0 : 0.0);
  return std::optional<double>(static_cast<double>(*current) / static_cast<double>(**limit));
}

// The process's cgroup v2 directory under the mount, or nullopt (no
// /proc/self/cgroup, or no "0::" line).
absl::StatusOr<std::optional<fs::path>> CgroupDir(const fs::path& root, const std::string& mount) {
  const fs::path file = root / "proc/self/cgroup";
  auto text = ReadFile(file);
  if (absl::IsNotFound(text.status())) return std::optional<fs::path>();
  if (!text.ok()) return text.status();
  auto path = ParseCgroupPath(*text, file.string());
  if (!path.ok()) return path.status();
  if (!path->has_value()) return std::optional<fs::path>();
  fs::path dir = (root / mount).lexically_normal();
  const std::string_view relative = std::string_view(**path).substr(1);
  if (!relative.empty()) dir = (dir / relative).lexically_normal();
  return std::optional<fs::path>(dir);
}

absl::StatusOr<int64_t> ResidentBytes(const fs::path& root) {
  const fs::path file = root / "proc/self/statm";
  auto text = ReadFile(file);
  if (!text.ok()) return text.status();
  const std::vector<std::string_view> fields = Split(Trim(*text), ' ');
  int64_t pages = 0;
  if (fields.size() < 2 || !ParseCount(fields[1], pages)) {
    return Malformed(file.string(), "resident pages (field 2)", *text,
                     "\"<size> <resident> ...\" page counts");
  }
  return pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

absl::StatusOr<MeminfoBytes> ParseMeminfo(std::string_view text, std::string_view file) {
  std::optional<int64_t> total, available;
  for (std::string_view line : Split(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::optional<int64_t>* slot =
        key == "MemTotal" ? &total : (key == "MemAvailable" ? &available : nullptr);
    if (slot == nullptr) continue;
    std::string_view value = Trim(line.substr(colon + 1));
    int64_t scale = 1;
    if (value.size() >= 2 && value.substr(value.size() - 2) == "kB") {
      value = Trim(value.substr(0, value.size() - 2));
      scale = 1024;
    }
    int64_t n = 0;
    if (!ParseCount(value, n)) {
      return Malformed(file, key, Trim(line.substr(colon + 1)), "a non-negative count of kB");
    }
    *slot = n * scale;
  }
  if (!total || !available) {
    return absl::InvalidArgumentError(
        fmt::format("{}: no {} line; MemTotal and MemAvailable needed", file,
                    total ? "MemAvailable" : "MemTotal"));
  }
  if (*total == 0) return Malformed(file, "MemTotal", "0 kB", "more than 0");
  return MeminfoBytes{*total, *available};
}

absl::StatusOr<std::optional<std::string>> ParseCgroupPath(std::string_view text,
                                                           std::string_view file) {
  for (std::string_view line : Split(text, '\n')) {
    line = Trim(line);
    if (line.substr(0, 3) != "0::") continue;
    const std::string_view path = line.substr(3);
    if (path.empty() || path.front() != '/') {
      return Malformed(file, "cgroup v2 path", path, "an absolute path (\"0::/...\")");
    }
    return std::optional<std::string>(std::string(path));
  }
  return std::optional<std::string>();
}

absl::StatusOr<std::optional<int64_t>> ParseCgroupMax(std::string_view text,
                                                      std::string_view file) {
  if (Trim(text) == "max") return std::optional<int64_t>();
  auto bytes = ParseByteCount(text, file);
  if (!bytes.ok()) return Malformed(file, "limit", Trim(text), "a byte count or \"max\"");
  return std::optional<int64_t>(*bytes);
}

absl::StatusOr<int64_t> ParseByteCount(std::string_view text, std::string_view file) {
  const std::string_view value = Trim(text);
  int64_t n = 0;
  if (!ParseCount(value, n)) {
    return Malformed(file, "bytes", value, "a non-negative byte count");
  }
  return n;
}

HostMemoryProbe::HostMemoryProbe(HostMemoryProbeOptions options) : options_(std::move(options)) {}

std::string HostMemoryProbe::source() const {
  std::lock_guard lock(mu_);
  return source_;
}

absl::StatusOr<double> HostMemoryProbe::UsageFraction() {
  std::string source;
  auto usage = Read(source);
  if (usage.ok()) {
    std::lock_guard lock(mu_);
    source_ = std::move(source);
  }
  return usage;
}

absl::StatusOr<double> HostMemoryProbe::Read(std::string& source) const {
  const fs::path root(options_.root);
  auto dir = CgroupDir(root, options_.cgroup_mount);
  if (!dir.ok()) return dir.status();
  if (options_.budget_bytes > 0) {
    const double budget = static_cast<double>(options_.budget_bytes);
    if (dir->has_value()) {
      const fs::path file = **dir / "memory.current";
      auto text = ReadFile(file);
      if (text.ok()) {
        auto current = ParseByteCount(*text, file.string());
        if (!current.ok()) return current.status();
        source = "cgroup v2 memory.current vs budget";
        return static_cast<double>(*current) / budget;
      }
      if (!absl::IsNotFound(text.status())) return text.status();
    }
    auto rss = ResidentBytes(root);
    if (!rss.ok()) return rss.status();
    source = "rss vs budget";
    return static_cast<double>(*rss) / budget;
  }
  if (dir->has_value()) {
    // The process's cgroup and its ancestors up to the mount: the limit
    // nearest to binding.
    const std::string mount = (root / options_.cgroup_mount).lexically_normal().string();
    std::optional<double> worst;
    for (fs::path d = **dir; d.string().starts_with(mount); d = d.parent_path()) {
      auto ratio = CgroupRatio(d);
      if (!ratio.ok()) return ratio.status();
      if (ratio->has_value() && (!worst || **ratio > *worst)) {
        worst = **ratio;
        source = fmt::format("cgroup v2: {}", (d / "memory.max").string());
      }
      if (d.string().size() == mount.size() || d.parent_path() == d) break;
    }
    if (worst) return *worst;
  }
  const fs::path file = root / "proc/meminfo";
  auto text = ReadFile(file);
  if (!text.ok()) return text.status();
  auto meminfo = ParseMeminfo(*text, file.string());
  if (!meminfo.ok()) return meminfo.status();
  source = "meminfo";
  return static_cast<double>(meminfo->total - meminfo->available) /
         static_cast<double>(meminfo->total);
}

}  // namespace gearbox
