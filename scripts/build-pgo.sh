#!/usr/bin/env bash
# An optional profile-guided build of the simulator and the planner (GCC -fprofile-generate /
# -fprofile-use): builds an instrumented `foresight` in BUILD_DIR (default build-pgo), trains it on
# eight simulations and a search, then rebuilds `foresight` and the benchmarks with the profile.
# The training set leaves out the GPT-3 1,024-GPU case that bench/des_bench times, so that
# benchmark measures the profile on a workload it was not trained on. Not part of CI or of the
# quick start; the default build stays profile-free. About 9 minutes on 2 cores. Its outputs are
# byte-identical to the default build's; its simulator engine ran about 1.1-1.2x the default
# build's events per second in interleaved runs of the two des_bench binaries below.
#
#   scripts/build-pgo.sh && build-pgo/bench/des_bench --benchmark_filter=Gpt3
#   build/bench/des_bench --benchmark_filter=Gpt3       # the default build, for comparison
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-pgo}
PROFILE=$PWD/$BUILD/pgo-profile
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFORESIGHT_WITH_CUDA=OFF -DFORESIGHT_WITH_QT=OFF -DFORESIGHT_BUILD_TESTS=OFF)
rm -rf "$PROFILE"
mkdir -p "$PROFILE"

echo "== instrumented build ($BUILD)"
cmake -S . -B "$BUILD" "${COMMON[@]}" \
  "-DCMAKE_CXX_FLAGS=-fprofile-generate -fprofile-update=atomic -fprofile-dir=$PROFILE" >/dev/null
cmake --build "$BUILD" --target foresight

echo "== training runs"
F=$BUILD/app/foresight
run() { echo "   foresight $*"; "$F" "$@" >/dev/null; }
run simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 64 --tp 8 --pp 2 --full
run simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 64 --tp 8 --pp 2 --schedule zero-bubble
run simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 64 --tp 8 --pp 2 --schedule interleaved-1f1b --vp 2 --full
run simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 64 --tp 8 --zero 3 --full
run simulate --model llama3-70b --cluster dgx-h100-ndr --gpus 256 --tp 8 --pp 4 --sp true --zero 1 --recompute full --schedule dualpipe --full
run simulate --model llama3-405b --cluster dgx-h100-ndr --gpus 16384 --tp 8 --pp 16 --sp true --zero 1 --recompute full --gb 2048
run simulate --model mixtral-8x7b --cluster dgx-h100-ndr --gpus 64 --tp 2 --pp 2 --ep 8 --sp true --zero 1 --full
run simulate --model llama3-8b --cluster torus-3d --gpus 512 --tp 8 --zero 1 --full
run search --model llama3-70b --gpus 512 --gb 1024 --resimulate 5 --top 1

echo "== optimised build"
cmake -S . -B "$BUILD" "${COMMON[@]}" \
  "-DCMAKE_CXX_FLAGS=-fprofile-use -fprofile-dir=$PROFILE -fprofile-partial-training -Wno-missing-profile" >/dev/null
cmake --build "$BUILD" --target foresight des_bench analytic_bench
echo "== done: $BUILD/app/foresight, $BUILD/bench/des_bench"
