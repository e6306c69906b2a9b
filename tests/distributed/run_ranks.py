#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Starts N ranks of a command with the environment torchrun gives its workers, on a free port
of 127.0.0.1, waits for all under a hard time limit and leaves no process behind.

Usage: run_ranks.py --case NAME --worker BIN
Cases:
  collectives       2 ranks: all-reduce, broadcast, all-gather, barrier agree
  equivalence       2 ranks of batch 16 take one process's steps of batch 32 (accumulate 1, 2)
  equivalence_batchnorm  the same with a BatchNorm CNN against one process that
                    accumulates the ranks' micro-batches
  noise_scale       2 ranks measure the gradient noise scale within 10% of the truth
  tensor_parallel   the GPT's heads and MLP columns over 2 ranks end 5 SGD steps with one
                    process's losses and (gathered) parameters
  tensor_parallel_fp16  under fp16, an overflow in one share's gradient makes both shares skip
                    the step, as one process does
  pipeline_2stages, pipeline_4stages, pipeline_mlp, pipeline_gpt_2stages, pipeline_gpt_4stages
                    the ranks as pipeline stages (GPipe, 1F1B; 1, 4, 8 micro-batches) end 5
                    SGD steps with one process's parameters and losses
  pipeline_gpt_tensor_parallel  the same with the GPT split by tensor over 2 ranks and into 2
                    stages (4 ranks)
  oom_one_rank      rank 1 runs out of memory alone: both trials end out of memory (and,
                    without the agreement, rank 0 times out)
  store_unreachable rank 1 of 2 with no rank 0: exits 2 within its --dist-timeout, naming the store
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def start(cmd, rank, world, port):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_all(procs, limit_s):
    """(returncode, stdout, stderr) per process; kills every process group past the limit."""
    deadline = time.time() + limit_s
    out = []
    try:
        for p in procs:
            left = max(0.1, deadline - time.time())
            o, e = p.communicate(timeout=left)
            out.append((p.returncode, o, e))
    except subprocess.TimeoutExpired:
        fail(f"ranks still running after {limit_s} s")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return out


def all_ranks_ok(args, mode, ranks, limit_s, extra=()):
    port = free_port()
    procs = [start([args.worker, mode, *extra], r, ranks, port) for r in range(ranks)]
    for r, (code, o, e) in enumerate(wait_all(procs, limit_s)):
        if code != 0 or f"rank {r} ok" not in o:
            fail(f"rank {r}: exit {code}\n{o}\n{e}")
        print(o, end="")


def case_collectives(args):
    all_ranks_ok(args, "collectives", 2, 60)


def case_equivalence(args):
    all_ranks_ok(args, "equivalence", 2, 100)


def case_equivalence_batchnorm(args):
    all_ranks_ok(args, "equivalence_batchnorm", 2, 110)


def case_noise_scale(args):
    all_ranks_ok(args, "noise_scale", 2, 90)


def case_pipeline_2stages(args):
    all_ranks_ok(args, "pipeline", 2, 100, ("60", "fmnist-cnn"))


def case_pipeline_4stages(args):
    all_ranks_ok(args, "pipeline", 4, 100, ("60", "fmnist-cnn"))


def case_pipeline_mlp(args):
    # mlp's first layer (flatten) has no parameters: stage 0's output needs no gradient.
    all_ranks_ok(args, "pipeline", 2, 100, ("60", "mlp"))


GPT_TINY = "gpt-mini:layers=2,heads=2,width=32,context=8"


def case_pipeline_gpt_2stages(args):
    # The embeddings and the first block, then the second block and the head: the output
    # layer's weight (tied to the token embedding) lives on both stages.
    all_ranks_ok(args, "pipeline", 2, 100, ("60", GPT_TINY))


def case_pipeline_gpt_4stages(args):
    # One layer a stage: the embeddings, block 0, block 1, the head.
    all_ranks_ok(args, "pipeline", 4, 100, ("60", GPT_TINY))


def case_pipeline_gpt_tensor_parallel(args):
    # The GPT split by tensor over 2 ranks and into 2 stages (4 ranks): each stage's blocks are
    # shares, each share's stages a pipeline.
    all_ranks_ok(args, "pipeline", 4, 100, ("60", GPT_TINY, "2"))


def case_pipeline_fp16(args):
    # fp16's loss scaler through the trainer over 2 stages: the same skips and scale as one
    # process.
    all_ranks_ok(args, "pipeline_fp16", 2, 100, ("60",))


def case_tensor_parallel(args):
    all_ranks_ok(args, "tensor_parallel", 2, 100, ("60",))


def case_tensor_parallel_fp16(args):
    # fp16's loss scaler over 2 shares: an overflow in one share's gradient only makes both skip.
    all_ranks_ok(args, "tensor_parallel_fp16", 2, 100, ("60",))


def case_oom_one_rank(args):
    # One rank's out-of-memory ends the trial on both, at once; without the agreement the other
    # rank waits in its all-reduce until the group's timeout (5 s here) and fails.
    t0 = time.time()
    port = free_port()
    procs = [start([args.worker, "oom_one_rank", "30"], r, 2, port) for r in range(2)]
    for r, (code, o, e) in enumerate(wait_all(procs, 60)):
        if code != 0 or f"rank {r} ok" not in o:
            fail(f"rank {r}: exit {code}\n{o}\n{e}")
        if r == 0 and "another rank ran out of memory" not in o:
            fail(f"rank 0 does not say another rank ran out of memory:\n{o}")
    took = time.time() - t0
    if took > 25:
        fail(f"the agreed OOM took {took:.1f} s")
    port = free_port()
    procs = [start([args.worker, "oom_one_rank_unagreed", "5"], r, 2, port) for r in range(2)]
    results = wait_all(procs, 60)
    if results[0][0] == 0:
        fail(f"without the agreement rank 0 still passed:\n{results[0][1]}\n{results[0][2]}")
    print(f"agreed: both ranks out of memory in {took:.1f} s; unagreed: rank 0 exit "
          f"{results[0][0]}: {results[0][2].strip().splitlines()[-1][:200]}")


def case_store_unreachable(args):
    port = free_port()  # nobody listens there
    t0 = time.time()
    [(code, o, e)] = wait_all([start([args.worker, "collectives", "3"], 1, 2, port)], 60)
    took = time.time() - t0
    if code != 2 or "could not join the store at 127.0.0.1:" not in e or "rank 1 of 2" not in e:
        fail(f"exit {code}, expected 2 naming the store:\n{e}")
    if took > 30:
        fail(f"took {took:.1f} s for a 3 s --dist-timeout")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--worker", required=True)
    args = ap.parse_args()
    globals()["case_" + args.case](args)
    print(f"{args.case}: ok")


if __name__ == "__main__":
    main()
