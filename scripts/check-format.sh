#!/usr/bin/env bash
# Fails when a tracked C++ file differs from clang-format-14's output (.clang-format).
# To fix: git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
else  # a copy without git: the same folders
  mapfile -t files < <(find bench examples fuzz include src tests tools -type f \
                         \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) | sort)
fi
clang-format-14 --dry-run -Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
