# SPDX-License-Identifier: BSD-3-Clause
"""Handle and descriptor objects: values round-trip through the library, cleanup by close(), `with` and the
finalizer, and a closed object is refused."""

import gc
import weakref

import numpy as np
import pytest

import flashattn
from flashattn import Backend, DataType, Mask, Status


def test_handle_on_the_host_backend():
    with flashattn.Handle(Backend.HOST) as h:
        assert h.backend is Backend.HOST
        h.stream = 0  # ignored by the HOST backend, but accepted
        assert h.stream == 0
    assert h.closed
    with pytest.raises(flashattn.Error) as info:
        h.backend
    assert info.value.status == Status.NOT_INITIALIZED
    h.close()  # a second close does nothing


def test_the_finalizer_destroys_an_unreferenced_object():
    h = flashattn.Handle(Backend.HOST)
    finalizer = h._finalizer
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None and not finalizer.alive


def test_tensor_descriptor_round_trip():
    with flashattn.TensorDescriptor(DataType.BF16, (2, 3, 5, 8), (120, 8, 24, 1)) as d:
        assert d.get() == (DataType.BF16, (2, 3, 5, 8), (120, 8, 24, 1))
        with pytest.raises(flashattn.Error) as info:
            d.set(DataType.FP32, (2, 3), (3, 2))  # the last stride must be 1
        assert info.value.status == Status.BAD_PARAM and info.value.function == "flashAttnSetTensorDescriptor"
        assert d.get()[1] == (2, 3, 5, 8)  # unchanged by the failed set


def test_attention_descriptor_round_trip():
    with flashattn.AttentionDescriptor() as a:
        assert a.scale is None and a.mask is Mask.NONE and a.window == (-1, -1) and a.softcap == 0
        assert not a.deterministic and a.alibi_slopes == (0, False)
        a.scale, a.mask, a.window, a.softcap, a.deterministic = 0.5, Mask.CAUSAL_TOP_LEFT, (3, 0), 2.0, True
        assert (a.scale, a.mask, a.window, a.softcap, a.deterministic) == (0.5, Mask.CAUSAL_TOP_LEFT, (3, 0), 2.0,
                                                                           True)
        slopes = np.ones(4, np.float32)
        a.set_alibi_slopes(slopes.ctypes.data, per_batch=False, owner=slopes)
        assert a.alibi_slopes == (slopes.ctypes.data, False)
        with pytest.raises(flashattn.Error) as info:
            a.scale = -1.0
        assert info.value.status == Status.BAD_PARAM
        assert a.scale == 0.5


def test_seq_descriptor_round_trip():
    cu = np.array([0, 3, 7], np.int32)
    lengths = np.array([5, 6], np.int32)
    table = np.zeros((2, 3), np.int32)
    with flashattn.SeqDescriptor() as s:
        assert s.ragged[0] == 0 and s.kv_lengths == (0, 0) and s.paged[0] == 0
        s.set_ragged(2, cu.ctypes.data, cu.ctypes.data, 4, 4, owners=(cu,))
        assert s.ragged == (2, cu.ctypes.data, cu.ctypes.data, 4, 4)
        s.set_kv_lengths(2, lengths.ctypes.data, owner=lengths)
        assert s.kv_lengths == (2, lengths.ctypes.data)
        s.set_paged(2, table.ctypes.data, 3, owner=table)
        assert s.paged == (2, table.ctypes.data, 3)


def test_check_support_describes_the_host_kernel():
    q = flashattn.TensorDescriptor(DataType.FP32, (1, 2, 4, 16), (128, 64, 16, 1))
    k = flashattn.TensorDescriptor(DataType.FP32, (1, 2, 4, 16), (128, 64, 16, 1))
    with flashattn.Handle(Backend.HOST) as h:
        text, deterministic = flashattn.check_support(h, flashattn.Operation.FORWARD, q, k, k, q)
    assert text and deterministic


def test_operations_take_an_explicit_handle():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 4, 16)).astype(np.float32)
    with flashattn.Handle(Backend.HOST) as h:
        a = flashattn.forward(q, q, q, handle=h)
    b = flashattn.forward(q, q, q)
    assert np.array_equal(a, b)


def test_outputs_take_the_layout_of_q():
    rng = np.random.default_rng(4)
    bshd = rng.standard_normal((1, 5, 2, 16)).astype(np.float32)  # stored [batch, seq, heads, dim]
    q = bshd.transpose(0, 2, 1, 3)  # seen as [batch, heads, seq, dim]
    o, lse = flashattn.forward(q, q, q, return_lse=True)
    assert o.shape == (1, 2, 5, 16) and o.strides == q.strides
    assert lse.shape == (1, 2, 5) and lse.dtype == np.float32
    ref = flashattn.forward(np.ascontiguousarray(q), np.ascontiguousarray(q), np.ascontiguousarray(q))
    assert np.array_equal(o, ref)


def test_lists_as_sequence_arrays_on_the_host():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((7, 2, 16)).astype(np.float32)
    o = flashattn.forward(q, q, q, cu_seqlens_q=[0, 3, 7], cu_seqlens_k=[0, 3, 7], causal=True)
    first = flashattn.forward(q[None, :3].transpose(0, 2, 1, 3), q[None, :3].transpose(0, 2, 1, 3),
                              q[None, :3].transpose(0, 2, 1, 3), causal=True)
    assert np.allclose(o[:3], first[0].transpose(1, 0, 2), atol=1e-6)
