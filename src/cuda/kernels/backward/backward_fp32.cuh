// SPDX-License-Identifier: BSD-3-Clause
// The FP32-storage backward kernel: the same scheme as backward_mma.cuh (K/V block resident, walk the query blocks of
// every query head of the group, dQ added into the FP32 workspace), computed with FFMA in FP32 so the gradients keep
// FP32-level accuracy (tensor-core TF32 would not). Correctness first; FP32 attention is not the fast path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/red_global.cuh"

namespace flashattn::cuda::backward {

template <int D>
struct Fp32Backward {
  static constexpr Fp32Tile kTile = fp32TileFor(D);
  static constexpr int BlockM = kTile.blockM;
  static constexpr int BlockN = kTile.blockN;
  static constexpr int kThreads = kBackwardThreads;
  static constexpr int kRowStride = D + 1;       // odd stride: column walks of a warp hit distinct banks
  static constexpr int kPStride = BlockM + 1;
  // dK/dV: thread owns key row tid / kKvThreadsPerRow and columns tid % kKvThreadsPerRow + c * kKvThreadsPerRow.
  static constexpr int kKvThreadsPerRow = kThreads / BlockN;
  static constexpr int kKvColumns = D / kKvThreadsPerRow;
  // dQ: thread owns query row tid / kQThreadsPerRow, columns likewise.
  static constexpr int kQThreadsPerRow = kThreads / BlockM;
  static constexpr int kQColumns = D / kQThreadsPerRow;
  static_assert(kThreads % BlockN == 0 && D % kKvThreadsPerRow == 0, "dK/dV ownership");
  static_assert(kThreads % BlockM == 0 && D % kQThreadsPerRow == 0, "dQ ownership");
  static_assert((BlockM * BlockN) % kThreads == 0, "S^T ownership");

  static constexpr std::size_t kSharedBytes =
      (2 * std::size_t(BlockN + BlockM) * kRowStride + 2 * std::size_t(BlockN) * kPStride + 2 * BlockM) *
      sizeof(float);
  static_assert(kSharedBytes == fp32SharedBytes(D), "shared-memory size must match the planner's");

  // Rows [row0, row0 + Rows) of a [row][D] tile in 16-byte vectors (strides are multiples of 4 floats: the CUDA
  // backend's rule); rows >= rowLimit and columns >= headDim are zeros.
  template <int Rows>
  __device__ static __forceinline__ void loadRows(float *tile, const float *base, int64_t rowStride, int32_t row0,
                                                  int32_t rowLimit, int32_t headDim) {
    constexpr int kVectors = D / 4;
    for (int idx = int(threadIdx.x); idx < Rows * kVectors; idx += kThreads) {
      const int r = idx / kVectors;
      const int c = (idx % kVectors) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row0 + r < rowLimit && c < headDim) {
        const float *source = base + int64_t(row0 + r) * rowStride + c;
        if (c + 4 <= headDim) {
          v = *reinterpret_cast<const float4 *>(source);
        } else {  // a head dim that ends inside this vector: nothing past the row is read
          v.x = source[0];
          if (c + 1 < headDim) v.y = source[1];
          if (c + 2 < headDim) v.z = source[2];
        }
      }
      float *dst = tile + r * kRowStride + c;
      dst[0] = v.x;
      dst[1] = v.y;
      dst[2] = v.z;
      dst[3] = v.w;
    }
  }

  __device__ static __forceinline__ void kernel(const BackwardParams &p, float *smem) {
    float *sK = smem;
    float *sV = sK + BlockN * kRowStride;
    float *sQ = sV + BlockN * kRowStride;
    float *sdO = sQ + BlockM * kRowStride;
    float *sPt = sdO + BlockM * kRowStride;
    float *sdSt = sPt + BlockN * kPStride;
    float *sLse = sdSt + BlockN * kPStride;
    float *sDot = sLse + BlockM;
    const int tid = int(threadIdx.x);

    const WorkItem w = decodeWorkItem(p);
    const SequenceExtent seq = sequenceExtent(p, w.batch);
    const int32_t n0 = w.keyBlock * BlockN;
    if (n0 >= seq.rowsK) return;
    const Diagonals diagonals = diagonalsOf(p, seq.seqQ, seq.seqK);

    const BlockRange qb = queryBlocksOf(p, seq, n0, BlockM, BlockN);
    const int32_t numQBlocks = qb.first <= qb.last ? qb.last - qb.first + 1 : 0;
    const int32_t iterations = numQBlocks * p.headsPerKvHead;
    const int32_t firstHead = w.kvHead * p.headsPerKvHead;
    // Query blocks ascending: with deterministic mode's descending turns (turnOrderOf) the key block after this one,
    // whose range starts higher, reaches each block first.
    const TurnOrder turns = p.deterministic ? turnOrderOf(p, seq, w.keyBlock, n0, BlockM, BlockN) : TurnOrder{};

    const float *kBase = static_cast<const float *>(p.k) + int64_t(w.batch) * p.kBatch + int64_t(w.kvHead) * p.kHead +
                         seq.kStart * p.kRow;
    const float *vBase = static_cast<const float *>(p.v) + int64_t(w.batch) * p.vBatch + int64_t(w.kvHead) * p.vHead +
                         seq.kStart * p.vRow;
    if (iterations > 0) {
      loadRows<BlockN>(sK, kBase, p.kRow, n0, seq.seqK, p.headDim);
      loadRows<BlockN>(sV, vBase, p.vRow, n0, seq.seqK, p.headDimV);
    }

    const int kvRow = tid / kKvThreadsPerRow;
    const int kvCol = tid % kKvThreadsPerRow;
    float accdK[kKvColumns], accdV[kKvColumns];
#pragma unroll
    for (int c = 0; c < kKvColumns; ++c) {
      accdK[c] = 0.f;
      accdV[c] = 0.f;
    }
    const float scaleLog2 = p.scale * 1.4426950408889634f;

    for (int32_t it = 0; it < iterations; ++it) {
      const int32_t h = firstHead + it / numQBlocks;
      const int32_t mBlock = qb.first + it % numQBlocks;
      const int32_t m0 = mBlock * BlockM;
      __syncthreads();  // the previous iteration's reads of Q, dO, P^T, dS^T are done
      const float *qBase = static_cast<const float *>(p.q) + int64_t(w.batch) * p.qBatch + int64_t(h) * p.qHead +
                           seq.qStart * p.qRow;
      const float *dOBase = static_cast<const float *>(p.dO) + int64_t(w.batch) * p.dOBatch + int64_t(h) * p.dOHead +
                            seq.qStart * p.dORow;
      loadRows<BlockM>(sQ, qBase, p.qRow, m0, seq.seqQ, p.headDim);
      loadRows<BlockM>(sdO, dOBase, p.dORow, m0, seq.seqQ, p.headDimV);
      if (tid < BlockM) {
        const bool valid = m0 + tid < seq.seqQ;
        const int64_t row = workspaceRow(p, w.batch, h, seq, m0 + tid);
        sLse[tid] = valid ? p.lseLog2[row] : 0.f;
        sDot[tid] = valid ? p.rowDot[row] : 0.f;
      }
      __syncthreads();

      const bool fullyVisible = blockFullyVisible(diagonals, m0, n0, BlockM, BlockN, seq.seqQ, seq.seqK);
      const float slopeLog2 = alibiSlope(p, w.batch, h) * 1.4426950408889634f;
      for (int idx = tid; idx < BlockN * BlockM; idx += kThreads) {
        const int n = idx / BlockM;
        const int m = idx % BlockM;
        float dot = 0.f, dp = 0.f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) {
          dot = fmaf(sK[n * kRowStride + d], sQ[m * kRowStride + d], dot);
          dp = fmaf(sV[n * kRowStride + d], sdO[m * kRowStride + d], dp);
        }
        const int32_t i = m0 + m, j = n0 + n;
        float logitLog2, dLogit;
        if (p.softcap > 0.f) {
          const float t = tanhf(dot * p.scale / p.softcap);
          logitLog2 = p.softcap * t * 1.4426950408889634f;
          dLogit = p.scale * (1.f - t * t);
        } else {
          logitLog2 = dot * scaleLog2;
          dLogit = p.scale;
        }
        if (p.alibiSlopes != nullptr) logitLog2 -= slopeLog2 * fabsf(float(j - alignedRow(i, seq.seqQ, seq.seqK)));
        // The row form of the rule, whose range the one-key test below shares.
        bool visible = fullyVisible, oneKey = false;
        if (!fullyVisible && i < seq.seqQ) {
          const RowKeys r = rowKeys(diagonals, i, seq.seqK);
          visible = j < seq.seqK && j >= r.lo && j <= r.hi;
          // A row that sees one key has P = 1 whatever its logit: its dS is exactly zero, not dP - D's rounding.
          oneKey = r.lo == r.hi && p.sinks == nullptr;  // a sink shares the row's softmax: P < 1
        }
        // LSE of a row with no visible key is +inf: exp2(-inf) = 0, never NaN.
        const float prob = visible ? exp2f(logitLog2 - sLse[m]) : 0.f;
        sPt[n * kPStride + m] = prob;
        sdSt[n * kPStride + m] = oneKey ? 0.f : prob * (dp - sDot[m]) * dLogit;
      }
      __syncthreads();

#pragma unroll 4
      for (int m = 0; m < BlockM; ++m) {
        const float prob = sPt[kvRow * kPStride + m];
        const float ds = sdSt[kvRow * kPStride + m];
#pragma unroll
        for (int c = 0; c < kKvColumns; ++c) {
          const int d = kvCol + c * kKvThreadsPerRow;
          accdV[c] = fmaf(prob, sdO[m * kRowStride + d], accdV[c]);
          accdK[c] = fmaf(ds, sQ[m * kRowStride + d], accdK[c]);
        }
      }

      const int qRow = tid / kQThreadsPerRow;
      const int qCol = tid % kQThreadsPerRow;
      float accdQ[kQColumns];
#pragma unroll
      for (int c = 0; c < kQColumns; ++c) accdQ[c] = 0.f;
#pragma unroll 4
      for (int n = 0; n < BlockN; ++n) {
        const float ds = sdSt[n * kPStride + qRow];
#pragma unroll
        for (int c = 0; c < kQColumns; ++c) accdQ[c] = fmaf(ds, sK[n * kRowStride + qCol + c * kQThreadsPerRow], accdQ[c]);
      }
      int32_t *turn = nullptr;
      if (p.deterministic) {
        turn = dqTurnCounter(p, w.batch, h, mBlock);
        waitForTurn(turn, turns, mBlock);
      }
      if (m0 + qRow < seq.seqQ) {
        float *dqRow = p.dqAccum + workspaceRow(p, w.batch, h, seq, m0 + qRow) * p.dqPitch;
#pragma unroll
        for (int c = 0; c < kQColumns; ++c) {
          const int d = qCol + c * kQThreadsPerRow;
          if (d < p.headDim) prim::redAddFloat(dqRow + d, accdQ[c]);
        }
      }
      if (p.deterministic) passTurn(turn, turns);
    }

    const int32_t j = n0 + kvRow;
    if (j < seq.rowsK) {
      float *dK = static_cast<float *>(p.dK) + int64_t(w.batch) * p.dKBatch + int64_t(w.kvHead) * p.dKHead +
                  (seq.kStart + j) * p.dKRow;
      float *dV = static_cast<float *>(p.dV) + int64_t(w.batch) * p.dVBatch + int64_t(w.kvHead) * p.dVHead +
                  (seq.kStart + j) * p.dVRow;
#pragma unroll
      for (int c = 0; c < kKvColumns; ++c) {
        const int d = kvCol + c * kKvThreadsPerRow;
        if (d < p.headDim) dK[d] = accdK[c];
        if (d < p.headDimV) dV[d] = accdV[c];
      }
    }
  }
};

template <int D>
__global__ void __launch_bounds__(kBackwardThreads) backwardFp32Kernel(const __grid_constant__ BackwardParams p) {
  extern __shared__ __align__(16) float smemFp32[];
  Fp32Backward<D>::kernel(p, smemFp32);
}

template <int D>
cudaError_t launchFp32Instance(const BackwardParams &p, cudaStream_t stream) {
  using Kernel = Fp32Backward<D>;
  auto *kernel = &backwardFp32Kernel<D>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kernel::kSharedBytes));
  if (err != cudaSuccess) return err;
  const int64_t blocks = int64_t(p.keyBlocks) * p.kvHeads * p.batch;
  if (blocks == 0) return cudaSuccess;
  void *args[] = {const_cast<BackwardParams *>(&p)};
  return cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(unsigned(blocks)), dim3(kBackwardThreads),
                          args, Kernel::kSharedBytes, stream);
}

}  // namespace flashattn::cuda::backward
