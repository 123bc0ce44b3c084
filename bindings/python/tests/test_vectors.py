# SPDX-License-Identifier: BSD-3-Clause
"""Every shared vector of bindings/testdata through the Python binding on the HOST backend, with its gates
(bindings/testdata/README.md). Outputs are passed in, poisoned with NaN, in the layout the vector gives."""

import json
import os

import numpy as np
import pytest

import flashattn
from conftest import TESTDATA, vector_files


def _float(x):
    return float(x)  # "nan", "inf" and "-inf" strings read as floats too


def array(t, dtype=np.float32, fill=None):
    """A strided view over a buffer holding the vector's data in memory order."""
    dims, strides = t["dims"], t["strides"]
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    buf = np.full(span, np.nan if fill is None else fill, dtype=dtype)
    if fill is None:
        assert len(t["data"]) == span
        buf[:] = [_float(x) for x in t["data"]]
    item = np.dtype(dtype).itemsize
    return np.lib.stride_tricks.as_strided(buf, dims, [s * item for s in strides])


def memory_order(a):
    """The elements of a strided view in memory order (the vectors' data order)."""
    item = a.itemsize
    span = 1 + sum((d - 1) * s // item for d, s in zip(a.shape, a.strides))
    base = np.lib.stride_tricks.as_strided(a, (span,), (item,))
    return np.array(base, dtype=np.float64)


def apply_gate(name, got, expected, gate):
    ref = np.array([_float(x) for x in expected["data"]])
    out = memory_order(got)
    inf = np.isinf(ref)
    assert np.array_equal(out[inf], ref[inf]), "%s: -inf expected at %s" % (name, np.flatnonzero(inf))
    assert np.all(np.isfinite(out[~inf])), "%s: non-finite values at %s" % (name, np.flatnonzero(~np.isfinite(out)))
    err = np.abs(out[~inf] - ref[~inf])
    assert err.max(initial=0) <= gate["max_abs"], "%s: max error %g > %g" % (name, err.max(), gate["max_abs"])
    if "normwise" in gate:
        den = np.linalg.norm(ref[~inf])
        nw = np.linalg.norm(err) / den if den > 0 else np.linalg.norm(err)
        assert nw <= gate["normwise"], "%s: normwise error %g > %g" % (name, nw, gate["normwise"])


def seq_arguments(seq):
    if seq is None:
        return {}
    args = {}
    if "ragged" in seq:
        r = seq["ragged"]
        args.update(cu_seqlens_q=np.array(r["cu_seqlens_q"], np.int32),
                    cu_seqlens_k=np.array(r["cu_seqlens_k"], np.int32), max_seqlen_q=r["max_q"],
                    max_seqlen_k=r["max_k"])
    if "kv_lengths" in seq:
        args["kv_lengths"] = np.array(seq["kv_lengths"], np.int32)
    if "paged" in seq:
        args["block_table"] = np.array(seq["paged"]["block_table"], np.int32)
    return args


def attention_arguments(a):
    return dict(scale=a["scale"], mask=a["mask"], window=tuple(a["window"]), softcap=a["softcap"])


@pytest.mark.parametrize("file", vector_files())
def test_vector(file):
    with open(os.path.join(TESTDATA, file), encoding="utf-8") as f:
        vec = json.load(f)
    assert vec["dtype"] == "fp32"
    ins = {name: array(t) for name, t in vec["inputs"].items()}
    outs = {name: array(t, fill=np.nan) for name, t in vec["expected"].items()}
    op = vec["op"]
    seq = seq_arguments(vec["seq"])
    sinks = ins.get("sinks")
    if op == "forward":
        flashattn.forward(ins["q"], ins["k"], ins["v"], out=outs["o"], lse=outs.get("lse"), sinks=sinks,
                          deterministic=vec["attention"]["deterministic"], **attention_arguments(vec["attention"]),
                          **seq)
    elif op == "backward":
        flashattn.backward(ins["do"], ins["q"], ins["k"], ins["v"], ins["o"], ins["lse"], dq=outs["dq"],
                           dk=outs["dk"], dv=outs["dv"], sinks=sinks, dsinks=outs.get("dsinks"),
                           deterministic=vec["attention"]["deterministic"], **attention_arguments(vec["attention"]),
                           **seq)
    elif op == "decode":
        flashattn.decode(ins["q"], ins["k"], ins["v"], out=outs["o"], lse=outs.get("lse"), num_chunks=vec["chunks"],
                         sinks=sinks, **attention_arguments(vec["attention"]), **seq)
    elif op == "merge":
        flashattn.merge_states(ins["partial_o"], ins["partial_lse"], out=outs["o"], lse=outs.get("lse"))
    else:
        pytest.fail("unknown op %s" % op)
    assert set(vec["gates"]) == set(outs)
    for name, got in outs.items():
        apply_gate(name, got, vec["expected"][name], vec["gates"][name])


def test_every_operation_has_a_vector():
    ops = set()
    for file in vector_files():
        with open(os.path.join(TESTDATA, file), encoding="utf-8") as f:
            vec = json.load(f)
        ops.add(vec["op"])
        if "sinks" in vec["inputs"]:
            ops.add(vec["op"] + " with sinks")
        if "dsinks" in vec["expected"]:
            ops.add("dsinks")
    assert ops == {"forward", "backward", "decode", "merge", "forward with sinks", "backward with sinks",
                   "decode with sinks", "dsinks"}


def test_a_wrong_expected_value_fails_its_gate():
    # The gates above must be able to fail: one expected value moved by 1e-3 is caught.
    with open(os.path.join(TESTDATA, "forward_plain.json"), encoding="utf-8") as f:
        vec = json.load(f)
    ins = {name: array(t) for name, t in vec["inputs"].items()}
    out = array(vec["expected"]["o"], fill=np.nan)
    flashattn.forward(ins["q"], ins["k"], ins["v"], out=out, **attention_arguments(vec["attention"]))
    vec["expected"]["o"]["data"][5] += 1e-3
    with pytest.raises(AssertionError, match="max error"):
        apply_gate("o", out, vec["expected"]["o"], vec["gates"]["o"])
