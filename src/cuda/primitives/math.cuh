// SPDX-License-Identifier: BSD-3-Clause
// Small numeric helpers for the attention kernels: fast exp2, packing FP32 pairs into FP16/BF16 registers, and the
// reductions across the 4 lanes (a "quad") that share one row of an mma accumulator fragment.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashattn::cuda::prim {

// 2^x on the SFU (ex2.approx.ftz: relative error ~2^-22, subnormal results flushed to 0; -inf gives +0).
// Softmax uses exp(x) = exp2(x * log2 e) with log2 e folded into the scale, so one FMUL/FFMA precedes this.
__device__ __forceinline__ float exp2Fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// tanh(y) for a softcapped logit, as 1 - 2 / (2^x + 1) with x = y * 2 log2 e (the caller folds that factor into its
// scale): two SFU operations and two FP32 ones. Its absolute error is below ~1e-6 over the whole range (2^x overflows
// to inf or flushes to 0 at the ends: +-1 exactly), and absolute error is what a softcapped logit needs: it is
// multiplied by the softcap and exponentiated. tanhf spends about ten more instructions a call (a polynomial branch
// and its select) on relative accuracy near 0.
__device__ __forceinline__ float tanhOfExp2Arg(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(exp2Fast(x) + 1.f));
  return fmaf(-2.f, r, 1.f);
}

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

// The reference exponents of a softmax state are measured against: its max, or 0 for a max of -inf (nothing seen
// yet), so -inf - -inf never makes a NaN.
__device__ __forceinline__ float softmaxBase(float max) { return max == negInf() ? 0.f : max; }

// Online softmax in the exp2 domain (logit * scaleLog2): a row maximum scaled by scaleLog2 with the product rounded
// on its own, and 0 for a row with nothing visible yet (max -inf: measured against 0, every P and the correction are
// 0, not NaN). maxCorrection is the factor for what a row accumulated under oldMax once its maximum is the one
// newMaxScaled scales: both products are rounded alike, so an unmoved maximum gives exp2(0) = 1 exactly. Left to the
// compiler, old * scaleLog2 - newMaxScaled contracts into one FMA whose result is the product's rounding error, not 0:
// every key block then scales the row sum by 1 +- ~1e-7 while O, which is rescaled only when a maximum moves, keeps
// its scale; over 64k keys (512 blocks of 128) the LSE drifted by up to 5.6e-5, in proportion to the block count.
__device__ __forceinline__ float scaledMax(float max, float scaleLog2) {
  return max == negInf() ? 0.f : __fmul_rn(max, scaleLog2);
}
__device__ __forceinline__ float maxCorrection(float oldMax, float newMaxScaled, float scaleLog2) {
  return exp2Fast(__fmul_rn(oldMax, scaleLog2) - newMaxScaled);
}

// Softcap and ALiBi as the Hopper kernels apply them to a product x = q . k: the log2-domain logit,
// softcap * tanh(x * scale / softcap) * log2 e (or x * scale * log2 e) minus slope * log2 e * |j - (i + shift)|, and
// its derivative by x * scale (1 - tanh^2 with softcap, else 1). One definition for the forward (transformLogits) and
// the backward's transform form, so that the backward's P = exp2(logit - LSE log2 e) is the forward's probability.
// Callers pass the distance j - (i + shift) in FP32, formed from one conversion per row or step plus a constant per
// element: an int-to-float conversion per element would take the unit that exp2 and tanh's SFU operations share
// (exact below 2^24 keys of distance).
struct LogitTransform {
  float softcapLog2;  // softcap * log2(e), or 0 without softcap
  float tanhScale;    // scale / softcap * 2 log2(e): tanhOfExp2Arg's argument per unit of product
  float scaleLog2;    // scale * log2(e)
  float slopeLog2;    // the query head's ALiBi slope * log2(e), or 0 (the caller sets it per head)
  int32_t shift;      // seqK - seqQ of the sequence: row i's diagonal is key i + shift (bottom-right)
  static __device__ __forceinline__ LogitTransform of(float scale, float softcap, int32_t seqQ, int32_t seqK) {
    return {softcap * kLog2e, softcap > 0.f ? scale / softcap * (2.f * kLog2e) : 0.f, scale * kLog2e, 0.f,
            seqK - seqQ};
  }
  __device__ __forceinline__ float logitLog2(float x, float distance, float *derivative) const {
    if (softcapLog2 > 0.f) {
      const float t = tanhOfExp2Arg(x * tanhScale);
      x = softcapLog2 * t;
      *derivative = 1.f - t * t;
    } else {
      x = x * scaleLog2;
      *derivative = 1.f;
    }
    return x - slopeLog2 * fabsf(distance);
  }
};

// Packs (lo, hi) rounded to nearest into one 32-bit register, lo in the low half: the element order of mma fragments
// and of memory (lo at the lower address).
template <typename Element>
__device__ __forceinline__ uint32_t packFloat2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t packFloat2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

template <>
__device__ __forceinline__ uint32_t packFloat2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

// Four FP32 values rounded to nearest into four consecutive elements (a 16-byte or 8-byte store: dst aligned to it).
template <typename Element>
__device__ __forceinline__ void storeFloat4(Element *dst, float4 v) {
  if constexpr (sizeof(Element) == 4) {
    *reinterpret_cast<float4 *>(dst) = v;
  } else {
    uint2 packed;
    packed.x = packFloat2<Element>(v.x, v.y);
    packed.y = packFloat2<Element>(v.z, v.w);
    *reinterpret_cast<uint2 *>(dst) = packed;
  }
}

// Inverse of packFloat2.
template <typename Element>
__device__ __forceinline__ float2 unpackFloat2(uint32_t packed);

template <>
__device__ __forceinline__ float2 unpackFloat2<__half>(uint32_t packed) {
  return __half22float2(*reinterpret_cast<const __half2 *>(&packed));
}

template <>
__device__ __forceinline__ float2 unpackFloat2<__nv_bfloat16>(uint32_t packed) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&packed));
}

// One element of storage type Element from FP32 (rounded to nearest) and back: where a row is moved element by element.
template <typename Element>
__device__ __forceinline__ Element fromFloat(float v) {
  if constexpr (sizeof(Element) == 4)
    return v;
  else if constexpr (std::is_same_v<Element, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

template <typename Element>
__device__ __forceinline__ float toFloat(Element v) {
  if constexpr (sizeof(Element) == 4)
    return v;
  else if constexpr (std::is_same_v<Element, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}

// Max / sum over the 4 lanes of a quad (lanes 4g .. 4g+3), result in all 4. All 32 lanes must call.
__device__ __forceinline__ float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

__device__ __forceinline__ double quadMax(double v) {
  v = fmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

}  // namespace flashattn::cuda::prim
