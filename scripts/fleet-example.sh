#!/usr/bin/env bash
# A fleet of real processes against one Redis (docs/FLEET.md, "A fleet of
# processes"): starts a private redis-server on a free port of 127.0.0.1 in
# a temporary directory (no persistence), runs N `gearbox replay` processes
# at once, each simulating one replica's share of the trace
# (--replicas N --replica-index I) against that server with one fleet id,
# prints each process's summary and the fleet's totals, stops the server.
#
#   scripts/fleet-example.sh CONFIG TRACE [N] [--kill-store-at S [--store-down D]]
#                            [more gearbox replay flags...]
#
# --kill-store-at S: S wall seconds after the processes start, the server is
# killed (SIGKILL) and restarted D seconds later (default 1) on the same port,
# empty (no persistence); pace the processes (e.g. --pace 600: the hour in
# 6 s) so that it falls mid-run. The totals then say how many store calls
# failed and whether the processes ended on one gear set.
#
# With --fleet-plan the processes share one plan: the leader's lease (in
# Redis) decides which one plans, the others adopt its versions.
#
# Environment: GEARBOX (the tool; default build/tools/gearbox),
# GEARBOX_REDIS_SERVER (the server binary; default: redis-server on PATH).
# Exit 77 (skipped) when redis-server is missing; otherwise the first failing
# process's exit code, or 0.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 CONFIG TRACE [N] [gearbox replay flags...]" >&2
  exit 2
fi
config=$1
trace=$2
shift 2
n=3
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  n=$1
  shift
fi
kill_at=""
down=1
rest=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kill-store-at) kill_at=${2:-}; shift 2 || { echo "$0: --kill-store-at needs seconds" >&2; exit 2; } ;;
    --store-down) down=${2:-}; shift 2 || { echo "$0: --store-down needs seconds" >&2; exit 2; } ;;
    *) rest+=("$1"); shift ;;
  esac
done
number='^[0-9]+([.][0-9]+)?$'
if [[ -n $kill_at && ! $kill_at =~ $number ]]; then
  echo "$0: --kill-store-at \"$kill_at\" is not allowed; seconds (a number >= 0)" >&2
  exit 2
fi
if [[ ! $down =~ $number ]]; then
  echo "$0: --store-down \"$down\" is not allowed; seconds (a number >= 0)" >&2
  exit 2
fi
set -- ${rest[@]+"${rest[@]}"}
if (( n < 1 || n > 64 )); then
  echo "$0: N = $n is not allowed; 1..64 processes" >&2
  exit 2
fi
tool=${GEARBOX:-build/tools/gearbox}
server=${GEARBOX_REDIS_SERVER:-$(command -v redis-server || true)}
if [[ -z $server || ! -x $server ]]; then
  echo "skipped: redis-server not found (PATH or \$GEARBOX_REDIS_SERVER)"
  exit 77
fi
if [[ ! -x $tool ]]; then
  echo "$0: the gearbox tool \"$tool\" is not executable (set GEARBOX)" >&2
  exit 2
fi

dir=$(mktemp -d /tmp/gearbox-fleet-XXXXXX)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# A free port: the kernel's choice for a socket bound to port 0; retried if
# someone else takes it before the server does.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Starts the server on $port (sets server_pid, started=1 once it accepts).
start_server() {
  started=0
  "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize no --logfile "$dir/redis.log" &
  server_pid=$!
  for _ in $(seq 1 500); do  # readiness: up to ~10 s
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      started=1
      break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.02
  done
}
started=0
for attempt in 1 2 3 4 5; do
  port=$(free_port)
  start_server
  if (( started )); then break; fi
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
done
if (( ! started )); then
  echo "$0: redis-server did not start (log: $dir/redis.log)" >&2
  cat "$dir/redis.log" >&2 || true
  exit 1
fi

fleet_id="fleet-example-$$-$(date +%s%N)"
echo "redis-server on 127.0.0.1:$port; $n processes, fleet id $fleet_id"
pids=()
for (( i = 0; i < n; ++i )); do
  "$tool" replay --config "$config" --trace "$trace" --replicas "$n" --replica-index "$i" \
    --store "redis://127.0.0.1:$port" --fleet-id "$fleet_id" --share-artifacts \
    --summary "$dir/replica-$i.json" "$@" >"$dir/replica-$i.txt" 2>&1 &
  pids+=($!)
done
if [[ -n $kill_at ]]; then
  sleep "$kill_at"
  running=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=$((running + 1)); done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  echo "redis-server killed after ${kill_at} s ($running of $n processes running)"
  sleep "$down"
  start_server
  if (( ! started )); then
    echo "$0: redis-server did not restart on port $port (log: $dir/redis.log)" >&2
    exit 1
  fi
  running=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=$((running + 1)); done
  echo "redis-server restarted after ${down} s down, empty ($running of $n processes running)"
fi
rc=0
for (( i = 0; i < n; ++i )); do
  code=0
  wait "${pids[$i]}" || code=$?
  if (( rc == 0 && code != 0 )); then rc=$code; fi
done
for (( i = 0; i < n; ++i )); do
  echo "--- process $i (replica $i of $n)"
  cat "$dir/replica-$i.txt"
done
if (( rc != 0 )); then
  echo "$0: a process failed (exit $rc)" >&2
  exit "$rc"
fi
python3 - "$dir" "$n" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
req = compiles = loads = published = adopted = notified = failures = 0
plan = False
gear_sets = set()
versions = []
for i in range(n):
    runs = json.load(open(f"{d}/replica-{i}.json"))
    plan |= runs[0]["fleet_plan"]
    failures += runs[0]["store_traffic"]["failures"]
    for x in runs[0]["per_replica"]:
        gear_sets.add(json.dumps(x["final_gears"], sort_keys=True))
        versions.append(str(x["plan_version"]))
        req += x["requests"]
        compiles += x["compiles"]
        loads += x["artifact_loads"]
        published += x["plan_publications"]
        adopted += x["plan_adoptions"]
        notified += x["plan_notified_adoptions"]
line = f"fleet of {n} processes: {req} requests, {compiles} compiles, {loads} artifact loads"
if plan:
    line += (f"; one plan: {published} versions published, {adopted} adoptions"
             f" ({notified} on an announcement)")
print(line)
tail = f"; plan version at each one's last step: {' '.join(versions)}" if plan else ""
print(f"store calls failed: {failures}; final gear sets: {len(gear_sets)} distinct{tail}")
PY
