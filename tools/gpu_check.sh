#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and the CUDA toolkit (/usr/local/cuda):
# builds gearbox with the CUDA Graph backend, runs its tests (which skip
# without a GPU elsewhere) and the capture/replay benchmark. Results go to
# stdout and, when $OUT is set, to $OUT/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
log=${OUT:-/tmp}/gpu_check.log
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  BUILD_DIR=build-gpu scripts/build.sh -DGEARBOX_WITH_CUDA=ON -DGEARBOX_BUILD_TOOLS=OFF
  build-gpu/tests/cuda_graph_test
  build-gpu/tests/executor_test
  build-gpu/bench/cuda_graph_bench --benchmark_min_time=0.2
} 2>&1 | tee "$log"
