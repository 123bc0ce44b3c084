// SPDX-License-Identifier: BSD-3-Clause
// Device pieces shared by the tensor-core and the FP32 forward kernels: which (sequence, head, query block) a CTA
// serves, the sequence's extent (ragged offsets and per-sequence KV lengths, clamped so bad offsets never address
// outside the tensors), and the visible key range of a row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/kernels/forward/forward_params.hpp"

namespace flashattn::cuda::forward {

struct WorkItem {
  int32_t batch;
  int32_t head;
  int32_t queryBlock;
};

// The 1-D grid runs query blocks fastest so the CTAs of one (sequence, head) share K/V in L2. Blocks are taken from
// the last one down: under causal masks the last query blocks see the most keys, and starting the longest work first
// shortens the tail of the launch.
__device__ __forceinline__ WorkItem decodeWorkItem(const ForwardParams &p) {
  const int64_t linear = blockIdx.x;
  const int64_t perSequence = int64_t(p.queryBlocks) * p.heads;
  WorkItem w;
  w.batch = int32_t(linear / perSequence);
  const int64_t rest = linear - int64_t(w.batch) * perSequence;
  w.head = int32_t(rest / p.queryBlocks);
  w.queryBlock = p.queryBlocks - 1 - int32_t(rest - int64_t(w.head) * p.queryBlocks);
  return w;
}

struct SequenceExtent {
  int64_t qStart;  // first row of this sequence in Q/O/LSE (ragged: token offset; dense: 0)
  int64_t kStart;  // first row in K/V
  int32_t seqQ;    // rows of this sequence
  int32_t seqK;    // keys of this sequence (after seqlensK)
};

__device__ __forceinline__ int64_t clampInt64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

__device__ __forceinline__ SequenceExtent sequenceExtent(const ForwardParams &p, int32_t b) {
  SequenceExtent e{0, 0, p.seqQ, p.seqK};
  if (p.ragged) {
    const int64_t q0 = clampInt64(p.cuSeqlensQ[b], 0, p.totalQ);
    const int64_t q1 = clampInt64(p.cuSeqlensQ[b + 1], q0, p.totalQ);
    const int64_t k0 = clampInt64(p.cuSeqlensK[b], 0, p.totalK);
    const int64_t k1 = clampInt64(p.cuSeqlensK[b + 1], k0, p.totalK);
    e.qStart = q0;
    e.kStart = k0;
    e.seqQ = int32_t(q1 - q0 < p.seqQ ? q1 - q0 : p.seqQ);
    e.seqK = int32_t(k1 - k0 < p.seqK ? k1 - k0 : p.seqK);
  }
  if (p.seqlensK != nullptr) e.seqK = int32_t(clampInt64(p.seqlensK[b], 0, e.seqK));
  return e;
}

// Visible keys [lo, hi] of row i clamped to [0, seqK - 1] (lo > hi when none), as 32-bit values.
struct RowKeys {
  int32_t lo;
  int32_t hi;
};

__device__ __forceinline__ RowKeys rowKeys(const ForwardParams &p, int64_t i, int32_t sq, int32_t sk) {
  const KeyRange r = visibleKeys(static_cast<Mask>(p.mask), p.windowLeft, p.windowRight, i, sq, sk);
  const int64_t lo = clampInt64(r.lo, 0, int64_t(sk));
  const int64_t hi = clampInt64(r.hi, -1, int64_t(sk) - 1);
  return RowKeys{int32_t(lo), int32_t(hi)};
}

// visibleKeys restated on the diagonal d = j - i: key j (0 <= j < seqK) is visible to row i iff lower <= d <= upper.
// lo = max(0, i + sk - sq - windowLeft) gives lower = sk - sq - windowLeft; hi = min(sk - 1, i [top-left],
// i + sk - sq [bottom-right], i + sk - sq + windowRight) gives upper as the minimum of 0, sk - sq, sk - sq + right.
// Both are clamped into [-sq - 1, sk], outside which d never lies, so they fit 32 bits whatever the window.
struct Diagonals {
  int32_t lower;
  int32_t upper;
};

__device__ __forceinline__ Diagonals visibleDiagonals(const ForwardParams &p, int32_t sq, int32_t sk) {
  const int64_t shift = int64_t(sk) - sq;
  int64_t lower = -int64_t(sq) - 1;
  int64_t upper = sk;
  if (p.windowLeft >= 0) lower = shift - p.windowLeft;
  if (p.mask == int32_t(Mask::CausalTopLeft)) upper = 0;
  if (p.mask == int32_t(Mask::CausalBottomRight)) upper = shift;
  if (p.windowRight >= 0 && shift + p.windowRight < upper) upper = shift + p.windowRight;
  return Diagonals{int32_t(clampInt64(lower, -int64_t(sq) - 1, sk)), int32_t(clampInt64(upper, -int64_t(sq) - 1, sk))};
}

__device__ __forceinline__ float alibiSlope(const ForwardParams &p, int32_t b, int32_t h) {
  return p.alibiSlopes == nullptr ? 0.f : p.alibiSlopes[int64_t(b) * p.alibiBatchStride + h];
}

}  // namespace flashattn::cuda::forward
