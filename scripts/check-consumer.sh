#!/usr/bin/env bash
# Installs the library from $BUILD_DIR (default build/) into a temporary prefix
# and builds, outside the source tree and against that package only:
#  - examples/consumer (find_package(gearbox CONFIG)), then runs it;
#  - every ```cpp block of README.md, each a whole program, then runs each.
# A build configured with -DGEARBOX_SHARED=ON (scripts/test.sh's) installs
# libgearbox.so: each program must then load it (checked with ldd); otherwise
# the static layers.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
variant=static
if grep -q '^GEARBOX_SHARED:BOOL=ON$' "$build_dir/CMakeCache.txt"; then variant=shared; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
mkdir -p "$work/readme"
awk -v dir="$work/readme" '
  /^```cpp$/ { n++; file = sprintf("%s/readme_example_%d.cc", dir, n); inblock = 1; next }
  /^```/ && inblock { inblock = 0; close(file); next }
  inblock { print > file }' README.md
cmake -S examples/consumer -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DGEARBOX_README_EXAMPLES="$work/readme" >/dev/null
cmake --build "$work/build" -j "$(nproc 2>/dev/null || echo 2)"
check_linkage() {
  # grep reads all of ldd's output (-q would stop early: SIGPIPE under pipefail).
  if [[ $variant == shared ]] && ! ldd "$1" | grep "$work/prefix/.*/libgearbox\.so" >/dev/null; then
    echo "$1: not linked against the installed libgearbox.so" >&2
    exit 1
  fi
}
check_linkage "$work/build/gearbox_consumer"
"$work/build/gearbox_consumer"
for example in "$work"/readme/*.cc; do
  name=$(basename "$example" .cc)
  echo "== README example: $name"
  check_linkage "$work/build/$name"
  "$work/build/$name"
done
echo "consumer project and $(ls "$work"/readme/*.cc | wc -l) README examples: built and ran against the installed $variant package"
