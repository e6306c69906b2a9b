# SPDX-License-Identifier: Apache-2.0
"""The lints on made-up trees: each rule must reject a real bad case and pass the good one, so a
green lint means something.

Usage: lint_selftest.py LINT_DIR
"""
import os
import subprocess
import sys
import tempfile

LINTS = sys.argv[1]


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def lint(name, root):
    r = subprocess.run([sys.executable, os.path.join(LINTS, name), root], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout


def function(name, body_lines):
    body = "".join(f"  x += {i};  // {{ not a brace \"}}\"\n" for i in range(body_lines))
    return f"int {name}(int x) {{\n{body}  return x;\n}}\n"


def expect(cond, what, output):
    if not cond:
        print(f"FAIL: {what}\n{output}")
        sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as root:
        # Function length: 79 lines pass, 90 fail, a listed exception passes.
        write(root, "src/core/a.cpp", function("short_one", 76))
        code, out = lint("check_function_length.py", root)
        expect(code == 0, "a 79-line function passes", out)
        write(root, "tools/saturate/cmd_x.cpp",
              "namespace n {\nstruct S {\n" + function("long_one", 88) + "};\n}\n")
        code, out = lint("check_function_length.py", root)
        expect(code == 1 and "long_one is 91 lines" in out, "a 91-line method in a struct fails",
               out)
        write(root, "docs/STYLE-EXCEPTIONS.md",
              "- `tools/saturate/cmd_x.cpp` `long_one`: a made-up reason\n")
        code, out = lint("check_function_length.py", root)
        expect(code == 0, "a listed exception passes", out)
        # Layering: a module including one to its right fails.
        write(root, "src/device/b.cpp", '#include "saturate/tune/plan.h"\n')
        code, out = lint("check_layering.py", root)
        expect(code == 1 and "module 'device' includes 'tune'" in out, "device → tune fails", out)
        os.remove(os.path.join(root, "src/device/b.cpp"))
        code, out = lint("check_layering.py", root)
        expect(code == 0, "the clean tree passes", out)
        # Commands: no tuning decisions, no micro-batch arithmetic, under 200 lines.
        bad = {
            "rescaled_lr(": "double f() { return rescaled_lr(0.1, k, 64, 128); }\n",
            "beats(": "bool f() { return beats(2, 0.1, 1, 0.1, 0.03); }\n",
            "arithmetic": "long f(long b, long m) { return (b + m - 1) / m; }\n",
            "private header": '#include "stages/tune_state.h"\n',
        }
        for what, text in bad.items():
            write(root, "tools/saturate/cmd_y.cpp", text)
            code, out = lint("check_layering.py", root)
            expect(code == 1 and "cmd_y.cpp:1" in out, f"a command with {what} fails", out)
        write(root, "tools/saturate/cmd_y.cpp", "// a comment may say rescaled_lr(...)\n" * 201)
        code, out = lint("check_layering.py", root)
        expect(code == 1 and "201 lines" in out and "cmd_y.cpp:1:" not in out,
               "a 201-line command fails; comments are not code", out)
    print("lint self-test ok")


if __name__ == "__main__":
    main()
