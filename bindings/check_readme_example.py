#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that a binding's README shows its example program verbatim.

Usage: check_readme_example.py README EXAMPLE

The example file is what CI runs; the README must contain one fenced code block whose body is exactly the file's
text, so the README can never show code that was not run. Exits 1 naming the first differing line otherwise.
"""
import difflib
import re
import sys


def fenced_blocks(text):
    # ``` or ~~~ fences of three or more characters; the body is everything between the fence lines.
    for m in re.finditer(r"^(```+|~~~+)[^\n]*\n(.*?)^\1[ \t]*$", text, re.S | re.M):
        yield m.group(2)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    readme, example = argv[1], argv[2]
    with open(readme, encoding="utf-8") as f:
        blocks = list(fenced_blocks(f.read()))
    with open(example, encoding="utf-8") as f:
        code = f.read()
    if not code.endswith("\n"):
        code += "\n"
    if code in blocks:
        print("%s shows %s verbatim" % (readme, example))
        return 0
    # Point at the nearest block, so that the fix is obvious.
    best = max(blocks, key=lambda b: difflib.SequenceMatcher(None, b, code).ratio(), default="")
    diff = difflib.unified_diff(best.splitlines(), code.splitlines(), "README block", example, lineterm="", n=1)
    print("%s does not show %s verbatim; nearest block against the file:" % (readme, example))
    print("\n".join(list(diff)[:40]))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
