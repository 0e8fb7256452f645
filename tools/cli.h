// The whole `gearbox` command line as a function, for main() and the
// argument fuzzer (fuzz/cli_fuzz.cc).
#ifndef GEARBOX_TOOLS_CLI_H_
#define GEARBOX_TOOLS_CLI_H_

namespace gearbox::tools {

// Parses and runs one command line (argv[0] is the program). Exit codes:
// 0 done, 1 internal error, 2 bad input or command-line error, 3 a replay
// rejected more than --max-reject-ratio of its requests.
int RunCli(int argc, char** argv);

}  // namespace gearbox::tools

#endif  // GEARBOX_TOOLS_CLI_H_
