# SPDX-License-Identifier: Apache-2.0
"""Fails when a function in src/ or tools/ is longer than the limit (STYLE: about 80 lines), except
the few listed in docs/STYLE-EXCEPTIONS.md, each with its reason.

A function's length is the lines from its opening brace to its closing one. Lambdas and local
classes count towards the function that holds them. Comments and string literals are blanked
before braces are matched.

Usage: check_function_length.py SOURCE_DIR [--limit N] [--list]
"""
import os
import re
import sys

CONTROL = re.compile(r"^(if|for|while|switch|catch|else|do|try|return)\b")
SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$")


def blank(text):
    """Comments and literals become spaces; newlines stay so that line numbers hold."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isdigit():
                out.append(" ")  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (name, first line, line count) of every outermost function body."""
    code = blank(text)
    stack = []  # 'scope' or 'func' or 'other'
    head_start = 0
    func_open = None
    for i, c in enumerate(code):
        if c == "{":
            head = code[head_start:i]
            kind = "other"
            if "func" not in stack:
                h = " ".join(head.split())
                h = re.sub(r"^(public|private|protected)\s*:\s*", "", h)
                if SCOPE.search(h) or h.startswith("extern"):
                    kind = "scope"
                elif ")" in h and not CONTROL.match(h) and not h.endswith("="):
                    kind = "func"
                    m = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*\(", h)
                    func_open = (m.group(1) if m else h[:40], code.count("\n", 0, i) + 1)
            stack.append(kind)
            head_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "other"
            if kind == "func" and "func" not in stack:
                end = code.count("\n", 0, i) + 1
                yield func_open[0], func_open[1], end - func_open[1] + 1
            head_start = i + 1
        elif c == ";":
            head_start = i + 1


def exceptions(root):
    path = os.path.join(root, "docs", "STYLE-EXCEPTIONS.md")
    allowed = set()
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            m = re.match(r"^\s*-\s*`([^`]+)`\s*`([^`]+)`", line)
            if m:
                allowed.add((m.group(1), m.group(2)))
    return allowed


def main():
    root = sys.argv[1]
    limit = 80
    if "--limit" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--limit") + 1])
    allowed = exceptions(root)
    problems = []
    for top in ("src", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                for func, line, length in functions(open(path, encoding="utf-8").read()):
                    if length > limit and (rel, func) not in allowed:
                        problems.append((length, f"{rel}:{line}: {func} is {length} lines "
                                                 f"(limit {limit})"))
    for _, p in sorted(problems, reverse=True):
        print(p)
    print(f"{len(problems)} functions over {limit} lines" if problems else
          f"every function is at most {limit} lines (or listed in docs/STYLE-EXCEPTIONS.md)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
