#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Trial fidelity for short steps (issue 35): what `saturate tune` said the plan runs at, against
what `saturate train --config plan.json` then runs at, for a model whose steps take a
millisecond or two (mlp on Fashion-MNIST), where a few timed steps are the scheduler's noise.

Per round: one tune (its batch stage's estimate for the chosen configuration, and the confirm
stage's fresh figure the plan reports), then --runs train runs of the plan (steady-state
samples/s, no evaluation, no sinks). Prints each round and the medians; the ratio that matters
is the plan's figure over the median train run.

Usage (from the repository root, after `make build`):
  python3 bench/trial_fidelity.py [--model mlp] [--batch 64] [--rounds 3] [--runs 3]
      [--budget-s 90] [--saturate build/saturate]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def tune(args, folder):
    plan = os.path.join(folder, "plan.json")
    subprocess.run([args.saturate, "tune", "--model", args.model, "--data", args.data,
                    "--batch-size", str(args.batch), "--budget-s", str(args.budget_s),
                    "--out", plan], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=1800)
    with open(plan, encoding="utf-8") as f:
        p = json.load(f)
    stage = {s["name"]: s for s in p["stages"]}
    # The estimate the stages carried into confirm: the last stage before it.
    before_confirm = [s for s in p["stages"] if s["name"] != "confirm" and s["name"] != "ranks"]
    estimate = before_confirm[-1]["after_samples_per_s"] if before_confirm else 0.0
    return plan, p, estimate, stage.get("confirm", {})


def train(args, plan, folder):
    summary = os.path.join(folder, "summary.json")
    subprocess.run([args.saturate, "train", "--config", plan, "--steps", str(args.steps),
                    "--no-eval", "-q", "--summary-json", summary], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    with open(summary, encoding="utf-8") as f:
        return json.load(f)["samples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--budget-s", type=float, default=90)
    ap.add_argument("--saturate", default="build/saturate")
    args = ap.parse_args()
    ratios_plan, ratios_stage = [], []
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.rounds):
            plan, p, estimate, _ = tune(args, folder)
            reported = p["tuned"]["samples_per_s"]
            runs = [train(args, plan, folder) for _ in range(args.runs)]
            med = statistics.median(runs)
            ratios_plan.append(reported / med)
            ratios_stage.append(estimate / med)
            print(f"round {r + 1}: plan {p['config']['batch_size']} "
                  f"({p['config'].get('threads', 0)} threads): stages' estimate {estimate:.0f}, "
                  f"plan (confirm) {reported:.0f}, train runs "
                  f"{', '.join(f'{x:.0f}' for x in runs)} (median {med:.0f}): plan/train "
                  f"{reported / med:.2f}, stages/train {estimate / med:.2f}", flush=True)
    print(f"median plan/train {statistics.median(ratios_plan):.2f}, "
          f"stages/train {statistics.median(ratios_stage):.2f} over {args.rounds} rounds")


if __name__ == "__main__":
    main()
