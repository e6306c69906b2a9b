# SPDX-License-Identifier: Apache-2.0
"""Enforces the one-way module order of DESIGN.md: a module includes only itself and modules to
its left (core → device → telemetry → data → models → train → distributed → tune → diagnose → report →
tools), and public headers never include <torch/torch.h> nor the private compat header.

Usage: check_layering.py SOURCE_DIR
"""
import os
import re
import sys

ORDER = ["core", "device", "telemetry", "data", "models", "train", "distributed", "tune", "diagnose",
         "report"]
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]saturate/([a-z_]+)/', re.M)


def module_of(path, root):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "include" and len(rel) > 2:
        return rel[2]
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    return None


def main():
    root = sys.argv[1]
    problems = []
    for top in ("include/saturate", "src"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                mod = module_of(path, root)
                if mod not in ORDER:
                    continue
                text = open(path, encoding="utf-8").read()
                for used in INCLUDE.findall(text):
                    if used in ORDER and ORDER.index(used) > ORDER.index(mod):
                        problems.append(f"{os.path.relpath(path, root)}: module '{mod}' includes "
                                        f"'{used}', which comes after it")
                if top == "include/saturate":
                    if re.search(r"#\s*include\s+<torch/torch\.h>", text):
                        problems.append(f"{os.path.relpath(path, root)}: public header includes "
                                        "<torch/torch.h>")
                    if "compat/torch_compat.h" in text:
                        problems.append(f"{os.path.relpath(path, root)}: public header includes "
                                        "the private compat header")
    for p in problems:
        print(p)
    print(f"{len(problems)} layering problems" if problems else "layering ok")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
