# SPDX-License-Identifier: BSD-3-Clause
"""forward, backward, decode and merge_states on tensors of any framework.

Tensor shapes are the descriptors' dims, in the header's semantic order (Q [batch, heads, seqQ, headDim], K/V
[batch, kvHeads, seqK, headDim], ragged [tokens, heads, headDim], paged caches [pages, pageSize, kvHeads,
headDim]); the strides are read from the tensors, so a framework's [batch, seq, heads, dim] tensor is passed as
its transpose(1, 2) view, with no copy.

Every argument the library cannot take in this process (a tensor on another device, a dtype or layout it does not
read, a read-only output) is refused before the C call with a flashattn.Error naming it, and errors of the library
come back as flashattn.Error with its status and message. Neither writes anything to the outputs.
"""

import contextlib
import ctypes
import sys
import threading

from . import _tensors
from ._capi import Backend, Mask, _F32P
from ._objects import AttentionDescriptor, Handle, SeqDescriptor, TensorDescriptor, call, refuse

_local = threading.local()

_MASKS = {False: Mask.NONE, None: Mask.NONE, True: Mask.CAUSAL_BOTTOM_RIGHT, "none": Mask.NONE,
          "top_left": Mask.CAUSAL_TOP_LEFT, "bottom_right": Mask.CAUSAL_BOTTOM_RIGHT,
          "causal_top_left": Mask.CAUSAL_TOP_LEFT, "causal_bottom_right": Mask.CAUSAL_BOTTOM_RIGHT}


def _f32(ptr):
    return ctypes.cast(ptr or 0, _F32P)


def _stream_value(stream):
    """An explicit stream= argument as the cudaStream_t integer."""
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream, cuda-python
        value = getattr(stream, attribute, None)
        if value is not None:
            return int(value)
    refuse("stream= is a %s; pass a cudaStream_t as an int, a torch.cuda.Stream or a cupy Stream"
           % type(stream).__name__)


def _default_stream(like):
    """The stream the caller's framework is working on: torch's and CuPy's current stream, else the producer's
    (__cuda_array_interface__ v3), else the legacy default stream."""
    if like.kind == "torch":
        import torch

        return torch.cuda.current_stream(like.device[1]).cuda_stream
    if like.kind == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    if like.kind == "cai":
        stream = like.owner.__cuda_array_interface__.get("stream")
        return 0 if stream in (None, 1) else int(stream)
    return 0


class _Call:
    """One operation: its tensors (checked), descriptors (closed when it ends), device and stream."""

    def __init__(self, stream, handle):
        self.infos = []
        self.stack = contextlib.ExitStack()
        self.explicit_stream = None if stream is None else _stream_value(stream)
        self.user_handle = handle
        self.like = None  # the first tensor: device, framework and default stream come from it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stack.close()

    # --- tensors -------------------------------------------------------------------------------------------------
    def _read(self, name, obj):
        info = _tensors.read(name, obj, self.explicit_stream)
        if any(s < 0 for s in info.strides):
            refuse("%s has a negative stride %s; flashattn takes non-negative strides" % (name, info.strides))
        if info.shape and info.shape[-1] == 1 and info.strides[-1] != 1:
            # A last dim of one element is read at offset 0 whatever its stride: say 1, as descriptors require.
            info.strides = info.strides[:-1] + (1,)
        self._check_device(info)
        self.infos.append(info)
        return info

    def _check_device(self, info):
        if self.like is None:
            self.like = info
            return
        a, b = self.like.device, info.device
        if a[0] != b[0] or (a[1] is not None and b[1] is not None and a[1] != b[1]):
            refuse("%s is on %s but %s is on %s: every tensor of a call must be on one device"
                   % (info.name, _tensors.device_name(b), self.like.name, _tensors.device_name(a)))

    def tensor(self, name, obj, dtype_of=None):
        """An input attention tensor: float16/bfloat16/float32 (the same as `dtype_of` when given), head dim
        contiguous."""
        info = self._read(name, obj)
        info.data_type()
        if dtype_of is not None and info.dtype != dtype_of.dtype:
            refuse("%s has dtype %s but %s has %s: they must match" % (name, info.dtype, dtype_of.name,
                                                                     dtype_of.dtype))
        if info.strides and info.strides[-1] != 1:
            refuse("%s must be contiguous in its last (head) dimension: its strides are %s (elements)"
                   % (name, info.strides))
        return info

    def float32(self, name, obj):
        info = self._read(name, obj)
        if info.dtype != "float32":
            refuse("%s has dtype %s; it must be float32" % (name, info.dtype))
        if info.strides and info.strides[-1] != 1:
            refuse("%s must be contiguous in its last dimension: its strides are %s (elements)"
                   % (name, info.strides))
        return info

    def output(self, info):
        if info.readonly:
            refuse("%s is read-only" % info.name)
        return info

    def index_array(self, name, obj, rank):
        """An int32 array of the sequence descriptor, contiguous, in the tensors' memory. A list or tuple is
        copied into the framework of the first tensor (for CUDA graphs pass device tensors instead)."""
        if isinstance(obj, (list, tuple)):
            obj = self._convert(name, obj)
        info = self._read(name, obj)
        if info.dtype != "int32":
            refuse("%s has dtype %s; it must be int32" % (name, info.dtype))
        if len(info.shape) != rank:
            refuse("%s has %d dimensions; it must have %d" % (name, len(info.shape), rank))
        if info.strides != _tensors._contiguous_strides(info.shape):
            refuse("%s must be contiguous (strides %s)" % (name, info.strides))
        return info

    def _convert(self, name, values):
        like = self.like
        if like is None or like.kind in ("numpy", "array"):
            import numpy as np

            return np.ascontiguousarray(values, dtype=np.int32)
        if like.kind == "torch":
            import torch

            return torch.tensor(values, dtype=torch.int32, device=like.owner.device)
        if like.kind == "cupy":
            import cupy

            with cupy.cuda.Device(like.device[1]):
                return cupy.asarray(values, dtype=cupy.int32)
        refuse("%s: pass an int32 array on the tensors' device, not a list" % name)

    def allocate(self, name, shape, dtype, like_strides=None):
        strides = _tensors.allocation_strides(shape, like_strides)
        obj = _tensors.empty(self.like, name, shape, dtype, strides)
        info = _tensors.read(name, obj, self.explicit_stream)
        self.infos.append(info)
        return obj, info

    # --- device, stream, handle ----------------------------------------------------------------------------------
    def begin(self):
        """Enters the tensors' device (and, for torch and CuPy, the call's stream) and returns the handle."""
        like = self.like
        self.stream = 0
        if like.on_cuda:
            self.stream = self.explicit_stream if self.explicit_stream is not None else _default_stream(like)
            self._enter_device(like)
        handle = self.user_handle or _cached_handle(like)
        if self.user_handle is not None:
            backend = handle.backend
            if (backend == Backend.CUDA) != like.on_cuda:
                refuse("the handle runs on the %s backend but %s is on %s"
                       % (backend.name, like.name, _tensors.device_name(like.device)))
        if like.on_cuda:
            handle.stream = self.stream
        return handle

    def _enter_device(self, like):
        index = like.device[1]
        if like.kind == "torch":
            import torch

            self.stack.enter_context(torch.cuda.device(index))
            if self.explicit_stream is not None:
                # Allocations (outputs, workspace) then belong to the stream the library runs on.
                self.stack.enter_context(torch.cuda.stream(torch.cuda.ExternalStream(self.explicit_stream)))
        elif like.kind == "cupy" or (index is not None and "cupy" in sys.modules):
            import cupy

            self.stack.enter_context(cupy.cuda.Device(index))
            if self.explicit_stream is not None and like.kind == "cupy":
                self.stack.enter_context(cupy.cuda.ExternalStream(self.explicit_stream))

    def descriptor(self, info):
        if info is None:
            return None
        dtype = _tensors._FLOAT_TYPES[info.dtype]
        desc = self.stack.enter_context(TensorDescriptor(dtype, info.shape, info.strides))
        return desc

    def workspace(self, nbytes, given):
        owner, ptr, size = _tensors.workspace(self.like, nbytes, given, self.explicit_stream)
        self.workspace_owner = owner
        return ptr, size


def _cached_handle(like):
    """One handle per thread and device: a handle serves one thread at a time, and a CUDA handle belongs to the
    device that was current when it was made (the caller is inside that device's context here)."""
    handles = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    key = like.device
    handle = handles.get(key)
    if handle is None:
        handle = handles[key] = Handle(Backend.CUDA if like.on_cuda else Backend.HOST)
    return handle


def _mask_of(causal, mask):
    if mask is not None:
        if causal not in (False, None):
            refuse("pass causal= or mask=, not both")
        if isinstance(mask, str):
            if mask not in _MASKS:
                refuse("mask=%r: use 'none', 'causal_top_left', 'causal_bottom_right' or a flashattn.Mask" % mask)
            return _MASKS[mask]
        return int(mask)  # an unknown number is the library's to refuse, with its message
    if causal not in _MASKS:
        refuse("causal=%r: use False, True (bottom-right), 'top_left' or 'bottom_right'" % (causal,))
    return _MASKS[causal]


def _attention(c, scale, causal, mask, window, softcap, alibi_slopes, deterministic, sinks=None):
    attn = c.stack.enter_context(AttentionDescriptor())
    if scale is not None:
        attn.scale = scale
    attn.mask = _mask_of(causal, mask)
    if window is not None:
        left, right = window
        attn.window = (-1 if left is None else left, -1 if right is None else right)
    if softcap:
        attn.softcap = softcap
    if alibi_slopes is not None:
        slopes = c.float32("alibi_slopes", alibi_slopes)
        if len(slopes.shape) not in (1, 2) or slopes.strides != _tensors._contiguous_strides(slopes.shape):
            refuse("alibi_slopes must be a contiguous [heads] or [batch, heads] array, got shape %s strides %s"
                   % (slopes.shape, slopes.strides))
        attn.set_alibi_slopes(slopes.ptr, len(slopes.shape) == 2, owner=slopes)
    if sinks is not None:
        s = c.float32("sinks", sinks)
        if len(s.shape) != 1 or s.strides != _tensors._contiguous_strides(s.shape):
            refuse("sinks must be a contiguous [heads] array, got shape %s strides %s" % (s.shape, s.strides))
        attn.set_sinks(s.ptr, owner=s)
    if deterministic:
        attn.deterministic = True
    return attn


def _host_max_length(info):
    """max(cu[b+1] - cu[b]) of a host int32 prefix-sum array."""
    n = info.shape[0]
    values = (ctypes.c_int32 * n).from_address(info.ptr)
    return max([values[i + 1] - values[i] for i in range(n - 1)] or [0])


def _sequence(c, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lengths, block_table):
    if cu_seqlens_q is None and cu_seqlens_k is None and kv_lengths is None and block_table is None:
        return None
    seq = c.stack.enter_context(SeqDescriptor())
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            refuse("a ragged batch needs both cu_seqlens_q and cu_seqlens_k")
        cq = c.index_array("cu_seqlens_q", cu_seqlens_q, 1)
        ck = c.index_array("cu_seqlens_k", cu_seqlens_k, 1)
        maxima = []
        for info, given, name in ((cq, max_seqlen_q, "max_seqlen_q"), (ck, max_seqlen_k, "max_seqlen_k")):
            if given is None:
                if info.on_cuda:
                    refuse("%s is needed with CUDA cu_seqlens arrays: reading it from the device would "
                           "synchronise" % name)
                given = max(_host_max_length(info), 1)
            maxima.append(given)
        seq.set_ragged(cq.shape[0] - 1, cq.ptr, ck.ptr, maxima[0], maxima[1], owners=(cq, ck))
    if kv_lengths is not None:
        lengths = c.index_array("kv_lengths", kv_lengths, 1)
        seq.set_kv_lengths(lengths.shape[0], lengths.ptr, owner=lengths)
    if block_table is not None:
        table = c.index_array("block_table", block_table, 2)
        seq.set_paged(table.shape[0], table.ptr, table.shape[1], owner=table)
    return seq


def _outputs(c, qi, vi, out, lse, return_lse):
    """The caller's o and lse outputs, checked before anything is allocated: ((obj, info), (obj, info), want_lse)
    with None infos for those to allocate."""
    oi = c.output(c.tensor("out", out, qi)) if out is not None else None
    li = c.output(c.float32("lse", lse)) if lse is not None else None
    return (out, oi), (lse, li), return_lse or lse is not None


def forward(q, k, v, *, out=None, lse=None, return_lse=False, scale=None, causal=False, mask=None, window=None,
            softcap=None, alibi_slopes=None, deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q=None, max_seqlen_k=None, kv_lengths=None, block_table=None, workspace=None, stream=None,
            handle=None, sinks=None):
    """O = softmax(mask(softcap(scale Q K^T) + alibi)) V (flashAttnForward).

    q [batch, heads, seqQ, headDim] (ragged: [tokens, heads, headDim] with cu_seqlens_q/k), k and v
    [batch, kvHeads, seqK, headDim] (heads % kvHeads == 0 is grouped-query attention). causal=True is the
    bottom-right aligned mask (as FlashAttention's causal), 'top_left' the top-left one; window=(left, right) with
    None or -1 unbounded. Returns o, or (o, lse) with return_lse=True or an lse= output. Outputs not passed are
    allocated like q (same framework, device and memory order); lse is float32 [batch, heads, seqQ].
    sinks: float32 [heads] attention sinks (docs/semantics.md, Attention sinks).
    """
    with _Call(stream, handle) as c:
        qi = c.tensor("q", q)
        ki = c.tensor("k", k, qi)
        vi = c.tensor("v", v, qi)
        (o_obj, oi), (l_obj, li), want_lse = _outputs(c, qi, vi, out, lse, return_lse)
        h = c.begin()
        if oi is None:
            o_obj, oi = c.allocate("out", qi.shape[:-1] + vi.shape[-1:], qi.dtype, qi.strides)
        if want_lse and li is None:
            l_obj, li = c.allocate("lse", qi.shape[:-1], "float32")
        attn = _attention(c, scale, causal, mask, window, softcap, alibi_slopes, deterministic, sinks)
        seq = _sequence(c, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lengths, block_table)
        qd, kd, vd, od, ld = (c.descriptor(i) for i in (qi, ki, vi, oi, li))
        size = ctypes.c_size_t()
        call("flashAttnForwardGetWorkspaceSize", h, attn, seq, qd, kd, vd, od, ld, ctypes.byref(size))
        ws, ws_bytes = c.workspace(size.value, workspace)
        call("flashAttnForward", h, attn, seq, qd, qi.ptr, kd, ki.ptr, vd, vi.ptr, od, oi.ptr, ld,
             _f32(li.ptr if li else 0), ws, ws_bytes)
    return (o_obj, l_obj) if want_lse else o_obj


def backward(do, q, k, v, o, lse, *, dq=None, dk=None, dv=None, scale=None, causal=False, mask=None, window=None,
             softcap=None, alibi_slopes=None, deterministic=False, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None, kv_lengths=None, workspace=None, stream=None, handle=None,
             sinks=None, dsinks=None, return_dsinks=False):
    """dQ, dK, dV of forward() given dO (flashAttnBackward), with the forward's attention and sequence arguments
    and its o and lse. Returns (dq, dk, dv); those not passed are allocated like q, k and v. With the forward's
    sinks, return_dsinks=True or a float32 [heads] dsinks= output also gives the sinks' gradient:
    (dq, dk, dv, dsinks)."""
    with _Call(stream, handle) as c:
        qi = c.tensor("q", q)
        ki, vi, oi = c.tensor("k", k, qi), c.tensor("v", v, qi), c.tensor("o", o, qi)
        doi = c.tensor("do", do, qi)
        li = c.float32("lse", lse)
        given = {}
        for name, obj in (("dq", dq), ("dk", dk), ("dv", dv)):
            if obj is not None:
                given[name] = (obj, c.output(c.tensor(name, obj, qi)))
        want_dsinks = return_dsinks or dsinks is not None
        if want_dsinks and sinks is None:
            refuse("dsinks needs the forward's sinks (sinks=)")
        dsi = c.output(c.float32("dsinks", dsinks)) if dsinks is not None else None
        h = c.begin()
        grads = []
        for name, like in (("dq", qi), ("dk", ki), ("dv", vi)):
            grads.append(given[name] if name in given else c.allocate(name, like.shape, qi.dtype, like.strides))
        attn = _attention(c, scale, causal, mask, window, softcap, alibi_slopes, deterministic, sinks)
        if want_dsinks:
            if dsi is None:
                dsinks, dsi = c.allocate("dsinks", (qi.shape[1],), "float32")
            attn.set_sinks_gradient(dsi.ptr, owner=dsi)
        seq = _sequence(c, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lengths, None)
        qd, kd, vd, od, dod, ld = (c.descriptor(i) for i in (qi, ki, vi, oi, doi, li))
        dqd, dkd, dvd = (c.descriptor(g[1]) for g in grads)
        size = ctypes.c_size_t()
        # The query that sees the gradients' descriptors: exact for any gradient strides.
        call("flashAttnBackwardGetWorkspaceSizeWithGradients", h, attn, seq, qd, kd, vd, od, dod, ld, dqd, dkd, dvd,
             ctypes.byref(size))
        ws, ws_bytes = c.workspace(size.value, workspace)
        call("flashAttnBackward", h, attn, seq, qd, qi.ptr, kd, ki.ptr, vd, vi.ptr, od, oi.ptr, dod, doi.ptr, ld,
             _f32(li.ptr), dqd, grads[0][1].ptr, dkd, grads[1][1].ptr, dvd, grads[2][1].ptr, ws, ws_bytes)
    return tuple(g[0] for g in grads) + ((dsinks,) if want_dsinks else ())


def decode(q, k_cache, v_cache, *, kv_lengths=None, block_table=None, num_chunks=0, out=None, lse=None,
           return_lse=False, scale=None, causal=False, mask=None, window=None, softcap=None, alibi_slopes=None,
           workspace=None, stream=None, handle=None, sinks=None):
    """Split-KV decode (flashAttnDecodeChunk): q [batch, heads, seqQ (1..16), headDim] against a dense cache
    [batch, kvHeads, seqK, headDim] or, with block_table [batch, maxPagesPerSeq], a paged one [pages, pageSize,
    kvHeads, headDim]; kv_lengths [batch] are the used lengths. num_chunks 0 lets the library choose.
    causal=True (bottom-right) is the usual mask for the newest tokens. Returns o, or (o, lse)."""
    with _Call(stream, handle) as c:
        qi = c.tensor("q", q)
        ki, vi = c.tensor("k_cache", k_cache, qi), c.tensor("v_cache", v_cache, qi)
        (o_obj, oi), (l_obj, li), want_lse = _outputs(c, qi, vi, out, lse, return_lse)
        h = c.begin()
        if oi is None:
            o_obj, oi = c.allocate("out", qi.shape[:-1] + vi.shape[-1:], qi.dtype, qi.strides)
        if want_lse and li is None:
            l_obj, li = c.allocate("lse", qi.shape[:-1], "float32")
        attn = _attention(c, scale, causal, mask, window, softcap, alibi_slopes, False, sinks)
        seq = _sequence(c, None, None, None, None, kv_lengths, block_table)
        qd, kd, vd, od, ld = (c.descriptor(i) for i in (qi, ki, vi, oi, li))
        size = ctypes.c_size_t()
        call("flashAttnDecodeChunkGetWorkspaceSize", h, attn, seq, qd, kd, vd, od, ld, int(num_chunks),
             ctypes.byref(size))
        ws, ws_bytes = c.workspace(size.value, workspace)
        call("flashAttnDecodeChunk", h, attn, seq, qd, qi.ptr, kd, ki.ptr, vd, vi.ptr, od, oi.ptr, ld,
             _f32(li.ptr if li else 0), int(num_chunks), ws, ws_bytes)
    return (o_obj, l_obj) if want_lse else o_obj


def merge_states(partial_o, partial_lse, *, out=None, lse=None, return_lse=False, dtype="float32", workspace=None,
                 stream=None, handle=None):
    """Merges partial attention states (flashAttnMergeStates): partial_o float32 [states, batch, heads, seqQ,
    headDimV], partial_lse float32 [states, batch, heads, seqQ]; a partial LSE of -inf is an empty state. Returns
    o [batch, heads, seqQ, headDimV] of `dtype` (or out's), or (o, lse)."""
    with _Call(stream, handle) as c:
        poi = c.float32("partial_o", partial_o)
        pli = c.float32("partial_lse", partial_lse)
        o_obj, oi = out, c.output(c.tensor("out", out)) if out is not None else None
        l_obj, li = lse, c.output(c.float32("lse", lse)) if lse is not None else None
        want_lse = return_lse or lse is not None
        if oi is None and dtype not in _tensors._FLOAT_TYPES:
            refuse("dtype=%r: use 'float16', 'bfloat16' or 'float32'" % (dtype,))
        h = c.begin()
        if oi is None:
            o_obj, oi = c.allocate("out", poi.shape[1:], dtype)
        if want_lse and li is None:
            l_obj, li = c.allocate("lse", pli.shape[1:], "float32")
        pod, pld, od, ld = (c.descriptor(i) for i in (poi, pli, oi, li))
        size = ctypes.c_size_t()
        call("flashAttnMergeStatesGetWorkspaceSize", h, pod, pld, od, ld, ctypes.byref(size))
        ws, ws_bytes = c.workspace(size.value, workspace)
        call("flashAttnMergeStates", h, pod, _f32(poi.ptr), pld, _f32(pli.ptr), od, oi.ptr, ld,
             _f32(li.ptr if li else 0), ws, ws_bytes)
    return (o_obj, l_obj) if want_lse else o_obj
