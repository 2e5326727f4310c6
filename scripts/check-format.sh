#!/usr/bin/env bash
# Checks that every tracked C++ and CUDA source is formatted as .clang-format says (clang-format-14,
# the version Debian 12 ships). Prints the files that differ and exits 1 if any does.
#
#   scripts/check-format.sh          # check
#   scripts/check-format.sh --fix    # reformat them in place
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fmt="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$fmt" >/dev/null; then
  echo "check-format: $fmt not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted (scripts/check-format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
