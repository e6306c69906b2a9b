#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Kill stress for checkpoints and exact resume (issue 16): `saturate train` is SIGKILLed at
random moments and restarted with `--resume auto` until it completes; its saved weights
(`--save-model`) must be byte for byte those of one uninterrupted run of the same seed.

Only the processes this script starts are signalled (Popen.kill: SIGKILL to that PID). Each run
is bounded (`--max-attempts` starts), and the scratch folder is removed at the end.

Usage (from the repository root, after `make build`; run it under ../shared/tools/contain):
  python3 bench/kill_stress.py [--saturate build/saturate] [--seeds 8] [--steps 200] \
      [--workers 2] [--min-s 0.8] [--max-s 4.0] [--max-attempts 40]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time


def train_cmd(a, ck, saved):
    return [a.saturate, "train", "--model", a.model, "--data", a.data, "--steps", str(a.steps),
            "--batch-size", "32", "--lr", "0.001", "--workers", str(a.workers), "--threads", "1",
            "--seed", "7", "--no-eval", "-q", "--checkpoint-dir", ck, "--checkpoint-every",
            str(a.every), "--resume", "auto", "--save-model", saved]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--saturate", default="build/saturate")
    p.add_argument("--model", default="fmnist-cnn")
    p.add_argument("--data", default="synthetic:1,28,28,10,2000,256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--min-s", type=float, default=0.8)
    p.add_argument("--max-s", type=float, default=4.0)
    p.add_argument("--max-attempts", type=int, default=40)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="saturate-kill-stress-")
    try:
        whole = os.path.join(tmp, "whole.safetensors")
        t0 = time.time()
        subprocess.run(train_cmd(a, os.path.join(tmp, "whole"), whole), check=True,
                       capture_output=True, timeout=1800)
        print(f"uninterrupted run: {time.time() - t0:.1f} s", flush=True)
        want = open(whole, "rb").read()
        kills, equal = 0, 0
        for seed in range(1, a.seeds + 1):
            rng = random.Random(seed)
            ck, saved = os.path.join(tmp, f"ck{seed}"), os.path.join(tmp, f"s{seed}.safetensors")
            run_kills = 0
            for _ in range(a.max_attempts):
                child = subprocess.Popen(train_cmd(a, ck, saved), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
                try:
                    _, err = child.communicate(timeout=rng.uniform(a.min_s, a.max_s))
                    if child.returncode != 0:
                        sys.exit(f"seed {seed}: a resumed run failed (exit {child.returncode}):\n{err}")
                    break
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.communicate()
                    run_kills += 1
            else:
                sys.exit(f"seed {seed}: not complete after {a.max_attempts} starts")
            same = open(saved, "rb").read() == want
            equal += same
            kills += run_kills
            print(f"seed {seed}: {run_kills} kills, weights {'equal' if same else 'DIFFER'}",
                  flush=True)
            shutil.rmtree(ck, ignore_errors=True)
        print(f"{a.seeds} runs of {a.steps} steps ({a.model}, {a.workers} workers, a checkpoint "
              f"every {a.every} steps): {kills} SIGKILLs, {equal}/{a.seeds} ended bitwise equal "
              f"to the uninterrupted run")
        sys.exit(0 if equal == a.seeds else 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
