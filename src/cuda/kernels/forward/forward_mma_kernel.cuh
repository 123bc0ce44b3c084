// SPDX-License-Identifier: BSD-3-Clause
// The portable tensor-core forward kernel (sm80+), FlashAttention-2 style, for FP16 and BF16 storage.
//
// One CTA serves BlockM query rows of one (sequence, head); Warps warps split those rows (each warp owns
// BlockM / Warps whole rows, so the softmax statistics of a row live in the 4 lanes of a quad). Key blocks of BlockN
// keys are visited from the last visible one down to the first; blocks outside the block's visible key range are
// never loaded. S = Q K^T and O += P V run on mma.sync m16n8k16 with FP32 accumulators; Q, K and V tiles sit in
// XOR-swizzled shared memory and reach the tensor cores through ldmatrix (.trans for V); P never leaves registers.
//
// Pipeline (one K and one V buffer): V(n) is fetched while S(n) and its softmax are computed, K(n-1) while P(n) V(n)
// is accumulated, so every global load overlaps tensor-core work of the same CTA.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/forward/forward_common.cuh"
#include "cuda/primitives/primitives.cuh"

namespace flashattn::cuda::forward {

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000u); }

// Where the rows of a tile come from, for loadTile: DenseRows walks rows rowStride apart from `rows`, with rows >=
// validRows absent; PagedRows takes each row's element offset from base out of a paged cache's row table in shared
// memory (forward_common.cuh), -1 for an absent row. at(r) gives row r's address plus the thread's first column and
// whether the row is present (an absent row's address is never read); next() moves on by one pass of rows.
template <typename Element>
struct TileRow {
  const Element *source;
  bool present;
};

template <typename Element>
struct DenseRows {
  const Element *source;
  int64_t passStride;
  int validRows;
  __device__ __forceinline__ DenseRows(const Element *rows, int64_t rowStride, int validRows, int firstRow, int column,
                                       int rowsPerPass)
      : source(rows + int64_t(firstRow) * rowStride + column),
        passStride(int64_t(rowsPerPass) * rowStride),
        validRows(validRows) {}
  __device__ __forceinline__ TileRow<Element> at(int r) const { return TileRow<Element>{source, r < validRows}; }
  __device__ __forceinline__ void next() { source += passStride; }
};

template <typename Element>
struct PagedRows {
  const Element *base;  // plus the thread's first column
  const int64_t *offsets;  // entry r at offsets[2 * r]: the table's K or V column
  __device__ __forceinline__ PagedRows(const Element *cache, const int64_t *table, int firstRow, int column, int)
      : base(cache + column), offsets(table) {
    (void)firstRow;
  }
  __device__ __forceinline__ TileRow<Element> at(int r) const {
    const int64_t offset = offsets[2 * r];
    return TileRow<Element>{base + offset, offset >= 0};
  }
  __device__ __forceinline__ void next() {}
};

// Copies a Rows x D tile (rows from `rows`, see DenseRows / PagedRows) into the swizzled shared tile. Absent rows and
// columns >= headDim arrive as zeros, so tails, padded head dims and unused cache slots contribute nothing and are
// never read. With vectorAccess the copies are asynchronous (the caller commits and waits); otherwise they complete
// here.
//
// kThreadsPerRow lanes share a row (a power of two dividing the row's chunks, so a warp covers whole 64..512-byte row
// segments) and walk down the tile kRowsPerPass rows at a time. The pass loop is deliberately not unrolled: unrolled,
// the compiler keeps every pass's 64-bit address alive across the key loop and spills them; rolled, a pass costs one
// pointer increment (dense) or one shared-memory read (paged), one row test and the swizzle of its row.
template <typename Element, int D, int Rows, int Threads>
struct TileCopy {
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kThreadsPerRow =
      (kChunksPerRow & -kChunksPerRow) < 32 ? (kChunksPerRow & -kChunksPerRow) : 32;
  static constexpr int kChunkSteps = kChunksPerRow / kThreadsPerRow;
  static constexpr int kRowsPerPass = Threads / kThreadsPerRow;
  static_assert(Threads % kThreadsPerRow == 0 && Rows % kRowsPerPass == 0, "tile rows must split into whole passes");
  // A step moves by kThreadsPerRow chunks, a multiple of the XOR group, so (chunk0 + step * kThreadsPerRow) ^ xor ==
  // (chunk0 ^ xor) + step * kThreadsPerRow: every step of a pass is an immediate offset from the pass's address.
  static_assert(kThreadsPerRow % ((kChunksPerRow % 8 == 0) ? 8 : 4) == 0, "steps must not cross the XOR pattern");
  static __device__ __forceinline__ int chunk0() { return int(threadIdx.x) % kThreadsPerRow; }
  static __device__ __forceinline__ int firstRow() { return int(threadIdx.x) / kThreadsPerRow; }
};

template <typename Element, int D, int Rows, int Threads, typename RowSource>
__device__ __forceinline__ void loadTile(Element *tile, RowSource rows, int headDim, bool vectorAccess,
                                         const void *safeAddress) {
  using Copy = TileCopy<Element, D, Rows, Threads>;
  constexpr int kChunksPerRow = Copy::kChunksPerRow;
  constexpr int kThreadsPerRow = Copy::kThreadsPerRow;
  constexpr int kChunkSteps = Copy::kChunkSteps;
  constexpr int kRowsPerPass = Copy::kRowsPerPass;
  const int chunk0 = Copy::chunk0();
  int r = Copy::firstRow();
  if (vectorAccess) {
    const uint32_t tileAddress = prim::smemAddress(tile);
#pragma unroll 1
    for (; r < Rows; r += kRowsPerPass, rows.next()) {
      const uint32_t destination =
          tileAddress + uint32_t(r * D * 2) + uint32_t((chunk0 ^ prim::swizzleRowXor<kChunksPerRow>(r)) << 4);
      const TileRow<Element> row = rows.at(r);
      const Element *source = row.source;
      const bool rowValid = row.present;
#pragma unroll
      for (int step = 0; step < kChunkSteps; ++step) {
        const bool valid = rowValid && (chunk0 + step * kThreadsPerRow) * 8 < headDim;
        prim::cpAsync16(destination + step * kThreadsPerRow * 16,
                        valid ? static_cast<const void *>(source + step * kThreadsPerRow * 8) : safeAddress, valid);
      }
    }
  } else {
#pragma unroll 1
    for (; r < Rows; r += kRowsPerPass, rows.next()) {
      Element *destination = tile + r * D + ((chunk0 ^ prim::swizzleRowXor<kChunksPerRow>(r)) << 3);
      const TileRow<Element> row = rows.at(r);
      const Element *source = row.source;
      const bool rowValid = row.present;
#pragma unroll
      for (int step = 0; step < kChunkSteps; ++step) {
        const int column = (chunk0 + step * kThreadsPerRow) * 8;
        const uint16_t *elements = reinterpret_cast<const uint16_t *>(source + step * kThreadsPerRow * 8);
        uint32_t packed[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t lo = (rowValid && column + 2 * e < headDim) ? elements[2 * e] : 0u;
          const uint32_t hi = (rowValid && column + 2 * e + 1 < headDim) ? elements[2 * e + 1] : 0u;
          packed[e] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4 *>(destination + step * kThreadsPerRow * 8) =
            make_uint4(packed[0], packed[1], packed[2], packed[3]);
      }
    }
  }
}

// The rows of a dense tile: `rows` rowStride apart, the first validRows present.
template <typename Element, int D, int Rows, int Threads>
__device__ __forceinline__ DenseRows<Element> denseRows(const Element *rows, int64_t rowStride, int validRows) {
  using Copy = TileCopy<Element, D, Rows, Threads>;
  return DenseRows<Element>(rows, rowStride, validRows, Copy::firstRow(), Copy::chunk0() * 8, Copy::kRowsPerPass);
}

// The rows of a paged tile: column `which` (0 K, 1 V) of the row table.
template <typename Element, int D, int Rows, int Threads>
__device__ __forceinline__ PagedRows<Element> pagedRows(const Element *cache, const int64_t *table, int which) {
  using Copy = TileCopy<Element, D, Rows, Threads>;
  return PagedRows<Element>(cache, table + which, Copy::firstRow(), Copy::chunk0() * 8, Copy::kRowsPerPass);
}

// ldmatrix addresses into a swizzled tile, split so that the loop needs no address arithmetic: the lane's row
// (laneRow; its row % 8 fixes the XOR) and the chunk bit it adds (laneChunk) give a few per-lane base addresses, one per
// even chunk offset inside an XOR group; row offsets (multiples of 8) and whole XOR groups are compile-time immediates.
// Without this the compiler hoists one address register per (row, chunk) pair out of the key loop and spills.
template <int D>
struct SwizzledLane {
  static constexpr int kGroupChunks = (D / 8) % 8 == 0 ? 8 : 4;  // chunks one XOR pattern spans (swizzle.cuh)
  uint32_t base[kGroupChunks / 2];
  __device__ __forceinline__ SwizzledLane(const void *tile, int laneRow, int laneChunk) {
    const uint32_t rowAddress = prim::smemAddress(tile) + uint32_t(laneRow * D * 2);
    const int chunkXor = laneChunk ^ prim::swizzleRowXor<D / 8>(laneRow);
#pragma unroll
    for (int k = 0; k < kGroupChunks / 2; ++k) base[k] = rowAddress + uint32_t(((2 * k) ^ chunkXor) << 4);
  }
  // rowOffset % 8 == 0 and chunkOffset even, both compile-time after unrolling.
  __device__ __forceinline__ uint32_t address(int rowOffset, int chunkOffset) const {
    const int inGroup = chunkOffset % kGroupChunks;
    return base[inGroup / 2] + uint32_t(rowOffset * D * 2 + (chunkOffset - inGroup) * 16);
  }
};

template <typename Element>
__device__ __forceinline__ void writeEmptyRows(const ForwardParams &p, Element *oRows, float *lseRows, int rows,
                                               int threads, float emptyLse) {
  // No visible key for any row of the block: O = 0, LSE = the sink or -inf.
  const int64_t elements = int64_t(rows) * p.headDimV;
  for (int64_t idx = threadIdx.x; idx < elements; idx += threads) {
    const int64_t r = idx / p.headDimV;
    const int64_t c = idx - r * p.headDimV;
    reinterpret_cast<uint16_t *>(oRows)[r * p.oRow + c] = 0;  // +0.0 in FP16 and BF16
  }
  if (lseRows != nullptr)
    for (int r = threadIdx.x; r < rows; r += threads) lseRows[int64_t(r) * p.lseRow] = emptyLse;
}

// TransformLogits: softcap or ALiBi is on. The plain kernel (false) never carries their code: keeping it in one kernel
// behind a runtime branch cost ~12% at D128 (measured on H200: the register allocation serves both paths and spills).
// Paged: K/V come from a paged cache through a row table in shared memory (two tiles' worth, by key-block parity),
// filled one key block ahead by one thread per key; the dense kernel (false) has neither the table nor its code.
template <typename Element, int D, int BlockM, int BlockN, int Warps, int MinBlocksPerSM, bool TransformLogits,
          bool Paged>
__global__ void __launch_bounds__(Warps * 32, MinBlocksPerSM) forwardMmaKernel(const ForwardParams p) {
  constexpr int kThreads = Warps * 32;
  constexpr int kWarpRows = BlockM / Warps;
  constexpr int kMTiles = kWarpRows / 16;  // 16-row mma tiles per warp
  constexpr int kNTiles = BlockN / 8;      // 8-key accumulator tiles of S
  constexpr int kDTiles = D / 8;           // 8-column accumulator tiles of O
  constexpr int kQkSteps = D / 16;         // k-steps of Q K^T
  constexpr int kPvSteps = BlockN / 16;    // k-steps of P V
  static_assert(kWarpRows % 16 == 0 && kNTiles % 2 == 0 && kDTiles % 2 == 0, "tile does not fit the mma shape");
  static_assert(!Paged || BlockN <= kThreads, "the row table takes one thread per key of a block");

  extern __shared__ __align__(128) unsigned char mmaShared[];
  Element *sQ = reinterpret_cast<Element *>(mmaShared);
  Element *sK = sQ + BlockM * D;
  Element *sV = sK + BlockN * D;
  // Paged: [2][BlockN][K offset, V offset]; key block n's entries are at (n & 1).
  int64_t *const sRowTable = reinterpret_cast<int64_t *>(sV + BlockN * D);

  const WorkItem work = decodeWorkItem(p);
  const SequenceExtent seq = sequenceExtent<Paged>(p, work.batch);
  const int m0 = work.queryBlock * BlockM;
  if (m0 >= seq.seqQ) return;  // ragged: this sequence is shorter than the grid's bound
  const int rowsHere = min(BlockM, seq.seqQ - m0);

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int group = lane >> 2;  // accumulator row within a 16-row tile (and +8)
  const int quad = lane & 3;    // accumulator column pair
  const int warpRow0 = warp * kWarpRows;

  Element *oRows = static_cast<Element *>(p.o) + int64_t(work.batch) * p.oBatch + int64_t(work.head) * p.oHead +
                   (seq.qStart + m0) * p.oRow;
  float *lseRows = p.lse == nullptr ? nullptr
                                    : p.lse + int64_t(work.batch) * p.lseBatch + int64_t(work.head) * p.lseHead +
                                          (seq.qStart + m0) * p.lseRow;

  const RowKeys firstRow = rowKeys(p, m0, seq.seqQ, seq.seqK);
  const RowKeys lastRow = rowKeys(p, m0 + rowsHere - 1, seq.seqQ, seq.seqK);
  const RowKeys blockKeys = keysOfRows(firstRow, lastRow);
  if (blockKeys.lo > blockKeys.hi) {
    writeEmptyRows(p, oRows, lseRows, rowsHere, kThreads, sinkOf(p, work.head));
    return;
  }
  const BlockRange keyBlocks = blocksOf(blockKeys, BlockN);
  const int firstKeyBlock = keyBlocks.first;
  const int lastKeyBlock = keyBlocks.last;
  // A key block inside [allLo, allHi] needs no per-element mask.
  const RowKeys allRows = keysOfEveryRow(firstRow, lastRow);
  const int allLo = allRows.lo;
  const int allHi = allRows.hi;

  // Per element the rule's diagonal form, which needs no per-row registers. This thread's rows are
  // myRow0 + mt*16 + half*8.
  const Diagonals diagonals = diagonalsOf(p, seq.seqQ, seq.seqK);
  const int myRow0 = m0 + warpRow0 + group;

  const Element *qRows = static_cast<const Element *>(p.q) + int64_t(work.batch) * p.qBatch +
                         int64_t(work.head) * p.qHead + (seq.qStart + m0) * p.qRow;
  const int kvHead = work.head / p.headsPerKvHead;
  const Element *kRows = static_cast<const Element *>(p.k) + int64_t(work.batch) * p.kBatch +
                         int64_t(kvHead) * p.kHead + seq.kStart * p.kRow;
  const Element *vRows = static_cast<const Element *>(p.v) + int64_t(work.batch) * p.vBatch +
                         int64_t(kvHead) * p.vHead + seq.kStart * p.vRow;

  const Element *kCache = static_cast<const Element *>(p.k);  // paged: the table's offsets hold page, row and head
  const Element *vCache = static_cast<const Element *>(p.v);
  const int tableRow = int(threadIdx.x);  // paged: the key of each block whose table entry this thread writes
  if constexpr (Paged) {
    if (tableRow < BlockN)
      storeRow(p, kvHead, lookupRow(p, work.batch, lastKeyBlock * BlockN + tableRow, seq.seqK),
               sRowTable + (lastKeyBlock & 1) * BlockN * 2 + 2 * tableRow);
    __syncthreads();
  }

  loadTile<Element, D, BlockM, kThreads>(sQ, denseRows<Element, D, BlockM, kThreads>(qRows, p.qRow, rowsHere),
                                         p.headDim, p.vectorAccess, p.q);
  if constexpr (Paged)
    loadTile<Element, D, BlockN, kThreads>(
        sK, pagedRows<Element, D, BlockN, kThreads>(kCache, sRowTable + (lastKeyBlock & 1) * BlockN * 2, 0),
        p.headDim, p.vectorAccess, p.k);
  else
    loadTile<Element, D, BlockN, kThreads>(
        sK,
        denseRows<Element, D, BlockN, kThreads>(kRows + int64_t(lastKeyBlock) * BlockN * p.kRow, p.kRow,
                                                seq.seqK - lastKeyBlock * BlockN),
        p.headDim, p.vectorAccess, p.k);
  prim::cpAsyncCommit();

  // Plain logits fold scale * log2(e) into the exp2 argument (one FFMA per element); softcap and ALiBi need the
  // logit itself, so those paths turn S into log2-domain logits first and use a unit scale.
  const float exp2Scale = TransformLogits ? 1.f : p.scale * prim::kLog2e;
  const float softcapLog2 = p.softcap * prim::kLog2e;
  const float scaleOverSoftcap = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
  const float scaleLog2 = p.scale * prim::kLog2e;
  const float slopeLog2 = alibiSlope(p, work.batch, work.head) * prim::kLog2e;

  const SwizzledLane<D> qLane(sQ, warpRow0 + (lane & 15), lane >> 4);
  const SwizzledLane<D> kLane(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const SwizzledLane<D> vLane(sV, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  float acc[kMTiles][kDTiles][4];
  float rowMax[kMTiles][2];
  float rowSum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      rowMax[mt][half] = negativeInfinity();
      rowSum[mt][half] = 0.f;
    }
  }

  for (int n = lastKeyBlock; n >= firstKeyBlock; --n) {
    const int n0 = n * BlockN;
    prim::cpAsyncWait<0>();
    __syncthreads();  // K(n) (and Q) landed; every warp is done reading V(n+1)
    if constexpr (Paged)
      loadTile<Element, D, BlockN, kThreads>(
          sV, pagedRows<Element, D, BlockN, kThreads>(vCache, sRowTable + (n & 1) * BlockN * 2, 1), p.headDimV,
          p.vectorAccess, p.v);
    else
      loadTile<Element, D, BlockN, kThreads>(
          sV, denseRows<Element, D, BlockN, kThreads>(vRows + int64_t(n0) * p.vRow, p.vRow, seq.seqK - n0),
          p.headDimV, p.vectorAccess, p.v);
    prim::cpAsyncCommit();
    // Paged: the block table entry of this thread's key of block n - 1 is read now and its offsets are stored
    // before the barrier that precedes K(n - 1), into the parity block n + 1 used: V(n + 1) read it before this
    // iteration's first barrier.
    PagedRowLookup nextRow{{-1, 0}, false};
    if constexpr (Paged) {
      if (n > firstKeyBlock && tableRow < BlockN)
        nextRow = lookupRow(p, work.batch, n0 - BlockN + tableRow, seq.seqK);
    }

    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

#pragma unroll
    for (int ks = 0; ks < kQkSteps; ++ks) {
      uint32_t qFrag[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) prim::ldmatrixX4(qFrag[mt], qLane.address(mt * 16, ks * 2));
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t kFrag[4];
        prim::ldmatrixX4(kFrag, kLane.address(np * 16, ks * 2));
        const uint32_t b0[2] = {kFrag[0], kFrag[1]};
        const uint32_t b1[2] = {kFrag[2], kFrag[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          prim::mmaM16N8K16<Element>(s[mt][2 * np], qFrag[mt], b0);
          prim::mmaM16N8K16<Element>(s[mt][2 * np + 1], qFrag[mt], b1);
        }
      }
    }

    if constexpr (TransformLogits) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = p.softcap > 0.f ? softcapLog2 * tanhf(s[mt][nt][e] * scaleOverSoftcap)
                                      : s[mt][nt][e] * scaleLog2;
            const int j = n0 + nt * 8 + 2 * quad + (e & 1);
            const int i = myRow0 + mt * 16 + (e >> 1) * 8;
            x -= slopeLog2 * fabsf(float(j - alignedRow(i, seq.seqQ, seq.seqK)));
            s[mt][nt][e] = x;
          }
    }

    if (n0 < allLo || n0 + BlockN - 1 > allHi) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = n0 + nt * 8 + 2 * quad + (e & 1);
            if (!visibleOnDiagonals(diagonals, myRow0 + mt * 16 + (e >> 1) * 8, j, seq.seqK))
              s[mt][nt][e] = negativeInfinity();
          }
    }

    // Online softmax: rescale what was accumulated to the new row maximum, then P = exp2(S * scale - max).
    uint32_t pFrag[kMTiles][kPvSteps][4];
    float correction[kMTiles][2];
    bool maxMoved = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float blockMax = negativeInfinity();
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          blockMax = fmaxf(blockMax, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        blockMax = prim::quadMax(blockMax);
        const float newMax = fmaxf(rowMax[mt][half], blockMax);
        // A row with nothing visible yet keeps max -inf; subtracting 0 then keeps every exp2 argument -inf (P = 0)
        // instead of -inf - -inf = NaN. Its old max is -inf too, so the correction is exp2(-inf) = 0 on zeros.
        const float newMaxScaled = prim::scaledMax(newMax, exp2Scale);
        correction[mt][half] = prim::maxCorrection(rowMax[mt][half], newMaxScaled, exp2Scale);
        maxMoved |= newMax != rowMax[mt][half];
        rowMax[mt][half] = newMax;
        float blockSum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = prim::exp2Fast(fmaf(s[mt][nt][2 * half + e], exp2Scale, -newMaxScaled));
            s[mt][nt][2 * half + e] = pe;
            blockSum += pe;
          }
        rowSum[mt][half] = rowSum[mt][half] * correction[mt][half] + blockSum;
      }
      // The S accumulator layout of two adjacent 8-key tiles is the A-operand layout of one 16-key k-step.
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) {
        pFrag[mt][kk][0] = prim::packFloat2<Element>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pFrag[mt][kk][1] = prim::packFloat2<Element>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pFrag[mt][kk][2] = prim::packFloat2<Element>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pFrag[mt][kk][3] = prim::packFloat2<Element>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    }

    // Once the row maxima settle, most blocks leave every maximum of the warp unchanged: the correction is then
    // exactly 1 (same product subtracted from itself) and the kDTiles * 4 * kMTiles multiplies can be skipped.
    if (__any_sync(0xffffffffu, maxMoved)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][dt][e] *= correction[mt][e >> 1];
    }

    if constexpr (Paged) {
      if (n > firstKeyBlock && tableRow < BlockN)
        storeRow(p, kvHead, nextRow, sRowTable + ((n - 1) & 1) * BlockN * 2 + 2 * tableRow);
    }
    prim::cpAsyncWait<0>();
    __syncthreads();  // V(n) landed; every warp is done reading K(n); paged: block n - 1's table is written
    if (n > firstKeyBlock) {
      if constexpr (Paged)
        loadTile<Element, D, BlockN, kThreads>(
            sK, pagedRows<Element, D, BlockN, kThreads>(kCache, sRowTable + ((n - 1) & 1) * BlockN * 2, 0),
            p.headDim, p.vectorAccess, p.k);
      else
        loadTile<Element, D, BlockN, kThreads>(
            sK,
            denseRows<Element, D, BlockN, kThreads>(kRows + int64_t(n0 - BlockN) * p.kRow, p.kRow,
                                                    seq.seqK - (n0 - BlockN)),
            p.headDim, p.vectorAccess, p.k);
    }
    prim::cpAsyncCommit();

#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk)
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t vFrag[4];
        prim::ldmatrixX4Trans(vFrag, vLane.address(kk * 16, dp * 2));
        const uint32_t b0[2] = {vFrag[0], vFrag[1]};
        const uint32_t b1[2] = {vFrag[2], vFrag[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          prim::mmaM16N8K16<Element>(acc[mt][2 * dp], pFrag[mt][kk], b0);
          prim::mmaM16N8K16<Element>(acc[mt][2 * dp + 1], pFrag[mt][kk], b1);
        }
      }
  }

  // Epilogue: normalize and store straight from the accumulators (a quad writes 16 contiguous bytes of a row); O is
  // written once per CTA, so staging it through shared memory for wider stores is not worth the registers.
  const float sinkLog2 = sinkOf(p, work.head) * prim::kLog2e;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float total = prim::quadSum(rowSum[mt][half]);
      float maxLog2 = rowMax[mt][half] * exp2Scale;
      const float keep = p.sinks ? prim::foldSink<prim::Exp2>(maxLog2, total, sinkLog2) : 1.f;
      const bool empty = !(total > 0.f);  // no visible key and no sink: O = 0, LSE = -inf
      const float inverse = empty ? 0.f : keep / total;
      const int localRow = warpRow0 + mt * 16 + group + half * 8;
      if (localRow >= rowsHere) continue;
      Element *oRow = oRows + int64_t(localRow) * p.oRow + 2 * quad;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int column = dt * 8 + 2 * quad;
        if (column >= p.headDimV) continue;
        const uint32_t packed =
            prim::packFloat2<Element>(acc[mt][dt][2 * half] * inverse, acc[mt][dt][2 * half + 1] * inverse);
        if (p.vectorAccess) {
          *reinterpret_cast<uint32_t *>(oRow + dt * 8) = packed;
        } else {
          reinterpret_cast<uint16_t *>(oRow + dt * 8)[0] = uint16_t(packed);
          if (column + 1 < p.headDimV) reinterpret_cast<uint16_t *>(oRow + dt * 8)[1] = uint16_t(packed >> 16);
        }
      }
      if (lseRows != nullptr && quad == 0) {
        lseRows[int64_t(localRow) * p.lseRow] =
            empty ? negativeInfinity() : (maxLog2 + __log2f(total)) * prim::kLn2;
      }
    }
}

}  // namespace flashattn::cuda::forward
