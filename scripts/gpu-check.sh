#!/usr/bin/env bash
# GPU check, for a machine with a CUDA device: builds only what needs the GPU (the CUDA kernels'
# tests, the block benchmark, and -- where the tree has them -- the `foresight` app and the
# runtime's GPU tests), runs the tests and the benchmark, and collects everything under
# "${OUT:-gpu-check-out}" (eight files at most, no subfolders):
#   summary.txt        what ran, test counts, step time and MFU, the CUDA trainer's step times
#   nvidia-smi.txt     nvidia-smi -q
#   build.log          configure and build output
#   tests.log          the GPU tests' console output
#   kernel_gpu_tests.xml, runtime_gpu_tests.xml   gtest XML
#   gpu_block_bench.json, gpu_block_bench.log     the benchmark's result and console output
# Needs no network. Finishes within about 8 minutes (each step under `timeout`, against one overall
# budget). Exits non-zero when a build, a test or the benchmark fails, or when the tests skip for
# want of a device.
#
# On the session's GPU machine (the `device` tool): run scripts/gpu-deps.sh here first, then call
# `scripts/gpu-check.sh` there with carry [".gpu-deps"] and OUT set by the tool.
#
# Environment: OUT (output folder), BUILD_DIR (default build-gpu), CUDA_ARCH (default 90: H100 and
# H200; "native" also works), GPU_CHECK_BUDGET_S (default 470).
# Carry .gpu-deps (made by scripts/gpu-deps.sh on a Debian machine) for the whole project to build on
# a bare CUDA image. If the project's CMake configure fails anyway (its required packages --
# nlohmann_json, CLI11, fmt, Eigen3, GTest, Google Benchmark -- missing), the kernels, their GPU tests
# and the benchmark are built directly with nvcc instead; the tests then need GoogleTest: an
# installed libgtest, or its sources in GTEST_SRC, .gpu-deps/googletest or /usr/src/googletest.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT_DIR=${OUT:-gpu-check-out}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
BUILD=${BUILD_DIR:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=$(nproc)
DEADLINE=$((SECONDS + ${GPU_CHECK_BUDGET_S:-470}))
SUMMARY=$OUT_DIR/summary.txt
BUILD_LOG=$OUT_DIR/build.log
TESTS_LOG=$OUT_DIR/tests.log
: >"$SUMMARY"
: >"$BUILD_LOG"
: >"$TESTS_LOG"
STATUS=0

say() { echo "[gpu-check] $*" | tee -a "$SUMMARY"; }
fail() {
  say "FAIL: $*"
  STATUS=1
}
# Seconds for a step: at most $1, and no later than the deadline less $2 kept for the steps after it.
budget() {
  local left=$((DEADLINE - SECONDS - ${2:-0}))
  ((left > $1)) && left=$1
  ((left < 5)) && left=5
  echo "$left"
}

say "started $(date -u +%FT%TZ) in $ROOT, output in $OUT_DIR, CUDA arch $ARCH, $JOBS jobs"

# --- the device --------------------------------------------------------------------------------------
if timeout 30 nvidia-smi -q >"$OUT_DIR/nvidia-smi.txt" 2>&1; then
  say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
else
  fail "nvidia-smi failed (see nvidia-smi.txt)"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ ! -x "$NVCC" ]; then
  fail "no nvcc found"
  exit 1
fi
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
say "nvcc: $("$NVCC" --version | tail -1)"

KERNEL_TESTS=""
BENCH=""
RUNTIME_TESTS=""

# --- build dependencies carried as Debian packages (scripts/gpu-deps.sh) ---------------------------------
# A bare CUDA machine has no nlohmann_json, CLI11, fmt, Eigen, Boost, TBB, GoogleTest or Google
# Benchmark; .gpu-deps/debs, fetched on a Debian machine and carried along, is unpacked into
# .gpu-deps/root (never into /) and CMake and the loader look there first.
PREFIX_ARGS=()
if ls "$ROOT"/.gpu-deps/debs/*.deb >/dev/null 2>&1; then
  DEPS_ROOT=$ROOT/.gpu-deps/root
  mkdir -p "$DEPS_ROOT"
  for f in "$ROOT"/.gpu-deps/debs/*.deb; do
    # dpkg-deb where the image has it; else the archive's data member by hand (ar + tar).
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$DEPS_ROOT" 2>>"$BUILD_LOG" || fail "unpacking $(basename "$f")"
    else
      member=$(ar t "$f" | grep '^data\.tar')
      case $member in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
      # shellcheck disable=SC2086 # no flag for an uncompressed member
      ar p "$f" "$member" | tar -x $z -C "$DEPS_ROOT" -f - 2>>"$BUILD_LOG" || fail "unpacking $(basename "$f")"
    fi
  done
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS_ROOT/usr")
  export LD_LIBRARY_PATH="$DEPS_ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "build dependencies: $(ls "$ROOT"/.gpu-deps/debs/*.deb | wc -l) carried packages unpacked into $DEPS_ROOT"
fi

# --- build: the project's CMake --------------------------------------------------------------------------
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
echo "== configure" >>"$BUILD_LOG"
if timeout "$(budget 150 300)" cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DFORESIGHT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DFORESIGHT_WITH_QT=OFF \
  -DFORESIGHT_BUILD_TESTS=ON -DFORESIGHT_BUILD_BENCH=ON "${PREFIX_ARGS[@]}" >>"$BUILD_LOG" 2>&1; then
  say "configure: ok (CMake)"
  TARGETS=$(cmake --build "$BUILD" --target help 2>/dev/null)
  echo "== build foresight_kernel_gpu_tests gpu_block_bench" >>"$BUILD_LOG"
  if timeout "$(budget 300 150)" cmake --build "$BUILD" --target foresight_kernel_gpu_tests gpu_block_bench \
    -j"$JOBS" >>"$BUILD_LOG" 2>&1; then
    say "build kernels, tests, bench: ok"
    KERNEL_TESTS=$BUILD/tests/kernels/foresight_kernel_gpu_tests
    BENCH=$BUILD/bench/gpu_block_bench
  else
    fail "build of foresight_kernel_gpu_tests / gpu_block_bench (see build.log)"
  fi
  OPTIONAL=()
  for t in foresight foresight_runtime_gpu_tests runtime_parallel_check; do
    grep -qE "(^|[ /])$t(:|\$| )" <<<"$TARGETS" && OPTIONAL+=("$t")
  done
  if [ ${#OPTIONAL[@]} -gt 0 ]; then
    echo "== build ${OPTIONAL[*]}" >>"$BUILD_LOG"
    if timeout "$(budget 240 150)" cmake --build "$BUILD" --target "${OPTIONAL[@]}" -j"$JOBS" >>"$BUILD_LOG" 2>&1; then
      say "build ${OPTIONAL[*]}: ok"
      RUNTIME_TESTS=$(find "$BUILD" -name foresight_runtime_gpu_tests -type f -perm -u+x 2>/dev/null | head -1)
    else
      fail "build of ${OPTIONAL[*]} (see build.log)"
    fi
  else
    say "no foresight app or runtime GPU tests in this tree: not built"
  fi
else
  # --- build: nvcc directly (no project dependencies needed) ---------------------------------------------
  say "configure failed (see build.log); building the kernels, their tests and the bench with nvcc directly"
  D=$ROOT/$BUILD/direct
  mkdir -p "$D"
  ARCH_FLAG=-arch=sm_$ARCH
  [ "$ARCH" = native ] && ARCH_FLAG=-arch=native
  NVFLAGS=(-std=c++17 -O3 "$ARCH_FLAG" -I"$ROOT" "-Xcompiler=-Wall,-Wextra")
  echo "== nvcc build in $D" >>"$BUILD_LOG"
  pids=()
  for f in kernels/matmul kernels/norm kernels/elementwise kernels/attention kernels/loss kernels/adamw \
    kernels/compression bench/gpu_block_bench; do
    timeout "$(budget 300 150)" "$NVCC" "${NVFLAGS[@]}" -c "$f.cu" -o "$D/$(basename "$f").o" >>"$BUILD_LOG" 2>&1 &
    pids+=($!)
  done
  ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  KOBJ=("$D"/matmul.o "$D"/norm.o "$D"/elementwise.o "$D"/attention.o "$D"/loss.o "$D"/adamw.o "$D"/compression.o)
  if [ $ok = 1 ] && "$NVCC" "$ARCH_FLAG" "${KOBJ[@]}" "$D/gpu_block_bench.o" -lcublas -o "$D/gpu_block_bench" \
    >>"$BUILD_LOG" 2>&1; then
    BENCH=$D/gpu_block_bench
    say "build kernels and bench (nvcc): ok"
  else
    fail "nvcc build of the kernels or the bench (see build.log)"
  fi
  # GoogleTest: installed, or built from sources.
  GTEST_FLAGS=()
  for src in "${GTEST_SRC:-}" "$ROOT/.gpu-deps/googletest/googletest" "$ROOT/.gpu-deps/googletest" \
    /usr/src/googletest/googletest /usr/src/gtest; do
    if [ -n "$src" ] && [ -f "$src/src/gtest-all.cc" ]; then
      if g++ -std=c++17 -O2 -I"$src/include" -I"$src" -c "$src/src/gtest-all.cc" -o "$D/gtest-all.o" >>"$BUILD_LOG" 2>&1 &&
        g++ -std=c++17 -O2 -I"$src/include" -c "$src/src/gtest_main.cc" -o "$D/gtest_main.o" >>"$BUILD_LOG" 2>&1; then
        GTEST_FLAGS=(-I"$src/include" "$D/gtest-all.o" "$D/gtest_main.o")
        break
      fi
    fi
  done
  if [ ${#GTEST_FLAGS[@]} -eq 0 ] && [ -f /usr/include/gtest/gtest.h ]; then
    GTEST_FLAGS=(-lgtest_main -lgtest)
  fi
  if [ ${#GTEST_FLAGS[@]} -eq 0 ]; then
    fail "no GoogleTest (installed or sources): the GPU tests cannot be built"
  elif [ $ok = 1 ] &&
    timeout "$(budget 240 150)" g++ -std=c++20 -O2 -Wall -Wextra -I"$ROOT" -I"$CUDA_HOME/include" \
      kernels/reference.cpp tests/kernels/cuda_kernels_test.cpp "${KOBJ[@]}" "${GTEST_FLAGS[@]}" \
      -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcublas -lcudart -pthread \
      -o "$D/foresight_kernel_gpu_tests" >>"$BUILD_LOG" 2>&1; then
    KERNEL_TESTS=$D/foresight_kernel_gpu_tests
    say "build GPU tests (g++ + gtest): ok"
  else
    fail "build of the GPU tests (see build.log)"
  fi
  say "the foresight app and runtime GPU tests need the CMake build: not built"
fi

# --- run ----------------------------------------------------------------------------------------------
# run_tests NAME BINARY XML: runs a gtest binary and reports its counts.
run_tests() {
  local name=$1 bin=$2 xml=$3 rc log
  log=$(mktemp)
  echo "== $name" >>"$TESTS_LOG"
  timeout "$(budget 240 100)" "$bin" --gtest_output=xml:"$xml" >"$log" 2>&1
  rc=$?
  cat "$log" >>"$TESTS_LOG"
  local ran passed skipped failed
  ran=$(grep -Eo '[0-9]+ tests? from [0-9]+ test suites? ran' "$log" | grep -Eo '^[0-9]+' | tail -1)
  passed=$(grep -E '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+' | head -1)
  skipped=$(grep -E '^\[  SKIPPED \] [0-9]+ tests?,' "$log" | grep -Eo '[0-9]+' | head -1)
  failed=$(grep -E '^\[  FAILED  \] [0-9]+ tests?,' "$log" | grep -Eo '[0-9]+' | head -1)
  say "$name: ran ${ran:-?}, passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0} (exit $rc)"
  if [ $rc -ne 0 ]; then
    fail "$name (exit $rc$([ $rc -eq 124 ] && echo ', timed out'); see tests.log)"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | head -20 | tee -a "$SUMMARY"
  elif grep -q "no CUDA device" "$log"; then
    fail "$name skipped tests for want of a CUDA device on a GPU machine"
  fi
  rm -f "$log"
}

if [ -n "$KERNEL_TESTS" ]; then
  run_tests foresight_kernel_gpu_tests "$KERNEL_TESTS" "$OUT_DIR/kernel_gpu_tests.xml"
fi
if [ -n "$RUNTIME_TESTS" ]; then
  run_tests foresight_runtime_gpu_tests "$RUNTIME_TESTS" "$OUT_DIR/runtime_gpu_tests.xml"
fi
if [ -n "$BENCH" ]; then
  if timeout "$(budget 150 0)" "$BENCH" --out "$OUT_DIR/gpu_block_bench.json" >"$OUT_DIR/gpu_block_bench.log" 2>&1; then
    J=$OUT_DIR/gpu_block_bench.json
    field() { grep -E "\"$1\":" "$J" | head -1 | sed -E 's/.*: *([^,]*),?$/\1/'; }
    say "gpu_block_bench: step $(field step_ms) ms, $(field achieved_tflops) TFLOP/s, MFU $(field mfu) (breakdown: $(grep breakdown_ms "$J" | sed -E 's/.*\{(.*)\}.*/\1/'))"
    # The model's phases beside the measured ones (needs the foresight app of the CMake build).
    APP=$(find "$BUILD" -path '*/app/foresight' -type f -perm -u+x 2>/dev/null | head -1)
    if [ -n "$APP" ] && command -v python3 >/dev/null; then
      timeout "$(budget 30 0)" python3 "$ROOT/bench/gpu_block_vs_model.py" --bench "$J" --binary "$APP" \
        2>&1 | sed 's/^/[gpu-check]   /' | tee -a "$SUMMARY"
    fi
  else
    fail "gpu_block_bench (exit $?; see gpu_block_bench.log)"
  fi
fi

# --- pipeline stages on the GPU: two ranks share the device (no NCCL between them: the pipeline's
# transfers go through host memory over MPI), checked against the serial CPU run element by element.
PCHECK=$(find "$BUILD" -name runtime_parallel_check -type f -perm -u+x 2>/dev/null | head -1)
if [ -n "$PCHECK" ] && command -v mpirun >/dev/null; then
  for layout in "pp=2" "pp=2 schedule=gpipe" "pp=2 vp=2 schedule=interleaved-1f1b" "pp=2 recompute=full"; do
    echo "== mpirun -np 2 runtime_parallel_check $layout backend=cuda" >>"$TESTS_LOG"
    # shellcheck disable=SC2086 # the layout is several key=value words
    if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$(budget 60 60)" mpirun --oversubscribe -np 2 \
      "$PCHECK" model="$ROOT/tests/data/runtime/tiny4.json" $layout precision=fp32 backend=cuda >>"$TESTS_LOG" 2>&1; then
      say "cuda pipeline check ($layout): OK"
    else
      fail "cuda pipeline check ($layout) (see tests.log)"
    fi
  done
fi

# --- the trainer on the CUDA backend (needs the foresight app of the CMake build) ------------------------
# Step times and model TFLOP/s of `foresight run --backend cuda`: the small preset in full fp32 and
# with bf16 GEMMs, and a GPT-2-small-shaped model (bench/models) with bf16 GEMMs. Console output
# goes to tests.log; the figures to the summary.
APP=$(find "$BUILD" -path '*/app/foresight' -type f -perm -u+x 2>/dev/null | head -1)
if [ -n "$APP" ]; then
  run_trainer() {
    local label=$1 rc log
    shift
    log=$(mktemp)
    echo "== foresight run $*" >>"$TESTS_LOG"
    timeout "$(budget 90 20)" "$APP" run --backend cuda "$@" >"$log" 2>&1
    rc=$?
    cat "$log" >>"$TESTS_LOG"
    if [ $rc -eq 0 ]; then
      say "trainer $label: $(grep -E '^backend' "$log" | head -1)"
      say "trainer $label: $(grep -E '^median step' "$log" | head -1)"
    else
      fail "foresight run --backend cuda $* (exit $rc$([ $rc -eq 124 ] && echo ', timed out'); see tests.log)"
      tail -3 "$log" | tee -a "$SUMMARY"
    fi
    rm -f "$log"
  }
  run_trainer "small fp32" --model small --steps 20 --precision fp32 --cluster h200-ndr
  run_trainer "small bf16 GEMMs" --model small --steps 20 --precision bf16 --cluster h200-ndr
  run_trainer "gpt2-124m-shaped bf16 GEMMs" --model "$ROOT/bench/models/gpt2-124m-shaped.json" --gb 8 --mb 4 --steps 8 \
    --precision bf16 --cluster h200-ndr
  # Issue 6 on the GPU: calibrate the CUDA backend (from the H200 profile), then predict single-GPU
  # runs with the calibrated profile and compare op by op (the step-time error lines go to the summary).
  CAL=$ROOT/$BUILD/gpu-calibrated.json
  log=$(mktemp)
  if timeout "$(budget 150 40)" "$APP" calibrate --backend cuda --cluster h200-ndr --passes 1 --out "$CAL" --name gpu-calibrated \
    >"$log" 2>&1; then
    cat "$log" >>"$TESTS_LOG"
    grep -E '^  (peak|gemm|streaming|attention|executor):' "$log" | sed 's/^  /calibrate: /' | while read -r l; do say "$l"; done
    # fp32, and bf16 GEMMs (calibrate measures the peak in each of the backend's GEMM precisions).
    for run in small:fp32 gpt2:fp32 gpt2:bf16; do
      m=${run%%:*}
      prec=${run##*:}
      out=$(mktemp)
      extra=()
      [ "$m" = small ] || { m=$ROOT/bench/models/gpt2-124m-shaped.json; extra=(--gb 8 --mb 4); }
      if timeout "$(budget 90 5)" "$APP" run --backend cuda --model "$m" --steps 10 --precision "$prec" --cluster "$CAL" \
        --predict "${extra[@]}" >"$out" 2>&1; then
        say "predict vs measured, $(basename "$m" .json) $prec: $(grep -E '^step time: predicted' "$out" | head -1)"
        grep -A8 -E '^op kind' "$out" | sed 's/^/    /' >>"$SUMMARY"
      else
        fail "run --predict of $(basename "$m") on the calibrated profile (see tests.log)"
      fi
      cat "$out" >>"$TESTS_LOG"
      rm -f "$out"
    done
  else
    cat "$log" >>"$TESTS_LOG"
    fail "calibrate --backend cuda (see tests.log)"
  fi
  rm -f "$log"
fi

say "finished in ${SECONDS}s: $([ $STATUS -eq 0 ] && echo PASS || echo FAIL)"
exit $STATUS
