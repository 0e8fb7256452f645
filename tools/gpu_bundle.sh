#!/usr/bin/env bash
# Packs the CUDA Graph backend's tests, its benchmark and the gearbox tool,
# built here (the CUDA toolkit at /usr/local/cuda, no GPU needed), with every
# shared library they load that is not the C library's, into one folder
# (default .gpu/, which git ignores) that runs on a GPU machine lacking
# Debian's development packages: tools/gpu_check.sh --bundle DIR runs it there.
# With PYTHON_INCLUDE and PYBIND11_INCLUDE set (the GPU machine's Python
# headers, its pyconfig.h's folder too, and a pybind11's), it also builds the
# extension gearbox._gearbox for that Python into DIR/python/gearbox with the
# package's Python files: PYTHONPATH=DIR/python there. Run that Python with
# DIR/lib on LD_LIBRARY_PATH less libstdc++, libgcc_s and libgomp (its own
# torch needs the machine's newer ones).
#   [PYTHON_INCLUDE="A B" PYBIND11_INCLUDE=C] tools/gpu_bundle.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath -m "${1:-.gpu}")
case "$dir" in  # emptied below: never the repository, its parents or /
  / | "$PWD" | "$PWD"/.. | "$(dirname "$PWD")" | "$HOME")
    echo "gpu_bundle: DIR \"$dir\" is not allowed; a folder of its own (default .gpu)" >&2
    exit 2 ;;
esac
build=${BUILD_DIR:-build}
targets=(cuda_graph_test device_arena_test executor_test cuda_graph_bench gearbox)
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null ||
  { echo "gpu_bundle: no CUDA compiler (/usr/local/cuda/bin/nvcc); nothing to bundle" >&2; exit 2; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEARBOX_WERROR=ON \
  -DGEARBOX_WITH_CUDA=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
bins=("$build/tests/cuda_graph_test" "$build/tests/device_arena_test"
      "$build/tests/executor_test" "$build/bench/cuda_graph_bench" "$build/tools/gearbox")
cp "${bins[@]}" "$dir/bin/"
# The libraries the binaries load, less the C library and the dynamic loader,
# which the GPU machine has in a version at least as new (its CUDA driver
# library, libcuda, is the machine's own and is never bundled).
ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
if [ -n "${PYTHON_INCLUDE:-}" ]; then
  : "${PYBIND11_INCLUDE:?PYTHON_INCLUDE needs PYBIND11_INCLUDE too}"
  cmake --build "$build" -j "$(nproc)" --target _gearbox  # the layers it links, built
  mkdir -p "$dir/python/gearbox" "$dir/obj"
  includes=()
  for i in $PYTHON_INCLUDE $PYBIND11_INCLUDE; do includes+=(-isystem "$i"); done
  for f in python/src/*.cc; do
    c++ -DFMT_SHARED -Ipython/src -Iinclude "${includes[@]}" -O2 -DNDEBUG -fPIC \
      -fvisibility=hidden -fvisibility-inlines-hidden -std=c++20 -Wall -Wextra -Werror \
      -c "$f" -o "$dir/obj/$(basename "$f" .cc).o"
  done
  # The libraries the build tree's extension links, in its order.
  libs=$(grep -A3 '^build python/gearbox/_gearbox' "$build/build.ninja" |
         sed -n 's/^ *LINK_LIBRARIES = //p')
  (cd "$build" && c++ -shared -o "$dir/python/gearbox/_gearbox.so" "$dir"/obj/*.o $libs)
  rm -rf "$dir/obj"
  cp python/gearbox/*.py python/gearbox/*.pyi python/gearbox/py.typed "$dir/python/gearbox/"
fi
echo "gpu_bundle: $(ls "$dir/bin" | wc -l) programs, $(ls "$dir/lib" | wc -l) libraries," \
  "$(du -sh "$dir" | cut -f1) in $dir"
