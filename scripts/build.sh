#!/usr/bin/env bash
# Configures and builds gearbox (Release, warnings as errors) in $BUILD_DIR
# (default build/). Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
