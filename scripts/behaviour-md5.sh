#!/usr/bin/env bash
# Prints the md5 of the --json output of predict, simulate, search, sweep and validate on a fixed
# set of cases, with wall-clock fields removed, one line per case. A refactoring that is meant to
# change no behaviour must print the same lines before and after:
#
#   scripts/behaviour-md5.sh > /tmp/before.txt       # on the old commit
#   scripts/behaviour-md5.sh | diff /tmp/before.txt -   # on the new one: no output
#
# FORESIGHT=path/to/foresight picks the binary (default build/app/foresight).
# Keep the case list stable: a changed list makes the md5s of old notes incomparable.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${FORESIGHT:-$root/build/app/foresight}"
val="${VALIDATION:-$root/validation}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Drops every key that holds a wall-clock measurement, at any depth.
strip='walk(if type == "object" then del(.wall_s, .elapsed_s, .plans_per_s) else . end)'

case_md5() {
  local name="$1"
  shift
  local out rc=0
  out="$("$bin" "$@" 2>/dev/null)" || rc=$?
  # validate exits 1 when a case cannot be predicted; its JSON still lists every case.
  if [ "$rc" -eq 1 ] && [ "${name#validate}" != "$name" ]; then rc=0; fi
  if [ "$rc" -ne 0 ]; then
    echo "$name FAILED (exit $rc)"
    return
  fi
  printf '%s  %s\n' "$(jq -S "$strip" <<<"$out" | md5sum | cut -d' ' -f1)" "$name"
}

case_md5 predict-default predict --json
case_md5 predict-405b predict --json --model llama3-405b --cluster dgx-h100-ndr --gpus 16384 \
  --tp 8 --pp 16 --sp true --zero 1 --recompute full --gb 2048 --schedule zero-bubble
case_md5 predict-gpt3-interleaved predict --json --model gpt3-175b --cluster dgx-a100-hdr --gpus 1024 \
  --tp 8 --pp 8 --vp 3 --sp true --recompute selective --gb 1536 --tokens 300B --price 2.5
case_md5 predict-mixtral-ep predict --json --model mixtral-8x7b --gpus 64 --tp 2 --ep 8 --gb 512 --zero 2
case_md5 predict-offload predict --json --model llama3-70b --gpus 8 --tp 8 --offload-optimizer true --gb 64 \
  --recompute full
case_md5 predict-compression predict --json --model llama3-8b --gpus 64 --gb 512 --zero 1 --tp 2 \
  --grad-compression four-stage --compression-topk 0.001
case_md5 predict-hetero predict --json --model llama3-8b --cluster hetero-node --tp 4 --pp 2 \
  --stage-devices h100-sxm5-80gb,ascend-910b --layer-split 22,10
case_md5 simulate-gpt3 simulate --json --model gpt3-175b --cluster dgx-a100-hdr --gpus 1024 --tp 8 --pp 8 \
  --sp true --recompute selective --gb 1024
case_md5 simulate-full-ab simulate --json --model llama3-8b --gpus 32 --tp 2 --pp 4 --gb 128 --full \
  --network alpha-beta
case_md5 simulate-moe simulate --json --model mixtral-8x7b --gpus 64 --tp 2 --ep 8 --pp 2 --gb 256
case_md5 search-8b search --json --model llama3-8b --gpus 64 --gb 256
case_md5 search-405b-cost search --json --model llama3-405b --gpus 2048 --gb 2048 --tokens 15T \
  --objective cost
case_md5 validate-training validate --json "$val/training"
case_md5 validate-training-des validate --json --engine des "$val/training"
case_md5 validate-collectives validate --json "$val/collectives"
case_md5 reliability-405b reliability --json --model llama3-405b --gpus 16384 --tp 8 --pp 16 --gb 2048 \
  --sp true --zero 1 --recompute full --tokens 15T
case_md5 capacity-llama capacity --json --model llama3-70b --gpus 64 --tp 8 --pp 2 --gb 256

for spec in scale-8-to-16k tp-inside-vs-across-nodes; do
  if "$bin" sweep "$root/scenarios/$spec.json" --out "$work/$spec" -j 1 >/dev/null 2>&1; then
    printf '%s  sweep-%s\n' \
      "$(jq -cS "$strip" "$work/$spec/results.jsonl" | sort | md5sum | cut -d' ' -f1)" "$spec"
  else
    echo "sweep-$spec FAILED"
  fi
done
