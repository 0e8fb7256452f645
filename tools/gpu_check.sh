#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU: the CUDA Graph backend's
# tests (which skip without a GPU elsewhere), its capture/replay benchmark,
# and the bundled Azure hour replayed through the backend with the static
# ladder, the adaptive and the replan policy (the GPU's own memory probe,
# CudaMemoryProbe, read at every update).
#   tools/gpu_check.sh                  builds here first (needs the CUDA toolkit
#                                       and Debian's development packages)
#   tools/gpu_check.sh --bundle DIR     runs what tools/gpu_bundle.sh packed
# Output goes to stdout and, when $OUT is set, to $OUT/gpu_check.log; the
# replay's summary to $OUT/gpu_replay_summary.json (else /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
case "${1:-}" in
  --bundle)
    bundle=$(cd "${2:?--bundle needs a folder}" && pwd)
    export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    bin() { echo "$bundle/bin/$1"; } ;;
  "")
    BUILD_DIR=build-gpu scripts/build.sh -DGEARBOX_WITH_CUDA=ON
    bin() { find build-gpu -name "$1" -type f -perm -u+x | head -1; } ;;
  *) echo "gpu_check: \"$1\" is not allowed; no argument, or --bundle DIR" >&2; exit 2 ;;
esac
status=0
step() {  # runs one check, keeps going after a failure, remembers it
  echo "== $*"
  "$@" || { echo "== FAILED ($?): $*"; status=1; }
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  step "$(bin cuda_graph_test)"
  step "$(bin device_arena_test)"
  step "$(bin executor_test)"
  step "$(bin cuda_graph_bench)" --benchmark_min_time=0.2
  trace=$out/azure_conv_prefill.csv
  step "$(bin gearbox)" trace convert --format azure --view prefill \
    --input data/AzureLLMInferenceTrace_conv.csv --output "$trace"
  step "$(bin gearbox)" replay --config data/configs/prefill_times.json --trace "$trace" \
    --policy static,adaptive,replan --optimum --summary "$out/gpu_replay_summary.json" \
    --execute cuda_graph --backend-param hidden=256 --backend-param batch_dim=-1 \
    --backend-param seq_dim=0
  rm -f "$trace"
  echo "gpu_check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
  exit $status
} 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
