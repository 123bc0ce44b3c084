# SPDX-License-Identifier: BSD-3-Clause
"""The package declares exactly the header's functions, enums and handles (bindings/spec/flashattn_api.json is
generated from the header), with matching parameter counts, names and ctypes types."""

import ctypes
import importlib.metadata

import pytest

import flashattn
from flashattn import _capi

_SCALARS = {"int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint8_t": ctypes.c_uint8,
            "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
            "float": ctypes.c_float, "double": ctypes.c_double}


def expected_ctype(c_type):
    """The ctypes type a C type of the spec must be declared as (written independently of _capi's table)."""
    parts = c_type.split()
    stars = parts[-1].count("*") if parts[-1].startswith("*") else 0
    words = [p for p in parts if not p.startswith("*") and p != "const"]
    if words == ["struct", "CUstream_st"]:
        base = _capi.CUstream
        stars -= 1  # the stream is itself the pointer
    elif words == ["void"]:
        if stars == 0:
            return None
        base, stars = ctypes.c_void_p, stars - 1
    elif words == ["char"]:
        base, stars = ctypes.c_char_p, stars - 1
    elif len(words) == 1 and words[0] in _SCALARS:
        base = _SCALARS[words[0]]
    elif len(words) == 1 and hasattr(_capi, words[0]):
        base = getattr(_capi, words[0])  # the header's enums and handles, each its own ctypes type
    else:
        raise AssertionError("no ctypes mapping for %r" % c_type)
    for _ in range(stars):
        base = ctypes.POINTER(base)
    return base


def test_every_header_function_is_declared_with_its_types(spec):
    declared = {name: (restype, params) for name, restype, params in _capi.DECLARATIONS}
    for fn in spec["functions"]:
        assert fn["name"] in declared, "%s is in the header but not declared in flashattn/_capi.py" % fn["name"]
        restype, params = declared[fn["name"]]
        assert restype is expected_ctype(fn["return"]), "%s returns %s" % (fn["name"], fn["return"])
        assert len(params) == len(fn["params"]), "%s takes %d parameters" % (fn["name"], len(fn["params"]))
        for (name, ctype), p in zip(params, fn["params"]):
            assert name == p["name"], "%s: parameter %s is called %s in the header" % (fn["name"], name, p["name"])
            assert ctype is expected_ctype(p["type"]), "%s: parameter %s is %s" % (fn["name"], name, p["type"])


def test_nothing_is_declared_that_the_header_lacks(spec):
    header = [f["name"] for f in spec["functions"]]
    assert [name for name, _, _ in _capi.DECLARATIONS] == header  # same set, in header order


def test_enums_match_the_header(spec):
    assert set(_capi.ENUMS) == {e["name"] for e in spec["enums"]}
    for enum in spec["enums"]:
        py_enum, prefix = _capi.ENUMS[enum["name"]]
        expected = {v["name"][len(prefix):]: v["value"] for v in enum["values"]}
        assert all(v["name"].startswith(prefix) for v in enum["values"])
        assert {m.name: int(m) for m in py_enum} == expected, enum["name"]
        assert issubclass(getattr(_capi, enum["name"]), ctypes.c_int)


def test_handles_and_constants_match_the_header(spec):
    for name in spec["handles"]:
        assert issubclass(getattr(_capi, name), ctypes.c_void_p), name
    assert _capi.CONSTANTS == {c["name"]: c["value"] for c in spec["constants"]}


def test_version_matches_the_spec_and_the_library(spec):
    v = spec["version"]
    assert (_capi.ABI_MAJOR, _capi.ABI_MINOR) == (v["major"], v["minor"])
    assert importlib.metadata.version("flashattn") == "%d.%d.%d" % (v["major"], v["minor"], v["patch"])
    assert flashattn.version()[0] == v["major"]


def test_the_loaded_library_has_every_declared_function():
    lib = flashattn.lib()
    for name, _, params in _capi.DECLARATIONS:
        fn = getattr(lib, name)
        assert len(fn.argtypes) == len(params)


@pytest.mark.parametrize("c_type,expected", [
    ("const int64_t *", ctypes.POINTER(ctypes.c_int64)),
    ("struct CUstream_st **", ctypes.POINTER(_capi.CUstream)),
    ("const float **", ctypes.POINTER(ctypes.POINTER(ctypes.c_float))),
    ("void *", ctypes.c_void_p),
    ("const char *", ctypes.c_char_p),
])
def test_the_type_mapping_itself(c_type, expected):
    assert expected_ctype(c_type) is expected
