#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Parses every .jl file of the Julia package (src/, ext/, examples/, test/) with the tree-sitter Julia grammar and
fails on any syntax error, naming the file, line and text. Julia itself is not installed where CI runs; this catches
what check_ccalls.py does not read (a missing `end`, an unbalanced bracket) before a Julia user would.

Needs the PyPI packages tree-sitter and tree-sitter-julia; exits 77 (skipped) without them.
Usage: check_syntax.py [PACKAGE_DIR]     check_syntax.py --self-test
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parser():
    try:
        import tree_sitter
        import tree_sitter_julia
    except ImportError as e:
        print("SKIPPED: %s (pip install tree-sitter tree-sitter-julia)" % e)
        sys.exit(77)
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language()))


def errors(p, source):
    found = []

    def walk(node):
        if node.type == "ERROR" or node.is_missing:
            text = source[node.start_byte:node.end_byte].decode("utf-8", "replace").strip().splitlines()
            found.append((node.start_point[0] + 1, "missing " + node.type if node.is_missing else
                          "cannot parse %r" % (text[0][:60] if text else "")))
        for child in node.children:
            walk(child)

    walk(p.parse(source).root_node)
    return found


def main(argv):
    p = parser()
    if argv[1:] == ["--self-test"]:
        broken = [b"function f(x)\n    x +\nend\n", b"g(a, b\n", b"struct A\n    x::Int\n"]
        if all(errors(p, src) for src in broken):
            print("check_syntax.py self-test: %d broken snippets rejected" % len(broken))
            return 0
        print("check_syntax.py self-test: a broken snippet parsed")
        return 1
    package = argv[1] if len(argv) > 1 else HERE
    files = [os.path.join(d, n) for sub in ("src", "ext", "examples", "test")
             for d, _, names in os.walk(os.path.join(package, sub)) for n in sorted(names) if n.endswith(".jl")]
    if not files:
        print("no .jl files under %s" % package)
        return 1
    bad = 0
    for path in files:
        with open(path, "rb") as f:
            for line, what in errors(p, f.read()):
                print("%s:%d: %s" % (os.path.relpath(path, package), line, what))
                bad += 1
    print("%d Julia files parsed, %d syntax errors" % (len(files), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
