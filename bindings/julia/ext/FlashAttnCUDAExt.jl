"""
FlashAttn on CuArrays: loaded with CUDA.jl (`using FlashAttn, CUDA`). The operations take CuArrays, describe them
(dims and strides reversed from Julia's column-major order, as for Arrays), check each array's length against its
descriptor's span, bind the task's current CUDA stream to the handle, take the workspace from a CuArray the handle
keeps, and queue the operation through FlashAttn's `*_device!` functions. They return without waiting for the GPU.
Attention sinks and their gradient are CuVectors set on the attention descriptor (`set_sinks!`,
`set_sinks_gradient!`, or the `sinks=` and `sinks_gradient=` keywords of `AttentionDescriptor`).
"""
module FlashAttnCUDAExt

using FlashAttn
using CUDA

import FlashAttn: TensorDescriptor, DeviceTensor, forward!, backward!, decode_chunk!, merge_states!, set_sinks!,
                  set_sinks_gradient!

TensorDescriptor(A::CuArray{T}) where {T} = TensorDescriptor(FlashAttn.dtype_of(T), A)
TensorDescriptor(dtype::Integer, A::CuArray) =
    TensorDescriptor(dtype, reverse(collect(Int64, size(A))), reverse(collect(Int64, strides(A))))

# CuPtr and Ptr are both one machine word; the library takes device addresses as plain pointers.
device_address(A::CuArray) = Ptr{Cvoid}(reinterpret(UInt, pointer(A)))

DeviceTensor(A::CuArray) = DeviceTensor(TensorDescriptor(A), device_address(A))
DeviceTensor(desc::TensorDescriptor, A::CuArray) = DeviceTensor(desc, device_address(A))

function device_tensor(name, A::CuArray{T}) where {T}
    t = DeviceTensor(A)
    FlashAttn.stores(T, t.desc.dtype) || FlashAttn.refuse("$name: no FLASHATTN_DATA_* type stores $T")
    length(A) >= FlashAttn.span(t.desc) ||
        FlashAttn.refuse("$name: the array has $(length(A)) elements, its descriptor spans $(FlashAttn.span(t.desc))")
    return t
end
device_tensor(name, ::Nothing) = nothing

# The library reads the sinks when an operation runs, which may be after this call returns (the stream is not
# waited for): the descriptor keeps the CuVector referenced until it is replaced or the descriptor destroyed.
function set_sinks!(a::FlashAttn.AttentionDescriptor, sinks::CuVector{Float32})
    isempty(sinks) && FlashAttn.refuse("sinks: empty (use clear_sinks! to turn sinks off)")
    FlashAttn.set_sinks_device!(a, Ptr{Cfloat}(device_address(sinks)))
    a.sinks = sinks
    return a
end

function set_sinks_gradient!(a::FlashAttn.AttentionDescriptor, dsinks::CuVector{Float32})
    isempty(dsinks) && FlashAttn.refuse("dsinks: empty (use clear_sinks_gradient! to turn it off)")
    FlashAttn.set_sinks_gradient_device!(a, Ptr{Cfloat}(device_address(dsinks)))
    a.dsinks = dsinks
    return a
end

# Host sinks or dSinks would be read or written by the GPU: refused. Device ones that this package holds as
# CuVectors are checked against the heads; raw pointers (set_sinks_device!) are the caller's to vouch for.
function check_sinks(attn, q::DeviceTensor, what; backward::Bool=false)
    attn === nothing && return nothing
    heads = FlashAttn.heads_of(q.desc)
    if attn.sinks !== nothing
        attn.sinks_device ||
            FlashAttn.refuse("attn: the sinks are a host Vector; $what on CuArrays needs a CuVector{Float32}")
        length(attn.sinks) >= heads ||
            FlashAttn.refuse("sinks: $(length(attn.sinks)) sinks, the operation reads $heads (heads)")
    end
    if backward && attn.dsinks !== nothing
        attn.dsinks_device ||
            FlashAttn.refuse("attn: the sinks gradient is a host Vector; $what on CuArrays needs a CuVector{Float32}")
        length(attn.dsinks) >= heads ||
            FlashAttn.refuse("dsinks: the array has $(length(attn.dsinks)) entries, the backward writes $heads (heads)")
    end
    return nothing
end

function prepare!(h::FlashAttn.Handle, what, bytes::Integer)
    h.ptr == C_NULL && FlashAttn.refuse("$what: the handle is closed")
    h.backend == FlashAttn.FLASHATTN_BACKEND_CUDA ||
        FlashAttn.refuse("$what: CuArrays need a CUDA handle, this one runs on HOST")
    FlashAttn.set_stream!(h, Ptr{Cvoid}(CUDA.stream().handle))
    bytes == 0 && return C_NULL
    ws = h.device_workspace
    if !(ws isa CuArray{UInt8}) || length(ws) < bytes
        # CUDA allocations are at least 256-byte aligned, as the library requires of a workspace.
        ws = CuArray{UInt8}(undef, bytes)
        h.device_workspace = ws
    end
    return device_address(ws)
end

function forward!(h::FlashAttn.Handle, q::CuArray{T}, k::CuArray{T}, v::CuArray{T}, o::CuArray{T}; attn=nothing,
                  seq=nothing, lse::Union{Nothing,CuArray{Float32}}=nothing) where {T}
    tq, tk, tv, to, tl = device_tensor("q", q), device_tensor("k", k), device_tensor("v", v), device_tensor("o", o),
                         device_tensor("lse", lse)
    check_sinks(attn, tq, "forward!")
    n = FlashAttn.forward_workspace_size(h, tq.desc, tk.desc, tv.desc, to.desc; attn=attn, seq=seq,
                                         lse=FlashAttn.desc_of(tl))
    ws = prepare!(h, "forward!", n)
    FlashAttn.forward_device!(h, tq, tk, tv, to, ws, n; attn=attn, seq=seq, lse=tl)
    return o
end

function backward!(h::FlashAttn.Handle, q::CuArray{T}, k::CuArray{T}, v::CuArray{T}, o::CuArray{T},
                   dO::CuArray{T}, lse::CuArray{Float32}, dQ::CuArray{T}, dK::CuArray{T}, dV::CuArray{T};
                   attn=nothing, seq=nothing) where {T}
    t = map(device_tensor, ("q", "k", "v", "o", "dO", "lse", "dQ", "dK", "dV"), (q, k, v, o, dO, lse, dQ, dK, dV))
    check_sinks(attn, t[1], "backward!"; backward=true)
    n = FlashAttn.backward_workspace_size(h, t[1].desc, t[2].desc, t[3].desc, t[4].desc, t[6].desc; attn=attn,
                                          seq=seq)
    ws = prepare!(h, "backward!", n)
    FlashAttn.backward_device!(h, t..., ws, n; attn=attn, seq=seq)
    return (dQ, dK, dV)
end

function decode_chunk!(h::FlashAttn.Handle, q::CuArray{T}, k::CuArray{T}, v::CuArray{T}, o::CuArray{T};
                       attn=nothing, seq=nothing, lse::Union{Nothing,CuArray{Float32}}=nothing,
                       num_chunks::Integer=0) where {T}
    tq, tk, tv, to, tl = device_tensor("q", q), device_tensor("k", k), device_tensor("v", v), device_tensor("o", o),
                         device_tensor("lse", lse)
    check_sinks(attn, tq, "decode_chunk!")
    n = FlashAttn.decode_chunk_workspace_size(h, tq.desc, tk.desc, tv.desc, to.desc; attn=attn, seq=seq,
                                              lse=FlashAttn.desc_of(tl), num_chunks=num_chunks)
    ws = prepare!(h, "decode_chunk!", n)
    FlashAttn.decode_chunk_device!(h, tq, tk, tv, to, ws, n; attn=attn, seq=seq, lse=tl, num_chunks=num_chunks)
    return o
end

function merge_states!(h::FlashAttn.Handle, partial_o::CuArray{Float32}, partial_lse::CuArray{Float32}, o::CuArray;
                       lse::Union{Nothing,CuArray{Float32}}=nothing)
    tp, tpl, to, tl = device_tensor("partial_o", partial_o), device_tensor("partial_lse", partial_lse),
                      device_tensor("o", o), device_tensor("lse", lse)
    n = FlashAttn.merge_states_workspace_size(h, tp.desc, tpl.desc, to.desc; lse=FlashAttn.desc_of(tl))
    ws = prepare!(h, "merge_states!", n)
    FlashAttn.merge_states_device!(h, tp, tpl, to, ws, n; lse=tl)
    return o
end

end # module
