#!/usr/bin/env bash
# The whole test suite: installs what is missing, then
#  1. builds with g++ (warnings as errors) and runs every test;
#  2. builds with clang-14 and -Wthread-safety (warnings as errors);
#  3. builds the tests with ThreadSanitizer and runs the concurrency tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

echo "== g++: build and test"
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== clang-14: thread-safety analysis"
CXX=clang++-14 cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGEARBOX_WERROR=ON >/dev/null
cmake --build build-clang -j "$jobs"

echo "== clang-14: ThreadSanitizer"
CXX=clang++-14 cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGEARBOX_WERROR=ON -DGEARBOX_SANITIZE=thread -DGEARBOX_BUILD_BENCHMARKS=OFF \
  -DGEARBOX_BUILD_TOOLS=OFF >/dev/null
cmake --build build-tsan -j "$jobs"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" \
  -R 'Stress|SnapshotStore|Worker|Pool|Runtime'
echo "== all tests passed"
