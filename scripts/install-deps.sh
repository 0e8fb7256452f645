#!/usr/bin/env bash
# Installs what gearbox needs from Debian 12's packages, skipping what is
# already there. Runs as root, or through sudo when not root.
#   --without-python: only what the C++ library, tools and tests need (the
#   main job); the Python extension and its tests need the rest.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang-14 libclang-rt-14-dev clang-format-14
  libgtest-dev libgmock-dev libbenchmark-dev
  libabsl-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libdlpack-dev gnuplot-nox
  redis-server libhiredis-dev
)
case "${1:-}" in
  --without-python) ;;
  "") packages+=(python3-dev python3-pybind11 python3-numpy python3-pytest python3-torch) ;;
  *) echo "install-deps: \"$1\" is not allowed; no argument, or --without-python" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo for: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
