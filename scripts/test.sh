#!/usr/bin/env bash
# Quick start, command 2: builds and runs every test -- the GoogleTest suite, the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, and each libFuzzer target for a few seconds.
# FUZZ_SECONDS sets the seconds per fuzzer (default 10); SKIP_SANITIZERS=1 skips the last two.
# Under CI (CI=true) it first checks the formatting, and compiler warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
werror=OFF
if [ "${CI:-}" = "true" ]; then
  bash scripts/check-format.sh
  werror=ON
fi
cmake --preset default -DFORESIGHT_WERROR="$werror"
cmake --build --preset default
ctest --preset default
if [ "${SKIP_SANITIZERS:-0}" != "1" ]; then
  cmake --preset asan -DFORESIGHT_WERROR="$werror"
  cmake --build --preset asan
  ctest --preset asan
  bash scripts/run-fuzzers.sh "${FUZZ_SECONDS:-10}"
fi
