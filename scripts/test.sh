#!/usr/bin/env bash
# The whole test suite: installs what is missing, then
#  0. clang-format-14: every C++ file formatted (scripts/check-format.sh);
#  1. g++, Release, warnings as errors, each layer linked alone (the layering
#     check), GEARBOX_SHARED (libgearbox.so from the same objects): every test
#     (on the static layers); then the Python tests (pytest, with /usr/bin/python3,
#     the interpreter Debian's python3-* packages belong to) of the extension
#     built with it; then the installed CMake package (the shared library), used
#     by a project outside the tree and by every C++ example of the README
#     (scripts/check-consumer.sh);
#  2. clang-14 with AddressSanitizer + UndefinedBehaviorSanitizer and
#     -Wthread-safety (warnings as errors): every test, then each libFuzzer
#     harness for FUZZ_SECONDS (default 20) from its seed corpus;
#  3. clang-14 with ThreadSanitizer: the concurrency, fault, executor and joint tests
#     (not oneDNN's: its OpenMP runtime is not instrumented).
# The sanitizer builds use -O1 with line tables only: full stack traces at
# about half the compile time of -O2 -g.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fuzz_seconds=${FUZZ_SECONDS:-20}
start=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - start )) s)"; }

stage "clang-format"
scripts/check-format.sh

stage "g++: build and test"
scripts/build.sh -DGEARBOX_SHARED=ON
ctest --test-dir build --output-on-failure -j "$jobs"

stage "pytest: the Python bindings and gearbox.torch"
PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q python/tests

stage "installed package: consumer project and README examples"
scripts/check-consumer.sh

stage "clang-14: ASan + UBSan + thread-safety analysis"
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only")
CXX=clang++-14 cmake -S . -B build-asan -G Ninja "${sanitizer_flags[@]}" \
  -DGEARBOX_WERROR=ON -DGEARBOX_SANITIZE=address,undefined -DGEARBOX_FUZZ=ON \
  -DGEARBOX_BUILD_BENCHMARKS=OFF -DGEARBOX_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1" \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

stage "libFuzzer: ${fuzz_seconds} s per harness"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for harness in config trace plan pool runtime cli fleet; do
  mkdir -p "$work/$harness"
  cp fuzz/corpus/$harness/* "$work/$harness/"
  (cd "$work" && ASAN_OPTIONS="detect_leaks=1" "$OLDPWD/build-asan/fuzz/${harness}_fuzz" \
     "$work/$harness" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$work/" -print_final_stats=1 \
     2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY" || true)
  if ls "$work"/crash-* "$work"/oom-* "$work"/timeout-* "$work"/leak-* >/dev/null 2>&1; then
    echo "fuzzer $harness found a failing input:"; ls "$work"/crash-* "$work"/oom-* "$work"/timeout-* "$work"/leak-* 2>/dev/null
    exit 1
  fi
  echo "  $harness: clean"
done

stage "clang-14: ThreadSanitizer"
CXX=clang++-14 cmake -S . -B build-tsan -G Ninja "${sanitizer_flags[@]}" \
  -DGEARBOX_WERROR=ON -DGEARBOX_SANITIZE=thread -DGEARBOX_BUILD_BENCHMARKS=OFF \
  -DGEARBOX_BUILD_TOOLS=OFF -DGEARBOX_BUILD_PYTHON=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target stress_test snapshot_store_test worker_test \
  pool_test runtime_test fault_injection_test executor_test joint_test fleet_stats_test
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$jobs" \
  -R '^(Policies/Stress|SnapshotStore|Worker|Pool|Runtime|EventLog|Faults|All/ProbeFaults|ProbeAboveOne|Executor|Joint|FleetStatsThreadsTest)\.'
stage "all tests passed"
