#!/bin/bash
# Real PyTorch profiler traces (Debian's python3-torch, CPU, bench/pytorch_trace.py) of the
# small model over RANKS processes, compared with Foresight's prediction of the same plan. Checks
# what a broken reader would get wrong, not timings: the steps found, every kind present, the
# time attributed adding up to the step, few unmapped names, communication only with 2+ ranks,
# each layer's forward found.
#   tests/pytorch/compare_pytorch_trace.sh FORESIGHT_BINARY RANKS
# Exits 77 (skipped) without python3-torch.
set -euo pipefail
bin="$1"
ranks="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIP: Debian's python3-torch is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$root/bench/pytorch_trace.py" --model small --gb 4 --mb 1 --steps 3 --ranks "$ranks" --out "$tmp/traces"
"$bin" simulate --model small --cluster cpu-local --gpus "$ranks" --dp "$ranks" --gb 4 --mb 1 --precision fp32 \
  --full --trace "$tmp/pred.json" >/dev/null
"$bin" compare "$tmp/pred.json" "$tmp/traces"
"$bin" compare "$tmp/pred.json" "$tmp/traces" --json >"$tmp/report.json"
/usr/bin/python3 - "$tmp/report.json" "$ranks" "$root/models/small.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
kinds = {k["kind"]: k for k in r["kinds"]}
fail = []
def need(ok, what):
    if not ok:
        fail.append(what)
need(len(r["measured_files"]) == ranks, "one trace per rank")
need(r["steps_compared"] == 2 and r["warmup_steps"] == 1, "3 steps found, 1 of warm-up")
for k in ("gemm", "attention", "elementwise", "optimizer"):
    need(kinds.get(k, {}).get("measured_s", 0) > 0, k + " measured")
comm = kinds.get("communication", {}).get("measured_s", 0)
need((comm > 0) == (ranks > 1), "communication measured only with 2+ ranks")
attributed = sum(k["measured_s"] for k in r["kinds"] if k["kind"] != "exposed_communication")
unmapped = sum(u["measured_s"] for u in r["unmapped"])
step = r["measured_step_mean_s"]
need(abs(attributed + unmapped - step) < 0.15 * step,
     "the kinds, idle and unmapped add up to the step (%.3f + %.3f against %.3f s)" % (attributed, unmapped, step))
need(unmapped < 0.05 * step, "under 5%% of the step unmapped (%.3f s)" % unmapped)
need(r["predicted_step_s"] > 0 and 0.1 < r["measured_step_s"] / r["predicted_step_s"] < 10,
     "measured and predicted steps within 10x")
layers = json.load(open(sys.argv[3]))["layers"]
need([l["measured_layer"] for l in r["layers"]] == list(range(layers)) and
     all(l["measured_forward_s"] > 0 and l["predicted_forward_s"] > 0 for l in r["layers"]),
     "each of the %d layers' forward measured and predicted" % layers)
if fail:
    print("FAILED: " + "; ".join(fail))
    sys.exit(1)
print("ok: %d rank(s), step predicted %.1f ms, measured %.1f ms" % (ranks, r["predicted_step_s"] * 1e3, step * 1e3))
PY
# calibrate --from-trace, then the same plan predicted on the calibrated profile: the kinds whose
# rates it scales come back to their measured times (GEMMs less closely: a GEMM's memory-bound part
# moves with the streaming rate).
"$bin" calibrate --from-trace "$tmp/traces" --predicted "$tmp/pred.json" --cluster cpu-local --out "$tmp/cal.json" |
  tee "$tmp/cal.txt"
"$bin" simulate --model small --cluster "$tmp/cal.json" --gpus "$ranks" --dp "$ranks" --gb 4 --mb 1 --precision fp32 \
  --full --trace "$tmp/pred-cal.json" >/dev/null
"$bin" compare "$tmp/pred-cal.json" "$tmp/traces" --json >"$tmp/report-cal.json"
/usr/bin/python3 - "$tmp/report-cal.json" "$tmp/cal.txt" <<'PY'
import json, sys
kinds = {k["kind"]: k for k in json.load(open(sys.argv[1]))["kinds"]}
# calibrate fits in passes, predicting the plan again after each: the kinds come back within a few
# percent (one pass left GEMMs up to 25% off, their memory-bound part moving with the streaming rate).
limits = {"attention": 3, "optimizer": 3, "elementwise": 3, "gemm": 3, "communication": 3}
# Where the optimizer's efficiency was held at the profile's bound, calibrate says by how much its
# time stays off ("predicted xF of the measured", the last pass's): that is the optimizer's limit then.
held = [l for l in open(sys.argv[2]) if "optimizer efficiency" in l and "held at" in l]
if held:
    factor = float(held[-1].rsplit(" x", 1)[1].split()[0])
    limits["optimizer"] = 3 + abs(factor - 1) * 100
bad = ["%s %+.1f%%" % (k, kinds[k]["error_pct"]) for k, lim in limits.items()
       if k in kinds and kinds[k]["measured_s"] > 0 and abs(kinds[k]["error_pct"]) > lim]
if bad:
    print("FAILED: after calibrate --from-trace the same plan is still off: " + ", ".join(bad))
    sys.exit(1)
print("ok: calibrated profile predicts the traced plan's kinds: " +
      ", ".join("%s %+.1f%%" % (k, kinds[k]["error_pct"]) for k in limits if k in kinds and kinds[k]["measured_s"] > 0))
PY
