# SPDX-License-Identifier: Apache-2.0
"""The Python side of saturate's exec protocol, version 1 (docs/exec-protocol.md).

    import saturate_client as saturate
    with saturate.session() as s:
        s.start(applied={"batch_size": s.get("batch_size", 32)})
        ...
        s.step(samples=32, loss=loss)

Standard library only; torch is used when the program has imported it.
"""
import os

from .failure import OOM_MESSAGES, classify, is_out_of_memory
from .lines import MAX_LINE_BYTES, STDOUT_PREFIX
from .loader import TimedLoader, count_samples
from .client import Session, session, timed
from .settings import PRECISIONS, PROTOCOL_VERSION, SETTINGS, SettingsError

__version__ = "1.0.0"


def autohook_dir():
    """The folder saturate puts first on PYTHONPATH for zero-change mode."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "autohook")


__all__ = ["MAX_LINE_BYTES", "OOM_MESSAGES", "PRECISIONS", "PROTOCOL_VERSION", "SETTINGS",
           "STDOUT_PREFIX", "Session", "SettingsError", "TimedLoader", "autohook_dir", "classify",
           "count_samples", "is_out_of_memory", "session", "timed"]
