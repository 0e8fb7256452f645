#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs gearbox on a
# stream of requests, printing the gear set as it evolves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DGEARBOX_BUILD_TESTS=OFF -DGEARBOX_BUILD_BENCHMARKS=OFF
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
build/tools/gearbox demo --minutes 60 --rate 20
