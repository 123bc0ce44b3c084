# Causal grouped-query attention on the HOST backend, checked against attention written out in Float64.
using FlashAttn

# Julia arrays are column-major: an array of size (headDim, seq, heads, batch) is the tensor
# [batch, heads, seq, headDim] of the library, packed with the head dimension fastest.
b, h, hk, sq, sk, d = 2, 4, 2, 3, 5, 8
q = Float32[sin(0.7 * i) for i in 0:(d * sq * h * b - 1)]
k = Float32[cos(0.3 * i + 1) for i in 0:(d * sk * hk * b - 1)]
v = Float32[sin(0.5 * i + 2) for i in 0:(d * sk * hk * b - 1)]
q, k, v = reshape(q, d, sq, h, b), reshape(k, d, sk, hk, b), reshape(v, d, sk, hk, b)
o = zeros(Float32, d, sq, h, b)
lse = zeros(Float32, sq, h, b)

handle = Handle(backend=FlashAttn.FLASHATTN_BACKEND_HOST)
attn = AttentionDescriptor(mask=FlashAttn.FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT)
forward!(handle, HostTensor(q), HostTensor(k), HostTensor(v), HostTensor(o); attn=attn, lse=HostTensor(lse))

# Reference: query i sees keys j <= i + (sk - sq); query head hq reads KV head hq / (h / hk) (0-based).
max_error = 0.0
for bi in 1:b, hq in 1:h, i in 1:sq
    kh = (hq - 1) ÷ (h ÷ hk) + 1
    visible = i + (sk - sq)
    logits = [sum(Float64(q[x, i, hq, bi]) * Float64(k[x, j, kh, bi]) for x in 1:d) / sqrt(d) for j in 1:visible]
    m = maximum(logits)
    ref_lse = m + log(sum(exp.(logits .- m)))
    global max_error = max(max_error, abs(lse[i, hq, bi] - ref_lse))
    for x in 1:d
        out = sum(exp(logits[j] - ref_lse) * Float64(v[x, j, kh, bi]) for j in 1:visible)
        global max_error = max(max_error, abs(o[x, i, hq, bi] - out))
    end
end
ok = max_error <= 1e-5
println("forward on HOST: o[1:4] = ", o[1:4])
println("max |error| against the Float64 reference = ", max_error, " (tolerance 1e-5): ", ok ? "OK" : "FAILED")
close(attn); close(handle)
ok || exit(1)
