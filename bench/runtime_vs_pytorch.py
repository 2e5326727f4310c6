#!/usr/bin/python3
"""CPU training-step time of `foresight run` against PyTorch on the same model and batch.

The PyTorch model is the runtime's architecture written the ordinary PyTorch way: token
embedding, pre-norm blocks (RMSNorm or LayerNorm, grouped-query causal attention with rotary
embeddings, SwiGLU or GeLU MLP, no biases), a final norm and an untied LM head, cross-entropy,
AdamW, fp32. Both sides run the same global batch as the same micro-batches (gradient
accumulation), one process and one thread per rank, and report the median step after warm-up.

    bench/runtime_vs_pytorch.py --binary build/app/foresight --model small --gb 8 --steps 8

Needs Debian's python3-torch (apt install python3-torch); prints the reason and exits 2 without it.
Debian's PyTorch calls whatever libblas.so.3 the alternatives system selects: with only the
reference BLAS installed its GEMMs are an order of magnitude slower, so install
libopenblas0-pthread for a fair comparison; the script prints which BLAS it found.
Reports ratios (PyTorch time / Foresight time: above 1 means Foresight is faster).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time


def load_model(name, repo):
    path = name if os.path.exists(name) else os.path.join(repo, "models", name + ".json")
    with open(path) as f:
        return json.load(f), path


def foresight_step(binary, model_path, gb, mb, steps, ranks):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        cmd = [binary, "run", "--model", model_path, "--gb", str(gb), "--mb", str(mb), "--steps", str(steps),
               "--summary", summary, "--precision", "fp32"]
        if ranks > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + cmd + ["--dp", str(ranks)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(summary) as f:
            return json.load(f)["median_step_s"]


def make_model(cfg):
    """The runtime's architecture as a PyTorch module (fp32, seeded)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    H, heads, kv, ffn = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn_hidden"]
    V, S, D = cfg["vocab"], cfg["seq_len"], cfg["hidden"] // cfg["heads"]
    swiglu = cfg.get("mlp", "gelu") == "swiglu"
    rms = cfg.get("norm", "layernorm") == "rmsnorm"

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def norm():
        return RMSNorm(H) if rms else nn.LayerNorm(H, eps=1e-5)

    inv_freq = 10000.0 ** (-torch.arange(0, D // 2, dtype=torch.float32) * 2 / D)
    ang = torch.arange(S, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(x):  # [b, h, s, d], rotate-half
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    mask = torch.full((S, S), float("-inf")).triu(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = norm(), norm()
            self.qkv = nn.Linear(H, (heads + 2 * kv) * D, bias=False)
            self.proj = nn.Linear(heads * D, H, bias=False)
            self.up = nn.Linear(H, ffn * (2 if swiglu else 1), bias=False)
            self.down = nn.Linear(ffn, H, bias=False)

        def forward(self, x):
            b = x.shape[0]
            q, k, v = self.qkv(self.n1(x)).split([heads * D, kv * D, kv * D], -1)
            q = rope(q.view(b, S, heads, D).transpose(1, 2))
            k = rope(k.view(b, S, kv, D).transpose(1, 2)).repeat_interleave(heads // kv, 1)
            v = v.view(b, S, kv, D).transpose(1, 2).repeat_interleave(heads // kv, 1)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, -1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, S, heads * D))
            u = self.up(self.n2(x))
            a = F.silu(u[..., :ffn]) * u[..., ffn:] if swiglu else F.gelu(u, approximate="tanh")
            return x + self.down(a)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, H)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.norm = norm()
            self.head = nn.Linear(H, V, bias=False)

        def forward(self, t):
            x = self.emb(t)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))

    return Model()


def torch_step(cfg, gb, mb, steps, threads, accumulate=True):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    V, S = cfg["vocab"], cfg["seq_len"]
    model = make_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    data = torch.randint(0, V, (gb, S + 1))
    micro = mb if accumulate else gb
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for i in range(0, gb, micro):
            batch = data[i : i + micro]
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1), reduction="sum") / (gb * S)
            loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[min(2, steps - 1) :])


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(repo, "build", "app", "foresight"))
    ap.add_argument("--model", default="small")
    ap.add_argument("--gb", type=int, default=8, help="sequences per step")
    ap.add_argument("--mb", type=int, default=1, help="sequences per micro-batch")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="Foresight ranks = PyTorch threads")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (Debian: apt install python3-torch); nothing to compare.", file=sys.stderr)
        return 2
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    cfg, path = load_model(args.model, repo)
    print(f"model {cfg['name']}, {args.gb} sequences of {cfg['seq_len']} tokens per step as micro-batches of {args.mb}, "
          f"fp32, PyTorch {torch.__version__} (BLAS: {blas}), median of {args.steps} steps after warm-up")
    print(f"{'ranks/threads':>13} {'foresight ms':>13} {'pytorch ms':>11} {'ratio':>6}   {'pytorch one batch ms':>20} {'ratio':>6}")
    for r in args.ranks:
        fs = foresight_step(args.binary, path, args.gb, args.mb, args.steps, r)
        pt = torch_step(cfg, args.gb, args.mb, args.steps, r)
        pt1 = torch_step(cfg, args.gb, args.mb, args.steps, r, accumulate=False)
        print(f"{r:>13} {fs * 1e3:>13.1f} {pt * 1e3:>11.1f} {pt / fs:>6.2f}   {pt1 * 1e3:>20.1f} {pt1 / fs:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
