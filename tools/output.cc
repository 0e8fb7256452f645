#include "tools/output.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "fmt/format.h"

namespace gearbox::tools {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_(fmt::format("{}.tmp.{}", path_, getpid())) {
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
  if (!out_.is_open()) return absl::PermissionDeniedError(fmt::format("{}: cannot write here", path_));
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
  const int percent = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
  if (percent == last_percent_) return;
  last_percent_ = percent;
  const int width = 30;
  const int filled = percent * width / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%% (%zu/%zu)", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), percent, done, total);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
}

absl::Status WriteReplayPlot(const std::vector<ReplayResult>& results, const std::string& path) {
  if (results.empty()) return absl::InvalidArgumentError("nothing to plot");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("gearbox-plot-{}", getpid());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(dir, e);
    }
  } cleanup{dir};

  const size_t dims = results.front().dimensions.size();
  const double t0 = results.front().gear_timeline.empty() ? 0.0 : results.front().gear_timeline.front().time;
  const double end_minutes = results.front().replay_seconds / 60.0;
  // Data files: gears-<policy>-<dim>.dat ("minutes gear"), waste-<policy>.dat.
  for (size_t p = 0; p < results.size(); ++p) {
    const ReplayResult& r = results[p];
    for (size_t d = 0; d < dims; ++d) {
      std::string text;
      for (size_t s = 0; s < r.gear_timeline.size(); ++s) {
        const GearSetSample& sample = r.gear_timeline[s];
        for (int64_t g : sample.gears[d]) text += fmt::format("{} {}\n", (sample.time - t0) / 60.0, g);
      }
      // The static policy has only the start: repeat it at the end so it shows as a ladder.
      if (r.gear_timeline.size() == 1) {
        for (int64_t g : r.gear_timeline.front().gears[d]) text += fmt::format("{} {}\n", end_minutes, g);
      }
      if (auto s = WriteFileAtomically((dir / fmt::format("gears-{}-{}.dat", p, d)).string(), text); !s.ok()) {
        return s;
      }
    }
    std::string waste;
    for (const WasteBucket& b : r.waste_timeline) {
      if (b.raw > 0) waste += fmt::format("{} {}\n", (b.start - t0) / 60.0, 100.0 * (b.padded / b.raw - 1.0));
    }
    if (auto s = WriteFileAtomically((dir / fmt::format("waste-{}.dat", p)).string(), waste); !s.ok()) {
      return s;
    }
  }
  std::string script;
  const int panels = static_cast<int>(dims) + 1;
  script += fmt::format("set terminal pngcairo size 1200,{} noenhanced font ',10'\n", 330 * panels);
  // gnuplot writes a temporary next to `path`, renamed into place on success.
  const std::string temp_png = fmt::format("{}.tmp.{}", path, getpid());
  script += fmt::format("set output '{}'\n", temp_png);
  script += fmt::format("set multiplot layout {},1\n", panels);
  script += "set grid\nset key outside right\nset xlabel 'trace time (minutes)'\n";
  for (size_t d = 0; d < dims; ++d) {
    script += fmt::format("set title 'gears of {} over time (one mark per gear per update)'\n",
                          results.front().dimensions[d]);
    script += "set logscale y 2\nset ylabel 'gear'\nplot ";
    for (size_t p = 0; p < results.size(); ++p) {
      script += fmt::format("{}'{}' using 1:2 with points pt {} ps 0.6 title '{}'", p ? ", " : "",
                            (dir / fmt::format("gears-{}-{}.dat", p, d)).string(), 7 - static_cast<int>(p) * 2,
                            results[p].policy);
    }
    script += "\nunset logscale y\n";
  }
  script += "set title 'padding waste per bucket'\nset ylabel 'waste (%)'\nplot ";
  for (size_t p = 0; p < results.size(); ++p) {
    script += fmt::format("{}'{}' using 1:2 with lines lw 2 title '{}'", p ? ", " : "",
                          (dir / fmt::format("waste-{}.dat", p)).string(), results[p].policy);
  }
  script += "\nunset multiplot\n";
  const std::string script_path = (dir / "plot.gp").string();
  if (auto s = WriteFileAtomically(script_path, script); !s.ok()) return s;
  const std::string command = fmt::format("gnuplot '{}' 2>&1", script_path);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot run gnuplot");
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int rc = pclose(pipe);
  if (rc != 0) {
    std::filesystem::remove(temp_png, ec);
    return absl::InternalError(fmt::format("gnuplot failed (is gnuplot-nox installed?): {}", output));
  }
  std::filesystem::rename(temp_png, path, ec);
  if (ec) return absl::PermissionDeniedError(fmt::format("{}: {}", path, ec.message()));
  return absl::OkStatus();
}

}  // namespace gearbox::tools
