# SPDX-License-Identifier: Apache-2.0
"""Encoding protocol lines and writing them: to the SATURATE_METRICS file, or to stdout with the
prefix ":::SATURATE " when that variable is unset.

Each line is one write of at most MAX_LINE_BYTES bytes (prefix and newline included) and is
flushed at once, so lines from several ranks appending to one file do not interleave.
"""
import json
import math
import os
import sys

MAX_LINE_BYTES = 4096
STDOUT_PREFIX = ":::SATURATE "


def _finite(value):
    """JSON has no NaN or infinity: a non-finite float becomes null (read back as NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode_line(record, prefix=""):
    """`record` as one line of compact JSON ending in a newline, as UTF-8 bytes.

    A `message` that would take the line over MAX_LINE_BYTES is shortened; any other record over
    the limit raises ValueError.
    """
    record = _finite(record)
    data = _encode(record, prefix)
    excess = len(data) - MAX_LINE_BYTES
    if excess > 0 and isinstance(record.get("message"), str):
        message = record["message"].encode("utf-8")
        keep = max(0, len(message) - excess - 64)  # room for JSON escapes in what is kept
        record = dict(record, message=message[:keep].decode("utf-8", "ignore") + "...")
        data = _encode(record, prefix)
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(f"saturate: a {record.get('ev')!r} line is {len(data)} bytes, over the "
                         f"protocol's {MAX_LINE_BYTES}; report fewer or shorter values")
    return data


def _encode(record, prefix):
    text = json.dumps(record, separators=(",", ":"), allow_nan=False, default=str)
    return (prefix + text + "\n").encode("utf-8")


class NullSink:
    """Writes nothing: outside saturate, and on ranks other than 0."""

    def write(self, record):
        pass


class FileSink:
    """Appends lines to a file (O_APPEND, one os.write per line, no user-space buffer)."""

    def __init__(self, path):
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise OSError(f"saturate: cannot open SATURATE_METRICS={path!r}: {e.strerror}") from e

    def write(self, record):
        os.write(self._fd, encode_line(record))


class StdoutSink:
    """Prints prefixed lines through sys.stdout, flushing before and after to keep them whole."""

    def write(self, record):
        stream = sys.stdout
        if stream is None:
            return
        data = encode_line(record, STDOUT_PREFIX)
        stream.flush()
        stream.write(data.decode("utf-8"))
        stream.flush()


def open_sink(metrics_path):
    """A FileSink for `metrics_path`, or a StdoutSink when it is None or empty."""
    return FileSink(metrics_path) if metrics_path else StdoutSink()
