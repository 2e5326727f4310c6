#!/usr/bin/python3
"""Predicted against measured step time of `foresight run` on this machine, after calibration.

Calibrates the CPU backend (under mpirun -np 2, so the interconnect is fitted too), then runs each
plan with `--predict`: the discrete-event simulator predicts the step on the calibrated profile,
the runtime measures it, and the two traces are compared op by op. Prints the step-time error of
every plan and the op kinds that contribute most.

    bench/predict_vs_measured.py --binary build/app/foresight [--steps N] [--repeats 3]

The tiny model's steps take milliseconds, so it runs 30 steps per run and the others 8 (as the
integration test does), unless --steps sets one count for all. --unfused adds each model's serial and dp=2 plans with
kernel fusion off (the runtime's eager RMSNorm and SwiGLU), to check the model's unfused chains.
--collectives adds the layouts whose collectives are not all-reduces: dp=2 with ZeRO-1 (the
gradients reduce-scattered, the parameters all-gathered) and tp=2 with sequence parallelism.

--speed-adjust predicts each run at the machine's speed just before it: the calibration's peak GEMM,
timed again, scales the device's rates (a shared VM's speed moves by 10-25% within minutes); the
"GEMM vs cal" column shows how far it moved around each plan's median run, and "small" the same for
the calibration's small GEMM (32x64x128 on the CPU: the tiny model's kernels' speed).

Each plan runs `--repeats` times (interleaved with the other plans' runs, so that a slow spell of
a shared machine lands on several plans rather than on all runs of one); the error is that of the
median run, and the measured range shows the machine's run-to-run spread; "each run" lists every run's error in
round order. With --calibrate-each-round
every round of runs starts with a fresh calibration and its runs are predicted on it: a shared VM
changes speed for minutes at a time, and a profile describes the machine as it was when measured.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

LAYOUTS = [("serial", 1, []), ("dp=2", 2, ["--dp", "2"]), ("tp=2", 2, ["--tp", "2"]),
           ("pp=2 1f1b", 2, ["--pp", "2", "--schedule", "1f1b"]), ("pp=2 gpipe", 2, ["--pp", "2", "--schedule", "gpipe"])]
COLLECTIVE_LAYOUTS = [("dp=2 zero-1", 2, ["--dp", "2", "--zero", "1"]), ("tp=2 sp", 2, ["--tp", "2", "--sp", "true"])]
# Steps per run by model: the tiny model's 2 ms steps need more of them for a steady median.
DEFAULT_STEPS = {"tiny": 30}


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] if n > 1 else []


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(repo, "build", "app", "foresight"))
    ap.add_argument("--models", nargs="+", default=["tiny", "small"])
    ap.add_argument("--gb", type=int, default=8)
    ap.add_argument("--steps", type=int, help="steps per run (default: 30 for tiny, 8 for the others)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per plan (the median is compared)")
    ap.add_argument("--profile", help="use this calibrated profile instead of calibrating now")
    ap.add_argument("--passes", type=int, default=1, help="calibrate --passes (rounds of kernel measurements, fastest kept)")
    ap.add_argument("--calibrate-each-round", action="store_true",
                    help="calibrate again before each round of runs (each run is predicted on its round's profile)")
    ap.add_argument("--unfused", action="store_true",
                    help="also run each model's serial and dp=2 plans with --kernel-fusion false (eager RMSNorm and SwiGLU)")
    ap.add_argument("--collectives", action="store_true",
                    help="also run dp=2 with ZeRO-1 and tp=2 with sequence parallelism (reduce-scatters and all-gathers)")
    ap.add_argument("--speed-adjust", action="store_true",
                    help="predict each run at the machine's speed just before it (run --speed-adjust: the calibration's "
                         "peak GEMM timed again scales the device's rates)")
    ap.add_argument("--keep-profiles", metavar="DIR",
                    help="keep each calibration's profile and output there (calibration-N.json and .txt), to see "
                         "what an outlying round's calibration measured")
    args = ap.parse_args()
    layouts = LAYOUTS + ([(name + " unfused", ranks, extra + ["--kernel-fusion", "false"])
                          for name, ranks, extra in LAYOUTS[:2]] if args.unfused else [])
    layouts += COLLECTIVE_LAYOUTS if args.collectives else []
    if args.profile and args.calibrate_each_round:
        ap.error("--profile and --calibrate-each-round exclude each other")
    with tempfile.TemporaryDirectory() as d:
        profile = args.profile or os.path.join(d, "local.json")

        drifts = []  # each calibration's peak GEMM after its kernel measurements against before, %

        def calibrate():
            out = subprocess.run(mpirun(2) + [args.binary, "calibrate", "--out", profile, "--passes", str(args.passes)],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout
            if args.keep_profiles:
                os.makedirs(args.keep_profiles, exist_ok=True)
                kept = os.path.join(args.keep_profiles, f"calibration-{len(drifts) + 1}")
                shutil.copyfile(profile, kept + ".json")
                with open(kept + ".txt", "w") as f:
                    f.write(out)
            with open(profile) as f:
                peak = json.load(f).get("notes", {}).get("peak_gemm", {})
            drifts.append(100 * (peak["end_flops_per_s"] / peak["start_flops_per_s"] - 1)
                          if peak.get("start_flops_per_s") and peak.get("end_flops_per_s") else None)

        if not args.profile:
            calibrate()
        steps = {m: args.steps or DEFAULT_STEPS.get(m, 8) for m in args.models}
        counts = ", ".join(f"{m} {n}" for m, n in steps.items())
        print(f"profile {profile}; {args.gb} sequences per step, median of the steps after 2 warm-up ({counts}), "
              f"median of {args.repeats} runs")
        plans = [(model, name, ranks, extra) for model in args.models for name, ranks, extra in layouts]
        runs = {i: [] for i in range(len(plans))}
        for round_ in range(args.repeats):
            if args.calibrate_each_round and round_ > 0:
                calibrate()
            for i, (model, name, ranks, extra) in enumerate(plans):
                summary = os.path.join(d, "s.json")
                cmd = mpirun(ranks) + [args.binary, "run", "--model", model, "--cluster", profile, "--gb", str(args.gb),
                                        "--steps", str(steps[model]), "--predict", "--summary", summary] + extra + \
                    (["--speed-adjust"] if args.speed_adjust else [])
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                with open(summary) as f:
                    runs[i].append(json.load(f)["comparison"])
        if args.calibrate_each_round:
            print(f"calibrated afresh before each of the {args.repeats} rounds")
        if args.speed_adjust:
            print("each run predicted at the machine's speed just before it (--speed-adjust)")
        if any(x is not None for x in drifts):
            print("the machine's speed while each calibration measured its kernels (peak GEMM after against before): " +
                  ", ".join(f"{x:+.1f}%" if x is not None else "-" for x in drifts))
        # The calibration's peak GEMM timed again before and after each run (`run --predict`): how much
        # faster (+) or slower (-) the machine ran than when calibrated, the two times' mean.
        def speed(c, key="gemm_speed_vs_calibration_pct"):
            pct = c.get(key)
            return sum(pct) / len(pct) if pct else None

        def small(c):  # the calibration's small GEMM (the tiny model's size), the same way
            return speed(c, "small_gemm_speed_vs_calibration_pct")
        print(f"{'model':<7} {'layout':<18} {'predicted ms':>12} {'measured ms':>12} {'range ms':>15} {'error':>8} "
              f"{'GEMM vs cal':>11} {'small':>7}   {'each run':<22} largest kind errors")
        errors, speeds = [], []
        for i, (model, name, _, _) in enumerate(plans):
            rs = sorted(runs[i], key=lambda c: c["measured_step_s"])
            c = rs[len(rs) // 2]
            kinds = sorted(c["kinds"], key=lambda k: -abs(k["predicted_s"] - k["measured_s"]))[:2]
            worst = ", ".join(f"{k['kind']} {k['error_pct']:+.0f}%" for k in kinds)
            errors.append(abs(c["step_time_error_pct"]))
            span = f"{rs[0]['measured_step_s'] * 1e3:.2f}-{rs[-1]['measured_step_s'] * 1e3:.2f}"
            each = " ".join(f"{r['step_time_error_pct']:+.1f}" for r in runs[i])  # in round order
            speeds += [speed(r) for r in runs[i] if speed(r) is not None]
            gemm = f"{speed(c):+.1f}%" if speed(c) is not None else "-"
            small_pct = f"{small(c):+.1f}%" if small(c) is not None else "-"
            print(f"{model:<7} {name:<18} {c['predicted_step_s'] * 1e3:>12.2f} {c['measured_step_s'] * 1e3:>12.2f} {span:>15} "
                  f"{c['step_time_error_pct']:>+7.1f}% {gemm:>11} {small_pct:>7}   {each:<22} {worst}")
        print(f"mean |error| {sum(errors) / len(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)} plans")
        if speeds:
            print(f"the calibration's peak GEMM around the runs against the calibration: mean {sum(speeds) / len(speeds):+.1f}%, "
                  f"{min(speeds):+.1f}% to {max(speeds):+.1f}% over {len(speeds)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
