# SPDX-License-Identifier: BSD-3-Clause
"""flashattn.torch with CPU tensors (HOST backend): the custom operators, their fake implementations, autograd and
torch.compile, where torch is installed (skipped otherwise; the GPU versions are in test_gpu.py)."""

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import flashattn.torch as fat  # noqa: E402


def reference(q, k, v, causal_top_left=False):
    """float64 attention with grouped-query heads, differentiable."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal_top_left:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def test_autograd_on_the_host_backend():
    torch.manual_seed(0)
    q = torch.randn(2, 4, 9, 16)
    k = torch.randn(2, 2, 12, 16)
    v = torch.randn(2, 2, 12, 16)
    do = torch.randn(2, 4, 9, 16)
    mq, mk, mv = leaves(q, k, v)
    o, lse = fat.attention(mq, mk, mv, causal="top_left", return_lse=True)
    o.backward(do)
    rq, rk, rv = leaves(q.double(), k.double(), v.double())
    ref = reference(rq, rk, rv, causal_top_left=True)
    ref.backward(do.double())
    assert lse.dtype == torch.float32 and not lse.requires_grad
    assert (o.double() - ref).abs().max() < 1e-5
    for got, want in ((mq.grad, rq.grad), (mk.grad, rk.grad), (mv.grad, rv.grad)):
        assert got.shape == want.shape and (got.double() - want).abs().max() < 1e-4


def test_sum_backward_hands_over_an_expanded_gradient():
    q = torch.randn(1, 2, 5, 16, requires_grad=True)
    fat.attention(q, q, q).sum().backward()  # dO is expand()ed ones: stride 0 in every dim
    assert torch.isfinite(q.grad).all()


def test_custom_ops_pass_opcheck():
    q = torch.randn(1, 4, 6, 16)
    k = torch.randn(1, 2, 6, 16)
    args = (q, k, k, None, 2, -1, -1, 0.0, None, None, None, 0, 0, False)
    torch.library.opcheck(torch.ops.flashattn.forward.default, args)
    o, lse = torch.ops.flashattn.forward(*args)
    torch.library.opcheck(torch.ops.flashattn.backward.default,
                          (torch.randn_like(o), q, k, k, o, lse, None, 2, -1, -1, 0.0, None, None, None, 0, 0, False))


def test_fake_outputs_have_the_real_strides():
    q = torch.randn(1, 6, 2, 16).transpose(1, 2)  # BSHD storage
    o, lse = torch.ops.flashattn.forward(q, q, q, None, 0, -1, -1, 0.0, None, None, None, 0, 0, False)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        fo, flse = torch.ops.flashattn.forward(fq, fq, fq, None, 0, -1, -1, 0.0, None, None, None, 0, 0, False)
    assert fo.stride() == o.stride() == q.stride() and flse.stride() == lse.stride()


def test_torch_compile_traces_the_op_as_one_call():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)

    def loss(q, k, v):
        return (fat.attention(q, k, v, causal=True) ** 2).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    eq, ek, ev = leaves(q, k, v)
    cq, ck, cv = leaves(q, k, v)
    loss(eq, ek, ev).backward()
    got = compiled(cq, ck, cv)
    got.backward()
    assert torch.allclose(got, loss(q, k, v))
    for a, b in ((cq.grad, eq.grad), (ck.grad, ek.grad), (cv.grad, ev.grad)):
        assert torch.equal(a, b)


def test_ragged_batch_with_host_cu_seqlens():
    torch.manual_seed(2)
    q = torch.randn(10, 2, 16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    o = fat.attention(q, q, q, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
    first = reference(q[:4].transpose(0, 1)[None].double(), q[:4].transpose(0, 1)[None].double(),
                      q[:4].transpose(0, 1)[None].double(), causal_top_left=True)[0].transpose(0, 1)
    assert (o[:4].double() - first).abs().max() < 1e-5


class DLPackOnly:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__()

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_dlpack_and_torch_cpu_tensors_give_the_same_bits():
    q = torch.randn(1, 2, 7, 16)
    expected = flashattn.forward(q, q, q)
    assert isinstance(expected, torch.Tensor)
    out = torch.full_like(q, float("nan"))
    flashattn.forward(DLPackOnly(q), DLPackOnly(q), DLPackOnly(q), out=out)
    assert torch.equal(out, expected)


def test_bfloat16_tensors_on_the_host():
    q = torch.randn(1, 2, 7, 16).to(torch.bfloat16)
    o = flashattn.forward(q, q, q)
    assert o.dtype == torch.bfloat16
    ref = reference(q.double(), q.double(), q.double())
    assert (o.double() - ref).abs().max() < 2e-2
