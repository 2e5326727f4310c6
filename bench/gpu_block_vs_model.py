#!/usr/bin/python3
"""Kernel-level check on a GPU: bench/gpu_block_bench's measured phases against the model's.

gpu_block_bench times one training step of a GPT-2 XL block on one GPU and splits it into GEMMs,
attention and the rest (its JSON's breakdown_ms). This script predicts the same block with
`foresight simulate` (a one-layer model of the block's shape, bf16, unfused attention, one GPU of
the device's cluster preset), sums the predicted layer ops into the same three phases and prints
both with the error of each. Run it on the CPU machine with the JSON that scripts/gpu-check.sh
brought back:

    bench/gpu_block_vs_model.py --bench gpu_block_bench.json [--binary build/app/foresight] [--cluster h200-ndr]

Without --bench it prints the prediction alone. The phases line up as follows: the four linear
layers' GEMMs (forward, input and weight gradients) are "gemm"; Q K^T, softmax and P V are
"attention" (the bench runs them as fp32 kernels with conversions around them, the model at the
device's 16-bit rates: a large gap there says how far those kernels are from tensor-core speed);
norms, residuals, biases and the GeLU are "other" (the bench's also zeroes the gradients). The
model's embedding, head and optimizer are not part of the block and are left out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PHASES = {
    "gemm": ("qkv", "proj", "mlp_up", "mlp_down"),
    "attention": ("scores", "softmax", "attn_v", "attention"),
    "other": ("norm1", "norm2", "residual1", "residual2", "activation"),
}
CLUSTERS = [("H200", "h200-ndr"), ("H100", "dgx-h100-ndr"), ("H800", "h800-ib"), ("B200", "dgx-b200-ndr"),
            ("A100", "dgx-a100-hdr"), ("MI300X", "mi300x-roce")]


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", help="gpu_block_bench's JSON (--out)")
    ap.add_argument("--binary", default=os.path.join(repo, "build", "app", "foresight"))
    ap.add_argument("--cluster", help="cluster preset of the device (default: from the bench's device name)")
    args = ap.parse_args()
    bench = None
    if args.bench:
        with open(args.bench) as f:
            bench = json.load(f)
    block = bench["block"] if bench else {"batch": 8, "seq": 1024, "hidden": 1600, "heads": 25, "ffn": 6400}
    cluster = args.cluster
    if not cluster:
        name = bench["device"] if bench else "H200"
        cluster = next((c for key, c in CLUSTERS if key in name.upper()), None)
        if not cluster:
            print(f"no cluster preset known for device '{name}': pass --cluster", file=sys.stderr)
            return 2
    model = {"name": "gpt2-xl-block", "layers": 1, "hidden": block["hidden"], "heads": block["heads"],
             "ffn_hidden": block["ffn"], "mlp": "gelu", "norm": "layernorm", "vocab": 256,
             "seq_len": block["seq"], "bias": True,
             "source": "bench/gpu_block_bench's block: one GPT-2 XL layer (the vocabulary only sizes the head, left out)"}
    with tempfile.TemporaryDirectory() as d:
        model_path, trace_path = os.path.join(d, "block.json"), os.path.join(d, "trace.json")
        with open(model_path, "w") as f:
            json.dump(model, f)
        cmd = [args.binary, "simulate", "--model", model_path, "--cluster", cluster, "--gpus", "1",
               "--gb", str(block["batch"]), "--mb", str(block["batch"]), "--flash-attention", "false",
               "--precision", "bf16", "--trace", trace_path]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(trace_path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    predicted = {p: 0.0 for p in PHASES}
    for e in events:
        if e.get("ph") != "X" or "/L0/" not in e.get("args", {}).get("id", ""):
            continue
        for phase, names in PHASES.items():
            if e["name"] in names:
                predicted[phase] += e["dur"] / 1e3  # us -> ms
    measured = bench["breakdown_ms"] if bench else {}
    print(f"block: batch {block['batch']} x seq {block['seq']}, hidden {block['hidden']}, {block['heads']} heads, "
          f"ffn {block['ffn']}; model on {cluster} (one GPU)"
          + (f"; measured on {bench['device']}" if bench else ""))
    print(f"{'phase':<10} {'predicted ms':>13} {'measured ms':>12} {'error':>8}")
    for phase in PHASES:
        m = measured.get(phase)
        err = f"{(predicted[phase] - m) / m * 100:+7.1f}%" if m else ""
        print(f"{phase:<10} {predicted[phase]:>13.3f} {m if m is not None else float('nan'):>12.3f} {err:>8}")
    total = sum(predicted.values())
    if bench:
        step = bench["step_ms"]
        print(f"{'step':<10} {total:>13.3f} {step:>12.3f} {(total - step) / step * 100:+7.1f}%")
    else:
        print(f"{'step':<10} {total:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
