#include "tools/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "fmt/format.h"

namespace gearbox::tools {

// Unique per object too: two outputs never share a temporary file.
static std::atomic<int> atomic_file_count{0};

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)),
      temp_(fmt::format("{}.tmp.{}.{}", path_, getpid(), atomic_file_count++)) {
  out_.open(temp_, std::ios::binary | std::ios::trunc);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

absl::Status AtomicFile::status() const {
  if (!out_.is_open())
    return absl::PermissionDeniedError(fmt::format("{}: cannot write here", path_));
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (auto s = status(); !s.ok()) return s;
  out_.flush();
  if (!out_) return absl::DataLossError(fmt::format("{}: write failed", path_));
  out_.close();
  std::error_code ec;
  std::filesystem::rename(temp_, path_, ec);
  if (ec) return absl::PermissionDeniedError(fmt::format("{}: {}", path_, ec.message()));
  committed_ = true;
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  if (auto s = file.status(); !s.ok()) return s;
  file.stream() << text;
  return file.Commit();
}

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::Update(size_t done, size_t total) {
  if (!enabled_ || total == 0) return;
  const int percent =
      static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
  if (percent == last_percent_) return;
  last_percent_ = percent;
  const int width = 30;
  const int filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%% (%zu/%zu)", label_.c_str(),
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), percent,
               done, total);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
}

namespace {

namespace fs = std::filesystem;

// The name an output will have: its directory resolved (symbolic links,
// ".."), then its file name; an existing file resolved itself.
std::string ResolvedName(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(fs::path(path), ec).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.string() : canonical.lexically_normal().string();
}

struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool exists = false;
  bool directory = false;
};

FileIdentity IdentityOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, true, S_ISDIR(st.st_mode)};
}

bool SameFile(const std::string& a, const std::string& b) {
  if (ResolvedName(a) == ResolvedName(b)) return true;
  const FileIdentity x = IdentityOf(a), y = IdentityOf(b);
  return x.exists && y.exists && x.device == y.device && x.inode == y.inode;
}

absl::Status CheckWritable(const NamedPath& out) {
  const FileIdentity id = IdentityOf(out.path);
  if (id.directory) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {} is a directory; name a file", out.flag, out.path));
  }
  fs::path dir = fs::path(out.path).parent_path();
  if (dir.empty()) dir = ".";
  const FileIdentity dir_id = IdentityOf(dir.string());
  if (!dir_id.exists || !dir_id.directory) {
    return absl::InvalidArgumentError(
        fmt::format("{}: {}: the directory {} does not exist", out.flag, out.path, dir.string()));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        fmt::format("{}: {}: cannot write in the directory {}", out.flag, out.path, dir.string()));
  }
  return absl::OkStatus();
}

// Letters, digits and "_-./ " only: text safe inside a gnuplot string.
std::string PlotSafe(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool safe = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' ||
                      c == '.' || c == '/' || c == ' ';
    out += safe ? c : '?';
  }
  return out;
}

// Runs `gnuplot script` in `dir` (no shell), its output into `log`.
absl::Status RunGnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& script,
                        const std::string& log) {
  const std::string dir_text = dir.string();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("cannot start gnuplot (fork failed)");
  if (pid == 0) {
    if (chdir(dir_text.c_str()) != 0) _exit(126);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execl(gnuplot.c_str(), gnuplot.c_str(), script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("gnuplot: waitpid failed");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::ifstream in(dir / log);
  std::stringstream text;
  text << in.rdbuf();
  return absl::InternalError(fmt::format("gnuplot failed: {}", text.str()));
}

}  // namespace

absl::Status CheckOutputPaths(const std::vector<NamedPath>& inputs,
                              const std::vector<NamedPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const NamedPath& in : inputs) {
      if (!in.path.empty() && SameFile(out.path, in.path)) {
        return absl::InvalidArgumentError(
            fmt::format("{}: {} is the {} file ({}); it would be overwritten", out.flag, out.path,
                        in.flag, in.path));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() && SameFile(out.path, outputs[j].path)) {
        return absl::InvalidArgumentError(fmt::format("{}: {} is also the {} output ({})", out.flag,
                                                      out.path, outputs[j].flag, outputs[j].path));
      }
    }
    if (auto s = CheckWritable(out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindGnuplot() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = (fs::path(dir) / "gnuplot").string();
    if (access(candidate.c_str(), X_OK) == 0 && !IdentityOf(candidate).directory) return candidate;
  }
  return absl::FailedPreconditionError("--plot: gnuplot is not on PATH (install gnuplot-nox)");
}

absl::Status WriteReplayPlot(const std::vector<ReplayResult>& results, const std::string& gnuplot,
                             AtomicFile* out) {
  if (results.empty()) return absl::InvalidArgumentError("nothing to plot");
  std::string pattern = (fs::temp_directory_path() / "gearbox-plot-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(fmt::format("cannot create a temporary directory {}", pattern));
  }
  const fs::path dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{dir};

  const size_t dims = results.front().dimensions.size();
  const double t0 =
      results.front().gear_timeline.empty() ? 0.0 : results.front().gear_timeline.front().time;
  const double end_minutes = results.front().replay_seconds / 60.0;
  // Data files: gears-<policy>-<dim>.dat ("minutes gear"), waste-<policy>.dat.
  for (size_t p = 0; p < results.size(); ++p) {
    const ReplayResult& r = results[p];
    for (size_t d = 0; d < dims; ++d) {
      std::string text;
      for (size_t s = 0; s < r.gear_timeline.size(); ++s) {
        const GearSetSample& sample = r.gear_timeline[s];
        for (int64_t g : sample.gears[d])
          text += fmt::format("{} {}\n", (sample.time - t0) / 60.0, g);
      }
      // The static policy has only the start: repeat it at the end so it shows as a ladder.
      if (r.gear_timeline.size() == 1) {
        for (int64_t g : r.gear_timeline.front().gears[d])
          text += fmt::format("{} {}\n", end_minutes, g);
      }
      if (auto s = WriteFileAtomically((dir / fmt::format("gears-{}-{}.dat", p, d)).string(), text);
          !s.ok()) {
        return s;
      }
    }
    std::string waste;
    for (const WasteBucket& b : r.waste_timeline) {
      if (b.raw > 0)
        waste += fmt::format("{} {}\n", (b.start - t0) / 60.0, 100.0 * (b.padded / b.raw - 1.0));
    }
    if (auto s = WriteFileAtomically((dir / fmt::format("waste-{}.dat", p)).string(), waste);
        !s.ok()) {
      return s;
    }
  }
  // Every name in the script is generated here and relative to `dir`.
  std::string script;
  const int panels = static_cast<int>(dims) + 1;
  script += fmt::format("set terminal pngcairo size 1200,{} noenhanced font ',10'\n", 330 * panels);
  script += "set output 'plot.png'\n";
  script += fmt::format("set multiplot layout {},1\n", panels);
  script += "set grid\nset key outside right\nset xlabel 'trace time (minutes)'\n";
  for (size_t d = 0; d < dims; ++d) {
    script += fmt::format("set title 'gears of {} over time (one mark per gear per update)'\n",
                          PlotSafe(results.front().dimensions[d]));
    script += "set logscale y 2\nset ylabel 'gear'\nplot ";
    for (size_t p = 0; p < results.size(); ++p) {
      script += fmt::format("{}'gears-{}-{}.dat' using 1:2 with points pt {} ps 0.6 title '{}'",
                            p ? ", " : "", p, d, 7 - static_cast<int>(p) * 2,
                            PlotSafe(results[p].policy));
    }
    script += "\nunset logscale y\n";
  }
  script += "set title 'padding waste per bucket'\nset ylabel 'waste (%)'\nplot ";
  for (size_t p = 0; p < results.size(); ++p) {
    script += fmt::format("{}'waste-{}.dat' using 1:2 with lines lw 2 title '{}'", p ? ", " : "", p,
                          PlotSafe(results[p].policy));
  }
  script += "\nunset multiplot\n";
  if (auto s = WriteFileAtomically((dir / "plot.gp").string(), script); !s.ok()) return s;
  if (auto s = RunGnuplot(gnuplot, dir, "plot.gp", "gnuplot.log"); !s.ok()) return s;
  std::ifstream png(dir / "plot.png", std::ios::binary);
  if (!png) return absl::InternalError("gnuplot wrote no plot");
  out->stream() << png.rdbuf();
  return absl::OkStatus();
}

}  // namespace gearbox::tools
