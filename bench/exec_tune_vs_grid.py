#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`saturate tune --exec` against a grid over the same knobs (issue 17), on the fmnist-cnn Python
peer (bench/peers/fmnist_cnn_train.py).

1. The tune, twice: `saturate tune --exec --budget-s B -- python peer` with the quality guard
   off (`--quality-samples 0`: throughput only, as the grid and DeepSpeed's autotuner judge) and
   on (the default): its wall time, runs of the program and the settings it chose.
2. The grid, DeepSpeed-autotuner style: every point of batch × precision × workers run for a
   fixed number of steps and timed over steps [start, end) from the program's own step lines
   (DeepSpeed's start_profile_step/end_profile_step): its wall time, runs and best point.
3. Side by side: each tune's settings and the grid's best point, each a fresh process per round,
   rounds interleaved (which goes first alternates), `--steps-confirm` steps each, samples/s from
   the step lines after the first 10; the medians and the median of the per-round ratios.

Usage (from the repository root, after `make build`):
  ~/.cache/saturate/venv-torch-2.11.0/bin/python bench/exec_tune_vs_grid.py \
      [--saturate build/saturate] [--budget-s 240] [--batches 32,64,128,256,512,1024] \
      [--precisions fp32,bf16] [--workers 0,1,2] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER = os.path.join(ROOT, "bench", "peers", "fmnist_cnn_train.py")
CLIENT = os.path.join(ROOT, "python", "saturate_client")


def run_program(settings, steps, metrics):
    """One run of the peer with `settings` (protocol names → text) for `steps` steps; its step
    lines."""
    env = {**os.environ, "SATURATE_PROTOCOL": "1", "SATURATE_METRICS": metrics,
           "SATURATE_MAX_STEPS": str(steps), "PYTHONPATH": CLIENT}
    for name, value in settings.items():
        env["SATURATE_" + name.upper()] = str(value)
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([sys.executable, PEER], env=env, check=True, capture_output=True, timeout=600)
    with open(metrics) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return [l for l in lines if l["ev"] == "step"]


def samples_per_s(steps, start, end):
    """Samples over steps (start, end] / their time: step indices are 0-based line positions."""
    window = steps[start:end]
    return sum(s["samples"] for s in window[1:]) / (window[-1]["t"] - window[0]["t"])


def tune(args, tmp, guard):
    plan = os.path.join(tmp, "plan.json")
    t0 = time.time()
    extra = [] if guard else ["--quality-samples", "0"]
    p = subprocess.run([args.saturate, "tune", "--exec", "--budget-s", str(args.budget_s),
                        "--max-batch", str(max(args.batches)), "--out", plan, *extra, "--",
                        sys.executable, PEER], capture_output=True, text=True, timeout=3600)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"tune --exec failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    print(p.stdout)
    j = json.load(open(plan))
    settings = {k: v for k, v in j["exec"]["settings"].items()}
    return settings, wall, j["exec"]["runs"], j


def grid(args, tmp):
    points = []
    t0 = time.time()
    for batch in args.batches:
        for precision in args.precisions:
            for workers in args.workers:
                s = {"batch_size": batch, "precision": precision, "num_workers": workers,
                     "grad_accum": 1, "seed": 0}
                if workers > 0:
                    s["prefetch"] = 2 * workers
                steps = run_program(s, args.end_step, os.path.join(tmp, "grid.jsonl"))
                sps = samples_per_s(steps, args.start_step, args.end_step)
                points.append((sps, s))
                print(f"  grid batch {batch:5d} {precision} workers {workers}: {sps:9.1f} samples/s",
                      flush=True)
    return points, time.time() - t0


def side_by_side(args, tmp, configs):
    """configs: name -> settings; the last is the reference. Rounds rotate the order."""
    names = list(configs)
    results = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            steps = run_program(configs[name], args.steps_confirm,
                                os.path.join(tmp, "confirm.jsonl"))
            results[name].append(samples_per_s(steps, 10, len(steps)))
    ref = names[-1]
    ratios = {n: [a / b for a, b in zip(results[n], results[ref])] for n in names[:-1]}
    return results, ratios


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--saturate", default=os.path.join(ROOT, "build", "saturate"))
    p.add_argument("--budget-s", type=float, default=240)
    p.add_argument("--batches", default="32,64,128,256,512,1024")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--workers", default="0,1,2")
    p.add_argument("--start-step", type=int, default=3)
    p.add_argument("--end-step", type=int, default=13)
    p.add_argument("--steps-confirm", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    args.batches = [int(x) for x in args.batches.split(",")]
    args.precisions = args.precisions.split(",")
    args.workers = [int(x) for x in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="saturate-exec-bench-") as tmp:
        tunes = {}
        for label, guard in (("tune, guard off", False), ("tune, guard on", True)):
            tunes[label] = tune(args, tmp, guard)
        points, grid_wall = grid(args, tmp)
        best_sps, best = max(points, key=lambda x: x[0])
        configs = {label: t[0] for label, t in tunes.items()}
        configs["grid best"] = best
        results, ratios = side_by_side(args, tmp, configs)
    for label, (settings, wall, runs, plan) in tunes.items():
        q = plan["quality"]
        print(f"{label:16s}: {runs} runs in {wall:.0f} s -> {settings} (quality {q['status']})")
    print(f"grid            : {len(points)} runs in {grid_wall:.0f} s (steps {args.start_step}.."
          f"{args.end_step} timed) -> best {best} at {best_sps:.1f} samples/s")
    for name, v in results.items():
        print(f"  {name:16s} median {statistics.median(v):9.1f} samples/s  "
              f"({', '.join(f'{x:.1f}' for x in v)})")
    for name, r in ratios.items():
        print(f"  {name} / grid best: median ratio {statistics.median(r):.3f} "
              f"({', '.join(f'{x:.3f}' for x in r)})")


if __name__ == "__main__":
    main()
