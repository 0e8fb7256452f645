#!/usr/bin/env bash
# Fails when a tracked C++ file differs from clang-format-14's output (.clang-format).
# To fix: git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
clang-format-14 --dry-run -Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
