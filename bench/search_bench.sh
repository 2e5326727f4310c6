#!/usr/bin/env bash
# Plan search benchmark: Llama 3 405B on 16,384 H100s, the default search space (>= 100,000
# candidate plans), the discrete-event simulator re-ranking the best 50. Prints the search's own
# summary line and whole-process wall time and peak memory.
# Usage: bench/search_bench.sh [path/to/foresight]   (default build/app/foresight)
set -euo pipefail
bin=${1:-build/app/foresight}
/usr/bin/time -f "wall %e s, peak %M KiB" "$bin" search --model llama3-405b --cluster dgx-h100-ndr \
  --gpus 16384 --gb 2048 --resimulate 50 --top 3 2>&1 | grep -E "candidate|wall|^ +1 "
