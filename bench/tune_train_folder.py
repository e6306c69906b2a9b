#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 13: does `saturate tune` on a streamed, decoding folder: source measure what
`saturate train --config plan.json` then runs? Makes a JPEG folder (Pillow), then for each
repeat runs tune and two train runs of its plan, and prints plan samples/s, train samples/s and
their ratio; the median ratio is the result.

  python3 bench/tune_train_folder.py --saturate build/saturate --repeats 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


# The CLI test's generator, at the bench's own seed and size.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli"))
from cli_test import make_jpeg_folder  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", default="build/saturate")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--budget-s", type=int, default=60)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="saturate-tune-folder-")
    root = make_jpeg_folder(work, a.train, a.train // 10, a.size, seed=3, name="ds")
    ratios = []
    for r in range(a.repeats):
        plan = os.path.join(work, f"plan{r}.json")
        subprocess.run([a.saturate, "tune", "--data", "folder:" + root, "--model", "fmnist-cnn",
                        "--threads", "2", "--memory-limit", "512MiB", "--budget-s",
                        str(a.budget_s), "--out", plan], check=True, capture_output=True)
        p = json.load(open(plan))
        c = p["config"]
        for t in range(2):
            s = os.path.join(work, f"s{r}_{t}.json")
            subprocess.run([a.saturate, "train", "--config", plan, "--steps", str(a.steps),
                            "--summary-json", s], check=True, capture_output=True)
            got = json.load(open(s))["samples_per_s"]
            ratio = got / p["tuned"]["samples_per_s"]
            ratios.append(ratio)
            print(f"repeat {r} train {t}: plan batch {c['batch_size']}x{c['accumulate']} "
                  f"workers {c['workers']} prefetch {c['prefetch']}: plan "
                  f"{p['tuned']['samples_per_s']:.1f}, train {got:.1f} samples/s, "
                  f"ratio {ratio:.3f}", flush=True)
    print(f"median train/plan ratio {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} runs)")


if __name__ == "__main__":
    sys.exit(main())
