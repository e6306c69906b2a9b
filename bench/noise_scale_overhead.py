#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What does measuring the gradient noise scale cost a training step (issue 35)? Goal: <= 2%.

Each case trains the same recipe three ways, as fresh `saturate train` processes in an order
that rotates each round: measured within the default budget (--noise-scale-budget 0.01, the
default wherever the step has micro-batches), measured at every step (--noise-scale-budget 1)
and not measured (--no-noise-scale); steady-state samples/s from each run's summary. Reported:
the medians, the medians of the per-round ratios (off / on - 1 = the overhead), the steps the
budgeted run measured, the share of step time its own accounting says measuring took, and the
noise scale each measured run saw.

Usage (from the repository root, after `make build`):
  python3 bench/noise_scale_overhead.py [--saturate build/saturate] [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = [
    # name, flags: AdamW computes the preconditioned value too (the dearer path).
    ("fmnist-cnn adamw b256 ×4", ["--model", "fmnist-cnn", "--batch-size", "256",
                                 "--accumulate", "4", "--steps", "60"]),
    ("fmnist-cnn sgd b256 ×4", ["--model", "fmnist-cnn", "--batch-size", "256",
                               "--accumulate", "4", "--steps", "60", "--optimizer", "sgd",
                               "--lr", "0.05"]),
    ("mlp adamw b256 ×4", ["--model", "mlp", "--batch-size", "256", "--accumulate", "4",
                          "--steps", "600"]),
    ("mlp adamw b1024 ×2", ["--model", "mlp", "--batch-size", "1024", "--accumulate", "2",
                           "--steps", "300"]),
]


VARIANTS = {"budget": [], "every": ["--noise-scale-budget", "1"], "off": ["--no-noise-scale"]}


def run(saturate, flags, variant, folder):
    summary = os.path.join(folder, "summary.json")
    cmd = [saturate, "train", "--no-eval", "--summary-json", summary, *flags, *VARIANTS[variant]]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=600)
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    return s["samples_per_s"], s.get("gns") or {}, s["steps"]


def phi(gns):
    return "—" if gns.get("phi") is None else f"{gns['phi']:.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", default="build/saturate")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"noise-scale overhead: {args.rounds} rounds, order rotating (medians)")
    print(f"{'case':26} {'off samp/s':>10} {'budget':>7} {'every':>7} {'measured':>9} "
          f"{'cost':>5}  φ budget / every")
    names = list(VARIANTS)
    with tempfile.TemporaryDirectory() as folder:
        for name, flags in CASES:
            sps = {v: [] for v in names}
            ratios = {"budget": [], "every": []}
            measured, cost, gns = [], [], {}
            for r in range(args.rounds):
                got = {}
                for v in names[r % 3:] + names[:r % 3]:
                    got[v] = run(args.saturate, flags, v, folder)
                    sps[v].append(got[v][0])
                for v in ratios:
                    ratios[v].append(got["off"][0] / got[v][0] - 1)
                measured.append(got["budget"][1].get("measured_steps", 0) / got["budget"][2])
                cost.append(got["budget"][1].get("cost_share", 0))
                gns = {v: got[v][1] for v in ratios}
            med = statistics.median
            print(f"{name:26} {med(sps['off']):10.1f} {100 * med(ratios['budget']):6.1f}% "
                  f"{100 * med(ratios['every']):6.1f}% {100 * med(measured):8.0f}% "
                  f"{100 * med(cost):4.1f}%  {phi(gns['budget'])} / {phi(gns['every'])}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
