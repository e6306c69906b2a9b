# SPDX-License-Identifier: Apache-2.0
"""Shared by the saturate_client tests: paths, running a fixture script as a subprocess with a
clean environment and a timeout, and reading the protocol lines it wrote.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_ROOT = os.path.join(REPO, "python", "saturate_client")
AUTOHOOK_DIR = os.path.join(CLIENT_ROOT, "saturate_client", "autohook")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PREFIX = ":::SATURATE "
SCRIPT_TIMEOUT_S = 60

if CLIENT_ROOT not in sys.path:
    sys.path.insert(0, CLIENT_ROOT)


def clean_env(**settings):
    """os.environ without SATURATE_* or torchrun variables, plus `settings` (str values)."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SATURATE_") and k not in drop}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update({k: str(v) for k, v in settings.items()})
    return env


def run_python(args, env, hook=False, client_on_path=True, timeout=SCRIPT_TIMEOUT_S):
    """Runs `python args...` in its own process group; returns (exit code, stdout, stderr).

    `hook` puts the zero-change folder first on PYTHONPATH, as saturate does. On a timeout the
    group (this call's own child and its DataLoader workers) is killed and the test fails.
    """
    paths = ([AUTOHOOK_DIR] if hook else []) + ([CLIENT_ROOT] if client_on_path else [])
    extra = env.get("PYTHONPATH")
    env = dict(env, PYTHONPATH=os.pathsep.join(paths + ([extra] if extra else [])))
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{args} ran over {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err


def fixture(name):
    """The path of tests/python/fixtures/<name>."""
    return os.path.join(FIXTURES, name)


def read_metrics(path):
    """The JSON objects in a metrics file, one per line (an absent file gives [])."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stdout_lines(stdout):
    """The JSON objects of the stdout lines that start with the protocol's prefix."""
    return [json.loads(line[len(PREFIX):]) for line in stdout.splitlines()
            if line.startswith(PREFIX)]


def final_loss(stdout):
    """The value the fixture scripts print as `final loss X`."""
    for line in stdout.splitlines():
        if line.startswith("final loss "):
            return float(line.split()[2])
    raise AssertionError(f"no 'final loss' line in:\n{stdout}")


class TempRunDir:
    """A temporary run folder with its metrics path; removed on exit."""

    def __enter__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="saturate-client-test-")
        self.path = self._dir.name
        self.metrics = os.path.join(self.path, "metrics.jsonl")
        return self

    def __exit__(self, *exc):
        self._dir.cleanup()
        return False

    def env(self, **settings):
        """clean_env with the protocol on, this folder and its metrics file, plus `settings`."""
        return clean_env(SATURATE_PROTOCOL=1, SATURATE_TRIAL="t1", SATURATE_RUN_DIR=self.path,
                         SATURATE_METRICS=self.metrics,
                         TORCHELASTIC_ERROR_FILE=os.path.join(self.path, "error.json"),
                         PYTHONUNBUFFERED=1, **settings)
