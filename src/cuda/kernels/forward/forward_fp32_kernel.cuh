// SPDX-License-Identifier: BSD-3-Clause
// The FP32-storage forward kernel: no tensor cores, no TF32. Q.K and the logits in FP64 (DFMA), P, P.V and O in FP32
// FFMA with accurate expf, so the result carries FP32-level accuracy. Same semantics and work split as the tensor-core
// kernel: one CTA per (sequence, head, BlockM query rows), key blocks outside the visible range skipped, online softmax.
//
// Thread layout: 8 lanes per query row (BlockM = Threads / 8). For S, lane `sub` of a row computes keys sub, sub + 8;
// for O it owns columns sub, sub + 8, ... Rows of the shared tiles are padded by one float so the column walks of the
// 8 lanes fall in distinct banks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/forward/forward_common.cuh"
#include "cuda/primitives/math.cuh"

namespace flashattn::cuda::forward {

__device__ __forceinline__ float fp32NegativeInfinity() { return __int_as_float(0xff800000u); }

// Reductions over the 8 lanes of one row (lanes 8r .. 8r+7 of a warp).
__device__ __forceinline__ double octetMax(double v) {
  v = fmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
  v = fmax(v, __shfl_xor_sync(0xffffffffu, v, 4));
  return v;
}

__device__ __forceinline__ float octetSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  return v;
}

// Rows x D tile into shared memory (row pitch D + 1), zeros beyond validRows / headDim.
template <int D, int Rows, int Threads>
__device__ __forceinline__ void loadTileFp32(float *tile, const float *rows, int64_t rowStride, int validRows,
                                             int headDim) {
  for (int idx = threadIdx.x; idx < Rows * D; idx += Threads) {
    const int r = idx / D;
    const int c = idx - r * D;
    tile[r * (D + 1) + c] = (r < validRows && c < headDim) ? rows[int64_t(r) * rowStride + c] : 0.f;
  }
}

// The same from a paged cache: row r at element offset offsets[2 * r] from `cache`, absent (zeros) where it is -1.
template <int D, int Rows, int Threads>
__device__ __forceinline__ void loadPagedTileFp32(float *tile, const float *cache, const int64_t *offsets,
                                                  int headDim) {
  for (int idx = threadIdx.x; idx < Rows * D; idx += Threads) {
    const int r = idx / D;
    const int c = idx - r * D;
    const int64_t offset = offsets[2 * r];
    tile[r * (D + 1) + c] = (offset >= 0 && c < headDim) ? cache[offset + c] : 0.f;
  }
}

// Paged: K/V from a paged cache through a one-block row table in shared memory (forward_common.cuh), written by one
// thread per key after the barrier that ends the previous block.
template <int D, int BlockM, int BlockN, int Warps, bool Paged>
__global__ void __launch_bounds__(Warps * 32) forwardFp32Kernel(const ForwardParams p) {
  constexpr int kThreads = Warps * 32;
  constexpr int kLanesPerRow = 8;
  static_assert(BlockM * kLanesPerRow == kThreads, "8 lanes per query row");
  static_assert(BlockN % kLanesPerRow == 0 && D % kLanesPerRow == 0, "keys and columns split over 8 lanes");
  constexpr int kKeysPerLane = BlockN / kLanesPerRow;
  constexpr int kColumnsPerLane = D / kLanesPerRow;
  constexpr int kPitch = D + 1;
  constexpr int kPPitch = BlockN + 1;

  extern __shared__ __align__(16) unsigned char ffmaShared[];
  float *sQ = reinterpret_cast<float *>(ffmaShared);
  float *sK = sQ + BlockM * kPitch;
  float *sV = sK + BlockN * kPitch;
  float *sP = sV + BlockN * kPitch;
  static_assert(!Paged || BlockN <= kThreads, "the row table takes one thread per key of a block");
  // Paged: [BlockN][K offset, V offset], 8-byte aligned after the P tile.
  int64_t *const sRowTable =
      reinterpret_cast<int64_t *>(ffmaShared + (((BlockM + 2 * BlockN) * kPitch + BlockM * kPPitch) * 4 + 7) / 8 * 8);

  const WorkItem work = decodeWorkItem(p);
  const SequenceExtent seq = sequenceExtent<Paged>(p, work.batch);
  const int m0 = work.queryBlock * BlockM;
  if (m0 >= seq.seqQ) return;
  const int rowsHere = min(BlockM, seq.seqQ - m0);

  const int row = threadIdx.x / kLanesPerRow;
  const int sub = threadIdx.x % kLanesPerRow;
  const int i = m0 + row;

  float *oRows = static_cast<float *>(p.o) + int64_t(work.batch) * p.oBatch + int64_t(work.head) * p.oHead +
                 (seq.qStart + m0) * p.oRow;
  float *lseRows = p.lse == nullptr ? nullptr
                                    : p.lse + int64_t(work.batch) * p.lseBatch + int64_t(work.head) * p.lseHead +
                                          (seq.qStart + m0) * p.lseRow;

  const RowKeys firstRow = rowKeys(p, m0, seq.seqQ, seq.seqK);
  const RowKeys lastRow = rowKeys(p, m0 + rowsHere - 1, seq.seqQ, seq.seqK);
  const BlockRange keyBlocks = blocksOf(keysOfRows(firstRow, lastRow), BlockN);
  const RowKeys myKeys = i < seq.seqQ ? rowKeys(p, i, seq.seqQ, seq.seqK) : RowKeys{0, -1};
  const int myAlignedRow = alignedRow(i, seq.seqQ, seq.seqK);

  const float *qRows = static_cast<const float *>(p.q) + int64_t(work.batch) * p.qBatch +
                       int64_t(work.head) * p.qHead + (seq.qStart + m0) * p.qRow;
  const int kvHead = work.head / p.headsPerKvHead;
  const float *kRows = static_cast<const float *>(p.k) + int64_t(work.batch) * p.kBatch +
                       int64_t(kvHead) * p.kHead + seq.kStart * p.kRow;
  const float *vRows = static_cast<const float *>(p.v) + int64_t(work.batch) * p.vBatch +
                       int64_t(kvHead) * p.vHead + seq.kStart * p.vRow;

  // Q.K and the logits are formed in FP64 (FP32 products are exact there) and only logit - max, a small number, is
  // rounded to FP32 for expf. Measured on H200 with FP32 throughout: logits of magnitude 100..400 (inputs x5, long
  // ALiBi distances) carry ~|logit| * 2^-24 rounding plus the FP32 accumulation error of the dot, which gave 1e-4..3e-4
  // absolute error in O, 5..20x the error of attention computed with FP32-rounded logits.
  const double scale = p.scale;
  const double softcap = p.softcap;
  const double scaleOverSoftcap = p.softcap > 0.f ? double(p.scale) / double(p.softcap) : 0.0;
  const double slope = alibiSlope(p, work.batch, work.head);
  const double negativeInfinity = __longlong_as_double(int64_t(0xfff0000000000000ull));

  float acc[kColumnsPerLane];
#pragma unroll
  for (int c = 0; c < kColumnsPerLane; ++c) acc[c] = 0.f;
  double rowMax = negativeInfinity;
  float rowSum = 0.f;

  if (keyBlocks.first <= keyBlocks.last) {
    loadTileFp32<D, BlockM, kThreads>(sQ, qRows, p.qRow, rowsHere, p.headDim);
    for (int n = keyBlocks.last; n >= keyBlocks.first; --n) {
      const int n0 = n * BlockN;
      __syncthreads();  // every thread is done with the previous K, V and P (and row table)
      if constexpr (Paged) {
        if (int(threadIdx.x) < BlockN)
          storeRow(p, kvHead, lookupRow(p, work.batch, n0 + int(threadIdx.x), seq.seqK), sRowTable + 2 * threadIdx.x);
        __syncthreads();
        loadPagedTileFp32<D, BlockN, kThreads>(sK, static_cast<const float *>(p.k), sRowTable, p.headDim);
        loadPagedTileFp32<D, BlockN, kThreads>(sV, static_cast<const float *>(p.v), sRowTable + 1, p.headDimV);
      } else {
        loadTileFp32<D, BlockN, kThreads>(sK, kRows + int64_t(n0) * p.kRow, p.kRow, seq.seqK - n0, p.headDim);
        loadTileFp32<D, BlockN, kThreads>(sV, vRows + int64_t(n0) * p.vRow, p.vRow, seq.seqK - n0, p.headDimV);
      }
      __syncthreads();

      double s[kKeysPerLane];
#pragma unroll
      for (int x = 0; x < kKeysPerLane; ++x) s[x] = 0.0;
#pragma unroll 8
      for (int d = 0; d < D; ++d) {
        const double qd = sQ[row * kPitch + d];
#pragma unroll
        for (int x = 0; x < kKeysPerLane; ++x)
          s[x] = fma(qd, double(sK[(sub + kLanesPerRow * x) * kPitch + d]), s[x]);
      }

      // Logits: scale, softcap, ALiBi, mask.
      double blockMax = negativeInfinity;
#pragma unroll
      for (int x = 0; x < kKeysPerLane; ++x) {
        const int j = n0 + sub + kLanesPerRow * x;
        double t = softcap > 0.0 ? softcap * tanh(s[x] * scaleOverSoftcap) : s[x] * scale;
        t -= slope * fabs(double(j - myAlignedRow));
        s[x] = (j < myKeys.lo || j > myKeys.hi) ? negativeInfinity : t;
        blockMax = fmax(blockMax, s[x]);
      }
      blockMax = octetMax(blockMax);
      const double newMax = fmax(rowMax, blockMax);
      const double shift = newMax == negativeInfinity ? 0.0 : newMax;  // keeps -inf - -inf out
      const float correction = expf(float(rowMax - shift));
      rowMax = newMax;
      float blockSum = 0.f;
#pragma unroll
      for (int x = 0; x < kKeysPerLane; ++x) {
        const float pe = expf(float(s[x] - shift));
        blockSum += pe;
        sP[row * kPPitch + sub + kLanesPerRow * x] = pe;
      }
      rowSum = rowSum * correction + blockSum;
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) acc[c] *= correction;
      __syncwarp();  // the 8 lanes of a row (one warp) exchange P through shared memory

#pragma unroll 4
      for (int key = 0; key < BlockN; ++key) {
        const float pk = sP[row * kPPitch + key];
#pragma unroll
        for (int c = 0; c < kColumnsPerLane; ++c) acc[c] = fmaf(pk, sV[key * kPitch + sub + kLanesPerRow * c], acc[c]);
      }
    }
  }

  float total = octetSum(rowSum);  // all lanes of the warp, before any of them leaves
  if (row >= rowsHere) return;
  const float keep = p.sinks ? prim::foldSink<prim::ExpNatural>(rowMax, total, double(sinkOf(p, work.head))) : 1.f;
  const bool empty = !(total > 0.f);
  const float inverse = empty ? 0.f : keep / total;
  float *oRow = oRows + int64_t(row) * p.oRow;
#pragma unroll
  for (int c = 0; c < kColumnsPerLane; ++c) {
    const int column = sub + kLanesPerRow * c;
    if (column < p.headDimV) oRow[column] = acc[c] * inverse;
  }
  if (lseRows != nullptr && sub == 0)
    lseRows[int64_t(row) * p.lseRow] = empty ? fp32NegativeInfinity() : float(rowMax + log(double(total)));
}

}  // namespace flashattn::cuda::forward
