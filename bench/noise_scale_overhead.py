#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What does measuring the gradient noise scale cost a training step (issue 35)? Goal: <= 2%.

Each case trains the same recipe with the noise scale measured (the default wherever the step
has micro-batches) and with --no-noise-scale, as fresh `saturate train` processes, alternating
which goes first, several rounds; steady-state samples/s from each run's summary. Reported:
the medians, the median of the per-round ratios (off / on - 1 = the overhead) and the noise
scale the measured run saw.

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


def run(saturate, flags, measured, folder):
    summary = os.path.join(folder, "summary.json")
    cmd = [saturate, "train", "--no-eval", "--summary-json", summary, *flags]
    if not measured:
        cmd.append("--no-noise-scale")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=600)
    with open(summary, encoding="utf-8") as f:
        s = json.load(f)
    return s["samples_per_s"], s.get("gns")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", default="build/saturate")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"noise-scale overhead: {args.rounds} rounds, order alternating (medians)")
    print(f"{'case':28} {'off samp/s':>11} {'on samp/s':>11} {'overhead':>9}  gns (on)")
    with tempfile.TemporaryDirectory() as folder:
        for name, flags in CASES:
            on, off, ratios, gns = [], [], [], None
            for r in range(args.rounds):
                order = [True, False] if r % 2 == 0 else [False, True]
                got = {}
                for measured in order:
                    got[measured] = run(args.saturate, flags, measured, folder)
                on.append(got[True][0])
                off.append(got[False][0])
                ratios.append(got[False][0] / got[True][0] - 1)
                gns = got[True][1]
            phi = "—" if not gns or gns.get("phi") is None else f"{gns['phi']:.0f}"
            print(f"{name:28} {statistics.median(off):11.1f} {statistics.median(on):11.1f} "
                  f"{100 * statistics.median(ratios):8.1f}%  φ {phi}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
