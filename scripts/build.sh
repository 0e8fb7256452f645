#!/usr/bin/env bash
# Configures and builds gearbox in build/ (Release, warnings as errors).
# Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_WERROR=ON "$@" >/dev/null
cmake --build build -j "$jobs"
