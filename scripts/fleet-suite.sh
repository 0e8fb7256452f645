#!/usr/bin/env bash
# The fleet suite (docs/FLEET.md, "The fleet suite"): replays the bundled
# Azure hour and eight one-hour synthetic scenarios (prefill view) with one
# runtime, and with N replicas sharing one plan and the artifacts
# (--replicas N --fleet-plan --share-artifacts) for N = 4 and 16: on the
# whole trace, with the last replica joining at the middle of the trace, and
# with the store down for the middle third. Prints one Markdown table: per
# scenario and N, the compiles and the waste (fleet and worst replica) against
# one runtime's, the joiner's updates before it reached the others' waste,
# and the requests lost (routed to no replica or rejected beyond one
# runtime's rejections) in the outage run.
#
#   scripts/fleet-suite.sh [--quick] [--scenarios "A B ..."] [--hours H]
#                          [--replicas "4 16"] [--jobs N] [--keep DIR]
#
# --quick: the bundled hour and three scenarios of 30 minutes (about 7 s on
# 2 cores); otherwise about 25 s. --scenarios: synthetic
# scenarios (`gearbox trace synth --list`) and/or azure-conv (the bundled
# trace). --hours: the synthetic traces' length (default the scenario's).
# GEARBOX: the tool (default: BUILD_DIR/tools/gearbox, built when missing or
# out of date; BUILD_DIR defaults to build). OMP_NUM_THREADS defaults to 1.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
SCENARIOS=""
HOURS=""
REPLICAS="4 16"
JOBS=2
KEEP=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --scenarios) SCENARIOS="$2"; shift 2 ;;
    --hours) HOURS="$2"; shift 2 ;;
    --replicas) REPLICAS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "fleet-suite.sh: unknown argument \"$1\"; --quick, --scenarios LIST, --hours H," \
         "--replicas LIST, --jobs N, --keep DIR" >&2
       exit 2 ;;
  esac
done
for n in $REPLICAS; do
  if ! [[ $n =~ ^[0-9]+$ ]] || (( n < 2 || n > 256 )); then
    echo "fleet-suite.sh: --replicas \"$REPLICAS\": $n is not allowed; integers in [2, 256]" >&2
    exit 2
  fi
done
if ! [[ $JOBS =~ ^[0-9]+$ ]] || (( JOBS < 1 )); then
  echo "fleet-suite.sh: --jobs $JOBS is not allowed; an integer >= 1" >&2
  exit 2
fi

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [[ -z ${GEARBOX:-} ]]; then
  BUILD_DIR=${BUILD_DIR:-build}
  if [[ ! -f "$BUILD_DIR/build.ninja" && ! -f "$BUILD_DIR/Makefile" ]]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_WITH_CUDA=OFF >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j"$JOBS" --target gearbox_cli >/dev/null
  GEARBOX="$(cd "$BUILD_DIR" && pwd)/tools/gearbox"
fi
PY=/usr/bin/python3
HELPER="$(pwd)/scripts/fleet_suite.py"

if [[ -z $SCENARIOS ]]; then
  if [[ $QUICK == 1 ]]; then
    SCENARIOS="azure-conv poisson-azure burst-long tenants-shift"
    [[ -n $HOURS ]] || HOURS=0.5
  else
    SCENARIOS="azure-conv poisson-azure poisson-mix low-rate diurnal step-chat-to-docs drift-up"
    SCENARIOS+=" burst-long tenants-shift"
  fi
fi

if [[ -n "$KEEP" ]]; then
  mkdir -p "$KEEP"
  WORK="$(cd "$KEEP" && pwd)"
else
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
fi

# One job: make the trace; one runtime; per N the fleet on the whole trace,
# with a joiner at the middle, with the store down for the middle third.
job() {
  set -euo pipefail
  local name=$1
  local trace="$WORK/$name.csv" config=data/configs/prefill_times.json log="$WORK/$name.log"
  if [[ $name == azure-conv ]]; then
    "$GEARBOX" trace convert --format azure --view prefill \
      --input data/AzureLLMInferenceTrace_conv.csv --output "$trace" >/dev/null 2>>"$log"
  else
    local hours=()
    [[ -z $HOURS ]] || hours=(--hours "$HOURS")
    "$GEARBOX" trace synth --scenario "$name" --seed 1 "${hours[@]}" --view prefill \
      --output "$trace" >/dev/null 2>>"$log"
  fi
  "$PY" "$HELPER" span "$trace" >"$WORK/$name.span.json"
  local join outage
  join=$("$PY" "$HELPER" at "$WORK/$name.span.json" join)
  outage=$("$PY" "$HELPER" at "$WORK/$name.span.json" outage)
  "$GEARBOX" replay --config "$config" --trace "$trace" --max-reject-ratio 1 \
    --summary "$WORK/$name.single.json" >/dev/null 2>>"$log"
  local n
  for n in $REPLICAS; do
    local fleet=(replay --config "$config" --trace "$trace" --replicas "$n" --fleet-plan
                 --share-artifacts)
    "$GEARBOX" "${fleet[@]}" --summary "$WORK/$name.n$n.whole.json" >/dev/null 2>>"$log"
    "$GEARBOX" "${fleet[@]}" --join-at "$join" --summary "$WORK/$name.n$n.join.json" \
      >/dev/null 2>>"$log"
    "$GEARBOX" "${fleet[@]}" --store-outage "$outage" --summary "$WORK/$name.n$n.outage.json" \
      >/dev/null 2>>"$log"
  done
  rm -f "$trace"
  echo "  done $name" >&2
}
export -f job
export WORK GEARBOX PY HELPER HOURS REPLICAS

if ! for s in $SCENARIOS; do echo "$s"; done | xargs -P "$JOBS" -L 1 bash -c 'job "$@"' _; then
  echo "fleet-suite.sh: a run failed; its messages:" >&2
  cat "$WORK"/*.log >&2 || true
  exit 1
fi

"$PY" "$HELPER" table "$WORK" --scenarios "$SCENARIOS" --replicas "$REPLICAS"
