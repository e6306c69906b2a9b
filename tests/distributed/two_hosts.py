#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two "hosts": network namespaces joined by a veth pair, one `saturate launch` node in each,
training over TCP with MASTER_ADDR the first namespace's address. Needs root (ip netns);
exits 77 (skipped, with the reason) where the namespaces cannot be made.

Usage: two_hosts.py --saturate BIN
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

SKIP = 77


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--saturate", required=True)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: not root, so no network namespaces (ip netns needs CAP_SYS_ADMIN)")
        return SKIP
    if shutil.which("ip") is None:
        print("SKIP: no 'ip' command (Debian package iproute2)")
        return SKIP
    tag = str(os.getpid())[-5:]
    ns = [f"sat{tag}a", f"sat{tag}b"]
    dev = [f"vs{tag}a", f"vs{tag}b"]
    net = f"10.{200 + int(tag) % 50}.{int(tag) % 250}"
    addr = [f"{net}.1", f"{net}.2"]
    procs = []
    tmp = tempfile.mkdtemp(prefix="saturate-two-hosts-")
    try:
        for n in ns:
            r = sh("ip", "netns", "add", n)
            if r.returncode != 0:
                print(f"SKIP: cannot create a network namespace: {r.stderr.strip()}")
                return SKIP
        steps = [("ip", "link", "add", dev[0], "type", "veth", "peer", "name", dev[1])]
        for i in range(2):
            steps += [("ip", "link", "set", dev[i], "netns", ns[i]),
                      ("ip", "-n", ns[i], "addr", "add", addr[i] + "/24", "dev", dev[i]),
                      ("ip", "-n", ns[i], "link", "set", dev[i], "up"),
                      ("ip", "-n", ns[i], "link", "set", "lo", "up")]
        for step in steps:
            r = sh(*step)
            if r.returncode != 0:
                print(f"SKIP: cannot join the namespaces ({' '.join(step)}): {r.stderr.strip()}")
                return SKIP
        r = sh("ip", "netns", "exec", ns[1], "ping", "-c", "1", "-W", "2", addr[0])
        if shutil.which("ping") and r.returncode != 0:
            fail(f"the namespaces cannot reach each other: {r.stdout}{r.stderr}")
        summary = os.path.join(tmp, "summary.json")
        for i in range(2):
            cmd = ["ip", "netns", "exec", ns[i], args.saturate, "launch", "--nnodes", "2",
                   "--node-rank", str(i), "--nproc-per-node", "1", "--master-addr", addr[0],
                   "--master-port", "29500", "--", "train", "--data", "synthetic:1,28,28,10,512",
                   "--model", "mlp", "--steps", "8", "--batch-size", "16", "--threads", "1", "-q",
                   "--dist-timeout", "30", "--summary-json", summary]
            # Gloo takes the address of the namespace's own interface, not the hostname's.
            env = dict(os.environ, GLOO_SOCKET_IFNAME=dev[i])
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                fail("the two hosts still train after 90 s")
            results.append((p.returncode, out, err))
        for i, (code, out, err) in enumerate(results):
            if code != 0:
                fail(f"host {i}: exit {code}\n{out}\n{err}")
        if f"store {addr[0]}:29500" not in results[1][2]:
            fail(f"host 1's rank does not name host 0's store:\n{results[1][2]}")
        with open(summary) as f:
            s = json.load(f)
        if s["world_size"] != 2 or s["global_batch_size"] != 32:
            fail(f"summary: {s}")
        print(f"two hosts: {ns[0]} ({addr[0]}) and {ns[1]} ({addr[1]}) trained as one job, "
              f"{s['job_samples_per_s']:.0f} samples/s")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for n in ns:
            sh("ip", "netns", "del", n)  # takes its end of the veth pair with it
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
