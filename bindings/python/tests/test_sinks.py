# SPDX-License-Identifier: BSD-3-Clause
"""Attention sinks through the high-level helpers on NumPy (HOST): forward, decode and backward with sinks=,
dSinks from backward(return_dsinks=True), against a float64 NumPy reference."""

import numpy as np
import pytest

import flashattn


def _reference(q, k, v, sinks):
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    top = np.maximum(s.max(-1, keepdims=True), sinks[None, :, None, None])
    e = np.exp(s - top)
    denom = e.sum(-1, keepdims=True) + np.exp(sinks[None, :, None, None] - top)
    o = np.einsum("bhij,bhjd->bhid", e / denom, v)
    return o, (top + np.log(denom))[..., 0]


def test_forward_decode_backward_with_sinks():
    rng = np.random.default_rng(5)
    b, h, sq, sk, d = 2, 3, 4, 9, 8
    q, k, v, do = (rng.standard_normal(shape).astype(np.float32)
                   for shape in ((b, h, sq, d), (b, h, sk, d), (b, h, sk, d), (b, h, sq, d)))
    sinks = rng.standard_normal(h).astype(np.float32)
    o, lse = flashattn.forward(q, k, v, sinks=sinks, return_lse=True)
    ref_o, ref_lse = _reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                sinks.astype(np.float64))
    np.testing.assert_allclose(o, ref_o, atol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-5)
    od = flashattn.decode(q, k, v, sinks=sinks, num_chunks=3)
    np.testing.assert_allclose(od, ref_o, atol=1e-5)

    dq, dk, dv, dsinks = flashattn.backward(do, q, k, v, o, lse, sinks=sinks, return_dsinks=True)
    assert dsinks.shape == (h,) and dsinks.dtype == np.float32
    ref_ds = -(np.exp(sinks[None, :, None].astype(np.float64) - ref_lse) *
               (do.astype(np.float64) * o.astype(np.float64)).sum(-1)).sum(axis=(0, 2))
    np.testing.assert_allclose(dsinks, ref_ds, atol=1e-5)
    out = np.full(h, np.nan, np.float32)
    assert flashattn.backward(do, q, k, v, o, lse, sinks=sinks, dsinks=out)[3] is out
    np.testing.assert_array_equal(out, dsinks)
    assert len(flashattn.backward(do, q, k, v, o, lse, sinks=sinks)) == 3

    with pytest.raises(flashattn.Error):
        flashattn.backward(do, q, k, v, o, lse, return_dsinks=True)  # dsinks without sinks


def test_descriptor_sinks_round_trip():
    sinks = np.zeros(4, np.float32)
    with flashattn.AttentionDescriptor() as a:
        assert a.sinks == 0 and a.sinks_gradient == 0
        a.set_sinks(sinks.ctypes.data, owner=sinks)
        a.set_sinks_gradient(sinks.ctypes.data + 4 * 2, owner=sinks)
        assert a.sinks == sinks.ctypes.data and a.sinks_gradient == sinks.ctypes.data + 8
        with pytest.raises(flashattn.Error):
            a.set_sinks(sinks.ctypes.data + 1)
        a.set_sinks(0)
        a.set_sinks_gradient(None)
        assert a.sinks == 0 and a.sinks_gradient == 0
