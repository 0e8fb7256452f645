#!/usr/bin/env bash
# The main job: installs what is missing, builds, converts the bundled Azure
# LLM conversation trace (one real hour) to the prefill view, and replays it
# with the static TIMES ladder, the adaptive (seed) policy and the replan
# policy (the default), next to the offline
# optimum at the same average gear count; then runs every request of it
# through the oneDNN executor (a transformer block, hidden 64, prompt lengths
# divided by 8 so it takes about a minute on 2 cores) and reports requests/s,
# latency, compiles, gear memory and padding waste for each policy.
# Writes out/summary.json, out/decisions.jsonl and out/replay.png.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --without-python  # the main job runs the C++ tool only
BUILD_DIR=build-main scripts/build.sh -DGEARBOX_BUILD_TESTS=OFF -DGEARBOX_BUILD_BENCHMARKS=OFF \
  -DGEARBOX_BUILD_PYTHON=OFF
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p out
build-main/tools/gearbox trace convert --format azure --view prefill \
  --input data/AzureLLMInferenceTrace_conv.csv --output out/azure_conv_prefill.csv
build-main/tools/gearbox replay --config data/configs/prefill_times.json \
  --trace out/azure_conv_prefill.csv --policy static,adaptive,replan --optimum \
  --summary out/summary.json --decisions out/decisions.jsonl --plot out/replay.png \
  --execute onednn --backend-param hidden=64 --backend-param heads=4 --size-scale 8
echo "wrote out/summary.json, out/decisions.jsonl, out/replay.png"
