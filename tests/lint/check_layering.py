# SPDX-License-Identifier: Apache-2.0
"""Enforces the one-way module order of DESIGN.md: a module includes only itself and modules to
its left (core → device → telemetry → data → models → train → distributed → tune → diagnose → report →
tools), and public headers never include <torch/torch.h> nor the private compat header.

tools/saturate is the rightmost module and holds commands only: flags → options → a library call →
a report. It may not include the library's private headers (src/...), may not make the decisions
that belong to tune (the noise rule, the effective-batch and LR rules, micro-batch arithmetic, the
guard's rules, the batch search), and each cmd_*.cpp stays under CMD_LIMIT lines.

Usage: check_layering.py SOURCE_DIR
"""
import os
import re
import sys

ORDER = ["core", "device", "telemetry", "data", "models", "train", "distributed", "tune", "diagnose",
         "report"]
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]saturate/([a-z_]+)/', re.M)
CMD_LIMIT = 200
# Decisions a command must leave to the library, and how each shows in code.
TOOLS_FORBIDDEN = [
    (re.compile(r"\b(beats|clearly_slower|relative_standard_error)\s*\("), "the noise rule (tune/noise_rule.h)"),
    (re.compile(r"\b(rescaled_lr|choose_effective_batch|micro_batches_for|split_to_fit)\s*\("),
     "the effective-batch rules (tune/effective_batch.h): call replay_plan_batch or the tuner"),
    (re.compile(r"\+\s*\w+\s*-\s*1\s*\)\s*/\s*\w+"), "micro-batch arithmetic (tune/effective_batch.h)"),
    (re.compile(r"\b(size_guard|guard_tolerances|judge_candidate|search_batch_size)\s*\("),
     "the tuner's stages (src/tune/stages/)"),
    (re.compile(r'#\s*include\s+"(stages|compat|device|train|tune)/'), "a private header of src/"),
]


def check_tools(root, problems):
    tools = os.path.join(root, "tools", "saturate")
    if not os.path.isdir(tools):
        return
    for name in sorted(os.listdir(tools)):
        if not name.endswith((".h", ".cpp")):
            continue
        path = os.path.join(tools, name)
        rel = os.path.relpath(path, root)
        lines = open(path, encoding="utf-8").read().splitlines()
        for number, line in enumerate(lines, 1):
            code = line.split("//")[0]
            for pattern, what in TOOLS_FORBIDDEN:
                if pattern.search(code):
                    problems.append(f"{rel}:{number}: a command makes a library decision: {what}")
        if name.startswith("cmd_") and len(lines) > CMD_LIMIT:
            problems.append(f"{rel}: {len(lines)} lines; a command is flags → options → run → "
                            f"report in under {CMD_LIMIT}")


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
    check_tools(root, problems)
    for p in problems:
        print(p)
    print(f"{len(problems)} layering problems" if problems else "layering ok")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
