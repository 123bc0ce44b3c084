"""
    FlashAttn

Julia binding of libflashattn: FlashAttention forward, backward, split-KV decode and the merge of partial states
behind the library's C ABI.

Every C function is called with `ccall` by the library's SONAME, `"libflashattn.so.0"`. Setting the environment
variable `FLASHATTN_LIBRARY` to a file path loads that file instead: `__init__` opens it first, and the loader then
resolves the SONAME to the library already loaded (so the file must be a libflashattn of the same major version).

HOST operations take Julia `Array`s; CUDA operations take `CuArray`s through the package extension
`FlashAttnCUDAExt` (loaded with CUDA.jl) or raw device pointers through the `*_device!` functions.
"""
module FlashAttn

using Libdl

export Handle, TensorDescriptor, AttentionDescriptor, SeqDescriptor, HostTensor, DeviceTensor, FlashAttnError,
       forward!, backward!, decode_chunk!, merge_states!, check_support, backend, span

const libflashattn = "libflashattn.so.0"

function __init__()
    path = get(ENV, "FLASHATTN_LIBRARY", "")
    isempty(path) && return
    loaded = Libdl.dlopen(path, Libdl.RTLD_NOW | Libdl.RTLD_GLOBAL)
    # The ccalls below name the SONAME; make sure it now means the file asked for, not another copy on the path.
    resolved = Libdl.dlpath(Libdl.dlopen(libflashattn))
    if realpath(resolved) != realpath(Libdl.dlpath(loaded))
        error("FLASHATTN_LIBRARY=$path was loaded, but $libflashattn resolves to $resolved: the file must be a " *
              "libflashattn with SONAME $libflashattn")
    end
end

# ------------------------------------------------------------------------------------------------------------------
# Enumerations: the header's names and values (C enums are int-sized).

const FLASHATTN_STATUS_SUCCESS = Cint(0)
const FLASHATTN_STATUS_NOT_INITIALIZED = Cint(1)
const FLASHATTN_STATUS_BAD_PARAM = Cint(2)
const FLASHATTN_STATUS_NOT_SUPPORTED = Cint(3)
const FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE = Cint(4)
const FLASHATTN_STATUS_ALLOC_FAILED = Cint(5)
const FLASHATTN_STATUS_ARCH_MISMATCH = Cint(6)
const FLASHATTN_STATUS_NO_DEVICE = Cint(7)
const FLASHATTN_STATUS_EXECUTION_FAILED = Cint(8)
const FLASHATTN_STATUS_INTERNAL_ERROR = Cint(9)

const FLASHATTN_BACKEND_AUTO = Cint(0)
const FLASHATTN_BACKEND_CUDA = Cint(1)
const FLASHATTN_BACKEND_HOST = Cint(2)

const FLASHATTN_DATA_FP16 = Cint(0)
const FLASHATTN_DATA_BF16 = Cint(1)
const FLASHATTN_DATA_FP32 = Cint(2)

const FLASHATTN_MASK_NONE = Cint(0)
const FLASHATTN_MASK_CAUSAL_TOP_LEFT = Cint(1)
const FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT = Cint(2)

const FLASHATTN_OP_FORWARD = Cint(0)
const FLASHATTN_OP_BACKWARD = Cint(1)
const FLASHATTN_OP_DECODE_CHUNK = Cint(2)
const FLASHATTN_OP_MERGE_STATES = Cint(3)

const FLASHATTN_MAX_TENSOR_RANK = Cint(8)

# ------------------------------------------------------------------------------------------------------------------
# Errors

"""
    FlashAttnError(status, message, from_library)

A failed call: the library's status code, its message (which names the argument and the values), and whether the
library returned it (`false` when this package refused the call before making it).
"""
struct FlashAttnError <: Exception
    status::Cint
    message::String
    from_library::Bool
end

"""The library's name of a status ("FLASHATTN_STATUS_BAD_PARAM"), also for values it does not know."""
status_name(status::Integer) =
    unsafe_string(ccall((:flashAttnGetErrorString, libflashattn), Cstring, (Cint,), status))

Base.showerror(io::IO, e::FlashAttnError) = print(io, status_name(e.status), ": ", e.message)

refuse(message::AbstractString) = throw(FlashAttnError(FLASHATTN_STATUS_BAD_PARAM, message, false))

# The library's message is per OS thread. A task moves between threads only at a task switch, and nothing between a
# ccall and the read below switches tasks, so the message read is the failed call's own.
function last_error_message()
    n = ccall((:flashAttnGetLastErrorMessage, libflashattn), Csize_t, (Ptr{UInt8}, Csize_t), C_NULL, 0)
    buf = Vector{UInt8}(undef, n + 1)
    ccall((:flashAttnGetLastErrorMessage, libflashattn), Csize_t, (Ptr{UInt8}, Csize_t), buf, length(buf))
    return String(buf[1:n])
end

function check(status::Cint)
    status == FLASHATTN_STATUS_SUCCESS && return nothing
    throw(FlashAttnError(status, last_error_message(), true))
end

"""Version of the loaded library, MAJOR*10000 + MINOR*100 + PATCH."""
version() = ccall((:flashAttnGetVersion, libflashattn), Int32, ())

# ------------------------------------------------------------------------------------------------------------------
# Tensor descriptor

"""
    TensorDescriptor(dtype, dims, strides)
    TensorDescriptor(A::StridedArray)

Data type (`FLASHATTN_DATA_*`), dimensions and strides in elements, in the header's semantic order
(`[batch, heads, seq, headDim]`, ...). From a Julia array, which is column-major, the dimensions are `size(A)`
reversed and the strides `strides(A)` reversed: an array of size `(headDim, seq, heads, batch)` is the tensor
`[batch, heads, seq, headDim]`, packed with the head dimension fastest.
"""
mutable struct TensorDescriptor
    ptr::Ptr{Cvoid}
    dtype::Cint
    dims::Vector{Int64}
    strides::Vector{Int64}

    function TensorDescriptor(dtype::Integer, dims::AbstractVector{<:Integer}, strides::AbstractVector{<:Integer})
        length(dims) == length(strides) ||
            refuse("strides: $(length(strides)) strides for $(length(dims)) dimensions")
        isempty(dims) && refuse("dims: no dimensions")
        ref = Ref{Ptr{Cvoid}}(C_NULL)
        check(ccall((:flashAttnCreateTensorDescriptor, libflashattn), Cint, (Ptr{Ptr{Cvoid}},), ref))
        d = finalizer(destroy!, new(ref[], Cint(dtype), Vector{Int64}(dims), Vector{Int64}(strides)))
        status = ccall((:flashAttnSetTensorDescriptor, libflashattn), Cint,
                       (Ptr{Cvoid}, Cint, Int32, Ptr{Int64}, Ptr{Int64}),
                       d.ptr, d.dtype, Int32(length(d.dims)), d.dims, d.strides)
        if status != FLASHATTN_STATUS_SUCCESS
            err = FlashAttnError(status, last_error_message(), true)
            destroy!(d)
            throw(err)
        end
        return d
    end
end

dtype_of(::Type{Float32}) = FLASHATTN_DATA_FP32
dtype_of(::Type{Float16}) = FLASHATTN_DATA_FP16
dtype_of(::Type{T}) where {T} =
    refuse("no FLASHATTN_DATA_* type for $T: pass the data type explicitly (UInt16 holds FP16 or BF16 bits)")

TensorDescriptor(A::StridedArray{T}) where {T} = TensorDescriptor(dtype_of(T), A)
TensorDescriptor(dtype::Integer, A::StridedArray) =
    TensorDescriptor(dtype, reverse(collect(Int64, size(A))), reverse(collect(Int64, strides(A))))

function destroy!(d::TensorDescriptor)
    if d.ptr != C_NULL
        ccall((:flashAttnDestroyTensorDescriptor, libflashattn), Cint, (Ptr{Cvoid},), d.ptr)
        d.ptr = C_NULL
    end
    return nothing
end
Base.close(d::TensorDescriptor) = destroy!(d)

"""Reads the descriptor back from the library: `(dtype, dims, strides)`."""
function query(d::TensorDescriptor)
    dt = Ref{Cint}(0)
    rank = Ref{Int32}(0)
    dims = zeros(Int64, FLASHATTN_MAX_TENSOR_RANK)
    strides = zeros(Int64, FLASHATTN_MAX_TENSOR_RANK)
    check(ccall((:flashAttnGetTensorDescriptor, libflashattn), Cint,
                (Ptr{Cvoid}, Int32, Ptr{Cint}, Ptr{Int32}, Ptr{Int64}, Ptr{Int64}),
                d.ptr, Int32(FLASHATTN_MAX_TENSOR_RANK), dt, rank, dims, strides))
    return dt[], dims[1:rank[]], strides[1:rank[]]
end

"""Elements from the first to one past the last element the descriptor addresses: 1 + sum((dim - 1) * stride)."""
span(d::TensorDescriptor) = 1 + sum(Int128(n - 1) * Int128(s) for (n, s) in zip(d.dims, d.strides))

# ------------------------------------------------------------------------------------------------------------------
# Attention descriptor

"""
    AttentionDescriptor(; scale=nothing, mask=nothing, window=nothing, softcap=nothing, deterministic=nothing,
                        sinks=nothing, sinks_gradient=nothing)

Scale, mask, window, softcap, ALiBi, attention sinks and determinism. Defaults: scale 1/sqrt(headDim), no mask, no
window, no softcap, no ALiBi, no sinks, non-deterministic backward. Host ALiBi slopes and sinks are copied into the
descriptor, which keeps them alive as long as the library may read them. `sinks` and `sinks_gradient` go to
[`set_sinks!`](@ref) and [`set_sinks_gradient!`](@ref) (with CUDA.jl loaded, CuVectors too).
"""
mutable struct AttentionDescriptor
    ptr::Ptr{Cvoid}
    slopes::Union{Nothing,Vector{Float32}}
    slopes_device::Bool
    per_batch::Bool
    # The host copy, or the device array the CUDA extension keeps alive; `sinks_device` says which.
    sinks::Union{Nothing,AbstractVector{Float32}}
    sinks_device::Bool
    # The caller's host vector a HOST backward writes, or the device array of a CUDA one.
    dsinks::Union{Nothing,AbstractVector{Float32}}
    dsinks_device::Bool

    function AttentionDescriptor(; scale=nothing, mask=nothing, window=nothing, softcap=nothing,
                                 deterministic=nothing, sinks=nothing, sinks_gradient=nothing)
        ref = Ref{Ptr{Cvoid}}(C_NULL)
        check(ccall((:flashAttnCreateAttentionDescriptor, libflashattn), Cint, (Ptr{Ptr{Cvoid}},), ref))
        a = finalizer(destroy!, new(ref[], nothing, false, false, nothing, false, nothing, false))
        scale === nothing || set_scale!(a, scale)
        mask === nothing || set_mask!(a, mask)
        window === nothing || set_window!(a, window[1], window[2])
        softcap === nothing || set_softcap!(a, softcap)
        deterministic === nothing || set_deterministic!(a, deterministic)
        sinks === nothing || set_sinks!(a, sinks)
        sinks_gradient === nothing || set_sinks_gradient!(a, sinks_gradient)
        return a
    end
end

function destroy!(a::AttentionDescriptor)
    if a.ptr != C_NULL
        # Destroyed before the slopes and sinks are released, so the library never holds a freed pointer.
        ccall((:flashAttnDestroyAttentionDescriptor, libflashattn), Cint, (Ptr{Cvoid},), a.ptr)
        a.ptr = C_NULL
    end
    a.slopes = a.sinks = a.dsinks = nothing
    return nothing
end
Base.close(a::AttentionDescriptor) = destroy!(a)

set_scale!(a::AttentionDescriptor, scale::Real) =
    check(ccall((:flashAttnSetAttentionScale, libflashattn), Cint, (Ptr{Cvoid}, Cfloat), a.ptr, scale))

"""The scale, 0 while the default 1/sqrt(headDim) applies."""
function scale(a::AttentionDescriptor)
    v = Ref{Cfloat}(0)
    check(ccall((:flashAttnGetAttentionScale, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr, v))
    return v[]
end

set_mask!(a::AttentionDescriptor, mask::Integer) =
    check(ccall((:flashAttnSetAttentionMask, libflashattn), Cint, (Ptr{Cvoid}, Cint), a.ptr, mask))

function mask(a::AttentionDescriptor)
    v = Ref{Cint}(0)
    check(ccall((:flashAttnGetAttentionMask, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cint}), a.ptr, v))
    return v[]
end

set_window!(a::AttentionDescriptor, left::Integer, right::Integer) =
    check(ccall((:flashAttnSetAttentionWindow, libflashattn), Cint, (Ptr{Cvoid}, Int64, Int64), a.ptr, left, right))

function window(a::AttentionDescriptor)
    l = Ref{Int64}(0)
    r = Ref{Int64}(0)
    check(ccall((:flashAttnGetAttentionWindow, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Int64}, Ptr{Int64}),
                a.ptr, l, r))
    return (l[], r[])
end

set_softcap!(a::AttentionDescriptor, softcap::Real) =
    check(ccall((:flashAttnSetAttentionSoftcap, libflashattn), Cint, (Ptr{Cvoid}, Cfloat), a.ptr, softcap))

function softcap(a::AttentionDescriptor)
    v = Ref{Cfloat}(0)
    check(ccall((:flashAttnGetAttentionSoftcap, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr, v))
    return v[]
end

set_deterministic!(a::AttentionDescriptor, deterministic::Bool) =
    check(ccall((:flashAttnSetAttentionDeterministic, libflashattn), Cint, (Ptr{Cvoid}, Int32), a.ptr,
                Int32(deterministic)))

function deterministic(a::AttentionDescriptor)
    v = Ref{Int32}(0)
    check(ccall((:flashAttnGetAttentionDeterministic, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Int32}), a.ptr, v))
    return v[] != 0
end

"""ALiBi slopes for HOST operations: `[heads]`, or `[batch * heads]` (batch-major) with `per_batch`."""
function set_alibi_slopes!(a::AttentionDescriptor, slopes::AbstractVector{<:Real}; per_batch::Bool=false)
    isempty(slopes) && refuse("slopes: empty (use clear_alibi_slopes! to turn ALiBi off)")
    copy = Vector{Float32}(slopes)
    # The old slopes stay referenced until the library points at the new ones.
    check(ccall((:flashAttnSetAttentionAlibiSlopes, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}, Int32),
                a.ptr, copy, Int32(per_batch)))
    a.slopes, a.slopes_device, a.per_batch = copy, false, per_batch
    return nothing
end

"""ALiBi slopes in device memory; the caller keeps them valid while operations may use the descriptor."""
function set_alibi_slopes_device!(a::AttentionDescriptor, slopes::Ptr{Cfloat}; per_batch::Bool=false)
    check(ccall((:flashAttnSetAttentionAlibiSlopes, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}, Int32),
                a.ptr, slopes, Int32(per_batch)))
    a.slopes, a.slopes_device, a.per_batch = nothing, slopes != C_NULL, per_batch
    return nothing
end

clear_alibi_slopes!(a::AttentionDescriptor) = set_alibi_slopes_device!(a, Ptr{Cfloat}(C_NULL))

"""The slopes pointer the library holds (`C_NULL` when ALiBi is off) and the per-batch flag."""
function alibi_slopes(a::AttentionDescriptor)
    p = Ref{Ptr{Cfloat}}(C_NULL)
    per_batch = Ref{Int32}(0)
    check(ccall((:flashAttnGetAttentionAlibiSlopes, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cfloat}}, Ptr{Int32}),
                a.ptr, p, per_batch))
    return p[], per_batch[] != 0
end

"""
    set_sinks!(a, sinks)

Attention sinks for HOST operations, copied into the descriptor: `[heads]`, one logit per query head that joins
every row's softmax denominator without a value (docs/semantics.md, Attention sinks). `forward!`,
`decode_chunk!` and `backward!` read them, and check their count against the heads first. With CUDA.jl loaded, a
`CuVector{Float32}` sets device sinks for the CUDA methods instead (kept alive by the descriptor).
"""
function set_sinks!(a::AttentionDescriptor, sinks::AbstractVector{<:Real})
    isempty(sinks) && refuse("sinks: empty (use clear_sinks! to turn sinks off)")
    owned = Vector{Float32}(sinks)
    check(ccall((:flashAttnSetAttentionSinks, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr, owned))
    a.sinks, a.sinks_device = owned, false
    return a
end

"""Attention sinks in device memory (or `C_NULL` to turn them off); the caller keeps them valid."""
function set_sinks_device!(a::AttentionDescriptor, sinks::Ptr{Cfloat})
    check(ccall((:flashAttnSetAttentionSinks, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr, sinks))
    a.sinks, a.sinks_device = nothing, sinks != C_NULL
    return a
end

clear_sinks!(a::AttentionDescriptor) = set_sinks_device!(a, Ptr{Cfloat}(C_NULL))

"""The sinks pointer the library holds (`C_NULL` when off)."""
function sinks(a::AttentionDescriptor)
    p = Ref{Ptr{Cfloat}}(C_NULL)
    check(ccall((:flashAttnGetAttentionSinks, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cfloat}}), a.ptr, p))
    return p[]
end

"""
    set_sinks_gradient!(a, dsinks)

Where `backward!` writes the sinks' gradient: the caller's `Vector{Float32}` of `heads` entries (HOST), which the
descriptor keeps referenced and each backward overwrites (never accumulates into), or `nothing` to turn it off.
Do not resize the vector while the descriptor holds it: the library keeps its data pointer. The backward needs the
forward's sinks too. With CUDA.jl loaded, a `CuVector{Float32}` is the target of the CUDA `backward!`.
"""
function set_sinks_gradient!(a::AttentionDescriptor, dsinks::Union{Nothing,Vector{Float32}})
    p = dsinks === nothing ? Ptr{Cfloat}(C_NULL) : pointer(dsinks)
    check(ccall((:flashAttnSetAttentionSinksGradient, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr, p))
    a.dsinks, a.dsinks_device = dsinks, false
    return a
end

"""dSinks in device memory (or `C_NULL` to turn it off); the caller keeps it valid."""
function set_sinks_gradient_device!(a::AttentionDescriptor, dsinks::Ptr{Cfloat})
    check(ccall((:flashAttnSetAttentionSinksGradient, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cfloat}), a.ptr,
                dsinks))
    a.dsinks, a.dsinks_device = nothing, dsinks != C_NULL
    return a
end

clear_sinks_gradient!(a::AttentionDescriptor) = set_sinks_gradient!(a, nothing)

"""The dSinks pointer the library holds (`C_NULL` when not computed)."""
function sinks_gradient(a::AttentionDescriptor)
    p = Ref{Ptr{Cfloat}}(C_NULL)
    check(ccall((:flashAttnGetAttentionSinksGradient, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cfloat}}), a.ptr, p))
    return p[]
end

# ------------------------------------------------------------------------------------------------------------------
# Sequence descriptor

"""
    SeqDescriptor()

Ragged batches, per-sequence KV lengths and paged KV caches. The library reads the arrays when an operation runs:
the host setters copy them into the descriptor, which keeps them alive.
"""
mutable struct SeqDescriptor
    ptr::Ptr{Cvoid}
    cu_seqlens::Union{Nothing,Tuple{Vector{Int32},Vector{Int32}}}
    kv_lengths::Union{Nothing,Vector{Int32}}
    block_table::Union{Nothing,Vector{Int32}}
    device::Bool

    function SeqDescriptor()
        ref = Ref{Ptr{Cvoid}}(C_NULL)
        check(ccall((:flashAttnCreateSeqDescriptor, libflashattn), Cint, (Ptr{Ptr{Cvoid}},), ref))
        return finalizer(destroy!, new(ref[], nothing, nothing, nothing, false))
    end
end

function destroy!(s::SeqDescriptor)
    if s.ptr != C_NULL
        ccall((:flashAttnDestroySeqDescriptor, libflashattn), Cint, (Ptr{Cvoid},), s.ptr)
        s.ptr = C_NULL
    end
    s.cu_seqlens = s.kv_lengths = s.block_table = nothing
    return nothing
end
Base.close(s::SeqDescriptor) = destroy!(s)

"""Ragged batch of `length(cu_seqlens_q) - 1` sequences (prefix sums starting at 0)."""
function set_ragged!(s::SeqDescriptor, cu_seqlens_q::AbstractVector{<:Integer}, cu_seqlens_k::AbstractVector{<:Integer},
                     max_q::Integer, max_k::Integer)
    length(cu_seqlens_q) == length(cu_seqlens_k) ||
        refuse("cu_seqlens_k: $(length(cu_seqlens_k)) elements, cu_seqlens_q has $(length(cu_seqlens_q))")
    length(cu_seqlens_q) >= 2 || refuse("cu_seqlens_q: $(length(cu_seqlens_q)) elements, a batch needs at least 2")
    q, k = Vector{Int32}(cu_seqlens_q), Vector{Int32}(cu_seqlens_k)
    check(ccall((:flashAttnSetSeqRagged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Ptr{Int32}, Int64, Int64),
                s.ptr, length(q) - 1, q, k, max_q, max_k))
    s.cu_seqlens = (q, k)
    return nothing
end

function clear_ragged!(s::SeqDescriptor)
    check(ccall((:flashAttnSetSeqRagged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Ptr{Int32}, Int64, Int64),
                s.ptr, 1, C_NULL, C_NULL, 1, 1))
    s.cu_seqlens = nothing
    return nothing
end

"""Used KV length of each sequence of a dense or paged cache."""
function set_kv_lengths!(s::SeqDescriptor, seqlens_k::AbstractVector{<:Integer})
    isempty(seqlens_k) && refuse("seqlens_k: empty (use clear_kv_lengths!)")
    l = Vector{Int32}(seqlens_k)
    check(ccall((:flashAttnSetSeqKvLengths, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}), s.ptr, length(l), l))
    s.kv_lengths = l
    return nothing
end

function clear_kv_lengths!(s::SeqDescriptor)
    check(ccall((:flashAttnSetSeqKvLengths, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}), s.ptr, 0, C_NULL))
    s.kv_lengths = nothing
    return nothing
end

"""Paged cache: `block_table` is a `batch x max_pages_per_seq` matrix of page ids (row b is sequence b)."""
function set_paged!(s::SeqDescriptor, block_table::AbstractMatrix{<:Integer})
    batch, pages = size(block_table)
    (batch >= 1 && pages >= 1) || refuse("block_table: $(size(block_table)) has no page")
    # The C table is row-major [batch, maxPagesPerSeq]: the transposed Julia matrix, flattened.
    t = Vector{Int32}(vec(permutedims(block_table)))
    check(ccall((:flashAttnSetSeqPaged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Int64),
                s.ptr, batch, t, pages))
    s.block_table = t
    return nothing
end

function clear_paged!(s::SeqDescriptor)
    check(ccall((:flashAttnSetSeqPaged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Int64),
                s.ptr, 0, C_NULL, 1))
    s.block_table = nothing
    return nothing
end

"""Ragged batch with `[batch + 1]` int32 arrays in device memory, kept valid by the caller."""
function set_ragged_device!(s::SeqDescriptor, batch::Integer, cu_seqlens_q::Ptr{Int32}, cu_seqlens_k::Ptr{Int32},
                            max_q::Integer, max_k::Integer)
    check(ccall((:flashAttnSetSeqRagged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Ptr{Int32}, Int64, Int64),
                s.ptr, batch, cu_seqlens_q, cu_seqlens_k, max_q, max_k))
    s.cu_seqlens, s.device = nothing, true
    return nothing
end

"""KV lengths, `[batch]` int32 in device memory, kept valid by the caller."""
function set_kv_lengths_device!(s::SeqDescriptor, batch::Integer, seqlens_k::Ptr{Int32})
    check(ccall((:flashAttnSetSeqKvLengths, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}), s.ptr, batch,
                seqlens_k))
    s.kv_lengths, s.device = nothing, true
    return nothing
end

"""Block table, `[batch, max_pages_per_seq]` int32 row-major in device memory, kept valid by the caller."""
function set_paged_device!(s::SeqDescriptor, batch::Integer, block_table::Ptr{Int32}, max_pages_per_seq::Integer)
    check(ccall((:flashAttnSetSeqPaged, libflashattn), Cint, (Ptr{Cvoid}, Int64, Ptr{Int32}, Int64),
                s.ptr, batch, block_table, max_pages_per_seq))
    s.block_table, s.device = nothing, true
    return nothing
end

"""`(batch, max_q, max_k)` of the ragged setting; batch 0 when not ragged."""
function ragged(s::SeqDescriptor)
    b, mq, mk = Ref{Int64}(0), Ref{Int64}(0), Ref{Int64}(0)
    q, k = Ref{Ptr{Int32}}(C_NULL), Ref{Ptr{Int32}}(C_NULL)
    check(ccall((:flashAttnGetSeqRagged, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Int64}, Ptr{Ptr{Int32}}, Ptr{Ptr{Int32}}, Ptr{Int64}, Ptr{Int64}),
                s.ptr, b, q, k, mq, mk))
    return (b[], mq[], mk[])
end

"""Batch of the KV lengths, 0 when unset."""
function kv_lengths_batch(s::SeqDescriptor)
    b = Ref{Int64}(0)
    p = Ref{Ptr{Int32}}(C_NULL)
    check(ccall((:flashAttnGetSeqKvLengths, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Int64}, Ptr{Ptr{Int32}}),
                s.ptr, b, p))
    return b[]
end

"""`(batch, max_pages_per_seq)` of the paged setting; batch 0 when unset."""
function paged(s::SeqDescriptor)
    b, m = Ref{Int64}(0), Ref{Int64}(0)
    p = Ref{Ptr{Int32}}(C_NULL)
    check(ccall((:flashAttnGetSeqPaged, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Int64}, Ptr{Ptr{Int32}}, Ptr{Int64}),
                s.ptr, b, p, m))
    return (b[], m[])
end

# ------------------------------------------------------------------------------------------------------------------
# Handle

"""
    Handle(; backend=FLASHATTN_BACKEND_AUTO)

A library handle: backend, device, stream. It serves one task at a time. HOST operations use a workspace the
handle owns; the CUDA extension keeps its device workspace in `device_workspace`.
"""
mutable struct Handle
    ptr::Ptr{Cvoid}
    backend::Cint
    workspace::Vector{UInt8}
    device_workspace::Any

    function Handle(; backend::Integer=FLASHATTN_BACKEND_AUTO)
        ref = Ref{Ptr{Cvoid}}(C_NULL)
        if backend == FLASHATTN_BACKEND_AUTO
            check(ccall((:flashAttnCreate, libflashattn), Cint, (Ptr{Ptr{Cvoid}},), ref))
        else
            check(ccall((:flashAttnCreateWithBackend, libflashattn), Cint, (Ptr{Ptr{Cvoid}}, Cint), ref, backend))
        end
        h = finalizer(destroy!, new(ref[], FLASHATTN_BACKEND_AUTO, UInt8[], nothing))
        b = Ref{Cint}(0)
        check(ccall((:flashAttnGetBackend, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cint}), h.ptr, b))
        h.backend = b[]
        return h
    end
end

function destroy!(h::Handle)
    if h.ptr != C_NULL
        ccall((:flashAttnDestroy, libflashattn), Cint, (Ptr{Cvoid},), h.ptr)
        h.ptr = C_NULL
    end
    h.workspace = UInt8[]
    h.device_workspace = nothing
    return nothing
end
Base.close(h::Handle) = destroy!(h)

"""`FLASHATTN_BACKEND_CUDA` or `FLASHATTN_BACKEND_HOST` (never AUTO)."""
backend(h::Handle) = h.backend

"""Binds a CUDA stream (a `cudaStream_t`; `C_NULL` is the default stream). HOST ignores it."""
set_stream!(h::Handle, stream::Ptr{Cvoid}) =
    check(ccall((:flashAttnSetStream, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), h.ptr, stream))

function stream(h::Handle)
    s = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:flashAttnGetStream, libflashattn), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), h.ptr, s))
    return s[]
end

"""
    HostTensor(desc, data::Array)
    HostTensor(data::Array)

A descriptor and the Julia array holding its data, for HOST operations. `Float32` arrays hold FP32 tensors,
`Float16` FP16, `UInt16` the bits of FP16 or BF16. With one argument the descriptor is made from the array (see
[`TensorDescriptor`](@ref)).
"""
struct HostTensor{T}
    desc::TensorDescriptor
    data::Array{T}
end
HostTensor(data::Array) = HostTensor(TensorDescriptor(data), data)

"""A descriptor and a pointer in the handle's memory (device memory for CUDA)."""
struct DeviceTensor
    desc::TensorDescriptor
    ptr::Ptr{Cvoid}
end

stores(::Type{Float32}, dt::Cint) = dt == FLASHATTN_DATA_FP32
stores(::Type{Float16}, dt::Cint) = dt == FLASHATTN_DATA_FP16
stores(::Type{UInt16}, dt::Cint) = dt == FLASHATTN_DATA_FP16 || dt == FLASHATTN_DATA_BF16
stores(::Type, ::Cint) = false

# Refuses a tensor whose array cannot hold what its descriptor addresses, before the library sees it.
function check_tensor(name::AbstractString, t::HostTensor{T}) where {T}
    t.desc.ptr == C_NULL && refuse("$name: the descriptor is closed")
    stores(T, t.desc.dtype) ||
        refuse("$name: the descriptor's data type is $(t.desc.dtype), the array holds $T")
    n = span(t.desc)
    length(t.data) >= n ||
        refuse("$name: the array has $(length(t.data)) elements, its descriptor (dims $(t.desc.dims), strides " *
               "$(t.desc.strides)) spans $n")
    return nothing
end

check_lse(name, t::HostTensor{Float32}) = check_tensor(name, t)
check_lse(name, t::HostTensor) = refuse("$name: must be FP32 data (an Array{Float32})")

function require_host(h::Handle, what::AbstractString)
    h.ptr == C_NULL && refuse("$what: the handle is closed")
    h.backend == FLASHATTN_BACKEND_HOST ||
        refuse("$what: the handle runs on CUDA; Julia Arrays are host memory, so use a HOST handle, or CuArrays " *
               "through the CUDA extension")
    return nothing
end

# Q is [batch, heads, seq, dim] or [tokens, heads, dim]: the heads are dims[2] either way.
heads_of(q::TensorDescriptor) = length(q.dims) >= 2 ? Int(q.dims[2]) : 0

# Refuses device arrays and too few ALiBi slopes or sinks for a HOST operation.
function check_host_descriptors(attn, seq, q::TensorDescriptor)
    if seq !== nothing && seq.device
        refuse("seq: the sequence descriptor holds device arrays; a HOST operation needs host arrays")
    end
    attn === nothing && return nothing
    attn.sinks_device && refuse("attn: the sinks are in device memory; a HOST operation needs host sinks")
    if attn.sinks !== nothing && length(attn.sinks) < heads_of(q)
        refuse("sinks: $(length(attn.sinks)) sinks, the operation reads $(heads_of(q)) (heads)")
    end
    attn.slopes_device && refuse("attn: the ALiBi slopes are in device memory; a HOST operation needs host slopes")
    (attn.slopes === nothing || length(q.dims) < 2) && return nothing
    # Q is [batch, heads, seq, dim], or [tokens, heads, dim] with the batch in the ragged descriptor.
    heads, batch = q.dims[2], q.dims[1]
    if length(q.dims) == 3 && seq !== nothing && seq.cu_seqlens !== nothing
        batch = length(seq.cu_seqlens[1]) - 1
    end
    need = attn.per_batch ? batch * heads : heads
    length(attn.slopes) >= need ||
        refuse("alibi slopes: $(length(attn.slopes)) slopes, the operation reads $need " *
               (attn.per_batch ? "(batch x heads)" : "(heads)"))
    return nothing
end

# A 256-byte aligned pointer to at least `bytes` bytes of the handle's workspace (C_NULL for 0). The caller keeps
# h.workspace rooted (GC.@preserve) while the pointer is in use, and the descriptors too: they root the host arrays
# the library reads or writes during the call (slopes, sinks, dSinks, sequence arrays).
function host_workspace(h::Handle, bytes::Integer)
    bytes == 0 && return C_NULL
    length(h.workspace) < bytes + 256 && (h.workspace = Vector{UInt8}(undef, bytes + 256))
    base = pointer(h.workspace)
    return Ptr{Cvoid}(base + (256 - UInt(base) % 256) % 256)
end

raw(::Nothing) = C_NULL
raw(d::Union{TensorDescriptor,AttentionDescriptor,SeqDescriptor}) = d.ptr

"""
    check_support(h, op, q, k, v, o; attn=nothing, seq=nothing) -> (description, deterministic)

Whether a configuration runs on this handle and what serves it, without running anything. For
`FLASHATTN_OP_MERGE_STATES`, `q` is the partial O descriptor and `k`, `v` are `nothing`. An unsupported
configuration throws a `FlashAttnError` with `FLASHATTN_STATUS_NOT_SUPPORTED` and the reason.
"""
function check_support(h::Handle, op::Integer, q::TensorDescriptor, k, v, o::TensorDescriptor; attn=nothing,
                       seq=nothing)
    text = zeros(UInt8, 512)
    det = Ref{Int32}(0)
    check(ccall((:flashAttnCheckSupport, libflashattn), Cint,
                (Ptr{Cvoid}, Cint, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{UInt8},
                 Csize_t, Ptr{Int32}),
                h.ptr, op, raw(attn), raw(seq), raw(q), raw(k), raw(v), raw(o), text, length(text), det))
    return (String(text[1:something(findfirst(==(0x00), text), length(text) + 1)-1]), det[] != 0)
end

function forward_workspace_size(h::Handle, q, k, v, o; attn=nothing, seq=nothing, lse=nothing)
    n = Ref{Csize_t}(0)
    check(ccall((:flashAttnForwardGetWorkspaceSize, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Csize_t}),
                h.ptr, raw(attn), raw(seq), raw(q), raw(k), raw(v), raw(o), raw(lse), n))
    return Int(n[])
end

function backward_workspace_size(h::Handle, q, k, v, o, lse; attn=nothing, seq=nothing)
    n = Ref{Csize_t}(0)
    check(ccall((:flashAttnBackwardGetWorkspaceSize, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Csize_t}),
                h.ptr, raw(attn), raw(seq), raw(q), raw(k), raw(v), raw(o), raw(lse), n))
    return Int(n[])
end

# The exact workspace of a backward whose gradients have strides of their own (backward_workspace_size sizes them in
# the strides of O, Q, K and V).
function backward_workspace_size_with_gradients(h::Handle, q, k, v, o, dO, lse, dQ, dK, dV; attn=nothing,
                                                seq=nothing)
    n = Ref{Csize_t}(0)
    check(ccall((:flashAttnBackwardGetWorkspaceSizeWithGradients, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Csize_t}),
                h.ptr, raw(attn), raw(seq), raw(q), raw(k), raw(v), raw(o), raw(dO), raw(lse), raw(dQ), raw(dK),
                raw(dV), n))
    return Int(n[])
end

function decode_chunk_workspace_size(h::Handle, q, k, v, o; attn=nothing, seq=nothing, lse=nothing,
                                     num_chunks::Integer=0)
    n = Ref{Csize_t}(0)
    check(ccall((:flashAttnDecodeChunkGetWorkspaceSize, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Int32,
                 Ptr{Csize_t}),
                h.ptr, raw(attn), raw(seq), raw(q), raw(k), raw(v), raw(o), raw(lse), num_chunks, n))
    return Int(n[])
end

function merge_states_workspace_size(h::Handle, partial_o, partial_lse, o; lse=nothing)
    n = Ref{Csize_t}(0)
    check(ccall((:flashAttnMergeStatesGetWorkspaceSize, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Csize_t}),
                h.ptr, raw(partial_o), raw(partial_lse), raw(o), raw(lse), n))
    return Int(n[])
end

desc_of(::Nothing) = nothing
desc_of(t::Union{HostTensor,DeviceTensor}) = t.desc
data_of(::Nothing) = C_NULL
data_of(t::HostTensor) = t.data

"""
    forward!(h, q, k, v, o; attn=nothing, seq=nothing, lse=nothing)

O = softmax(mask(softcap(scale Q K^T) + alibi)) V, and LSE when `lse` is given, on the HOST backend; with sinks in
`attn`, each row's softmax denominator also holds exp(sink of its head). The tensors are `HostTensor`s.
"""
function forward!(h::Handle, q::HostTensor{T}, k::HostTensor{T}, v::HostTensor{T}, o::HostTensor{T};
                  attn=nothing, seq=nothing, lse::Union{Nothing,HostTensor}=nothing) where {T}
    require_host(h, "forward!")
    check_tensor("q", q); check_tensor("k", k); check_tensor("v", v); check_tensor("o", o)
    lse === nothing || check_lse("lse", lse)
    check_host_descriptors(attn, seq, q.desc)
    n = forward_workspace_size(h, q.desc, k.desc, v.desc, o.desc; attn=attn, seq=seq, lse=desc_of(lse))
    ws = host_workspace(h, n)
    GC.@preserve h attn seq begin
        check(ccall((:flashAttnForward, libflashattn), Cint,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                     Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Csize_t),
                    h.ptr, raw(attn), raw(seq), q.desc.ptr, q.data, k.desc.ptr, k.data, v.desc.ptr, v.data,
                    o.desc.ptr, o.data, raw(desc_of(lse)), data_of(lse), ws, n))
    end
    return o.data
end

# Refuses a dSinks a HOST backward cannot write: device memory, or fewer entries than heads.
function check_host_sinks_gradient(attn, q::TensorDescriptor)
    attn === nothing && return nothing
    attn.dsinks_device &&
        refuse("attn: the sinks gradient is in device memory; a HOST backward needs a Vector{Float32}")
    if attn.dsinks !== nothing && length(attn.dsinks) < heads_of(q)
        refuse("dsinks: the vector has $(length(attn.dsinks)) entries, the backward writes $(heads_of(q)) (heads)")
    end
    return nothing
end

"""
    backward!(h, q, k, v, o, dO, lse, dQ, dK, dV; attn=nothing, seq=nothing)

dQ, dK, dV of [`forward!`](@ref) given dO and the forward's O and LSE, on the HOST backend. `attn` must hold the
forward's sinks; with [`set_sinks_gradient!`](@ref) the backward also writes their gradient into that vector.
"""
function backward!(h::Handle, q::HostTensor{T}, k::HostTensor{T}, v::HostTensor{T}, o::HostTensor{T},
                   dO::HostTensor{T}, lse::HostTensor, dQ::HostTensor{T}, dK::HostTensor{T}, dV::HostTensor{T};
                   attn=nothing, seq=nothing) where {T}
    require_host(h, "backward!")
    for (name, t) in (("q", q), ("k", k), ("v", v), ("o", o), ("dO", dO), ("dQ", dQ), ("dK", dK), ("dV", dV))
        check_tensor(name, t)
    end
    check_lse("lse", lse)
    check_host_descriptors(attn, seq, q.desc)
    check_host_sinks_gradient(attn, q.desc)
    n = backward_workspace_size_with_gradients(h, q.desc, k.desc, v.desc, o.desc, dO.desc, lse.desc, dQ.desc,
                                               dK.desc, dV.desc; attn=attn, seq=seq)
    ws = host_workspace(h, n)
    GC.@preserve h attn seq begin
        check(ccall((:flashAttnBackward, libflashattn), Cint,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                     Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid},
                     Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                    h.ptr, raw(attn), raw(seq), q.desc.ptr, q.data, k.desc.ptr, k.data, v.desc.ptr, v.data,
                    o.desc.ptr, o.data, dO.desc.ptr, dO.data, lse.desc.ptr, lse.data, dQ.desc.ptr, dQ.data,
                    dK.desc.ptr, dK.data, dV.desc.ptr, dV.data, ws, n))
    end
    return (dQ.data, dK.data, dV.data)
end

"""
    decode_chunk!(h, q, k, v, o; attn=nothing, seq=nothing, lse=nothing, num_chunks=0)

Split-KV decode against a dense or paged KV cache on the HOST backend; `num_chunks` 0 chooses. Sinks in `attn`
join each row once, whatever the chunk count, so the result is `forward!`'s.
"""
function decode_chunk!(h::Handle, q::HostTensor{T}, k::HostTensor{T}, v::HostTensor{T}, o::HostTensor{T};
                       attn=nothing, seq=nothing, lse::Union{Nothing,HostTensor}=nothing,
                       num_chunks::Integer=0) where {T}
    require_host(h, "decode_chunk!")
    check_tensor("q", q); check_tensor("k", k); check_tensor("v", v); check_tensor("o", o)
    lse === nothing || check_lse("lse", lse)
    check_host_descriptors(attn, seq, q.desc)
    n = decode_chunk_workspace_size(h, q.desc, k.desc, v.desc, o.desc; attn=attn, seq=seq, lse=desc_of(lse),
                                    num_chunks=num_chunks)
    ws = host_workspace(h, n)
    GC.@preserve h attn seq begin
        check(ccall((:flashAttnDecodeChunk, libflashattn), Cint,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                     Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Int32, Ptr{Cvoid}, Csize_t),
                    h.ptr, raw(attn), raw(seq), q.desc.ptr, q.data, k.desc.ptr, k.data, v.desc.ptr, v.data,
                    o.desc.ptr, o.data, raw(desc_of(lse)), data_of(lse), num_chunks, ws, n))
    end
    return o.data
end

"""
    merge_states!(h, partial_o, partial_lse, o; lse=nothing)

Merges partial attention states (FP32) into O, and LSE when `lse` is given, on the HOST backend.
"""
function merge_states!(h::Handle, partial_o::HostTensor, partial_lse::HostTensor, o::HostTensor;
                       lse::Union{Nothing,HostTensor}=nothing)
    require_host(h, "merge_states!")
    check_lse("partial_o", partial_o); check_lse("partial_lse", partial_lse); check_tensor("o", o)
    lse === nothing || check_lse("lse", lse)
    n = merge_states_workspace_size(h, partial_o.desc, partial_lse.desc, o.desc; lse=desc_of(lse))
    ws = host_workspace(h, n)
    GC.@preserve h begin
        check(ccall((:flashAttnMergeStates, libflashattn), Cint,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                     Ptr{Cfloat}, Ptr{Cvoid}, Csize_t),
                    h.ptr, partial_o.desc.ptr, partial_o.data, partial_lse.desc.ptr, partial_lse.data, o.desc.ptr,
                    o.data, raw(desc_of(lse)), data_of(lse), ws, n))
    end
    return o.data
end

# ------------------------------------------------------------------------------------------------------------------
# Operations on pointers in the handle's memory (device memory for CUDA), queued on the handle's stream. Nothing can
# check device memory from the host: the caller guarantees every pointer, the workspace (at least the size the
# matching query returns, 256-byte aligned) and that all of it outlives the stream's run of the operation. The CUDA
# extension calls these with CuArrays.

dptr(::Nothing) = C_NULL
dptr(t::DeviceTensor) = t.ptr

function forward_device!(h::Handle, q::DeviceTensor, k::DeviceTensor, v::DeviceTensor, o::DeviceTensor,
                         workspace::Ptr{Cvoid}, workspace_bytes::Integer; attn=nothing, seq=nothing,
                         lse::Union{Nothing,DeviceTensor}=nothing)
    check(ccall((:flashAttnForward, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Csize_t),
                h.ptr, raw(attn), raw(seq), q.desc.ptr, q.ptr, k.desc.ptr, k.ptr, v.desc.ptr, v.ptr, o.desc.ptr,
                o.ptr, raw(desc_of(lse)), Ptr{Cfloat}(dptr(lse)), workspace, workspace_bytes))
end

function backward_device!(h::Handle, q::DeviceTensor, k::DeviceTensor, v::DeviceTensor, o::DeviceTensor,
                          dO::DeviceTensor, lse::DeviceTensor, dQ::DeviceTensor, dK::DeviceTensor, dV::DeviceTensor,
                          workspace::Ptr{Cvoid}, workspace_bytes::Integer; attn=nothing, seq=nothing)
    check(ccall((:flashAttnBackward, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid},
                 Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                h.ptr, raw(attn), raw(seq), q.desc.ptr, q.ptr, k.desc.ptr, k.ptr, v.desc.ptr, v.ptr, o.desc.ptr,
                o.ptr, dO.desc.ptr, dO.ptr, lse.desc.ptr, Ptr{Cfloat}(lse.ptr), dQ.desc.ptr, dQ.ptr, dK.desc.ptr,
                dK.ptr, dV.desc.ptr, dV.ptr, workspace, workspace_bytes))
end

function decode_chunk_device!(h::Handle, q::DeviceTensor, k::DeviceTensor, v::DeviceTensor, o::DeviceTensor,
                              workspace::Ptr{Cvoid}, workspace_bytes::Integer; attn=nothing, seq=nothing,
                              lse::Union{Nothing,DeviceTensor}=nothing, num_chunks::Integer=0)
    check(ccall((:flashAttnDecodeChunk, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Int32, Ptr{Cvoid}, Csize_t),
                h.ptr, raw(attn), raw(seq), q.desc.ptr, q.ptr, k.desc.ptr, k.ptr, v.desc.ptr, v.ptr, o.desc.ptr,
                o.ptr, raw(desc_of(lse)), Ptr{Cfloat}(dptr(lse)), num_chunks, workspace, workspace_bytes))
end

function merge_states_device!(h::Handle, partial_o::DeviceTensor, partial_lse::DeviceTensor, o::DeviceTensor,
                              workspace::Ptr{Cvoid}, workspace_bytes::Integer;
                              lse::Union{Nothing,DeviceTensor}=nothing)
    check(ccall((:flashAttnMergeStates, libflashattn), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Cfloat}, Ptr{Cvoid}, Csize_t),
                h.ptr, partial_o.desc.ptr, Ptr{Cfloat}(partial_o.ptr), partial_lse.desc.ptr,
                Ptr{Cfloat}(partial_lse.ptr), o.desc.ptr, o.ptr, raw(desc_of(lse)), Ptr{Cfloat}(dptr(lse)), workspace,
                workspace_bytes))
end

end # module
