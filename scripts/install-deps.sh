#!/usr/bin/env bash
# Installs every build and test dependency of Foresight from Debian 12 packages.
# Idempotent: packages already present are left alone; safe to run again.
# CUDA (with cuBLAS and NCCL) is not a Debian package here: CMake finds it at /usr/local/cuda
# or wherever CUDAToolkit_ROOT points, and everything builds without it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  nlohmann-json3-dev libeigen3-dev libboost-graph-dev libtbb-dev
  libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev xvfb
  clang-14 libclang-rt-14-dev clang-format-14
  libsqlite3-dev  # Nsight Systems reports (nsys export --type sqlite) in `foresight compare`
  python3 jq  # the bench scripts (bench/*.sh) and scripts/behaviour-md5.sh
  # Real PyTorch profiler traces on the CPU for `foresight compare` (tests/pytorch, bench/pytorch_trace.py);
  # without OpenBLAS Debian's PyTorch runs the reference BLAS, an order of magnitude slower.
  python3-torch libopenblas0-pthread
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
