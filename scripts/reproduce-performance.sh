#!/usr/bin/env bash
# Prints every figure docs/PERFORMANCE.md quotes, each under the command that
# makes it (the same commands as the doc), on this machine, now. Takes about
# 15 minutes on 2 cores after the build. These machines are noisy: compare the
# ratios within one run (request path vs its floor, executor vs a direct call),
# not absolute times across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { echo; echo "\$ $*"; "$@"; }

echo "== Request path (snapshot + plan + record) against its floor, same run"
run build/bench/request_path_bench --benchmark_filter='BM_RequestPath(Floor)?/' \
  --benchmark_min_time=0.5 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run build/bench/request_path_bench --benchmark_filter='Snapshot|PlanOnly|WithFold' --benchmark_min_time=0.3

echo "== Executor overhead over a direct call (exact, padded, split, 2-D padded) and the oneDNN block"
run build/bench/executor_bench --benchmark_filter='Executor|DirectCall' --benchmark_min_time=0.3 \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run build/bench/executor_bench --benchmark_filter=OneDnn --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true

echo "== Updates, pool, replay speed"
run build/bench/update_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
run build/bench/pool_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
run build/bench/replay_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

echo "== Replays of the bundled real traces"
g=build/tools/gearbox
run $g trace convert --format azure --view prefill \
  --input data/AzureLLMInferenceTrace_conv.csv --output "$tmp/azure_prefill.csv"
run $g replay --config data/configs/prefill_times.json --trace "$tmp/azure_prefill.csv" \
  --policy static,adaptive,replan --optimum \
  --execute onednn --backend-param hidden=64 --backend-param heads=4 --size-scale 8
run $g trace convert --format lengths --rate 8 \
  --input data/sharegpt_8k_filtered_stats_llama2_tokenizer.csv --output "$tmp/sharegpt.csv"
run $g replay --config data/configs/prefill_times.json --trace "$tmp/sharegpt.csv" \
  --policy static,adaptive,replan --optimum
run $g trace convert --format lengths --rate 8 \
  --input data/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv --output "$tmp/arxiv.csv"
run $g replay --config data/configs/prefill_times.json --trace "$tmp/arxiv.csv" \
  --policy static,adaptive,replan --optimum
run $g trace convert --format azure --view decode \
  --input data/AzureLLMInferenceTrace_conv.csv --output "$tmp/azure_decode.csv"
run $g replay --config data/configs/decode_times.json --trace "$tmp/azure_decode.csv" \
  --policy static,adaptive,replan --optimum
run $g replay --config data/configs/decode_times.json --trace "$tmp/azure_decode.csv" \
  --policy replan --scheme independent,joint,sparse
for graphs in 26 81 88 70; do  # static's, replan independent's, joint's and sparse's graph counts
  run $g plan --trace "$tmp/azure_decode.csv" --joint BATCHSIZE,SEQLEN --graphs $graphs
done
# Without the default graph budget (replan.max_graphs).
/usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["replan"]["max_graphs"] = 65536; json.dump(c, open(sys.argv[2], "w"))' \
  data/configs/decode_times.json "$tmp/decode_unbounded.json"
run $g replay --config "$tmp/decode_unbounded.json" --trace "$tmp/azure_decode.csv" --policy replan
run $g plan --trace "$tmp/azure_prefill.csv" --dim SEQLEN --gears 16 --compare

echo "== gearbox.torch: a PyTorch transformer on the bundled trace, and gearbox.torch's own cost per call"
run env PYTHONPATH=build/python /usr/bin/python3 bench/python/torch_replay.py
run env PYTHONPATH=build/python /usr/bin/python3 bench/python/torch_overhead.py
