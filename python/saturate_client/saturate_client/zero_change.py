# SPDX-License-Identifier: Apache-2.0
"""Zero-change mode: the steps of an unmodified PyTorch script, seen through torch's global
optimizer step hook and a wrapper around DataLoader.__iter__. autohook/sitecustomize.py calls
install(); nothing happens until the script imports torch, and no line is written until it takes
a training batch or steps an optimizer.

It never changes a setting: the start line says applied {} and mode "zero-change". A step is one
step() of the first optimizer that steps; its samples are those of the DataLoader batches taken
with gradients enabled since the previous step (batches taken under torch.no_grad() or
inference_mode, as evaluation loops do, are not counted), 0 when there were none it could count.
After SATURATE_MAX_STEPS steps it writes end "ok" and raises SystemExit(0) from optimizer.step().
"""
import functools
import importlib.abc
import importlib.util
import os
import sys
import time
import weakref

from . import client
from . import torch_state
from .failure import describe
from .loader import count_samples


class ZeroChangeReporter:
    """Turns DataLoader batches and optimizer steps into the session's step lines."""

    def __init__(self, session):
        self.session = session
        self._pending_samples = 0
        self._optimizer = None
        self._is_disabled = False

    def on_loader_started(self, wait_s):
        """iter(DataLoader) took `wait_s` (starting workers): counted as data wait."""
        if self._is_counting():
            self.session.add_data_wait(wait_s)

    def on_batch(self, batch, wait_s):
        """A batch was taken after waiting `wait_s` seconds."""
        if not self._is_counting():
            return
        self._guarded(self._count_batch, batch, wait_s)

    def on_optimizer_step(self, optimizer, args, kwargs):
        """torch's optimizer step post hook: writes a step line for the first optimizer."""
        if self._is_disabled or client.has_program_session():
            return
        current = self._optimizer() if self._optimizer is not None else None
        if current is None:
            self._optimizer = weakref.ref(optimizer)
        elif current is not optimizer:
            return
        samples, self._pending_samples = self._pending_samples, 0
        self._guarded(self.session.step, samples=samples)
        if self.session.should_stop():
            max_steps = self.session.get("max_steps")
            self._guarded(self.session.end, "ok", f"stopped after SATURATE_MAX_STEPS={max_steps}")
            raise SystemExit(0)

    def _count_batch(self, batch, wait_s):
        self.session.start(applied={})
        self._pending_samples += count_samples(batch) or 0
        self.session.add_data_wait(wait_s)

    def _is_counting(self):
        # A script that made its own session reports for itself; evaluation batches do not count.
        return (not self._is_disabled and not client.has_program_session()
                and torch_state.grad_enabled())

    def _guarded(self, function, *args, **kwargs):
        # The hook must never break the training it watches: on a failure it warns and stops.
        try:
            function(*args, **kwargs)
        except Exception as e:
            self._is_disabled = True
            sys.stderr.write(f"saturate: zero-change reporting stopped: {describe(e)}\n")


class _CountingIterator:
    """A DataLoader iterator that tells the reporter about each batch it hands out."""

    def __init__(self, iterator, reporter):
        self._iterator = iterator
        self._reporter = reporter

    def __iter__(self):
        return self

    def __next__(self):
        begin = time.perf_counter()
        batch = next(self._iterator)
        self._reporter.on_batch(batch, time.perf_counter() - begin)
        return batch

    def __len__(self):
        return len(self._iterator)

    def __getattr__(self, name):
        if "_iterator" not in self.__dict__:  # during copy or unpickling, before __init__
            raise AttributeError(name)
        return getattr(self.__dict__["_iterator"], name)


def hook_torch(reporter):
    """Registers the optimizer step post hook and wraps DataLoader.__iter__ (once per process)."""
    # torch.optim deletes its `optimizer` attribute, so the hook is imported by its full name.
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DataLoader as loader_type

    register_optimizer_step_post_hook(reporter.on_optimizer_step)
    original = loader_type.__iter__
    if getattr(original, "_saturate_wrapped", False):
        return

    @functools.wraps(original)
    def __iter__(self):
        begin = time.perf_counter()
        iterator = original(self)
        reporter.on_loader_started(time.perf_counter() - begin)
        return _CountingIterator(iterator, reporter)

    __iter__._saturate_wrapped = True
    loader_type.__iter__ = __iter__


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Calls `on_import(torch)` once `import torch` has finished, then leaves sys.meta_path."""

    def __init__(self, on_import):
        self._on_import = on_import
        self._is_busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self._is_busy:
            return None
        self._is_busy = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self._is_busy = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _call_warning_on_failure(self._on_import, module)

        spec.loader.exec_module = exec_module
        return spec


def _call_warning_on_failure(function, *args):
    try:
        function(*args)
    except Exception as e:
        sys.stderr.write(f"saturate: zero-change hook not installed: {describe(e)}\n")


def install(environ=None):
    """Starts zero-change reporting when SATURATE_PROTOCOL is set: hooks torch now if it is
    imported, else when it is. Returns the reporter, or None outside saturate. Raises
    SettingsError for malformed settings.
    """
    env = os.environ if environ is None else environ
    if not env.get("SATURATE_PROTOCOL"):
        return None
    reporter = ZeroChangeReporter(client.Session(environ=env, mode="zero-change"))
    if "torch" in sys.modules:
        _call_warning_on_failure(hook_torch, reporter)
    else:
        sys.meta_path.insert(0, _TorchImportWatcher(lambda torch: hook_torch(reporter)))
    return reporter
