#!/usr/bin/env bash
# Quick start, command 1: installs the Debian 12 packages, builds, and runs the main job -- a
# prediction for Llama 3 70B on 64 H100s. Extra arguments go to `foresight`
# (e.g. `scripts/setup.sh predict --model llama3-8b --gpus 8 --tp 2`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default
build/app/foresight "$@"
