# SPDX-License-Identifier: BSD-3-Clause
"""Bad input: flashattn.Error with the status and a message naming the argument, and the outputs untouched, whether
the binding refuses the argument before the C call or the library refuses it."""

import numpy as np
import pytest

import flashattn
from flashattn import Status

SENTINEL = 7.25


def problem(dtype=np.float32, heads=4, kv_heads=2):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, heads, 6, 16)).astype(dtype)
    k = rng.standard_normal((1, kv_heads, 9, 16)).astype(dtype)
    v = rng.standard_normal((1, kv_heads, 9, 16)).astype(dtype)
    out = np.full((1, heads, 6, 16), SENTINEL, dtype=np.float32)
    lse = np.full((1, heads, 6), SENTINEL, dtype=np.float32)
    return q, k, v, out, lse


def untouched(*arrays):
    return all(np.all(a == SENTINEL) for a in arrays)


def expect_error(status, match, fn, *args, **kwargs):
    with pytest.raises(flashattn.Error) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.status == status and isinstance(err.status, Status)
    assert match in err.message, err.message
    assert match in str(err)
    return err


def test_wrong_dtype_is_refused_before_the_call():
    q, k, v, out, lse = problem()
    err = expect_error(Status.BAD_PARAM, "q has dtype float64", flashattn.forward, q.astype(np.float64), k, v,
                       out=out, lse=lse)
    assert err.function is None  # the binding's refusal, not the library's
    expect_error(Status.BAD_PARAM, "k has dtype float16 but q has float32", flashattn.forward, q,
                 k.astype(np.float16), v, out=out, lse=lse)
    expect_error(Status.BAD_PARAM, "lse has dtype float64", flashattn.forward, q, k, v, out=out,
                 lse=lse.astype(np.float64))
    assert untouched(out, lse)


def test_head_dim_stride_is_refused_before_the_call():
    q, k, v, out, lse = problem()
    wide = np.zeros((1, 2, 9, 32), np.float32)
    expect_error(Status.BAD_PARAM, "k must be contiguous in its last (head) dimension", flashattn.forward, q,
                 wide[..., ::2], v, out=out, lse=lse)
    expect_error(Status.BAD_PARAM, "negative stride", flashattn.forward, q[:, :, ::-1], k, v, out=out, lse=lse)
    assert untouched(out, lse)


def test_read_only_output_is_refused():
    q, k, v, out, lse = problem()
    out.setflags(write=False)
    expect_error(Status.BAD_PARAM, "out is read-only", flashattn.forward, q, k, v, out=out, lse=lse)
    assert untouched(out, lse)


def test_bad_mask_value_comes_back_from_the_library():
    q, k, v, out, lse = problem()
    err = expect_error(Status.BAD_PARAM, "mask is 7", flashattn.forward, q, k, v, out=out, lse=lse, mask=7)
    assert err.function == "flashAttnSetAttentionMask"
    assert err.message == flashattn.last_error_message()
    expect_error(Status.BAD_PARAM, "mask='sideways'", flashattn.forward, q, k, v, out=out, mask="sideways")
    assert untouched(out, lse)


def test_too_small_workspace():
    q, k, v, out, lse = problem()
    # Ask the library what the call needs, then hand it one byte less than a size that matters: a workspace-less
    # configuration (0 bytes) cannot fail this way, so use the decode, which always needs its partial states.
    cache_k = np.random.default_rng(1).standard_normal((2, 2, 64, 16)).astype(np.float32)
    cache_v = cache_k.copy()
    qd = np.random.default_rng(2).standard_normal((2, 4, 1, 16)).astype(np.float32)
    o = np.full((2, 4, 1, 16), SENTINEL, np.float32)
    lengths = np.array([40, 64], np.int32)
    flashattn.decode(qd, cache_k, cache_v, kv_lengths=lengths, num_chunks=4, out=o)  # works with its own workspace
    o[:] = SENTINEL
    err = expect_error(Status.INSUFFICIENT_WORKSPACE, "workspace", flashattn.decode, qd, cache_k, cache_v,
                       kv_lengths=lengths, num_chunks=4, out=o, workspace=np.zeros(256, np.uint8))
    assert err.function == "flashAttnDecodeChunk"
    assert untouched(o)


def test_library_shape_errors_name_the_tensor():
    q, k, v, out, lse = problem(heads=4, kv_heads=3)
    err = expect_error(Status.BAD_PARAM, "heads", flashattn.forward, q, k, v, out=out, lse=lse)
    assert err.function == "flashAttnForwardGetWorkspaceSize"
    assert untouched(out, lse)


def test_index_arrays_must_be_int32():
    q, k, v, out, lse = problem()
    expect_error(Status.BAD_PARAM, "kv_lengths has dtype int64", flashattn.forward, q, k, v, out=out,
                 kv_lengths=np.array([5], np.int64))
    assert untouched(out, lse)


class FakeCudaArray:
    """Claims to live on a GPU: the binding must refuse mixing it with host arrays before touching its memory."""

    def __init__(self, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (0x1000, False), "version": 3,
                                         "strides": None}


def test_mismatched_devices_are_refused_before_the_call():
    q, k, v, out, lse = problem()
    err = expect_error(Status.BAD_PARAM, "k is on cuda", flashattn.forward, q, FakeCudaArray(k.shape), v, out=out)
    assert "q is on cpu" in err.message
    assert untouched(out, lse)


def test_unknown_objects_are_refused():
    q, k, v, out, lse = problem()
    expect_error(Status.BAD_PARAM, "v is a list", flashattn.forward, q, k, v.tolist(), out=out)
    assert untouched(out, lse)


def test_error_strings():
    assert flashattn.error_string(Status.INSUFFICIENT_WORKSPACE) == "FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE"
    e = flashattn.Error(42, "from the future")
    assert e.status == 42 and "status 42" in str(e)
