#!/usr/bin/env bash
# Runs every libFuzzer target for a fixed number of executions (libFuzzer's -runs=N), one after
# the other, each over a scratch copy of its seed corpus fuzz/corpus/<target>/ (the committed
# corpus is never modified), and writes a dated Markdown table to docs/fuzzing.md: per target the
# executions, seconds, executions per second and findings (crash, leak, timeout or OOM inputs).
# Prints "N passed, M failed" at the end and exits 1 if any target found something.
#
#   bench/fuzz_executions.sh                      # 10,000,000 executions per target
#   bench/fuzz_executions.sh -n 200000            # fewer
#   bench/fuzz_executions.sh -n 10000000 -t 3600  # and stop a target after an hour whatever its count
#   bench/fuzz_executions.sh -n 200000 fuzz_units fuzz_checkpoint   # only these targets
#   FUZZ_JOBS=2 bench/fuzz_executions.sh          # build with 2 jobs (default 1)
#
# The targets are built as scripts/run-fuzzers.sh builds them (build-fuzz/, clang-14, ASan + UBSan).
# Crash inputs and logs stay in build-fuzz/fuzz-findings/executions/.
set -euo pipefail

usage() {
  echo "usage: $0 [-n EXECUTIONS] [-t MAX_SECONDS_PER_TARGET] [-o MARKDOWN] [TARGET...]" >&2
  echo "  -n  executions per target (default 10000000)" >&2
  echo "  -t  safety cap: libFuzzer's -max_total_time per target (default 0: none)" >&2
  echo "  -o  the Markdown file the table is appended to (default docs/fuzzing.md)" >&2
  exit 2
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs=10000000
max_time=0
doc="$root/docs/fuzzing.md"
while getopts "n:t:o:h" opt; do
  case "$opt" in
    n) runs="$OPTARG" ;;
    t) max_time="$OPTARG" ;;
    o) doc="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: -n: '$runs' is not a positive integer (executions per target)" >&2
  exit 2
fi
if ! [[ "$max_time" =~ ^[0-9]+$ ]]; then
  echo "error: -t: '$max_time' is not a whole number of seconds (0: no cap)" >&2
  exit 2
fi

build="$root/build-fuzz"
findings="$build/fuzz-findings/executions"
# shellcheck source=scripts/fuzz-common.sh
source "$root/scripts/fuzz-common.sh"
fuzz_select_targets "$@"
for t in "${targets[@]}"; do
  if [ ! -d "$root/fuzz/corpus/$t" ]; then
    echo "error: fuzz/corpus/$t: no seed corpus for target $t" >&2
    exit 2
  fi
done

fuzz_build fuzz-executions "$root" "$build" "${targets[@]}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/foresight-fuzz-exec.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$findings"

command_line="bench/fuzz_executions.sh -n $runs"
[ "$max_time" -gt 0 ] && command_line+=" -t $max_time"
[ "$#" -gt 0 ] && command_line+=" $*"
rows=()
passed=0
failed=0
for t in "${targets[@]}"; do
  corpus="$scratch/$t"
  mkdir -p "$corpus"
  cp -R "$root/fuzz/corpus/$t/." "$corpus/"
  log="$findings/$t.log"
  rm -f "$findings/$t"-crash-* "$findings/$t"-leak-* "$findings/$t"-timeout-* "$findings/$t"-oom-*
  echo "fuzz-executions: $t for $runs executions"
  rc=0
  start=$(date +%s.%N)
  "$build/fuzz/$t" -runs="$runs" -max_total_time="$max_time" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/$t-" "$corpus" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  seconds="$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')"
  rate="$(awk -v n="${execs:-0}" -v s="$seconds" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print "-" }')"
  artifacts="$(find "$findings" -maxdepth 1 -name "$t-*" ! -name '*.log' -printf '%f\n' | sort | tr '\n' ' ')"
  if [ "$rc" -eq 0 ] && [ -z "$artifacts" ]; then
    passed=$((passed + 1))
    found="none"
  else
    failed=$((failed + 1))
    found="exit $rc: ${artifacts:-no input saved} (log build-fuzz/fuzz-findings/executions/$t.log)"
    grep -m 1 -E 'ERROR: |runtime error:|SUMMARY:' "$log" >&2 || tail -n 20 "$log" >&2
  fi
  # A target stopped by the -t cap ran fewer executions than asked: the table says so.
  [ "$rc" -eq 0 ] && [ -n "$execs" ] && [ "$execs" -lt "$runs" ] && found+=" (stopped by -t after $execs)"
  rows+=("| $t | ${execs:-?} | $seconds | $rate | $found |")
  printf '  %-20s %12s executions in %8ss, %8s/s, findings: %s\n' "$t" "${execs:-?}" "$seconds" "$rate" "$found"
done

mkdir -p "$(dirname "$doc")"
if [ ! -f "$doc" ]; then
  cat >"$doc" <<'EOF'
# Fuzzing

libFuzzer targets (fuzz/, one per parser) built with ASan + UBSan by clang-14. `scripts/run-fuzzers.sh`
runs each for a number of seconds; `bench/fuzz_executions.sh` runs each for a number of executions
and appends a table here, so that the time for a given count can be estimated from executions per
second. Findings are the inputs libFuzzer saved (crash, leak, timeout, out of memory).
EOF
fi
{
  echo
  echo "## $(date -u '+%Y-%m-%d %H:%M UTC'): $(uname -m), $(nproc) cores"
  echo
  echo "\`$command_line\`"
  echo
  echo "| target | executions | seconds | executions/s | findings |"
  echo "|---|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "$passed passed, $failed failed."
} >>"$doc"
echo "fuzz-executions: table appended to ${doc#"$root"/}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
