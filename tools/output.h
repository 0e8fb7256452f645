// Output helpers for the command-line tools: files that appear whole or not
// at all, a progress bar for terminals, and gnuplot plots of replays.
#ifndef GEARBOX_TOOLS_OUTPUT_H_
#define GEARBOX_TOOLS_OUTPUT_H_

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gearbox/replay.h"

namespace gearbox::tools {

// Writes to "<path>.tmp.<pid>.<n>" and renames over `path` on Commit(); the
// temporary file is removed if the object dies uncommitted, so a failed run
// leaves no half-written output.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  absl::Status status() const;  // open errors
  std::ostream& stream() { return out_; }
  absl::Status Commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_;
  std::ofstream out_;
  bool committed_ = false;
};

// "\r<label> 42% (8123/19366)" on stderr, only when stderr is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  void Update(size_t done, size_t total);
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

// A file named on the command line, with the flag that named it.
struct NamedPath {
  std::string flag;  // "--summary"
  std::string path;
};

// Before any work: OK when every output (empty paths skipped) can be created
// (its directory exists and is writable; it is not a directory) and none of
// them is an input or another output, also through symbolic links, "..",
// or hard links (same device and inode); else the flags, the paths and why.
absl::Status CheckOutputPaths(const std::vector<NamedPath>& inputs,
                              const std::vector<NamedPath>& outputs);

// The gnuplot executable on PATH, or an error saying it is needed for --plot.
absl::StatusOr<std::string> FindGnuplot();

// A PNG through gnuplot (`gnuplot`, from FindGnuplot) into `out`: per
// dimension, the gear set over time (one mark per gear per update, log scale)
// for each policy, and the padding waste per timeline bucket for each policy.
// No path or user text is interpolated into the script: gnuplot runs in a
// private temporary directory on files with generated names (titles keep
// only letters, digits and "_-./ "), without a shell.
absl::Status WriteReplayPlot(const std::vector<ReplayResult>& results, const std::string& gnuplot,
                             AtomicFile* out);

// Writes `text` to `path` whole or not at all.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace gearbox::tools

#endif  // GEARBOX_TOOLS_OUTPUT_H_
