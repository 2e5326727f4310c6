# Shared by scripts/run-fuzzers.sh and bench/fuzz_executions.sh (sourced, not run): the libFuzzer
# targets, picking some of them by name, and configuring and building them in build-fuzz/
# (clang-14, ASan + UBSan, as the fuzz preset).

fuzz_all_targets=(fuzz_units fuzz_model_json fuzz_plan_json fuzz_hardware_json fuzz_trace_json fuzz_hf_config
                  fuzz_sweep_json fuzz_checkpoint fuzz_nccl_tests fuzz_pytorch_trace)

# Sets `targets` to the names given (every target when none is); exits 2 on an unknown name.
fuzz_select_targets() {
  targets=("${fuzz_all_targets[@]}")
  [ "$#" -eq 0 ] && return 0
  for t in "$@"; do
    if [[ " ${fuzz_all_targets[*]} " != *" $t "* ]]; then
      echo "error: unknown target '$t' (known: ${fuzz_all_targets[*]})" >&2
      exit 2
    fi
  done
  targets=("$@")
}

# fuzz_build LABEL ROOT BUILD TARGET...: configures BUILD and builds the targets (FUZZ_JOBS jobs).
fuzz_build() {
  local label="$1" root="$2" build="$3"
  shift 3
  echo "$label: configuring $build"
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja \
    -DFORESIGHT_FUZZ=ON -DFORESIGHT_BUILD_TESTS=OFF -DFORESIGHT_BUILD_BENCH=OFF \
    -DFORESIGHT_WITH_CUDA=OFF -DFORESIGHT_WITH_QT=OFF -DFORESIGHT_WITH_MPI=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  echo "$label: building $*"
  cmake --build "$build" --target "$@" -- -j "${FUZZ_JOBS:-1}"
}
