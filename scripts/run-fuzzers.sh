#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang-14, ASan + UBSan) and runs each one for
# SECONDS_PER_TARGET seconds (default 10) over a scratch copy of its seed corpus fuzz/corpus/<target>/,
# so the committed corpus is never modified. Prints one line per target and exits non-zero if any
# fuzzer found a crash; crash inputs and logs are kept in build-fuzz/fuzz-findings/.
#
#   scripts/run-fuzzers.sh        # 10 s per target
#   scripts/run-fuzzers.sh 300    # longer run
#   scripts/run-fuzzers.sh 60 fuzz_trace_json fuzz_hf_config   # only these targets
#   FUZZ_JOBS=4 scripts/run-fuzzers.sh   # build with 4 jobs (default 1)
set -euo pipefail

seconds="${1:-10}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET [TARGET...]]  (a positive integer, default 10)" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
findings="$build/fuzz-findings"
# shellcheck source=scripts/fuzz-common.sh
source "$root/scripts/fuzz-common.sh"
fuzz_select_targets "${@:2}"

fuzz_build run-fuzzers "$root" "$build" "${targets[@]}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/foresight-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$findings"

failed=0
summary=()
for t in "${targets[@]}"; do
  corpus="$scratch/$t"
  mkdir -p "$corpus"
  cp -R "$root/fuzz/corpus/$t/." "$corpus/"
  log="$findings/$t.log"
  rm -f "$findings/$t"-crash-* "$findings/$t"-leak-* "$findings/$t"-timeout-* "$findings/$t"-oom-*
  echo "run-fuzzers: $t for ${seconds}s"
  rc=0
  "$build/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/$t-" "$corpus" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  artifacts="$(find "$findings" -maxdepth 1 -name "$t-*" ! -name '*.log' | sort | tr '\n' ' ')"
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '%-20s ok     %12s executions in %ss' "$t" "${execs:-?}" "$seconds")")
  else
    failed=1
    summary+=("$(printf '%-20s FAILED %12s executions (exit %s) input: %s log: %s' \
      "$t" "${execs:-?}" "$rc" "${artifacts:-none}" "$log")")
    grep -m 1 -E 'ERROR: |runtime error:|SUMMARY:' "$log" >&2 || tail -n 20 "$log" >&2
  fi
done

echo
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "run-fuzzers: a fuzzer found a crash; reproduce with build-fuzz/fuzz/<target> <input>" >&2
  exit 1
fi
echo "run-fuzzers: no crashes"
