# SPDX-License-Identifier: Apache-2.0
"""saturate's zero-change hook, loaded by Python's `site` at start-up because saturate puts this
folder first on PYTHONPATH.

1. It runs the sitecustomize that would have loaded without it (the next one on sys.path), so a
   site's or a virtual environment's own customisation still happens.
2. When SATURATE_PROTOCOL is set, it calls saturate_client.zero_change.install(), which hooks
   torch once the script imports it. saturate_client need not be installed: this folder sits
   inside the package, so its parent's parent is added to the end of sys.path when needed.

It never raises: a failure is one "saturate: ..." line on stderr and the script runs unchanged.
"""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))


def _next_sitecustomize_spec():
    for entry in sys.path:
        folder = os.path.realpath(entry or os.getcwd())
        if folder == _HERE:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.origin and os.path.realpath(spec.origin) != os.path.realpath(__file__):
            return spec
    return None


def _chain_sitecustomize():
    """Runs the next sitecustomize on sys.path, reporting its failure as `site` would."""
    spec = _next_sitecustomize_spec()
    if spec is None or spec.loader is None:
        return
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as e:
        sys.stderr.write(f"Error in sitecustomize {spec.origin}; set PYTHONVERBOSE for "
                         f"traceback:\n{type(e).__name__}: {e}\n")


def _install_zero_change():
    try:
        from saturate_client import zero_change
    except ImportError:
        sys.path.append(os.path.dirname(os.path.dirname(_HERE)))
        from saturate_client import zero_change
    zero_change.install()


def _main():
    _chain_sitecustomize()
    if not os.environ.get("SATURATE_PROTOCOL"):
        return
    try:
        _install_zero_change()
    except Exception as e:
        sys.stderr.write(f"saturate: zero-change hook disabled: {type(e).__name__}: {e}\n")


_main()
