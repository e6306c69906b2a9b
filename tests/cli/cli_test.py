# SPDX-License-Identifier: Apache-2.0
"""Runs the built `saturate` binary on fixtures made here and checks exit codes, one-line errors
and output against golden files (times, sizes and other volatile values masked).

Usage: cli_test.py --saturate BIN --fixtures DIR --golden DIR --case NAME
Set SATURATE_UPDATE_GOLDEN=1 to rewrite the golden files from the current output.
"""
import argparse
import collections
import gzip
import json
import math
import glob
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ARGS = None


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(*argv, timeout=240, env=None):
    full_env = None if env is None else {**os.environ, **env}
    p = subprocess.run([ARGS.saturate, *argv], capture_output=True, text=True, timeout=timeout,
                       env=full_env)
    return p.returncode, p.stdout, p.stderr


def mask(text):
    text = re.sub(r"/tmp/saturate-cli-[^/\s,]+", "<tmp>", text)
    text = re.sub(r"\b\d+(\.\d+)? (ms|s|min|h)\b( \d+ (s|min)\b)?", "<duration>", text)
    text = re.sub(r"\d+\.\d+", "<num>", text)
    text = re.sub(r"\b\d+\b", "<n>", text)
    text = re.sub(r"(?<=\S) {2,}(?=\S)", "  ", text)  # column padding follows number widths
    return text


def check_golden(name, text, masked=True):
    path = os.path.join(ARGS.golden, name)
    got = mask(text) if masked else text
    if os.environ.get("SATURATE_UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(got)
        return
    if not os.path.exists(path):
        fail(f"golden file {path} is missing; run with SATURATE_UPDATE_GOLDEN=1\n{got}")
    with open(path) as f:
        want = f.read()
    if want != got:
        fail(f"output differs from {path}\n--- want\n{want}--- got\n{got}")


def expect_usage_error(argv, must_contain):
    code, out, err = run(*argv)
    if code != 2:
        fail(f"{argv}: exit code {code}, expected 2\nstdout: {out}\nstderr: {err}")
    lines = [l for l in err.splitlines() if l.strip()]
    if len(lines) != 1 or not lines[0].startswith("saturate: error: "):
        fail(f"{argv}: expected exactly one 'saturate: error:' line on stderr, got:\n{err}")
    if must_contain not in lines[0]:
        fail(f"{argv}: error line lacks '{must_contain}':\n{lines[0]}")
    if out:
        fail(f"{argv}: printed results on stdout despite the error:\n{out}")


# ---- IDX fixtures -------------------------------------------------------------------------------

def idx_bytes(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">i", d) for d in dims) + payload


def pattern(n, classes, seed):
    """n 28x28 images; class k has a bright square at grid cell k; plus their labels."""
    state = seed * 2654435761 % (2 ** 32) or 1
    images, labels = bytearray(), bytearray()
    for _ in range(n):
        state = (1103515245 * state + 12345) % (2 ** 31)
        k = state % classes
        img = bytearray(28 * 28)
        for i in range(28 * 28):
            state = (1103515245 * state + 12345) % (2 ** 31)
            img[i] = state % 48
        r0, c0 = (k // 4) * 7, (k % 4) * 7
        for r in range(r0, r0 + 7):
            for c in range(c0, c0 + 7):
                img[r * 28 + c] = 230
        images += img
        labels.append(k)
    return bytes(images), bytes(labels)


def write(path, data, gz=True):
    opener = gzip.open if gz else open
    with opener(path, "wb") as f:
        f.write(data)


def make_idx_dir(root, n_train=256, n_test=64, classes=4, tamper=None):
    d = os.path.join(root, "idx")
    os.makedirs(d, exist_ok=True)
    for split, n, seed in (("train", n_train, 1), ("t10k", n_test, 2)):
        imgs, labels = pattern(n, classes, seed)
        img_file = idx_bytes(0x08, [n, 28, 28], imgs)
        lab_file = idx_bytes(0x08, [n], labels)
        if split == "train" and tamper == "truncated":
            img_file = img_file[: len(img_file) // 2]
        if split == "train" and tamper == "magic":
            img_file = b"\x89PNG" + img_file[4:]
        if split == "train" and tamper == "dims":
            lab_file = idx_bytes(0x08, [n, 1], labels)
        if split == "train" and tamper == "count":
            lab_file = idx_bytes(0x08, [n - 3], labels[: n - 3])
        write(os.path.join(d, f"{split}-images-idx3-ubyte.gz"), img_file)
        write(os.path.join(d, f"{split}-labels-idx1-ubyte.gz"), lab_file)
    return d


# ---- cases --------------------------------------------------------------------------------------

def case_version(tmp):
    code, out, _ = run("--version")
    if code != 0 or not re.match(r"saturate \d+\.\d+\.\d+ \(git \S+, \w+, LibTorch \d+\.\d+", out):
        fail(f"--version: {code} {out!r}")


def case_help(tmp):
    code, out, _ = run("help")
    if code != 0:
        fail(f"help exit {code}")
    check_golden("help.txt", out, masked=False)


def case_unknown_command(tmp):
    expect_usage_error(["trian"], "unknown command 'trian'; did you mean 'train'?")


def case_unknown_option(tmp):
    expect_usage_error(["train", "--batchsize=8"], "unknown option '--batchsize'; did you mean '--batch-size'?")


def case_train_help(tmp):
    code, out, _ = run("train", "--help")
    if code != 0:
        fail(f"train --help exit {code}")
    check_golden("train_help.txt", out, masked=False)


def case_bad_model(tmp):
    expect_usage_error(["train", "--model", "fmnist-cn", "--data", "idx:" + make_idx_dir(tmp)],
                       "did you mean 'fmnist-cnn'")


def case_bad_device(tmp):
    expect_usage_error(["train", "--device", "gpu:0"], "device: unknown device 'gpu:0'")


def case_bad_optimizer(tmp):
    expect_usage_error(["train", "--optimizer", "adam"], "did you mean 'adamw'")


def case_missing_data(tmp):
    expect_usage_error(["train", "--data", "idx:" + os.path.join(tmp, "nowhere")], "nowhere")


def case_idx_truncated(tmp):
    expect_usage_error(["train", "--data", "idx:" + make_idx_dir(tmp, tamper="truncated")],
                       "train-images-idx3-ubyte.gz")


def case_idx_wrong_magic(tmp):
    expect_usage_error(["train", "--data", "idx:" + make_idx_dir(tmp, tamper="magic")], "magic")


def case_idx_wrong_dims(tmp):
    expect_usage_error(["train", "--data", "idx:" + make_idx_dir(tmp, tamper="dims")],
                       "train-labels-idx1-ubyte.gz")


def case_idx_count_mismatch(tmp):
    expect_usage_error(["train", "--data", "idx:" + make_idx_dir(tmp, tamper="count")], "253")


def case_zero_batch(tmp):
    expect_usage_error(["train", "--batch-size", "0"], "--batch-size must be positive")


def case_negative_batch(tmp):
    expect_usage_error(["train", "--batch-size", "-5"], "--batch-size must be positive, got -5")


def case_zero_epochs(tmp):
    expect_usage_error(["train", "--epochs", "0"], "--epochs must be positive")


def case_bad_lr(tmp):
    expect_usage_error(["train", "--lr", "0"], "--lr must be a positive number")


def case_unwritable_summary(tmp):
    expect_usage_error(["train", "--summary-json", "/proc/no-such-dir/s.json"], "--summary-json")


def small_train(tmp, *extra, summary="s.json"):
    data = make_idx_dir(tmp)
    path = os.path.join(tmp, summary)
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "30",
                         "--batch-size", "32", "--lr", "0.003", "--threads", "1",
                         "--summary-json", path, *extra)
    if code != 0:
        fail(f"train exit {code}\n{out}\n{err}")
    with open(path) as f:
        return out, err, json.load(f)


def case_train_small(tmp):
    out, err, s = small_train(tmp)
    for key in ("samples_per_s", "test_accuracy", "final_loss", "steps", "batch_size", "device",
                "threads", "context"):
        if key not in s:
            fail(f"summary lacks '{key}': {sorted(s)}")
    for key in ("host", "cpu", "device", "torch_version", "blas", "git_sha"):
        if key not in s["context"]:
            fail(f"context lacks '{key}': {sorted(s['context'])}")
    if s["steps"] != 30 or s["batch_size"] != 32 or s["threads"] != 1 or s["device"] != "cpu":
        fail(f"summary values: {s}")
    if not s["samples_per_s"] > 0 or not s["test_accuracy"] > 0.8:
        fail(f"did not learn the pattern data: {s['test_accuracy']}")
    if "30/30" not in err:
        fail(f"no progress on stderr:\n{err}")
    check_golden("train_small.txt", out)


def case_train_same_seed(tmp):
    _, _, a = small_train(tmp, "--seed", "7", summary="a.json")
    _, _, b = small_train(tmp, "--seed", "7", summary="b.json")
    for key in ("final_loss", "test_accuracy", "test_loss"):
        if a[key] != b[key]:
            fail(f"{key} differs between two runs with one seed: {a[key]} vs {b[key]}")


def case_train_torchscript(tmp):
    model = os.path.join(ARGS.fixtures, "tiny_cnn.pt")
    if not os.path.exists(model):
        fail(f"fixture {model} missing")
    data = make_idx_dir(tmp, classes=10)
    path = os.path.join(tmp, "ts.json")
    code, out, err = run("train", "--data", "idx:" + data, "--model", model, "--steps", "40",
                         "--batch-size", "32", "--lr", "0.01", "--summary-json", path, "-q")
    if code != 0:
        fail(f"exit {code}\n{err}")
    with open(path) as f:
        s = json.load(f)
    if s["model"] != "torchscript:" + model or s["test_accuracy"] < 0.3:
        fail(f"torchscript run: {s}")


def cpu_has_native_bf16():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return "avx512_bf16" in flags or "amx_bf16" in flags
    return False


def case_precision_bf16(tmp):
    _, err, s = small_train(tmp, "--precision", "bf16", "--accumulate", "2")
    # Emulated bf16 is several times slower than fp32: the run says so, once, on such a CPU.
    warned = err.count("--precision fp32 is the faster choice here")
    if warned != (0 if cpu_has_native_bf16() else 1):
        fail(f"bf16 warning {warned}x with native bf16 {cpu_has_native_bf16()}:\n{err}")
    if s["precision"] != "bf16" or s["accumulate"] != 2 or s["skipped_steps"] != 0:
        fail(f"bf16 summary: {s}")
    if not s["peak_memory_bytes"] > 0 or s["loss_scale"] != 1.0:
        fail(f"bf16 memory/scale: {s}")


def case_recompute_segments(tmp):
    _, _, s = small_train(tmp, "--recompute-segments", "2")
    if s["recompute_segments"] != 2 or not s["test_accuracy"] > 0.8:
        fail(f"recomputed run: {s}")
    # The old name of the flag and of the plan field say what they are called now.
    expect_usage_error(["train", "--checkpoint-segments", "2"], "is now --recompute-segments")
    plan = os.path.join(tmp, "old.json")
    with open(plan, "w") as f:
        json.dump({"schema_version": 1, "config": {"checkpoint_segments": 2}}, f)
    expect_usage_error(["train", "--config", plan],
                       "config.checkpoint_segments is now config.recompute_segments")


def case_logdir_and_trace(tmp):
    logdir = os.path.join(tmp, "logs")
    trace = os.path.join(tmp, "trace.json")
    small_train(tmp, "--logdir", logdir, "--trace", trace, "--sample-interval", "20")
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    steps = [l for l in lines if l["type"] == "step"]
    if len(steps) != 30 or not any(l["type"] == "eval" for l in lines):
        fail(f"steps.jsonl: {len(steps)} steps")
    # Device readings go into the same file, each after the step it followed.
    samples = [l for l in lines if l["type"] == "device_sample"]
    if not samples:
        fail("steps.jsonl has no device_sample lines")
    if not all(s["cpu"]["process_rss_bytes"] > 0 and s["gpus"] == [] for s in samples):
        fail(f"device samples: {samples[:2]}")
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    if sum(1 for e in events if e.get("cat") == "step") != 30:
        fail("trace lacks one step slice per step")
    # TensorBoard's own reader must load the event file.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(logdir)
    acc.Reload()
    loss = acc.Scalars("train/loss")
    if len(loss) != 30 or [e.step for e in loss] != list(range(30)):
        fail(f"TensorBoard read {len(loss)} train/loss scalars")
    if abs(loss[-1].value - steps[-1]["loss"]) > 1e-5 * max(1.0, abs(steps[-1]["loss"])):
        fail(f"TensorBoard value {loss[-1].value} vs JSONL {steps[-1]['loss']}")
    if len(acc.Scalars("eval/test_accuracy")) != 1:
        fail("no eval/test_accuracy scalar")


def case_bad_logdir(tmp):
    expect_usage_error(["train", "--logdir", "/proc/no-such-logdir"], "--logdir")


def case_issue36_output_paths_get_their_folders(tmp):
    # README's `--logdir runs/a` on a fresh checkout: every output path's missing folders are
    # made, as mkdir -p would; a file in the way is one line naming it, exit 2.
    data = make_idx_dir(tmp, n_train=128, n_test=32)
    out = lambda *parts: os.path.join(tmp, "new", *parts)
    code, _, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "3",
                       "-q", "--logdir", out("runs", "a"), "--summary-json",
                       out("sums", "x", "s.json"), "--trace", out("traces", "t.json"),
                       "--checkpoint-dir", out("ckpt", "b"), "--checkpoint-every", "2")
    if code != 0:
        fail(f"train with output paths in missing folders: exit {code}\n{err}")
    for path in (out("runs", "a", "steps.jsonl"), out("sums", "x", "s.json"),
                 out("traces", "t.json")):
        if not os.path.isfile(path):
            fail(f"{path} was not written")
    if not os.listdir(out("ckpt", "b")):
        fail("no checkpoint in the new --checkpoint-dir")
    # report of the --logdir folder itself (its steps.jsonl), into a missing folder.
    code, _, err = run("report", out("runs", "a"), "--html", out("pages", "r.html"))
    if code != 0 or not os.path.isfile(out("pages", "r.html")):
        fail(f"report --html of a --logdir into a missing folder: exit {code}\n{err}")
    expect_usage_error(["report", out("ckpt"), "--html", out("pages", "s.html")],
                       "is a folder without a steps.jsonl")
    blocker = os.path.join(tmp, "afile")
    open(blocker, "w").close()
    expect_usage_error(["train", "--data", "idx:" + data, "--model", "mlp", "--steps", "1",
                        "--logdir", os.path.join(blocker, "a")], "'" + blocker + "'")


def config_train(tmp, plan, *extra, summary="s.json"):
    """`train --config` with `plan` (a dict, written to tmp/plan.json); returns the plan's path,
    stderr and the summary JSON."""
    plan_path = os.path.join(tmp, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    path = os.path.join(tmp, summary)
    code, out, err = run("train", "--config", plan_path, "--steps", "30", "--summary-json", path,
                         "-q", *extra)
    if code != 0:
        fail(f"train --config exit {code}\n{out}\n{err}")
    with open(path) as f:
        return plan_path, err, json.load(f)


def small_plan(tmp):
    """A hand-written plan: model and data from the plan, the rest of config left at defaults."""
    return {"schema_version": 1, "model": "mlp", "data": "idx:" + make_idx_dir(tmp),
            "config": {"batch_size": 16, "accumulate": 2, "lr": 0.003, "optimizer": "sgd",
                       "schedule": "constant", "threads": 1, "seed": 5}}


def case_train_config(tmp):
    plan_path, err, s = config_train(tmp, small_plan(tmp))
    want = {"batch_size": 16, "accumulate": 2, "optimizer": "sgd", "schedule": "constant",
            "threads": 1, "seed": 5, "lr": 0.003, "precision": "fp32", "steps": 30}
    got = {k: s[k] for k in want}
    if got != want or s["data"] != small_plan(tmp)["data"] or "mlp" not in s["model"]:
        fail(f"plan not applied: {got} (want {want}), model {s['model']}, data {s['data']}")
    if "plan " + plan_path not in err:
        fail(f"no log line naming the plan:\n{err}")


def case_train_config_override(tmp):
    _, _, s = config_train(tmp, small_plan(tmp), "--batch-size", "32", "--optimizer", "adamw")
    if s["batch_size"] != 32 or s["optimizer"] != "adamw":
        fail(f"flags did not override the plan: batch {s['batch_size']}, {s['optimizer']}")
    # Issue 13: a batch other than the plan's keeps the plan's micro-batch (16 / 2 = 8), so
    # 32 samples take 4 micro-batches, and the log says so.
    if s["accumulate"] != 4 or s["threads"] != 1 or s["seed"] != 5:
        fail(f"the plan's rule or other fields were lost: {s}")


def case_train_config_corrupt(tmp):
    corrupt = os.path.join(tmp, "corrupt-plan.json")
    with open(corrupt, "w") as f:
        f.write('{"schema_version": 1, "config": {"batch_size": ')
    expect_usage_error(["train", "--config", corrupt], "corrupt-plan.json: not valid JSON")
    expect_usage_error(["train", "--config", os.path.join(tmp, "absent-plan.json")],
                       "absent-plan.json")
    bad = os.path.join(tmp, "bad-plan.json")
    with open(bad, "w") as f:
        json.dump({"schema_version": 1, "config": {"batch_size": -3}}, f)
    expect_usage_error(["train", "--config", bad],
                       "bad-plan.json: config.batch_size must be a positive integer, got -3")


def case_profile_json(tmp):
    data = make_idx_dir(tmp)
    trace = os.path.join(tmp, "p.json")
    code, out, err = run("profile", "--data", "idx:" + data, "--model", "fmnist-cnn", "--steps",
                         "24", "--batch-size", "32", "--window", "6", "--warmup-steps", "4",
                         "--json", "--trace", trace)
    if code != 0:
        fail(f"profile exit {code}\n{err}")
    j = json.loads(out)
    phases = j["phases_ms"]
    for k in ("data_wait", "host_to_device", "forward", "backward", "optimizer", "other"):
        if k not in phases:
            fail(f"profile lacks phase {k}")
    total = sum(phases.values())
    if abs(total - j["step_ms"]) > 0.02 * j["step_ms"]:
        fail(f"phases sum to {total} ms, step is {j['step_ms']} ms")
    if j["steps"] != 24 or j["windows"] != 3 or not j["samples_per_s"] > 0:
        fail(f"profile numbers: {j}")
    if not j["train_flops_per_sample"] > 0 or j["mfu_pct"] is None or not j["peak_memory_bytes"] > 0:
        fail(f"profile compute/memory: {j}")
    with open(trace) as f:
        json.load(f)


def case_profile_table(tmp):
    data = make_idx_dir(tmp)
    code, out, err = run("profile", "--data", "idx:" + data, "--model", "mlp", "--steps", "12",
                         "--batch-size", "16", "--window", "4", "--warmup-steps", "2")
    if code != 0:
        fail(f"profile exit {code}\n{err}")
    # Which rules fire depends on the machine (its bf16 support, cores): the golden stops
    # before the findings, which must be there.
    table, sep, findings = out.partition("  findings")
    if not sep:
        fail(f"profile printed no findings block:\n{out}")
    check_golden("profile_table.txt", table)


def case_profile_bad_steps(tmp):
    expect_usage_error(["profile", "--steps", "0"], "--steps must be positive")


def case_monitor_fake_nvml(tmp):
    code, out, err = run("monitor", "--interval", "50", "--count", "2", "--json")
    if code != 0:
        fail(f"monitor exit {code}\n{err}")
    lines = [json.loads(l) for l in out.splitlines()]
    if len(lines) != 2 or any(len(l["gpus"]) != 2 for l in lines):
        fail(f"monitor with the fake NVML: {out}")
    g1 = lines[1]["gpus"][1]
    if g1["name"] != "Fake GPU 1" or g1["throttle_reasons"] != ["sw_power_cap", "hw_thermal_slowdown"]:
        fail(f"fake GPU 1: {g1}")
    if not lines[1]["gpus"][0]["energy_j"] > lines[0]["gpus"][0]["energy_j"]:
        fail("energy counter did not rise")


def case_monitor_no_nvml(tmp):
    code, out, err = run("monitor", "--interval", "50", "--count", "1")
    if code != 0 or "no NVML" not in err or "cpu" not in out:
        fail(f"monitor without NVML: exit {code}\n{out}\n{err}")
    # Issue 36: what it watches, what a GPU would add, and a header over labelled columns.
    header = out.splitlines()[0].split()
    if "the whole machine" not in err or "With NVIDIA GPUs" not in err or \
            header[:4] != ["time", "s", "cpu", "all"] or "core" not in header or "%" not in out:
        fail(f"monitor's header:\n{out}\n{err}")


def case_issue36_monitor_watches_a_process(tmp):
    child = subprocess.Popen([sys.executable, "-c", "import time\nx = bytearray(50 << 20)\n"
                              "t = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        time.sleep(0.5)
        code, out, err = run("monitor", "--interval", "200", "--count", "2", "--pid",
                             str(child.pid))
        lines = out.splitlines()
        if code != 0 or f"pid {child.pid} cpu" not in lines[0] or len(lines) != 3 or \
                "MiB" not in lines[-1] or f"process {child.pid} (python" not in err:
            fail(f"monitor --pid: exit {code}\n{out}\n{err}")
        busy = float(lines[-1].split()[-3].rstrip("%"))
        if not 50 <= busy <= 110:
            fail(f"a busy-looping process at {busy}% of a core:\n{out}")
        code, out, err = run("monitor", "--count", "1", "--pid", str(child.pid), "--json")
        j = json.loads(out)
        if code != 0 or j["process"]["pid"] != child.pid or j["process"]["rss_bytes"] < 50 << 20:
            fail(f"monitor --pid --json: exit {code}\n{out}")
    finally:
        child.kill()
        child.wait()
    expect_usage_error(["monitor", "--pid", str(child.pid)], f"--pid {child.pid}: no such process")


def case_monitor_bad_interval(tmp):
    expect_usage_error(["monitor", "--interval", "0"], "--interval")


def case_profile_fake_nvml(tmp):
    data = make_idx_dir(tmp)
    code, out, err = run("profile", "--data", "idx:" + data, "--model", "mlp", "--steps", "10",
                         "--batch-size", "16", "--json", "--interval", "20")
    if code != 0:
        fail(f"profile exit {code}\n{err}")
    d = json.loads(out)["device_samples"]
    if d["gpu_status"] != "NVML: 2 GPUs" or not d["joules_per_sample"] > 0 or d["gpu_util_pct"] != 37:
        fail(f"device samples: {d}")


def case_precision_auto(tmp):
    _, err, s = small_train(tmp, "--precision", "auto")
    if s["precision"] not in ("bf16", "fp32") or "precision" not in err:
        fail(f"auto precision: {s['precision']}\n{err}")


def case_precision_fp16_cpu(tmp):
    expect_usage_error(["train", "--device", "cpu", "--precision", "fp16"],
                       "fp16 is not supported on cpu")


def case_bad_precision(tmp):
    expect_usage_error(["train", "--precision", "bf61"], "did you mean 'bf16'")


def case_bad_accumulate(tmp):
    expect_usage_error(["train", "--batch-size", "4", "--accumulate", "8"], "--accumulate (8)")


def case_bad_memory_limit(tmp):
    expect_usage_error(["train", "--memory-limit", "lots"], "--memory-limit")


def case_memory_limit_reports_peak(tmp):
    _, _, s = small_train(tmp, "--memory-limit", "512MiB")
    if s["memory_limit_bytes"] != 512 << 20 or not 0 < s["peak_memory_bytes"] < 512 << 20:
        fail(f"memory limit run: {s}")


def case_doctor_json(tmp):
    code, out, err = run("doctor", "--json", "--no-gemm")
    if code not in (0, 1):
        fail(f"doctor exit {code}\n{err}")
    j = json.loads(out)
    names = [c["name"] for c in j["checks"]]
    for n in ("libtorch", "cuda", "blas", "threads", "precision", "allocator", "dataset"):
        if n not in names:
            fail(f"doctor lacks check {n}: {names}")
    for c in j["checks"]:
        if c["status"] not in ("ok", "warn", "fail") or (c["status"] != "ok" and not c["fix"]):
            fail(f"check without a fix: {c}")


def case_issue36_doctor_accepts_every_data_spec_train_accepts(tmp):
    # Each prefixed spec that train loads, doctor checks as train opens it: ok with its sizes;
    # a broken one fails its check with the file named.
    data = make_idx_dir(tmp, n_train=64, n_test=16)
    packed = os.path.join(tmp, "packed")
    code, out, err = run("pack", "idx:" + data, packed)
    if code != 0:
        fail(f"pack: exit {code}\n{err}")
    jpegs = make_jpeg_folder(tmp, n_train=16, n_test=8)
    for spec in ("idx:" + data, "records:" + packed, "folder:" + jpegs,
                 "folder:" + jpegs + "@16x16x1", "synthetic:1,8,8,4,32"):
        code, out, err = run("train", "--data", spec, "--model", "mlp", "--steps", "1",
                             "--no-eval", "-q")
        if code != 0:
            fail(f"train --data {spec}: exit {code}\n{err}")
        code, out, err = run("doctor", "--json", "--no-gemm", "--data", spec)
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        if code not in (0, 1) or checks["dataset"]["status"] != "ok" or \
                "train samples" not in checks["dataset"]["detail"] and \
                "generated samples" not in checks["dataset"]["detail"]:
            fail(f"doctor --data {spec}: exit {code}: {checks.get('dataset')}\n{err}")
    os.remove(os.path.join(data, "train-labels-idx1-ubyte.gz"))
    code, out, err = run("doctor", "--json", "--no-gemm", "--data", "idx:" + data)
    c = {c["name"]: c for c in json.loads(out)["checks"]}["dataset"]
    if code != 1 or c["status"] != "fail" or "train-labels" not in c["detail"] or \
            "idx:DIR" not in c["fix"]:
        fail(f"doctor --data with a missing label file: exit {code}: {c}")


def case_interrupt(tmp):
    data = make_idx_dir(tmp, n_train=2048)
    p = subprocess.Popen([ARGS.saturate, "train", "--data", "idx:" + data, "--model", "fmnist-cnn",
                          "--epochs", "50", "--threads", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode != 130:
        fail(f"exit {p.returncode} after SIGINT, expected 130\n{out}\n{err}")
    if "(interrupted)" not in out:
        fail(f"no interrupted summary:\n{out}")



# ---- input pipeline ------------------------------------------------------------------------------

def case_train_workers_same_result(tmp):
    # The same seed gives the same batches whether 0 or 3 threads make them.
    _, _, a = small_train(tmp, "--workers", "0", summary="a.json")
    _, _, b = small_train(tmp, "--workers", "3", "--prefetch", "4", summary="b.json")
    if a["final_loss"] != b["final_loss"] or a["test_accuracy"] != b["test_accuracy"]:
        fail(f"workers changed the run: {a['final_loss']} vs {b['final_loss']}")
    if b["loader"]["workers"] != 3 or b["loader"]["samples"] < 30 * 32:
        fail(f"loader block: {b['loader']}")


def case_train_synthetic(tmp):
    path = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--data", "synthetic:1,28,28,10,640", "--model", "mlp",
                         "--steps", "8", "--batch-size", "32", "--no-eval", "--threads", "1",
                         "--workers", "2", "--summary-json", path)
    if code != 0:
        fail(f"synthetic train exit {code}\n{err}")
    with open(path) as f:
        s = json.load(f)
    if s["steps"] != 8 or s["samples"] != 256:
        fail(f"synthetic summary: {s}")


def case_profile_loader_only(tmp):
    data = make_idx_dir(tmp)
    code, out, err = run("profile", "--data", "idx:" + data, "--loader-only", "--steps", "20",
                         "--batch-size", "16", "--workers", "2", "--cache", "1MiB", "--json")
    if code != 0:
        fail(f"profile --loader-only exit {code}\n{err}")
    j = json.loads(out)
    for key in ("samples_per_s", "cpu_util_pct", "make_batch_ms", "wait_ms", "cache_hit_rate"):
        if key not in j:
            fail(f"loader profile lacks '{key}': {j}")
    # 20 batches of 16 over 256 samples: the second epoch comes from the cache.
    if j["batches"] != 20 or not j["samples_per_s"] > 0 or not j["cache_hit_rate"] > 0:
        fail(f"loader profile: {j}")


def case_issue36_wording(tmp):
    # What a person reads: counts agree with their nouns, the final loss says over how many
    # steps it is a mean, and a loader profile reports the prefetch the Loader used.
    data = make_idx_dir(tmp)
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "30",
                         "--threads", "1", "-q")
    if code != 0 or "1 threads" in out + err or "1 thread" not in out + err or \
            "(mean of the last 30 steps)" not in out:
        fail(f"train's wording:\n{out}\n{err}")
    code, out, err = run("profile", "--data", "idx:" + data, "--loader-only", "--steps", "10",
                         "--batch-size", "16", "--workers", "8")
    if code != 0 or "prefetch 8" not in out:
        fail(f"a loader with 8 workers makes 8 batches ahead, whatever --prefetch says:\n{out}")


def case_bad_workers(tmp):
    expect_usage_error(["train", "--data", "idx:" + make_idx_dir(tmp), "--workers", "-1"],
                       "--workers")


def case_train_augment(tmp):
    # 28x28 images padded by 2 and cropped to 24: the model is built for 24x24, and the test
    # split is centre-cropped to match, so the run trains and evaluates.
    _, _, s = small_train(tmp, "--crop", "24", "--pad", "2", "--flip")
    if not s["test_accuracy"] >= 0 or s["steps"] < 1:
        fail(f"augmented run: {s}")
    # Random crops and flips change what the model sees, so the loss differs from a plain run.
    _, _, plain = small_train(tmp, summary="plain.json")
    if plain["final_loss"] == s["final_loss"]:
        fail("--crop/--flip did not change the batches")


def case_bad_augment(tmp):
    data = "idx:" + make_idx_dir(tmp)
    expect_usage_error(["train", "--data", data, "--pad", "2"], "--pad needs --crop")
    expect_usage_error(["train", "--data", data, "--crop", "40"], "crop 40")


def profile_json(tmp, name, *extra):
    data = make_idx_dir(tmp)
    # Windows of 5 steps: one-step windows of a ~9 ms step scatter so widely on a loaded machine
    # that a 10% shift was once not significant (p = 0.07) in a clean-clone run.
    code, out, err = run("profile", "--data", "idx:" + data, "--model", "mlp", "--steps", "205",
                         "--window", "5", "--batch-size", "32", "--threads", "1", "--json",
                         *extra)
    if code != 0:
        fail(f"profile exit {code}\n{err}")
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(out)
    return path, json.loads(out)


def case_compare(tmp):
    a_path, a = profile_json(tmp, "a.json")
    if len(a["window_samples_per_s"]) != 40 or not isinstance(a["findings"], list):
        fail(f"profile JSON lacks its windows or findings: {list(a)}")
    # The same measurement against itself: nothing changed.
    code, out, err = run("compare", a_path, a_path)
    if code != 0 or "within noise" not in out or "no regression" not in out:
        fail(f"compare of a run with itself: exit {code}\n{out}\n{err}")
    # An injected 10% slowdown: every window 10% slower. The detector is tested on windows this
    # test controls (issue 34, defect 10: a loaded machine's real windows spread so widely that
    # a 10% shift once missed p < 0.01, and CI must not go red on timing noise).
    import math
    a = dict(a)
    a["window_samples_per_s"] = [1000.0 * (1 + 0.03 * math.sin(1.7 * i)) for i in range(40)]
    a["samples_per_s"] = sorted(a["window_samples_per_s"])[20]
    a_path = os.path.join(tmp, "a_controlled.json")
    with open(a_path, "w") as f:
        json.dump(a, f)
    slow = dict(a)
    slow["window_samples_per_s"] = [w * 0.9 for w in a["window_samples_per_s"]]
    slow["samples_per_s"] = a["samples_per_s"] * 0.9
    slow_path = os.path.join(tmp, "slow.json")
    with open(slow_path, "w") as f:
        json.dump(slow, f)
    code, out, err = run("compare", a_path, slow_path)
    if code != 1 or "REGRESSION" not in out or "-10.0%" not in out:
        fail(f"compare missed an injected 10% slowdown: exit {code}\n{out}\n{err}")
    code, out, err = run("compare", slow_path, a_path, "--json")
    j = json.loads(out)
    if code != 0 or j["regression"] or j["metrics"][0]["verdict"] != "improvement":
        fail(f"a 10% speed-up: exit {code}\n{out}")


def case_issue36_compare_guards_quality(tmp):
    # Two train summaries: a run and the same run at a learning rate that wrecks it. compare
    # must judge accuracy and loss, not only samples/s, and fail the gate (exit 1).
    data = make_idx_dir(tmp, n_train=512, n_test=128)

    def train(name, *flags):
        path = os.path.join(tmp, name)
        code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "40",
                             "--batch-size", "32", "--threads", "1", "--val-fraction", "0.2",
                             "--summary-json", path, "-q", *flags)
        if code not in (0, 1) or not os.path.exists(path):
            fail(f"train {flags}: exit {code}\n{err}")
        return path

    good = train("good.json", "--optimizer", "sgd", "--lr", "0.05")
    bad = train("bad.json", "--optimizer", "sgd", "--lr", "60", "--momentum", "0.99")
    code, out, err = run("compare", good, bad)
    if code != 1 or "REGRESSION" not in out or "(train)" not in out:
        fail(f"compare of a wrecked run against a good one: exit {code}\n{out}\n{err}")
    judged = [l for l in out.splitlines() if "quality judged:" in l]
    if not judged or not any(k in judged[0] for k in ("test_accuracy_pct", "divergence")):
        fail(f"compare must say which quality metrics it judged:\n{out}")
    # Controlled: the good run with only its accuracy 5 points lower (speed unchanged).
    s = json.load(open(good))
    for key in ("test_accuracy", "val_accuracy"):
        s[key] -= 0.05
    worse = os.path.join(tmp, "worse.json")
    json.dump(s, open(worse, "w"))
    code, out, err = run("compare", good, worse, "--json")
    j = json.loads(out)
    verdicts = {m["name"]: m["verdict"] for m in j["metrics"]}
    if code != 1 or verdicts.get("test_accuracy_pct") != "regression" or \
            verdicts.get("val_accuracy_pct") != "regression" or \
            verdicts.get("samples_per_s") != "within noise" or \
            "val_accuracy_pct, test_accuracy_pct, final_loss" not in j["quality_judged"]:
        fail(f"a 5-point accuracy drop at the same speed: exit {code}\n{out}")
    code, out, err = run("compare", good, good)
    if code != 0 or "no regression" not in out:
        fail(f"a run against itself: exit {code}\n{out}")


def case_compare_bad_input(tmp):
    missing = os.path.join(tmp, "missing.json")
    expect_usage_error(["compare", missing, missing], missing)
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write("{\"samples_per_s\": ")
    expect_usage_error(["compare", bad, bad], bad)
    other = os.path.join(tmp, "other.json")
    with open(other, "w") as f:
        f.write("[1, 2]")
    expect_usage_error(["compare", other, other], other)


def case_bad_synthetic(tmp):
    expect_usage_error(["train", "--data", "synthetic:1,28,x,10,64"], "synthetic:1,28,x,10,64")


# ---- tune ---------------------------------------------------------------------------------------

def small_tune(tmp, *extra):
    data = make_idx_dir(tmp, n_train=512, n_test=128)
    plan = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", "idx:" + data, "--model", "mlp", "--threads", "1",
                         "--memory-limit", "96MiB", "--max-batch", "256", "--batch-size", "32",
                         "--quality-samples", "1024", "--out", plan, *extra, timeout=600)
    return code, out, err, plan


def run_with_tty_stderr(argv, timeout=300):
    # The command with its stderr on a pseudo-terminal (as in a person's shell); returns the
    # exit code, stdout and what the terminal received.
    import pty
    import select
    master, slave = pty.openpty()
    p = subprocess.Popen([ARGS.saturate, *argv], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    got, deadline = [], time.time() + timeout
    try:
        while time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if p.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal's other end closed: the command has exited
                break
            if not data:
                break
            got.append(data)
        out, _ = p.communicate(timeout=max(1, deadline - time.time()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return p.returncode, out.decode(errors="replace"), b"".join(got).decode(errors="replace")


def case_issue36_tune_shows_progress_on_a_terminal(tmp):
    # On a terminal, each run the tune makes shows a live line on stderr: what it measures,
    # how far, ETA; erased when the run ends, so stdout's stage lines stay clean. -q: none.
    data = make_idx_dir(tmp, n_train=512, n_test=128)
    argv = ["tune", "--data", "idx:" + data, "--model", "mlp", "--threads", "1",
            "--memory-limit", "96MiB", "--max-batch", "128", "--batch-size", "32",
            "--quality-samples", "1024", "--max-ranks", "1", "--out",
            os.path.join(tmp, "plan.json")]
    code, out, tty = run_with_tty_stderr(argv)
    if code != 0:
        fail(f"tune on a terminal: exit {code}\n{out}\n{tty}")
    for needle in ("tune: measuring batch", "tune: quality run, batch", "ETA", "\r\033[K"):
        if needle not in tty:
            fail(f"no live progress '{needle!r}' on the terminal:\n{tty[-2000:]!r}")
    if "tune: measuring" in out or "ETA" in out:
        fail(f"progress went to stdout:\n{out}")
    code, out, tty = run_with_tty_stderr(argv + ["--quiet"])
    if code != 0 or "tune: measuring" in tty or "ETA" in tty:
        fail(f"tune --quiet on a terminal: exit {code}\n{tty[-2000:]!r}")
    # Off a terminal (a CI log): nothing either.
    code, out, err = run(*argv)
    if code != 0 or "tune: measuring" in err or "ETA" in err:
        fail(f"tune with stderr in a file: exit {code}\n{err}")


def case_tune_small(tmp):
    code, out, err, plan_path = small_tune(tmp)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err}")
    for stage in ("baseline", "precision", "batch_size", "quality_guard"):
        if stage not in out:
            fail(f"tune output lacks stage {stage}:\n{out}")
    if "  findings" not in out:
        fail(f"tune printed no findings:\n{out}")
    with open(plan_path) as f:
        plan = json.load(f)
    for key in ("config", "baseline", "tuned", "trials", "quality", "stages", "effective_batch",
                "findings"):
        if key not in plan:
            fail(f"plan lacks '{key}': {sorted(plan)}")
    cfg = plan["config"]
    for key in ("batch_size", "precision", "accumulate", "lr", "threads", "workers"):
        if key not in cfg:
            fail(f"plan config lacks '{key}': {cfg}")
    if not plan["trials"] or any(t["outcome"] not in ("fits", "oom") for t in plan["trials"]):
        fail(f"plan trials: {plan['trials'][:3]}")
    for t in plan["trials"]:
        for key in ("stage", "config", "samples_per_s", "spread", "peak_memory_bytes", "steps"):
            if key not in t:
                fail(f"trial lacks '{key}': {t}")
    # Under the 96 MiB limit nothing the plan chose may exceed it.
    if plan["tuned"]["peak_memory_bytes"] > 96 * 2**20:
        fail(f"tuned peak {plan['tuned']['peak_memory_bytes']} above the limit")
    q = plan["quality"]
    for key in ("baseline", "tuned", "tolerance", "accepted"):
        if key not in q:
            fail(f"quality lacks '{key}': {q}")
    if q["accepted"] and q["tuned"] < q["baseline"] - q["tolerance"] - 1e-9:
        fail(f"accepted a quality drop: {q}")
    if plan["tuned"]["samples_per_s"] <= 0 or plan["baseline"]["samples_per_s"] <= 0:
        fail(f"plan throughput: {plan['baseline']} {plan['tuned']}")
    # The plan trains.
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "5", "--memory-limit", "96MiB",
                         "--summary-json", summary)
    if code != 0:
        fail(f"train --config exit {code}\n{out}\n{err}")
    with open(summary) as f:
        s = json.load(f)
    if s["batch_size"] != cfg["batch_size"] or s["precision"] != cfg["precision"]:
        fail(f"train did not take the plan: {s['batch_size']} {s['precision']} vs {cfg}")


def case_tune_limit_below_one_sample(tmp):
    data = make_idx_dir(tmp)
    expect_usage_error(["tune", "--data", "idx:" + data, "--model", "mlp-deep", "--memory-limit",
                        "1MiB", "--out", os.path.join(tmp, "p.json")], "one sample does not fit")


def case_issue14_profile_finds_allocation_churn(tmp):
    # Batch 1024 fmnist-cnn frees and re-allocates ~100 MiB activations every step. With the
    # caching allocator off (what a Python PyTorch job on glibc malloc does), each step faults in
    # fresh pages and the allocation-churn rule names the cost; with it on, the steady steps take
    # almost no faults and the rule stays quiet.
    data = make_idx_dir(tmp, n_train=2048, n_test=64)
    seen = {}
    for cache in ("off", "on"):
        code, out, err = run("profile", "--data", "idx:" + data, "--model", "fmnist-cnn",
                             "--batch-size", "1024", "--steps", "5", "--skip-steps", "2",
                             "--window", "1", "--json", env={"SATURATE_CPU_CACHE": cache})
        if code != 0:
            fail(f"profile (cache {cache}) exit {code}\n{err}")
        j = json.loads(out)
        mem = j["host_memory"]
        rules = {f["rule"]: f for f in j["findings"]}
        seen[cache] = (mem["page_faults_per_step"], rules)
        if mem["cpu_cache"] != (cache == "on"):
            fail(f"cpu_cache {mem['cpu_cache']} with SATURATE_CPU_CACHE={cache}")
    off_faults, off_rules = seen["off"]
    on_faults, on_rules = seen["on"]
    # 1024 x 32 x 28 x 28 floats is 98 MiB: at least one such tensor faulted in per step.
    if not off_faults > 25000:
        fail(f"cache off: {off_faults} page faults per step, expected the activations' pages")
    if "allocation-churn" not in off_rules:
        fail(f"cache off: no allocation-churn finding: {list(off_rules)}")
    rec = off_rules["allocation-churn"]["recommendation"]
    if "unset SATURATE_CPU_CACHE" not in rec or "MALLOC_MMAP_THRESHOLD_" not in rec:
        fail(f"allocation-churn recommendation: {rec}")
    if not on_faults < off_faults / 100:
        fail(f"cache on: {on_faults} page faults per step vs {off_faults} off")
    if "allocation-churn" in on_rules:
        fail(f"cache on: allocation-churn fired: {on_rules['allocation-churn']}")


def case_issue13_impossible_settings(tmp):
    data = make_idx_dir(tmp)
    out = os.path.join(tmp, "p.json")
    base = ["tune", "--data", "idx:" + data, "--model", "mlp", "--out", out]
    expect_usage_error(base + ["--memory-limit", "1KiB"], "--memory-limit 1KiB is below")
    expect_usage_error(["train", "--data", "idx:" + data, "--memory-limit", "1KiB"],
                       "--memory-limit 1KiB is below")
    expect_usage_error(base + ["--val-fraction", "0.6"], "--val-fraction")
    expect_usage_error(base + ["--val-fraction", "0"], "--val-fraction")
    expect_usage_error(base + ["--eval-batch-size", "0"], "--eval-batch-size")
    expect_usage_error(["train", "--data", "idx:" + data, "--eval-batch-size", "0"],
                       "--eval-batch-size")
    expect_usage_error(base + ["--denormals", "off"], "--denormals must be flush or keep")
    wrong = os.path.join(tmp, "denormals-plan.json")
    with open(wrong, "w") as f:
        json.dump({"schema_version": 1, "config": {"batch_size": 8}, "denormals": "off"}, f)
    expect_usage_error(["train", "--config", wrong], "denormals-plan.json: denormals")
    bad = os.path.join(tmp, "typo-plan.json")
    with open(bad, "w") as f:
        json.dump({"schema_version": 1, "config": {"batch_size": 8, "lr_rate": 0.1}}, f)
    expect_usage_error(["train", "--config", bad],
                       "typo-plan.json: config.lr_rate is not a plan field")
    if os.path.exists(out):
        fail("a failed tune left a plan behind")


def case_issue13_tune_takes_the_recipe_and_holds_out_validation(tmp):
    data = make_idx_dir(tmp, n_train=512, n_test=128)
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", "idx:" + data, "--model", "mlp", "--threads", "1",
                         "--memory-limit", "96MiB", "--max-batch", "128", "--batch-size", "32",
                         "--optimizer", "sgd", "--momentum", "0.8", "--weight-decay", "0.001",
                         "--schedule", "constant", "--warmup-steps", "3", "--crop", "24",
                         "--pad", "2", "--flip", "--val-fraction", "0.1", "--eval-batch-size",
                         "64", "--quality-samples", "512", "--budget-s", "60", "--out",
                         plan_path, timeout=600)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err}")
    if "51 samples held out for validation" not in out:
        fail(f"tune did not hold out 10% of 512:\n{out}")
    with open(plan_path) as f:
        plan = json.load(f)
    cfg = plan["config"]
    want = {"optimizer": "sgd", "momentum": 0.8, "weight_decay": 0.001, "schedule": "constant",
            "eval_batch_size": 64}
    got = {k: cfg[k] for k in want}
    if got != want:
        fail(f"plan lost the recipe: {got} (want {want})")
    if plan["input"] != {"crop": 24, "pad": 2, "flip": True, "seq_len": 0, "cache": ""}:
        fail(f"plan lost the input flags: {plan['input']}")
    q = plan["quality"]
    if q["metric"] != "val_accuracy" or q["val_samples"] != 51 or q["val_fraction"] != 0.1:
        fail(f"the guard did not judge on the validation split: {q}")
    if plan["device"] != "cpu" or plan["memory_limit_bytes"] != 96 * 2**20:
        fail(f"plan lost device or memory limit: {plan['device']} {plan['memory_limit_bytes']}")
    # train --config builds the same pipeline: 24x24 crops, validation held out and reported.
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "5", "--summary-json", summary,
                         "-q")
    if code != 0:
        fail(f"train --config exit {code}\n{out}\n{err}")
    with open(summary) as f:
        s = json.load(f)
    if s["val_samples"] != 51 or s["val_accuracy"] is None or s["eval_batch_size"] != 64:
        fail(f"train --config did not hold out validation as the plan says: {s}")
    if s["memory_limit_bytes"] != 96 * 2**20:
        fail(f"train --config ignored the plan's memory limit: {s['memory_limit_bytes']}")


def case_issue13_tune_stays_inside_its_budget(tmp):
    # Issue 13's hold-out case in small: a guard of a whole epoch per run would take minutes on
    # fmnist-cnn; the budget bounds the whole tune, and the plan says what the guard trained.
    data = make_idx_dir(tmp, n_train=8192, n_test=128)
    plan_path = os.path.join(tmp, "plan.json")
    budget = 20
    t0 = time.time()
    code, out, err = run("tune", "--data", "idx:" + data, "--model", "fmnist-cnn", "--threads",
                         "1", "--memory-limit", "256MiB", "--quality-samples", "1000000",
                         "--budget-s", str(budget), "--out", plan_path, timeout=600)
    wall = time.time() - t0
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    # 1.25x the budget, plus the start-up before the clock starts (loading LibTorch, the data).
    if plan["tune_wall_s"] > 1.25 * budget or wall > 1.25 * budget + 15:
        fail(f"tune took {plan['tune_wall_s']:.1f} s ({wall:.1f} s wall) for a {budget} s budget")
    q = plan["quality"]
    if q["status"] not in ("accepted", "rejected", "unaffordable", "inconclusive", "not_run"):
        fail(f"quality status {q['status']}")
    if q["status"] in ("accepted", "rejected") and not (0 < q["samples"] < 1000000):
        fail(f"the guard did not size its runs to the budget: {q['samples']} samples")
    if q["status"] in ("unaffordable", "inconclusive") and "--budget-s" not in q["why"]:
        fail(f"an unaffordable guard must say why: {q['why']}")
    if plan["budget_s"] != budget:
        fail(f"plan budget {plan['budget_s']}")


def make_jpeg_folder(tmp, n_train=240, n_test=40, size=32, classes=4, seed=7, name="jpegs"):
    # Class c: a noisy image brighter in colour channel c % 3 and striped every c + 2 rows,
    # so a small CNN can learn it; JPEG makes every sample a real decode. Also used by
    # bench/tune_train_folder.py.
    from PIL import Image  # in the virtualenv (scripts/install-deps)
    import random
    rng = random.Random(seed)
    root = os.path.join(tmp, name)
    for split, n in (("train", n_train), ("test", n_test)):
        for i in range(n):
            c = i % classes
            d = os.path.join(root, split, f"c{c}")
            os.makedirs(d, exist_ok=True)
            img = Image.new("RGB", (size, size))
            img.putdata([tuple(min(255, rng.randrange(0, 120) + (100 if k == c % 3 else 0) +
                                   (60 if y % (c + 2) == 0 else 0)) for k in range(3))
                         for y in range(size) for _ in range(size)])
            img.save(os.path.join(d, f"{i}.jpg"), quality=90)
    return root


def case_issue13_tune_measures_the_streamed_folder(tmp):
    # tune's trials read a folder: source as train does (streamed, decoded in the Loader), and
    # train --config then runs the plan's pipeline. The speed match itself (within 10%) is a
    # benchmark (bench/RESULTS.md); this checks the plumbing and a sanity bound.
    root = make_jpeg_folder(tmp)
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", "folder:" + root, "--model", "fmnist-cnn",
                         "--threads", "1", "--memory-limit", "256MiB", "--budget-s", "20",
                         "--out", plan_path, timeout=300)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    if plan["data"] != "folder:" + root or plan["denormals"] != "flush":
        fail(f"plan data {plan['data']}, denormals {plan.get('denormals')}")
    stages = [s["name"] for s in plan["stages"]]
    for want in ("input_pipeline", "eval_batch", "confirm"):
        if want not in stages:
            fail(f"no {want} stage in {stages}")
    tuned = plan["tuned"]
    if not tuned["samples_per_s"] > 0 or not tuned["phases_ms"]["data_wait"] > 0:
        fail(f"the tuned measurement shows no decoding: {tuned}")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "60", "--summary-json",
                         summary, timeout=300)
    if code != 0:
        fail(f"train --config exit {code}\n{err}")
    with open(summary) as f:
        s = json.load(f)
    cfg = plan["config"]
    if "read as trained" not in out + err or f"batch {cfg['batch_size']}" not in out + err:
        fail(f"train did not run the plan's streamed pipeline:\n{out}\n{err}")
    ratio = s["samples_per_s"] / tuned["samples_per_s"]
    if not 0.4 < ratio < 2.5:
        fail(f"train measured {s['samples_per_s']:.1f} samples/s, the plan "
             f"{tuned['samples_per_s']:.1f} ({ratio:.2f}x)")


def case_issue14_memory_format(tmp):
    # A wrong layout name is a usage error with a suggestion; a plan's layout is what train runs.
    data = make_idx_dir(tmp)
    expect_usage_error(["train", "--data", "idx:" + data, "--memory-format", "channels_last"],
                       "unknown memory format 'channels_last'; did you mean 'channels-last'?")
    path = os.path.join(tmp, "cl.json")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "fmnist-cnn", "--steps",
                         "30", "--batch-size", "32", "--threads", "1", "--memory-format",
                         "channels-last", "--summary-json", path)
    if code != 0:
        fail(f"train exit {code}\n{out}\n{err}")
    with open(path) as f:
        s = json.load(f)
    if s["memory_format"] != "channels-last" or not s["test_accuracy"] > 0.3:
        fail(f"channels-last run: {s}")
    if "fp32, channels-last" not in out:
        fail(f"train does not show the layout:\n{out}")
    # A model written for NCHW (view() of a conv output) cannot run channels-last: train says
    # which flag to change, and tune measures the layout, rules it out and goes on.
    model = os.path.join(ARGS.fixtures, "view_cnn.pt")
    if not os.path.exists(model):
        fail(f"fixture {model} missing")
    data10 = make_idx_dir(os.path.join(tmp, "ten"), classes=10)
    code, out, err = run("train", "--data", "idx:" + data10, "--model", model, "--steps", "2",
                         "--memory-format", "channels-last", "-q")
    errors = [l for l in err.splitlines() if l.startswith("saturate: error: ")]
    if code != 2 or len(errors) != 1 or not err.rstrip().endswith(errors[0]) or \
            "cannot run in --memory-format channels-last (view size" not in errors[0] or \
            "use --memory-format contiguous" not in errors[0]:
        fail(f"view() in channels-last: exit {code}, expected 2 and one error line:\n{err}")
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", "idx:" + data10, "--model", model, "--threads", "1",
                         "--max-batch", "64", "--quality-samples", "0", "--out", plan_path,
                         timeout=300)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    stage = [st for st in plan["stages"] if st["name"] == "memory_format"]
    if len(stage) != 1 or "channels-last cannot run" not in stage[0]["why"] or stage[0]["changed"]:
        fail(f"memory_format stage: {stage}\n{out}")
    if plan["config"]["memory_format"] != "contiguous":
        fail(f"plan layout {plan['config']['memory_format']}")
    summary = os.path.join(tmp, "p.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "3", "--summary-json", summary)
    if code != 0:
        fail(f"train --config exit {code}\n{err}")
    with open(summary) as f:
        if json.load(f)["memory_format"] != "contiguous":
            fail("train did not take the plan's layout")


def case_issue15_torchrun_two_ranks_train_as_one_process(tmp):
    # The real torchrun (the virtualenv's, --no-python) starts 2 ranks of batch 16: they take
    # one process's steps at batch 32, so the test split scores the same.
    data = make_idx_dir(tmp, n_train=512, n_test=128)
    # Few, small steps: the loss is still ~1.09, where batch 16 alone lands 5e-3 away.
    common = ["--data", "idx:" + data, "--model", "mlp", "--steps", "4", "--optimizer", "sgd",
              "--lr", "0.01", "--schedule", "constant", "--threads", "1", "-q"]
    one = os.path.join(tmp, "one.json")
    code, out, err = run("train", *common, "--batch-size", "32", "--summary-json", one)
    if code != 0:
        fail(f"one process: exit {code}\n{err}")
    two = os.path.join(tmp, "two.json")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
                        "--nproc-per-node", "2", ARGS.saturate, "train", *common,
                        "--batch-size", "16", "--summary-json", two],
                       capture_output=True, text=True, timeout=180)
    if p.returncode != 0:
        fail(f"torchrun: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    if "batch 16 per rank × 2 ranks = 32" not in p.stdout:
        fail(f"the summary does not state the global batch:\n{p.stdout}")
    with open(one) as f:
        a = json.load(f)
    with open(two) as f:
        b = json.load(f)
    if b["world_size"] != 2 or b["global_batch_size"] != 32 or b["batch_size"] != 16:
        fail(f"summary batch fields: {b}")
    # The all-reduce wait that did not overlap backward is its own phase, and only with 2 ranks.
    if not b["phases_ms"]["communication"] > 0 or a["phases_ms"]["communication"] != 0:
        fail(f"communication phase: 2 ranks {b['phases_ms']}, 1 process {a['phases_ms']}")
    if abs(a["test_loss"] - b["test_loss"]) > 1e-5 * a["test_loss"] or \
            a["test_accuracy"] != b["test_accuracy"]:
        fail(f"2 ranks x 16 vs 1 x 32: test loss {b['test_loss']} vs {a['test_loss']}, accuracy "
             f"{b['test_accuracy']} vs {a['test_accuracy']}")


def case_issue19_train_pipeline_as_one_process(tmp):
    # train --pipeline-stages 2 starts 2 ranks, each training its stage of mlp's 6 layers on the
    # same batches: after 6 SGD steps with the gradient clipped (by the norm of both stages'
    # gradients together: a stage clipping by its own norm alone drifts), the test split scores
    # as one process's model does, for either schedule.
    data = make_idx_dir(tmp, n_train=512, n_test=128)
    common = ["train", "--data", "idx:" + data, "--model", "mlp", "--steps", "6", "--batch-size",
              "32", "--optimizer", "sgd", "--lr", "0.05", "--schedule", "constant",
              "--clip-grad-norm", "0.05", "--threads", "1", "-q"]
    one = os.path.join(tmp, "one.json")
    code, out, err = run(*common, "--summary-json", one)
    if code != 0:
        fail(f"one process: exit {code}\n{err}")
    with open(one) as f:
        a = json.load(f)
    if a["pipeline"] is not None:
        fail(f"one process reports a pipeline: {a['pipeline']}")
    for schedule in ("gpipe", "1f1b"):
        path = os.path.join(tmp, schedule + ".json")
        trace = os.path.join(tmp, schedule + ".trace.json")
        code, out, err = run(*common, "--pipeline-stages", "2", "--micro-batches", "4",
                             "--pipeline-schedule", schedule, "--summary-json", path,
                             "--trace", trace, timeout=180)
        if code != 0:
            fail(f"{schedule}: exit {code}\n{out}\n{err}")
        with open(path) as f:
            b = json.load(f)
        p = b["pipeline"]
        if p is None or p["stages"] != 2 or p["micro_batches"] != 4 or p["schedule"] != schedule:
            fail(f"{schedule}: summary pipeline {p}")
        st = p["per_stage"]
        if len(st) != 2 or st[0]["first_layer"] != 0 or st[1]["last_layer"] != 5 or \
                st[1]["first_layer"] != st[0]["last_layer"] + 1 or \
                not all(x["compute_ms"] > 0 and x["communication_ms"] > 0 for x in st):
            fail(f"{schedule}: stages {st}")
        if b["world_size"] != 1 or b["global_batch_size"] != 32:
            fail(f"{schedule}: one replica of batch 32, got world {b['world_size']}, global batch "
                 f"{b['global_batch_size']}")
        if "[rank 0]   pipeline        2 stages, 4 micro-batches per step, " + schedule not in out or \
                "[rank 0]   stage 1         layers" not in out:
            fail(f"{schedule}: the table does not show the stages:\n{out}")
        for k in ("test_loss", "final_loss"):
            if abs(a[k] - b[k]) > 1e-4 * abs(a[k]):
                fail(f"{schedule}: {k} {b[k]} with 2 stages vs {a[k]} in one process")
        if a["test_accuracy"] != b["test_accuracy"]:
            fail(f"{schedule}: test accuracy {b['test_accuracy']} vs {a['test_accuracy']}")
        # One track per stage, each step drawn as its schedule ran: 4 forwards and 4 backwards
        # with the waits between them.
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        pids = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        for pid, name in pids.items():
            mine = [e for e in events if e.get("pid") == pid and e.get("ph") == "X"]
            last = max(e["args"]["step"] for e in mine if "args" in e and "step" in e["args"]) \
                if any("args" in e and "step" in e.get("args", {}) for e in mine) else None
            names = [e["name"] for e in sorted(mine, key=lambda e: e["ts"])
                     if e.get("cat") == "phase" and e.get("args", {}).get("step") == last]
            if names.count("forward") != 4 or names.count("backward") != 4 or \
                    "communication" not in names:
                fail(f"{schedule}: {name}'s last step in the trace: {names}")
    # 4 ranks: 2 replicas of the 2-stage pipeline at batch 16 each train as one process at 32
    # (each stage's gradients averaged with its replica's after every step).
    path = os.path.join(tmp, "replicas.json")
    code, out, err = run("launch", "--nproc-per-node", "4", "--", *[x for x in common if x != "32"
                         and x != "--batch-size"], "--batch-size", "16", "--pipeline-stages", "2",
                         "--micro-batches", "2", "--summary-json", path, timeout=240)
    if code != 0:
        fail(f"2 stages x 2 replicas: exit {code}\n{out}\n{err}")
    if "2 ranks per replica × 2 replicas, global batch 32 (2 × 16)" not in err:
        fail(f"the ranks do not state the layout:\n{err}")
    with open(path) as f:
        c = json.load(f)
    if c["world_size"] != 2 or c["global_batch_size"] != 32 or c["pipeline"]["stages"] != 2:
        fail(f"2 x 2 summary: world {c['world_size']}, global batch {c['global_batch_size']}")
    for k in ("test_loss", "final_loss"):
        if abs(a[k] - c[k]) > 1e-4 * abs(a[k]):
            fail(f"2 stages x 2 replicas: {k} {c[k]} vs {a[k]} in one process")


def case_issue19_pipeline_fits_where_one_process_does_not(tmp):
    # mlp-deep at batch 256 peaks near 56 MiB in one process: under a 45 MiB budget per process
    # it runs out of memory, while 2 stages (each holding its half of the layers and their
    # activations) train within it.
    base = ["train", "--model", "mlp-deep", "--steps", "5", "--batch-size", "256", "--threads",
            "1", "-q", "--no-eval", "--memory-limit", "45MiB"]
    code, out, err = run(*base, timeout=180)
    if code != 1 or "out of memory" not in err:
        fail(f"one process under 45 MiB: exit {code}, expected 1 with out of memory\n{err[-2000:]}")
    path = os.path.join(tmp, "two.json")
    code, out, err = run(*base, "--pipeline-stages", "2", "--summary-json", path, timeout=180)
    if code != 0:
        fail(f"2 stages under 45 MiB: exit {code}\n{err[-3000:]}")
    with open(path) as f:
        st = json.load(f)["pipeline"]["per_stage"]
    if len(st) != 2 or not all(0 < x["peak_memory_bytes"] <= 45 << 20 for x in st):
        fail(f"stages' peaks: {[x['peak_memory_bytes'] for x in st]}")


def case_issue19_tune_measures_pipeline_stages_when_memory_binds(tmp):
    # mlp-deep's weights and AdamW state take most of 60 MiB: the user's batch of 256 fits one
    # process only through accumulation, whose run sits at the limit. The ranks stage then also
    # runs the batch as 2 pipeline stages (each holding half the layers) through train itself,
    # and the plan it keeps trains an epoch within the limit under train --config. On this
    # machine one process runs out of memory in train and the plan takes the 2 stages.
    data = "synthetic:1,28,28,10,2048"
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", data, "--model", "mlp-deep", "--batch-size", "256",
                         # A budget well above the ~15 s it takes: on a loaded machine a tight
                         # one leaves the ranks stage, the subject here, no time.
                         "--memory-limit", "60MiB", "--budget-s", "200", "--max-ranks", "2",
                         "--effective-batch", "keep", "--quality-samples", "0", "--out",
                         plan_path, timeout=280)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err[-3000:]}")
    with open(plan_path) as f:
        plan = json.load(f)
    [stage] = [s for s in plan["stages"] if s["name"] == "ranks"]
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no pipeline to try")
        return
    trials = [t for t in plan["trials"] if t["stage"] == "ranks"]
    piped = [t for t in trials if t["config"]["pipeline_stages"] == 2]
    if not piped or any(t["config"]["batch_size"] != 256 or t["config"]["accumulate"] != 1 or
                        t["config"]["world_size"] != 2 for t in piped):
        fail(f"ranks trials: {[(t['config']['pipeline_stages'], t['config']['batch_size']) for t in trials]}; "
             f"the stage: {stage['why']}")
    if not any(t["outcome"] == "fits" and t["samples_per_s"] > 0 for t in piped) or \
            "2 pipeline stages × 1 thread" not in stage["why"]:
        fail(f"the 2 stages did not run: {stage['why']}")
    c = plan["config"]
    ones = [t for t in trials if t["config"]["world_size"] == 1]
    if c["pipeline_stages"] == 1 and not any(t["outcome"] == "fits" for t in ones):
        fail(f"kept one process, which did not run: {stage['why']}")
    if c["pipeline_stages"] == 2 and "one process does not run within the memory limit" not in \
            stage["why"] and "2 pipeline stages" not in stage["why"].split("kept")[-1]:
        fail(f"took the stages without saying why: {stage['why']}")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--data", data, "--model", "mlp-deep",
                         "--epochs", "1", "--no-eval", "-q", "--summary-json", summary, timeout=240)
    if code != 0:
        fail(f"train --config: exit {code}\n{err[-3000:]}")
    with open(summary) as f:
        sj = json.load(f)
    peaks = ([x["peak_memory_bytes"] for x in sj["pipeline"]["per_stage"]] if sj["pipeline"]
             else [sj["peak_memory_bytes"]])
    if (sj["pipeline"] is not None) != (c["pipeline_stages"] == 2) or \
            not all(0 < p <= 60 << 20 for p in peaks) or sj["epochs"] < 0.99:
        fail(f"the plan's run: pipeline {sj['pipeline']}, peaks {peaks}, epochs {sj['epochs']}")
    print(f"plan: {c['pipeline_stages']} stage(s); {stage['why'][-200:]}")


def train_layouts(tmp, common, layouts, replica_ranks=2):
    """Runs `train` with `common` plus each layout's flags; a name ending in x2 runs as 2
    replicas of `replica_ranks` ranks under launch. Returns {name: (summary, stdout)}."""
    results = {}
    for name, extra in layouts:
        path = os.path.join(tmp, name + ".json")
        argv = common + extra + ["--summary-json", path]
        if name.endswith("x2"):
            argv = ["launch", "--nproc-per-node", str(2 * replica_ranks), "--"] + argv
        code, out, err = run(*argv, timeout=240)
        if code != 0:
            fail(f"{name}: exit {code}\n{out}\n{err[-3000:]}")
        with open(path) as f:
            results[name] = (json.load(f), out)
    return results


def losses_as_one_process(results, split, replicated):
    """The split's final and validation losses are one process's; with replicas only the
    validation loss (the training loss is rank 0's replica's, its half of each batch, as under
    data parallel)."""
    a = results["one"][0]
    for name, keys in ((split, ("final_loss", "val_loss")), (replicated, ("val_loss",))):
        b = results[name][0]
        for k in keys:
            if abs(a[k] - b[k]) > 1e-4 * abs(a[k]):
                fail(f"{name}: {k} {b[k]} vs {a[k]} in one process")


def saved_models_evaluate_alike(tmp, names):
    """Each layout's --save-model file (tmp/NAME.safetensors, the model gathered whole from its
    stages or shares on rank 0) evaluates under `saturate eval` to the first one's loss."""
    losses = {}
    for name in names:
        code, out, err = run("eval", "--model", os.path.join(tmp, name + ".safetensors"), "--json",
                             timeout=120)
        if code != 0:
            fail(f"eval of {name}'s saved model: exit {code}\n{err}")
        losses[name] = json.loads(out)["validation"]["loss"]
    first = losses[names[0]]
    for name in names[1:]:
        if abs(losses[name] - first) > 1e-4 * abs(first):
            fail(f"{name}'s saved model evaluates to {losses[name]}, {names[0]}'s to {first}")


def saving(tmp, layouts):
    """`layouts` with --save-model tmp/NAME.safetensors added to each."""
    return tuple((name, extra + ["--save-model", os.path.join(tmp, name + ".safetensors")])
                 for name, extra in layouts)


def gpt_clipped_hard(steps):
    """`train` of a 2-block GPT on the license texts with plain SGD and the gradient clipped
    hard (every step's norm is over 0.2): a layout that computes the norm wrongly drifts."""
    return ["train", "--model", "gpt-mini:layers=2,heads=4,width=64", "--data",
            "text:" + LICENSES, "--seq-len", "32", "--steps", str(steps), "--optimizer", "sgd",
            "--lr", "0.5", "--schedule", "constant", "--clip-grad-norm", "0.2",
            "--threads", "1", "-q"]


def case_issue19_train_tensor_parallel_as_one_process(tmp):
    # train --tensor-parallel 2 starts 2 ranks, each holding half of every block's attention
    # heads and MLP columns; 2 x 2 ranks add data parallel over the replicas. Their losses are
    # one process's at the same global batch, and so are their saved models (the shares
    # gathered whole). The gradient is clipped hard, by the norm of the whole model: each
    # share's squares summed over the ranks, the whole tensors' counted once (a rank clipping
    # by its own shares' norm drifts from one process).
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    results = train_layouts(tmp, gpt_clipped_hard(12), saving(tmp, (
        ("one", ["--batch-size", "8"]),
        ("tp2", ["--batch-size", "8", "--tensor-parallel", "2"]),
        ("tp2x2", ["--batch-size", "4", "--tensor-parallel", "2"]))))
    for name, (_, out) in results.items():
        if name != "one" and "tensor parallel 2 ranks split each block's attention heads" not in out:
            fail(f"{name}: the table does not show the split:\n{out}")
    for name in ("tp2", "tp2x2"):
        b = results[name][0]
        if b["tensor_parallel"] != 2 or b["global_batch_size"] != 8:
            fail(f"{name}: tensor_parallel {b['tensor_parallel']}, global batch {b['global_batch_size']}")
    losses_as_one_process(results, "tp2", "tp2x2")
    saved_models_evaluate_alike(tmp, ("one", "tp2", "tp2x2"))


def case_issue19_train_gpt_pipeline_as_one_process(tmp):
    # The GPT split by layers: the embeddings and the first block on stage 0, the second block
    # and the head on stage 1. The output layer's weight is the token embedding's, so both
    # stages hold a copy: the pipeline sums the copies' gradients across the two, and the
    # clipping norm counts the weight once. With the gradient clipped hard and the balanced
    # split profiling token windows, 2 stages (and 2 replicas of them) train as one process,
    # and their saved models (replica 0's stages gathered on rank 0) are one process's.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    results = train_layouts(tmp, gpt_clipped_hard(8), saving(tmp, (
        ("one", ["--batch-size", "8"]),
        ("pp2", ["--batch-size", "8", "--pipeline-stages", "2", "--micro-batches", "4"]),
        ("pp2x2", ["--batch-size", "4", "--pipeline-stages", "2", "--micro-batches", "2",
                   "--pipeline-split", "even"]))))
    for name in ("pp2", "pp2x2"):
        b = results[name][0]
        p = b["pipeline"]
        if p is None or p["stages"] != 2 or b["global_batch_size"] != 8:
            fail(f"{name}: pipeline {p}, global batch {b['global_batch_size']}")
        st = p["per_stage"]
        if st[0]["first_layer"] != 0 or st[1]["last_layer"] != 3:
            fail(f"{name}: the stages' layers {st} (4: the embeddings, 2 blocks, the head)")
    losses_as_one_process(results, "pp2", "pp2x2")
    saved_models_evaluate_alike(tmp, ("one", "pp2", "pp2x2"))


def case_issue19_train_gpt_in_stages_of_shares_as_one_process(tmp):
    # The GPT split by tensor and into stages at once: 2 stages of 2 shares (4 ranks, each
    # share's stages a pipeline), and 2 replicas of that (8 ranks). With the gradient clipped
    # hard, by the whole model's norm (each stage's shares summed over its group, then the
    # stages summed), they train as one process, and their saved models (each stage's shares
    # gathered, replica 0's stages sent to rank 0) evaluate alike.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    both = ["--pipeline-stages", "2", "--tensor-parallel", "2"]
    results = train_layouts(tmp, gpt_clipped_hard(8), saving(tmp, (
        ("one", ["--batch-size", "8"]),
        ("pp2tp2", ["--batch-size", "8", "--micro-batches", "4"] + both),
        ("pp2tp2x2", ["--batch-size", "4", "--micro-batches", "2"] + both))), replica_ranks=4)
    for name in ("pp2tp2", "pp2tp2x2"):
        b, out = results[name]
        p = b["pipeline"]
        if p is None or p["stages"] != 2 or b["tensor_parallel"] != 2 or b["global_batch_size"] != 8:
            fail(f"{name}: pipeline {p}, tensor_parallel {b['tensor_parallel']}, global batch "
                 f"{b['global_batch_size']}")
        if "tensor parallel 2 ranks split each block's attention heads" not in out:
            fail(f"{name}: the table does not show the tensor split:\n{out}")
    losses_as_one_process(results, "pp2tp2", "pp2tp2x2")
    saved_models_evaluate_alike(tmp, ("one", "pp2tp2", "pp2tp2x2"))


def case_issue19_tune_measures_tensor_parallel_when_memory_binds(tmp):
    # A GPT whose batch of 32 runs out of 80 MiB in one process (it fits there only as 4
    # micro-batches): the ranks stage also measures the whole batch split by tensor over 2
    # ranks (and as 2 pipeline stages), through train itself, each rank's peak held to the limit
    # on its own. Whichever is fastest is kept; a plan that keeps the split runs it under
    # train --config.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no split to measure")
        return
    model = "gpt-mini:layers=2,heads=4,width=256"
    common = ["--model", model, "--data", "text:" + LICENSES, "--seq-len", "64"]
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", *common, "--batch-size", "32", "--memory-limit", "80MiB",
                         "--budget-s", "0", "--quality-samples", "0", "--effective-batch", "keep",
                         "--max-ranks", "2", "--out", plan_path, timeout=280)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err[-3000:]}")
    with open(plan_path) as f:
        plan = json.load(f)
    [stage] = [s for s in plan["stages"] if s["name"] == "ranks"]
    trials = [t for t in plan["trials"] if t["stage"] == "ranks"]
    split = [t for t in trials if t["config"]["tensor_parallel"] == 2]
    if not split or any(t["config"]["world_size"] != 2 or t["config"]["batch_size"] != 32 or
                        t["config"]["accumulate"] != 1 for t in split):
        fail(f"ranks trials: {[(t['config']['tensor_parallel'], t['config']['world_size']) for t in trials]}")
    if not any(t["outcome"] == "fits" and t["samples_per_s"] > 0 for t in split) or \
            "2 tensor-parallel ranks × 1 thread" not in stage["why"]:
        fail(f"the split did not run: {stage['why']}")
    # The plan as the stage would write it had the split been fastest: train --config starts
    # the 2 ranks and each stays under the limit.
    plan["config"] = split[0]["config"]
    split_path = os.path.join(tmp, "split.json")
    with open(split_path, "w") as f:
        json.dump(plan, f)
    s = train_plan(tmp, split_path, common + ["--steps", "4"])
    if s["tensor_parallel"] != 2 or s["global_batch_size"] != 32:
        fail(f"train --config ran tensor_parallel {s['tensor_parallel']}, global batch {s['global_batch_size']}")
    if not 0 < s["peak_memory_bytes"] <= 80 << 20:
        fail(f"a rank's peak {s['peak_memory_bytes']} is not within 80 MiB")


def case_issue19_tune_splits_a_model_one_process_cannot_hold(tmp):
    # A GPT whose weights, gradients and AdamW moments alone (about 200 MB) exceed 160 MiB: one
    # sample does not fit one process, so tune leaves the layout to its ranks stage, which
    # measures the model as 2 pipeline stages and split by tensor over 2 ranks and keeps one
    # that runs; train --config then trains an epoch under the same limit. Under 100 MiB
    # neither split runs either: one line, exit 2.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no split to measure")
        return
    text = os.path.join(tmp, "text.txt")
    with open(os.path.join(LICENSES, "GPL-3"), encoding="utf-8") as f:
        body = f.read()[:12000]
    with open(text, "w", encoding="utf-8") as f:
        f.write(body)
    common = ["--model", "gpt-mini:layers=4,heads=4,width=512", "--data", "text:" + text,
              "--seq-len", "32"]
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", *common, "--batch-size", "8", "--memory-limit", "160MiB",
                         "--max-ranks", "2", "--out", plan_path, timeout=280)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err[-3000:]}")
    with open(plan_path) as f:
        plan = json.load(f)
    [check] = [s for s in plan["stages"] if s["name"] == "check"]
    [ranks] = [s for s in plan["stages"] if s["name"] == "ranks"]
    if "one sample does not fit one process" not in check["why"]:
        fail(f"check: {check['why']}")
    c = plan["config"]
    if not ranks["changed"] or c["world_size"] != 2 or \
            max(c["tensor_parallel"], c["pipeline_stages"]) != 2 or c["batch_size"] != 8:
        fail(f"the plan does not split the model: {c}\n{ranks['why']}")
    if "one process does not run within the memory limit" not in ranks["why"]:
        fail(f"ranks: {ranks['why']}")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, *common, "--epochs", "1", "-q",
                         "--summary-json", summary, timeout=280)
    if code != 0:
        fail(f"train --config: exit {code}\n{err[-3000:]}")
    with open(summary) as f:
        s = json.load(f)
    if s["epochs"] < 0.99 or not 0 < s["peak_memory_bytes"] <= 160 << 20:
        fail(f"train --config: {s['epochs']} epochs, peak {s['peak_memory_bytes']}")
    code, out, err = run("tune", *common, "--batch-size", "8", "--memory-limit", "100MiB",
                         "--max-ranks", "2", "--out", os.path.join(tmp, "none.json"), timeout=280)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if code != 2 or "no split of the model over processes ran within it" not in last or \
            os.path.exists(os.path.join(tmp, "none.json")):
        fail(f"under 100 MiB: exit {code}, last line: {last}")


def case_issue19_tune_measures_stages_of_shares(tmp):
    # A GPT that under 25 MiB a process runs neither in one process nor as 2 stages or 2 shares:
    # with --max-ranks 4 (past this machine's 2 cores: a split that fits nowhere else) the ranks
    # stage also measures 4 stages, 4 shares where the heads split so (2 heads: not here) and 2
    # stages of 2 shares, which runs. It keeps a 4-process layout, and train --config trains an
    # epoch of it with every process under the limit.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no split to measure")
        return
    common = ["--model", "gpt-mini:layers=4,heads=2,width=256", "--data",
              "text:" + os.path.join(LICENSES, "Apache-2.0"), "--seq-len", "32"]
    plan_path, plan = tune_plan(tmp, common + ["--batch-size", "8", "--memory-limit", "25MiB",
                                               "--max-ranks", "4", "--budget-s", "240",
                                               "--effective-batch", "keep", "--quality-samples",
                                               "0"], 280)
    [ranks] = [s for s in plan["stages"] if s["name"] == "ranks"]
    outcome = {}
    for t in plan["trials"]:
        c = t["config"]
        if t["stage"] == "ranks":
            key = (c["world_size"], c["pipeline_stages"], c["tensor_parallel"])
            outcome[key] = outcome.get(key, "") or t["outcome"]
    if outcome.get((4, 2, 2)) != "fits" or outcome.get((1, 1, 1)) != "oom" or \
            outcome.get((2, 2, 1)) != "oom" or outcome.get((2, 1, 2)) != "oom":
        fail(f"ranks trials (world, stages, shares): {outcome}\n{ranks['why']}")
    c = plan["config"]
    if c["pipeline_stages"] * c["tensor_parallel"] != 4 or c["world_size"] != 4:
        fail(f"kept {c}\n{ranks['why']}")
    # The plan cuts its stages where the measured runs did (their balanced profile), not where
    # train --config's own profile, on a machine loaded otherwise, would.
    if c["pipeline_stages"] > 1 and not re.fullmatch(r"\d+(,\d+)*", c["pipeline_split"]):
        fail(f"the plan's stages are not cut where the trial cut them: {c['pipeline_split']}")
    sj = train_plan(tmp, plan_path, common + ["--epochs", "1"])
    peaks = [x["peak_memory_bytes"] for x in sj["pipeline"]["per_stage"]] if sj["pipeline"] \
        else [sj["peak_memory_bytes"]]
    if sj["epochs"] < 0.99 or not all(0 < p <= 25 << 20 for p in peaks):
        fail(f"train --config: {sj['epochs']} epochs, peaks {peaks}")
    print(f"kept {c['pipeline_stages']} stages x {c['tensor_parallel']} shares; peaks {peaks}")


def case_issue19_pipeline_bad_input(tmp):
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    base = ["train", "--data", "idx:" + data, "--model", "mlp", "--steps", "2", "--batch-size",
            "32", "--threads", "1", "-q"]
    for flags, want in (
            (["--pipeline-stages", "0"], "--pipeline-stages must be at least 1, got 0"),
            (["--pipeline-stages", "2", "--micro-batches", "0"], "--micro-batches must be at least 1"),
            (["--micro-batches", "4"], "--micro-batches needs --pipeline-stages above 1"),
            (["--pipeline-stages", "2", "--micro-batches", "33"],
             "--micro-batches 33 is more than the batch of 32"),
            (["--pipeline-stages", "2", "--pipeline-schedule", "zigzag"],
             "--pipeline-schedule: 'zigzag' is not a pipeline schedule (gpipe, 1f1b)"),
            (["--pipeline-stages", "2", "--pipeline-split", "random"], "--pipeline-split: 'random'"),
            (["--pipeline-stages", "3", "--pipeline-split", "1,1"],
             "--pipeline-split: '1,1' gives 2 stages' layer counts for 3 stages"),
            (["--pipeline-stages", "2", "--accumulate", "2"],
             "--pipeline-stages: cannot be combined with --accumulate"),
            (["--tensor-parallel", "0"], "--tensor-parallel must be at least 1, got 0"),
            (["--tensor-parallel", "2", "--recompute-segments", "2"],
             "--tensor-parallel: cannot be combined with --recompute-segments yet")):
        expect_usage_error(base + flags, want)
    # Found by the ranks once they know the model and the world: one line, exit 2, through the
    # launcher.
    for argv, want in (
            (base + ["--pipeline-stages", "7"], "--pipeline-stages 7: the model has only 6 layers"),
            (["train", "--data", "idx:" + make_idx_dir(os.path.join(tmp, "ten"), classes=10),
              "--model", os.path.join(ARGS.fixtures, "tiny_cnn.pt"), "--steps", "1", "--threads",
              "1", "-q", "--pipeline-stages", "2"], "cannot be split into stages by layers"),
            (["launch", "--nproc-per-node", "3", "--"] + base + ["--pipeline-stages", "2"],
             "--pipeline-stages 2: the world of 3 ranks is not a multiple of it"),
            (["launch", "--nproc-per-node", "6", "--"] + base +
             ["--pipeline-stages", "2", "--tensor-parallel", "2"],
             "--pipeline-stages 2 × --tensor-parallel 2 = 4 ranks a replica: the world of 6 ranks "
             "is not a multiple of it"),
            (base + ["--tensor-parallel", "2"],
             "--tensor-parallel 2: mlp cannot be split by tensor (the GPT can)"),
            (base + ["--pipeline-stages", "2", "--pipeline-split", "1,1"],
             "--pipeline-split: the stages' layer counts add up to 2; the model has 6 layers"),
            (["train", "--model", "gpt-mini:layers=1,heads=4,width=32", "--data", "text:" + LICENSES,
              "--seq-len", "16", "--steps", "1", "--threads", "1", "-q", "--tensor-parallel", "3"],
             "heads and width 32 do not split evenly over it"),
            ):
        code, out, err = run(*argv, timeout=180)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if code != 2 or want not in last or not last.startswith("saturate: error: "):
            fail(f"{argv[-6:]}: exit {code}, expected 2 with '{want}' last:\n{err[-3000:]}")


def case_issue15_dist_bad_input(tmp):
    data = make_idx_dir(tmp)
    base = ["train", "--data", "idx:" + data, "--model", "mlp", "--steps", "2", "-q"]
    for env, flags, want in (
            ({"WORLD_SIZE": "2"}, [], "dist: WORLD_SIZE is set without RANK"),
            ({"RANK": "2", "WORLD_SIZE": "2"}, [], "dist: RANK 2 is outside [0, 2)"),
            ({}, ["--backend", "glo"], "unknown --backend 'glo'; did you mean 'gloo'?"),
            ({}, ["--dist-timeout", "0"], "--dist-timeout must be a positive number"),
            ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
             ["--backend", "nccl"], "--backend nccl")):
        code, out, err = run(*base, *flags, env=env)
        errors = [l for l in err.splitlines() if l.startswith("saturate: error: ")]
        if code != 2 or len(errors) != 1 or want not in errors[0]:
            fail(f"{env} {flags}: exit {code}, expected 2 with '{want}':\n{err}")
    # Under torchrun a failing rank writes TORCHELASTIC_ERROR_FILE: the agent's report shows
    # saturate's error line as the root cause instead of "<N/A>".
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
                        "--nproc-per-node", "2", ARGS.saturate, *base[:-1], "--backend", "nccl"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "traceback : saturate: error: dist: --backend nccl" not in p.stderr:
        fail(f"torchrun did not show the rank's error: exit {p.returncode}\n{p.stderr[-2000:]}")


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def case_issue15_a_killed_rank_ends_the_job(tmp):
    # SIGKILL one rank mid-run: the other must not wait for the default 30 minutes. Started by
    # hand (the launcher's variables only) and under torchrun.
    data = make_idx_dir(tmp, n_train=512, n_test=64)
    cmd = [ARGS.saturate, "train", "--data", "idx:" + data, "--model", "mlp", "--steps", "100000",
           "--batch-size", "16", "--threads", "1", "--no-eval", "-q", "--dist-timeout", "20"]
    port = free_port()
    procs = []
    try:
        for r in range(2):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        time.sleep(4)  # well into training
        if procs[0].poll() is not None:
            fail(f"rank 0 ended before the kill: {procs[0].communicate()}")
        procs[1].kill()
        t0 = time.time()
        try:
            _, err = procs[0].communicate(timeout=30)
        except subprocess.TimeoutExpired:
            fail("rank 0 still runs 30 s after its peer was killed")
        took = time.time() - t0
        errors = [l for l in err.splitlines() if l.startswith("saturate: error: ")]
        named = f"a collective failed, rank 1 (pid {procs[1].pid}) has exited"
        if procs[0].returncode == 0 or len(errors) != 1 or named not in errors[0]:
            fail(f"rank 0: exit {procs[0].returncode} after the kill, expected non-zero and one "
                 f"error line with '{named}':\n{err}")
        print(f"by hand: rank 0 exited {procs[0].returncode} {took:.1f} s after the kill: "
              f"{errors[0]}")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    # Under torchrun: its agent sees the dead worker, stops the other and names the rank.
    code, err, env, took = kill_a_rank([sys.executable, "-m", "torch.distributed.run",
                                        "--no-python", "--standalone", "--nproc-per-node", "2",
                                        *cmd], settle_s=6, who="torchrun")
    if code == 0 or f"local_rank: {env['LOCAL_RANK']}" not in err or "-9" not in err:
        fail(f"torchrun exit {code}, expected non-zero naming local_rank {env['LOCAL_RANK']}:\n"
             f"{err[-3000:]}")
    print(f"torchrun: exited {code} {took:.1f} s after the kill")
    # Under saturate launch: it sees the dead rank, stops the other and names the rank.
    code, err, env, took = kill_a_rank([ARGS.saturate, "launch", "--nproc-per-node", "2", "--",
                                        *cmd[1:]], settle_s=5, who="launch")
    last = err.strip().splitlines()[-1]
    want = f"saturate: error: launch: rank {env['RANK']} of 2 failed first: killed by SIGKILL"
    if code != 1 or last != want:
        fail(f"launch: exit {code}, expected 1 ending with '{want}':\n{err[-3000:]}")
    print(f"launch: exited {code} {took:.1f} s after the kill: {last}")


def children(pid):
    """The pids of `pid`'s child processes."""
    return subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()


def kill_a_rank(argv, settle_s, who):
    """Starts the launcher `argv` in its own session, lets it run `settle_s`, SIGKILLs the second
    of its children that run `train`, and returns (the launcher's exit code, its stderr, the
    killed rank's environment, seconds from the kill to the launcher's exit). Fails when the
    launcher still runs 30 s after the kill; leaves no process behind."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        time.sleep(settle_s)
        kids = children(p.pid)
        ranks = [k for k in kids if "train" in open(f"/proc/{k}/cmdline").read()]
        if len(ranks) != 2:
            fail(f"{who}'s ranks: {ranks} (children {kids})")
        with open(f"/proc/{ranks[1]}/environ") as f:
            env = dict(e.split("=", 1) for e in f.read().split("\0") if "=" in e)
        os.kill(int(ranks[1]), signal.SIGKILL)
        t0 = time.time()
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            fail(f"{who} still runs 30 s after a rank was killed")
        return p.returncode, err, env, time.time() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def case_issue15_launch_two_ranks(tmp):
    # saturate launch gives each rank torchrun's variables and prefixes what it prints; a
    # saturate command after '--' runs this saturate.
    code, out, err = run("launch", "--nproc-per-node", "2", "--", "sh", "-c",
                         "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                         "$TORCHELASTIC_RESTART_COUNT; echo to-stderr >&2; "
                         "test -n \"$TORCHELASTIC_ERROR_FILE\" && test -n \"$MASTER_PORT\"")
    lines = sorted(out.splitlines())
    if code != 0 or lines != ["[rank 0] 0 2 0 2 127.0.0.1 0", "[rank 1] 1 2 1 2 127.0.0.1 0"]:
        fail(f"launch sh: exit {code}, stdout {lines}\n{err}")
    if "[rank 0] to-stderr" not in err or "[rank 1] to-stderr" not in err:
        fail(f"the ranks' stderr is not relayed with a prefix:\n{err}")
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("launch", "--nproc-per-node", "2", "--", "train", "--data", "idx:" + data,
                         "--model", "mlp", "--steps", "6", "--batch-size", "16", "-q",
                         "--summary-json", summary, "--logdir", os.path.join(tmp, "logs"),
                         "--trace", os.path.join(tmp, "trace.json"), timeout=180)
    if code != 0 or "[rank 0] saturate train: mlp" not in out:
        fail(f"launch train: exit {code}\n{out}\n{err}")
    if "saturate launch, gloo; global batch 32 (2 × 16)" not in err:
        fail(f"the ranks do not say they run under saturate launch:\n{err}")
    with open(summary) as f:
        s = json.load(f)
    # One JSONL/TensorBoard stream per rank, one trace with a track per rank.
    for r in range(2):
        with open(os.path.join(tmp, "logs", f"rank{r}", "steps.jsonl")) as f:
            steps = [json.loads(l) for l in f if '"type":"step"' in l]
        if len(steps) != 6 or not any(n.startswith("events.out.tfevents")
                                      for n in os.listdir(os.path.join(tmp, "logs", f"rank{r}"))):
            fail(f"rank {r}'s stream: {len(steps)} steps in {os.listdir(os.path.join(tmp, 'logs'))}")
    with open(os.path.join(tmp, "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    steps_per_pid = {}
    for e in events:
        if e.get("cat") == "step":
            steps_per_pid[e["pid"]] = steps_per_pid.get(e["pid"], 0) + 1
    if tracks != {"rank 0", "rank 1"} or sorted(steps_per_pid.values()) != [6, 6]:
        fail(f"trace tracks {tracks}, steps per track {steps_per_pid}")
    # 2 ranks on this machine's cores share them: 1 thread each on 2 cores, never 2 each.
    import multiprocessing
    want_threads = max(1, len(os.sched_getaffinity(0)) // 2)
    if s["world_size"] != 2 or s["global_batch_size"] != 32 or s["threads"] != want_threads:
        fail(f"summary: world {s['world_size']}, global batch {s['global_batch_size']}, threads "
             f"{s['threads']} (expected {want_threads})")


def case_issue15_launch_bad_input(tmp):
    expect_usage_error(["launch", "--nproc-per-node", "2"], "launch: no command to run")
    expect_usage_error(["launch", "--nproc-per-node", "0", "--", "true"],
                       "launch: --nproc-per-node must be >= 1, got 0")
    expect_usage_error(["launch", "--nnodes", "2", "--", "true"],
                       "launch: --master-port is needed with --nnodes 2")
    expect_usage_error(["launch", "--nnodes", "2", "--node-rank", "2", "--", "true"],
                       "launch: --node-rank must be in [0, 2), got 2")
    expect_usage_error(["launch", "--nproc-per-nod", "2", "--", "true"],
                       "did you mean '--nproc-per-node'?")
    expect_usage_error(["launch", "--", "no-such-program-here"],
                       "launch: 'no-such-program-here' is not a file and not found in PATH")
    # Any program: its exit code passed on, its last line on stderr as the reason.
    code, out, err = run("launch", "--nproc-per-node", "2", "--", sys.executable, "-c",
                         "import os, sys\nif os.environ['RANK'] == '1': 1 / 0\n"
                         "import time; time.sleep(30)")
    last = err.strip().splitlines()[-1]
    if code != 1 or last != ("saturate: error: launch: rank 1 of 2 failed first: exited with code "
                             "1: ZeroDivisionError: division by zero"):
        fail(f"a Python rank's error: exit {code}, last line:\n{last}\n{err}")
    # A rank that rejects its own flags: exit 2 passed on, the rank and its error line named.

    code, out, err = run("launch", "--nproc-per-node", "2", "--", "train", "--steps", "-1")
    last = err.strip().splitlines()[-1]
    if code != 2 or not re.fullmatch(r"saturate: error: launch: rank [01] of 2 failed first: "
                                     r"exited with code 2: UsageError: train: --steps must not be "
                                     r"negative, got -1", last):
        fail(f"a rank's usage error: exit {code}, last line:\n{last}\n{err}")


def case_issue15_launch_forwards_signals(tmp):
    # Ctrl-C (SIGINT) reaches the launcher alone in a terminal; it passes it on once and the
    # ranks stop after their step (exit 130); SIGTERM ends them and the launcher says 143.
    data = make_idx_dir(tmp, n_train=512, n_test=64)
    cmd = [ARGS.saturate, "launch", "--nproc-per-node", "2", "--", "train", "--data", "idx:" + data,
           "--model", "mlp", "--steps", "100000", "--batch-size", "16", "--no-eval", "-q"]
    for sig, want in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            time.sleep(4)
            kids = children(p.pid)
            if len(kids) != 2:
                fail(f"launch's ranks: {kids}")
            p.send_signal(sig)
            try:
                out, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                fail(f"launch still runs 30 s after {sig.name}")
            if p.returncode != want or f"launch: {sig.name} received" not in err:
                fail(f"{sig.name}: exit {p.returncode}, expected {want}\n{err[-2000:]}")
            left = [k for k in kids if os.path.exists(f"/proc/{k}")]
            if left:
                fail(f"{sig.name}: ranks {left} outlived the launcher")
            if sig == signal.SIGINT and out.count("saturate train: mlp") != 1:
                fail(f"after Ctrl-C rank 0 should report the steps it made:\n{out}")
            print(f"{sig.name}: exit {p.returncode}")
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def case_issue15_plan_rules_on_the_global_batch(tmp):
    # A plan's batch is per rank of its world_size; its effective-batch rule is about the global
    # batch. `train --config` starts the plan's ranks itself when no launcher did.
    data = make_idx_dir(tmp, n_train=256, n_test=64)

    def plan(name, policy, world, batch, lr=0.1):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump({"schema_version": 1, "model": "mlp", "data": "idx:" + data,
                       "config": {"batch_size": batch, "lr": lr, "optimizer": "sgd",
                                  "schedule": "constant", "threads": 1, "world_size": world},
                       "effective_batch": {"policy": policy}}, f)
        return path

    def train(config, *flags):
        summary = os.path.join(tmp, "summary.json")
        if os.path.exists(summary):
            os.remove(summary)
        code, out, err = run("train", "--config", config, "--steps", "2", "--no-eval", "-q",
                             "--summary-json", summary, *flags, timeout=180)
        if code != 0:
            fail(f"train --config {config} {flags}: exit {code}\n{err}")
        with open(summary) as f:
            return json.load(f), err

    rescaled = plan("rescaled.json", "lr_rescaled", 2, 16)
    s, err = train(rescaled)  # the plan's 2 ranks, started by train itself
    if (s["world_size"], s["batch_size"], s["lr"]) != (2, 16, 0.1) or "(the plan's world size)" not in err:
        fail(f"the plan's world: {s['world_size']} ranks of {s['batch_size']}, lr {s['lr']}\n{err}")
    s, err = train(rescaled, "--ranks", "1")  # global 16 instead of 32: linear rule for SGD
    if (s["world_size"], s["global_batch_size"]) != (1, 16) or abs(s["lr"] - 0.05) > 1e-12 or \
            "global batch 16 instead of the plan's 32 (2 × 16): learning rate rescaled" not in err:
        fail(f"one rank of a 2-rank plan: lr {s['lr']}, expected 0.05\n{err}")
    kept = plan("kept.json", "kept", 1, 64)
    s, err = train(kept, "--ranks", "2")  # the plan's global batch, shared by the ranks
    if (s["world_size"], s["batch_size"], s["global_batch_size"], s["lr"]) != (2, 32, 64, 0.1):
        fail(f"a kept plan on 2 ranks: {s['batch_size']} per rank, global {s['global_batch_size']}")
    unchanged = plan("unchanged.json", "unchanged", 1, 32)
    s, err = train(unchanged, "--ranks", "2")
    if s["lr"] != 0.1 or "global batch 64 (2 ranks × 32) instead of the plan's 32" not in err or \
            "rule would give --lr 0.200000" not in err:
        fail(f"an unchanged plan on 2 ranks should keep lr 0.1 and say what the rule gives:\n{err}")
    # Under a launcher, --ranks must agree with it.
    code, out, err = run("train", "--config", unchanged, "--ranks", "3", "--steps", "1",
                         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": "1"})
    if code != 2 or "train: --ranks 3, but the launcher (torchrun) started 2 ranks" not in err:
        fail(f"--ranks against the launcher's world: exit {code}\n{err}")


def train_plan(tmp, plan_path, args):
    """Runs `saturate train --config plan_path` with `args`, without evaluation; fails the test
    unless it exits 0. Returns its summary."""
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, *args, "--no-eval", "-q",
                         "--summary-json", summary, timeout=240)
    if code != 0:
        fail(f"train --config {plan_path}: exit {code}\n{err[-3000:]}")
    with open(summary) as f:
        return json.load(f)


def tune_plan(tmp, args, timeout):
    """Runs `saturate tune` with `args` writing tmp/plan.json; fails the test unless it exits 0.
    Returns (the plan's path, the plan)."""
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", *args, "--out", plan_path, timeout=timeout)
    if code != 0:
        fail(f"tune exit {code}\n{out}\n{err[-3000:]}")
    with open(plan_path) as f:
        return plan_path, json.load(f)


def case_issue15_tune_measures_ranks_against_threads(tmp):
    # On CPU the ranks stage runs the plan as 1 process × all cores and as 2 processes × half,
    # through train itself, and keeps the faster; train --config then runs what it kept.
    # Samples that cost 300 us each to make: one process decodes them on one core (its workers
    # compete with its training thread), two processes on two. Usually 2 ranks win here.
    # The user's batch kept and no quality guard: the guard sizes its runs to the budget left
    # and, on a loaded machine (ctest --parallel), left too little for the ranks stage, the
    # subject here; a grown batch makes each ranks run longer than the budget affords.
    plan_path, plan = tune_plan(tmp, ["--data", "synthetic:1,28,28,10,2048,300", "--model", "mlp",
                                      "--batch-size", "64", "--budget-s", "60", "--max-ranks", "2",
                                      "--effective-batch", "keep", "--quality-samples", "0"], 240)
    [stage] = [s for s in plan["stages"] if s["name"] == "ranks"]
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        if "one usable core" not in stage["why"]:
            fail(f"ranks stage on one core: {stage}")
        print("one usable core: the ranks stage says so and runs nothing")
        return
    trials = [t for t in plan["trials"] if t["stage"] == "ranks"]
    worlds = sorted(t["config"]["world_size"] for t in trials)
    if worlds != [1, 1, 2, 2] or any(t["samples_per_s"] <= 0 for t in trials):
        fail(f"ranks trials: {[(t['config']['world_size'], t['samples_per_s']) for t in trials]}")
    # The same global batch either way (rounded down to split evenly over the ranks).
    global_batch = plan["config"]["batch_size"] * plan["config"]["world_size"]
    ones = [t for t in trials if t["config"]["world_size"] == 1]
    for t in trials:
        g = t["config"]["batch_size"] * t["config"]["world_size"]
        if not ones[0]["config"]["batch_size"] - 1 <= g <= ones[0]["config"]["batch_size"]:
            fail(f"ranks trial global batch {g} vs one process's {ones[0]['config']['batch_size']}")
    # One process keeps the threads the tune chose (its threads stage may pick 1 of 2 on a busy
    # machine); two share the cores, one thread each.
    t1 = ones[0]["config"]["threads"]
    one = f"1 rank × {t1} thread" + ("s" if t1 != 1 else "")
    if one not in stage["why"] or "2 ranks × 1 thread" not in stage["why"]:
        fail(f"ranks stage why (expected '{one}' and '2 ranks × 1 thread'): {stage['why']}")
    want_world = 2 if stage["changed"] else 1
    if plan["config"]["world_size"] != want_world:
        fail(f"stage changed={stage['changed']} but config world_size {plan['config']['world_size']}")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "4", "--no-eval", "-q",
                         "--summary-json", summary, timeout=120)
    if code != 0:
        fail(f"train --config exit {code}\n{err}")
    with open(summary) as f:
        s = json.load(f)
    if s["world_size"] != want_world or s["global_batch_size"] != global_batch:
        fail(f"train --config ran {s['world_size']} ranks of {s['batch_size']}")
    print(f"ranks stage: {stage['why']}")
    # A model with BatchNorm: each rank's statistics would come from its half of the batch.
    ten = make_idx_dir(os.path.join(tmp, "ten"), n_train=512, n_test=64, classes=10)
    code, out, err = run("tune", "--data", "idx:" + ten, "--model",
                         os.path.join(ARGS.fixtures, "tiny_cnn.pt"), "--batch-size", "32",
                         "--budget-s", "20", "--max-ranks", "2",
                         "--out", os.path.join(tmp, "bn.json"), timeout=240)
    if code != 0:
        fail(f"tune of a BatchNorm model: exit {code}\n{err}")
    with open(os.path.join(tmp, "bn.json")) as f:
        bn = json.load(f)
    [stage] = [s for s in bn["stages"] if s["name"] == "ranks"]
    if "BatchNorm statistics" not in stage["why"] or bn["config"]["world_size"] != 1 or \
            any(t["stage"] == "ranks" for t in bn["trials"]):
        fail(f"the ranks stage ran on a BatchNorm model: {stage}")


def case_issue19_split_runs_checkpoint_and_resume(tmp):
    # A split model keeps a checkpoint folder per part (DIR/part-K-of-N), its processes agree
    # on the steps they checkpoint and stop at, and a resumed run ends with the weights of an
    # uninterrupted one, byte for byte: 2 pipeline stages, a 2-way tensor split and the GPT in 2
    # stages of 2 shares (4 parts), resumed from step 32 of 48. Parts whose newest checkpoints differ, and a split run resumed from
    # one step's folder, are one line and exit 2.
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    layouts = {
        "pipeline": ["train", "--data", "synthetic:1,28,28,10,600", "--model", "mlp", "--steps",
                     "48", "--batch-size", "16", "--lr", "0.01", "--threads", "1", "-q",
                     "--no-eval", "--seed", "3", "--pipeline-stages", "2", "--micro-batches", "4"],
        "tensor": ["train", "--model", "gpt-mini:layers=2,heads=4,width=64", "--data",
                   "text:" + LICENSES, "--seq-len", "32", "--steps", "48", "--batch-size", "8",
                   "--threads", "1", "-q", "--no-eval", "--tensor-parallel", "2"]}
    layouts["both"] = layouts["tensor"] + ["--pipeline-stages", "2", "--micro-batches", "2"]
    for name, common in layouts.items():
        whole, resumed = os.path.join(tmp, name + "-a.safetensors"), os.path.join(tmp, name + "-b.safetensors")
        ck = os.path.join(tmp, name + "-ck")
        for argv in (common + ["--save-model", whole], common + ["--checkpoint-dir", ck, "--checkpoint-every", "16"]):
            code, out, err = run(*argv, timeout=240)
            if code != 0:
                fail(f"{name}: exit {code}\n{err[-2000:]}")
        parts = sorted(os.listdir(ck))
        steps = [sorted(os.listdir(os.path.join(ck, p))) for p in parts]
        n = 4 if name == "both" else 2
        if parts != [f"part-{k}-of-{n}" for k in range(n)] or \
                any(st != ["step-00000016", "step-00000032", "step-00000048"] for st in steps):
            fail(f"{name}: checkpoint folders {parts} {steps}")
        for p in parts:
            shutil.rmtree(os.path.join(ck, p, "step-00000048"))
        code, out, err = run(*common, "--checkpoint-dir", ck, "--resume", "auto", "--save-model",
                             resumed, timeout=240)
        if code != 0 or "resuming from" not in err or "(step 32)" not in err:
            fail(f"{name}: resume: exit {code}\n{err[-2000:]}")
        if open(whole, "rb").read() != open(resumed, "rb").read():
            fail(f"{name}: the resumed run's weights differ from the uninterrupted run's")
    ck = os.path.join(tmp, "pipeline-ck")
    for step in ("step-00000048", "step-00000032"):  # part 1 now ends at 16, part 0 at 48
        shutil.rmtree(os.path.join(ck, "part-1-of-2", step))
    # Found by the ranks once each has read its part: exit 2, the reason last, through the
    # launcher.
    code, out, err = run(*layouts["pipeline"], "--checkpoint-dir", ck, "--resume", "auto", timeout=120)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if code != 2 or "the parts' checkpoint folders do not match" not in last or \
            not last.startswith("saturate: error: "):
        fail(f"parts at different steps: exit {code}\n{err[-2000:]}")
    expect_usage_error(layouts["pipeline"] + ["--resume", os.path.join(ck, "part-0-of-2", "step-00000016")],
                       "resumes from its run's checkpoint folder")


def case_issue19_tune_checks_a_layouts_validation(tmp):
    # A layout the ranks stage would keep in place of one process (here 2 data-parallel ranks on
    # decode-heavy samples, which usually win) is first trained on the quality samples through
    # train, as is one process, from the same seed, and kept only when its validation matches
    # one process's (a unit test shows a worse one turned down).
    _, plan = tune_plan(tmp, ["--data", "synthetic:1,28,28,10,2048,300", "--model", "mlp",
                              "--batch-size", "64", "--budget-s", "120", "--max-ranks", "2",
                              "--effective-batch", "keep", "--quality-samples", "2048"], 300)
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no layout to check")
        return
    [stage] = [s for s in plan["stages"] if s["name"] == "ranks"]
    quality = [t for t in plan["trials"] if t["stage"] == "ranks" and t["purpose"] == "quality"]
    if not stage["changed"]:
        if quality and "was fastest, but" not in stage["why"]:
            fail(f"quality runs for a layout that was not kept, without saying why: {stage['why']}")
        print(f"kept one process: {stage['why'][-300:]}")
        return
    worlds = [t["config"]["world_size"] for t in quality]
    if worlds != [1, 2] or any(t["steps"] != 32 * w for t, w in zip(quality, worlds)) or \
            "after 2048 samples its val loss" not in stage["why"] or \
            "matches one process's val loss" not in stage["why"]:
        fail(f"the kept layout's quality runs: {[(t['config']['world_size'], t['steps']) for t in quality]}; "
             f"{stage['why']}")
    print(stage["why"][-300:])


def case_issue15_tune_under_a_launcher(tmp):
    # 2 ranks tune one job: trials are data parallel, out-of-memory decided for all (the batch
    # search's probes past the limit end on both ranks, none hangs), rank 0 alone reports and
    # writes a plan of world size 2 and per-rank batch, which train --config runs as 2 ranks.
    data = make_idx_dir(tmp, n_train=1024, n_test=64)
    plan_path = os.path.join(tmp, "plan.json")
    # 32 MiB a rank: batch 16 fits with room, and the search's probes pass the limit near batch
    # 64, early in its share of the budget even on a loaded machine (at 48 MiB they came near
    # 126, and once in CI the search's time ran out before any probe got there).
    code, out, err = run("launch", "--nproc-per-node", "2", "--", "tune", "--data", "idx:" + data,
                         "--model", "fmnist-cnn", "--batch-size", "16", "--budget-s", "60",
                         "--memory-limit", "32MiB", "--out", plan_path, timeout=280)
    if code != 0:
        fail(f"tune under launch: exit {code}\n{out}\n{err}")
    if "[rank 1]   baseline" in out or out.count("  baseline  ") != 1 or \
            "2 ranks × 1 thread," not in out:
        fail(f"rank 0 alone should report the tune of 2 ranks:\n{out}")
    with open(plan_path) as f:
        plan = json.load(f)
    c = plan["config"]
    ooms = [t for t in plan["trials"] if t["outcome"] == "oom"]
    if c["world_size"] != 2 or not ooms or any(t["config"]["world_size"] != 2 for t in plan["trials"]):
        fail(f"plan: world {c['world_size']}, {len(ooms)} OOM trials")
    # Each rank's share of 32 MiB: the plan's per-rank batch fits under it.
    if plan["tuned"]["peak_memory_bytes"] > 32 * 2**20:
        fail(f"tuned peak {plan['tuned']['peak_memory_bytes']} over the limit")
    if any(s["name"] == "ranks" for s in plan["stages"]):
        fail("the ranks stage ran inside a launched tune")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--config", plan_path, "--steps", "4", "--no-eval", "-q",
                         "--summary-json", summary, timeout=120)
    with open(summary) as f:
        s = json.load(f)
    if code != 0 or s["world_size"] != 2 or s["batch_size"] != c["batch_size"]:
        fail(f"train --config: exit {code}, {s.get('world_size')} ranks of {s.get('batch_size')}")
    print(f"plan: {c['batch_size']} per rank × 2, {len(ooms)} out-of-memory trials agreed")


def case_issue16_clip_grad_norm(tmp):
    # --clip-grad-norm bounds the update; every step's gradient norm (before clipping) is in
    # steps.jsonl; tune keeps the user's clipping in its plan, and train --config takes it.
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    logdir = os.path.join(tmp, "logs")
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "5",
                         "--clip-grad-norm", "0.5", "--logdir", logdir, "--summary-json", summary,
                         "-q", "--no-eval")
    if code != 0:
        fail(f"train --clip-grad-norm: exit {code}\n{err}")
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        steps = [json.loads(l) for l in f if '"type":"step"' in l]
    if len(steps) != 5 or not all(isinstance(st["grad_norm"], float) and st["grad_norm"] > 0
                                  for st in steps):
        fail(f"grad_norm per step: {[st.get('grad_norm') for st in steps]}")
    with open(summary) as f:
        if json.load(f)["clip_grad_norm"] != 0.5:
            fail("the summary lacks the clipping")
    expect_usage_error(["train", "--clip-grad-norm", "-1", "--steps", "1"],
                       "--clip-grad-norm must be a number >= 0")
    plan_path = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--data", "idx:" + data, "--model", "mlp", "--batch-size", "32",
                         "--clip-grad-norm", "0.5", "--budget-s", "15", "--max-ranks", "1",
                         "--out", plan_path, timeout=120)
    if code != 0:
        fail(f"tune --clip-grad-norm: exit {code}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    if plan["config"]["clip_grad_norm"] != 0.5:
        fail(f"the plan dropped the user's clipping: {plan['config']}")
    code, out, err = run("train", "--config", plan_path, "--steps", "2", "-q", "--no-eval",
                         "--summary-json", summary)
    with open(summary) as f:
        if code != 0 or json.load(f)["clip_grad_norm"] != 0.5:
            fail(f"train --config did not take the plan's clipping (exit {code})")


# ---- issue 34: defects ----------------------------------------------------------------------------

def case_issue34_profile_epochs(tmp):
    # Defect 7: --epochs was parsed and ignored (profile's default 50 steps won).
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    code, out, err = run("profile", "--data", "idx:" + data, "--model", "mlp", "--epochs", "2",
                         "--batch-size", "32", "--window", "4", "--warmup-steps", "2", "--json")
    if code != 0:
        fail(f"profile --epochs: exit {code}\n{err}")
    if json.loads(out)["steps"] != 16:
        fail(f"profile --epochs 2 of 8 batches ran {json.loads(out)['steps']} steps")


def case_issue34_no_eval_means_no_eval(tmp):
    # Defect 4: `train --no-eval --eval-every N` still evaluated every N steps.
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    logdir = os.path.join(tmp, "logs")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "8",
                         "--eval-every", "2", "--no-eval", "--logdir", logdir, "-q")
    if code != 0:
        fail(f"train: exit {code}\n{err}")
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        evals = [l for l in f if '"type":"eval"' in l]
    if evals:
        fail(f"--no-eval run evaluated: {evals[0]}")


def case_issue34_profile_scaling_run_outlasts_dist_timeout(tmp):
    # Defect 6: for the scaling efficiency rank 0 re-runs the steps alone while the other ranks
    # wait; they waited in a barrier bounded by --dist-timeout, so a profile longer than that
    # failed. Here the steps take ~5 s and --dist-timeout is 3 s (each collective of the run
    # itself takes milliseconds).
    summary = os.path.join(tmp, "p.json")
    code, out, err = run("profile", "--ranks", "2", "--data", "synthetic:1,28,28,10,2048,1000",
                         "--model", "mlp", "--batch-size", "32", "--steps", "150", "--threads", "1",
                         "--dist-timeout", "3", "--summary-json", summary, timeout=240)
    if code != 0:
        fail(f"profile --ranks 2 with a scaling run longer than --dist-timeout: exit {code}\n"
             f"{err[-3000:]}")
    with open(summary) as f:
        p = json.load(f)
    eff = p.get("scaling", {}).get("efficiency")
    if not isinstance(eff, (int, float)) or eff <= 0:
        fail(f"no scaling efficiency: {p.get('scaling')}")


def case_issue34_mfu_against_the_runs_precision(tmp):
    # A bf16 profile measured its MFU against the fp32 GEMM peak ("86% of the measured GEMM
    # peak" for a bf16 channels-last fmnist-cnn): the peak must be the bf16 GEMM's.
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    for precision in ("fp32", "bf16"):
        code, out, err = run("profile", "--data", "idx:" + data, "--model", "mlp", "--steps", "8",
                             "--batch-size", "32", "--warmup-steps", "2", "--precision",
                             precision, "--json")
        if code != 0:
            fail(f"profile --precision {precision}: exit {code}\n{err}")
        j = json.loads(out)
        if j.get("mfu_peak_precision") != precision or not j.get("mfu_peak_gflops", 0) > 0:
            fail(f"{precision} run: MFU peak {j.get('mfu_peak_precision')} "
                 f"{j.get('mfu_peak_gflops')} GFLOP/s")
        want = 100 * j["achieved_flops_per_s"] / (j["mfu_peak_gflops"] * 1e9)
        if abs(j["mfu_pct"] - want) > 1e-6 * max(1, want):
            fail(f"{precision}: mfu_pct {j['mfu_pct']} is not achieved / peak ({want})")


def case_issue34_ctrl_c_in_the_ranks_stage(tmp):
    # Defect 2: Ctrl-C while the ranks stage ran its candidates ended tune with exit 2 and no
    # plan (the launcher's 130 became a usage error). Ctrl-C at a terminal reaches the whole
    # foreground group: here the group this test made for tune. No budget and no guard: with a
    # budget, a loaded machine can leave too little of it for the ranks stage, which then says
    # "not tried" and the Ctrl-C lands after tune has finished.
    if len(os.sched_getaffinity(0)) < 2:
        print("one usable core: no ranks stage to interrupt")
        return
    plan_path = os.path.join(tmp, "plan.json")
    p = subprocess.Popen([ARGS.saturate, "tune", "--data", "synthetic:1,28,28,10,2048,300",
                          "--model", "mlp", "--batch-size", "64", "--budget-s", "0",
                          "--quality-samples", "0", "--max-ranks", "2", "--out", plan_path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.time() + 180
        seen = ""
        line = p.stdout.readline()
        while line and not line.lstrip().startswith("confirm") and time.time() < deadline:
            seen += line
            line = p.stdout.readline()
        seen += line
        if not line:
            fail(f"tune ended before its ranks stage:\n{seen}\n{p.stderr.read()}")
        time.sleep(0.5)  # the first candidate's ranks are starting
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if p.returncode != 130:
        fail(f"exit {p.returncode} after Ctrl-C in the ranks stage, expected 130\n{seen}{out}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    ranks = [s for s in plan["stages"] if s["name"] == "ranks"]
    if not plan["interrupted"] or not ranks or "interrupted" not in ranks[0]["why"]:
        fail(f"the partial plan: interrupted={plan['interrupted']}, ranks stage {ranks}")
    if plan["config"]["world_size"] != 1:
        fail("an interrupted ranks stage changed the plan's processes")


# ---- issue 16: checkpoints, resume, preemption, divergence ----------------------------------------

def checkpoint_tensors(step_dir):
    """The model tensors of a checkpoint folder, read with PyTorch alone."""
    import torch
    state = torch.jit.load(os.path.join(step_dir, "state.pt"), map_location="cpu").state_dict()
    return [state[f"model/{i}"] for i in range(int(state["model_count"]))]


def newest_checkpoint(d):
    steps = sorted(x for x in os.listdir(d) if x.startswith("step-"))
    return os.path.join(d, steps[-1]) if steps else None


def same_tensors(a_dir, b_dir):
    import torch
    a, b = checkpoint_tensors(a_dir), checkpoint_tensors(b_dir)
    if len(a) != len(b):
        return False
    return all(torch.equal(x, y) for x, y in zip(a, b))


RESUME_RUN = ["--model", "mlp", "--steps", "120", "--batch-size", "16", "--lr", "0.001",
              "--workers", "2", "--threads", "1", "--no-eval", "-q"]


def resume_data(tmp):
    # Decoding costs 3 ms a sample, so a step takes ~25 ms and a kill lands mid-run.
    return "synthetic:1,28,28,10,600,3000"


def case_issue16_kill_and_resume(tmp):
    # SIGKILL at random moments (several seeds, several kills each), then --resume auto until the
    # run completes: the final weights are bitwise those of an uninterrupted run, and steps.jsonl
    # holds every step once. (Dropout's generator state: checkpoint_test.cpp.)
    import random
    data = resume_data(tmp)
    whole = os.path.join(tmp, "whole")
    code, out, err = run("train", "--data", data, *RESUME_RUN, "--seed", "3",
                         "--checkpoint-dir", whole)
    if code != 0:
        fail(f"uninterrupted run: exit {code}\n{err}")
    kills = 0
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        ck = os.path.join(tmp, f"ck{seed}")
        logdir = os.path.join(tmp, f"logs{seed}")
        cmd = [ARGS.saturate, "train", "--data", data, *RESUME_RUN, "--seed", "3",
               "--checkpoint-dir", ck, "--checkpoint-every", "3", "--resume", "auto",
               "--logdir", logdir]
        for attempt in range(12):  # bounded: each attempt kills or completes
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = p.communicate(timeout=rng.uniform(1.0, 3.0))
                if p.returncode != 0:
                    fail(f"seed {seed}: resumed run exit {p.returncode}\n{err}")
                break
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                kills += 1
        else:
            fail(f"seed {seed}: the run never completed in 12 attempts")
        if not same_tensors(newest_checkpoint(whole), newest_checkpoint(ck)):
            fail(f"seed {seed}: resumed weights differ from the uninterrupted run's")
        with open(os.path.join(logdir, "steps.jsonl")) as f:
            steps = [json.loads(l)["step"] for l in f if '"type":"step"' in l]
        if steps != list(range(120)):
            missing = sorted(set(range(120)) - set(steps))
            fail(f"seed {seed}: steps.jsonl has {len(steps)} lines; missing {missing}, "
                 f"repeated {sorted(x for x in set(steps) if steps.count(x) > 1)}")
    if kills < 3:
        fail(f"only {kills} kills landed mid-run; the test did not test resuming")
    print(f"{kills} kills, all resumed bit for bit")


def case_issue16_sigterm_checkpoints_and_exits_143(tmp):
    data = resume_data(tmp)
    whole = os.path.join(tmp, "whole")
    code, _, err = run("train", "--data", data, *RESUME_RUN, "--checkpoint-dir", whole)
    if code != 0:
        fail(f"uninterrupted run: exit {code}\n{err}")
    ck = os.path.join(tmp, "ck")
    summary = os.path.join(tmp, "s.json")
    p = subprocess.Popen([ARGS.saturate, "train", "--data", data, *RESUME_RUN,
                          "--checkpoint-dir", ck, "--summary-json", summary],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.5)
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 143:
        fail(f"exit {p.returncode} after SIGTERM, expected 143\n{err}")
    if took > 5:
        fail(f"SIGTERM took {took:.1f} s to end the run")
    saved = newest_checkpoint(ck)
    with open(summary) as f:
        s = json.load(f)
    if saved is None or not s["terminated"] or s["last_checkpoint"] != saved:
        fail(f"no checkpoint at the stop: {saved}, summary {s.get('last_checkpoint')}")
    step = int(os.path.basename(saved).split("-")[1])
    if not 0 < step < 120 or s["steps"] != step:
        fail(f"checkpoint at step {step}, summary says {s['steps']}")
    code, out, err = run("train", "--data", data, *RESUME_RUN, "--resume", ck)
    if code != 0 or f"from step {step}" not in out:
        fail(f"resume after SIGTERM: exit {code}\n{out}\n{err}")
    if not same_tensors(newest_checkpoint(whole), newest_checkpoint(ck)):
        fail("the run resumed after SIGTERM ends with other weights")
    print(f"SIGTERM at step {step}, exit 143 in {took:.2f} s")


def case_issue16_damaged_or_foreign_checkpoints(tmp):
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    ck = os.path.join(tmp, "ck")
    base = ["train", "--data", "idx:" + data, "--threads", "1", "--no-eval", "-q"]
    mlp32 = [*base, "--model", "mlp", "--batch-size", "32"]
    code, _, err = run(*mlp32, "--steps", "20", "--checkpoint-dir", ck, "--checkpoint-every", "5")
    if code != 0:
        fail(f"train with checkpoints: exit {code}\n{err}")
    got = sorted(os.listdir(ck))
    if got != ["step-00000010", "step-00000015", "step-00000020"]:
        fail(f"--keep-checkpoints 3 kept {got}")
    # A bit flipped in the newest: passed over (named), the one before used.
    state = os.path.join(ck, "step-00000020", "state.pt")
    with open(state, "r+b") as f:
        f.seek(300)
        b = f.read(1)
        f.seek(300)
        f.write(bytes([b[0] ^ 0x01]))
    code, out, err = run(*mlp32, "--steps", "25", "--resume", ck)
    if code != 0 or "passed over" not in err or "step-00000020" not in err or "from step 15" not in out:
        fail(f"resume past a damaged newest: exit {code}\n{out}\n{err}")
    # Another run's checkpoint: refused naming the setting, nothing trained.
    expect_usage_error([*base, "--model", "mlp", "--batch-size", "16", "--steps", "25", "--resume",
                        ck], "its batch_size is 32, this run's is 16")
    expect_usage_error([*base, "--model", "fmnist-cnn", "--batch-size", "32", "--steps", "25",
                        "--resume", ck], "its model is mlp, this run's is fmnist-cnn")
    expect_usage_error([*mlp32, "--steps", "10", "--resume", ck], "past this run's 10 steps")
    # Every checkpoint damaged: one line, exit 2, never a run from garbage.
    for d in os.listdir(ck):
        with open(os.path.join(ck, d, "state.pt"), "r+b") as f:
            f.truncate(64)
    expect_usage_error([*mlp32, "--steps", "25", "--resume", ck], "no usable checkpoint in " + ck)
    expect_usage_error([*mlp32, "--steps", "25", "--resume", os.path.join(tmp, "nowhere")],
                       "does not exist")
    expect_usage_error([*mlp32, "--steps", "5", "--resume", "auto"],
                       "--resume auto needs --checkpoint-dir")
    expect_usage_error([*mlp32, "--steps", "5", "--checkpoint-dir", ck, "--checkpoint-interval",
                        "soon"], "--checkpoint-interval")


def case_issue16_saved_model_loads_in_python(tmp):
    """train --save-model writes safetensors that plain PyTorch loads (the safetensors package,
    torch.nn.Sequential's names, the normalisation from the metadata) and scores to the same test
    accuracy; saturate eval and --model FILE take it back; a damaged file is one line, exit 2."""
    folder = make_idx_dir(tmp, n_train=512, n_test=128, classes=4)
    saved, summary = os.path.join(tmp, "out", "m.safetensors"), os.path.join(tmp, "s.json")
    # A few steps only: the model is still unsure (loss well above 0), so the losses compare.
    code, out, err = run("train", "--model", "fmnist-cnn", "--data", "idx:" + folder, "--steps", "3",
                         "--lr", "1e-3", "--batch-size", "32", "--save-model", saved,
                         "--summary-json", summary)
    if code != 0 or "saved the model to" not in err:
        fail(f"train --save-model: exit {code}\n{err}")
    trained = json.load(open(summary))["test_accuracy"]
    p = subprocess.run(py_fixture("saved_model_check.py", saved, folder), capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        fail(f"PyTorch could not load the saved model:\n{p.stderr}")
    python = json.loads(p.stdout)
    if abs(python["accuracy"] - trained) > 1e-4 or not python["loss"] > 0.1:
        fail(f"PyTorch scores {python}, saturate's run {trained}")
    code, out, err = run("eval", "--model", saved, "--json")
    if code != 0:
        fail(f"eval: exit {code}\n{err}")
    ev = json.loads(out)
    if abs(ev["test"]["accuracy"] - trained) > 1e-4 or ev["model"] != "fmnist-cnn":
        fail(f"eval gives {ev}, the run {trained}")
    if abs(ev["test"]["loss"] - python["loss"]) > 1e-5 * python["loss"]:
        fail(f"eval's test loss {ev['test']['loss']} is not PyTorch's {python['loss']}")
    # Trained further from the saved weights: it starts where the saved run ended.
    again = os.path.join(tmp, "again.safetensors")
    code, out, err = run("train", "--model", saved, "--data", "idx:" + folder, "--steps", "2",
                         "--lr", "1e-9", "--save-model", again, "--summary-json", summary)
    if code != 0 or abs(json.load(open(summary))["test_accuracy"] - trained) > 0.02:
        fail(f"train --model FILE.safetensors: exit {code}\n{err}")
    if json.loads(run("eval", "--model", again, "--json")[1])["model"] != "fmnist-cnn":
        fail("a model trained from a saved one is not saved as its layers")
    # Damaged, foreign or mismatched files: one line naming the problem, exit 2.
    raw = open(saved, "rb").read()
    cases = {"truncated.safetensors": (raw[: len(raw) // 2], "does not match its data_offsets"),
             "huge.safetensors": (struct.pack("<Q", 1 << 40) + raw[8:], "does not fit"),
             "json.safetensors": (raw[:8] + b"{" * 8 + raw[16:], "not JSON"),
             "empty.safetensors": (b"", "truncated")}
    for name, (data, want) in cases.items():
        path = os.path.join(tmp, name)
        open(path, "wb").write(data)
        expect_usage_error(["eval", "--model", path, "--data", "idx:" + folder], want)
    big = make_idx_dir(os.path.join(tmp, "six"), n_train=64, n_test=16, classes=6)
    expect_usage_error(["eval", "--model", saved, "--data", "idx:" + big], "was trained on")
    expect_usage_error(["train", "--model", "mlp", "--data", "idx:" + folder, "--steps", "1",
                        "--save-model", os.path.join(tmp, "m.pt")], "must end in .safetensors")


def case_issue16_data_parallel_resume(tmp):
    """Two data-parallel ranks stopped by SIGTERM (to the launcher, which passes it on) save a
    checkpoint (rank 0 writes) and exit 143; --resume auto on two ranks again (every rank loads)
    ends with weights byte for byte those of an uninterrupted two-rank run."""
    data = "synthetic:1,28,28,10,600,1000"
    base = ["train", "--data", data, "--model", "mlp", "--steps", "240", "--batch-size", "16",
            "--lr", "0.003", "--threads", "1", "--workers", "2", "--no-eval", "-q", "--seed", "3",
            "--ranks", "2"]
    whole = os.path.join(tmp, "whole.safetensors")
    code, _, err = run(*base, "--save-model", whole, timeout=300)
    if code != 0:
        fail(f"uninterrupted two-rank run: exit {code}\n{err}")
    ck, saved = os.path.join(tmp, "ck"), os.path.join(tmp, "resumed.safetensors")
    cmd = [ARGS.saturate, *base, "--checkpoint-dir", ck, "--checkpoint-every", "3",
           "--resume", "auto", "--save-model", saved]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not glob.glob(os.path.join(ck, "step-*")):
        time.sleep(0.05)  # the first checkpoint is there: the ranks are mid-run
    time.sleep(0.5)
    if child.poll() is None and child.pid > 1:
        child.send_signal(signal.SIGTERM)
    try:
        _, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        fail("the ranks did not stop within 120 s of SIGTERM")
    if child.returncode != 143:
        fail(f"SIGTERM: exit {child.returncode}, not 143 (did the run end first?)\n{err}")
    stopped = max(int(d.split("-")[-1]) for d in glob.glob(os.path.join(ck, "step-*")))
    if not 0 < stopped < 240:
        fail(f"the newest checkpoint is at step {stopped}: not mid-run")
    code, _, err = run(*cmd[1:], timeout=300)
    if code != 0 or err.count(f"resuming from") != 2:
        fail(f"resume on two ranks: exit {code}\n{err}")
    if open(saved, "rb").read() != open(whole, "rb").read():
        fail(f"resumed at step {stopped}: the weights differ from the uninterrupted run's")


def case_issue16_torchrun_restart_resumes_by_itself(tmp):
    """Under torchrun --max-restarts 1 with --resume auto, a rank SIGKILLed mid-run makes torchrun
    restart both; they resume from the newest checkpoint by themselves and the job ends with the
    weights of an uninterrupted torchrun job, byte for byte."""
    base = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
            "--nproc-per-node", "2"]
    train = [ARGS.saturate, "train", "--data", "synthetic:1,28,28,10,600,1000", "--model", "mlp",
             "--steps", "240", "--batch-size", "16", "--lr", "0.003", "--threads", "1",
             "--no-eval", "-q", "--seed", "5"]
    whole = os.path.join(tmp, "whole.safetensors")
    p = subprocess.run(base + train + ["--save-model", whole], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        fail(f"uninterrupted torchrun job: exit {p.returncode}\n{p.stderr}")
    ck, saved = os.path.join(tmp, "ck"), os.path.join(tmp, "restarted.safetensors")
    argv = base[:3] + ["--max-restarts", "1"] + base[3:] + train + [
        "--checkpoint-dir", ck, "--checkpoint-every", "3", "--resume", "auto", "--save-model", saved]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not glob.glob(os.path.join(ck, "step-*")):
            time.sleep(0.05)
        time.sleep(0.3)
        ranks = [k for k in children(p.pid) if "train" in open(f"/proc/{k}/cmdline").read()]
        if len(ranks) != 2 or not int(ranks[1]) > 1:
            fail(f"torchrun's ranks: {ranks}")
        os.kill(int(ranks[1]), signal.SIGKILL)
        try:
            _, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            fail("the restarted job did not finish within 240 s")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    if p.returncode != 0 or "resuming from" not in err:
        fail(f"torchrun --max-restarts 1: exit {p.returncode}, resumed: {'resuming from' in err}"
             f"\n{err[-3000:]}")
    if open(saved, "rb").read() != open(whole, "rb").read():
        fail("after the restart the weights differ from the uninterrupted job's")


def case_issue16_trace_spans_a_resumed_run(tmp):
    """--trace of a run stopped by SIGTERM and resumed: one trace with every step once, the
    resumed steps after the earlier ones on its timeline."""
    trace, ck = os.path.join(tmp, "trace.json"), os.path.join(tmp, "ck")
    cmd = [ARGS.saturate, "train", "--data", resume_data(tmp), *RESUME_RUN, "--trace", trace,
           "--checkpoint-dir", ck, "--checkpoint-every", "3", "--resume", "auto"]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not glob.glob(os.path.join(ck, "step-*")):
        time.sleep(0.05)
    time.sleep(0.3)
    if child.poll() is None and child.pid > 1:
        child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    if child.returncode != 143:
        fail(f"SIGTERM: exit {child.returncode}\n{err}")
    first = json.load(open(trace))["traceEvents"]
    stopped = max(e["args"]["step"] for e in first if e.get("cat") == "step") + 1
    code, _, err = run(*cmd[1:])
    if code != 0:
        fail(f"resumed run: exit {code}\n{err}")
    events = json.load(open(trace))["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    numbers = [e["args"]["step"] for e in steps]
    if sorted(numbers) != list(range(120)):
        fail(f"the trace holds steps {sorted(set(range(120)) - set(numbers))} missing, "
             f"{len(numbers)} step slices (stopped after step {stopped})")
    ts = [e["ts"] for e in sorted(steps, key=lambda e: e["args"]["step"])]
    if any(b < a for a, b in zip(ts, ts[1:])):
        fail("the resumed steps do not follow the earlier ones on the timeline")
    if len([e for e in events if e.get("ph") == "M" and e["name"] == "process_name"]) != 1:
        fail("the resumed trace repeats its metadata")


def case_issue16_divergence_stops_with_a_diagnosis(tmp):
    data = make_idx_dir(tmp, n_train=256, n_test=64)
    summary = os.path.join(tmp, "s.json")
    ck = os.path.join(tmp, "ck")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "300",
                         "--optimizer", "sgd", "--lr", "1e6", "--schedule", "constant",
                         "--threads", "1", "-q", "--summary-json", summary,
                         "--checkpoint-dir", ck, "--checkpoint-every", "1",
                         "--logdir", os.path.join(tmp, "logs"))
    if code != 1:
        fail(f"a diverging run: exit {code}, expected 1\n{out}\n{err}")
    for must in ("training diverged at step", "last finite loss", "try: a lower --lr",
                 "--clip-grad-norm", "last good checkpoint"):
        if must not in err:
            fail(f"the diagnosis lacks '{must}':\n{err}")
    with open(summary) as f:
        s = json.load(f)
    d = s["divergence"]
    if d is None or d["step"] > 30 or s["steps"] > 40:
        fail(f"did not stop soon after diverging: {d}, {s['steps']} steps")
    for c in os.listdir(ck):  # never a checkpoint of the diverged state
        if int(c.split("-")[1]) > d["step"]:
            fail(f"checkpoint {c} is past the divergence at step {d['step']}")
    # The finding is in the run's report: steps.jsonl's divergence line, the headline's first.
    html = os.path.join(tmp, "run.html")
    code, out, err = run("report", os.path.join(tmp, "logs", "steps.jsonl"), "--html", html)
    if code != 0:
        fail(f"report of a diverged run: exit {code}\n{err}")
    shots = os.path.dirname(os.path.abspath(ARGS.fixtures))
    dom = open_in_browser(tmp, html, 3, os.path.join(shots, "report_diverged.png"))
    head = re.search(r'<div id="headline">(.*?)</div>', dom, re.S)
    want = f"Training diverged at step {d['step']}: {d['reason']}"
    if not head or want not in head.group(1) or "lower --lr" not in head.group(1):
        fail(f"the report's headline lacks '{want}': {head and head.group(1)}")


def case_issue15_profile_names_the_slow_rank(tmp):
    # Two ranks by hand; rank 1 decodes every sample for 800 us (synthetic data with a decode
    # cost; 400 us once left it within 10% of rank 0 on a loaded machine), so it is slower and
    # rank 0 waits for it in the all-reduce. Rank 0's profile shows
    # both ranks and the rank-skew finding with the measured numbers.
    port = free_port()
    procs = []
    try:
        for r in range(2):
            data = "synthetic:1,28,28,10,4096" + (",800" if r == 1 else "")
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [ARGS.saturate, "profile", "--model", "fmnist-cnn", "--data", data, "--steps",
                 "24", "--batch-size", "32", "--threads", "1", "--dist-timeout", "60", "--json"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        outs = [p.communicate(timeout=150) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for r, p in enumerate(procs):
        if p.returncode != 0:
            fail(f"rank {r}: exit {p.returncode}\n{outs[r][1]}")
    if outs[1][0].strip():
        fail(f"rank 1 printed a report too:\n{outs[1][0]}")
    j = json.loads(outs[0][0])
    if j["world_size"] != 2 or len(j["ranks"]) != 2:
        fail(f"profile ranks: {j.get('ranks')}")
    busy = [r["busy_ms"] for r in j["ranks"]]
    if not busy[1] > 1.1 * busy[0] or not j["ranks"][1]["data_wait_ms"] > 5:
        fail(f"rank 1 should be the slow one: {j['ranks']}")
    # Scaling against rank 0 alone (no decode cost): the slow rank holds the job well below
    # twice one process.
    sc = j["scaling"]
    if not sc["one_process_samples_per_s"] or not 0 < sc["efficiency"] < 0.95 or \
            abs(j["job_samples_per_s"] - 2 * j["samples_per_s"]) > 1e-6 * j["job_samples_per_s"]:
        fail(f"scaling: {sc}, job {j.get('job_samples_per_s')}, rank 0 {j['samples_per_s']}")
    print(f"scaling efficiency with a slow rank: {100 * sc['efficiency']:.1f}%")
    skew = [f for f in j["findings"] if f["rule"] == "rank-skew"]
    if not skew or "rank 1" not in skew[0]["title"]:
        fail(f"no rank-skew finding naming rank 1: {j['findings']}")
    # Rank 0's wait is mostly for rank 1; only rank 1's own wait (the transfer) may count as
    # communication in the findings.
    step = j["step_ms"]
    for f in j["findings"]:
        if f["rule"] == "communication-heavy":
            share = [e["value"] for e in f["evidence"] if e["name"] == "communication_share"][0]
            if share > 100 * j["ranks"][1]["communication_ms"] / step + 0.5:
                fail(f"waiting for the slow rank was blamed on communication: {share:.1f}% vs "
                     f"ranks {j['ranks']}")


def case_issue13_tune_interrupt_writes_a_partial_plan(tmp):
    data = make_idx_dir(tmp, n_train=4096, n_test=64)
    plan_path = os.path.join(tmp, "plan.json")
    p = subprocess.Popen([ARGS.saturate, "tune", "--data", "idx:" + data, "--model", "fmnist-cnn",
                          "--threads", "1", "--memory-limit", "256MiB", "--budget-s", "0",
                          "--out", plan_path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait for the baseline stage, so the interrupt lands in the stages that follow it.
    deadline = time.time() + 120
    line = p.stdout.readline()
    seen = line
    while "baseline" not in line and line and time.time() < deadline:
        line = p.stdout.readline()
        seen += line
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    out = seen + out
    if p.returncode != 130:
        fail(f"exit {p.returncode} after SIGINT, expected 130\n{out}\n{err}")
    with open(plan_path) as f:
        plan = json.load(f)
    if not plan["interrupted"] or plan["stages"][-1]["name"] != "interrupted":
        fail(f"the plan is not marked interrupted: {plan['stages'][-1]}")
    if "interrupted" not in out:
        fail(f"tune did not say it was interrupted:\n{out}")


def case_tune_unwritable_out(tmp):
    data = make_idx_dir(tmp)
    expect_usage_error(["tune", "--data", "idx:" + data, "--model", "mlp",
                        "--out", "/proc/no-such-dir/plan.json"], "--out")


def case_tune_model_cannot_step(tmp):
    data = make_idx_dir(tmp)
    model = os.path.join(ARGS.fixtures, "bad_output.pt")
    expect_usage_error(["tune", "--data", "idx:" + data, "--model", model,
                        "--out", os.path.join(tmp, "p.json")], "bad_output.pt")


def case_tune_bad_prefer(tmp):
    expect_usage_error(["tune", "--prefer", "fast"], "--prefer")


def case_tune_help(tmp):
    code, out, _ = run("tune", "--help")
    if code != 0:
        fail(f"tune --help exit {code}")
    check_golden("tune_help.txt", out, masked=False)

def case_pack_idx_then_train(tmp):
    data = make_idx_dir(tmp)
    out_dir = os.path.join(tmp, "packed")
    code, out, err = run("pack", "idx:" + data, out_dir)
    if code != 0:
        fail(f"pack exit {code}\n{out}\n{err}")
    for name, n in (("train.rec", 256), ("test.rec", 64)):
        path = os.path.join(out_dir, name)
        if not os.path.isfile(path):
            fail(f"pack did not write {path}:\n{out}")
        if f"{path}  {n} samples, 1x28x28, 4 classes" not in out:
            fail(f"pack output lacks the {name} line:\n{out}")
    path = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--data", "records:" + out_dir, "--model", "mlp", "--steps", "3",
                         "--batch-size", "32", "--threads", "1", "--summary-json", path)
    if code != 0:
        fail(f"train on the packed records exit {code}\n{out}\n{err}")
    with open(path) as f:
        s = json.load(f)
    if s["steps"] != 3:
        fail(f"train on the packed records: {s}")


def case_pack_unwritable_out(tmp):
    expect_usage_error(["pack", "idx:" + make_idx_dir(tmp), "/proc/no-such-dir/packed"],
                       "/proc/no-such-dir/packed")


def case_pack_bad_spec(tmp):
    expect_usage_error(["pack", "idx:" + os.path.join(tmp, "missing"), os.path.join(tmp, "o")],
                       "not found")
    expect_usage_error(["pack", "idx:" + make_idx_dir(tmp), os.path.join(tmp, "o"),
                        "--size", "8x8x1"], "--size")


# ---- report ---------------------------------------------------------------------------------------

def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("no headless browser: install chromium (scripts/install-deps does)")


def open_in_browser(tmp, html, expect_charts, screenshot):
    """Loads the report in headless Chromium: no console errors, every chart rendered."""
    url = "file://" + os.path.abspath(html)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--virtual-time-budget=5000", "--user-data-dir=" + os.path.join(tmp, "chrome")]
    p = subprocess.run([browser(), *flags, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    dom, log = p.stdout, p.stderr
    console = [l for l in log.splitlines() if ":CONSOLE" in l]
    if console:
        fail("the report logged to the console:\n" + "\n".join(console))
    if 'data-report="done"' not in dom:
        fail(f"the report's script did not finish (exit {p.returncode}):\n{log[-2000:]}")
    errors = re.search(r'<div id="errors">([^<]*)</div>', dom)
    if errors is None or errors.group(1).strip():
        fail(f"the report shows errors: {errors.group(1) if errors else 'no #errors element'}")
    rendered = len(re.findall(r'data-rendered="1"', dom))
    if rendered != expect_charts or dom.count("<svg") < expect_charts:
        fail(f"{rendered} of {expect_charts} charts rendered ({dom.count('<svg')} svg elements)")
    subprocess.run([browser(), *flags, "--window-size=1200,2600", "--screenshot=" + screenshot,
                    url], capture_output=True, timeout=120)
    if not os.path.isfile(screenshot) or os.path.getsize(screenshot) < 10000:
        fail(f"no screenshot at {screenshot}")
    return dom


def chart_svg(dom, chart_id):
    m = re.search(r'id="' + chart_id + r'"[^>]*>.*?(<svg.*?</svg>)', dom, re.S)
    if not m:
        fail(f"no rendered chart #{chart_id}")
    return m.group(1)


def x_ticks(svg):
    # The x axis's tick labels, in order.
    m = re.search(r'class="c3-axis c3-axis-x"(.*?)class="c3-axis c3-axis-y"', svg, re.S)
    if not m:
        fail("a chart without an x axis")
    return [re.sub(r"<[^>]+>", "", t) for t in
            re.findall(r'<g class="tick"[^>]*>.*?<text[^>]*>(.*?)</text>', m.group(1), re.S)]


def case_report_html(tmp):
    code, out, err, plan = small_tune(tmp)
    if code != 0:
        fail(f"tune exit {code}\n{err}")
    html = os.path.join(tmp, "report.html")
    code, out, err = run("report", plan, "--html", html)
    if code != 0 or "works offline" not in out:
        fail(f"report exit {code}\n{out}\n{err}")
    text = open(html, encoding="utf-8").read()
    if "http://" in text.split("<script>")[0] or "<script src" in text:
        fail("the report loads something from outside the file")
    shots = os.path.dirname(os.path.abspath(ARGS.fixtures))
    # Stages, throughput and memory against batch size, step breakdown, loss curves; and the
    # goodput curve where the batch stage measured one (issue 35).
    with open(plan, encoding="utf-8") as f:
        goodput = json.load(f).get("goodput") or {}
    if "Batch size by goodput" not in text:
        fail("the report lacks the goodput section")
    charts = 5 + (1 if len(goodput.get("curve", [])) > 1 else 0)
    dom = open_in_browser(tmp, html, charts, os.path.join(shots, "report_plan.png"))
    # Issue 36: a headline with the plan and its speed-up; the stage chart ends at the plan's
    # figure; time per sample, not per step, across batch sizes; the guard's losses against
    # samples seen with a bounded number of ticks.
    with open(plan, encoding="utf-8") as f:
        p = json.load(f)
    head = re.search(r'<div id="headline">(.*?)</div>', dom, re.S)
    want = f"Plan: batch {p['config']['batch_size']}"
    if not head or want not in head.group(1) or "samples/s (" not in head.group(1) or \
            "Quality " not in head.group(1):
        fail(f"the headline lacks '{want}', the speed-up or the quality: {head and head.group(1)}")
    stages = x_ticks(chart_svg(dom, "chart-stages"))
    if not stages or stages[-1] != "plan" or len(stages) != len(p["stages"]) + 1:
        fail(f"the stage chart's bars: {stages}")
    if "µs per sample" not in chart_svg(dom, "chart-breakdown"):
        fail("the step breakdown is not per sample")
    loss = chart_svg(dom, "chart-loss")
    if "training samples seen" not in loss or not 2 <= len(x_ticks(loss)) <= 10:
        fail(f"the guard's loss chart's x axis: {x_ticks(loss)}")
    # A run's steps.jsonl: breakdown, loss and samples/s over the steps, and (issue 34, defect
    # 9: they were dropped) its evaluations: the test loss beside the training loss, the
    # accuracy in a chart of its own.
    logdir = os.path.join(tmp, "logs")
    _, _, _ = small_train(tmp, "--logdir", logdir, "--eval-every", "10")
    run_html = os.path.join(tmp, "run.html")
    code, out, err = run("report", os.path.join(logdir, "steps.jsonl"), "--html", run_html)
    if code != 0:
        fail(f"report of a run exit {code}\n{err}")
    dom = open_in_browser(tmp, run_html, 4, os.path.join(shots, "report_run.png"))
    loss = chart_svg(dom, "chart-loss")
    if "training samples seen" not in loss or not 2 <= len(x_ticks(loss)) <= 10:
        fail(f"the run's loss chart's x axis: {x_ticks(loss)}")
    if "steps, " not in re.search(r'<div id="headline">(.*?)</div>', dom, re.S).group(1):
        fail("the run report has no headline")
    if "<td>model</td>" not in dom:
        fail("the run report's Context table is empty")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', open(run_html).read(),
                                re.S).group(1))
    got = sorted({(e["metric"], e["step"]) for e in data["evals"]})
    want = [(m, s) for m in ("test_accuracy", "test_loss") for s in (10, 20, 30)]
    if got != want:
        fail(f"the report's evaluations: {got}, expected {want}")


def case_report_bad_input(tmp):
    html = os.path.join(tmp, "r.html")
    missing = os.path.join(tmp, "missing.json")
    expect_usage_error(["report", missing, "--html", html], missing)
    bad = os.path.join(tmp, "steps.jsonl")
    with open(bad, "w") as f:
        f.write('{"type": "step", "step": 0, "step_ms": 5, "loss": 1}\n{"type": "st\n')
    expect_usage_error(["report", bad, "--html", html], bad + ": line 2")
    other = os.path.join(tmp, "other.json")
    with open(other, "w") as f:
        f.write('{"hello": 1}')
    expect_usage_error(["report", other, "--html", html], "not a plan")
    if os.path.exists(html):
        fail("a failed report left a file behind")


# ---- issue 17: --exec, a user's own program -------------------------------------------------------

PY_FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "fixtures")


def py_fixture(name, *args):
    return [sys.executable, os.path.join(PY_FIXTURES, name), *args]


def exec_steps(metrics_path):
    with open(metrics_path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return [l for l in lines if l["ev"] == "step"]


def program_samples_per_s(shell_line, tmp, name, steps=60, warmup=10):
    """Runs a shell line (a plan's reproduce line, or the bare command) for `steps` steps with its
    lines in a file, and returns its samples/s after the warm-up from its own step lines."""
    metrics = os.path.join(tmp, name + ".jsonl")
    line = shell_line.replace("SATURATE_METRICS=/dev/null", "")
    env = {"SATURATE_PROTOCOL": "1", "SATURATE_METRICS": metrics, "SATURATE_MAX_STEPS": str(steps),
           "PYTHONPATH": os.path.join(PY_FIXTURES, "..", "..", "..", "python", "saturate_client")}
    p = subprocess.run(["sh", "-c", line], env={**os.environ, **env}, capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        fail(f"{line}: exit {p.returncode}\n{p.stderr}")
    s = exec_steps(metrics)[warmup:]
    return sum(x["samples"] for x in s[1:]) / (s[-1]["t"] - s[0]["t"])


def case_issue17_tune_exec_cooperative(tmp):
    # A cooperative script tuned end to end; the plan's reproduce line runs faster than the
    # script's own defaults, measured here from the script's own step lines.
    # The guard is off here (a throughput tune); the next case shows it judging the same script.
    plan = os.path.join(tmp, "plan.json")
    cmd = py_fixture("coop_train.py", "--samples", "8192")
    code, out, err = run("tune", "--exec", "--budget-s", "60", "--max-batch", "512",
                         "--quality-samples", "0", "--out", plan, "--", *cmd, timeout=280)
    if code != 0:
        fail(f"tune --exec: exit {code}\n{out}\n{err}")
    p = json.load(open(plan))
    e = p["exec"]
    for need in ("batch_size", "num_workers", "precision"):
        if need not in e["applied"]:
            fail(f"the plan does not know the script applies {need}: {e['applied']}")
    if int(e["settings"]["batch_size"]) <= 32:
        stages = "\n".join(f"  {s['name']}: {s.get('why', '')}" for s in p["stages"])
        fail(f"the tuned batch {e['settings']['batch_size']} is not larger than the script's 32;"
             f" the stages said:\n{stages}")
    if "reproduce:" not in out or e["reproduce"] not in out:
        fail(f"the reproduce line is not printed:\n{out}")
    if not any(t["outcome"] == "fits" for t in p["trials"]):
        fail("no trial recorded")
    bare = " ".join("'" + w + "'" for w in cmd)
    tuned, own = [], []
    for i in range(2):  # interleaved, against the machine's noise
        own.append(program_samples_per_s(bare, tmp, f"own{i}"))
        tuned.append(program_samples_per_s(e["reproduce"], tmp, f"tuned{i}"))
    if max(tuned) <= max(own):
        fail(f"the plan's reproduce line ran at {tuned} samples/s, the defaults at {own}")
    # train --config runs the plan's program with the tuned settings.
    code, out, err = run("train", "--config", plan, "--steps", "3")
    if code != 0 or "final loss" not in out or "running the plan's program" not in err:
        fail(f"train --config of an exec plan: exit {code}\n{out}\n{err}")


def case_issue17_tune_exec_guard_rejects_a_harmful_batch(tmp):
    # The program keeps its own learning rate, so a much larger batch learns less from the same
    # samples: the guard, judging on the script's own eval line (val_accuracy), must reject it
    # and keep the script's batch.
    plan = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--exec", "--budget-s", "60", "--max-batch", "512", "--out", plan,
                         "--", *py_fixture("coop_train.py", "--samples", "8192"), timeout=280)
    if code != 0:
        fail(f"tune --exec: exit {code}\n{out}\n{err}")
    p = json.load(open(plan))
    guard = [s for s in p["stages"] if s["name"] == "quality_guard"]
    why = guard[0]["why"] if guard else ""
    # (The confirm stage may then fall back to the script's own settings when the accepted
    # candidate measures no faster: the batch stays 32 either way.)
    if "val_accuracy" not in why or p["quality"]["metric"] != "val_accuracy":
        fail(f"the guard did not judge on the script's eval line:\n{why}\n{out}")
    if "rejected" not in why or p["exec"]["settings"]["batch_size"] != "32":
        fail(f"the guard kept a batch that learns less: {p['exec']['settings']}\n{why}")


def case_issue17_profile_exec_zero_change(tmp):
    # An unmodified script profiled through the zero-change hook.
    code, out, err = run("profile", "--exec", "--steps", "0", "--skip-steps", "2", "--window", "5",
                         "--json", "--", *py_fixture("plain_train.py"))
    if code != 0:
        fail(f"profile --exec of an unmodified script: exit {code}\n{err}")
    j = json.loads(out)
    if j["exec"]["mode"] != "zero-change":
        fail(f"mode {j['exec']['mode']!r}, expected zero-change")
    if j["steps"] != 32:
        fail(f"{j['steps']} steps, expected the script's 2 epochs of 16")
    if not j["samples_per_s"] > 0:
        fail(f"no samples/s from the hook's step lines: {j['samples_per_s']}")
    if not j["exec"]["processes"]:
        fail("the script's processes were not sampled")
    code, out, err = run("profile", "--exec", "--steps", "0", "--",
                         *py_fixture("plain_train.py"))
    if code != 0 or "rest of step" not in out or "zero-change" not in out:
        fail(f"profile --exec table: exit {code}\n{out}\n{err}")


def case_issue17_tune_exec_oom_above_a_batch(tmp):
    # Out of memory above batch 64 (the script's pretend device) is a trial outcome, not a crash:
    # the plan stays at or below 64 and records the OOM trials.
    plan = os.path.join(tmp, "plan.json")
    code, out, err = run("tune", "--exec", "--budget-s", "60", "--quality-samples", "0",
                         "--max-batch", "256", "--out", plan, "--", *py_fixture("oom_train.py"),
                         timeout=200)
    if code != 0:
        fail(f"tune --exec of a script that runs out of memory: exit {code}\n{out}\n{err}")
    p = json.load(open(plan))
    if int(p["exec"]["settings"]["batch_size"]) > 64:
        fail(f"planned batch {p['exec']['settings']['batch_size']} is above what fits (64)")
    if not any(t["outcome"] == "oom" for t in p["trials"]):
        fail(f"no trial recorded as out of memory: {[t['outcome'] for t in p['trials']]}")


def case_issue17_exec_memory_limit(tmp):
    # --memory-limit on the program's processes: over it, the run is out of memory (the cgroup
    # where delegated, else the RSS watchdog), named so.
    script = os.path.join(tmp, "grow.py")
    with open(script, "w") as f:
        f.write("import time, saturate_client as saturate\n"
                "s = saturate.session(); s.start(applied={'batch_size': 1}); s.step(samples=1)\n"
                "hog = [bytearray(64 << 20) for _ in range(16)]\n"
                "for b in hog: b[::4096] = b'x' * len(b[::4096])\n"
                "time.sleep(60)\n")
    env = {"PYTHONPATH": os.path.join(PY_FIXTURES, "..", "..", "..", "python", "saturate_client")}
    code, out, err = run("profile", "--exec", "--memory-limit", "400MiB", "--", sys.executable,
                         script, env=env, timeout=120)
    if code != 1 or "out of memory" not in err or "memory" not in err:
        fail(f"a program over --memory-limit: exit {code}\n{out}\n{err}")


def case_issue17_tune_exec_failure_stops_with_its_message(tmp):
    code, out, err = run("tune", "--exec", "--budget-s", "60", "--",
                         *py_fixture("coop_train.py", "--raise-at", "3"), timeout=120)
    if code != 1:
        fail(f"a failing script: exit {code}, expected 1\n{err}")
    if "ValueError: synthetic failure at step 3" not in err:
        fail(f"the tune did not stop with the script's message:\n{err}")


def case_issue17_exec_hang_killed_with_its_group(tmp):
    pids_file = os.path.join(tmp, "pids")
    start = time.time()
    code, out, err = run("profile", "--exec", "--step-timeout", "2", "--",
                         *py_fixture("hang_train.py", pids_file), timeout=120)
    if code != 1 or "no step reported for" not in err:
        fail(f"a hanging script: exit {code}\n{err}")
    if time.time() - start > 60:
        fail(f"the hang was stopped only after {time.time() - start:.0f} s")
    pids = [int(x) for x in open(pids_file).read().split()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            fail(f"process {pid} of the hanging script is still there (state {state})")


def case_exec_fake_nvml_gpu_memory(tmp):
    # The GPU memory of the program's processes, per PID through NVML (the fake reports each PID
    # in FAKE_NVML_PID_FILE on GPU 0 with 512 MiB); a PID outside the group does not count.
    pids = os.path.join(tmp, "pids")
    with open(pids, "w") as f:
        f.write("1\n")  # init: not the program's
    script = ("import os, time, saturate_client as saturate\n"
              f"open({pids!r}, 'a').write(str(os.getpid()) + '\\n')\n"
              "s = saturate.session(); s.start(applied={'batch_size': 8})\n"
              "for _ in range(12):\n    time.sleep(0.1); s.step(samples=8)\n")
    env = {"FAKE_NVML_PID_FILE": pids,
           "PYTHONPATH": os.path.join(PY_FIXTURES, "..", "..", "..", "python", "saturate_client")}
    code, out, err = run("profile", "--exec", "--skip-steps", "2", "--window", "4", "--json",
                         "--", sys.executable, "-c", script, env=env)
    if code != 0:
        fail(f"profile --exec under the fake NVML: exit {code}\n{err}")
    e = json.loads(out)["exec"]
    if e["process_group_peak_gpu_memory_bytes"] != 512 << 20:
        fail(f"GPU memory of the program's processes: {e['process_group_peak_gpu_memory_bytes']}")
    if e["processes"][0]["peak_gpu_memory_bytes"] != 512 << 20:
        fail(f"per process: {e['processes']}")


def case_issue17_exec_bad_input(tmp):
    expect_usage_error(["tune", "--exec", "--"], "no command after '--'")
    expect_usage_error(["profile", "--exec"], "no command after '--'")
    expect_usage_error(["tune", "--exec", "--map", "batch_sise=--bs", "--", "true"],
                       "did you mean 'batch_size'")
    expect_usage_error(["tune", "--exec", "--", sys.executable, "t.py", "--pin={pin_memory}"],
                       "{pin_memory}")
    expect_usage_error(["profile", "--exec", "--", "saturate-no-such-program"], "not found")
    # A program that never reports a step: named after the start-up limit.
    expect_usage_error(["profile", "--exec", "--startup-timeout", "2", "--", sys.executable, "-c",
                        "import time; time.sleep(60)"], "no step reported within")
    expect_usage_error(["profile", "--exec", "--", sys.executable, "-c", "print('hello')"],
                       "exited without reporting a step")
    # Malformed lines: more than 10 ignored is fatal, naming the source and line.
    bad = ("import sys\nprint(':::SATURATE {\"v\":1,\"ev\":\"start\",\"t\":1}')\n"
           "for i in range(12): print(':::SATURATE {not json')\n")
    expect_usage_error(["profile", "--exec", "--metrics", "stdout", "--", sys.executable, "-c",
                        bad], "stdout:")
    newer = "print(':::SATURATE {\"v\":2,\"ev\":\"start\",\"t\":1}')"
    expect_usage_error(["profile", "--exec", "--metrics", "stdout", "--", sys.executable, "-c",
                        newer], "protocol version 2 is not supported")


# ---- issue 35: time to a target quality ------------------------------------------------------------

def case_issue35_train_stops_at_its_target(tmp):
    # The pattern data is learnt in a few dozen steps: the run stops at the first evaluation at
    # or above the target, well before its 400 steps, and says what it took.
    data = make_idx_dir(tmp, n_train=1024, n_test=128)
    path = os.path.join(tmp, "s.json")
    logdir = os.path.join(tmp, "logs")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "400",
                         "--batch-size", "32", "--val-fraction", "0.1", "--eval-every", "5",
                         "--target", "val_accuracy=0.95", "--summary-json", path,
                         "--logdir", logdir, "-q")
    if code != 0:
        fail(f"train --target: exit {code}\n{err}")
    t = json.load(open(path))["target"]
    if not t["reached"] or t["steps"] % 5 or t["seen"] < 0.95:
        fail(f"target: {t}")
    steps = json.load(open(path))["steps"]
    if steps >= 400 or steps != t["steps"]:
        fail(f"the run went on to step {steps} after reaching its target at {t['steps']}")
    if not (0 < t["train_s"] and t["samples"] == 32 * t["steps"]):
        fail(f"time and samples to the target: {t}")
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        evals = [json.loads(l) for l in f if '"type":"eval"' in l]
    hits = [e for e in evals if e.get("metric") == "val_accuracy" and e["value"] >= 0.95]
    if not hits or hits[0]["step"] != t["steps"]:
        fail(f"the first evaluation at the target is not where it stopped: {hits[:1]} vs {t}")
    if "reached at step" not in out:
        fail(f"the table does not say when the target was reached:\n{out}")
    # The sinks carry it: steps.jsonl's target line, TensorBoard's scalars, and the run report
    # leads with it.
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        lines = [json.loads(l) for l in f if '"type":"target"' in l]
    if len(lines) != 1 or not lines[0]["reached"] or lines[0]["steps"] != t["steps"] or \
            lines[0]["samples"] != t["samples"] or lines[0]["metric"] != "val_accuracy":
        fail(f"steps.jsonl's target line: {lines} vs the summary's {t}")
    events = [n for n in os.listdir(logdir) if n.startswith("events.out.tfevents")]
    if not events or b"eval/target_samples" not in open(os.path.join(logdir, events[0]), "rb").read():
        fail(f"TensorBoard has no eval/target_samples in {events}")
    html = os.path.join(tmp, "run.html")
    code, rout, err = run("report", logdir, "--html", html)
    if code != 0:
        fail(f"report of the run: exit {code}\n{err}")
    dom = open_in_browser(tmp, html, 4, os.path.join(tmp, "run.png"))
    head = re.search(r'<div id="headline">(.*?)</div>', dom, re.S).group(1)
    want = f"Target val_accuracy ≥ 0.9500 reached at step {t['steps']}: {t['samples']} samples"
    if want not in head:
        fail(f"the run report's headline lacks '{want}': {head}")
    # compare puts two runs' times to the same target side by side.
    path2 = os.path.join(tmp, "s2.json")
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "400",
                         "--batch-size", "64", "--val-fraction", "0.1", "--eval-every", "5",
                         "--target", "val_accuracy=0.95", "--summary-json", path2, "-q")
    code, out, err = run("compare", path, path2)
    if "time_to_target_s" not in out:
        fail(f"compare does not show the time to the target:\n{out}\n{err}")
    # A loss target reads the training loss; one that is never reached runs to the end.
    code, out, err = run("train", "--data", "idx:" + data, "--model", "mlp", "--steps", "40",
                         "--batch-size", "32", "--target", "loss=-1", "--summary-json",
                         path, "-q")
    t = json.load(open(path))["target"]
    if code != 0 or t["reached"] or json.load(open(path))["steps"] != 40:
        fail(f"an unreached loss target: exit {code}, {t}\n{err}")
    expect_usage_error(["train", "--data", "idx:" + data, "--target", "val_acuracy=0.9"],
                       "did you mean 'val_accuracy'")
    expect_usage_error(["train", "--data", "idx:" + data, "--val-fraction", "0.1", "--no-eval",
                        "--target", "val_accuracy=0.9"], "--no-eval")
    expect_usage_error(["train", "--data", "idx:" + data, "--target", "val_loss=0.3"],
                       "--val-fraction")
    expect_usage_error(["train", "--data", "idx:" + data, "--target", "loss=low"],
                       "is not a number")


def case_issue35_adaptive_batch(tmp):
    # A plan whose curve says batch 128 runs 10x the samples/s of 64: once the run has measured
    # the noise scale (every 4th step split in two), doubling pays at any credited phi >= 0, and
    # the run grows its batch, says so in the sinks and the trace, and keeps its length in samples.
    data = make_idx_dir(tmp, n_train=1024, n_test=128)

    def plan(name, policy, curve):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump({"schema_version": 1, "model": "mlp", "data": "idx:" + data,
                       "config": {"batch_size": 64, "lr": 0.01, "optimizer": "sgd",
                                  "schedule": "constant", "threads": 1},
                       "effective_batch": {"policy": policy},
                       "goodput": {"user_batch": 64, "chosen_batch": 64,
                                   "curve": [{"batch_size": b, "samples_per_s": x}
                                             for b, x in curve]}}, f)
        return path

    grows = plan("grows.json", "unchanged", [(64, 1000.0), (128, 10000.0)])
    path = os.path.join(tmp, "s.json")
    logdir = os.path.join(tmp, "logs")
    trace = os.path.join(tmp, "trace.json")
    code, out, err = run("train", "--config", grows, "--adaptive-batch", "--steps", "400",
                         "--no-eval", "--summary-json", path, "--logdir", logdir,
                         "--trace", trace)
    if code != 0:
        fail(f"train --adaptive-batch: exit {code}\n{err}")
    s = json.load(open(path))
    changes = s["adaptive_batch"]["changes"]
    if len(changes) != 1 or (changes[0]["from"], changes[0]["to"]) != (64, 128):
        fail(f"expected one doubling to 128 (the curve's last batch): {changes}")
    c = changes[0]
    if s["samples"] != 400 * 64 or s["steps"] != c["step"] + (400 - c["step"]) // 2:
        fail(f"the run's length in samples: {s['samples']} samples in {s['steps']} steps, {c}")
    # The progress bar's total follows: it ends full, not at the starting batch's 400 steps.
    bars = re.findall(r"\] (\d+)/(\d+) ", out + err)
    if not bars or bars[-1] != (str(s["steps"]), str(s["steps"])):
        fail(f"the progress ends at {bars[-1:]}, expected {s['steps']}/{s['steps']}")
    if not (c["lr_multiplier"] >= 1.0 and c["predicted_speedup"] >= 1.05):
        fail(f"the change's rule: {c}")
    with open(os.path.join(logdir, "steps.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    events = [l for l in lines if l.get("type") == "batch_change"]
    if len(events) != 1 or events[0]["step"] != c["step"] or events[0]["batch_size"] != 128:
        fail(f"steps.jsonl's batch_change lines: {events}")
    steps = [l for l in lines if "type" not in l or l["type"] == "step"]
    after = [l for l in steps if l.get("step", -1) >= c["step"]]
    if not after or any(l["samples"] != 128 for l in after):
        fail(f"steps after the change are not of 128: {after[:2]}")
    marks = [e for e in json.load(open(trace))["traceEvents"] if e.get("cat") == "batch_change"]
    if len(marks) != 1 or marks[0]["ph"] != "i" or "128" not in marks[0]["name"]:
        fail(f"the trace's batch-change mark: {marks}")
    # Without a plan (or with one that measured no curve) the run measures its own samples/s:
    # every doubling it takes is first tried, and one it undoes goes back to the batch before.
    bare = plan("bare.json", "unchanged", [])
    for how in (["--data", "idx:" + data, "--model", "mlp", "--optimizer", "sgd", "--lr", "0.01"],
                ["--config", bare]):
        code, out, err = run("train", *how, "--adaptive-batch", "--steps", "200", "--no-eval",
                             "--summary-json", path, "-q")
        if code != 0:
            fail(f"train --adaptive-batch {how[0]}: exit {code}\n{err}")
        changes = json.load(open(path))["adaptive_batch"]["changes"]
        tried = set()
        for c in changes:
            if c["kind"] == "try":
                if c["to"] != 2 * c["from"] or c["to"] in tried:
                    fail(f"a trial is one doubling of a batch not tried before: {changes}")
                tried.add(c["to"])
            elif c["kind"] != "undo" or c["from"] not in tried or c["to"] * 2 != c["from"]:
                fail(f"without a curve a run only tries and undoes doublings: {changes}")
    # Bad input: a fixed-batch plan rule, no noise scale, a batch the plan never measured.
    kept = plan("kept.json", "kept", [(64, 1000.0), (128, 10000.0)])
    expect_usage_error(["train", "--config", kept, "--adaptive-batch"], "'kept'")
    expect_usage_error(["train", "--config", grows, "--adaptive-batch", "--no-noise-scale"],
                       "--no-noise-scale")
    expect_usage_error(["train", "--config", grows, "--adaptive-batch", "--batch-size", "32"],
                       "batch 32 is not among the batches the plan measured (64, 128)")


def case_issue35_adaptive_batch_on_two_ranks(tmp):
    # The same plan on 2 ranks (each a batch of 64, the plan's rule 'unchanged'): every step has
    # two gradients at the same weights (local and all-reduced), the ranks average their noise
    # scale before each decision, and so double at the same step; a rank that decided alone
    # would run a different step and hang or fail the next collective.
    data = make_idx_dir(tmp, n_train=1024, n_test=128)
    path = os.path.join(tmp, "grows.json")
    with open(path, "w") as f:
        json.dump({"schema_version": 1, "model": "mlp", "data": "idx:" + data,
                   "config": {"batch_size": 64, "lr": 0.01, "optimizer": "sgd",
                              "schedule": "constant", "threads": 1},
                   "effective_batch": {"policy": "unchanged"},
                   "goodput": {"user_batch": 64, "chosen_batch": 64,
                               "curve": [{"batch_size": 64, "samples_per_s": 1000.0},
                                         {"batch_size": 128, "samples_per_s": 10000.0}]}}, f)
    summary = os.path.join(tmp, "s.json")
    logdir = os.path.join(tmp, "logs")
    code, out, err = run("train", "--config", path, "--adaptive-batch", "--ranks", "2",
                         "--steps", "300", "--no-eval", "--summary-json", summary,
                         "--logdir", logdir, "-q", timeout=240)
    if code != 0:
        fail(f"train --adaptive-batch --ranks 2: exit {code}\n{err}")
    s = json.load(open(summary))
    changes = s["adaptive_batch"]["changes"]
    if s["world_size"] != 2 or len(changes) != 1 or \
            (changes[0]["from"], changes[0]["to"]) != (64, 128):
        fail(f"expected one doubling of each rank's 64 to 128: {changes}")
    step = changes[0]["step"]
    if s["samples"] != 300 * 64 or s["steps"] != step + (300 - step) // 2:  # each rank's
        fail(f"the run's length in samples: {s['samples']} in {s['steps']} steps, change at {step}")
    for rank in (0, 1):
        with open(os.path.join(logdir, f"rank{rank}", "steps.jsonl")) as f:
            lines = [json.loads(l) for l in f]
        events = [l for l in lines if l.get("type") == "batch_change"]
        if [(e["step"], e["batch_size"]) for e in events] != [(step, 128)]:
            fail(f"rank {rank}'s batch changes {events}, rank 0's summary: step {step}")


LICENSES = "/usr/share/common-licenses"  # Debian's base-files: always there, about 300 KB


def unigram_entropy_nats(folder):
    counts, n = {}, 0
    for name in sorted(os.listdir(folder)):
        data = open(os.path.join(folder, name), "rb").read()
        for b in data:
            counts[b] = counts.get(b, 0) + 1
        n += len(data)
    return -sum(c / n * math.log(c / n) for c in counts.values())


def case_issue18_gpt_learns_below_unigram_entropy(tmp):
    """gpt-mini on Debian's licence texts: in 300 CPU steps its validation loss falls well below
    what knowing each byte's frequency gives; the summary and steps.jsonl carry tokens and
    perplexity, and a second run reads the token cache."""
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    entropy = unigram_entropy_nats(LICENSES)
    summary, logdir = os.path.join(tmp, "s.json"), os.path.join(tmp, "run")
    code, out, err = run("train", "--model", "gpt-mini", "--data", "text:" + LICENSES,
                         "--seq-len", "64", "--batch-size", "16", "--steps", "300", "--lr", "1e-3",
                         "--threads", "1",  # two threads each beside another test's: 10x slower
                         "--summary-json", summary, "--logdir", logdir, timeout=400)
    if code != 0:
        fail(f"train exit {code}\n{err}")
    if "tokenised in" not in err:
        fail(f"the first run did not tokenise the corpus:\n{err}")
    s = json.load(open(summary))
    if not s["val_loss"] < entropy - 0.4:
        fail(f"val loss {s['val_loss']:.3f} is not well below the unigram entropy {entropy:.3f}")
    if abs(s["tokens_per_s"] - 64 * s["samples_per_s"]) > 1e-6 * s["tokens_per_s"]:
        fail(f"tokens/s {s['tokens_per_s']} is not 64 x samples/s {s['samples_per_s']}")
    if abs(s["val_perplexity"] - math.exp(s["val_loss"])) > 1e-6 * s["val_perplexity"]:
        fail(f"perplexity {s['val_perplexity']} is not e^{s['val_loss']}")
    if "tokens/s" not in out or "perplexity" not in out:
        fail(f"the summary table shows no tokens/s or perplexity:\n{out}")
    steps = [json.loads(l) for l in open(os.path.join(logdir, "steps.jsonl"))]
    step_lines = [l for l in steps if l.get("type") == "step"]
    if not step_lines or any(l.get("tokens") != 64 * l["samples"] for l in step_lines):
        fail(f"steps.jsonl lacks tokens per step: {step_lines[:2]}")
    if not any(l.get("metric") == "val_perplexity" for l in steps):
        fail("steps.jsonl has no val_perplexity")
    code, out, err = run("train", "--model", "gpt-mini", "--data", "text:" + LICENSES,
                         "--seq-len", "64", "--batch-size", "16", "--steps", "2")
    if code != 0 or ", cached" not in err:
        fail(f"the second run did not read the token cache (exit {code}):\n{err}")


def case_issue18_gpt_on_a_trained_sentencepiece(tmp):
    """train-spm:VOCAB trains a SentencePiece model on the corpus once (in the saturate-spm helper
    process, as the library cannot share LibTorch's), tokenises into the cache, and gpt-mini
    learns on its pieces: validation loss per piece well below the uniform log(vocab)."""
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    data = "text:" + LICENSES + ",tokenizer=train-spm:512"
    summary = os.path.join(tmp, "s.json")
    code, out, err = run("train", "--model", "gpt-mini", "--data", data, "--seq-len", "32",
                         "--batch-size", "16", "--steps", "250", "--lr", "2e-3", "--threads", "1",
                         "--summary-json", summary, timeout=400)
    if code != 0:
        fail(f"train exit {code}\n{err}")
    if "training a SentencePiece model of 512 pieces" not in err or "spm-" not in err:
        fail(f"no SentencePiece model was trained:\n{err}")
    models = glob.glob(os.path.join(tmp, "cache", "tokens", "spm-unigram512-*.model"))
    if len(models) != 1:
        fail(f"expected the trained model in the cache, found {models}")
    # The pieces' own unigram entropy, from the cache file (128-byte header, uint16 ids): what
    # knowing each piece's frequency alone gives on the training part of the stream.
    caches = glob.glob(os.path.join(tmp, "cache", "tokens", "spm-*.tokens"))
    if len(caches) != 1:
        fail(f"expected one token cache, found {caches}")
    raw = open(caches[0], "rb").read()
    width, count = struct.unpack_from("<I", raw, 12)[0], struct.unpack_from("<Q", raw, 16)[0]
    if width != 2 or len(raw) != 128 + 2 * count:
        fail(f"cache width {width}, {count} tokens in {len(raw)} bytes")
    ids = struct.unpack_from(f"<{count}H", raw, 128)[:int(count * 0.9)]
    freq = collections.Counter(ids)
    entropy = -sum(v / len(ids) * math.log(v / len(ids)) for v in freq.values())
    if max(ids) >= 512 or count > 303076 // 2:
        fail(f"{count} pieces up to id {max(ids)}: not a 512-piece model's encoding")
    s = json.load(open(summary))
    if not s["val_loss"] < entropy - 0.4:
        fail(f"val loss per piece {s['val_loss']:.3f} is not well below the pieces' unigram "
             f"entropy {entropy:.3f}")
    # The same model by name (spm:MODEL) reads the same cache, trains nothing.
    code, out, err = run("train", "--model", "gpt-mini", "--data",
                         "text:" + LICENSES + ",tokenizer=spm:" + models[0], "--seq-len", "32",
                         "--batch-size", "16", "--steps", "2")
    if code != 0 or ", cached" not in err or "training a SentencePiece" in err:
        fail(f"spm:MODEL did not read the cache (exit {code}):\n{err}")


def case_issue18_text_bad_input(tmp):
    """Unusable text input is one line and exit 2; a damaged token cache is rebuilt, said once."""
    os.environ["SATURATE_CACHE_DIR"] = os.path.join(tmp, "cache")
    empty, short = os.path.join(tmp, "empty.txt"), os.path.join(tmp, "short.txt")
    open(empty, "w").close()
    open(short, "w").write("a short text of a hundred bytes or so, far less than a window. " * 2)
    base = ["train", "--model", "gpt-mini", "--steps", "2"]
    expect_usage_error(base + ["--data", "text:" + empty], "is empty")
    expect_usage_error(base + ["--data", "text:" + short, "--seq-len", "64"], "shorter than one")
    expect_usage_error(base + ["--data", "text:" + LICENSES, "--seq-len", "512"],
                       "above gpt-mini's context of 256")
    expect_usage_error(base + ["--data", "text:" + LICENSES + ",tokenizer=spm:" + tmp + "/no.model"],
                       "no such model file")
    expect_usage_error(base + ["--data", "text:" + LICENSES + ",tokenizer=spm:" + short],
                       "not a SentencePiece model")
    expect_usage_error(base + ["--data", "text:" + LICENSES + ",tokenizer=words"],
                       "unknown tokenizer 'words'")
    expect_usage_error(["train", "--model", "mlp", "--steps", "2", "--data", "text:" + LICENSES],
                       "takes images, not text")
    expect_usage_error(["train", "--model", "gpt-mini", "--steps", "2", "--data", "fashion-mnist"],
                       "needs text data")
    expect_usage_error(["train", "--model", "mlp", "--steps", "2", "--seq-len", "8"],
                       "--seq-len is for text data")
    code, _, err = run(*base, "--data", "text:" + LICENSES, "--seq-len", "32")
    if code != 0:
        fail(f"train exit {code}\n{err}")
    caches = glob.glob(os.path.join(tmp, "cache", "tokens", "*-303076.tokens"))  # the licences
    if len(caches) != 1:
        fail(f"expected one token cache, found {caches}")
    with open(caches[0], "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    code, _, err = run(*base, "--data", "text:" + LICENSES, "--seq-len", "32")
    if code != 0 or "unusable (checksum mismatch); rebuilding it" not in err:
        fail(f"a damaged cache was not rebuilt with a message (exit {code}):\n{err}")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--case", required=True)
    ARGS = ap.parse_args()
    fn = globals().get("case_" + ARGS.case)
    if fn is None:
        fail(f"unknown case {ARGS.case}")
    with tempfile.TemporaryDirectory(prefix="saturate-cli-") as tmp:
        fn(tmp)
    print(f"ok: {ARGS.case}")


if __name__ == "__main__":
    main()

