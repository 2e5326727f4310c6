#!/usr/bin/env bash
# Regenerates docs/screenshots: every GUI view of the built-in example, rendered off-screen at
# 1200x800 by the current build, and docs/screenshots/SOURCES.sha256, the hash of the GUI sources
# they were rendered from. `--check` only recomputes the hash and fails when the screenshots are
# older than the sources (ctest runs it, so a change to a view comes with its new picture).
#
#   scripts/gui-screenshots.sh [path/to/foresight-gui]   (default build/gui/foresight-gui)
#   scripts/gui-screenshots.sh --check
set -euo pipefail
cd "$(dirname "$0")/.."

views=(setup details search timeline compare sweep topology)
out=docs/screenshots
stamp=$out/SOURCES.sha256

# One hash over the contents and paths of every source under gui/ (sorted, so the same on every
# machine and checkout).
sources_hash() {
  find gui -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.in' -o -name 'CMakeLists.txt' \) -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

if [[ "${1:-}" == "--check" ]]; then
  want=$(sources_hash)
  have=$(cut -d' ' -f1 "$stamp" 2>/dev/null || true)
  if [[ "$want" != "$have" ]]; then
    echo "gui-screenshots: $out was rendered from other GUI sources (hash ${have:-none}, sources $want):" >&2
    echo "  run scripts/gui-screenshots.sh and commit docs/screenshots" >&2
    exit 1
  fi
  echo "gui-screenshots: $out matches the GUI sources ($want)"
  exit 0
fi

bin=${1:-build/gui/foresight-gui}
if [[ ! -x "$bin" ]]; then
  echo "gui-screenshots: $bin is not an executable (build the foresight-gui target first)" >&2
  exit 2
fi
mkdir -p "$out"
for v in "${views[@]}"; do
  QT_QPA_PLATFORM=offscreen "$bin" --screenshot "$out/$v.png" --view "$v" --size 1200x800 2>/dev/null
  echo "gui-screenshots: wrote $out/$v.png"
done
echo "$(sources_hash)  gui/ (scripts/gui-screenshots.sh)" >"$stamp"
echo "gui-screenshots: wrote $stamp"
