# SPDX-License-Identifier: Apache-2.0
"""What the session asks of torch, only when the program has imported it: it never imports torch
itself (that would cost seconds in scripts that do not use it) and never initialises CUDA.
"""
import sys


def _torch():
    return sys.modules.get("torch")


def cuda_in_use():
    """True when the program has initialised CUDA in this process."""
    torch = _torch()
    try:
        return torch is not None and torch.cuda.is_initialized()
    except Exception:  # a torch without CUDA support, or one half imported
        return False


def wait_for_device():
    """Waits for the queued GPU work, so that a step's `t` is taken after its result is ready."""
    if cuda_in_use():
        _torch().cuda.synchronize()


def peak_memory_bytes(reset):
    """The high-water mark of CUDA memory allocated by tensors on the current device since the last
    reset (the program's start when never reset), or None without CUDA. `reset` starts a new
    interval (torch.cuda.reset_peak_memory_stats).
    """
    if not cuda_in_use():
        return None
    cuda = _torch().cuda
    peak = int(cuda.max_memory_allocated())
    if reset:
        cuda.reset_peak_memory_stats()
    return peak


def as_float(value):
    """A loss as a Python float; a tensor is read with .item(), which waits for the device."""
    if value is None:
        return None
    item = getattr(value, "item", None)
    return float(item()) if item is not None else float(value)


def distributed_rank():
    """torch.distributed's rank when a process group is initialised, else None."""
    torch = _torch()
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        return None
    return None


def grad_enabled():
    """torch.is_grad_enabled(), or True without torch (a batch then counts as training)."""
    torch = _torch()
    return True if torch is None else bool(torch.is_grad_enabled())


def limit_device_memory(limit_bytes):
    """Caps this process's CUDA caching allocator at `limit_bytes` on the current device
    (torch.cuda.set_per_process_memory_fraction), once the program uses CUDA: an allocation past
    it raises torch.OutOfMemoryError as a smaller card would. True when applied; False while CUDA
    is not in use (the session tries again at the next step).
    """
    if not cuda_in_use():
        return False
    cuda = _torch().cuda
    device = cuda.current_device()
    total = cuda.get_device_properties(device).total_memory
    cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), device)
    return True
