# SPDX-License-Identifier: BSD-3-Clause
"""PyTorch integration: a differentiable `attention` over libflashattn.

`attention` is a torch.autograd.Function whose forward and backward call two custom operators,
torch.ops.flashattn.forward and torch.ops.flashattn.backward (torch.library.custom_op, torch >= 2.4), each with a
fake implementation that gives the output shapes and strides without running anything: torch.compile keeps them as
opaque calls. The operators allocate only through torch (outputs, workspace), run on the current stream and never
synchronise, so they can be captured in CUDA graphs.

Shapes follow scaled_dot_product_attention: q [batch, heads, seqQ, dim], k and v [batch, kvHeads, seqK, dim]
(fewer KV heads is grouped-query attention); ragged batches are [tokens, heads, dim] with cu_seqlens_q/k.
"""

from typing import Optional, Tuple

import torch

from . import _ops, _tensors
from ._objects import refuse

__all__ = ["attention"]


def _output_strides(shape, like):
    # The real operator and its fake implementation must agree on the output layout: both take it from here.
    return _tensors.allocation_strides(tuple(shape), tuple(like.stride()))


def _forward_impl(q, k, v, scale, mask, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic):
    o_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    o = torch.empty_strided(o_shape, _output_strides(o_shape, q), dtype=q.dtype, device=q.device)
    lse = torch.empty(tuple(q.shape[:-1]), dtype=torch.float32, device=q.device)
    _ops.forward(q, k, v, out=o, lse=lse, scale=scale, mask=mask, window=(window_left, window_right),
                 softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q or None, max_seqlen_k=max_seqlen_k or None)
    return o, lse


def _forward_fake(q, k, v, scale, mask, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
                  cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic):
    o_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    o = q.new_empty_strided(o_shape, _output_strides(o_shape, q))
    lse = q.new_empty(tuple(q.shape[:-1]), dtype=torch.float32)
    return o, lse


def _backward_impl(do, q, k, v, o, lse, scale, mask, window_left, window_right, softcap, alibi_slopes,
                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic):
    grads = [torch.empty_strided(tuple(t.shape), _output_strides(t.shape, t), dtype=q.dtype, device=q.device)
             for t in (q, k, v)]
    _ops.backward(do, q, k, v, o, lse, dq=grads[0], dk=grads[1], dv=grads[2], scale=scale, mask=mask,
                  window=(window_left, window_right), softcap=softcap, alibi_slopes=alibi_slopes,
                  deterministic=deterministic, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                  max_seqlen_q=max_seqlen_q or None, max_seqlen_k=max_seqlen_k or None)
    return tuple(grads)


def _backward_fake(do, q, k, v, o, lse, scale, mask, window_left, window_right, softcap, alibi_slopes,
                   cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic):
    return tuple(t.new_empty_strided(tuple(t.shape), _output_strides(t.shape, t)) for t in (q, k, v))


HAS_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")

if HAS_CUSTOM_OP:
    # Annotations spell out the operator schema; the bodies only forward to the implementations above.
    @torch.library.custom_op("flashattn::forward", mutates_args=())
    def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float], mask: int,
                    window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                    cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int,
                    max_seqlen_k: int, deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        return _forward_impl(q, k, v, scale, mask, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
                             cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic)

    _forward_op.register_fake(_forward_fake)

    @torch.library.custom_op("flashattn::backward", mutates_args=())
    def _backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                     lse: torch.Tensor, scale: Optional[float], mask: int, window_left: int, window_right: int,
                     softcap: float, alibi_slopes: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                     cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int,
                     deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _backward_impl(do, q, k, v, o, lse, scale, mask, window_left, window_right, softcap, alibi_slopes,
                              cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic)

    _backward_op.register_fake(_backward_fake)
    _forward, _backward = torch.ops.flashattn.forward, torch.ops.flashattn.backward
else:  # torch < 2.4: the same arithmetic, without torch.compile support
    _forward, _backward = _forward_impl, _backward_impl


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, scale, mask, window_left, window_right,
                softcap, max_seqlen_q, max_seqlen_k, deterministic):
        o, lse = _forward(q, k, v, scale, mask, window_left, window_right, softcap, alibi_slopes, cu_seqlens_q,
                          cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic)
        ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k)
        ctx.args = (scale, mask, window_left, window_right, softcap)
        ctx.lengths = (max_seqlen_q, max_seqlen_k, deterministic)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        if do.stride(-1) != 1:
            # Autograd hands over expanded gradients (stride 0 everywhere for a sum); the library reads dO rows.
            do = do.contiguous()
        dq, dk, dv = _backward(do, q, k, v, o, lse, *ctx.args, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                               *ctx.lengths)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


def _max_length(cu, given, name):
    if given is not None:
        return int(given)
    if cu.device.type != "cpu":
        refuse("%s is needed with CUDA cu_seqlens: reading it from the device would synchronise" % name)
    return max(int((cu[1:] - cu[:-1]).max()), 1)


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, alibi_slopes=None, cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, deterministic=False, return_lse=False):
    """softmax(mask(softcap(scale q k^T) + alibi)) v, differentiable in q, k and v.

    causal: False, True or "bottom_right" (FlashAttention's alignment), or "top_left" (scaled_dot_product_attention's
    is_causal). window=(left, right), None or -1 unbounded. alibi_slopes: float32 [heads] or [batch, heads] on q's
    device. Ragged batches: [tokens, heads, dim] tensors with int32 cu_seqlens_q/k on q's device and the
    max_seqlen_q/k bounds. deterministic=True makes the backward bitwise reproducible. With return_lse=True returns
    (o, lse), lse float32 [batch, heads, seqQ] (not differentiable).
    """
    mask = int(_ops._mask_of(causal, None))
    left, right = (-1, -1) if window is None else window
    left, right = -1 if left is None else int(left), -1 if right is None else int(right)
    ragged = cu_seqlens_q is not None or cu_seqlens_k is not None
    if ragged and (cu_seqlens_q is None or cu_seqlens_k is None):
        refuse("a ragged batch needs both cu_seqlens_q and cu_seqlens_k")
    max_q = _max_length(cu_seqlens_q, max_seqlen_q, "max_seqlen_q") if ragged else 0
    max_k = _max_length(cu_seqlens_k, max_seqlen_k, "max_seqlen_k") if ragged else 0
    o, lse = _Attention.apply(q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                              None if scale is None else float(scale), mask, left, right, float(softcap or 0.0),
                              max_q, max_k, bool(deterministic))
    return (o, lse) if return_lse else o
