#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""debian/libflashattn0.symbols from the version script src/flashattn.map.

  tools/debian_symbols.py --check   exit 1 (with a diff) when the symbols file is not what the map gives
  tools/debian_symbols.py --write   rewrite the symbols file

A symbol already in the file keeps the version it was introduced in; a new one gets the project version of
CMakeLists.txt, the first release that exports it. The package build then holds the file against the library's real
exports (DPKG_GENSYMBOLS_CHECK_LEVEL=4 in debian/rules), so the map, the symbols file and the .so agree.
"""
import argparse
import difflib
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAP = os.path.join(ROOT, "src", "flashattn.map")
SYMBOLS = os.path.join(ROOT, "debian", "libflashattn0.symbols")
CMAKELISTS = os.path.join(ROOT, "CMakeLists.txt")


def read_map(path):
    """Version nodes and their global names, in file order."""
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    text = re.sub(r"#[^\n]*", "", text)
    nodes = []
    for node, body in re.findall(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\{(.*?)\}", text, flags=re.S):
        names = []
        scope = None
        for token in re.split(r"[;\s]+", body):
            if token in ("global:", "local:"):
                scope = token
            elif token and scope == "global:":
                names.append(token)
        nodes.append((node, names))
    return nodes


def project_version():
    match = re.search(r"project\(\s*flashattn\s+VERSION\s+([0-9.]+)", open(CMAKELISTS).read())
    if not match:
        sys.exit("no project(flashattn VERSION ...) in CMakeLists.txt")
    return match.group(1)


def soversion():
    match = re.search(r"set\(FLASHATTN_SOVERSION\s+([0-9]+)\)", open(CMAKELISTS).read())
    if not match:
        sys.exit("no set(FLASHATTN_SOVERSION ...) in CMakeLists.txt")
    return match.group(1)


def known_versions(path):
    versions = {}
    if os.path.exists(path):
        for line in open(path):
            parts = line.split()
            if line.startswith(" ") and len(parts) >= 2:
                versions[parts[0]] = parts[1]
    return versions


def expected(path):
    so = soversion()
    known = known_versions(path)
    new = project_version()
    lines = ["libflashattn.so.%s libflashattn%s #MINVER#\n" % (so, so),
             "* Build-Depends-Package: libflashattn-dev\n"]
    entries = []
    for node, names in read_map(MAP):
        # The linker records each version node as a symbol of its own, and dpkg-gensymbols lists it.
        for name in [node] + names:
            symbol = "%s@%s" % (name, node)
            entries.append(" %s %s\n" % (symbol, known.get(symbol, new)))
    return lines + sorted(entries)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = parser.parse_args()
    want = expected(SYMBOLS)
    if args.write:
        with open(SYMBOLS, "w") as f:
            f.writelines(want)
        print("wrote %s (%d symbols)" % (SYMBOLS, len(want) - 2))
        return 0
    have = open(SYMBOLS).readlines() if os.path.exists(SYMBOLS) else []
    if have == want:
        print("%s matches %s (%d symbols)" % (SYMBOLS, MAP, len(want) - 2))
        return 0
    sys.stdout.writelines(difflib.unified_diff(have, want, "debian/libflashattn0.symbols", "from src/flashattn.map"))
    print("FAILED: the symbols file differs from the version script (tools/debian_symbols.py --write updates it)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
