#!/usr/bin/env bash
# The main job: installs what is missing, builds, converts the bundled Azure
# LLM conversation trace (one real hour) to the prefill view, and replays it
# with the static TIMES ladder, the adaptive (seed) policy and the replan
# policy (the default), next to the offline
# optimum at the same average gear count; then runs every request of it
# through the oneDNN executor (a transformer block, hidden 64, prompt lengths
# divided by 8 so it takes about a minute on 2 cores) and reports requests/s,
# latency, compiles, gear memory and padding waste for each policy.
# Then the executed replay once more under a gear-memory budget that binds
# (64 MiB: the largest gear alone needs 69.5 MiB), and prints whether every
# policy stayed under it (docs/MEMORY.md, "The budget in the policies").
# Writes out/summary.json, out/decisions.jsonl, out/replay.png and
# out/summary_budget64.json.
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
build-main/tools/gearbox replay --config data/configs/prefill_times.json \
  --trace out/azure_conv_prefill.csv --policy static,adaptive,replan \
  --summary out/summary_budget64.json \
  --execute onednn --backend-param hidden=64 --backend-param heads=4 --size-scale 8 \
  --memory-budget-mb 64
if command -v python3 >/dev/null; then
  python3 - out/summary_budget64.json <<'PY'
import json, sys
budget = 64 * 1024 * 1024
summary = json.load(open(sys.argv[1]))
ok = True
for name, p in summary["policies"].items():
    e = p["executed"]
    under = e["peak_gear_bytes"] <= budget and e["failed_requests"] == 0
    ok = ok and under
    print(f"budget 64 MiB, {name}: peak gear memory {e['peak_gear_bytes'] / 2**20:.1f} MiB "
          f"({'under' if under else 'OVER'} the budget), failed requests {e['failed_requests']}, "
          f"refused by the executor before / after "
          f"its compile {e['predicted_over_budget_runs']} / {e['over_budget_runs']}, "
          f"compiles {e['compiles']}, padding waste {100 * e['padding_waste']:.2f} %")
sys.exit(0 if ok else 1)
PY
fi
echo "wrote out/summary.json, out/decisions.jsonl, out/replay.png, out/summary_budget64.json"
