# SPDX-License-Identifier: Apache-2.0
"""What a training checkpoint costs (issue 16): the same `saturate train` run with and without
`--checkpoint-every`, alternating, medians of 3; the difference per checkpoint is its write
(state captured, serialised, CRC-32C, written, fsynced, renamed). Sizes are the newest step folder.

Usage: python bench/checkpoint_cost.py [build/saturate]
Scratch folders live in a temporary directory that is removed at the end.
"""
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

SCRATCH = tempfile.mkdtemp(prefix="saturate-ckpt-bench-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
sat = sys.argv[1] if len(sys.argv) > 1 else "build/saturate"


def one(model, data, steps, batch, every):
    d = os.path.join(SCRATCH, model)
    subprocess.run(["rm", "-rf", d]); os.makedirs(d)
    cmd = [sat, "train", "--model", model, "--data", data, "--steps", str(steps), "--batch-size",
           str(batch), "--no-eval", "-q", "--threads", "2", "--summary-json", d + "/s.json"]
    if every:
        cmd += ["--checkpoint-dir", d + "/ck", "--checkpoint-every", str(every), "--keep-checkpoints", "2"]
    subprocess.run(cmd, check=True, capture_output=True)
    s = json.load(open(d + "/s.json"))
    size = 0
    if every:
        ck = sorted(os.listdir(d + "/ck"))[-1]
        size = sum(os.path.getsize(os.path.join(d, "ck", ck, f)) for f in os.listdir(os.path.join(d, "ck", ck)))
    return s["train_wall_s"], size


def measure(model, data, steps, batch, every, rounds=3):
    plain, ck = [], []
    for _ in range(rounds):
        plain.append(one(model, data, steps, batch, 0)[0])
        w, size = one(model, data, steps, batch, every)
        ck.append(w)
    n = steps // every
    per = (statistics.median(ck) - statistics.median(plain)) / n
    step = statistics.median(plain) / steps
    print(f"{model} batch {batch}: checkpoint {size/2**20:.1f} MiB; run {statistics.median(plain):.2f} s plain vs "
          f"{statistics.median(ck):.2f} s with {n} checkpoints (medians of {rounds}) -> {1000*per:.0f} ms per "
          f"checkpoint ({size/2**20/max(per,1e-9):.0f} MiB/s); step {1000*step:.1f} ms; "
          f"share at the default 10 min interval {100*per/600:.3f}%")


measure("fmnist-cnn", "fashion-mnist", 60, 64, 5)
measure("resnet18-cifar", "synthetic:3,32,32,10,512", 16, 16, 4)
