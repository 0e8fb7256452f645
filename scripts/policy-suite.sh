#!/usr/bin/env bash
# The policy suite (docs/POLICY.md, "The policy suite"): replays every
# synthetic scenario (`gearbox trace synth --list`, prefill and decode views)
# and every real trace in data/ with every policy (static, adaptive, replan;
# on decode views also replan's joint and sparse schemes), and prints one
# table: padding waste, the offline optimum at the same live-graph count, their
# ratio, (prefill) that count planned on the other half of the trace and the
# ratio to it, compiles per hour per live graph, churn, then the worst and the
# median per policy over the suite; plus the leave-one-out choice of each
# replan parameter on a grid. Writes the same figures as JSON (--output,
# default out/policy-suite.json).
#
#   scripts/policy-suite.sh [--quick] [--seeds S1,S2,...] [--configs DIR] [--long-configs DIR]
#                           [--output FILE] [--jobs N] [--keep DIR]
#
# --quick: a subset of the scenarios, each cut to 30 minutes, decode views of
# four of them, 3-value grids (about a minute on 2 cores);
# otherwise every scenario at its own length (with the grids, 15 to 20 minutes a
# seed on 2 cores).
# --seeds: the scenarios drawn with each of these seeds (default 1; the
# policy was developed on seed 1, so other seeds are draws it has not seen);
# a scenario of seed S other than 1 is named SCENARIO-sS in the tables.
# --configs: the replay configs, DIR/prefill_times.json and DIR/decode_times.json
# (default data/configs): your model's gear ladders, budget and cost model.
# --long-configs: the same for the long-context scenarios (long-*: prompts up
# to 131072 tokens), default data/configs/long-context (SEQLEN 1..131072).
# BUILD_DIR (default build) holds the gearbox tool; it is built when missing
# or out of date. OMP_NUM_THREADS defaults to 1.
set -euo pipefail
caller_dir=$PWD
cd "$(dirname "$0")/.."

QUICK=0
OUTPUT=out/policy-suite.json
JOBS=2
KEEP=""
SEEDS=1
CONFIGS=""
LONG_CONFIGS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --output) OUTPUT="$2"; [[ $OUTPUT == /* ]] || OUTPUT="$caller_dir/$OUTPUT"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --keep) KEEP="$2"; [[ $KEEP == /* ]] || KEEP="$caller_dir/$KEEP"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --configs) CONFIGS="$2"; shift 2 ;;
    --long-configs) LONG_CONFIGS="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "policy-suite.sh: unknown argument \"$1\"; --quick, --seeds S1,S2,..., --configs DIR, --long-configs DIR, --output FILE, --jobs N, --keep DIR" >&2
       exit 2 ;;
  esac
done

if [[ ! $SEEDS =~ ^[0-9]{1,18}(,[0-9]{1,18})*$ ]]; then
  echo "policy-suite.sh: --seeds \"$SEEDS\": expected seeds (integers of at most 18 digits) separated by commas, e.g. 1,2,3" >&2
  exit 2
fi
# Each seed once, as a number (01 is seed 1: the same draw, the same name).
seed_list=""
for seed in ${SEEDS//,/ }; do
  seed=$((10#$seed))
  [[ " $seed_list " == *" $seed "* ]] || seed_list="$seed_list $seed"
done
SEEDS=${seed_list# }

# A relative --configs (like --output and --keep) is the caller's; the
# defaults are the repository's.
if [[ -z $CONFIGS ]]; then
  CONFIGS=data/configs
elif [[ $CONFIGS != /* ]]; then
  CONFIGS="$caller_dir/$CONFIGS"
fi
if [[ -z $LONG_CONFIGS ]]; then
  LONG_CONFIGS=data/configs/long-context
elif [[ $LONG_CONFIGS != /* ]]; then
  LONG_CONFIGS="$caller_dir/$LONG_CONFIGS"
fi
for flag in --configs --long-configs; do
  dir=$CONFIGS
  [[ $flag == --long-configs ]] && dir=$LONG_CONFIGS
  for view in prefill decode; do
    if [[ ! -r "$dir/${view}_times.json" ]]; then
      echo "policy-suite.sh: $flag \"$dir\": no readable ${view}_times.json there; expected a directory holding prefill_times.json and decode_times.json (as data/configs does)" >&2
      exit 2
    fi
  done
done
CONFIGS="$(cd "$CONFIGS" && pwd)"
LONG_CONFIGS="$(cd "$LONG_CONFIGS" && pwd)"

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" && ! -f "$BUILD_DIR/Makefile" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_WITH_CUDA=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$JOBS" --target gearbox_cli >/dev/null
GEARBOX="$(cd "$BUILD_DIR" && pwd)/tools/gearbox"
PY=/usr/bin/python3
HELPER="$(pwd)/scripts/policy_suite.py"

if [[ -n "$KEEP" ]]; then
  mkdir -p "$KEEP"
  WORK="$(cd "$KEEP" && pwd)"
else
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
fi

# Scenarios, views and lengths.
QUICK_SCENARIOS="poisson-azure poisson-mix low-rate diurnal step-chat-to-docs drift-up burst-long tenants-shift long-mix"
QUICK_DECODE="poisson-azure step-chat-to-docs burst-long long-mix"
if [[ $QUICK == 1 ]]; then
  SCENARIOS=$QUICK_SCENARIOS
  DECODE=$QUICK_DECODE
  HOURS="--hours 0.5"
  GRIDS="min_gear_lifetime_seconds=600,2400,7200 drift_agreement=0.5,0.8,1 idle_graph_release_seconds=0,600,3600 drift_lead_seconds=0,300,900 gain_confidence_sigmas=0,1,2 regime_seconds=0,900,1800 cold_start_review_seconds=0,600,1200 tail_ratio=1.5,2,3"
else
  SCENARIOS=$("$GEARBOX" trace synth --list | awk '{print $1}')
  # Decode views: every scenario of at most an hour at a served rate (the
  # high-rate one saturates any batch; 24 h decode views are 4 million steps
  # each, see docs/POLICY.md).
  DECODE=$(echo "$SCENARIOS" | grep -v -e '24h$' -e '^high-rate$' | tr '\n' ' ')
  HOURS=""
  GRIDS="min_gear_lifetime_seconds=600,1200,2400,3600,7200 drift_agreement=0.5,0.7,0.8,0.9,1 idle_graph_release_seconds=0,300,600,1200,1800,3600 drift_lead_seconds=0,300,600,900,1800,3600 gain_confidence_sigmas=0,0.5,1,2 regime_seconds=0,600,900,1200,1800 cold_start_review_seconds=0,600,900,1200 tail_ratio=1.25,1.5,2,3"
fi

# One job: make the trace, replay it, (decode) plan the offline optimum at
# each run's graph count, and replan at each value of each grid.
job() {
  set -euo pipefail
  local scenario=$1 kind=$2 view=$3 seed=${4:-1}
  local name=$scenario
  [[ $seed == 1 ]] || name="$scenario-s$seed"
  local trace="$WORK/$name.$view.csv" base="$WORK/$name.$view"
  if [[ $kind == real ]]; then
    "$GEARBOX" trace convert --format azure --view "$view" \
      --input data/AzureLLMInferenceTrace_conv.csv --output "$trace" 2>/dev/null
  else
    # shellcheck disable=SC2086
    "$GEARBOX" trace synth --scenario "$scenario" --seed "$seed" $HOURS --view "$view" --output "$trace" 2>/dev/null
  fi
  # A stationary scenario carries the flapping target (gearbox trace synth --list).
  if [[ $kind == scenario && " $STATIONARY " == *" $scenario "* ]]; then
    echo "scenario stationary" >"$WORK/$name.kind"
  else
    echo "$kind" >"$WORK/$name.kind"
  fi
  # The long-context scenarios' prompts reach 131072 tokens: their ladders too.
  local config=$CONFIGS/${view}_times.json
  [[ $scenario == long-* ]] && config=$LONG_CONFIGS/${view}_times.json
  "$GEARBOX" replay --config "$config" --trace "$trace" --policy static,adaptive,replan \
    --optimum --max-reject-ratio 1 --summary "$base.main.json" >"$base.main.txt" 2>&1
  if [[ $view == decode ]]; then
    "$GEARBOX" replay --config "$config" --trace "$trace" --policy replan --scheme joint,sparse \
      --max-reject-ratio 1 --summary "$base.schemes.json" >"$base.schemes.txt" 2>&1
    for g in $($PY "$HELPER" graphs "$base.main.json" "$base.schemes.json"); do
      "$GEARBOX" plan --trace "$trace" --joint BATCHSIZE,SEQLEN --graphs "$g" \
        --scheme independent --json \
        >"$base.plan-$g.json"
    done
  fi
  # Each grid value: replan with it (prefill: with the optimum, for the
  # ratio; decode: its churn alone, and the sparse scheme's uncompiled steps,
  # which the leave-one-out also counts, unless the decode config sets the
  # key itself: then the default is not what the decode view runs, or the
  # key acts on gear sets of one dimension only: then every value replays
  # the decode view as the default does).
  local grid key v optimum=--optimum
  [[ $view == decode ]] && optimum=""
  for grid in $GRIDS; do
    key=${grid%%=*}
    if [[ $view == decode ]] && [[ " $ONE_DIMENSION_KEYS " == *" $key "* ]]; then continue; fi
    if [[ $view == decode ]] && $PY "$HELPER" sets "$config" "$key"; then continue; fi
    for v in $(echo "${grid#*=}" | tr ',' ' '); do
      $PY "$HELPER" config "$config" "$key" "$v" "$WORK/grid-$key-$v.$name.$view.json"
      # shellcheck disable=SC2086
      "$GEARBOX" replay --config "$WORK/grid-$key-$v.$name.$view.json" --trace "$trace" \
        --policy replan $optimum --max-reject-ratio 1 \
        --summary "$base.grid-$key-$v.json" >/dev/null 2>&1
      if [[ $view == decode ]]; then
        "$GEARBOX" replay --config "$WORK/grid-$key-$v.$name.$view.json" --trace "$trace" \
          --policy replan --scheme sparse --max-reject-ratio 1 \
          --summary "$base.sparse.grid-$key-$v.json" >/dev/null 2>&1
      fi
    done
  done
  rm -f "$trace"
  echo "  done $name ($view)" >&2
}
export -f job
STATIONARY=$("$GEARBOX" trace synth --list | awk '$2 == "stationary" {print $1}' | tr '\n' ' ')
# Grid keys that act on gear sets of one dimension only (the regime, and
# the cold-start review on it): not replayed on the decode views.
ONE_DIMENSION_KEYS="regime_seconds cold_start_review_seconds"
export WORK GEARBOX PY HELPER HOURS GRIDS CONFIGS LONG_CONFIGS STATIONARY ONE_DIMENSION_KEYS

if ! {
  echo "azure-conv real prefill"
  echo "azure-conv real decode"
  for seed in $SEEDS; do
    for s in $SCENARIOS; do echo "$s scenario prefill $seed"; done
    for s in $DECODE; do echo "$s scenario decode $seed"; done
  done
} | xargs -P "$JOBS" -L 1 bash -c 'job "$@"' _; then
  echo "policy-suite.sh: a replay failed (the traces marked done above succeeded); rerun with --keep DIR and read DIR/*.txt" >&2
  exit 1
fi

mkdir -p "$(dirname "$OUTPUT")"
grid_args=()
for grid in $GRIDS; do grid_args+=(--grid "$grid"); done
"$PY" "$HELPER" aggregate "$WORK" "$OUTPUT" "${grid_args[@]}"
echo "wrote $OUTPUT" >&2
