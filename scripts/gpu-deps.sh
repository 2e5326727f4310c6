#!/usr/bin/env bash
# Fetches, on a Debian 12 machine with its package archive, the build dependencies that a bare CUDA
# machine lacks (the GPU machines lent to sessions have CUDA, CMake and a compiler, but none of
# Debian's -dev packages and no network), as .deb files under .gpu-deps/debs (git-ignored, about
# 12 MB). Carry .gpu-deps to the GPU machine; scripts/gpu-check.sh unpacks the packages into
# .gpu-deps/root (never into /) and points CMake at them, so the whole project -- the foresight
# app, the runtime's CUDA backend and its GPU tests -- builds there, not only the kernels.
#
#   scripts/gpu-deps.sh          # here
#   (device) scripts/gpu-check.sh   # with .gpu-deps carried along
#
# Open MPI is left out (its runtime needs daemons and plugins that do not unpack cleanly): the GPU
# build is a one-rank build, and the pipeline checks under mpirun run only where mpirun exists.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libeigen3-dev libboost1.74-dev libtbb-dev libtbb12
  libtbbmalloc2 libtbbbind-2-5 libhwloc15 libgtest-dev libbenchmark-dev libbenchmark1debian)
mkdir -p .gpu-deps/debs
cd .gpu-deps/debs
rm -f ./*.deb
apt-get download "${PACKAGES[@]}"
echo "$(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1), in .gpu-deps/debs"
