#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to a validation target (issue 35): the plan `saturate tune` writes against the user's
default, the largest batch that fits with the square-root LR rule (what a throughput-only finder
picks) and a grid over batch sizes with the LR rule, each point with several seeds.

Every run is `saturate train --target val_accuracy=T --val-fraction 0.1 --epochs E`; its time to
target is the summed step time up to the first evaluation at or above T (the summary's
target.train_s; evaluation left out). A run that never gets there counts as its whole training
time and is marked. Medians over the seeds. The largest batch and the grid run at the plan's
precision, layout and threads (`--config plan.json` with the batch and LR overridden); the
user's default runs as the user gave it. The largest batch takes the square-root rule (what a
throughput-only finder does); the grid the LR rule of the optimizer (square root for AdamW,
linear for SGD). With a goodput curve in the plan, the plan also runs with --adaptive-batch.

Usage (from the repository root, after `make build`):
  python3 bench/time_to_target.py --model mlp --target 0.85 [--optimizer adamw --lr 0.003]
      [--batches 64,128,256,512,1024] [--seeds 2] [--epochs 3] [--saturate build/saturate]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile


def fmt(v, digits=0):
    return "–" if v is None else f"{v:.{digits}f}"


def train(args, folder, batch, lr, seed, extra=()):
    summary = os.path.join(folder, "summary.json")
    cmd = [args.saturate, "train", "--model", args.model, "--data", args.data,
           "--optimizer", args.optimizer, "--batch-size", str(batch), "--lr", repr(lr),
           "--epochs", str(args.epochs), "--val-fraction", "0.1", "--seed", str(seed),
           "--target", f"val_accuracy={args.target}", "--summary-json", summary, *extra]
    if os.path.exists(summary):
        os.remove(summary)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=1800)
    if r.returncode == 1 and "diverged" in r.stderr:  # a rule LR the batch cannot take
        return math.inf, False
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    t = s["target"]
    return (t["train_s"], True) if t["reached"] else (s["train_wall_s"], False)


def point(args, folder, label, batch, lr, extra=()):
    runs = [train(args, folder, batch, lr, seed, extra) for seed in range(args.seeds)]
    times = [t for t, _ in runs]
    missed = sum(1 for _, ok in runs if not ok)
    med = statistics.median(times)
    diverged = sum(1 for t in times if math.isinf(t))
    note = f"  ({missed} of {len(runs)} never reached it" + \
        (f", {diverged} diverged" if diverged else "") + ")" if missed else ""
    shown = "      –" if math.isinf(med) else f"{med:7.2f}"
    print(f"  {label:34} batch {batch:6}  lr {lr:9.6f}  {shown} s{note}")
    sys.stdout.flush()
    return med if not missed else math.inf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", default="build/saturate")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--batch", type=int, default=64, help="the user's default batch")
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batches", default="64,128,256,512,1024")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tune-budget-s", type=int, default=120)
    ap.add_argument("--tune-extra", default="", help="more tune flags, space-separated")
    args = ap.parse_args()
    sqrt_rule = args.optimizer == "adamw"

    def rule_lr(b, sqrt=sqrt_rule):
        k = b / args.batch
        return args.lr * (math.sqrt(k) if sqrt else k)

    with tempfile.TemporaryDirectory() as folder:
        plan = os.path.join(folder, "plan.json")
        subprocess.run([args.saturate, "tune", "--model", args.model, "--data", args.data,
                        "--optimizer", args.optimizer, "--batch-size", str(args.batch),
                        "--lr", repr(args.lr), "--budget-s", str(args.tune_budget_s),
                        "--out", plan, *args.tune_extra.split()], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=1800)
        with open(plan, encoding="utf-8") as f:
            p = json.load(f)
        cfg, g = p["config"], p.get("goodput") or {}
        n = g.get("noise_scale") or {}
        print(f"{args.model}, {args.optimizer} lr {args.lr}, user batch {args.batch}, target "
              f"val_accuracy {args.target}, {args.seeds} seeds, medians of time to target")
        print(f"  plan: batch {cfg['batch_size']} lr {cfg['lr']:.6f} precision {cfg['precision']};"
              f" φ {fmt(n.get('phi'))} (95%: {fmt(n.get('low'))}–{fmt(n.get('high'))}), "
              f"predicted speed-up {fmt(g.get('predicted_speedup'), 2)}")
        results = {}
        if g.get("why"):
            print(f"  goodput: {g['why']}")
        for b in g.get("guard_branches") or []:
            print(f"  guard: batch {b['batch_size']}{' (up)' if b.get('searched_up') else ''}"
                  f" {'accepted' if b['accepted'] else 'rejected'}, efficiency predicted "
                  f"{fmt(b['predicted_efficiency'], 2)} measured "
                  f"{fmt(b['measured_efficiency'], 2)}{' (diverged)' if b['diverged'] else ''}, "
                  f"φ after {fmt(b['phi_after'])}")
        at_plan = ("--config", plan)
        results = {}
        results["plan"] = point(args, folder, "plan (train --config)", cfg["batch_size"],
                                cfg["lr"], at_plan)
        if g.get("curve") and len(g["curve"]) > 1:
            results["adaptive"] = point(args, folder, "plan, --adaptive-batch", cfg["batch_size"],
                                        cfg["lr"], at_plan + ("--adaptive-batch",))
        results["user"] = point(args, folder, "user default", args.batch, args.lr)
        largest = max(t["config"]["batch_size"] for t in p["trials"]
                      if t.get("outcome", "fits") == "fits")
        results["largest"] = point(args, folder, "largest that fits, sqrt LR", largest,
                                   rule_lr(largest, sqrt=True), at_plan)
        grid = {}
        for b in [int(x) for x in args.batches.split(",")]:
            grid[b] = point(args, folder, f"grid, rule LR", b, rule_lr(b), at_plan)
        best = min(grid, key=grid.get)
        if math.isinf(grid[best]):
            print(f"  grid best: none: no grid point reached the target with every seed "
                  f"(φ measured {fmt(n.get('phi'))}); plan: {results['plan']:.2f} s")
            return
        print(f"  grid best: batch {best} at {grid[best]:.2f} s (φ measured {fmt(n.get('phi'))}); "
              f"plan / grid best = {results['plan'] / grid[best]:.2f}; user / grid best = "
              f"{results['user'] / grid[best]:.2f}"
              + (f"; adaptive / grid best = {results['adaptive'] / grid[best]:.2f}"
                 if "adaptive" in results else ""))


if __name__ == "__main__":
    main()
