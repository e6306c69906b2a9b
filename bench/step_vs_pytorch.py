#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Train-step speed: `saturate train` vs the same loop written in Python PyTorch (issue 14).

Both sides train the same model (fmnist-cnn, resnet18-cifar: the Python modules below mirror
src/models), with the same optimizer (SGD, momentum 0.9, weight decay 1e-4, constant lr), the
same batch order (saturate's shuffle, reimplemented here and checked against its unit test), the
same gather + normalise of uint8 batches and one loss read per step, fp32, the same number of
intra-op threads. Each run is a fresh process, as a user's job is. Rounds interleave the two and
alternate which goes first; the table reports medians of samples/s and of the per-round ratio.
Both sides time steps the same way: wall time of whole steps after the first `--warmup` steps
(saturate's from its steps.jsonl).

Usage (from the repository root, after `make bench` or `make build`):
  ~/.cache/saturate/venv-torch-2.11.0/bin/python bench/step_vs_pytorch.py \
      [--saturate build/saturate] [--rounds 3] [--models fmnist-cnn,resnet18-cifar] \
      [--batches 32,128,512,2048] [--samples 12288] [--env-python 'MALLOC_...=...']
      [--memory-format contiguous|channels-last] [--python-memory-format contiguous|channels-last]
"""
import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MASK = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class MT19937_64:
    """std::mt19937_64, as saturate's BatchIterator uses it."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def saturate_order(n, seed, epoch):
    """The sample order of saturate's BatchIterator for (seed, epoch)."""
    rng = MT19937_64(mix64(seed ^ mix64(epoch)))
    order = list(range(n))
    top = MASK
    for i in range(n, 1, -1):
        limit = top - top % i
        r = rng()
        while r >= limit:
            r = rng()
        j = r % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


# ---------------------------------------------------------------------------------------------
# The Python side: one run in this process (called as a subprocess by the driver below).


def load_train(data_dir):
    """The training arrays and the normalisation both sides use (from the first 4096 images)."""
    import numpy as np
    import torch

    x_all = torch.from_numpy(np.load(os.path.join(data_dir, "train_x.npy")))
    y_all = torch.from_numpy(np.load(os.path.join(data_dir, "train_y.npy"))).long()
    mean = float(x_all[:4096].float().div(255).mean())
    std = float(x_all[:4096].float().div(255).std())
    return x_all, y_all, mean, std


def python_model(name, c, h, w):
    """The Python twin of saturate's `name` (src/models) for C x H x W inputs."""
    import torch.nn as nn
    import torch.nn.functional as F

    if name == "fmnist-cnn":
        model = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        class Block(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(cout)
                self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(cout)
                self.shortcut = None
                if stride != 1 or cin != cout:
                    self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                  nn.BatchNorm2d(cout))

            def forward(self, x):
                y = F.relu(self.bn1(self.conv1(x)))
                y = self.bn2(self.conv2(y))
                return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))

        layers = [nn.Conv2d(c, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
        cin = 64
        for stage, width in enumerate([64, 128, 256, 512]):
            for b in range(2):
                layers.append(Block(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
        model = nn.Sequential(*layers)
    return model


def python_step(model, opt, x_all, y_all, idx, mean, std, channels_last=False):
    """One training step as users write it, from uint8 images to the loss on the host."""
    import torch
    import torch.nn.functional as F

    x = x_all.index_select(0, idx).float().div_(255.0).sub_(mean).div_(std)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = y_all.index_select(0, idx)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loss.item()


def python_run(args):
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_all, y_all, mean, std = load_train(args.data_dir)
    model = python_model(args.model, *x_all.shape[1:])
    channels_last = args.python_memory_format == "channels-last"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)

    n = x_all.shape[0]
    epoch, cursor = 0, 0
    order = torch.tensor(saturate_order(n, args.seed, epoch), dtype=torch.long)
    step_s, faults = [], []
    for step in range(args.steps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        if cursor + args.batch > n:  # saturate keeps a short last batch; runs here never reach it
            epoch, cursor = epoch + 1, 0
            order = torch.tensor(saturate_order(n, args.seed, epoch), dtype=torch.long)
        idx = order[cursor:cursor + args.batch]
        cursor += args.batch
        python_step(model, opt, x_all, y_all, idx, mean, std, channels_last)
        step_s.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    timed = step_s[args.warmup:]
    print(json.dumps({"samples_per_s": args.batch * len(timed) / sum(timed),
                      "faults_per_step": statistics.mean(faults[args.warmup:])}))


# ---------------------------------------------------------------------------------------------
# The driver.


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make_data(root, model):
    """npy:DIR arrays both sides read: Fashion-MNIST for fmnist-cnn, CIFAR-shaped noise for
    resnet18-cifar (no CIFAR here; pixel values do not change the step's work)."""
    import numpy as np
    d = os.path.join(root, model)
    os.makedirs(d)
    if model == "fmnist-cnn":
        src = "/usr/share/datasets/fashion-mnist"
        parts = {"train_x": "train-images-idx3-ubyte.gz", "train_y": "train-labels-idx1-ubyte.gz",
                 "test_x": "t10k-images-idx3-ubyte.gz", "test_y": "t10k-labels-idx1-ubyte.gz"}
        for name, f in parts.items():
            a = read_idx(os.path.join(src, f))
            if name.endswith("_x"):
                a = a.reshape(a.shape[0], 1, 28, 28)
            np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(a))
    else:
        rng = np.random.default_rng(14)
        for name, count in (("train", 20000), ("test", 1000)):
            np.save(os.path.join(d, name + "_x.npy"),
                    rng.integers(0, 256, size=(count, 3, 32, 32), dtype=np.uint8))
            np.save(os.path.join(d, name + "_y.npy"), rng.integers(0, 10, size=count, dtype=np.int64))
    return d


def run_saturate(args, model, data_dir, batch, steps, seed):
    logdir = tempfile.mkdtemp(prefix="sat-step-")
    try:
        cmd = [args.saturate, "train", "--model", model, "--data", "npy:" + data_dir,
               "--batch-size", str(batch), "--steps", str(steps), "--optimizer", "sgd",
               "--lr", str(args.lr), "--schedule", "constant", "--warmup-steps", "0",
               "--threads", str(args.threads), "--seed", str(seed), "--no-eval", "-q",
               "--memory-format", args.memory_format, "--logdir", logdir]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=dict(os.environ, **args.env_saturate))
        steps_ms, faults = [], []
        with open(os.path.join(logdir, "steps.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "step":
                    steps_ms.append(r["step_ms"])
                    faults.append(r.get("page_faults", -1))
        timed = steps_ms[args.warmup:]
        return batch * len(timed) / (sum(timed) / 1000.0), statistics.mean(faults[args.warmup:])
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run_python(args, model, data_dir, batch, steps, seed):
    cmd = [sys.executable, __file__, "--python-worker", "--model", model, "--data-dir", data_dir,
           "--batch", str(batch), "--steps", str(steps), "--seed", str(seed),
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--lr", str(args.lr),
           "--python-memory-format", args.python_memory_format]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, **args.env_python)).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["samples_per_s"], r["faults_per_step"]


def parse_env(text):
    env = {}
    for item in text.split():
        k, _, v = item.partition("=")
        env[k] = v
    return env


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--saturate", default="build/saturate")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="fmnist-cnn,resnet18-cifar")
    p.add_argument("--batches", default="32,128,512,2048")
    p.add_argument("--samples", type=int, default=12288,
                   help="timed samples per fmnist-cnn run; resnet18-cifar runs a sixteenth")
    p.add_argument("--min-steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--env-python", default="", help="extra VAR=VALUE for the Python runs")
    p.add_argument("--env-saturate", default="", help="extra VAR=VALUE for the saturate runs")
    p.add_argument("--memory-format", default="contiguous",
                   help="saturate's --memory-format (contiguous or channels-last: what `tune` "
                        "picks is the user's run)")
    p.add_argument("--python-memory-format", default="contiguous",
                   help="the Python loop's layout: contiguous (as users write it) or "
                        "channels-last (model.to(memory_format=torch.channels_last), by hand)")
    # Worker mode.
    p.add_argument("--python-worker", action="store_true")
    p.add_argument("--model")
    p.add_argument("--data-dir")
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.python_worker:
        python_run(args)
        return
    args.env_python = parse_env(args.env_python)
    args.env_saturate = parse_env(args.env_saturate)
    # The order saturate's unit test pins (BatchIterator.ShuffleOrderIsStable).
    assert saturate_order(10, 1, 2) == [5, 3, 0, 4, 1, 9, 7, 6, 2, 8], "batch order differs"

    import torch
    root = tempfile.mkdtemp(prefix="sat-step-data-")
    try:
        print(f"step speed: saturate train vs Python PyTorch {torch.__version__}, SGD fp32, "
              f"{args.threads} threads (Python's default: {torch.get_num_threads()}), "
              f"{args.rounds} interleaved rounds, medians; warm-up {args.warmup} steps; "
              f"layout: saturate {args.memory_format}, python {args.python_memory_format}")
        if args.env_python:
            print(f"python env: {args.env_python}")
        if args.env_saturate:
            print(f"saturate env: {args.env_saturate}")
        print(f"{'model':15} {'batch':>6} {'steps':>6} {'python':>10} {'saturate':>10} "
              f"{'ratio':>7} {'range':>13} {'faults/step py':>15} {'sat':>7}")
        for model in args.models.split(","):
            data_dir = make_data(root, model)
            samples = args.samples if model == "fmnist-cnn" else args.samples // 16
            for batch in [int(b) for b in args.batches.split(",")]:
                steps = args.warmup + max(args.min_steps, samples // batch)
                py, sat, ratio, py_faults, sat_faults = [], [], [], [], []
                for r in range(args.rounds):
                    seed = 100 + r
                    first_sat = r % 2 == 0
                    a = run_saturate(args, model, data_dir, batch, steps, seed) if first_sat else None
                    b = run_python(args, model, data_dir, batch, steps, seed)
                    if not first_sat:
                        a = run_saturate(args, model, data_dir, batch, steps, seed)
                    sat.append(a[0])
                    py.append(b[0])
                    ratio.append(a[0] / b[0])
                    sat_faults.append(a[1])
                    py_faults.append(b[1])
                print(f"{model:15} {batch:6d} {steps:6d} {statistics.median(py):10.1f} "
                      f"{statistics.median(sat):10.1f} {statistics.median(ratio):7.3f} "
                      f"{min(ratio):6.3f}-{max(ratio):.3f} {statistics.median(py_faults):15.0f} "
                      f"{statistics.median(sat_faults):7.0f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
