#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`saturate tune` against PyTorch Lightning's BatchSizeFinder on the same CNN, data and CPU.

Both sides tune fmnist-cnn (Conv 1->32, pool, Conv 32->64, pool, Linear 3136->128, Linear 128->10;
SGD lr 0.05, momentum 0.9, cross-entropy) on Fashion-MNIST with 2 intra-op threads:

  (1) Lightning: the wall time of one whole
        Tuner(trainer).scale_batch_size(model, datamodule=dm, mode="binsearch")
      call with Lightning's defaults (init_val 2, steps_per_trial 3, max_trials 25, max_val 8192,
      margin 0.05), Trainer(accelerator="cpu", devices=1, logger=False,
      enable_checkpointing=False, enable_progress_bar=False), in a fresh Python process per repeat
      (data already in memory; the process wall time, imports and data loading included, is
      reported too); the batch it returns and the training/validation steps it ran per batch.
  (2) saturate: the wall time of the whole `saturate tune` process (data loading included) and the
      batch in its plan (`config.batch_size`, with `config.accumulate` and `config.precision`).
  (3) The samples/s of each chosen batch measured on one harness:
        saturate train --batch-size B --steps W+T --threads 2 --no-eval --logdir DIR
      with the rate taken from DIR/steps.jsonl over the steps after the first W (untimed warm-up,
      default 2); T is 58 for small batches and shrinks for large ones so that a step of ~7800
      samples (several seconds on 2 cores) does not make the run take many minutes.

Each repeat runs Lightning and saturate back to back (the order alternates between repeats) and
then measures the throughput of the batches chosen, so drift in the machine's load hits both.
On a CPU Lightning never sees an out-of-memory error, so binsearch only doubles until max_trials
or max_val: with max_val 8192 it stops at 8192 without running it and returns 95% of that.

Usage:
  bench/lightning_batch_finder.py [--saturate build/saturate] [--repeats 2] [--budget-s 120]
                                  [--memory-limit 2GiB] [--max-val 8192]

Environment. Lightning runs in its own venv that sees the torch 2.11.0 venv's packages through a
.pth file, so torch is never reinstalled. The script creates it when `lightning` cannot be
imported and re-runs itself with it; by hand that is:

  T=~/.cache/saturate/venv-torch-2.11.0
  V=~/.cache/saturate/venv-bench-lightning
  $T/bin/python -m venv $V
  echo "$T/lib/python3.11/site-packages" > $V/lib/python3.11/site-packages/_saturate_torch_venv.pth
  echo torch==2.11.0 > /tmp/torch-constraint.txt
  $V/bin/pip install lightning -c /tmp/torch-constraint.txt
  $V/bin/python bench/lightning_batch_finder.py

(tested with lightning 2.6.6 and torch 2.11.0+cu130 on CPU).
"""

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = os.environ.get("SATURATE_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
TORCH_VENV = os.path.expanduser(os.environ.get("SATURATE_TORCH_VENV", "~/.cache/saturate/venv-torch-2.11.0"))
BENCH_VENV = os.path.expanduser(os.environ.get("SATURATE_LIGHTNING_VENV",
                                               "~/.cache/saturate/venv-bench-lightning"))
TORCH_VERSION = "2.11.0"
MEAN, STD = 0.2860, 0.3530
LR, MOMENTUM = 0.05, 0.9
THREADS = 2
VAL_FRACTION = 0.05  # what `saturate tune` holds out; Lightning gets the same share as val split


# ----------------------------------------------------------------------------------------------
# environment


def ensure_lightning_env():
    """Re-exec under the bench venv when lightning is missing here; create the venv if needed."""
    try:
        import lightning  # noqa: F401
        import torch
        if not torch.__version__.startswith(TORCH_VERSION):
            sys.exit("torch %s found, want %s" % (torch.__version__, TORCH_VERSION))
        return
    except ImportError:
        pass
    py = os.path.join(BENCH_VENV, "bin", "python")
    if os.path.realpath(sys.executable) == os.path.realpath(py) and os.environ.get("_LB_REEXEC"):
        sys.exit("lightning is still not importable from %s" % py)
    if not os.path.exists(py):
        tpy = os.path.join(TORCH_VENV, "bin", "python")
        print("setting up %s (lightning on top of %s's torch)" % (BENCH_VENV, TORCH_VENV), flush=True)
        subprocess.check_call([tpy, "-m", "venv", BENCH_VENV])
        site = subprocess.check_output(
            [tpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
        bsite = subprocess.check_output(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
        with open(os.path.join(bsite, "_saturate_torch_venv.pth"), "w") as f:
            f.write(site + "\n")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as c:
        c.write("torch==%s\n" % TORCH_VERSION)
    subprocess.check_call([py, "-m", "pip", "install", "-q", "lightning", "-c", c.name])
    os.unlink(c.name)
    env = dict(os.environ, _LB_REEXEC="1")
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


# ----------------------------------------------------------------------------------------------
# Lightning side (runs in a child process: `--lightning-worker OUT.json`)


from loader_vs_torchvision import read_idx  # noqa: E402  (same directory)


def lightning_worker(out_path, max_val, seed):
    t_process = time.perf_counter()
    import logging
    import resource
    import warnings

    import torch
    from torch import nn
    import lightning as L
    from lightning.pytorch.tuner import Tuner

    torch.set_num_threads(THREADS)
    torch.manual_seed(seed)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    x = torch.from_numpy(read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")).copy())
    y = torch.from_numpy(read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")).astype("int64"))
    x = ((x.float() / 255.0 - MEAN) / STD).unsqueeze(1).contiguous()
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
    n_val = int(round(VAL_FRACTION * x.shape[0]))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    train_ds = torch.utils.data.TensorDataset(x[train_idx], y[train_idx])
    val_ds = torch.utils.data.TensorDataset(x[val_idx], y[val_idx])

    class FashionMNIST(L.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 64  # a user's starting batch (saturate's --batch-size default too)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(train_ds, batch_size=self.batch_size, shuffle=True,
                                               num_workers=0)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(val_ds, batch_size=self.batch_size, num_workers=0)

    class FmnistCnn(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
            self.train_steps = {}  # batch size -> training steps run
            self.val_steps = {}
            self.train_s = {}      # batch size -> seconds between first and last train step start

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _):
            xb, yb = batch
            b = int(xb.shape[0])
            self.train_steps[b] = self.train_steps.get(b, 0) + 1
            return nn.functional.cross_entropy(self(xb), yb)

        def validation_step(self, batch, _):
            xb, yb = batch
            b = int(xb.shape[0])
            self.val_steps[b] = self.val_steps.get(b, 0) + 1
            return nn.functional.cross_entropy(self(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)

    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            m = record.getMessage()
            if "atch size" in m or "max_val" in m or "margin" in m:
                messages.append(m)

    logging.getLogger("lightning.pytorch").addHandler(Collect(level=logging.INFO))

    model, dm = FmnistCnn(), FashionMNIST()
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, max_epochs=1,
                            default_root_dir=root)
        tuner = Tuner(trainer)
        t0 = time.perf_counter()
        chosen = tuner.scale_batch_size(model, datamodule=dm, mode="binsearch", init_val=2,
                                        steps_per_trial=3, max_trials=25, max_val=max_val)
        call_s = time.perf_counter() - t0
    result = {
        "call_s": call_s,
        "process_to_return_s": time.perf_counter() - t_process,
        "batch": chosen,
        "dm_batch_size": dm.batch_size,
        "train_steps": {str(k): v for k, v in sorted(model.train_steps.items())},
        "val_steps": {str(k): v for k, v in sorted(model.val_steps.items())},
        "trials": sum(model.train_steps.values()) // 3,  # steps_per_trial 3
        "init_batch_size": 64,
        "train_samples": sum(k * v for k, v in model.train_steps.items()),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "messages": messages,
        "torch": torch.__version__,
        "lightning": L.__version__,
        "threads": torch.get_num_threads(),
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


# ----------------------------------------------------------------------------------------------
# driver


def run_logged(cmd, log_path, retries=3):
    """Run cmd with output to log_path; retry if the binary is missing or fails to start (rebuilds)."""
    for attempt in range(retries + 1):
        t0 = time.perf_counter()
        try:
            with open(log_path, "w") as log:
                rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        except OSError as e:  # binary being relinked
            rc, err = -1, str(e)
        wall = time.perf_counter() - t0
        if rc == 0:
            return wall
        # a crash at start-up (exec failure, missing library while relinking) is retried
        if attempt < retries and (rc in (-1, 126, 127) or wall < 2.0):
            print("    %s failed to start (rc %s); retrying in 30 s" % (cmd[0], rc), flush=True)
            time.sleep(30)
            continue
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError("command failed (rc %s): %s\n%s" % (rc, " ".join(map(shlex.quote, cmd)), tail))


def recipe_flags():
    return ["--model", "fmnist-cnn", "--data", "fashion-mnist", "--threads", str(THREADS),
            "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM), "--weight-decay", "0",
            "--schedule", "constant", "--warmup-steps", "0"]


def run_lightning(args, work, r):
    out = os.path.join(work, "lightning-%d.json" % r)
    cmd = [sys.executable, os.path.abspath(__file__), "--lightning-worker", out,
           "--max-val", str(args.max_val), "--seed", str(args.seed)]
    wall = run_logged(cmd, os.path.join(work, "lightning-%d.log" % r), retries=0)
    with open(out) as f:
        res = json.load(f)
    res["process_s"] = wall
    res["cmd"] = cmd
    return res


def parse_size(text):
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]i?B|B)?\s*", text)
    if not m:
        return None
    mult = {"B": 1, None: 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
            "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)]
    return float(m.group(1)) * mult


def run_tune(args, work, r):
    plan = os.path.join(work, "plan-%d.json" % r)
    cmd = [args.saturate, "tune"] + recipe_flags() + ["--budget-s", str(args.budget_s), "--out", plan]
    if args.memory_limit:
        cmd += ["--memory-limit", args.memory_limit]
    log = os.path.join(work, "tune-%d.log" % r)
    wall = run_logged(cmd, log)
    with open(plan) as f:
        p = json.load(f)
    with open(log) as f:
        text = f.read()
    # header: "..., memory 21.51 GiB less 10% reserve, ..." (the limit tune worked under)
    m = re.search(r"memory ([\d.]+ [KMGT]iB) less (\d+)% reserve", text)
    limit = parse_size(m.group(1)) if m else None
    usable = limit * (1 - int(m.group(2)) / 100.0) if m else None
    cfg = p["config"]
    return {"process_s": wall, "tune_wall_s": p.get("tune_wall_s"), "batch": cfg["batch_size"],
            "accumulate": cfg.get("accumulate", 1), "precision": cfg.get("precision", "fp32"),
            "probe_steps": p.get("probe_steps"), "trials": len(p.get("trials", [])),
            "trial_steps": sum(t.get("steps", 0) for t in p.get("trials", [])),
            "quality": p.get("quality", {}).get("status"),
            "tuned_samples_per_s": p.get("tuned", {}).get("samples_per_s"),
            "limit_bytes": limit, "usable_bytes": usable, "cmd": cmd, "plan": plan}


def measure(args, work, tag, batch, accumulate=1, precision="fp32"):
    timed = max(3, min(args.measure_steps - args.warmup_steps,
                       math.ceil(args.measure_samples / batch)))
    steps = args.warmup_steps + timed
    logdir = os.path.join(work, "train-%s" % tag)
    summary = os.path.join(work, "train-%s.json" % tag)
    cmd = [args.saturate, "train"] + recipe_flags() + [
        "--batch-size", str(batch), "--accumulate", str(accumulate), "--precision", precision,
        "--steps", str(steps), "--no-eval", "--quiet", "--summary-json", summary, "--logdir", logdir]
    if args.memory_limit:
        cmd += ["--memory-limit", args.memory_limit]
    run_logged(cmd, os.path.join(work, "train-%s.log" % tag))
    samples = ms = 0.0
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "step" and rec["step"] >= args.warmup_steps:
                samples += rec["samples"]
                ms += rec["step_ms"]
    with open(summary) as f:
        s = json.load(f)
    return {"samples_per_s": samples / (ms / 1000.0), "steps": steps, "timed_steps": timed,
            "peak_memory_bytes": s.get("peak_memory_bytes"), "cmd": cmd}


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return "%.2f %s" % (b / div, unit)
    return "%d B" % b


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--saturate", default=os.path.join(REPO, "build", "saturate"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=120, help="saturate tune --budget-s")
    ap.add_argument("--memory-limit", default="", help="saturate --memory-limit, e.g. 256MiB")
    ap.add_argument("--max-val", type=int, default=8192, help="Lightning's max_val (default: its own)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps per throughput run")
    ap.add_argument("--measure-steps", type=int, default=60, help="most steps per throughput run")
    ap.add_argument("--measure-samples", type=int, default=30000,
                    help="timed samples per throughput run (fewer steps for large batches, >= 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default="", help="keep logs, plans and summaries here")
    ap.add_argument("--lightning-worker", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args()

    ensure_lightning_env()
    if args.lightning_worker:
        lightning_worker(args.lightning_worker, args.max_val, args.seed)
        return

    work = args.workdir or tempfile.mkdtemp(prefix="lightning-bench-")
    os.makedirs(work, exist_ok=True)
    import lightning
    import torch
    print("saturate tune vs Lightning BatchSizeFinder (binsearch), fmnist-cnn on Fashion-MNIST, CPU, "
          "%d threads" % THREADS)
    print("torch %s, lightning %s, python %s; saturate %s; logs in %s"
          % (torch.__version__, lightning.__version__, sys.executable, args.saturate, work))
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), flush=True)

    t_start = time.perf_counter()
    L, S, ML, MS = [], [], [], []
    for r in range(args.repeats):
        order = ("lightning", "saturate") if r % 2 == 0 else ("saturate", "lightning")
        for side in order:
            if side == "lightning":
                res = run_lightning(args, work, r)
                L.append(res)
                print("  repeat %d lightning: scale_batch_size %.1f s (process %.1f s) -> batch %s; "
                      "%d trials, %d train steps, %d val steps"
                      % (r, res["call_s"], res["process_s"], res["batch"], res["trials"],
                         sum(res["train_steps"].values()), sum(res["val_steps"].values())), flush=True)
            else:
                res = run_tune(args, work, r)
                S.append(res)
                print("  repeat %d saturate:  tune process %.1f s -> batch %d (accumulate %d, %s); "
                      "%d trials, %d trial steps, quality %s"
                      % (r, res["process_s"], res["batch"], res["accumulate"], res["precision"],
                         res["trials"], res["trial_steps"], res["quality"]), flush=True)
        ml = measure(args, work, "lightning-%d" % r, L[-1]["batch"])
        ms = measure(args, work, "saturate-%d" % r, S[-1]["batch"], S[-1]["accumulate"],
                     S[-1]["precision"])
        ML.append(ml)
        MS.append(ms)
        print("  repeat %d throughput: lightning's batch %d %.1f samples/s (peak %s); saturate's batch "
              "%d %.1f samples/s (peak %s)"
              % (r, L[-1]["batch"], ml["samples_per_s"], fmt_bytes(ml["peak_memory_bytes"]),
                 S[-1]["batch"], ms["samples_per_s"], fmt_bytes(ms["peak_memory_bytes"])), flush=True)

    lw = med([x["call_s"] for x in L])
    lp = med([x["process_s"] for x in L])
    sw = med([x["process_s"] for x in S])
    lr = med([x["samples_per_s"] for x in ML])
    sr = med([x["samples_per_s"] for x in MS])
    print()
    print("| %-48s | %-32s | %-32s |" % ("median of %d repeats" % args.repeats, "Lightning binsearch",
                                           "saturate tune"))
    print("|%s|%s|%s|" % ("-" * 50, "-" * 34, "-" * 34))
    rows = [
        ("wall time of the tuning (s)", "%.1f (call)" % lw, "%.1f (process)" % sw),
        ("wall time incl. Python start + data load (s)", "%.1f (process)" % lp, "%.1f" % sw),
        ("per repeat (s)", ", ".join("%.1f" % x["call_s"] for x in L),
         ", ".join("%.1f" % x["process_s"] for x in S)),
        ("batch chosen (per repeat)", ", ".join(str(x["batch"]) for x in L),
         ", ".join("%d%s" % (x["batch"], " (accumulate %d)" % x["accumulate"] if x["accumulate"] > 1
                             else "") for x in S)),
        ("saturate quality guard (per repeat)", "-", ", ".join(str(x["quality"]) for x in S)),
        ("trials in the search", "%d (%d batches, %s..%s)" % (
            L[0]["trials"], len(L[0]["train_steps"]), min(map(int, L[0]["train_steps"])),
            max(map(int, L[0]["train_steps"]))), ", ".join("%d" % x["trials"] for x in S)),
        ("training steps in the search (per repeat)",
         ", ".join(str(sum(x["train_steps"].values())) for x in L),
         ", ".join(str(x["trial_steps"]) for x in S) + " + guard runs"),
        ("samples/s of the chosen batch (saturate train)", "%.1f" % lr, "%.1f" % sr),
        ("  per repeat", ", ".join("%.1f" % x["samples_per_s"] for x in ML),
         ", ".join("%.1f" % x["samples_per_s"] for x in MS)),
        ("  tune's own estimate of its plan (per repeat)", "-",
         ", ".join("%.1f" % (x["tuned_samples_per_s"] or 0) for x in S)),
        ("peak memory of that batch (saturate train)", fmt_bytes(ML[0]["peak_memory_bytes"]),
         fmt_bytes(MS[0]["peak_memory_bytes"])),
        ("peak RSS of the tuning process", fmt_bytes(L[0]["peak_rss_bytes"]), "-"),
    ]
    for a, b, c in rows:
        print("| %-48s | %-32s | %-32s |" % (a, b, c))
    print()
    print("Lightning's tuning took %.2fx saturate tune's wall time (call) / %.2fx (process); "
          "the batch it chose trains at %.2fx the samples/s of saturate's choice."
          % (lw / sw, lp / sw, lr / sr))
    print("Lightning per-batch steps (train / val) in repeat 0: %s / %s"
          % (json.dumps(L[0]["train_steps"]), json.dumps(L[0]["val_steps"])))
    msgs = [m for m in L[0]["messages"] if "max" in m or "margin" in m or "Stopping" in m]
    if msgs:
        print("Lightning said: " + " | ".join(msgs))
    ran = {int(k) for k in L[0]["train_steps"]}
    if 2 not in ran:
        print("Lightning's first trial (init_val 2) ran with the datamodule's initial batch %d: it sets "
              "the attribute but does not rebuild the loader before that trial."
              % L[0]["init_batch_size"])
    if L[0]["batch"] not in ran:
        print("Lightning's returned batch %d was never run during its search (largest run: %d)."
              % (L[0]["batch"], max(ran)))
    usable = S[0]["usable_bytes"]
    if usable:
        peak = ML[0]["peak_memory_bytes"]
        print("saturate's memory limit: %s less reserve = %s usable%s; Lightning's batch %d peaks at %s "
              "in saturate train: %s."
              % (fmt_bytes(S[0]["limit_bytes"]), fmt_bytes(usable),
                 " (--memory-limit %s)" % args.memory_limit if args.memory_limit
                 else " (no --memory-limit: the machine's available memory)",
                 L[0]["batch"], fmt_bytes(peak), "fits" if peak <= usable else "does NOT fit"))
    print()
    print("commands (repeat 0):")
    print("  lightning: " + " ".join(map(shlex.quote, L[0]["cmd"])))
    print("  saturate:  " + " ".join(map(shlex.quote, S[0]["cmd"])))
    print("  measure:   " + " ".join(map(shlex.quote, ML[0]["cmd"])))
    print("  measure:   " + " ".join(map(shlex.quote, MS[0]["cmd"])))
    print("  (samples/s from <logdir>/steps.jsonl over steps >= %d)" % args.warmup_steps)
    print("load average at end: %.2f %.2f %.2f; whole benchmark %.1f s"
          % (os.getloadavg() + (time.perf_counter() - t_start,)))


if __name__ == "__main__":
    main()
