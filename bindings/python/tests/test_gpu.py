# SPDX-License-Identifier: BSD-3-Clause
"""GPU tests (marker `gpu`; skipped without torch, a CUDA GPU or a library built with the CUDA backend).

flashattn.torch.attention through autograd against scaled_dot_product_attention: the reference is float64 SDPA on
the upcast inputs, and the project's relative gate compares with SDPA in the input precision (out_lp):
max|out - ref| <= 2 max|out_lp - ref| + 1e-5 (3x for gradients), normwise <= 5e-3 (bf16) / 6e-4 (fp16).
"""

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402

pytestmark = pytest.mark.gpu


def _cuda_backend_usable():
    if not torch.cuda.is_available():
        return False
    try:
        flashattn.Handle(flashattn.Backend.CUDA).close()
        return True
    except flashattn.Error:
        return False


if not _cuda_backend_usable():
    pytest.skip("needs a CUDA GPU, torch with CUDA and a libflashattn with the CUDA backend", allow_module_level=True)

import flashattn.torch as fat  # noqa: E402

NORM = {torch.bfloat16: 5e-3, torch.float16: 6e-4, torch.float32: 1e-5}


def gate(name, out, ref, lp, factor, dtype, gradient=False):
    out, ref, lp = out.double(), ref.double(), lp.double()
    assert torch.isfinite(out).all(), "%s has non-finite values" % name
    err = (out - ref).abs().max().item()
    bound = factor * (lp - ref).abs().max().item() + 1e-5
    assert err <= bound, "%s: max error %.3g > %.3g" % (name, err, bound)
    normwise = ((out - ref).norm() / ref.norm()).item()
    norm_bound = NORM[dtype]
    if gradient:  # docs/testing.md: no tighter than storage-precision arithmetic achieves
        norm_bound = max(norm_bound, ((lp - ref).norm() / ref.norm()).item())
    assert normwise <= norm_bound, "%s: normwise error %.3g > %.3g" % (name, normwise, norm_bound)


def sdpa(q, k, v, is_causal):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,causal,bshd", [
    ((2, 8, 2, 256, 256, 128), True, False),          # causal, GQA 8/2, seqQ == seqK (both alignments agree)
    ((2, 8, 2, 128, 320, 64), "top_left", True),      # SDPA's is_causal for seqQ != seqK, BSHD storage
    ((1, 4, 4, 200, 200, 128), False, False),         # no mask, MHA, a length no tile divides
])
def test_autograd_against_sdpa(dtype, shape, causal, bshd):
    torch.manual_seed(0)
    b, h, kvh, sq, sk, d = shape
    if bshd:  # stored [batch, seq, heads, dim], passed as the transposed view
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
        k = torch.randn(b, sk, kvh, d, device="cuda", dtype=dtype).transpose(1, 2)
        v = torch.randn(b, sk, kvh, d, device="cuda", dtype=dtype).transpose(1, 2)
    else:
        q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
        k = torch.randn(b, kvh, sk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, kvh, sk, d, device="cuda", dtype=dtype)
    do = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
    is_causal = causal is not False

    mq, mk, mv = leaves(q, k, v)
    out = fat.attention(mq, mk, mv, causal=causal)
    out.backward(do)
    rq, rk, rv = leaves(q.double(), k.double(), v.double())
    ref = sdpa(rq, rk, rv, is_causal)
    ref.backward(do.double())
    lq, lk, lv = leaves(q, k, v)
    lp = sdpa(lq, lk, lv, is_causal)
    lp.backward(do)

    gate("o", out, ref, lp, 2, dtype)
    gate("dq", mq.grad, rq.grad, lq.grad, 3, dtype, gradient=True)
    gate("dk", mk.grad, rk.grad, lk.grad, 3, dtype, gradient=True)
    gate("dv", mv.grad, rv.grad, lv.grad, 3, dtype, gradient=True)
    assert mk.grad.shape == k.shape


def test_lse_and_ragged_batches():
    torch.manual_seed(1)
    lengths = [37, 0, 91]
    cu = torch.tensor([0, 37, 37, 128], dtype=torch.int32, device="cuda")
    q = torch.randn(128, 4, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(128, 2, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(128, 2, 64, device="cuda", dtype=torch.float16)
    o, lse = fat.attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=91, max_seqlen_k=91,
                           return_lse=True)
    assert lse.shape == (128, 4) and lse.dtype == torch.float32
    start = 0
    for n in lengths:
        if n:
            seg = slice(start, start + n)
            ref = sdpa(q[seg].transpose(0, 1)[None].double(), k[seg].transpose(0, 1)[None].double(),
                       v[seg].transpose(0, 1)[None].double(), True)[0].transpose(0, 1)
            assert (o[seg].double() - ref).abs().max().item() < 2e-3
        start += n


def test_cupy_arrays_through_forward():
    cupy = pytest.importorskip("cupy")
    rs = cupy.random.RandomState(2)
    q = rs.standard_normal((2, 8, 192, 128), dtype=cupy.float32).astype(cupy.float16)
    k = rs.standard_normal((2, 2, 192, 128), dtype=cupy.float32).astype(cupy.float16)
    v = rs.standard_normal((2, 2, 192, 128), dtype=cupy.float32).astype(cupy.float16)
    o, lse = flashattn.forward(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, cupy.ndarray) and o.dtype == cupy.float16 and isinstance(lse, cupy.ndarray)
    tq, tk, tv = (torch.from_dlpack(x) for x in (q, k, v))
    ref = sdpa(tq.double(), tk.double(), tv.double(), True)
    lp = sdpa(tq, tk, tv, True)
    gate("o (cupy)", torch.from_dlpack(o), ref, lp, 2, torch.float16)


class DLPackOnly:
    """A tensor reachable only through DLPack, as a JAX array is."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_dlpack_tensors_give_the_same_bits():
    torch.manual_seed(3)
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.bfloat16)
    expected = flashattn.forward(q, k, v)
    out = torch.full_like(q, float("nan"))
    flashattn.forward(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), out=out)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_the_callers_stream_is_used():
    torch.manual_seed(4)
    q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = fat.attention(q, q, q)
    handle = flashattn._ops._local.handles[("cuda", q.device.index)]
    assert handle.stream == side.cuda_stream
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    o2 = flashattn.forward(q, q, q, stream=other)
    assert handle.stream == other.cuda_stream
    torch.cuda.synchronize()
    assert torch.equal(o, o2)


def test_wrong_device_and_dtype_are_refused_before_the_call():
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.float16)
    out = torch.full_like(q, 3.0)
    with pytest.raises(flashattn.Error) as info:
        flashattn.forward(q, q.cpu(), q, out=out)
    assert info.value.status == flashattn.Status.BAD_PARAM and "k is on cpu but q is on cuda:0" in info.value.message
    with pytest.raises(flashattn.Error) as info:
        flashattn.forward(q, q, q.double(), out=out)
    assert "v has dtype float64" in info.value.message
    with pytest.raises(flashattn.Error) as info:
        fat.attention(q, q[..., ::2], q[..., ::2])
    assert "k must be contiguous in its last (head) dimension" in info.value.message
    assert bool((out == 3.0).all())


def test_custom_ops_pass_opcheck():
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    args = (q, k, k, None, 2, -1, -1, 0.0, None, None, None, 0, 0, False)
    torch.library.opcheck(torch.ops.flashattn.forward.default, args)
    o, lse = torch.ops.flashattn.forward(*args)
    torch.library.opcheck(torch.ops.flashattn.backward.default,
                          (torch.randn_like(o), q, k, k, o, lse, None, 2, -1, -1, 0.0, None, None, None, 0, 0, False))


def test_torch_compile_keeps_the_op_opaque():
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 8 if i == 0 else 2, 128, 64, device="cuda", dtype=torch.bfloat16) for i in range(3))

    def loss(q, k, v):
        return (fat.attention(q, k, v, causal=True).float() ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True)
    eq, ek, ev = leaves(q, k, v)
    cq, ck, cv = leaves(q, k, v)
    eager = loss(eq, ek, ev)
    eager.backward()
    got = compiled(cq, ck, cv)
    got.backward()
    assert torch.allclose(got, eager, rtol=1e-5)
    for a, b in ((cq.grad, eq.grad), (ck.grad, ek.grad), (cv.grad, ev.grad)):
        assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_cuda_graph_capture_of_forward_and_backward():
    torch.manual_seed(6)
    q, k, v = leaves(*(torch.randn(2, 8 if i == 0 else 4, 256, 128, device="cuda", dtype=torch.float16)
                       for i in range(3)))

    def fn(q, k, v):
        return fat.attention(q, k, v, causal=True)

    graphed = torch.cuda.make_graphed_callables(fn, (q, k, v))
    fresh = leaves(*(torch.randn_like(t) for t in (q, k, v)))
    out = graphed(*fresh)
    do = torch.randn_like(out)
    out.backward(do)
    eager = leaves(*(t.detach() for t in fresh))
    ref = fn(*eager)
    ref.backward(do)
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    for a, b in zip(fresh, eager):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-3)


def test_decode_against_forward_on_a_paged_cache():
    torch.manual_seed(7)
    b, h, kvh, d, page = 3, 8, 2, 128, 16
    lengths = torch.tensor([100, 1, 64], dtype=torch.int32, device="cuda")
    pages_per_seq = 7
    table = torch.randperm(b * pages_per_seq, device="cuda").to(torch.int32).view(b, pages_per_seq)
    k_pages = torch.randn(b * pages_per_seq, page, kvh, d, device="cuda", dtype=torch.bfloat16)
    v_pages = torch.randn_like(k_pages)
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    o = flashattn.decode(q, k_pages, v_pages, kv_lengths=lengths, block_table=table, causal=True)
    for i, n in enumerate(lengths.tolist()):
        rows = torch.cat([k_pages[p] for p in table[i].tolist()])[:n]  # [n, kvh, d]
        vrows = torch.cat([v_pages[p] for p in table[i].tolist()])[:n]
        ref = sdpa(q[i:i + 1].double(), rows.transpose(0, 1)[None].double(), vrows.transpose(0, 1)[None].double(),
                   False)
        assert (o[i:i + 1].double() - ref).abs().max().item() < 2e-2
