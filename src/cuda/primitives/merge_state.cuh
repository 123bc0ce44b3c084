// SPDX-License-Identifier: BSD-3-Clause
// Softmax states and their merge: the one place where partial attention results are combined (flashAttnMergeStates'
// kernel, the split-KV decode's fused and separate merges, its cluster merge and its combine of key groups).
//
// A state of one query row over some keys is (m, l, o): m the largest logit it saw, l the sum of exp(logit - m), o
// the sum of exp(logit - m) * v over its keys (four columns here), unnormalized. A normalized partial result (LSE, O)
// is the state (LSE, 1, O). The empty state, no key seen, is (-inf, 0, 0).
//
// Merging rescales every state to the largest m, the running one included: weight exp(m_s - max). Exponents are
// measured against 0 when every m is -inf, so -inf - -inf never makes a NaN and every weight is exactly 0; an empty
// state's o must then be finite (callers whose empty states may hold anything clear o first). finish() gives the
// normalized O and the natural-log LSE, or O = 0 and LSE = -inf for the empty state.
//
// The exponential's base is a policy: natural (LSEs as the API stores them, expf/logf), or 2 for logits already
// scaled by log2 e, with the precise library functions (Exp2) or the SFU alone (Exp2Fast, the main loop's choice).
#pragma once

#include <cuda_runtime.h>

#include "cuda/primitives/math.cuh"

namespace flashattn::cuda::prim {

struct ExpNatural {
  static __device__ __forceinline__ float exp(float x) { return expf(x); }
  static __device__ __forceinline__ float log(float x) { return logf(x); }
  static __device__ __forceinline__ float reciprocal(float x) { return 1.f / x; }
  static constexpr double kToNatural = 1.0;
};

struct Exp2 {
  static __device__ __forceinline__ float exp(float x) { return exp2f(x); }
  static __device__ __forceinline__ float log(float x) { return log2f(x); }
  static __device__ __forceinline__ float reciprocal(float x) { return 1.f / x; }
  static constexpr double kToNatural = 0.6931471805599453;
};

// For sums of at least 1 (the largest state's own weight), where the approximate division and log2 are exact enough.
struct Exp2Fast {
  static __device__ __forceinline__ float exp(float x) { return exp2Fast(x); }
  static __device__ __forceinline__ float log(float x) { return __log2f(x); }
  static __device__ __forceinline__ float reciprocal(float x) { return __fdividef(1.f, x); }
  static constexpr double kToNatural = 0.6931471805599453;
};

// An attention sink is one more state: logit `sink` (in Base's units), sum 1, no value. Folds it into a row's max m
// and sum l (measured against softmaxBase(m)) and returns the factor the row's O accumulator takes. A sink of -inf
// changes nothing. Max: the type the caller keeps its max in (the FP32 forward keeps an FP64 one).
template <typename Base, typename Max>
__device__ __forceinline__ float foldSink(Max &m, float &l, Max sink) {
  const Max top = m > sink ? m : sink;  // a NaN sink stays NaN
  if (top == Max(negInf())) return 1.f;
  const float keep = Base::exp(float(m - top));  // 0 while nothing was seen
  l = l * keep + Base::exp(float(sink - top));
  m = top;
  return keep;
}

struct MergeState {
  float m = negInf();
  float l = 0.f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);

  template <typename Base>
  __device__ __forceinline__ void addSink(float sink) {
    const float keep = foldSink<Base>(m, l, sink);
    o.x *= keep, o.y *= keep, o.z *= keep, o.w *= keep;
  }

  // O normalized and the LSE in natural-log units.
  template <typename Base>
  __device__ __forceinline__ void finish(float4 &out, float &lse) const {
    out = make_float4(0.f, 0.f, 0.f, 0.f);
    lse = negInf();
    if (m != negInf()) {
      const float inv = Base::reciprocal(l);
      out = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
      // In FP64, so that the LSE is rounded once: at |LSE| ~ 1e6 two FP32 roundings (the sum, the change of base)
      // are each about an FP32 ulp of the result.
      lse = float((double(m) + double(Base::log(l))) * Base::kToNatural);
    }
  }
};

namespace detail {
// Adds N states weighted against `base`; the weights do not depend on each other or on the sums, so they all issue
// before the first addition.
template <typename Base, int N>
__device__ __forceinline__ void addWeighted(MergeState &s, float base, const float (&m)[N], const float (&l)[N],
                                            const float4 (&o)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float weight = Base::exp(m[i] - base);
    s.l += weight * l[i];
    s.o.x += weight * o[i].x, s.o.y += weight * o[i].y, s.o.z += weight * o[i].z, s.o.w += weight * o[i].w;
  }
}

template <int N>
__device__ __forceinline__ float maxOf(float start, const float (&m)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) start = fmaxf(start, m[i]);
  return start;
}
}  // namespace detail

// The merge of N states read at once: one max, then every weight independently (no chain of rescales).
template <typename Base, int N>
__device__ __forceinline__ MergeState combineStates(const float (&m)[N], const float (&l)[N], const float4 (&o)[N]) {
  MergeState s;
  s.m = detail::maxOf(negInf(), m);
  detail::addWeighted<Base>(s, softmaxBase(s.m), m, l, o);
  return s;
}

// Folds N more states into a running state: the running state is rescaled once to the new max, then the N are added.
template <typename Base, int N>
__device__ __forceinline__ void mergeStates(MergeState &s, const float (&m)[N], const float (&l)[N],
                                            const float4 (&o)[N]) {
  const float top = detail::maxOf(s.m, m);
  if (top == negInf()) return;  // nothing seen yet: the state stays empty
  const float rescale = Base::exp(s.m - top);  // 0 while the running state is empty
  s.l *= rescale;
  s.o.x *= rescale, s.o.y *= rescale, s.o.z *= rescale, s.o.w *= rescale;
  s.m = top;
  detail::addWeighted<Base>(s, top, m, l, o);
}

}  // namespace flashattn::cuda::prim
