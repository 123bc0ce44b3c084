// The tensor-core backward kernel (FP16/BF16 storage, sm80+): FlashAttention-2's scheme with mma.sync m16n8k16.
//
// One CTA owns key block [n0, n0 + BlockN) of one KV head: K and V stay in shared memory, dK and dV accumulate in FP32
// registers, and the CTA walks the query blocks that can see its keys, for every query head of the KV head's group
// (so GQA/MQA gradients are summed on chip, in a fixed order). Per query block:
//   S^T = K Q^T and dP^T = V dO^T (keys are rows: P^T and dS^T come out in the layout dV and dK consume),
//   P^T = exp2(S^T * scale * log2 e - LSE * log2 e), dS^T = P^T * (dP^T - D) * dLogit/dDot, both rounded to the
//   storage type into shared memory,
//   dV += P^T dO, dK += dS^T Q, and dQ = dS K added in FP32 to the workspace (atomics; ordered in deterministic mode).
// The scale (and the softcap derivative) is folded into dS, so dK and dQ need no later rescaling.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/cp_async_scalar.cuh"
#include "cuda/primitives/primitives.cuh"

namespace flashattn::cuda::backward {

// A shared-memory tile of 16-bit elements, Rows x Cols, XOR-swizzled by 16-byte chunks (see swizzle.cuh).
template <int Rows, int Cols>
struct Tile16 {
  static constexpr int kChunks = Cols / 8;
  static constexpr int kElements = Rows * Cols;
  __device__ static __forceinline__ int chunkOffset(int row, int chunk) {
    return row * Cols + prim::swizzleChunk<kChunks>(row, chunk) * 8;
  }
  // column may lie inside a chunk; pairs (column even) stay inside it.
  __device__ static __forceinline__ int offset(int row, int column) {
    return chunkOffset(row, column >> 3) + (column & 7);
  }
};

template <typename Element, int D, int BlockM, int BlockN, int SdpWarpsN, int DkvWarpsN, int DqWarpsM,
          bool DoubleBuffer>
struct MmaBackward {
  static constexpr int kThreads = kBackwardThreads;
  static constexpr int kWarps = kBackwardWarps;
  static constexpr int kStages = DoubleBuffer ? 2 : 1;

  using TileKV = Tile16<BlockN, D>;
  using TileQ = Tile16<BlockM, D>;
  using TileP = Tile16<BlockN, BlockM>;

  // S^T / dP^T warp tiles: BlockN x BlockM split SdpWarpsN (keys) x kSdpWarpsM (queries).
  static constexpr int kSdpWarpsM = kWarps / SdpWarpsN;
  static constexpr int kSdpTileN = BlockN / SdpWarpsN;
  static constexpr int kSdpTileM = BlockM / kSdpWarpsM;
  static constexpr int kSdpMTiles = kSdpTileN / 16;
  static constexpr int kSdpNTiles = kSdpTileM / 8;
  // dK / dV warp tiles: BlockN x D split DkvWarpsN x kDkvWarpsD.
  static constexpr int kDkvWarpsD = kWarps / DkvWarpsN;
  static constexpr int kDkvTileN = BlockN / DkvWarpsN;
  static constexpr int kDkvTileD = D / kDkvWarpsD;
  static constexpr int kDkvMTiles = kDkvTileN / 16;
  static constexpr int kDkvNTiles = kDkvTileD / 8;
  // dQ warp tiles: BlockM x D split DqWarpsM x kDqWarpsD.
  static constexpr int kDqWarpsD = kWarps / DqWarpsM;
  static constexpr int kDqTileM = BlockM / DqWarpsM;
  static constexpr int kDqTileD = D / kDqWarpsD;
  static constexpr int kDqMTiles = kDqTileM / 16;
  static constexpr int kDqNTiles = kDqTileD / 8;

  static_assert(kWarps % SdpWarpsN == 0 && kWarps % DkvWarpsN == 0 && kWarps % DqWarpsM == 0, "warp splits");
  static_assert(kSdpTileN % 16 == 0 && kSdpTileM % 8 == 0 && kSdpTileN * SdpWarpsN == BlockN &&
                    kSdpTileM * kSdpWarpsM == BlockM,
                "S^T warp tile");
  static_assert(kDkvTileN % 16 == 0 && kDkvTileD % 16 == 0 && kDkvTileD * kDkvWarpsD == D, "dK/dV warp tile");
  static_assert(kDqTileM % 16 == 0 && kDqTileD % 16 == 0 && kDqTileD * kDqWarpsD == D, "dQ warp tile");
  static_assert(BlockM % 16 == 0 && BlockN % 16 == 0 && D % 16 == 0, "tile multiples of 16");

  static constexpr std::size_t kSharedBytes =
      (2 * std::size_t(TileKV::kElements) + 2 * kStages * std::size_t(TileQ::kElements) +
       2 * std::size_t(TileP::kElements)) * sizeof(Element) +
      2 * kStages * std::size_t(BlockM) * sizeof(float);
  static_assert(kSharedBytes == mmaSharedBytes(MmaTile{BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer}, D),
                "shared-memory size must match the planner's");

  struct Shared {
    Element *k, *v, *q, *dO, *pT, *dsT;
    float *lseLog2, *rowDot;
  };

  __device__ static __forceinline__ Shared carve(unsigned char *raw) {
    Shared s;
    s.k = reinterpret_cast<Element *>(raw);
    s.v = s.k + TileKV::kElements;
    s.q = s.v + TileKV::kElements;
    s.dO = s.q + kStages * TileQ::kElements;
    s.pT = s.dO + kStages * TileQ::kElements;
    s.dsT = s.pT + TileP::kElements;
    s.lseLog2 = reinterpret_cast<float *>(s.dsT + TileP::kElements);
    s.rowDot = s.lseLog2 + kStages * BlockM;
    return s;
  }

  // Rows [row0, row0 + Rows) of a [row][D] tile; rows >= rowLimit and columns >= headDim arrive as zeros.
  template <class Tile, int Rows>
  __device__ static __forceinline__ void loadRows(Element *tile, const Element *base, int64_t rowStride, int32_t row0,
                                                  int32_t rowLimit, int32_t headDim) {
    constexpr int kChunks = Tile::kChunks;
    constexpr int kTotal = Rows * kChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
      const int idx = it * kThreads + int(threadIdx.x);
      if (kTotal % kThreads == 0 || idx < kTotal) {
        const int r = idx / kChunks;
        const int c = idx % kChunks;
        const bool valid = row0 + r < rowLimit && c * 8 < headDim;
        const Element *src = valid ? base + int64_t(row0 + r) * rowStride + c * 8 : base;
        prim::cpAsync16(prim::smemAddress(tile + Tile::chunkOffset(r, c)), src, valid);
      }
    }
  }

  __device__ static __forceinline__ void kernel(const BackwardParams &p, unsigned char *smemRaw) {
    const Shared sm = carve(smemRaw);
    const int tid = int(threadIdx.x);
    const int warp = tid / 32;
    const int lane = tid % 32;

    const WorkItem w = decodeWorkItem(p);
    const SequenceExtent seq = sequenceExtent(p, w.batch);
    const int32_t n0 = w.keyBlock * BlockN;
    if (n0 >= seq.rowsK) return;  // this sequence has no such key block (ragged or short batch entries)

    const QueryBlocks qb = queryBlocksOf(p, seq, n0, BlockM, BlockN);
    const int32_t numQBlocks = qb.first <= qb.last ? qb.last - qb.first + 1 : 0;
    const int32_t iterations = numQBlocks * p.headsPerKvHead;
    const int32_t firstHead = w.kvHead * p.headsPerKvHead;

    // Deterministic mode: the query blocks this CTA adds into first (its predecessor key block does not see them).
    int32_t predecessorLast = -1;
    if (p.deterministic && w.keyBlock > 0) {
      const QueryBlocks prev = queryBlocksOf(p, seq, n0 - BlockN, BlockM, BlockN);
      predecessorLast = prev.first <= prev.last ? prev.last : -1;
    }

    const Element *kBase = static_cast<const Element *>(p.k) + int64_t(w.batch) * p.kBatch +
                           int64_t(w.kvHead) * p.kHead + seq.kStart * p.kRow;
    const Element *vBase = static_cast<const Element *>(p.v) + int64_t(w.batch) * p.vBatch +
                           int64_t(w.kvHead) * p.vHead + seq.kStart * p.vRow;

    float accdK[kDkvMTiles][kDkvNTiles][4];
    float accdV[kDkvMTiles][kDkvNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kDkvMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kDkvNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          accdK[mt][nt][e] = 0.f;
          accdV[mt][nt][e] = 0.f;
        }

    if (iterations > 0) {
      loadRows<TileKV, BlockN>(sm.k, kBase, p.kRow, n0, seq.seqK, p.headDim);
      loadRows<TileKV, BlockN>(sm.v, vBase, p.vRow, n0, seq.seqK, p.headDim);
      prim::cpAsyncCommit();
      loadQueryBlock(p, sm, seq, w, qb.first, numQBlocks, firstHead, 0, 0);
      prim::cpAsyncCommit();
    }

    const float scaleLog2 = p.scale * prim::kLog2e;
    const bool softcap = p.softcap > 0.f;

    for (int32_t it = 0; it < iterations; ++it) {
      const int stage = DoubleBuffer ? (it & 1) : 0;
      const int32_t h = firstHead + it / numQBlocks;
      const int32_t mBlock = qb.first + it % numQBlocks;
      const int32_t m0 = mBlock * BlockM;

      prim::cpAsyncWait<0>();
      __syncthreads();  // this stage's tiles are visible; every warp is done with the previous iteration
      if (DoubleBuffer && it + 1 < iterations) {
        loadQueryBlock(p, sm, seq, w, qb.first, numQBlocks, firstHead, it + 1, stage ^ 1);
        prim::cpAsyncCommit();
      }

      const Element *sQ = sm.q + stage * TileQ::kElements;
      const Element *sdO = sm.dO + stage * TileQ::kElements;
      const float *sLse = sm.lseLog2 + stage * BlockM;
      const float *sDot = sm.rowDot + stage * BlockM;

      // ---- S^T = K Q^T, dP^T = V dO^T -------------------------------------------------------------------------
      const int sdpRow0 = (warp / kSdpWarpsM) * kSdpTileN;
      const int sdpCol0 = (warp % kSdpWarpsM) * kSdpTileM;
      float accS[kSdpMTiles][kSdpNTiles][4];
      float accdP[kSdpMTiles][kSdpNTiles][4];
#pragma unroll
      for (int mt = 0; mt < kSdpMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSdpNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            accS[mt][nt][e] = 0.f;
            accdP[mt][nt][e] = 0.f;
          }
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t aK[kSdpMTiles][4], aV[kSdpMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kSdpMTiles; ++mt) {
          const int row = sdpRow0 + mt * 16 + (lane & 15);
          const int chunk = ks * 2 + (lane >> 4);
          prim::ldmatrixX4(aK[mt], prim::smemAddress(sm.k + TileKV::chunkOffset(row, chunk)));
          prim::ldmatrixX4(aV[mt], prim::smemAddress(sm.v + TileKV::chunkOffset(row, chunk)));
        }
#pragma unroll
        for (int np = 0; np < kSdpNTiles / 2; ++np) {
          // B[k = dim][n = query] = Q[query][dim]: rows of Q are the columns of B, no transpose.
          const int row = sdpCol0 + np * 16 + ((lane >> 4) << 3) + (lane & 7);
          const int chunk = ks * 2 + ((lane >> 3) & 1);
          uint32_t bQ[4], bdO[4];
          prim::ldmatrixX4(bQ, prim::smemAddress(sQ + TileQ::chunkOffset(row, chunk)));
          prim::ldmatrixX4(bdO, prim::smemAddress(sdO + TileQ::chunkOffset(row, chunk)));
          const uint32_t bQ0[2] = {bQ[0], bQ[1]}, bQ1[2] = {bQ[2], bQ[3]};
          const uint32_t bdO0[2] = {bdO[0], bdO[1]}, bdO1[2] = {bdO[2], bdO[3]};
#pragma unroll
          for (int mt = 0; mt < kSdpMTiles; ++mt) {
            prim::mmaM16N8K16<Element>(accS[mt][2 * np], aK[mt], bQ0);
            prim::mmaM16N8K16<Element>(accS[mt][2 * np + 1], aK[mt], bQ1);
            prim::mmaM16N8K16<Element>(accdP[mt][2 * np], aV[mt], bdO0);
            prim::mmaM16N8K16<Element>(accdP[mt][2 * np + 1], aV[mt], bdO1);
          }
        }
        if constexpr (kSdpNTiles % 2 == 1) {
          const int row = sdpCol0 + (kSdpNTiles - 1) * 8 + (lane & 7);
          const int chunk = ks * 2 + ((lane >> 3) & 1);
          uint32_t bQ[2], bdO[2];
          prim::ldmatrixX2(bQ, prim::smemAddress(sQ + TileQ::chunkOffset(row, chunk)));
          prim::ldmatrixX2(bdO, prim::smemAddress(sdO + TileQ::chunkOffset(row, chunk)));
#pragma unroll
          for (int mt = 0; mt < kSdpMTiles; ++mt) {
            prim::mmaM16N8K16<Element>(accS[mt][kSdpNTiles - 1], aK[mt], bQ);
            prim::mmaM16N8K16<Element>(accdP[mt][kSdpNTiles - 1], aV[mt], bdO);
          }
        }
      }

      // ---- P^T and dS^T, rounded to the storage type into shared memory ----------------------------------------
      {
        const bool fullyVisible = blockFullyVisible(p, m0, n0, BlockM, BlockN, seq.seqQ, seq.seqK);
        const float slopeLog2 = alibiSlope(p, w.batch, h) * prim::kLog2e;
        const int32_t shift = seq.seqK - seq.seqQ;
#pragma unroll
        for (int mt = 0; mt < kSdpMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < kSdpNTiles; ++nt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int nLocal = sdpRow0 + mt * 16 + (lane >> 2) + half * 8;
              const int mLocal = sdpCol0 + nt * 8 + 2 * (lane & 3);
              const int32_t j = n0 + nLocal;
              float pv[2], ds[2];
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const int32_t i = m0 + mLocal + c;
                const float dot = accS[mt][nt][2 * half + c];
                float logitLog2, dLogit;
                if (softcap) {
                  const float t = tanhf(dot * p.scale / p.softcap);
                  logitLog2 = p.softcap * t * prim::kLog2e;
                  dLogit = p.scale * (1.f - t * t);
                } else {
                  logitLog2 = dot * scaleLog2;
                  dLogit = p.scale;
                }
                if (p.alibiSlopes != nullptr) logitLog2 -= slopeLog2 * fabsf(float(j - (i + shift)));
                if (!fullyVisible && !isVisible(p, i, j, seq.seqQ, seq.seqK)) logitLog2 = -INFINITY;
                // LSE of a row with no visible key is +inf here, so its probabilities are exactly 0.
                pv[c] = prim::exp2Fast(logitLog2 - sLse[mLocal + c]);
                ds[c] = pv[c] * (accdP[mt][nt][2 * half + c] - sDot[mLocal + c]) * dLogit;
              }
              *reinterpret_cast<uint32_t *>(sm.pT + TileP::offset(nLocal, mLocal)) =
                  prim::packFloat2<Element>(pv[0], pv[1]);
              *reinterpret_cast<uint32_t *>(sm.dsT + TileP::offset(nLocal, mLocal)) =
                  prim::packFloat2<Element>(ds[0], ds[1]);
            }
      }
      __syncthreads();

      // ---- dV += P^T dO, dK += dS^T Q -------------------------------------------------------------------------
      {
        const int row0 = (warp / kDkvWarpsD) * kDkvTileN;
        const int col0 = (warp % kDkvWarpsD) * kDkvTileD;
#pragma unroll
        for (int ks = 0; ks < BlockM / 16; ++ks) {
          uint32_t aP[kDkvMTiles][4], aS[kDkvMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kDkvMTiles; ++mt) {
            const int row = row0 + mt * 16 + (lane & 15);
            const int chunk = ks * 2 + (lane >> 4);
            prim::ldmatrixX4(aP[mt], prim::smemAddress(sm.pT + TileP::chunkOffset(row, chunk)));
            prim::ldmatrixX4(aS[mt], prim::smemAddress(sm.dsT + TileP::chunkOffset(row, chunk)));
          }
#pragma unroll
          for (int np = 0; np < kDkvNTiles / 2; ++np) {
            // B[k = query][n = dim] = dO[query][dim]: stored with k as rows, so transpose on load.
            const int row = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            const int chunk = (col0 + np * 16) / 8 + (lane >> 4);
            uint32_t bdO[4], bQ[4];
            prim::ldmatrixX4Trans(bdO, prim::smemAddress(sdO + TileQ::chunkOffset(row, chunk)));
            prim::ldmatrixX4Trans(bQ, prim::smemAddress(sQ + TileQ::chunkOffset(row, chunk)));
            const uint32_t bdO0[2] = {bdO[0], bdO[1]}, bdO1[2] = {bdO[2], bdO[3]};
            const uint32_t bQ0[2] = {bQ[0], bQ[1]}, bQ1[2] = {bQ[2], bQ[3]};
#pragma unroll
            for (int mt = 0; mt < kDkvMTiles; ++mt) {
              prim::mmaM16N8K16<Element>(accdV[mt][2 * np], aP[mt], bdO0);
              prim::mmaM16N8K16<Element>(accdV[mt][2 * np + 1], aP[mt], bdO1);
              prim::mmaM16N8K16<Element>(accdK[mt][2 * np], aS[mt], bQ0);
              prim::mmaM16N8K16<Element>(accdK[mt][2 * np + 1], aS[mt], bQ1);
            }
          }
        }
      }

      // ---- dQ = dS K, added into the FP32 workspace -----------------------------------------------------------
      {
        const int row0 = (warp / kDqWarpsD) * kDqTileM;
        const int col0 = (warp % kDqWarpsD) * kDqTileD;
        float accdQ[kDqMTiles][kDqNTiles][4];
#pragma unroll
        for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < kDqNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) accdQ[mt][nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < BlockN / 16; ++ks) {
          uint32_t aS[kDqMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kDqMTiles; ++mt) {
            // A[m = query][k = key] = dS^T[key][query]: transpose on load.
            const int row = ks * 16 + ((lane >> 4) << 3) + (lane & 7);
            const int chunk = (row0 + mt * 16) / 8 + ((lane >> 3) & 1);
            prim::ldmatrixX4Trans(aS[mt], prim::smemAddress(sm.dsT + TileP::chunkOffset(row, chunk)));
          }
#pragma unroll
          for (int np = 0; np < kDqNTiles / 2; ++np) {
            const int row = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            const int chunk = (col0 + np * 16) / 8 + (lane >> 4);
            uint32_t bK[4];
            prim::ldmatrixX4Trans(bK, prim::smemAddress(sm.k + TileKV::chunkOffset(row, chunk)));
            const uint32_t bK0[2] = {bK[0], bK[1]}, bK1[2] = {bK[2], bK[3]};
#pragma unroll
            for (int mt = 0; mt < kDqMTiles; ++mt) {
              prim::mmaM16N8K16<Element>(accdQ[mt][2 * np], aS[mt], bK0);
              prim::mmaM16N8K16<Element>(accdQ[mt][2 * np + 1], aS[mt], bK1);
            }
          }
        }

        int32_t *turn = nullptr;
        if (p.deterministic) {
          turn = p.dqTurn + (int64_t(w.batch) * p.heads + h) * p.queryBlocks + mBlock;
          waitForTurn(turn, w.keyBlock, mBlock > predecessorLast);
        }
        float *dqRows = p.dqAccum + workspaceRow(p, w.batch, h, seq, m0) * p.headDim;
#pragma unroll
        for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int m = row0 + mt * 16 + (lane >> 2) + half * 8;
            if (m0 + m < seq.seqQ) {
#pragma unroll
              for (int nt = 0; nt < kDqNTiles; ++nt) {
                const int d = col0 + nt * 8 + 2 * (lane & 3);
                if (d < p.headDim) {
                  float *target = dqRows + int64_t(m) * p.headDim + d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                  atomicAdd(reinterpret_cast<float2 *>(target),
                            make_float2(accdQ[mt][nt][2 * half], accdQ[mt][nt][2 * half + 1]));
#else
                  atomicAdd(target, accdQ[mt][nt][2 * half]);
                  atomicAdd(target + 1, accdQ[mt][nt][2 * half + 1]);
#endif
                }
              }
            }
          }
        if (p.deterministic) passTurn(turn, w.keyBlock);
      }

      if (!DoubleBuffer && it + 1 < iterations) {
        __syncthreads();  // every warp is done reading Q and dO of this block
        loadQueryBlock(p, sm, seq, w, qb.first, numQBlocks, firstHead, it + 1, 0);
        prim::cpAsyncCommit();
      }
    }

    // ---- dK, dV: FP32 accumulators -> storage type ------------------------------------------------------------
    Element *dKBase = static_cast<Element *>(p.dK) + int64_t(w.batch) * p.dKBatch + int64_t(w.kvHead) * p.dKHead +
                      seq.kStart * p.dKRow;
    Element *dVBase = static_cast<Element *>(p.dV) + int64_t(w.batch) * p.dVBatch + int64_t(w.kvHead) * p.dVHead +
                      seq.kStart * p.dVRow;
    const int row0 = (warp / kDkvWarpsD) * kDkvTileN;
    const int col0 = (warp % kDkvWarpsD) * kDkvTileD;
#pragma unroll
    for (int mt = 0; mt < kDkvMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t j = n0 + row0 + mt * 16 + (lane >> 2) + half * 8;
        if (j < seq.rowsK) {
#pragma unroll
          for (int nt = 0; nt < kDkvNTiles; ++nt) {
            const int d = col0 + nt * 8 + 2 * (lane & 3);
            if (d < p.headDim) {
              *reinterpret_cast<uint32_t *>(dKBase + int64_t(j) * p.dKRow + d) =
                  prim::packFloat2<Element>(accdK[mt][nt][2 * half], accdK[mt][nt][2 * half + 1]);
              *reinterpret_cast<uint32_t *>(dVBase + int64_t(j) * p.dVRow + d) =
                  prim::packFloat2<Element>(accdV[mt][nt][2 * half], accdV[mt][nt][2 * half + 1]);
            }
          }
        }
      }
  }

  // Issues the cp.async copies of iteration `it` (query head, query block) into `stage`: Q and dO rows, LSE * log2 e
  // and D of the rows. Rows past the sequence arrive as zeros (their keys are masked, so they contribute nothing).
  __device__ static __forceinline__ void loadQueryBlock(const BackwardParams &p, const Shared &sm,
                                                        const SequenceExtent &seq, const WorkItem &w,
                                                        int32_t firstQBlock, int32_t numQBlocks, int32_t firstHead,
                                                        int32_t it, int stage) {
    const int32_t h = firstHead + it / numQBlocks;
    const int32_t m0 = (firstQBlock + it % numQBlocks) * BlockM;
    const Element *qBase = static_cast<const Element *>(p.q) + int64_t(w.batch) * p.qBatch + int64_t(h) * p.qHead +
                           seq.qStart * p.qRow;
    const Element *dOBase = static_cast<const Element *>(p.dO) + int64_t(w.batch) * p.dOBatch +
                            int64_t(h) * p.dOHead + seq.qStart * p.dORow;
    loadRows<TileQ, BlockM>(sm.q + stage * TileQ::kElements, qBase, p.qRow, m0, seq.seqQ, p.headDim);
    loadRows<TileQ, BlockM>(sm.dO + stage * TileQ::kElements, dOBase, p.dORow, m0, seq.seqQ, p.headDim);
    const int tid = int(threadIdx.x);
    if (tid < 2 * BlockM) {
      const int r = tid % BlockM;
      const bool valid = m0 + r < seq.seqQ;
      const int64_t row = workspaceRow(p, w.batch, h, seq, valid ? m0 + r : 0);
      const float *src = tid < BlockM ? p.lseLog2 + row : p.rowDot + row;
      float *dst = (tid < BlockM ? sm.lseLog2 : sm.rowDot) + stage * BlockM + r;
      prim::cpAsync4(prim::smemAddress(dst), src, valid);
    }
  }
};

template <typename Element, int D, int BlockM, int BlockN, int SdpWarpsN, int DkvWarpsN, int DqWarpsM,
          bool DoubleBuffer>
__global__ void __launch_bounds__(kBackwardThreads, 1) backwardMmaKernel(const __grid_constant__ BackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  MmaBackward<Element, D, BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer>::kernel(p, smem);
}

template <typename Element, int D, int TileIndex>
cudaError_t launchMmaTile(const BackwardParams &p, cudaStream_t stream) {
  constexpr MmaTile t = mmaTilesFor(D).tiles[TileIndex];
  using Kernel = MmaBackward<Element, D, t.blockM, t.blockN, t.sdpWarpsN, t.dkvWarpsN, t.dqWarpsM, t.doubleBuffer>;
  auto *kernel = &backwardMmaKernel<Element, D, t.blockM, t.blockN, t.sdpWarpsN, t.dkvWarpsN, t.dqWarpsM,
                                    t.doubleBuffer>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kernel::kSharedBytes));
  if (err != cudaSuccess) return err;
  const int64_t blocks = int64_t(p.keyBlocks) * p.kvHeads * p.batch;
  if (blocks == 0) return cudaSuccess;
  void *args[] = {const_cast<BackwardParams *>(&p)};
  return cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(unsigned(blocks)), dim3(kBackwardThreads),
                          args, Kernel::kSharedBytes, stream);
}

template <typename Element, int D>
cudaError_t launchMmaInstance(const BackwardParams &p, int tileIndex, cudaStream_t stream) {
  constexpr int kTiles = mmaTilesFor(D).count;
  if (tileIndex == 0) return launchMmaTile<Element, D, 0>(p, stream);
  if constexpr (kTiles > 1)
    if (tileIndex == 1) return launchMmaTile<Element, D, 1>(p, stream);
  if constexpr (kTiles > 2)
    if (tileIndex == 2) return launchMmaTile<Element, D, 2>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace flashattn::cuda::backward
