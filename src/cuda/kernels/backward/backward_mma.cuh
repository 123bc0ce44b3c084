// SPDX-License-Identifier: BSD-3-Clause
// The tensor-core backward kernel (FP16/BF16 storage, sm80+): FlashAttention-2's scheme with mma.sync m16n8k16.
//
// One CTA owns key block [n0, n0 + BlockN) of one KV head: K and V stay in shared memory, dK and dV accumulate in FP32
// registers, and the CTA walks the query blocks that can see its keys, for every query head of the KV head's group
// (so GQA/MQA gradients are summed on chip, in a fixed order). Per query block:
//   S^T = K Q^T and dP^T = V dO^T (keys are rows: P^T and dS^T come out in the layout dV and dK consume),
//   P^T = exp2(S^T * scale * log2 e - LSE * log2 e), dS^T = P^T * (dP^T - D) * dLogit/dDot, both rounded to the
//   storage type into shared memory,
//   dV += P^T dO, dK += dS^T Q, and dQ = dS K added in FP32 to the workspace (red; ordered in deterministic mode).
// The scale (and the softcap derivative) is folded into dS, so dK and dQ need no later rescaling.
// The five products are warp GEMMs fed by ldmatrix; S^T with dP^T and dV with dK run as interleaved pairs (the
// fragments of one GEMM's next k-step load while the other's multiplies run), dQ alone, pipelined where registers
// allow. Per element of P^T/dS^T only the case the block needs is compiled in the executed path (see ScorePath):
// carrying softcap, ALiBi and masking inline for every element made the loop body overflow the instruction cache.
// Query blocks are walked from the last to the first: under causal masks every key block then reaches a query block
// at about the same time, which keeps the ordered additions of deterministic mode from serialising the CTAs (with
// deterministic mode's descending turns, from the first: the key block after this one reaches each block earlier).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/cp_async_scalar.cuh"
#include "cuda/primitives/primitives.cuh"
#include "cuda/primitives/red_global.cuh"

namespace flashattn::cuda::backward {

// A shared-memory tile of 16-bit elements, Rows x Cols, XOR-swizzled by 16-byte chunks (see swizzle.cuh): chunk c of
// row r is stored at chunk c ^ x(r), x(r) = r % 8 (rows of a multiple of 8 chunks) or (r / 2) % 4 (multiples of 4).
template <int Rows, int Cols>
struct Tile16 {
  static constexpr int kChunks = Cols / 8;
  static constexpr int kElements = Rows * Cols;
  static constexpr int kRowBytes = Cols * 2;
  static constexpr int kSwizzleBits = kChunks % 8 == 0 ? 3 : 2;
  static constexpr uint32_t kSwizzleMask = (1u << kSwizzleBits) - 1;
  static_assert(kChunks % 4 == 0, "rows must be a multiple of 4 chunks");

  FLASHATTN_HOST_DEVICE static int chunkOffset(int row, int chunk) {
    if constexpr (kSwizzleBits == 3) return row * Cols + (chunk ^ (row & 7)) * 8;
    return row * Cols + (chunk ^ ((row >> 1) & 3)) * 8;
  }
  // column may lie inside a chunk; pairs (column even) stay inside it.
  FLASHATTN_HOST_DEVICE static int offset(int row, int column) {
    return chunkOffset(row, column >> 3) + (column & 7);
  }
  // x(r) of a row r with r % 8 == rowInEight.
  FLASHATTN_HOST_DEVICE static uint32_t swizzleOf(int rowInEight) {
    return kSwizzleBits == 3 ? uint32_t(rowInEight & 7) : uint32_t((rowInEight >> 1) & 3);
  }
  // Fragment addresses are formed once per GEMM as a per-lane base whose row is a multiple of 8 plus the lane's row
  // and whose chunk is the lane's (swizzled) chunk; the address of chunk offset c (compile-time, even) is then the
  // base with the low chunk bits flipped by c and the high ones added: no per-step register, no per-step multiply.
  // Valid because rows start at multiples of 16 << kSwizzleBits bytes, so the flipped bits belong to the chunk alone.
  FLASHATTN_HOST_DEVICE static uint32_t stepChunks(uint32_t base, int c) {
    return (base ^ ((uint32_t(c) & kSwizzleMask) << 4)) + ((uint32_t(c) & ~kSwizzleMask) << 4);
  }
  static_assert(kRowBytes % (16 << kSwizzleBits) == 0, "row starts must not touch the swizzled address bits");
};

// Fragment loaders for mma.m16n8k16 (lane = this thread's lane). Each holds the per-lane base addresses of one GEMM;
// baseOf/at are the address arithmetic alone (host-callable, so a host test can compare them with chunkOffset).
// "Transposed" loaders read a tile whose rows are the K index of the product.

// A[m][k] = tile[row0 + m][k] for the m-tile at row0 (row0 % 16 == 0).
template <class Tile, int MT>
struct LoadA {
  FLASHATTN_HOST_DEVICE static uint32_t baseOf(uint32_t tile, int row0, int lane) {
    return tile + uint32_t(row0 + (lane & 15)) * Tile::kRowBytes + ((uint32_t(lane >> 4) ^ Tile::swizzleOf(lane)) << 4);
  }
  FLASHATTN_HOST_DEVICE static uint32_t at(uint32_t base, int ks) { return Tile::stepChunks(base, 2 * ks); }
  uint32_t base[MT];
  __device__ __forceinline__ LoadA(uint32_t tile, int row0, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) base[mt] = baseOf(tile, row0 + mt * 16, lane);
  }
  __device__ __forceinline__ void operator()(int ks, uint32_t (&a)[MT][4]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) prim::ldmatrixX4(a[mt], at(base[mt], ks));
  }
};

// A[m][k] = tile[k][col0 + m] for the m-tile at col0 (col0 % 16 == 0).
template <class Tile, int MT>
struct LoadATransposed {
  FLASHATTN_HOST_DEVICE static uint32_t baseOf(uint32_t tile, int col0, int lane) {
    const uint32_t chunk = uint32_t(col0 >> 3) + uint32_t((lane >> 3) & 1);
    return tile + uint32_t(((lane >> 4) << 3) + (lane & 7)) * Tile::kRowBytes + ((chunk ^ Tile::swizzleOf(lane)) << 4);
  }
  FLASHATTN_HOST_DEVICE static uint32_t at(uint32_t base, int ks) { return base + uint32_t(ks * 16 * Tile::kRowBytes); }
  uint32_t base[MT];
  __device__ __forceinline__ LoadATransposed(uint32_t tile, int col0, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) base[mt] = baseOf(tile, col0 + mt * 16, lane);
  }
  __device__ __forceinline__ void operator()(int ks, uint32_t (&a)[MT][4]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) prim::ldmatrixX4Trans(a[mt], at(base[mt], ks));
  }
};

// B[k][n] = tile[n0 + n][k], NT n-tiles of 8 from n0 (n0 % 16 == 0): pairs by ldmatrix.x4, an odd last one by .x2.
template <class Tile, int NT>
struct LoadB {
  static constexpr int kPairs = NT / 2;
  // The pair at rows n (n % 16 == 0), or with single the 8-row tile at n (lanes 0..15 matter).
  FLASHATTN_HOST_DEVICE static uint32_t baseOf(uint32_t tile, int n, int lane, bool single) {
    const uint32_t laneChunk = (uint32_t((lane >> 3) & 1) ^ Tile::swizzleOf(lane)) << 4;
    const int row = single ? n + (lane & 7) : n + ((lane >> 4) << 3) + (lane & 7);
    return tile + uint32_t(row) * Tile::kRowBytes + laneChunk;
  }
  FLASHATTN_HOST_DEVICE static uint32_t at(uint32_t base, int ks) { return Tile::stepChunks(base, 2 * ks); }
  uint32_t base[(NT + 1) / 2];
  __device__ __forceinline__ LoadB(uint32_t tile, int n0, int lane) {
#pragma unroll
    for (int np = 0; np < kPairs; ++np) base[np] = baseOf(tile, n0 + np * 16, lane, false);
    if constexpr (NT % 2 == 1) base[kPairs] = baseOf(tile, n0 + (NT - 1) * 8, lane, true);
  }
  __device__ __forceinline__ void operator()(int ks, uint32_t (&b)[NT][2]) const {
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      uint32_t r[4];
      prim::ldmatrixX4(r, at(base[np], ks));
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
    if constexpr (NT % 2 == 1) prim::ldmatrixX2(b[NT - 1], at(base[kPairs], ks));
  }
};

// B[k][n] = tile[k][n0 + n] for the n-tile pairs from n0 (n0 % 16 == 0), NT even.
template <class Tile, int NT>
struct LoadBTransposed {
  static_assert(NT % 2 == 0, "transposed B loads come in pairs of n-tiles");
  FLASHATTN_HOST_DEVICE static uint32_t baseOf(uint32_t tile, int n, int lane) {
    const uint32_t chunk = uint32_t(n >> 3) + uint32_t(lane >> 4);
    return tile + uint32_t((((lane >> 3) & 1) << 3) + (lane & 7)) * Tile::kRowBytes +
           ((chunk ^ Tile::swizzleOf(lane)) << 4);
  }
  FLASHATTN_HOST_DEVICE static uint32_t at(uint32_t base, int ks) { return base + uint32_t(ks * 16 * Tile::kRowBytes); }
  uint32_t base[NT / 2];
  __device__ __forceinline__ LoadBTransposed(uint32_t tile, int n0, int lane) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) base[np] = baseOf(tile, n0 + np * 16, lane);
  }
  __device__ __forceinline__ void operator()(int ks, uint32_t (&b)[NT][2]) const {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t r[4];
      prim::ldmatrixX4Trans(r, at(base[np], ks));
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
  }
};

// acc[MT][NT] += A * B over KSteps k-steps of 16. loadA(ks, a) fills the MT A fragments of step ks, loadB(ks, b) the
// NT B fragments. Pipelined: step ks + 1 is loaded before the multiplies of step ks (twice the fragment registers).
template <class Element, int MT, int NT, int KSteps, bool Pipelined, class LoadAFn, class LoadBFn>
__device__ __forceinline__ void warpGemm(float (&acc)[MT][NT][4], LoadAFn &&loadAFn, LoadBFn &&loadBFn) {
  constexpr int kBuffers = Pipelined ? 2 : 1;
  uint32_t a[kBuffers][MT][4];
  uint32_t b[kBuffers][NT][2];
  if constexpr (Pipelined) {
    loadAFn(0, a[0]);
    loadBFn(0, b[0]);
  }
#pragma unroll
  for (int ks = 0; ks < KSteps; ++ks) {
    const int buffer = Pipelined ? (ks & 1) : 0;
    if constexpr (Pipelined) {
      if (ks + 1 < KSteps) {
        loadAFn(ks + 1, a[(ks + 1) & 1]);
        loadBFn(ks + 1, b[(ks + 1) & 1]);
      }
    } else {
      loadAFn(ks, a[0]);
      loadBFn(ks, b[0]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) prim::mmaM16N8K16<Element>(acc[mt][nt], a[buffer][mt], b[buffer][nt]);
  }
}

// Two independent GEMMs of one shape with their k-steps interleaved: the fragments of one GEMM's next step load while
// the other GEMM's multiplies of this step run, so every ldmatrix has a whole step of tensor work to land behind
// (with two fragment sets live, as a single pipelined GEMM would have).
template <class Element, int MT, int NT, int KSteps, class LoadA1, class LoadB1, class LoadA2, class LoadB2>
__device__ __forceinline__ void warpGemmPair(float (&acc1)[MT][NT][4], LoadA1 &&loadA1, LoadB1 &&loadB1,
                                             float (&acc2)[MT][NT][4], LoadA2 &&loadA2, LoadB2 &&loadB2) {
  uint32_t a1[MT][4], a2[MT][4];
  uint32_t b1[NT][2], b2[NT][2];
  loadA1(0, a1);
  loadB1(0, b1);
  loadA2(0, a2);
  loadB2(0, b2);
#pragma unroll
  for (int ks = 0; ks < KSteps; ++ks) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) prim::mmaM16N8K16<Element>(acc1[mt][nt], a1[mt], b1[nt]);
    if (ks + 1 < KSteps) {
      loadA1(ks + 1, a1);
      loadB1(ks + 1, b1);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) prim::mmaM16N8K16<Element>(acc2[mt][nt], a2[mt], b2[nt]);
    if (ks + 1 < KSteps) {
      loadA2(ks + 1, a2);
      loadB2(ks + 1, b2);
    }
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

// How a block pair's probabilities are formed: Plain (no softcap, no ALiBi, every (row, key) visible), Masked (no
// softcap, no ALiBi, visibility per element), General (everything). Each is one branch-free unrolled body: the common
// case stays a short stretch of code instead of every element carrying the rare cases' branches and calls.
enum class ScorePath { Plain, Masked, General };

template <typename Element, int D, int BlockM, int BlockN, int SdpWarpsN, int DkvWarpsN, int DqWarpsM,
          bool DoubleBuffer, int MinBlocks, int Warps>
struct MmaBackward {
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
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

  static_assert(kWarps == 4 || kWarps == 8, "4 or 8 warps per CTA");
  static_assert(kWarps % SdpWarpsN == 0 && kWarps % DkvWarpsN == 0 && kWarps % DqWarpsM == 0, "warp splits");
  static_assert(kSdpTileN % 16 == 0 && kSdpTileM % 8 == 0 && kSdpTileN * SdpWarpsN == BlockN &&
                    kSdpTileM * kSdpWarpsM == BlockM,
                "S^T warp tile");
  static_assert(kDkvTileN % 16 == 0 && kDkvTileD % 16 == 0 && kDkvTileD * kDkvWarpsD == D, "dK/dV warp tile");
  static_assert(kDqTileM % 16 == 0 && kDqTileD % 16 == 0 && kDqTileD * kDqWarpsD == D, "dQ warp tile");
  static_assert(BlockM % 16 == 0 && BlockN % 16 == 0 && D % 16 == 0, "tile multiples of 16");

  // Registers each phase keeps live besides its fragments (the dK/dV accumulators live throughout); a phase pipelines
  // its fragment loads when doubling them still leaves ~55 registers of the per-thread cap for addresses and loop
  // state.
  static constexpr int kRegisterCap = (65536 / (kThreads * MinBlocks)) / 8 * 8 < 255
                                          ? (65536 / (kThreads * MinBlocks)) / 8 * 8
                                          : 255;
  static constexpr int kRegisterBudget = kRegisterCap - 55;
  static constexpr int kDkvRegisters = 2 * kDkvMTiles * kDkvNTiles * 4;
  static constexpr int kSdpRegisters = 2 * kSdpMTiles * kSdpNTiles * 4;
  static constexpr int kDqRegisters = kDqMTiles * kDqNTiles * 4;
  static constexpr int kSdpFragments = kSdpMTiles * 4 + kSdpNTiles * 2;
  static constexpr int kDkvFragments = kDkvMTiles * 4 + kDkvNTiles * 2;
  static constexpr int kDqFragments = kDqMTiles * 4 + kDqNTiles * 2;
  static constexpr bool kPipelineSdp = kDkvRegisters + kSdpRegisters + 2 * kSdpFragments <= kRegisterBudget;
  static constexpr bool kPipelineDkv = kDkvRegisters + 2 * kDkvFragments <= kRegisterBudget;
  static constexpr bool kPipelineDq = kDkvRegisters + kDqRegisters + 2 * kDqFragments <= kRegisterBudget;
  // S^T with dP^T and dV with dK run as interleaved pairs (warpGemmPair) unless the second fragment set does not fit.
  // The estimate above is conservative (ptxas shares address registers between the phases): with this allowance every
  // tile of mmaTilesFor still compiles with at most 8 bytes of spills (ptxas -v, CUDA 13.0, sm_90).
  static constexpr int kPairAllowance = 30;
  static constexpr bool kPairSdp = kDkvRegisters + kSdpRegisters + 2 * kSdpFragments <= kRegisterBudget + kPairAllowance;
  static constexpr bool kPairDkv = kDkvRegisters + 2 * kDkvFragments <= kRegisterBudget + kPairAllowance;

  static constexpr std::size_t kSharedBytes =
      (2 * std::size_t(TileKV::kElements) + 2 * kStages * std::size_t(TileQ::kElements) +
       2 * std::size_t(TileP::kElements)) * sizeof(Element) +
      2 * kStages * std::size_t(BlockM) * sizeof(float);
  static_assert(kSharedBytes == mmaSharedBytes(MmaTile{BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer,
                                                       MinBlocks, Warps},
                                               D),
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

  // Columns d and d + 1 of a row, of which `left` remain in the head dim (an odd head dim's last pair stores one).
  __device__ static __forceinline__ void storePair(Element *at, float x, float y, int left) {
    const uint32_t packed = prim::packFloat2<Element>(x, y);
    if (left >= 2)
      *reinterpret_cast<uint32_t *>(at) = packed;
    else if (left == 1)
      *reinterpret_cast<uint16_t *>(at) = uint16_t(packed);
  }

  // A row's 8-element chunk starting at column c: whole by cp.async, zeros where the row is absent or the head dim
  // ended before it; where the head dim ends inside it, element by element with the rest zero-filled (an ordinary
  // shared store, which the barrier before the tile's use covers as it covers the cp.async wait), so nothing past the
  // row is read.
  __device__ static __forceinline__ void copyChunk(uint32_t destination, const Element *source, const void *safe,
                                                   bool rowValid, int c, int32_t headDim) {
    const int left = headDim - c * 8;
    if (rowValid && left < 8 && left > 0) {
      const uint16_t *elements = reinterpret_cast<const uint16_t *>(source);
      uint32_t packed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        packed[e] = (2 * e < left ? uint32_t(elements[2 * e]) : 0u) |
                    (2 * e + 1 < left ? uint32_t(elements[2 * e + 1]) << 16 : 0u);
      prim::storeShared16(destination, make_uint4(packed[0], packed[1], packed[2], packed[3]));
    } else {
      prim::cpAsync16(destination, rowValid && left > 0 ? source : safe, rowValid && left > 0);
    }
  }

  // Rows [row0, row0 + Rows) of a [row][D] tile; rows >= rowLimit and columns >= headDim arrive as zeros.
  template <class Tile, int Rows>
  __device__ static __forceinline__ void loadRows(Element *tile, const Element *base, int64_t rowStride, int32_t row0,
                                                  int32_t rowLimit, int32_t headDim) {
    constexpr int kChunks = Tile::kChunks;
    constexpr int kTotal = Rows * kChunks;
    constexpr int kRowsPerPass = kThreads / kChunks;
    if constexpr (kThreads % kChunks == 0 && kRowsPerPass % 8 == 0 && Rows % kRowsPerPass == 0) {
      // Each thread copies the same chunk of every kRowsPerPass-th row: one 64-bit address formed once, then a
      // constant step; the swizzle of its rows is the same (rows differ by multiples of 8), so the shared-memory
      // destinations are constant offsets too. The query-block loads run every iteration, so this matters.
      const int r = int(threadIdx.x) / kChunks;
      const int c = int(threadIdx.x) % kChunks;
      const Element *source = base + int64_t(row0 + r) * rowStride + c * 8;
      const int64_t passStride = int64_t(kRowsPerPass) * rowStride;
      const uint32_t destination = prim::smemAddress(tile + Tile::chunkOffset(r, c));
#pragma unroll
      for (int pass = 0; pass < Rows / kRowsPerPass; ++pass)
        copyChunk(destination + uint32_t(pass * kRowsPerPass * Tile::kRowBytes), source + pass * passStride, base,
                  row0 + r + pass * kRowsPerPass < rowLimit, c, headDim);
    } else {
      // The general loop sits in the else branch: after a `return` in the constexpr branch nvcc would compile it
      // anyway and warn that it cannot be reached (#128-D).
#pragma unroll
      for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
        const int idx = it * kThreads + int(threadIdx.x);
        if (kTotal % kThreads == 0 || idx < kTotal) {
          const int r = idx / kChunks;
          const int c = idx % kChunks;
          const bool rowValid = row0 + r < rowLimit;
          copyChunk(prim::smemAddress(tile + Tile::chunkOffset(r, c)),
                    rowValid ? base + int64_t(row0 + r) * rowStride + c * 8 : base, base, rowValid, c, headDim);
        }
      }
    }
  }

  // What the score phase of one block pair needs besides the accumulators.
  struct ScoreContext {
    int sdpRow0, sdpCol0, lane;
    float scale, scaleLog2;
    float scaleOverSoftcap, softcapLog2;  // General path only
    float slopeLog2;                      // General path only (0 without ALiBi)
    int32_t diagonal;                     // alignedRow(i) - n0 of the thread's first column (General path only)
    bool softcap;
    bool oneKeyRule;  // a row that sees one key has P = 1 (not with sinks, which share its softmax)
  };

  // P^T = exp2(logit * log2 e - LSE * log2 e) and dS^T = P^T * (dP^T - D) * dLogit/dDot for the thread's fragment
  // elements, rounded to the storage type into shared memory. lo/hi: the visible keys of each of the thread's query
  // columns relative to n0 (Masked/General; lo > hi when the row sees none).
  template <ScorePath Path>
  __device__ static __forceinline__ void scores(const ScoreContext &c,
                                                const float (&accS)[kSdpMTiles][kSdpNTiles][4],
                                                const float (&accdP)[kSdpMTiles][kSdpNTiles][4],
                                                const float (&lse)[kSdpNTiles][2], const float (&dot)[kSdpNTiles][2],
                                                const int32_t (&lo)[kSdpNTiles][2],
                                                const int32_t (&hi)[kSdpNTiles][2], unsigned char *pT,
                                                unsigned char *dsT) {
    // Element (row nLocal, column mLocal) of P^T / dS^T: the row is a multiple of 8 plus lane / 4 and the column pair
    // sits in chunk sdpCol0 / 8 + nt, so the swizzle depends on the lane alone.
    const uint32_t storeBase = uint32_t(c.sdpRow0 + (c.lane >> 2)) * TileP::kRowBytes + 4 * uint32_t(c.lane & 3);
    const uint32_t storeSwizzle = TileP::swizzleOf(c.lane >> 2);
    const int storeChunk = c.sdpCol0 >> 3;
#pragma unroll
    for (int mt = 0; mt < kSdpMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t key = c.sdpRow0 + mt * 16 + (c.lane >> 2) + half * 8;  // relative to n0
#pragma unroll
        for (int nt = 0; nt < kSdpNTiles; ++nt) {
          float pv[2], ds[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float qk = accS[mt][nt][2 * half + e];
            const float dP = accdP[mt][nt][2 * half + e];
            if constexpr (Path == ScorePath::General) {
              float logitLog2, dLogit;
              if (c.softcap) {
                const float t = tanhf(qk * c.scaleOverSoftcap);
                logitLog2 = c.softcapLog2 * t;
                dLogit = c.scale * (1.f - t * t);
              } else {
                logitLog2 = qk * c.scaleLog2;
                dLogit = c.scale;
              }
              // ALiBi distance |j - i'| with i' = alignedRow(i), both relative to n0.
              const int32_t distance = key - (c.diagonal + nt * 8 + e);
              logitLog2 = fmaf(-c.slopeLog2, fabsf(float(distance)), logitLog2);
              const bool visible = key >= lo[nt][e] && key <= hi[nt][e];
              pv[e] = visible ? prim::exp2Fast(logitLog2 - lse[nt][e]) : 0.f;
              ds[e] = c.oneKeyRule && lo[nt][e] == hi[nt][e] ? 0.f : pv[e] * (dP - dot[nt][e]) * dLogit;
            } else {
              float prob = prim::exp2Fast(fmaf(qk, c.scaleLog2, -lse[nt][e]));
              if constexpr (Path == ScorePath::Masked) {
                if (key < lo[nt][e] || key > hi[nt][e]) prob = 0.f;
              }
              pv[e] = prob;
              // A row that sees one key has P = 1 whatever its logit, so its dS is exactly zero (the Plain path's
              // fully visible blocks give every row a whole block of keys); with a sink P < 1.
              const bool oneKey = Path == ScorePath::Masked && c.oneKeyRule && lo[nt][e] == hi[nt][e];
              ds[e] = oneKey ? 0.f : prob * (dP - dot[nt][e]) * c.scale;
            }
          }
          const uint32_t byteOffset = storeBase + uint32_t(mt * 16 + half * 8) * TileP::kRowBytes +
                                      ((uint32_t(storeChunk + nt) ^ storeSwizzle) << 4);
          *reinterpret_cast<uint32_t *>(pT + byteOffset) = prim::packFloat2<Element>(pv[0], pv[1]);
          *reinterpret_cast<uint32_t *>(dsT + byteOffset) = prim::packFloat2<Element>(ds[0], ds[1]);
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
    const Diagonals diagonals = diagonalsOf(p, seq.seqQ, seq.seqK);

    const BlockRange qb = queryBlocksOf(p, seq, n0, BlockM, BlockN);
    const int32_t numQBlocks = qb.first <= qb.last ? qb.last - qb.first + 1 : 0;
    const int32_t iterations = numQBlocks * p.headsPerKvHead;
    const int32_t firstHead = w.kvHead * p.headsPerKvHead;

    // Deterministic mode: this CTA's place in the turn order (the query blocks it adds into first, the counter values).
    const TurnOrder turns = p.deterministic ? turnOrderOf(p, seq, w.keyBlock, n0, BlockM, BlockN) : TurnOrder{};
    // Iteration order: query heads of the group in turn, each walking its query blocks from the last to the first (in
    // deterministic mode's descending turn order from the first to the last: turnOrderOf's key block n + 1, whose
    // range starts higher, then reaches each block before key block n). The prologue loads the walk's first block.
    const bool ascending = p.descendingTurns;
    const int32_t walkFirst = ascending ? qb.first : qb.last, walkLast = ascending ? qb.last : qb.first;

    const Element *kBase = static_cast<const Element *>(p.k) + int64_t(w.batch) * p.kBatch +
                           int64_t(w.kvHead) * p.kHead + seq.kStart * p.kRow;
    const Element *vBase = static_cast<const Element *>(p.v) + int64_t(w.batch) * p.vBatch +
                           int64_t(w.kvHead) * p.vHead + seq.kStart * p.vRow;

    float accdK[kDkvMTiles][kDkvNTiles][4];
    float accdV[kDkvMTiles][kDkvNTiles][4];
    zero(accdK);
    zero(accdV);

    if (iterations > 0) {
      loadRows<TileKV, BlockN>(sm.k, kBase, p.kRow, n0, seq.seqK, p.headDim);
      loadRows<TileKV, BlockN>(sm.v, vBase, p.vRow, n0, seq.seqK, p.headDimV);
      prim::cpAsyncCommit();
      loadQueryBlock(p, sm, seq, w, firstHead, walkFirst, 0);
      prim::cpAsyncCommit();
    }

    const bool plain = !(p.softcap > 0.f) && p.alibiSlopes == nullptr;
    const uint32_t kAddress = prim::smemAddress(sm.k), vAddress = prim::smemAddress(sm.v);
    const uint32_t pTAddress = prim::smemAddress(sm.pT), dsTAddress = prim::smemAddress(sm.dsT);
    const int sdpRow0 = (warp / kSdpWarpsM) * kSdpTileN;
    const int sdpCol0 = (warp % kSdpWarpsM) * kSdpTileM;

    ScoreContext ctx;
    ctx.sdpRow0 = sdpRow0;
    ctx.sdpCol0 = sdpCol0;
    ctx.lane = lane;
    ctx.scale = p.scale;
    ctx.scaleLog2 = p.scale * prim::kLog2e;
    ctx.softcap = p.softcap > 0.f;
    ctx.scaleOverSoftcap = ctx.softcap ? p.scale / p.softcap : 0.f;
    ctx.softcapLog2 = p.softcap * prim::kLog2e;
    ctx.slopeLog2 = 0.f;
    ctx.diagonal = 0;
    ctx.oneKeyRule = p.sinks == nullptr;

    int32_t h = firstHead, mBlock = walkFirst;
    for (int32_t it = 0; it < iterations; ++it) {
      const int stage = DoubleBuffer ? (it & 1) : 0;
      const int32_t m0 = mBlock * BlockM;
      const bool lastOfHead = mBlock == walkLast;
      const int32_t nextH = lastOfHead ? h + 1 : h;
      const int32_t nextMBlock = lastOfHead ? walkFirst : mBlock + (ascending ? 1 : -1);

      prim::cpAsyncWait<0>();
      __syncthreads();  // this stage's tiles are visible; every warp is done with the previous iteration
      if (DoubleBuffer && it + 1 < iterations) {
        loadQueryBlock(p, sm, seq, w, nextH, nextMBlock, stage ^ 1);
        prim::cpAsyncCommit();
      }

      const Element *sQ = sm.q + stage * TileQ::kElements;
      const Element *sdO = sm.dO + stage * TileQ::kElements;
      const float *sLse = sm.lseLog2 + stage * BlockM;
      const float *sDot = sm.rowDot + stage * BlockM;

      // ---- S^T = K Q^T, then dP^T = V dO^T ----------------------------------------------------------------
      float accS[kSdpMTiles][kSdpNTiles][4];
      float accdP[kSdpMTiles][kSdpNTiles][4];
      zero(accS);
      zero(accdP);
      {
        const uint32_t qAddress = prim::smemAddress(sQ), dOAddress = prim::smemAddress(sdO);
        if constexpr (kPairSdp) {
          warpGemmPair<Element, kSdpMTiles, kSdpNTiles, D / 16>(
              accS, LoadA<TileKV, kSdpMTiles>(kAddress, sdpRow0, lane), LoadB<TileQ, kSdpNTiles>(qAddress, sdpCol0, lane),
              accdP, LoadA<TileKV, kSdpMTiles>(vAddress, sdpRow0, lane),
              LoadB<TileQ, kSdpNTiles>(dOAddress, sdpCol0, lane));
        } else {
          warpGemm<Element, kSdpMTiles, kSdpNTiles, D / 16, kPipelineSdp>(
              accS, LoadA<TileKV, kSdpMTiles>(kAddress, sdpRow0, lane), LoadB<TileQ, kSdpNTiles>(qAddress, sdpCol0, lane));
          warpGemm<Element, kSdpMTiles, kSdpNTiles, D / 16, kPipelineSdp>(
              accdP, LoadA<TileKV, kSdpMTiles>(vAddress, sdpRow0, lane),
              LoadB<TileQ, kSdpNTiles>(dOAddress, sdpCol0, lane));
        }
      }

      // ---- P^T and dS^T, rounded to the storage type into shared memory ----------------------------------------
      {
        // The LSE and D of this thread's query columns, read once for all its rows.
        float lseOf[kSdpNTiles][2], dotOf[kSdpNTiles][2];
        int32_t lo[kSdpNTiles][2], hi[kSdpNTiles][2];
#pragma unroll
        for (int nt = 0; nt < kSdpNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int column = sdpCol0 + nt * 8 + 2 * (lane & 3) + e;
            lseOf[nt][e] = sLse[column];
            dotOf[nt][e] = sDot[column];
            lo[nt][e] = 0;
            hi[nt][e] = BlockN - 1;
          }
        const bool fullyVisible = blockFullyVisible(diagonals, m0, n0, BlockM, BlockN, seq.seqQ, seq.seqK);
        if (!fullyVisible) {
#pragma unroll
          for (int nt = 0; nt < kSdpNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int32_t i = m0 + sdpCol0 + nt * 8 + 2 * (lane & 3) + e;
              const RowKeys keys = i < seq.seqQ ? rowKeys(diagonals, i, seq.seqK) : RowKeys{1, 0};
              lo[nt][e] = keys.lo - n0;
              hi[nt][e] = keys.hi - n0;
            }
        }
        unsigned char *pT = reinterpret_cast<unsigned char *>(sm.pT);
        unsigned char *dsT = reinterpret_cast<unsigned char *>(sm.dsT);
        if (plain) {
          if (fullyVisible)
            scores<ScorePath::Plain>(ctx, accS, accdP, lseOf, dotOf, lo, hi, pT, dsT);
          else
            scores<ScorePath::Masked>(ctx, accS, accdP, lseOf, dotOf, lo, hi, pT, dsT);
        } else {
          ctx.slopeLog2 = alibiSlope(p, w.batch, h) * prim::kLog2e;
          ctx.diagonal = alignedRow(m0 + sdpCol0 + 2 * (lane & 3), seq.seqQ, seq.seqK) - n0;
          scores<ScorePath::General>(ctx, accS, accdP, lseOf, dotOf, lo, hi, pT, dsT);
        }
      }
      __syncthreads();

      // ---- dV += P^T dO, then dK += dS^T Q -------------------------------------------------------------------
      {
        const int row0 = (warp / kDkvWarpsD) * kDkvTileN;
        const int col0 = (warp % kDkvWarpsD) * kDkvTileD;
        if constexpr (kPairDkv) {
          warpGemmPair<Element, kDkvMTiles, kDkvNTiles, BlockM / 16>(
              accdV, LoadA<TileP, kDkvMTiles>(pTAddress, row0, lane),
              LoadBTransposed<TileQ, kDkvNTiles>(prim::smemAddress(sdO), col0, lane), accdK,
              LoadA<TileP, kDkvMTiles>(dsTAddress, row0, lane),
              LoadBTransposed<TileQ, kDkvNTiles>(prim::smemAddress(sQ), col0, lane));
        } else {
          warpGemm<Element, kDkvMTiles, kDkvNTiles, BlockM / 16, kPipelineDkv>(
              accdV, LoadA<TileP, kDkvMTiles>(pTAddress, row0, lane),
              LoadBTransposed<TileQ, kDkvNTiles>(prim::smemAddress(sdO), col0, lane));
          warpGemm<Element, kDkvMTiles, kDkvNTiles, BlockM / 16, kPipelineDkv>(
              accdK, LoadA<TileP, kDkvMTiles>(dsTAddress, row0, lane),
              LoadBTransposed<TileQ, kDkvNTiles>(prim::smemAddress(sQ), col0, lane));
        }
      }

      // ---- dQ = dS K, added into the FP32 workspace -----------------------------------------------------------
      {
        const int row0 = (warp / kDqWarpsD) * kDqTileM;
        const int col0 = (warp % kDqWarpsD) * kDqTileD;
        float accdQ[kDqMTiles][kDqNTiles][4];
        zero(accdQ);
        warpGemm<Element, kDqMTiles, kDqNTiles, BlockN / 16, kPipelineDq>(
            accdQ, LoadATransposed<TileP, kDqMTiles>(dsTAddress, row0, lane),
            LoadBTransposed<TileKV, kDqNTiles>(kAddress, col0, lane));

        int32_t *turn = nullptr;
        if (p.deterministic) {
          turn = dqTurnCounter(p, w.batch, h, mBlock);
          waitForTurn(turn, turns, mBlock);
        }
        float *dqRows = p.dqAccum + workspaceRow(p, w.batch, h, seq, m0) * p.dqPitch;
        if (p.headDim == D && m0 + BlockM <= seq.seqQ) {
          // Whole block, native head dim: every address is one per-thread base plus a compile-time offset.
          float *dqThread = dqRows + (row0 + (lane >> 2)) * D + col0 + 2 * (lane & 3);
#pragma unroll
          for (int mt = 0; mt < kDqMTiles; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
              for (int nt = 0; nt < kDqNTiles; ++nt)
                prim::redAddFloat2(dqThread + (mt * 16 + half * 8) * D + nt * 8, accdQ[mt][nt][2 * half],
                                   accdQ[mt][nt][2 * half + 1]);
        } else {
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
                  prim::redAddFloat2(dqRows + int64_t(m) * p.dqPitch + d, accdQ[mt][nt][2 * half],
                                     accdQ[mt][nt][2 * half + 1]);
                }
              }
            }
          }
        }
        if (p.deterministic) passTurn(turn, turns);
      }

      if (!DoubleBuffer && it + 1 < iterations) {
        __syncthreads();  // every warp is done reading Q and dO of this block
        loadQueryBlock(p, sm, seq, w, nextH, nextMBlock, 0);
        prim::cpAsyncCommit();
      }
      h = nextH;
      mBlock = nextMBlock;
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
            storePair(dKBase + int64_t(j) * p.dKRow + d, accdK[mt][nt][2 * half], accdK[mt][nt][2 * half + 1],
                      p.headDim - d);
            storePair(dVBase + int64_t(j) * p.dVRow + d, accdV[mt][nt][2 * half], accdV[mt][nt][2 * half + 1],
                      p.headDimV - d);
          }
        }
      }
  }

  // Issues the cp.async copies of query block mBlock of query head h into `stage`: Q and dO rows, LSE * log2 e and
  // D of the rows. Rows past the sequence arrive as zeros (their keys are masked, so they contribute nothing).
  __device__ static __forceinline__ void loadQueryBlock(const BackwardParams &p, const Shared &sm,
                                                        const SequenceExtent &seq, const WorkItem &w, int32_t h,
                                                        int32_t mBlock, int stage) {
    const int32_t m0 = mBlock * BlockM;
    const Element *qBase = static_cast<const Element *>(p.q) + int64_t(w.batch) * p.qBatch + int64_t(h) * p.qHead +
                           seq.qStart * p.qRow;
    const Element *dOBase = static_cast<const Element *>(p.dO) + int64_t(w.batch) * p.dOBatch +
                            int64_t(h) * p.dOHead + seq.qStart * p.dORow;
    loadRows<TileQ, BlockM>(sm.q + stage * TileQ::kElements, qBase, p.qRow, m0, seq.seqQ, p.headDim);
    loadRows<TileQ, BlockM>(sm.dO + stage * TileQ::kElements, dOBase, p.dORow, m0, seq.seqQ, p.headDimV);
#pragma unroll
    for (int base = 0; base < 2 * BlockM; base += kThreads) {
      const int idx = base + int(threadIdx.x);
      if (2 * BlockM % kThreads != 0 && idx >= 2 * BlockM) break;
      const int r = idx % BlockM;
      const bool valid = m0 + r < seq.seqQ;
      const int64_t row = workspaceRow(p, w.batch, h, seq, valid ? m0 + r : 0);
      const float *src = idx < BlockM ? p.lseLog2 + row : p.rowDot + row;
      float *dst = (idx < BlockM ? sm.lseLog2 : sm.rowDot) + stage * BlockM + r;
      prim::cpAsync4(prim::smemAddress(dst), src, valid);
    }
  }
};

template <typename Element, int D, int BlockM, int BlockN, int SdpWarpsN, int DkvWarpsN, int DqWarpsM,
          bool DoubleBuffer, int MinBlocks, int Warps>
__global__ void __launch_bounds__(Warps * 32, MinBlocks)
    backwardMmaKernel(const __grid_constant__ BackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  MmaBackward<Element, D, BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer, MinBlocks, Warps>::kernel(p,
                                                                                                                 smem);
}

// Launches the main kernel of one tile configuration (the planner's, or a benchmark's variant).
template <typename Element, int D, int BlockM, int BlockN, int SdpWarpsN, int DkvWarpsN, int DqWarpsM,
          bool DoubleBuffer, int MinBlocks, int Warps>
cudaError_t launchMmaKernel(const BackwardParams &p, cudaStream_t stream) {
  using Kernel = MmaBackward<Element, D, BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer, MinBlocks, Warps>;
  auto *kernel = &backwardMmaKernel<Element, D, BlockM, BlockN, SdpWarpsN, DkvWarpsN, DqWarpsM, DoubleBuffer,
                                    MinBlocks, Warps>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kernel::kSharedBytes));
  if (err != cudaSuccess) return err;
  const int64_t blocks = int64_t(p.keyBlocks) * p.kvHeads * p.batch;
  if (blocks == 0) return cudaSuccess;
  void *args[] = {const_cast<BackwardParams *>(&p)};
  return cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(unsigned(blocks)), dim3(Kernel::kThreads),
                          args, Kernel::kSharedBytes, stream);
}

template <typename Element, int D, int TileIndex>
cudaError_t launchMmaTile(const BackwardParams &p, cudaStream_t stream) {
  constexpr MmaTile t = mmaTilesFor(D).tiles[TileIndex];
  return launchMmaKernel<Element, D, t.blockM, t.blockN, t.sdpWarpsN, t.dkvWarpsN, t.dqWarpsM, t.doubleBuffer,
                         t.minBlocks, t.warps>(p, stream);
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
