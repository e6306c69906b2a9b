#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Language-model training speed: `saturate train --model gpt-*` vs the same GPT in Python
PyTorch eager (issue 18), plus tokenisation throughput and cache size.

Both sides train the same model (tests/python/fixtures/gpt_torch.py mirrors src/models/gpt.cpp;
tests/unit/models/gpt_test.cpp checks the two give the same loss for the same weights) on random
windows of the same byte-tokenised corpus, with AdamW (lr 1e-3, weight decay 1e-4), fp32, the
same batch, sequence length and intra-op threads, denormals flushed on both sides. Each run is a
fresh process. Rounds interleave the two sides and alternate which goes first; the table gives
medians of tokens/s and of the per-round ratio. Both time whole steps after `--warmup` steps
(saturate's from its steps.jsonl). saturate's AdamW is one fused kernel per step; the Python
side runs torch.optim.AdamW as a script gets it by default on CPU (a loop over parameters), or
with fused=True (`--python-optimizer fused`), which shows how much of the gap that is.

Usage (from the repository root, after `make build`):
  ~/.cache/saturate/venv-torch-2.11.0/bin/python bench/gpt_vs_pytorch.py --corpus DIR \
      [--saturate build/saturate] [--model gpt-mini] [--seq-len 128] [--batch 16] \
      [--steps 60] [--warmup 10] [--rounds 3] [--threads 2] [--python-optimizer default|fused]
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

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"gpt-mini": (4, 4, 128), "gpt-small": (6, 6, 384)}


def corpus_tokens(folder):
    """The byte tokenizer's stream: files in name order, 256 between files (text_corpus.cpp)."""
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
    files.sort()
    ids = []
    for f in files:
        ids.extend(open(f, "rb").read())
        if len(files) > 1:
            ids.append(256)
    return ids


def python_side(a):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "fixtures"))
    from gpt_torch import GPT, loss_of
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    layers, heads, width = SIZES[a.model]
    data = torch.tensor(corpus_tokens(a.corpus), dtype=torch.long)
    end = int(len(data) * 0.9)
    model = GPT(257, layers, heads, width, 256)
    # "default" is what a script gets from torch.optim.AdamW on CPU (the per-parameter loop);
    # "fused" asks for the fused kernel saturate's AdamW runs.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4,
                            fused=True if a.python_optimizer == "fused" else None)
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        ix = torch.randint(0, end - a.seq_len - 1, (a.batch,))
        x = torch.stack([data[i:i + a.seq_len] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.seq_len] for i in ix])
        loss = loss_of(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    steady = times[a.warmup:]
    print(json.dumps({"tokens_per_s": a.batch * a.seq_len * len(steady) / sum(steady)}))


def saturate_side(a, tmp):
    logdir = os.path.join(tmp, "run")
    shutil.rmtree(logdir, ignore_errors=True)
    cmd = [a.saturate, "train", "--model", a.model, "--data", "text:" + a.corpus,
           "--seq-len", str(a.seq_len), "--batch-size", str(a.batch), "--steps", str(a.steps),
           "--lr", "1e-3", "--optimizer", "adamw", "--weight-decay", "1e-4",
           "--threads", str(a.threads), "--no-eval", "--logdir", logdir]
    env = {**os.environ, "SATURATE_CACHE_DIR": os.path.join(tmp, "cache")}
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=1800)
    steps = [json.loads(l) for l in open(os.path.join(logdir, "steps.jsonl"))]
    steps = [s for s in steps if s.get("type") == "step"][a.warmup:]
    return sum(s["tokens"] for s in steps) / (sum(s["step_ms"] for s in steps) / 1000)


def python_run(a):
    cmd = [sys.executable, os.path.abspath(__file__), "--python-side", "--corpus", a.corpus,
           "--model", a.model, "--seq-len", str(a.seq_len), "--batch", str(a.batch),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads),
           "--python-optimizer", a.python_optimizer]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


def tokenisation(a, tmp):
    """Tokenising the corpus into a fresh cache (the time saturate logs), then a run that reads
    the cache; the cache's size."""
    import re
    env = {**os.environ, "SATURATE_CACHE_DIR": os.path.join(tmp, "tokcache")}
    shutil.rmtree(env["SATURATE_CACHE_DIR"], ignore_errors=True)
    corpus_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.corpus)
                       for f in fs if not f.startswith("."))
    for attempt in ("first", "second"):
        p = subprocess.run([a.saturate, "train", "--model", a.model, "--data", "text:" + a.corpus,
                            "--seq-len", str(a.seq_len), "--steps", "1", "--no-eval"],
                           capture_output=True, text=True, env=env, timeout=1800)
        line = next((l for l in p.stderr.splitlines() if "tokens, bytes-v1 tokenizer" in l), "")
        m = re.search(r"tokenised in ([0-9.]+) s", line)
        if m:
            s = float(m.group(1))
            print(f"  {attempt} run: tokenised {corpus_bytes / 2**20:.2f} MiB in {s:.3f} s "
                  f"({corpus_bytes / 2**20 / max(s, 1e-9):.0f} MiB/s)")
        else:
            print(f"  {attempt} run: " + ("read the cache" if ", cached" in line
                                          else line or p.stderr[-300:]))
    for r, _, fs in os.walk(env["SATURATE_CACHE_DIR"]):
        for f in fs:
            if f.endswith(".tokens"):
                print(f"  cache {f}: {os.path.getsize(os.path.join(r, f)) / 2**20:.2f} MiB")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--saturate", default="build/saturate")
    p.add_argument("--corpus", required=True)
    p.add_argument("--model", default="gpt-mini", choices=sorted(SIZES))
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--python-side", action="store_true")
    p.add_argument("--python-optimizer", choices=["default", "fused"], default="default")
    p.add_argument("--skip-tokenisation", action="store_true")
    a = p.parse_args()
    if a.python_side:
        return python_side(a)
    with tempfile.TemporaryDirectory(prefix="saturate-gpt-bench-") as tmp:
        sat, py, ratios = [], [], []
        if a.rounds == 0:
            print("tokenisation (saturate's own timing):")
            return tokenisation(a, tmp)
        for r in range(a.rounds):
            order = ["saturate", "python"] if r % 2 == 0 else ["python", "saturate"]
            got = {}
            for side in order:
                got[side] = saturate_side(a, tmp) if side == "saturate" else python_run(a)
            sat.append(got["saturate"])
            py.append(got["python"])
            ratios.append(got["saturate"] / got["python"])
            print(f"round {r + 1}: saturate {got['saturate']:.0f} tokens/s, "
                  f"python {got['python']:.0f} tokens/s, ratio {ratios[-1]:.3f}", flush=True)
        print(f"{a.model} seq {a.seq_len} batch {a.batch} threads {a.threads}: median saturate "
              f"{statistics.median(sat):.0f} tokens/s, python eager ({a.python_optimizer} AdamW) "
              f"{statistics.median(py):.0f} "
              f"tokens/s, median ratio {statistics.median(ratios):.3f}")
        if not a.skip_tokenisation:
            print("tokenisation (saturate's own timing):")
            tokenisation(a, tmp)


if __name__ == "__main__":
    main()
