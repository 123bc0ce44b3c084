#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""SPDX-License-Identifier headers of the tracked sources.

  tools/spdx.py --check [--root DIR]   list the files that need a header and have none (exit 1 if any)
  tools/spdx.py --fix   [--root DIR]   add the header to those files (idempotent: a second run changes nothing)

Files come from `git ls-files`; outside a git checkout the tool exits 77 (CTest's "skipped"), because a plain copy of
the tree (a Debian source package, an unpacked tarball) has no reliable list of what belongs to the project. Only
files whose comment syntax is known get a header; documentation (Markdown), data (JSON, text) and the Debian control
files, which debian/copyright covers, are left alone.
"""
import argparse
import os
import re
import subprocess
import sys

LICENSE = "BSD-3-Clause"
TAG = "SPDX-License-Identifier:"
# A header further down than this is not where a reader or a scanner looks for it.
HEAD_LINES = 5

SLASH = "// SPDX-License-Identifier: " + LICENSE + "\n"
HASH = "# SPDX-License-Identifier: " + LICENSE + "\n"
# GNU ld version scripts know only C block comments.
BLOCK = "/* SPDX-License-Identifier: " + LICENSE + " */\n"

SLASH_SUFFIXES = (".c", ".h", ".cpp", ".hpp", ".cc", ".cxx", ".cu", ".cuh")
HASH_SUFFIXES = (".cmake", ".sh", ".py", ".pc")
HASH_NAMES = ("CMakeLists.txt", "Doxyfile", ".gitignore")
CODING = re.compile(r"^#.*coding[:=]")


def header_for(path, first_line):
    """The header line for this file, or None when the file is not a source with known comments."""
    name = os.path.basename(path)
    # Templates (.cu.in, .h.in, .cmake.in, .pc.in, Doxyfile.in) use the syntax of what they generate.
    base = name[:-3] if name.endswith(".in") else name
    if base.endswith(SLASH_SUFFIXES):
        return SLASH
    if base.endswith(".map"):
        return BLOCK
    if base.endswith(HASH_SUFFIXES) or base in HASH_NAMES:
        return HASH
    # Extensionless scripts (.ci/run, debian/rules): a shebang says the language takes '#' comments.
    if first_line.startswith("#!"):
        return HASH
    return None


def tracked_files(root):
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], check=True,
                             capture_output=True).stdout.decode().strip()
        # A copy of the tree inside another checkout (a package build in a build directory) is not a checkout of
        # its own: git would answer for the enclosing one, which does not track the copy.
        if os.path.realpath(top) != os.path.realpath(root):
            return None
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode().split("\0") if p]


def read_lines(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read().splitlines(keepends=True)


def has_tag(lines):
    return any(TAG in line for line in lines[:HEAD_LINES])


def insert_at(lines):
    """After a shebang, and after a Python coding line, which must stay in the first two lines to count."""
    at = 0
    if lines and lines[0].startswith("#!"):
        at = 1
    if len(lines) > at and CODING.match(lines[at]):
        at += 1
    return at


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list files without an SPDX header")
    mode.add_argument("--fix", action="store_true", help="add the missing headers")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="repository root (default: the one holding this script)")
    args = parser.parse_args()

    files = tracked_files(args.root)
    if files is None:
        print("SKIPPED: %s is not a git checkout (or git is missing): no list of tracked files" % args.root)
        return 77

    missing, checked = [], 0
    for rel in files:
        path = os.path.join(args.root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue  # a deletion not yet committed, or a link whose target is checked on its own
        try:
            lines = read_lines(path)
        except UnicodeDecodeError:
            continue  # binary
        header = header_for(rel, lines[0] if lines else "")
        if header is None:
            continue
        checked += 1
        if has_tag(lines):
            continue
        missing.append(rel)
        if args.fix:
            at = insert_at(lines)
            if at > 0 and not lines[at - 1].endswith("\n"):
                lines[at - 1] += "\n"
            lines.insert(at, header)
            # The file keeps its mode (scripts stay executable): only its contents are rewritten.
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write("".join(lines))

    if args.fix:
        for rel in missing:
            print("added: " + rel)
        print("%d of %d source files got a header" % (len(missing), checked))
        return 0
    for rel in missing:
        print("no SPDX-License-Identifier in the first %d lines: %s" % (HEAD_LINES, rel))
    print("%d source files checked, %d without a header%s" %
          (checked, len(missing), " (run tools/spdx.py --fix)" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
