#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Generate bindings/spec/flashattn_api.json from include/flashattn/flashattn.h.

The JSON is the one description of the C API that every language binding is checked against, so a header change
that a binding misses fails its tests. The parser is deliberately strict: the header is regular (see the module
docstring of parse_header), and anything outside that grammar stops the generator with the offending text instead
of being skipped, so a new construct can never silently drop out of the spec.

Usage:
  gen_api.py            write the JSON next to this script
  gen_api.py --check    regenerate in memory; exit 1 with a unified diff when the checked-in JSON differs
  gen_api.py --header H --cmake C --output O   explicit paths (defaults: this repository)

Python 3 standard library only.
"""

import argparse
import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# Types a parameter or return value may name besides the header's own enums and handles. Anything else is an error,
# because each binding maps exactly this set to its own types.
SCALAR_TYPES = {"void", "char", "float", "double", "int32_t", "int64_t", "uint8_t", "uint32_t", "uint64_t", "size_t"}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


class HeaderError(Exception):
    pass


def fail(what, text):
    snippet = " ".join(text.split())
    if len(snippet) > 200:
        snippet = snippet[:200] + " ..."
    raise HeaderError("%s: %s" % (what, snippet))


def strip_comments(text):
    # String literals appear only in `extern "C"`, which holds no comment markers, so a plain scan is enough; a
    # comment marker inside a literal would be caught as a parse error later, never silently dropped.
    out = []
    i = 0
    n = len(text)
    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                fail("unterminated comment", text[i:i + 80])
            # Keep line breaks so that preprocessor lines stay on their own lines.
            out.append("\n" * text.count("\n", i, end + 2) or " ")
            i = end + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def preprocess(text):
    """Returns (C code outside C++-only blocks, integer #defines).

    Understood directives: the include guard, #include, the FLASHATTN_API definitions inside the platform
    conditional, integer-valued #defines, and `#ifdef __cplusplus` blocks (dropped: they only open and close
    extern "C"). C code under any other conditional is refused, since the generator cannot tell which branch holds.
    """
    lines = text.split("\n")
    # Join continuation lines first.
    joined = []
    buf = ""
    for line in lines:
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    stack = []  # one entry per open conditional: "guard", "cplusplus" or "platform"
    code = []
    defines = []
    guard_seen = False
    for line in joined:
        stripped = line.strip()
        if not stripped.startswith("#"):
            if not stripped:
                continue
            if "cplusplus" in stack:
                if stripped not in ('extern "C" {', "}"):
                    fail("unexpected code inside #ifdef __cplusplus", stripped)
                continue
            if any(kind != "guard" for kind in stack):
                fail("C code under a preprocessor conditional the generator cannot evaluate", stripped)
            code.append(line)
            continue
        directive = stripped[1:].strip()
        m = re.match(r"(\w+)\s*(.*)$", directive)
        if not m:
            fail("unknown preprocessor line", stripped)
        word, rest = m.group(1), m.group(2).strip()
        if word == "ifndef" and not guard_seen and not stack:
            stack.append("guard")
            guard_seen = True
            guard_name = rest
        elif word == "ifdef" and rest == "__cplusplus":
            stack.append("cplusplus")
        elif word == "if" and rest.startswith("defined("):
            stack.append("platform")
        elif word in ("elif", "else"):
            if not stack or stack[-1] != "platform":
                fail("#%s outside a platform conditional" % word, stripped)
        elif word == "endif":
            if not stack:
                fail("unbalanced #endif", stripped)
            stack.pop()
        elif word == "include":
            if not re.fullmatch(r'<[\w./]+>|"[\w./]+"', rest):
                fail("unknown #include form", stripped)
        elif word == "define":
            dm = re.fullmatch(r"(%s)(?:\s+(.*))?" % IDENT, rest)
            if not dm:
                fail("unknown #define form", stripped)
            name, value = dm.group(1), (dm.group(2) or "").strip()
            if stack and stack[-1] == "guard" and name == guard_name and not value:
                continue
            if name == "FLASHATTN_API":
                if "platform" not in stack:
                    fail("FLASHATTN_API defined outside the platform conditional", stripped)
                continue
            if "platform" in stack or "cplusplus" in stack:
                fail("#define under a conditional the generator cannot evaluate", stripped)
            if not re.fullmatch(r"-?\d+", value):
                fail("#define %s is not an integer constant" % name, stripped)
            defines.append({"name": name, "value": int(value)})
        else:
            fail("unknown preprocessor directive", stripped)
    if stack:
        fail("unterminated conditional", " ".join(stack))
    return "\n".join(code), defines


def split_statements(code):
    """Top-level statements, each ending with ';' at brace depth 0 (braces only open enum bodies here)."""
    statements = []
    depth = 0
    start = 0
    for i, ch in enumerate(code):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                fail("unbalanced '}'", code[max(0, i - 80):i + 1])
        elif ch == ";" and depth == 0:
            statements.append(" ".join(code[start:i].split()))
            start = i + 1
    if code[start:].strip():
        fail("text after the last ';'", code[start:])
    return statements


def normalize_type(text, known_types, what):
    """'const  int64_t*' -> 'const int64_t *'. Accepts [const] [struct] NAME followed by '*'s only."""
    m = re.fullmatch(r"(const\s+)?(struct\s+)?(%s)\s*((?:\*\s*)*)" % IDENT, text.strip())
    if not m:
        fail("%s: type not understood" % what, text)
    const, struct, name, stars = m.group(1), m.group(2), m.group(3), m.group(4).replace(" ", "")
    if struct:
        if name not in known_types["structs"]:
            fail("%s: struct %s is not declared in the header" % (what, name), text)
        if not stars:
            fail("%s: struct passed by value" % what, text)
    elif name not in SCALAR_TYPES and name not in known_types["enums"] and name not in known_types["handles"]:
        fail("%s: unknown type %s" % (what, name), text)
    parts = []
    if const:
        parts.append("const")
    if struct:
        parts.append("struct")
    parts.append(name)
    if stars:
        parts.append(stars)
    return " ".join(parts)


def parse_enum(stmt):
    m = re.fullmatch(r"typedef enum (%s) \{(.*)\} (%s)" % (IDENT, IDENT), stmt)
    if not m:
        fail("enum typedef not understood", stmt)
    tag, body, name = m.group(1), m.group(2), m.group(3)
    if tag != name:
        fail("enum tag and typedef name differ", stmt)
    values = []
    items = [item.strip() for item in body.split(",")]
    if items and items[-1] == "":
        items.pop()  # trailing comma
    for item in items:
        vm = re.fullmatch(r"(%s) = (-?\d+)" % IDENT, item)
        if not vm:
            fail("enumerator without an explicit integer value in %s" % name, item)
        values.append({"name": vm.group(1), "value": int(vm.group(2))})
    if not values:
        fail("empty enum", stmt)
    return {"name": name, "values": values}


def parse_function(stmt, known_types):
    m = re.fullmatch(r"FLASHATTN_API (.+?)\b(%s) ?\((.*)\)" % IDENT, stmt)
    if not m:
        fail("function declaration not understood", stmt)
    ret_text, name, params_text = m.group(1), m.group(2), m.group(3).strip()
    if "(" in params_text or ")" in params_text or "[" in params_text:
        fail("%s: function-pointer or array parameter" % name, stmt)
    ret = normalize_type(ret_text, known_types, "return type of %s" % name)
    params = []
    if params_text != "void":
        for p in params_text.split(","):
            pm = re.fullmatch(r"(.*?[\s*])(%s)" % IDENT, p.strip())
            if not pm:
                fail("%s: parameter not understood" % name, p)
            ptype = normalize_type(pm.group(1), known_types, "parameter %s of %s" % (pm.group(2), name))
            if ptype == "void":
                fail("%s: void parameter" % name, p)
            params.append({"name": pm.group(2), "type": ptype})
    return {"name": name, "return": ret, "params": params}


def parse_header(text):
    """The header's grammar (after comments and the preprocessor): `struct NAME;` forward declarations,
    `typedef enum T { A = 0, ... } T;`, `typedef struct S *H;` opaque handles and
    `FLASHATTN_API <ret> name(<params>);`. Any other statement is an error."""
    code, defines = preprocess(strip_comments(text))
    known = {"structs": set(), "enums": set(), "handles": set()}
    enums, handles, functions = [], [], []
    for stmt in split_statements(code):
        fm = re.fullmatch(r"struct (%s)" % IDENT, stmt)
        if fm:
            known["structs"].add(fm.group(1))
            continue
        if stmt.startswith("typedef enum "):
            enum = parse_enum(stmt)
            known["enums"].add(enum["name"])
            enums.append(enum)
            continue
        hm = re.fullmatch(r"typedef struct (%s) ?\* ?(%s)" % (IDENT, IDENT), stmt)
        if hm:
            known["handles"].add(hm.group(2))
            handles.append(hm.group(2))
            continue
        if stmt.startswith("FLASHATTN_API "):
            functions.append(parse_function(stmt, known))
            continue
        fail("statement not understood", stmt)
    names = [f["name"] for f in functions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        fail("functions declared twice", ", ".join(dupes))
    if not functions:
        fail("no function found", text[:200])
    return {"enums": enums, "handles": handles, "functions": functions, "constants": defines}


def read_version(cmake_text):
    m = re.search(r"project\(\s*flashattn\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", cmake_text)
    if not m:
        raise HeaderError("no `project(flashattn VERSION x.y.z` in CMakeLists.txt")
    return {"major": int(m.group(1)), "minor": int(m.group(2)), "patch": int(m.group(3))}


def generate(header_path, cmake_path):
    with open(header_path, encoding="utf-8") as f:
        api = parse_header(f.read())
    with open(cmake_path, encoding="utf-8") as f:
        version = read_version(f.read())
    spec = {"version": version}
    spec.update(api)
    return dump(spec) + "\n"


def dump(value, indent=""):
    """JSON with one line per leaf object (an enumerator, a parameter), so that a header change is a one-line diff."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not any(isinstance(v, (dict, list)) for v in value.values()):
            return json.dumps(value)
        items = ['%s%s: %s' % (inner, json.dumps(k), dump(v, inner)) for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if not any(isinstance(v, (dict, list)) for v in value) and len(json.dumps(value)) < 100:
            return json.dumps(value)
        return "[\n" + ",\n".join(inner + dump(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail with a diff when the output file is stale")
    parser.add_argument("--header", default=os.path.join(ROOT, "include", "flashattn", "flashattn.h"))
    parser.add_argument("--cmake", default=os.path.join(ROOT, "CMakeLists.txt"))
    parser.add_argument("--output", default=os.path.join(HERE, "flashattn_api.json"))
    args = parser.parse_args(argv)
    try:
        text = generate(args.header, args.cmake)
    except HeaderError as e:
        print("gen_api.py: %s" % e, file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                       args.output + " (checked in)", "generated from the header"))
            print("gen_api.py: %s is stale; run bindings/spec/gen_api.py and commit the result" % args.output,
                  file=sys.stderr)
            return 1
        print("gen_api.py: %s matches the header (%d functions)" % (args.output, text.count('"return"')))
        return 0
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
