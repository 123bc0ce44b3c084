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

    @testset "the example runs" begin
        @test success(`$(Base.julia_cmd()) --project=$(dirname(@__DIR__)) $(joinpath(dirname(@__DIR__), "examples", "forward.jl"))`)
    end
    close(h)
end
