// gearbox: command-line front end over the library.
#include "tools/cli.h"

int main(int argc, char** argv) { return gearbox::tools::RunCli(argc, argv); }
