// SPDX-License-Identifier: BSD-3-Clause
// The copies both wgmma backward kernels make between global memory and a CTA of 256 threads: 16-bit row tiles into
// the 128-byte-swizzled slab stacks the wgmma descriptors read (the CTA's K/V block, each step's Q/dO block), the
// per-row FP32 statistics of a query block, a warp's dQ rows into the paneled FP32 accumulator, and the dK/dV
// accumulators out to the caller's rows.
#pragma once

#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/sm90_bwd_order.cuh"
#include "cuda/primitives/bulk_reduce.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/cp_async_scalar.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/slab_copy.cuh"
#include "cuda/primitives/tma.cuh"

namespace flashattn::cuda::backward_sm90 {

// Rows x D elements into the slab stack at `tile` with Threads threads (all 256 of the CTA, or a producer
// warpgroup's 128); rows >= validRows and columns >= validColumns (a problem narrower than the instance) become zeros
// and read nothing. Where the threads do not split into whole rows (D 192: 24 chunks a row), slab by slab: each slab
// is a 64-wide tile whose 8 chunks a row do, so every address is the thread's own plus constants (the copy's generic
// form divides per chunk, in a loop that does not unroll: ncu put that integer work among the split kernel's top
// stall sites at Q/K 192). Every thread issues each step's copies here, and has the registers for them.
template <typename Element, int D, int Rows, int Threads = 256>
__device__ __forceinline__ void loadTile(uint32_t tile, const Element *rows, int64_t rowStride, int validRows,
                                         int validColumns, int thread, const void *safeAddress) {
  if constexpr (Threads % (D / 8) != 0) {
    static_assert(Threads % 8 == 0 && Rows % (Threads / 8) == 0, "64-wide slabs split the threads into whole rows");
#pragma unroll
    for (int slab = 0; slab < D / 64; ++slab)
      prim::cpAsyncTileToSlabs<Element, 64, Rows, Threads, Rows / (Threads / 8)>(
          tile + uint32_t(slab) * Rows * 128, rows + slab * 64, rowStride, validRows, thread, safeAddress,
          validColumns / 8 - 8 * slab);
  } else {
    constexpr int kRowsPerPass = Threads / (D / 8);
    prim::cpAsyncTileToSlabs<Element, D, Rows, Threads, Rows / kRowsPerPass>(tile, rows, rowStride, validRows, thread,
                                                                              safeAddress, validColumns / 8);
  }
}

// LSE * log2 e and D of the query block's BlockM rows from the workspace into stage `stage` of the two FP32 row
// arrays at base + lseOffset and base + rowDotOffset, by Threads threads (thread 0 .. Threads - 1), one value each
// per pass; rows >= validRows read zeros, so no address past the sequence's rows is formed.
template <int BlockM, int Threads = 256>
__device__ __forceinline__ void loadRowStatistics(const backward::BackwardParams &p, int32_t batch, int32_t head,
                                                  const backward::SequenceExtent &e, int32_t m0, int validRows,
                                                  uint32_t base, uint32_t lseOffset, uint32_t rowDotOffset, int stage,
                                                  int thread) {
#pragma unroll
  for (int pass = 0; pass < (2 * BlockM + Threads - 1) / Threads; ++pass) {
    const int value = thread + pass * Threads;
    if (value < 2 * BlockM) {
      const int r = value % BlockM;
      const bool isLse = value < BlockM;
      const bool ok = r < validRows;
      const int64_t wsRow = backward::workspaceRow(p, batch, head, e, int64_t(m0) + (ok ? r : 0));
      const float *source = (isLse ? p.lseLog2 : p.rowDot) + wsRow;
      const uint32_t destination = base + (isLse ? lseOffset : rowDotOffset) + uint32_t(stage * BlockM + r) * 4;
      prim::cpAsync4(destination, source, ok);
    }
  }
}

// The K (D columns) and V (DV columns) tiles of the CTA's BlockN keys (from key n0 of the sequence) into kTile and
// vTile; keys past seqK and columns past the problem's head dims become zeros.
template <typename Element, int D, int DV, int BlockN>
__device__ __forceinline__ void loadKeyBlock(const backward::BackwardParams &p, const backward::WorkItem &w,
                                             const backward::SequenceExtent &e, int32_t n0, uint32_t kTile,
                                             uint32_t vTile, int thread) {
  const Element *const kBase = static_cast<const Element *>(p.k);
  const Element *const vBase = static_cast<const Element *>(p.v);
  const int validKeys = e.seqK - n0;
  loadTile<Element, D, BlockN>(kTile,
                               kBase + int64_t(w.batch) * p.kBatch + int64_t(w.kvHead) * p.kHead +
                                   (e.kStart + n0) * p.kRow,
                               p.kRow, validKeys, p.headDim, thread, kBase);
  loadTile<Element, DV, BlockN>(vTile,
                               vBase + int64_t(w.batch) * p.vBatch + int64_t(w.kvHead) * p.vHead +
                                   (e.kStart + n0) * p.vRow,
                               p.vRow, validKeys, p.headDimV, thread, vBase);
}

// Step t's query block (its head and rows from stepBlock): the Q (D columns) and dO (DV columns) tiles into stage
// `stage` of the tiles at base + qOffset and base + dOOffset (qStageBytes and dOStageBytes apart; columns past the
// problem's head dims zero), and its row statistics (loadRowStatistics).
template <typename Element, int D, int DV, int BlockM, bool Deterministic>
__device__ __forceinline__ void loadQueryStep(const backward::BackwardParams &p, const backward::WorkItem &w,
                                              const backward::SequenceExtent &e, const StepOrder &order,
                                              int32_t headBase, int32_t t, int stage,
                                              uint32_t base, uint32_t qOffset, uint32_t dOOffset,
                                              uint32_t qStageBytes, uint32_t dOStageBytes, uint32_t lseOffset,
                                              uint32_t rowDotOffset, int thread) {
  const Element *const qBase = static_cast<const Element *>(p.q);
  const Element *const dOBase = static_cast<const Element *>(p.dO);
  const StepBlock sb = stepBlock<Deterministic>(order, t);
  const int32_t m0 = sb.mBlock * BlockM;
  const int32_t h = headBase + sb.head;
  const int64_t row0 = e.qStart + m0;
  const int valid = e.seqQ - m0;
  loadTile<Element, D, BlockM>(base + qOffset + stage * qStageBytes,
                               qBase + int64_t(w.batch) * p.qBatch + int64_t(h) * p.qHead + row0 * p.qRow, p.qRow,
                               valid, p.headDim, thread, qBase);
  loadTile<Element, DV, BlockM>(base + dOOffset + stage * dOStageBytes,
                               dOBase + int64_t(w.batch) * p.dOBatch + int64_t(h) * p.dOHead + row0 * p.dORow,
                               p.dORow, valid, p.headDimV, thread, dOBase);
  loadRowStatistics<BlockM>(p, w.batch, h, e, m0, valid, base, lseOffset, rowDotOffset, stage, thread);
}

// The producer warpgroup of either kernel's producer form (thread pt of its Threads loaders: all 128, or 64 where
// the split kernel's dQ warps take the other two warps): every step's Q (D columns) and dO (DV columns) tiles into
// stage t % Stages of the slab stacks at base + qOffset and base + dOOffset, by tensor-map copies from thread 0 (a
// ragged sequence's last block by cp.async from every loader instead, so that the rows past the sequence are zeros,
// not the next sequence's), and the block's row statistics by cp.async, one value a loader a pass. A stage's full
// barrier expects the loaders' cp.async arrivals and one arrival of thread 0 (with the tensor copies' bytes); a
// stage is reused once every consumer thread has arrived on its empty barrier.
template <typename Element, int D, int DV, int BlockM, int Stages, bool Deterministic, int Threads = 128>
__device__ __forceinline__ void produceQuerySteps(const Sm90KernelParams &kp, const backward::WorkItem &w,
                                                  const backward::SequenceExtent &e, const StepOrder &order,
                                                  int32_t headBase, int32_t steps, uint32_t base, uint32_t qOffset,
                                                  uint32_t dOOffset, uint32_t qStageBytes, uint32_t dOStageBytes,
                                                  uint32_t lseOffset, uint32_t rowDotOffset, uint32_t full,
                                                  uint32_t empty, int pt) {
  const backward::BackwardParams &p = kp.b;
  if (pt == 0) {
    prim::prefetchTensorMap(&kp.qMap);
    prim::prefetchTensorMap(&kp.dOMap);
  }
  for (int32_t t = 0; t < steps; ++t) {
    const int st = t % Stages;
    if (t >= Stages) prim::mbarrierWaitInline(empty + 8 * st, uint32_t(t / Stages - 1) & 1u);
    const StepBlock sb = stepBlock<Deterministic>(order, t);
    const int32_t m0 = sb.mBlock * BlockM;
    const int32_t h = headBase + sb.head;
    const uint32_t qTile = base + qOffset + uint32_t(st) * qStageBytes;
    const uint32_t dOTile = base + dOOffset + uint32_t(st) * dOStageBytes;
    if (p.ragged && m0 + BlockM > e.seqQ) {
      const Element *const qBase = static_cast<const Element *>(p.q);
      const Element *const dOBase = static_cast<const Element *>(p.dO);
      const int64_t row0 = e.qStart + m0;
      loadTile<Element, D, BlockM, Threads>(qTile, qBase + int64_t(h) * p.qHead + row0 * p.qRow, p.qRow,
                                            e.seqQ - m0, p.headDim, pt, qBase);
      loadTile<Element, DV, BlockM, Threads>(dOTile, dOBase + int64_t(h) * p.dOHead + row0 * p.dORow, p.dORow,
                                             e.seqQ - m0, p.headDimV, pt, dOBase);
      if (pt == 0) prim::mbarrierArrive(full + 8 * st);  // the arrival that otherwise announces the bytes
    } else if (pt == 0) {
      prim::mbarrierArriveExpectTx(full + 8 * st, uint32_t(BlockM) * uint32_t(D + DV) * 2u);
      // Ragged: rows of the packed tokens (tmaServes: 32 bits), in a map whose batch is one.
      const int32_t row = int32_t(e.qStart) + m0;
      const int32_t batch = p.ragged ? 0 : w.batch;
#pragma unroll
      for (int c = 0; c < D / 64; ++c)
        prim::tensorCopy4d(qTile + uint32_t(c) * BlockM * 128, &kp.qMap, 64 * c, row, h, batch, full + 8 * st);
#pragma unroll
      for (int c = 0; c < DV / 64; ++c)
        prim::tensorCopy4d(dOTile + uint32_t(c) * BlockM * 128, &kp.dOMap, 64 * c, row, h, batch, full + 8 * st);
    }
    loadRowStatistics<BlockM, Threads>(p, w.batch, h, e, m0, e.seqQ - m0, base, lseOffset, rowDotOffset, st, pt);
    prim::cpAsyncMbarrierArrive(full + 8 * st);
  }
}

// A warp's 16 rows of dQ (accumulator rows lane / 4 + 8h, columns 8j + 2 * quad of Columns = 64 x panels) into its
// staging tiles at `tile`, [panel][16][64] floats with each row's columns XOR-swizzled as the paneled accumulator's
// workspace row wsRow0 + r has them (backward_common.cuh's dqAccumIndex), so that one bulk reduce-add per panel moves
// them (addDqRows). Waits first for the warp's previous reduce-adds to have read the tiles (WaitForReads: the warp's
// lane 0 issued them; else the caller has waited for whoever did), and fences the stores into the async proxy that
// reads them.
// `tile` is a shared-window address, 256-byte aligned.
template <int Columns, bool WaitForReads = true, int Count>
__device__ __forceinline__ void stageDqRows(uint32_t tile, const float (&dq)[Count], int64_t wsRow0, int lane,
                                            int quad) {
  static_assert(Count == Columns / 2 && Columns % 64 == 0, "16 rows x whole 64-column panels");
  if constexpr (WaitForReads) {
    if (lane == 0) prim::bulkWaitRead<0>();
    __syncwarp();
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = lane / 4 + 8 * hh;
    // Column pair 8 j' + 2 quad of the row sits at float (8 j' + 2 quad) ^ dqSwizzle = 8 (j' ^ (row & 3)) + 2 quad,
    // byte 32 (j' ^ (row & 3)) + 8 quad. The row's start has bits 5-7 clear (a 256-byte aligned tile, 8 quad < 32),
    // so the 32-byte column group goes in by XOR: one instruction per store.
    const uint32_t row = (tile + uint32_t(r) * 256u + uint32_t(quad) * 8u) ^
                         (uint32_t(backward::dqSwizzle(wsRow0 + r)) << 2);
#pragma unroll
    for (int j = 0; j < Columns / 8; ++j)
      prim::storeSharedFloat2((row ^ (uint32_t(j % 8) << 5)) + uint32_t(j / 8) * 4096u, dq[4 * j + 2 * hh],
                              dq[4 * j + 2 * hh + 1]);
  }
  prim::fenceProxyAsyncShared();
  __syncwarp();
}

// How many warps of the producer warpgroup take deterministic mode's ordered dQ additions (addDqInTurns) where a
// kernel's producer form hands them over; the other two load.
constexpr int kDqWarps = 2;
constexpr int kDqWarpLoaders = 128 - 32 * kDqWarps;
constexpr uint32_t kDqStagingWarps = 8;  // the consumer warps whose lane 0 arrives on a dQ warp's staged barrier

// Deterministic mode's dQ warps (a producer form whose consumers stage dQ per warp and leave the ordered additions
// to DqWarps warps of the producer warpgroup; `lane` 0 .. 32 DqWarps - 1). Warp j = lane / 32 takes the steps
// t = j mod DqWarps of the consumers' walk, with a staged and a free mbarrier of its own (staged + 8 j, free + 8 j):
// once every consumer warp has staged its rows for step t, lane 0 waits for the query block's turn (backward_common's
// counters, as DqTurns does), lanes 0..7 issue addTiles(lane, mBlock, head) (their bulk reduce-adds, one bulk group
// each) and free the staging once it is read, then the additions are completed and fenced and lane 0 hands the block
// on. The __syncwarp before lane 0's release store orders the other lanes' completed additions before it, as the
// turn barrier does for passTurnNamed. With the work spread over the warps, one step's round trip (turn, reduce,
// completion, release) overlaps the next step's.
template <int DqWarps, typename AddTiles>
__device__ __forceinline__ void addDqInTurns(const backward::BackwardParams &p, const backward::WorkItem &w,
                                             const StepOrder &order, int32_t headBase, int32_t steps,
                                             uint32_t staged, uint32_t freed, int lane, AddTiles &&addTiles) {
  const int dqWarp = lane >> 5;
  lane &= 31;
  staged += 8u * uint32_t(dqWarp);
  freed += 8u * uint32_t(dqWarp);
  for (int32_t t = dqWarp; t < steps; t += DqWarps) {
    const StepBlock sb = stepBlock<true>(order, t);
    const int32_t h = headBase + sb.head;
    int32_t *const turn = backward::dqTurnCounter(p, w.batch, h, sb.mBlock);
    prim::mbarrierWaitInline(staged, uint32_t(t / DqWarps) & 1u);
    if (lane == 0 && order.turn.waitsFor(sb.mBlock)) backward::spinUntilTurn(turn, order.turn.mine);
    __syncwarp();
    if (lane < 8) {
      // The turn was taken by a generic-proxy acquire; the additions go through the async proxy.
      prim::fenceProxyAsyncGlobal();
      addTiles(lane, sb.mBlock, h);
      prim::bulkWaitRead<0>();
    }
    __syncwarp();
    if (lane == 0) prim::mbarrierArrive(freed);
    if (lane < 8) {
      // Handed on only once the additions are performed, not just issued.
      prim::bulkWait<0>();
      prim::fenceProxyAsyncGlobal();
    }
    __syncwarp();
    if (lane == 0) backward::storeRelease(turn, order.turn.next);
  }
}

// The consumer warp's side of the dQ warps at step t: waits until step t - 1's dQ warp has read the staging, stages
// its rows (stageDqRows) and arrives on step t's staged barrier.
template <int Columns, int DqWarps, int Count>
__device__ __forceinline__ void stageDqForWarps(uint32_t tile, const float (&dq)[Count], int64_t wsRow0, int lane,
                                                int quad, uint32_t staged, uint32_t freed, int32_t t) {
  if (t > 0) prim::mbarrierWaitInline(freed + 8u * uint32_t((t - 1) % DqWarps), uint32_t((t - 1) / DqWarps) & 1u);
  stageDqRows<Columns, false>(tile, dq, wsRow0, lane, quad);
  if (lane == 0) prim::mbarrierArrive(staged + 8u * uint32_t(t % DqWarps));
}

// A warpgroup's transposed dQ (dQ^T accumulator: rows 16 * warp + lane / 4 + 8h are its 64 head-dim columns of one
// panel, columns 8j + 2 * quad + e the block's BlockM query rows) into its staging tile at `tile`, [BlockM][64] floats
// with each query row's columns XOR-swizzled as workspace row wsRow0 + row has them, so that one bulk reduce-add
// moves the tile (addDqRows). Scalar stores: the two floats of a pair are two query rows. The caller orders them
// after the previous addition's read of the tile and fences them into the async proxy. `tile`: 256-byte aligned.
template <int BlockM, int Count>
__device__ __forceinline__ void stageDqColumns(uint32_t tile, const float (&dqT)[Count], int64_t wsRow0, int warp,
                                               int lane, int quad) {
  static_assert(Count == BlockM / 2 && BlockM % 8 == 0, "a 64 x BlockM accumulator");
  const uint32_t column = uint32_t(16 * warp + lane / 4) * 4u;  // bytes; + 32 for the second accumulator row
#pragma unroll
  for (int ee = 0; ee < 2; ++ee) {
    // Rows 8j + 2 quad + ee of every j share their swizzle (rows a multiple of 4 apart).
    const uint32_t swizzle = uint32_t(backward::dqSwizzle(wsRow0 + 2 * quad + ee)) << 2;
#pragma unroll
    for (int j = 0; j < BlockM / 8; ++j) {
      const uint32_t row = tile + uint32_t(8 * j + 2 * quad + ee) * 256u;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        prim::storeSharedFloat((row + column + 32u * hh) ^ swizzle, dqT[4 * j + 2 * hh + ee]);
    }
  }
}

// The issuing thread's half of stageDqRows (a warp's lane 0) or stageDqColumns (one thread of the warpgroup): the
// first `rows` staged rows (the others belong to other sequences, or to none) added to panels firstPanel .. of the
// accumulator at workspace row wsRow0, one bulk reduce-add per panel, in one bulk group.
template <int Panels>
__device__ __forceinline__ void addDqRows(const backward::BackwardParams &p, int64_t wsRow0, int firstPanel,
                                          uint32_t staged, int32_t rows) {
  if (rows > 0) {
#pragma unroll
    for (int panel = 0; panel < Panels; ++panel)
      prim::bulkReduceAddFloats(p.dqAccum + backward::dqPanelRowStart(p, wsRow0, firstPanel + panel),
                                staged + uint32_t(panel) * 4096u, uint32_t(rows) * 64 * 4);
  }
  prim::bulkCommitGroup();
}

// Rows rowInTile and rowInTile + 8 of a 64 x Columns accumulator (columns 8j + 2 * quad + 0..1), times `multiplier`,
// into rows of `base` with the storage type; rows >= rowsLeft and columns >= validColumns (a multiple of 8: the zero
// columns of a problem narrower than the instance) are not written.
template <typename Element, int Columns, int Count>
__device__ __forceinline__ void storeRows(const float (&acc)[Count], Element *base, int64_t rowStride, int rowInTile,
                                          int rowsLeft, int validColumns, int quad, float multiplier = 1.f) {
  static_assert(Count == Columns / 2, "accumulator of 64 x Columns");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = rowInTile + 8 * h;
    if (row >= rowsLeft) continue;
    Element *out = base + int64_t(row) * rowStride + 2 * quad;
#pragma unroll
    for (int j = 0; j < Columns / 8; ++j)
      if (8 * j < validColumns)
        *reinterpret_cast<uint32_t *>(out + 8 * j) =
            prim::packFloat2<Element>(acc[4 * j + 2 * h] * multiplier, acc[4 * j + 2 * h + 1] * multiplier);
  }
}

}  // namespace flashattn::cuda::backward_sm90
