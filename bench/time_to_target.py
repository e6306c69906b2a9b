#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time to a validation target (issue 35): the plan `saturate tune` writes against the user's
default, the largest batch that fits with the square-root LR rule (what a throughput-only finder
picks) and a grid over batch sizes with the LR rule, each point with several seeds.

Every run is `saturate train --target val_accuracy=T --val-fraction 0.1 --epochs E`; its time to
target is the summed step time up to the first evaluation at or above T (the summary's
target.train_s; evaluation left out). A run that never gets there counts as its whole training
time and is marked. The seeds run in rounds, each round every configuration once. Each row
shows medians over the seeds: time to target, samples to target and samples/s, and `est`, the
median samples to target over the median samples/s (one run's samples/s can read half another's
of the same configuration on this VM; est keeps that from deciding a row alone). The grid's best
and the ratios are given by both. The largest batch and the grid run at the plan's
precision, layout and threads (`--config plan.json` with the batch and LR overridden); the
user's default runs as the user gave it. The largest batch takes the square-root rule (what a
throughput-only finder does); the grid the LR rule of the optimizer (square root for AdamW,
linear for SGD). With a goodput curve in the plan, the plan also runs with --adaptive-batch;
the user's default also runs with --adaptive-batch and no plan (the run measures its own
samples/s).

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
        return Run(math.inf, False, math.inf, 0.0)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    t = s["target"]
    if not t["reached"]:
        return Run(s["train_wall_s"], False, math.inf, s["samples_per_s"])
    return Run(t["train_s"], True, t["samples"], s["samples_per_s"])


class Run:
    """One train run: time to target (summed step time), reached, samples to target, and the
    run's steady-state samples/s."""

    def __init__(self, seconds, reached, samples, samples_per_s):
        self.seconds, self.reached, self.samples, self.samples_per_s = \
            seconds, reached, samples, samples_per_s


class Point:
    """A configuration run once per seed. Its time to target is reported two ways: the median
    measured time, and the median samples to target over the median samples/s of its runs
    (est). On this shared 2-core VM one run's samples/s can read half another's of the same
    configuration; the estimate keeps that from deciding a row alone."""

    def __init__(self, label, batch, lr, extra=()):
        self.label, self.batch, self.lr, self.extra, self.runs = label, batch, lr, extra, []

    def missed(self):
        return sum(1 for r in self.runs if not r.reached)

    def seconds(self):
        return math.inf if self.missed() else statistics.median(r.seconds for r in self.runs)

    def estimate(self):
        if self.missed():
            return math.inf
        sps = statistics.median(r.samples_per_s for r in self.runs)
        return statistics.median(r.samples for r in self.runs) / sps if sps > 0 else math.inf

    def show(self):
        diverged = sum(1 for r in self.runs if math.isinf(r.seconds))
        note = f"  ({self.missed()} of {len(self.runs)} never reached it" + \
            (f", {diverged} diverged" if diverged else "") + ")" if self.missed() else ""
        med = statistics.median(r.seconds for r in self.runs)
        shown = "      –" if math.isinf(med) else f"{med:7.2f}"
        samples = statistics.median(r.samples for r in self.runs)
        sps = statistics.median(r.samples_per_s for r in self.runs)
        est = self.estimate()
        print(f"  {self.label:30} batch {self.batch:6}  lr {self.lr:9.6f}  {shown} s  "
              + ("" if math.isinf(samples) else f"{samples / 1000:6.1f}k samples ")
              + f"{sps / 1000:6.1f}k/s  est {fmt(est, 2) if not math.isinf(est) else '–'} s{note}")


def run_rounds(args, folder, points):
    """Seed by seed, every point once per round: a slow spell of the machine then falls on
    every configuration alike, not on whichever ran during it."""
    for seed in range(args.seeds):
        for pt in points:
            pt.runs.append(train(args, folder, pt.batch, pt.lr, seed, pt.extra))
    for pt in points:
        pt.show()
    sys.stdout.flush()


def ratios(name, of, best, by):
    return f"{name} / grid best = {by(of) / by(best):.2f}"


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
              f"val_accuracy {args.target}, {args.seeds} seeds in interleaved rounds; medians "
              f"of time to target, samples to target and samples/s")
        print(f"  plan: batch {cfg['batch_size']} lr {cfg['lr']:.6f} precision {cfg['precision']};"
              f" φ {fmt(n.get('phi'))} (95%: {fmt(n.get('low'))}–{fmt(n.get('high'))}), "
              f"predicted speed-up {fmt(g.get('predicted_speedup'), 2)}")
        if g.get("why"):
            print(f"  goodput: {g['why']}")
        for b in g.get("guard_branches") or []:
            print(f"  guard: batch {b['batch_size']}{' (up)' if b.get('searched_up') else ''}"
                  f" {'accepted' if b['accepted'] else 'slower, not taken' if b.get('slower') else 'rejected'}, efficiency predicted "
                  f"{fmt(b['predicted_efficiency'], 2)} measured "
                  f"{fmt(b['measured_efficiency'], 2)}{' (diverged)' if b['diverged'] else ''}, "
                  f"φ after {fmt(b['phi_after'])}")
        at_plan = ("--config", plan)
        points = {"plan": Point("plan (train --config)", cfg["batch_size"], cfg["lr"], at_plan)}
        if g.get("curve") and len(g["curve"]) > 1:
            points["adaptive"] = Point("plan, --adaptive-batch", cfg["batch_size"], cfg["lr"],
                                       at_plan + ("--adaptive-batch",))
        points["user"] = Point("user default", args.batch, args.lr)
        points["user_adaptive"] = Point("user, --adaptive-batch (no plan)", args.batch, args.lr,
                                        ("--adaptive-batch",))
        largest = max(t["config"]["batch_size"] for t in p["trials"]
                      if t.get("outcome", "fits") == "fits")
        points["largest"] = Point("largest that fits, sqrt LR", largest,
                                  rule_lr(largest, sqrt=True), at_plan)
        grid = [Point("grid, rule LR", b, rule_lr(b), at_plan)
                for b in [int(x) for x in args.batches.split(",")]]
        run_rounds(args, folder, list(points.values()) + grid)
        for by, what in ((Point.seconds, "measured"), (Point.estimate, "est")):
            best = min(grid, key=by)
            if math.isinf(by(best)):
                print(f"  grid best ({what}): none: no grid point reached the target with every "
                      f"seed (φ measured {fmt(n.get('phi'))})")
                continue
            print(f"  grid best ({what}): batch {best.batch} at {by(best):.2f} s (φ measured "
                  f"{fmt(n.get('phi'))}); "
                  + "; ".join(ratios(k, pt, best, by) for k, pt in points.items()
                              if k != "largest"))

if __name__ == "__main__":
    main()
