#!/usr/bin/python3
"""Real PyTorch profiler traces of the runtime's model on the CPU, for `foresight compare`.

Trains the model bench/runtime_vs_pytorch.py builds (the runtime's architecture in ordinary
PyTorch, fp32, AdamW) for a few steps under torch.profiler and writes one Chrome trace per rank
(prof.export_chrome_trace), each step inside a ProfilerStep#N range and each block's forward
inside a "layers.N" range. With --ranks 2 or more the ranks are processes joined by
torch.distributed (gloo, a file store: no network) that split the global batch and average their
gradients with one all-reduce after the backward (inside an "all_reduce" range), as the runtime's
data parallelism does. One thread per rank (OpenBLAS's threads included).

    bench/pytorch_trace.py --model small --gb 8 --mb 1 --steps 4 --ranks 2 --out traces/
    foresight simulate --model small --cluster cpu-local --gpus 2 --dp 2 --gb 8 --mb 1 \\
        --precision fp32 --full --trace pred.json
    foresight compare pred.json traces/

Debian's python3-torch has no Kineto: its traces are a bare array of events under
"pid": "CPU functions" (the format Foresight reads as chrome-cpu). Exits 2 without PyTorch.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_vs_pytorch import load_model, make_model  # noqa: E402


def in_range(name, forward, record_function):
    def ranged(*a, **kw):
        with record_function(name):
            return forward(*a, **kw)

    return ranged


def train(rank, ranks, cfg, args, store):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(1)
    if ranks > 1:
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=ranks)
    V, S = cfg["vocab"], cfg["seq_len"]
    model = make_model(cfg)
    # Each block's forward in a "layers.N" range, as torchtitan's module paths name them: compare
    # reports the forward per layer.
    for i, blk in enumerate(model.blocks):
        blk.forward = in_range("layers.%d" % i, blk.forward, record_function)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(1234 + rank)
    per_rank = args.gb // ranks
    data = torch.randint(0, V, (per_rank, S + 1), generator=g)
    params = [p for p in model.parameters()]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(args.steps):
            with record_function("ProfilerStep#%d" % step):
                opt.zero_grad(set_to_none=True)
                for i in range(0, per_rank, args.mb):
                    batch = data[i : i + args.mb]
                    logits = model(batch[:, :-1])
                    loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1), reduction="sum")
                    (loss / (args.gb * S)).backward()
                if ranks > 1:
                    with record_function("all_reduce"):
                        flat = torch.cat([p.grad.reshape(-1) for p in params])
                        dist.all_reduce(flat)
                        offset = 0
                        for p in params:
                            n = p.numel()
                            p.grad.copy_(flat[offset : offset + n].view_as(p))
                            offset += n
                opt.step()
    os.makedirs(args.out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.out, "rank%d.json" % rank))
    if ranks > 1:
        dist.destroy_process_group()


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small")
    ap.add_argument("--gb", type=int, default=8, help="sequences per step (all ranks)")
    ap.add_argument("--mb", type=int, default=1, help="sequences per micro-batch")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--out", required=True, help="folder for rank<N>.json")
    args = ap.parse_args()
    # One thread per rank, as the runtime runs: OpenBLAS's own threads too (torch.set_num_threads
    # does not reach them), set before the library loads.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("PyTorch is not installed (Debian: apt install python3-torch); no trace written.", file=sys.stderr)
        return 2
    if args.gb % (args.ranks * args.mb):
        print("--gb must be a multiple of --ranks x --mb", file=sys.stderr)
        return 2
    cfg, _ = load_model(args.model, repo)
    if args.ranks == 1:
        train(0, 1, cfg, args, "")
    else:
        with tempfile.TemporaryDirectory() as d:
            mp.spawn(train, args=(args.ranks, cfg, args, os.path.join(d, "store")), nprocs=args.ranks, join=True)
    print("PyTorch %s: %d trace%s of %d steps written to %s" % (torch.__version__, args.ranks,
          "" if args.ranks == 1 else "s", args.steps, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
