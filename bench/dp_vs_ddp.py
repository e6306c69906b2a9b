#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data parallel on one machine (issue 15): `saturate train` with 2 ranks under torchrun vs
Python's DistributedDataParallel with Gloo on the same model, per-rank batch and threads, and
both against one process with the whole batch. Interleaved rounds, medians of the job's
samples/s (steady state: the first --warmup steps of each run are not timed).

Usage (from the repository root, after `make build`):
  ~/.cache/saturate/venv-torch-2.11.0/bin/python bench/dp_vs_ddp.py [--rounds 3] [--batch 64]
      [--steps 60] [--model fmnist-cnn]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_vs_pytorch as svp  # noqa: E402  (its models and data)

COMM_SHARE = {}  # (ranks, threads) -> communication / step time, per saturate run


def ddp_worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    x_all, y_all, mean, std = svp.load_train(args.data_dir)
    model = svp.python_model(args.model, *x_all.shape[1:])
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(x_all.shape[0], generator=g)[rank::world]
    step_s = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        idx = order[step * args.batch:(step + 1) * args.batch]
        svp.python_step(model, opt, x_all, y_all, idx, mean, std)
        step_s.append(time.perf_counter() - t0)
    timed = step_s[args.warmup:]
    if rank == 0:
        print(json.dumps({"job_samples_per_s": world * args.batch * len(timed) / sum(timed)}))
    dist.destroy_process_group()


def torchrun(nproc, cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", str(nproc), *cmd], check=True, text=True,
                          capture_output=True, env=env, timeout=900).stdout


def run_saturate(args, data_dir, nproc, threads, batch, seed):
    with tempfile.TemporaryDirectory(prefix="sat-dp-") as d:
        summary = os.path.join(d, "s.json")
        cmd = [args.saturate, "train", "--model", args.model, "--data", "npy:" + data_dir,
               "--batch-size", str(batch), "--steps", str(args.steps), "--optimizer", "sgd",
               "--lr", str(args.lr), "--schedule", "constant", "--warmup-steps", "0",
               "--threads", str(threads), "--seed", str(seed), "--no-eval", "-q",
               "--summary-json", summary]
        if nproc == 1:
            subprocess.run(cmd, check=True, capture_output=True, timeout=900)
        else:
            torchrun(nproc, ["--no-python", *cmd], threads)
        with open(summary) as f:
            j = json.load(f)
        ph = j["phases_ms"]
        COMM_SHARE.setdefault((nproc, threads), []).append(ph["communication"] / ph["step"])
        return j["job_samples_per_s"]


def run_ddp(args, data_dir, nproc, threads, batch, seed):
    out = torchrun(nproc, [__file__, "--ddp-worker", "--model", args.model, "--data-dir", data_dir,
                           "--batch", str(batch),
                           "--threads", str(threads), "--seed", str(seed), "--steps",
                           str(args.steps), "--warmup", str(args.warmup), "--lr", str(args.lr)],
                   threads)
    return json.loads(out.strip().splitlines()[-1])["job_samples_per_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--saturate", default="build/saturate")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=64, help="per-rank batch")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--model", default="fmnist-cnn")
    p.add_argument("--ddp-worker", action="store_true")
    p.add_argument("--data-dir")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.ddp_worker:
        ddp_worker(args)
        return
    import torch
    root = tempfile.mkdtemp(prefix="sat-dp-data-")
    try:
        data_dir = svp.make_data(root, args.model)
        runs = {
            "saturate 1 rank x 2 threads": lambda s: run_saturate(args, data_dir, 1, 2, 2 * args.batch, s),
            "saturate 2 ranks x 1 thread": lambda s: run_saturate(args, data_dir, 2, 1, args.batch, s),
            "python DDP 2 ranks x 1 thread": lambda s: run_ddp(args, data_dir, 2, 1, args.batch, s),
        }
        got = {k: [] for k in runs}
        ratio = []
        for r in range(args.rounds):
            names = list(runs) if r % 2 == 0 else list(reversed(runs))
            this = {}
            for name in names:
                this[name] = runs[name](100 + r)
                got[name].append(this[name])
            ratio.append(this["saturate 2 ranks x 1 thread"] / this["python DDP 2 ranks x 1 thread"])
        print(f"data parallel: {args.model}, torch {torch.__version__}, Gloo, SGD fp32, per-rank batch "
              f"{args.batch} (global {2 * args.batch}), {args.steps} steps ({args.warmup} untimed), "
              f"{args.rounds} interleaved rounds, medians of the job's samples/s")
        for name, v in got.items():
            print(f"  {name:32} {statistics.median(v):9.1f}  ({', '.join(f'{x:.1f}' for x in v)})")
        print(f"  saturate / python DDP at 2 ranks: {statistics.median(ratio):.3f} "
              f"({min(ratio):.3f}-{max(ratio):.3f})")
        share = COMM_SHARE.get((2, 1), [])
        if share:
            print(f"  saturate 2 ranks: communication not overlapped with backward "
                  f"{100 * statistics.median(share):.1f}% of the step (rank 0)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
