# SPDX-License-Identifier: Apache-2.0
"""`python -m saturate_client autohook-dir` prints the zero-change folder; `version` the versions."""
import sys

from . import PROTOCOL_VERSION, __version__, autohook_dir


def main(argv):
    """Runs one of the two commands; returns the exit code (2 for usage errors)."""
    if argv == ["autohook-dir"]:
        print(autohook_dir())
        return 0
    if argv == ["version"]:
        print(f"saturate_client {__version__} (protocol {PROTOCOL_VERSION})")
        return 0
    sys.stderr.write("usage: python -m saturate_client autohook-dir|version\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
