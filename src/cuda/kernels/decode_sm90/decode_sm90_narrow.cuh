// SPDX-License-Identifier: BSD-3-Clause
// The wgmma decode for few query rows per KV head (at most kNarrowRows, e.g. absorbed MLA with 16 heads per GPU):
// the products run transposed, so the 64 keys of a tile are the wgmma M and the N query rows its N, and no MMA work
// goes to padding rows (with rows as M, 16 rows would waste three quarters of every product and make the kernel
// compute-bound on a problem that moves 2 FLOP per byte):
//   S^T = K Q^T        m64nNk16, K (A) and Q (B) from shared memory, both K-major
//   softmax            per query row, i.e. per accumulator column: the maxima cross the 4 warps through shared memory
//   O^T += V^T P^T     DV / 64 tiles of m64nNk16: V's slabs read M-major (transposed A), P [N rows][64 keys] (B)
// One consumer warpgroup holds O^T (DV / 64 x N / 2 floats a thread); a producer warp issues the tensor-map copies of
// the stages (decode_sm90_kernel.cuh's copyTile), so the next tiles stream in while this one is computed.
// Work split, mask rule, partial states and the sink's place are the split-KV decode's, as in the wide kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/decode_sm90/decode_sm90_kernel.cuh"

namespace flashattn::cuda::decode_sm90 {

constexpr uint32_t kNarrowQReady = 1;  // named barriers of the consumer warpgroup (128 threads)
constexpr uint32_t kNarrowMaxima = 2;
constexpr uint32_t kNarrowPReady = 3;
constexpr uint32_t kNarrowSums = 4;

// v combined over the 8 lanes of one quad position: the lanes holding the same rows (accumulator columns) for the
// warp's other keys.
template <typename Op>
__device__ __forceinline__ float acrossKeyLanes(float v, Op op) {
  v = op(v, __shfl_xor_sync(0xffffffffu, v, 4));
  v = op(v, __shfl_xor_sync(0xffffffffu, v, 8));
  return op(v, __shfl_xor_sync(0xffffffffu, v, 16));
}

template <typename Element, int DK, int DV, int N, bool VFromK, bool Paged>
__global__ void __launch_bounds__(kNarrowThreads, 1) decodeSm90NarrowKernel(const __grid_constant__ DecodeParams p) {
  using L = NarrowLayout<DK, DV, N, VFromK>;
  constexpr int kStages = L::kStages;
  constexpr int kJ = N / 8;  // 8-row column blocks of the accumulators
  constexpr int kMTiles = DV / 64;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  const SharedWindow<L, VFromK> window(smemRaw);
  const uint32_t sQ = window.base + L::kQ;
  const uint32_t sP = window.base + L::kP;
  float *maxima = reinterpret_cast<float *>(window.pointer + L::kReduce);  // [2 (tile parity)][4 warps][N]
  float *sums = maxima + 2 * 4 * N;                                        // [4 warps][N]

  const int warp = int(threadIdx.x) / 32;
  const int lane = int(threadIdx.x) % 32;
  if (threadIdx.x == 128) prepareStages<kStages, VFromK>(p, window.full(0), 4u);
  const decode::DecodeWork w = decode::findWork<kTileKeys, Paged>(p);
  __syncthreads();
  const int numTiles = w.numTiles;

  if (warp == 4) {
    // ---------------------------------------------------------------------------------------------------- producer
    if (lane == 0) produceTiles<kStages, VFromK, Paged>(p, w, window.k(0), L::kStageBytes, L::kKBytes, window.full(0));
    return;
  }

  // -------------------------------------------------------------------------------------------------------- consumers
  const int thread = int(threadIdx.x);
  const int quad = lane % 4;
  const int g = lane / 4;
  {  // Q as the K-major B operand (N-row slabs)
    loadQRows<Element, DK, N>(p, w, sQ, thread, 128);
    prim::cpAsyncCommit();
    prim::cpAsyncWaitAll();
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSync(kNarrowQReady, 128);
  }

  // This thread's query rows are the accumulator columns n = 8 j + 2 quad + e; its keys the rows 16 warp + g + 8 h.
  const float scaleLog2 = p.scale * prim::kLog2e;
  const bool anyMask = Mask(p.mask) != Mask::None || p.windowLeft >= 0 || p.windowRight >= 0;
  const Diagonals diagonals = visibleDiagonals(Mask(p.mask), p.windowLeft, p.windowRight, p.seqQ, w.seqLen);
  KeySpan span[kJ][2];
  float rowMax[kJ][2], rowSum[kJ][2];
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int token = (w.firstRow + 8 * j + 2 * quad + e) % p.seqQ;
      span[j][e] = anyMask ? keysOnDiagonals<KeySpan>(diagonals, token, w.seqLen) : KeySpan{0, w.seqLen - 1};
      span[j][e].hi = min(span[j][e].hi, w.keyEnd - 1);
      rowMax[j][e] = forward_sm90::negativeInfinity();
      rowSum[j][e] = 0.f;
    }
  float o[kMTiles][N / 2];
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int k = 0; k < N / 2; ++k) o[i][k] = 0.f;

  float s[N / 2];
  float correction[kJ][2];
  bool moved = false;
  auto issueS = [&](int x) {
    const int slot = x % kStages;
    prim::mbarrierWait(window.full(slot), uint32_t(x / kStages) & 1u);
    prim::wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < DK / 16; ++ks) {
      const uint64_t a = prim::wgmmaDescriptorSw128(
          window.k(slot) + uint32_t(ks / 4) * L::kTileSlab + uint32_t(ks % 4) * 32, 16, 1024);
      const uint64_t b =
          prim::wgmmaDescriptorSw128(sQ + uint32_t(ks / 4) * L::kRowSlab + uint32_t(ks % 4) * 32, 16, 1024);
      prim::WgmmaOp<Element, N>::ss(s, a, b, ks > 0 ? 1u : 0u);
    }
    prim::wgmmaCommitGroup();
  };
  // S^T of tile x (complete) -> masked, the rows' new maxima across the warps, P = exp2 in place, the sums, and the
  // factors O takes once the previous tile's P V is done.
  auto softmax = [&](int x) {
    const int key0 = w.keyBegin + x * kTileKeys;
    if (anyMask || key0 + kTileKeys > w.keyEnd) {
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + 16 * warp + g + 8 * h;
            if (key < span[j][e].lo || key > span[j][e].hi) s[4 * j + 2 * h + e] = forward_sm90::negativeInfinity();
          }
    }
    // The tile's maximum of every row: this thread's two keys, the warp's 16 (lanes of one quad position), then the
    // four warps through shared memory (buffers alternate by tile: one barrier a tile orders reads and writes).
    float *tileMaxima = maxima + (x & 1) * 4 * N;
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v =
            acrossKeyLanes(fmaxf(s[4 * j + e], s[4 * j + 2 + e]), [](float a, float b) { return fmaxf(a, b); });
        if (g == 0) tileMaxima[warp * N + 8 * j + 2 * quad + e] = v;
      }
    prim::namedBarrierSync(kNarrowMaxima, 128);
    bool anyMoved = false;
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int n = 8 * j + 2 * quad + e;
        const float tileMax =
            fmaxf(fmaxf(tileMaxima[n], tileMaxima[N + n]), fmaxf(tileMaxima[2 * N + n], tileMaxima[3 * N + n]));
        const float newMax = fmaxf(rowMax[j][e], tileMax);
        // A row with nothing visible yet keeps max -inf: measured against 0, every P and the correction are 0.
        const float newMaxScaled = prim::scaledMax(newMax, scaleLog2);
        correction[j][e] = prim::maxCorrection(rowMax[j][e], newMaxScaled, scaleLog2);
        anyMoved |= newMax != rowMax[j][e];
        rowMax[j][e] = newMax;
        float tileSum = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float pe = prim::exp2Fast(fmaf(s[4 * j + 2 * h + e], scaleLog2, -newMaxScaled));
          s[4 * j + 2 * h + e] = pe;
          tileSum += pe;
        }
        rowSum[j][e] = rowSum[j][e] * correction[j][e] + tileSum;
      }
    moved = __any_sync(0xffffffffu, anyMoved);
  };
  // V's rows of tile x past the chunk to zeros (after its S, which read them as K when V is K's), then P [row][key]
  // for the B operand: key m of row n at n * 128 + 16 ((m / 8) ^ (n % 8)) + 2 (m % 8).
  auto storeP = [&](int x) {
    const int inChunk = w.keyEnd - (w.keyBegin + x * kTileKeys);
    if (inChunk < kTileKeys) zeroTailRows<DV>(window.v(x % kStages), inChunk, thread);
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int n = 8 * j + 2 * quad + e;
          const int m = 16 * warp + g + 8 * h;
          const uint32_t address = sP + uint32_t(n * 128 + 16 * ((m >> 3) ^ (n & 7)) + 2 * (m & 7));
          const Element value = prim::fromFloat<Element>(s[4 * j + 2 * h + e]);
          asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(address), "h"(*reinterpret_cast<const uint16_t *>(&value))
                       : "memory");
        }
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSync(kNarrowPReady, 128);
  };
  auto rescale = [&] {
    if (!moved) return;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) o[i][4 * j + 2 * h + e] *= correction[j][e];
  };

  if (numTiles > 0) {
    issueS(0);
    prim::wgmmaWaitGroup<0>();
    prim::wgmmaFenceOperands(s);
    softmax(0);
    storeP(0);
  }
  auto issuePV = [&](int x) {
    rescale();
    prim::wgmmaFence();
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        const uint64_t a = prim::wgmmaDescriptorSw128(
            window.v(x % kStages) + uint32_t(i) * L::kTileSlab + uint32_t(kk) * 2048, L::kTileSlab, 1024);
        const uint64_t b = prim::wgmmaDescriptorSw128(sP + uint32_t(kk) * 32, 16, 1024);
        prim::WgmmaOp<Element, N>::template ssTransposed<1, 0>(o[i], a, b, 1u);
      }
    prim::wgmmaCommitGroup();
  };
  auto finishPV = [&](int x) {
    prim::wgmmaWaitGroup<0>();
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) prim::wgmmaFenceOperands(o[i]);
    __syncwarp();
    if (lane == 0) prim::mbarrierArrive(window.empty(x % kStages));
  };
  // Tile x's P V, its stage's release, then the next tile's S^T: the problem is bound by the stream, so a stage goes
  // back to the producer as soon as its P V is done. Issuing the next S^T first (overlapping the softmax with P V)
  // waited for the next copy before this release, and so held the copy after next back: 2750-2970 GB/s against
  // 3460-3900 on an H200 (16 heads, caches of 288 MiB and more).
#pragma unroll 1
  for (int x = 0; x + 1 < numTiles; ++x) {
    issuePV(x);
    finishPV(x);
    issueS(x + 1);
    prim::wgmmaWaitGroup<0>();
    prim::wgmmaFenceOperands(s);
    softmax(x + 1);
    storeP(x + 1);
  }
  if (numTiles > 0) {
    issuePV(numTiles - 1);
    finishPV(numTiles - 1);
  }

  // Row sums across the keys of the quad's lanes and the warps; then O (or the chunk's partial state) per element.
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float v = acrossKeyLanes(rowSum[j][e], [](float a, float b) { return a + b; });
      if (g == 0) sums[warp * N + 8 * j + 2 * quad + e] = v;
    }
  prim::namedBarrierSync(kNarrowSums, 128);
  const bool direct = int32_t(p.numChunks) == 1;
#pragma unroll
  for (int j = 0; j < kJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int n = 8 * j + 2 * quad + e;
      const int row = w.firstRow + n;
      if (row >= p.rows) continue;
      const int groupHead = row / p.seqQ;
      const int token = row - groupHead * p.seqQ;
      const int64_t head = w.headOf(p, groupHead);
      float m = rowMax[j][e] == forward_sm90::negativeInfinity() ? rowMax[j][e] : rowMax[j][e] * scaleLog2;
      float l = sums[n] + sums[N + n] + sums[2 * N + n] + sums[3 * N + n];
      float keep = 1.f;
      if (direct && p.sinks != nullptr) keep = prim::foldSink<prim::Exp2>(m, l, __ldg(p.sinks + head) * prim::kLog2e);
      const bool emptyRow = !(l > 0.f);
      const float inverse = emptyRow ? 0.f : keep / l;
      const bool writesStats = warp == 0 && g == 0;
      if (direct) {
        Element *out = static_cast<Element *>(p.o) + int64_t(w.batch) * p.oBatch + head * p.oHead +
                       int64_t(token) * p.oRow + 16 * warp + g;
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) out[64 * i + 8 * h] = prim::fromFloat<Element>(o[i][4 * j + 2 * h + e] * inverse);
        if (writesStats && p.lse != nullptr)
          p.lse[int64_t(w.batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] =
              emptyRow ? prim::negInf() : float((double(m) + double(log2f(l))) * double(prim::kLn2));
      } else {
        const int64_t stateRow = ((int64_t(w.chunk) * p.batch + w.batch) * p.heads + head) * p.seqQ + token;
        float *dst = p.partialO + stateRow * DV + 16 * warp + g;
#pragma unroll
        for (int i = 0; i < kMTiles; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) dst[64 * i + 8 * h] = o[i][4 * j + 2 * h + e] * inverse;
        if (writesStats) *reinterpret_cast<float2 *>(p.partialLse + 2 * stateRow) = make_float2(m, l);
      }
    }
}

}  // namespace flashattn::cuda::decode_sm90
