# SPDX-License-Identifier: Apache-2.0
"""Timing the wait for batches (TimedLoader) and counting a batch's samples (count_samples)."""
import time
from collections.abc import Mapping


class TimedLoader:
    """Iterates `loader` unchanged, passing the seconds spent waiting for each batch (and for
    iter() itself, which starts DataLoader workers) to `on_wait`.

    Other attributes (`dataset`, `batch_size`, `sampler`, ...) and len() are the loader's.
    """

    def __init__(self, loader, on_wait):
        self.loader = loader
        self._on_wait = on_wait

    def __iter__(self):
        begin = time.perf_counter()
        iterator = iter(self.loader)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            end = time.perf_counter()
            self._on_wait(end - begin)
            yield batch
            begin = time.perf_counter()

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        if "loader" not in self.__dict__:  # during copy or unpickling, before __init__
            raise AttributeError(name)
        return getattr(self.__dict__["loader"], name)


def count_samples(batch, depth=0):
    """The number of samples in a batch: the first dimension of its first tensor, looking inside
    dicts (first value), lists and tuples (first element). None when there is no tensor to count.
    """
    if depth > 4:
        return None
    shape = getattr(batch, "shape", None)
    if shape is not None and hasattr(batch, "dim"):
        return int(shape[0]) if len(shape) > 0 else 1
    if isinstance(batch, Mapping):
        items = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        items = list(batch)
    else:
        return None
    for item in items:
        count = count_samples(item, depth + 1)
        if count is not None:
            return count
    return None
