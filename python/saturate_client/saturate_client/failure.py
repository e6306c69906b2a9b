# SPDX-License-Identifier: Apache-2.0
"""Classifying the exception that ends a program: out of memory ("oom") or anything else ("error").

The messages are those of the PyTorch allocators and DataLoader (docs/exec-protocol.md lists them
with their sources). Ambiguous ones such as CUDNN_STATUS_NOT_SUPPORTED count as errors.
"""
import sys

OOM_MESSAGES = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "HIP out of memory",
    "MPS backend out of memory",
    "DefaultCPUAllocator: can't allocate memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "is killed by signal: Killed",      # a DataLoader worker taken by the kernel's OOM killer
    "is killed by signal: Bus error",   # a DataLoader worker out of shared memory (/dev/shm)
)

_MAX_CHAIN = 8


def _is_oom_type(exc):
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return oom_type is not None and isinstance(exc, oom_type)


def is_out_of_memory(exc):
    """True when `exc`, or an exception it was raised from (cause or context), is out of memory."""
    for _ in range(_MAX_CHAIN):
        if exc is None:
            return False
        if _is_oom_type(exc) or any(m in str(exc) for m in OOM_MESSAGES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def describe(exc):
    """"Type: first line of the message", as the end line's `message` carries it."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else ""
    name = type(exc).__name__
    return f"{name}: {first}" if first else name


def classify(exc):
    """(status, message) for an exception that ends the program: status is "oom" or "error"."""
    return ("oom" if is_out_of_memory(exc) else "error"), describe(exc)
