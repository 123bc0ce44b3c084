# Run with `julia --project=bindings/julia -e 'using Pkg; Pkg.test()'` where Julia and libflashattn are installed.
# CI has no Julia: there, check_ccalls.py checks the package statically instead.
using FlashAttn, Test

const HOST = FlashAttn.FLASHATTN_BACKEND_HOST
const CANARY = 7.25f0

# Q/O [1, 4, 3, 8] and K/V [1, kv_heads, 5, 8] as column-major arrays.
function problem(kv_heads)
    q = reshape(Float32[sin(0.37 * i) for i in 0:95], 8, 3, 4, 1)
    k = reshape(Float32[cos(0.11 * i) for i in 0:(40 * kv_heads - 1)], 8, 5, kv_heads, 1)
    v = reshape(Float32[sin(0.23 * i) for i in 0:(40 * kv_heads - 1)], 8, 5, kv_heads, 1)
    return q, k, v
end

# Q, O, dO (8, 5, 4, 2) and K, V (8, 3, 2, 2): with the bottom-right causal mask and more queries than keys, rows 1
# and 2 of every head see no key, so the sink is all their softmax.
function sink_problem()
    q = reshape(Float32[sin(0.37 * i) for i in 0:319], 8, 5, 4, 2)
    k = reshape(Float32[cos(0.11 * i + 0.5) for i in 0:95], 8, 3, 2, 2)
    v = reshape(Float32[sin(0.23 * i) for i in 0:95], 8, 3, 2, 2)
    dO = reshape(Float32[cos(0.19 * i + 1) for i in 0:319], 8, 5, 4, 2)
    # Near the logits (|q.k| / sqrt(8) < 1.5), one far above them, one far below.
    return q, k, v, dO, Float32[0.4, -6, 1.1, 5]
end

# O and LSE in Float64: row i sees keys j <= i + sk - sq, and exp(sink) joins its denominator.
function sinks_reference(q, k, v, sinks)
    d, sq, h, b = size(q)
    sk, hk = size(k, 2), size(k, 3)
    o = zeros(Float64, d, sq, h, b)
    lse = zeros(Float64, sq, h, b)
    for bi in 1:b, hq in 1:h, i in 1:sq
        kh = (hq - 1) ÷ (h ÷ hk) + 1
        visible = clamp(i + sk - sq, 0, sk)
        logits = Float64[sum(Float64(q[x, i, hq, bi]) * Float64(k[x, j, kh, bi]) for x in 1:d) / sqrt(d)
                         for j in 1:visible]
        s = Float64(sinks[hq])
        top = max(s, maximum(logits; init=-Inf))
        lse[i, hq, bi] = top + log(exp(s - top) + sum(exp.(logits .- top)))
        for j in 1:visible, x in 1:d
            o[x, i, hq, bi] += exp(logits[j] - lse[i, hq, bi]) * Float64(v[x, j, kh, bi])
        end
    end
    return o, lse
end

refusal(f) = try
    f(); nothing
catch e
    e
end

@testset "FlashAttn" begin
    h = Handle(backend=HOST)
    @test backend(h) == HOST

    @testset "a valid forward writes its outputs" begin
        q, k, v = problem(2)
        o = fill(CANARY, 8, 3, 4, 1)
        forward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o))
        @test all(x -> x != CANARY && isfinite(x), o)
    end

    @testset "the library's status and message come back, nothing is written" begin
        q, k, v = problem(3)  # 4 query heads over 3 KV heads
        o = fill(CANARY, 8, 3, 4, 1)
        err = try
            forward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o)); nothing
        catch e
            e
        end
        @test err isa FlashAttnError
        @test err.status == FlashAttn.FLASHATTN_STATUS_BAD_PARAM && err.from_library && !isempty(err.message)
        @test all(==(CANARY), o)
    end

    @testset "a short array is refused by name before the call" begin
        q, k, v = problem(2)
        o = fill(CANARY, 8, 3, 4, 1)
        qdesc = TensorDescriptor(q)
        short = HostTensor(qdesc, vec(q)[1:95])
        err = try
            forward!(h, short, HostTensor(k), HostTensor(v), HostTensor(o)); nothing
        catch e
            e
        end
        @test err isa FlashAttnError && !err.from_library && startswith(err.message, "q: ")
        @test all(==(CANARY), o)
    end

    @testset "descriptors read back what was set" begin
        d = TensorDescriptor(FlashAttn.FLASHATTN_DATA_BF16, [2, 3, 4, 8], [96, 8, 24, 1])
        @test FlashAttn.query(d) == (FlashAttn.FLASHATTN_DATA_BF16, [2, 3, 4, 8], [96, 8, 24, 1])
        a = AttentionDescriptor(scale=0.5, window=(4, 0), deterministic=true)
        @test FlashAttn.scale(a) == 0.5f0 && FlashAttn.window(a) == (4, 0) && FlashAttn.deterministic(a)
        @test_throws FlashAttnError FlashAttn.set_scale!(a, -1)
        s = SeqDescriptor()
        FlashAttn.set_paged!(s, Int32[0 1 2; 3 4 5])
        @test FlashAttn.paged(s) == (2, 3)
        close(d); close(a); close(s)
    end

    @testset "attention sinks: forward, decode and dSinks against Float64" begin
        q, k, v, dO, sinks = sink_problem()
        causal = FlashAttn.FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT
        a = AttentionDescriptor(mask=causal, deterministic=true, sinks=sinks)
        @test FlashAttn.sinks(a) != C_NULL && FlashAttn.sinks(a) != pointer(sinks)  # the descriptor's own copy
        ref_o, ref_lse = sinks_reference(q, k, v, sinks)
        o, lse = fill(NaN32, size(q)), fill(NaN32, 5, 4, 2)
        forward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o); attn=a, lse=HostTensor(lse))
        @test maximum(abs.(o .- ref_o)) <= 1e-5 && maximum(abs.(lse .- ref_lse)) <= 1e-5
        @test all(lse[1:2, :, :] .== reshape(sinks, 1, 4, 1)) && all(o[:, 1:2, :, :] .== 0)
        # The sinks are not a no-op here: without them the result is far from the reference.
        plain = fill(NaN32, size(q))
        forward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(plain);
                 attn=AttentionDescriptor(mask=causal))
        @test maximum(abs.(plain .- ref_o)) > 1e-2
        # The decode adds each sink once, after its chunks are folded.
        for chunks in 1:3
            od, lsed = fill(NaN32, size(q)), fill(NaN32, 5, 4, 2)
            decode_chunk!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(od); attn=a,
                          lse=HostTensor(lsed), num_chunks=chunks)
            @test maximum(abs.(od .- ref_o)) <= 1e-5 && maximum(abs.(lsed .- ref_lse)) <= 1e-5
        end

        # dSinks[h] = -sum over the batch and the rows of head h of exp(s_h - LSE) (dO . O), from the O and LSE
        # the backward is given; overwritten by each backward, never accumulated into.
        want = [-sum(exp(Float64(sinks[hq]) - Float64(lse[i, hq, bi])) *
                     sum(Float64(dO[x, i, hq, bi]) * Float64(o[x, i, hq, bi]) for x in 1:8) for i in 1:5, bi in 1:2)
                for hq in 1:4]
        @test all(abs.(want) .> 1e-3)
        dsinks = fill(NaN32, 4)
        FlashAttn.set_sinks_gradient!(a, dsinks)
        @test FlashAttn.sinks_gradient(a) == pointer(dsinks)
        grads() = (fill(NaN32, size(q)), fill(NaN32, size(k)), fill(NaN32, size(v)))
        dq, dk, dv = grads()
        backward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o), HostTensor(dO), HostTensor(lse),
                  HostTensor(dq), HostTensor(dk), HostTensor(dv); attn=a)
        @test maximum(abs.(dsinks .- want)) <= 1e-5
        @test all(isfinite, dq) && all(isfinite, dk) && all(isfinite, dv)
        written = copy(dsinks)
        dsinks .= 1f3
        backward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o), HostTensor(dO), HostTensor(lse),
                  HostTensor.(grads())...; attn=a)
        @test dsinks == written
        FlashAttn.clear_sinks_gradient!(a)
        @test FlashAttn.sinks_gradient(a) == C_NULL
        close(a)
    end

    @testset "sinks a HOST operation cannot use are refused before the call" begin
        q, k, v, dO, sinks = sink_problem()
        @test refusal(() -> AttentionDescriptor(sinks=Float32[])) isa FlashAttnError
        o = fill(CANARY, size(q))
        few = AttentionDescriptor(sinks=sinks[1:3])
        err = refusal(() -> forward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o); attn=few))
        @test err isa FlashAttnError && !err.from_library && startswith(err.message, "sinks: ")
        other = AttentionDescriptor(sinks=sinks)  # its C copy stands in for device memory: valid if ever read
        dev = AttentionDescriptor()
        FlashAttn.set_sinks_device!(dev, FlashAttn.sinks(other))
        err = refusal(() -> decode_chunk!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o); attn=dev))
        @test err isa FlashAttnError && !err.from_library && startswith(err.message, "attn: ")
        @test all(==(CANARY), o)

        lse = zeros(Float32, 5, 4, 2)
        dq, dk, dv = fill(CANARY, size(q)), fill(CANARY, size(k)), fill(CANARY, size(v))
        attempt(a) = refusal(() -> backward!(h, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(q),
                                              HostTensor(dO), HostTensor(lse), HostTensor(dq), HostTensor(dk),
                                              HostTensor(dv); attn=a))
        short = fill(CANARY, 3)
        err = attempt(AttentionDescriptor(sinks=sinks, sinks_gradient=short))
        @test err isa FlashAttnError && !err.from_library && startswith(err.message, "dsinks: ")
        err = attempt(AttentionDescriptor(sinks_gradient=fill(CANARY, 4)))  # dSinks without sinks
        @test err isa FlashAttnError && err.from_library && err.status == FlashAttn.FLASHATTN_STATUS_BAD_PARAM
        @test all(==(CANARY), short) && all(==(CANARY), dq) && all(==(CANARY), dk) && all(==(CANARY), dv)
    end

    @testset "the example runs" begin
        @test success(`$(Base.julia_cmd()) --project=$(dirname(@__DIR__)) $(joinpath(dirname(@__DIR__), "examples", "forward.jl"))`)
    end
    close(h)
end
