# SPDX-License-Identifier: Apache-2.0
"""Session: reads saturate's settings and writes the protocol's start, step, eval and end lines.

    import saturate_client as saturate
    with saturate.session() as s:
        batch_size = s.get("batch_size", 32)
        s.start(applied={"batch_size": batch_size})
        for x, y in s.wrap_loader(loader):
            s.step(samples=len(x), loss=train_step(x, y))
            if s.should_stop():
                break

Without SATURATE_PROTOCOL in the environment a session is inactive: it writes nothing, `settings`
is empty and each call returns at once.
"""
import atexit
import os
import sys
import time

from . import torch_state
from .failure import classify, describe
from .lines import NullSink, open_sink
from .loader import TimedLoader
from .settings import (NOT_REPORTED, PROTOCOL_VERSION, read_count, read_flag, read_protocol,
                       read_settings)

STATUSES = ("ok", "oom", "error")
MODES = ("cooperative", "zero-change")


class Session:
    """One program's report to saturate. Not thread-safe: call it from the training loop's thread.

    `environ` defaults to os.environ. `mode` is "cooperative" (the program calls start itself) or
    "zero-change" (autohook: start is written at the first step, and end only after a start).
    With `exit_hooks`, an uncaught exception writes an end line ("oom" or "error") and a normal
    exit without end() writes end "ok". Raises SettingsError for malformed settings.
    """

    def __init__(self, environ=None, mode="cooperative", exit_hooks=True):
        if mode not in MODES:
            raise ValueError(f"saturate: mode {mode!r} is not one of {MODES}")
        env = os.environ if environ is None else environ
        self.protocol = read_protocol(env)
        self.is_active = self.protocol is not None
        self.mode = mode
        self.settings = read_settings(env) if self.is_active else {}
        self.trial = env.get("SATURATE_TRIAL", "")
        self.run_dir = env.get("SATURATE_RUN_DIR", "")
        self.rank = read_count(env, "RANK", 0, 0) if self.is_active else 0
        self.world_size = read_count(env, "WORLD_SIZE", 1, 1) if self.is_active else 1
        self._all_ranks = self.is_active and read_flag(env, "SATURATE_ALL_RANKS")
        # --memory-limit on a GPU: this process's CUDA allocator is capped once CUDA is in use.
        self._device_limit = (read_count(env, "SATURATE_DEVICE_MEMORY_LIMIT_BYTES", 0, 1)
                              if self.is_active else 0)
        self._metrics_path = env.get("SATURATE_METRICS", "")
        self._sink = NullSink()
        self._pid = os.getpid()
        self._steps_reported = 0
        self._last_step = 0
        self._data_wait_s = 0.0
        self._has_data_waits = False
        self.is_started = False
        self.is_ended = False
        if self.is_active and exit_hooks:
            _install_exit_hooks(self)

    def get(self, name, default=None):
        """The setting saturate passed (typed, e.g. 96 or "bf16"), or `default` when it did not."""
        return self.settings.get(name, default)

    def start(self, applied=None):
        """Writes the start line. `applied` is what the program really uses ({"batch_size": 96});
        settings saturate passed that are not in it are listed as ignored. Only the first call
        writes; step(), eval() and end() start the session with applied={} when it was not.
        """
        if not self._is_writer_process() or self.is_started:
            return
        self.is_started = True
        applied = dict(applied or {})
        ignored = [n for n in self.settings if n not in applied and n not in NOT_REPORTED]
        rank = torch_state.distributed_rank()
        self.rank = self.rank if rank is None else rank
        if self.rank == 0 or self._all_ranks:
            self._sink = open_sink(self._metrics_path)
        self._write({"ev": "start", "trial": self.trial, "mode": self.mode, "applied": applied,
                     "ignored": ignored, "world_size": self.world_size, "pid": self._pid})

    def step(self, samples, loss=None, tokens=None, step=None):
        """Reports one optimizer step that took `samples` samples on this rank (all micro-batches
        of an accumulated step). `loss` may be a tensor: reading it waits for the device, as does
        the session when CUDA is in use, so `t` is taken once the step's result is ready. `step`
        numbers it (default: the previous number + 1, from 1).
        """
        self._steps_reported += 1
        if not self._is_writer_process() or self.is_ended:
            return
        samples = int(samples)
        if samples < 0:
            raise ValueError(f"saturate: step(samples={samples}) must be >= 0")
        self.start()
        if self._device_limit and torch_state.limit_device_memory(self._device_limit):
            self._device_limit = 0
        loss_value = torch_state.as_float(loss)
        torch_state.wait_for_device()
        now = time.time()
        self._last_step = self._last_step + 1 if step is None else int(step)
        record = {"ev": "step", "t": now, "step": self._last_step, "samples": samples}
        if loss is not None:
            record["loss"] = loss_value
        if tokens is not None:
            record["tokens"] = int(tokens)
        if self._has_data_waits:
            record["data_wait_s"] = round(self._data_wait_s, 6)
            self._data_wait_s = 0.0
        peak = torch_state.peak_memory_bytes(reset=self.mode == "cooperative")
        if peak is not None:
            record["peak_memory_bytes"] = peak
        self._write(record)

    def eval(self, name, value, *, higher_is_better):
        """Reports an evaluation result `name` (e.g. "val_loss") at the last reported step."""
        if not self._is_writer_process() or self.is_ended:
            return
        self.start()
        self._write({"ev": "eval", "step": self._last_step, "name": str(name),
                     "value": torch_state.as_float(value),
                     "higher_is_better": bool(higher_is_better)})

    def end(self, status="ok", message=""):
        """Writes the end line (status "ok", "oom" or "error"); later calls and steps write nothing."""
        if status not in STATUSES:
            raise ValueError(f"saturate: end(status={status!r}) is not one of {STATUSES}")
        if not self._is_writer_process() or self.is_ended:
            return
        self.start()
        self.is_ended = True
        self._write({"ev": "end", "status": status, "message": str(message)})

    def should_stop(self):
        """True once SATURATE_MAX_STEPS steps have been reported (on every rank, so they agree)."""
        max_steps = self.settings.get("max_steps", 0)
        return max_steps > 0 and self._steps_reported >= max_steps

    def wrap_loader(self, loader):
        """`loader`, timed: the wait for each batch is added to the next step line as data_wait_s.
        Returns `loader` itself when the session is inactive.
        """
        return TimedLoader(loader, self.add_data_wait) if self.is_active else loader

    def add_data_wait(self, seconds):
        """Adds `seconds` spent waiting for input to the next step line's data_wait_s."""
        self._data_wait_s += seconds
        self._has_data_waits = True

    def end_for_exception(self, exc):
        """Writes end "oom" or "error" for an exception that ends the program (see failure.py). In
        zero-change mode only after a start, so helper processes that never trained stay silent.
        """
        if self.is_ended or (self.mode == "zero-change" and not self.is_started):
            return
        status, message = classify(exc)
        self.end(status, message)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            self.end("ok")
        elif isinstance(exc, SystemExit):
            if exc.code in (None, 0):
                self.end("ok")
            else:
                self.end("error", f"SystemExit: {exc.code}")
        else:
            self.end_for_exception(exc)
        return False

    def _is_writer_process(self):
        # A forked child (DataLoader workers, os.fork) shares this object but must not write.
        return self.is_active and os.getpid() == self._pid

    def _write(self, fields):
        record = {"v": PROTOCOL_VERSION, "ev": fields.pop("ev"), "t": fields.pop("t", time.time())}
        if self._all_ranks:
            record["rank"] = self.rank
        record.update(fields)
        self._sink.write(record)


def _install_exit_hooks(session):
    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            session.end_for_exception(exc)
        except Exception as e:  # the program's own error matters more than the report
            sys.stderr.write(f"saturate: could not write the end line: {describe(e)}\n")
        previous_hook(exc_type, exc, tb)

    def at_exit():
        if session.is_ended or (session.mode == "zero-change" and not session.is_started):
            return
        try:
            session.end("ok")
        except Exception as e:
            sys.stderr.write(f"saturate: could not write the end line: {describe(e)}\n")

    sys.excepthook = excepthook
    atexit.register(at_exit)


_session = None


def has_program_session():
    """True once the program has called session() (zero-change mode then stands down)."""
    return _session is not None


def session():
    """The process's Session, created on the first call (settings read then)."""
    global _session
    if _session is None:
        _session = Session()
    return _session


def timed(loader):
    """session().wrap_loader(loader): iterating it times the wait for each batch."""
    return session().wrap_loader(loader)
