#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Static check of the Julia package FlashAttn against the C API spec (bindings/spec/flashattn_api.json).

Julia is not available where CI runs, so the package's `ccall`s are read as text instead of being run:

- every `ccall((:name, libflashattn), Ret, (T1, T2, ...), a1, a2, ...)` in src/ and ext/ is parsed (function name,
  return type, argument type tuple, argument count); the library must be the `libflashattn` constant;
- each names a function of the spec, with as many argument types as the spec has parameters, as many arguments as
  types, and each type one the C type maps to (below);
- every function of the spec is called at least once;
- the `const FLASHATTN_... = Cint(N)` constants hold every enum value and constant of the spec, and no other.

C to Julia type map (a C type may have several correct spellings):
  int32_t Int32 or Cint     int64_t Int64     size_t Csize_t     float Cfloat or Float32     char UInt8 or Cchar
  an enum typedef Cint or Int32     a handle typedef, `void *`, `struct S *` Ptr{Cvoid}
  any other `T *` (const or not) Ptr{T'} or Ref{T'} with T' a spelling of T (so `flashAttnHandle_t *` is
  Ptr{Ptr{Cvoid}} or Ref{Ptr{Cvoid}}, `const float **` Ptr{Ptr{Cfloat}} ...)
  returns: void Cvoid; `const char *` Cstring or Ptr{UInt8}/Ptr{Cchar}; no Ref.

Usage: check_ccalls.py [--spec JSON] [--package DIR]     check (exit 1 listing every mismatch)
       check_ccalls.py --self-test                      check that the checker rejects broken bindings
"""
import argparse
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC = os.path.join(HERE, "..", "spec", "flashattn_api.json")

SCALARS = {
    "int32_t": {"Int32", "Cint"},
    "int64_t": {"Int64"},
    "size_t": {"Csize_t"},
    "float": {"Cfloat", "Float32"},
    "double": {"Cdouble", "Float64"},
    "char": {"UInt8", "Cchar"},
    "uint8_t": {"UInt8"},
    "uint32_t": {"UInt32"},
    "uint64_t": {"UInt64"},
}


def split_type(c):
    c = c.strip()
    if c.startswith("const "):
        c = c[len("const "):]
    stars = c.count("*")
    return c.replace("*", "").strip(), stars


def julia_types(c, spec, is_return=False):
    """The Julia spellings a normalized C type of the spec may have in a ccall."""
    base, stars = split_type(c)
    enums = {e["name"] for e in spec["enums"]}
    handles = set(spec["handles"])

    def spell(level):
        if level == 0:
            if base == "void" or base.startswith("struct "):
                return {"Cvoid"}
            if base in enums:
                return {"Cint", "Int32"}
            if base in handles:
                return {"Ptr{Cvoid}"}
            if base in SCALARS:
                return set(SCALARS[base])
            raise ValueError("no Julia mapping for C type %r" % c)
        inner = spell(level - 1)
        out = {"Ptr{%s}" % t for t in inner}
        if not (level == 1 and (base == "void" or base.startswith("struct "))):
            out |= {"Ref{%s}" % t for t in inner}
        return out

    if is_return:
        if stars == 0 and base == "void":
            return {"Cvoid", "Nothing"}
        if stars == 1 and base == "char":
            return {"Cstring", "Ptr{UInt8}", "Ptr{Cchar}"}
        return {t for t in spell(stars) if not t.startswith("Ref{")}
    if stars == 0 and base == "void":
        raise ValueError("a parameter of type void")
    return spell(stars)


def strip_comments_and_strings(text):
    """Blanks out comments and string contents (keeping offsets and line breaks) so that parsing sees only code."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    while i < n:
        if text.startswith("#=", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("#=", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("=#", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif text[i] == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith('"""', i):
            j = text.find('"""', i + 3)
            j = n if j < 0 else j + 3
            blank(i + 3, j - 3)
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif text[i] == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            # A character literal; an apostrophe after an identifier is the adjoint operator and stays.
            if i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_)]}"):
                j = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1) + 1
                blank(i + 1, j - 1)
                i = j
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def split_top(s):
    """Splits at commas outside (), [], {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def squash(s):
    return re.sub(r"\s+", "", s)


def find_ccalls(path):
    """(line, name, library, return type, [arg types], argument count) of every ccall in a file."""
    with open(path, encoding="utf-8") as f:
        code = strip_comments_and_strings(f.read())
    calls = []
    for m in re.finditer(r"(@?)\bccall\s*\(", code):
        line = code.count("\n", 0, m.start()) + 1
        if m.group(1):
            raise SyntaxError("%s:%d: @ccall is not read by this check; write ccall(...)" % (path, line))
        depth, i = 1, m.end()
        while depth:
            if i >= len(code):
                raise SyntaxError("%s:%d: unbalanced ccall" % (path, line))
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(code[i], 0)
            i += 1
        args = split_top(code[m.end():i - 1])
        if len(args) < 3:
            raise SyntaxError("%s:%d: ccall with %d arguments" % (path, line, len(args)))
        target = re.fullmatch(r"\(\s*:(\w+)\s*,\s*(\w+)\s*\)", args[0])
        if not target:
            raise SyntaxError("%s:%d: ccall target %r is not (:name, library)" % (path, line, args[0]))
        tup = args[2]
        if not (tup.startswith("(") and tup.endswith(")")):
            raise SyntaxError("%s:%d: argument types %r are not a tuple literal" % (path, line, tup))
        types = [squash(t) for t in split_top(tup[1:-1])]
        if types and types[-1] == "":
            types.pop()  # the trailing comma of a 1-tuple
        if "" in types:
            raise SyntaxError("%s:%d: empty argument type in %r" % (path, line, tup))
        calls.append((line, target.group(1), target.group(2), squash(args[1]), types, len(args) - 3))
    return calls


def find_constants(path):
    with open(path, encoding="utf-8") as f:
        code = strip_comments_and_strings(f.read())
    found = {}
    for m in re.finditer(r"^\s*const\s+(FLASHATTN_\w+)\s*=\s*(.+)$", code, re.M):
        v = re.fullmatch(r"(?:Cint|Int32)\((-?\d+)\)|(-?\d+)", m.group(2).strip())
        found[m.group(1)] = int(v.group(1) or v.group(2)) if v else m.group(2).strip()
    return found


def julia_files(package):
    for sub in ("src", "ext"):
        root = os.path.join(package, sub)
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                if name.endswith(".jl"):
                    yield os.path.join(dirpath, name)


def check(spec, package):
    problems = []
    functions = {f["name"]: f for f in spec["functions"]}
    called = set()
    constants = {}
    files = list(julia_files(package))
    if not files:
        return ["no .jl files under %s/src or %s/ext" % (package, package)], 0
    ncalls = 0
    for path in files:
        rel = os.path.relpath(path, package)
        constants.update(find_constants(path))
        for line, name, lib, ret, types, nargs in find_ccalls(path):
            ncalls += 1
            where = "%s:%d %s" % (rel, line, name)
            if lib != "libflashattn":
                problems.append("%s: library %s, not the libflashattn constant (the SONAME)" % (where, lib))
            f = functions.get(name)
            if f is None:
                problems.append("%s: not a function of the spec" % where)
                continue
            called.add(name)
            if nargs != len(types):
                problems.append("%s: %d arguments for %d argument types" % (where, nargs, len(types)))
            if len(types) != len(f["params"]):
                problems.append("%s: %d argument types, the spec has %d parameters" %
                                (where, len(types), len(f["params"])))
            for i, (t, p) in enumerate(zip(types, f["params"])):
                ok = julia_types(p["type"], spec)
                if t not in ok:
                    problems.append("%s: argument %d (%s) is %s; C %s is one of %s" %
                                    (where, i + 1, p["name"], t, p["type"], ", ".join(sorted(ok))))
            ok = julia_types(f["return"], spec, is_return=True)
            if ret not in ok:
                problems.append("%s: returns %s; C %s is one of %s" % (where, ret, f["return"], ", ".join(sorted(ok))))
    for name in sorted(set(functions) - called):
        problems.append("%s: no ccall wraps it" % name)
    want = {v["name"]: v["value"] for e in spec["enums"] for v in e["values"]}
    want.update({c["name"]: c["value"] for c in spec.get("constants", [])})
    for name, value in sorted(want.items()):
        if name not in constants:
            problems.append("const %s: missing (the spec has %d)" % (name, value))
        elif constants[name] != value:
            problems.append("const %s = %s, the spec has %d" % (name, constants[name], value))
    for name in sorted(set(constants) - set(want)):
        problems.append("const %s: not in the spec" % name)
    return problems, ncalls


def run(spec_path, package):
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    problems, ncalls = check(spec, package)
    if problems:
        print("FlashAttn.jl differs from %s:" % spec_path)
        for p in problems:
            print("  " + p)
        return 1
    print("FlashAttn.jl: %d ccalls wrap the %d functions of %s with the spec's argument types; %d enum values and "
          "constants match" % (ncalls, len(spec["functions"]), spec_path,
                               sum(len(e["values"]) for e in spec["enums"]) + len(spec.get("constants", []))))
    return 0


def self_test(spec_path):
    """The checker must reject each kind of mistake it claims to find, and accept the real package."""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    with open(os.path.join(HERE, "src", "FlashAttn.jl"), encoding="utf-8") as f:
        good = f.read()
    assert not check(spec, HERE)[0], "the package itself must pass"
    mutations = {
        "a wrong argument type": ("(Ptr{Cvoid}, Int64, Int64), a.ptr, left, right)",
                                  "(Ptr{Cvoid}, Int32, Int64), a.ptr, left, right)"),
        "a missing argument": ("(Ptr{Cvoid}, Int64, Int64), a.ptr, left, right)", "(Ptr{Cvoid}, Int64), a.ptr, left)"),
        "an argument count that differs from the types": ("(Ptr{Cvoid}, Int64, Int64), a.ptr, left, right)",
                                                          "(Ptr{Cvoid}, Int64, Int64), a.ptr, left)"),
        "a wrong return type": ("version() = ccall((:flashAttnGetVersion, libflashattn), Int32, ())",
                                "version() = ccall((:flashAttnGetVersion, libflashattn), Int64, ())"),
        "an unwrapped function": ("version() = ccall((:flashAttnGetVersion, libflashattn), Int32, ())",
                                  "version() = Int32(100)"),
        "a wrong enum value": ("const FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT = Cint(2)",
                               "const FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT = Cint(3)"),
        "another library": ("version() = ccall((:flashAttnGetVersion, libflashattn)",
                            "version() = ccall((:flashAttnGetVersion, libother)"),
    }
    failures = []
    for what, (old, new) in mutations.items():
        if good.count(old) != 1:
            failures.append("%s: the text to mutate is not in src/FlashAttn.jl exactly once" % what)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "src"))
            with open(os.path.join(tmp, "src", "FlashAttn.jl"), "w", encoding="utf-8") as f:
                f.write(good.replace(old, new))
            if not check(spec, tmp)[0]:
                failures.append("%s was not detected" % what)
    # Comments and strings must not hide or fake a ccall.
    assert strip_comments_and_strings('x = "ccall(" # ccall(\n') .count("ccall") == 0
    assert julia_types("const float **", spec) >= {"Ptr{Ptr{Cfloat}}", "Ref{Ptr{Cfloat}}"}
    assert julia_types("flashAttnHandle_t *", spec) >= {"Ptr{Ptr{Cvoid}}", "Ref{Ptr{Cvoid}}"}
    assert "Ref{Cvoid}" not in julia_types("const void *", spec)
    if failures:
        print("check_ccalls.py self-test failed:\n  " + "\n  ".join(failures))
        return 1
    print("check_ccalls.py self-test: %d kinds of mismatch detected" % len(mutations))
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=os.environ.get("FLASHATTN_SPEC_JSON") or DEFAULT_SPEC)
    ap.add_argument("--package", default=HERE)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv[1:])
    try:
        return self_test(args.spec) if args.self_test else run(args.spec, args.package)
    except (SyntaxError, ValueError) as e:
        print("check_ccalls.py: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
