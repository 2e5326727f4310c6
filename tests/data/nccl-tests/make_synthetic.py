#!/usr/bin/env python3
"""Writes the SYNTHETIC nccl-tests logs of this folder (no GPU has recorded them).

The format is nccl-tests' own (src/util.cu of nccl-tests 2.13-2.19: the version and test lines,
one "#  Rank" line per rank, the two-row header, out-of-place and in-place columns); the times
come from a latency + size/bandwidth curve with a protocol step and a little deterministic
noise, at magnitudes like published 8x H100 (NVLink 4) and 2x8 H100 (8x 400G InfiniBand)
numbers. They exercise the parser and `foresight calibrate --from-nccl-tests`; they say nothing
about any machine. When a GPU is lent, real logs recorded on it replace them.

    python3 tests/data/nccl-tests/make_synthetic.py   # rewrites the synthetic-*.log files
"""
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

# (file, program, hosts, gpus per host, bus factor, latency us, small-protocol latency us,
#  protocol switch bytes, bus bandwidth GB/s, redop, datatype)
LOGS = [
    ("synthetic-h100x8-all_reduce_perf.log", "all_reduce_perf", 1, 8, lambda n: 2 * (n - 1) / n,
     24.0, 11.0, 65536, 470.0, "sum", "float"),
    ("synthetic-h100x8-all_gather_perf.log", "all_gather_perf", 1, 8, lambda n: (n - 1) / n,
     14.0, 9.0, 65536, 360.0, "none", "float"),
    ("synthetic-h100x8-reduce_scatter_perf.log", "reduce_scatter_perf", 1, 8, lambda n: (n - 1) / n,
     15.0, 9.5, 65536, 355.0, "sum", "float"),
    ("synthetic-h100x8-alltoall_perf.log", "alltoall_perf", 1, 8, lambda n: (n - 1) / n,
     20.0, 20.0, 0, 330.0, "none", "float"),
    ("synthetic-h100x16-2nodes-all_reduce_perf.log", "all_reduce_perf", 2, 8, lambda n: 2 * (n - 1) / n,
     38.0, 22.0, 65536, 330.0, "sum", "float"),
]


def body(t_us, size, factor):
    algbw = size / (t_us * 1e-6) / 1e9
    return t_us, algbw, algbw * factor


def fmt(v, width):
    for spec in ("%*.2f", "%*.1f", "%*.0f"):
        s = spec % (width, v)
        if len(s) <= width:
            return s
    return "%*.1e" % (width, v)


def write(name, program, hosts, per_host, factor_of, lat, small_lat, switch, bw, redop, dtype):
    rng = random.Random(name)
    n = hosts * per_host
    factor = factor_of(n)
    lines = [
        "# nccl-tests version 2.13.9 nccl-headers=22107 nccl-library=22107",
        "# Collective test starting: %s" % program,
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(n):
        lines.append("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%04x:%02x:%02x] NVIDIA H100 80GB HBM3"
                     % (r, 40000 + r, "node-%d" % (r // per_host), r % per_host, 0, 0x18 + r % per_host, 0))
    lines += [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
           "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    size = 8
    total = 0.0
    rows = 0
    while size <= 8 << 30:
        count = size // 4
        if program == "all_gather_perf" or program == "reduce_scatter_perf" or program == "alltoall_perf":
            count = size // 4 // n
        a = small_lat if size < switch else lat
        cols = []
        for _ in range(2):
            t = (a + factor * size / (bw * 1e9) * 1e6) * (1 + 0.02 * (rng.random() - 0.5))
            cols.append(body(t, size, factor))
        total += cols[0][2] + cols[1][2]
        rows += 2
        lines.append("%12d  %12d  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
                     % (size, count, dtype, redop, "-1", fmt(cols[0][0], 7), fmt(cols[0][1], 6),
                        fmt(cols[0][2], 6), "0", fmt(cols[1][0], 7), fmt(cols[1][1], 6), fmt(cols[1][2], 6), "0"))
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : %g " % (total / rows),
        "#",
        "# Collective test concluded: %s" % program,
        "",
    ]
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines))


for spec in LOGS:
    write(*spec)
