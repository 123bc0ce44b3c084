// SPDX-License-Identifier: BSD-3-Clause
// Device pieces shared by the backward kernels: which (key block, KV head, sequence) a CTA serves, the sequence's
// extent, the mask rule's forms on the backward's parameters, the workspace row index, and the ordered dQ accumulation
// of deterministic mode.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/kernels/backward/backward_params.hpp"

namespace flashattn::cuda::backward {

__host__ __device__ __forceinline__ int64_t clampInt64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

struct WorkItem {
  int32_t keyBlock;
  int32_t kvHead;
  int32_t batch;
};

// Key blocks vary fastest: the CTAs of one (sequence, KV head) are launched together and in ascending key-block order
// (descending with descendingTurns), which deterministic mode relies on (a CTA only ever waits for the CTA of the key
// block before it in the turn order, launched before it). Under causal masks the low key blocks see the most query
// blocks, so in ascending order the longest work also starts first.
__device__ __forceinline__ WorkItem decodeWorkItem(const BackwardParams &p) {
  const int64_t linear = blockIdx.x;
  WorkItem w;
  int64_t group;  // batch * kvHeads + kvHead
  if (p.groupsPerSection <= 1) {
    w.keyBlock = int32_t(linear % p.keyBlocks);
    group = linear / p.keyBlocks;
  } else {
    // Key-block-major inside a section (the last section may hold fewer groups); each group's key blocks still come
    // in ascending order (descending with descendingTurns), as the deterministic mode's turns need.
    const int64_t groups = int64_t(p.kvHeads) * p.batch;
    const int64_t perSection = int64_t(p.groupsPerSection) * p.keyBlocks;
    const int64_t section = linear / perSection;
    const int64_t inSection = linear - section * perSection;
    const int64_t first = section * p.groupsPerSection;
    const int64_t width = groups - first < p.groupsPerSection ? groups - first : p.groupsPerSection;
    w.keyBlock = int32_t(inSection / width);
    group = first + (inSection - int64_t(w.keyBlock) * width);
  }
  if (p.descendingTurns) w.keyBlock = p.keyBlocks - 1 - w.keyBlock;
  w.kvHead = int32_t(group % p.kvHeads);
  w.batch = int32_t(group / p.kvHeads);
  return w;
}

struct SequenceExtent {
  int64_t qStart;  // first row of this sequence in Q/O/dO/dQ/LSE (ragged: token offset; dense: 0)
  int64_t kStart;  // first row in K/V/dK/dV
  int32_t seqQ;    // query rows of this sequence
  int32_t seqK;    // keys that attention sees (after seqlensK)
  int32_t rowsK;   // dK/dV rows this sequence owns (dense: the capacity seqK; keys past seqlensK get zero gradient)
};

// Same clamping as the forward kernels, so bad offsets never address outside the tensors and both passes agree on
// every sequence's extent.
__device__ __forceinline__ SequenceExtent sequenceExtent(const BackwardParams &p, int32_t b) {
  SequenceExtent e{0, 0, p.seqQ, p.seqK, p.seqK};
  if (p.ragged) {
    const int64_t q0 = clampInt64(p.cuSeqlensQ[b], 0, p.totalQ);
    const int64_t q1 = clampInt64(p.cuSeqlensQ[b + 1], q0, p.totalQ);
    const int64_t k0 = clampInt64(p.cuSeqlensK[b], 0, p.totalK);
    const int64_t k1 = clampInt64(p.cuSeqlensK[b + 1], k0, p.totalK);
    e.qStart = q0;
    e.kStart = k0;
    e.seqQ = int32_t(q1 - q0 < p.seqQ ? q1 - q0 : p.seqQ);
    e.seqK = int32_t(k1 - k0 < p.seqK ? k1 - k0 : p.seqK);
    e.rowsK = e.seqK;
  }
  if (p.seqlensK != nullptr) e.seqK = int32_t(clampInt64(p.seqlensK[b], 0, e.seqK));
  return e;
}

// Workspace row of (sequence b, query head h, row i): dense [batch][heads][seqQ], ragged [heads][totalQ].
__device__ __forceinline__ int64_t workspaceRow(const BackwardParams &p, int32_t b, int32_t h,
                                                const SequenceExtent &e, int64_t i) {
  return p.ragged ? int64_t(h) * p.totalQ + e.qStart + i : (int64_t(b) * p.heads + h) * p.seqQ + i;
}

// The swizzle of a paneled dQ accumulator row: column c of the 64-wide panel is stored at c ^ dqSwizzle(row). Four
// consecutive rows map the accumulator fragment's column pairs to 16 distinct bank pairs; runs of 8 stay contiguous.
__host__ __device__ __forceinline__ int dqSwizzle(int64_t row) { return 8 * int(row & 3); }

// Index of the first element of a workspace row in a panel of the paneled dQ accumulator (its 64 columns follow,
// swizzled): consecutive rows of one (sequence, head) are contiguous there.
__device__ __forceinline__ int64_t dqPanelRowStart(const BackwardParams &p, int64_t row, int panel) {
  return (int64_t(panel) * p.dqRows + row) * 64;
}

// Index of (workspace row, column) in the FP32 dQ accumulator (p.dqPaneled: see BackwardParams).
__device__ __forceinline__ int64_t dqAccumIndex(const BackwardParams &p, int64_t row, int c) {
  if (!p.dqPaneled) return row * p.dqPitch + c;
  return dqPanelRowStart(p, row, c >> 6) + ((c & 63) ^ dqSwizzle(row));
}

// The mask rule of core/mask.hpp on this family's parameters. The main loops ask per tile and per row, so they take
// the rule's diagonal form, computed once per CTA: a few 32-bit compares instead of visibleKeys' mask-kind branches
// and 64-bit window arithmetic on every step (measured: 2.8% of the sm90 d128 backward's time on an H100).
struct RowKeys {
  int32_t lo;
  int32_t hi;
};

__host__ __device__ __forceinline__ Diagonals diagonalsOf(const BackwardParams &p, int32_t sq, int32_t sk) {
  return visibleDiagonals(static_cast<Mask>(p.mask), p.windowLeft, p.windowRight, sq, sk);
}

__host__ __device__ __forceinline__ RowKeys rowKeys(Diagonals d, int32_t i, int32_t sk) {
  return keysOnDiagonals<RowKeys>(d, i, sk);
}

// Query blocks holding a row that sees a key of the block [n0, n0 + blockN) ({0, -1}: none). The rows seeing a key
// block are one interval whose ends never decrease with n0, so the key blocks seeing one query block are consecutive
// too, which deterministic mode's ordering rests on.
__host__ __device__ __forceinline__ BlockRange queryBlocksOf(const BackwardParams &p, const SequenceExtent &e,
                                                             int32_t n0, int32_t blockM, int32_t blockN) {
  if (e.seqQ <= 0 || n0 >= e.seqK) return BlockRange{0, -1};
  const int32_t nLast = (n0 + blockN < e.seqK ? n0 + blockN : e.seqK) - 1;
  return blocksOf(rowsOfKeys(static_cast<Mask>(p.mask), p.windowLeft, p.windowRight, n0, nLast, e.seqQ, e.seqK),
                  blockM);
}

// True when every (row, key) of the block pair is inside the sequence and visible: no per-element masking needed.
__host__ __device__ __forceinline__ bool blockFullyVisible(Diagonals d, int32_t m0, int32_t n0, int32_t blockM,
                                                           int32_t blockN, int32_t sq, int32_t sk) {
  return tileFullyVisible(d, m0, m0 + blockM - 1, n0, n0 + blockN - 1, sq, sk);
}

__device__ __forceinline__ float alibiSlope(const BackwardParams &p, int32_t b, int32_t h) {
  return p.alibiSlopes == nullptr ? 0.f : p.alibiSlopes[int64_t(b) * p.alibiBatchStride + h];
}

// Deterministic mode: the key blocks that add into one query block's dQ do so in ascending order. The counter of
// (sequence, head, query block) holds the key block whose turn it is; it starts at 0 (memset per call) and the first
// adder, whose predecessor key block does not see this query block, does not wait. (Where the plan chose it,
// descendingTurnsPay, the order is descending instead, BackwardParams::descendingTurns: there the counter holds the
// last adder's key block, and key block n waits for n + 1.)
__device__ __forceinline__ int32_t loadAcquire(const int32_t *address) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void storeRelease(int32_t *address, int32_t value) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

// The counter of (sequence, query head, query block) in the workspace's turn region.
__device__ __forceinline__ int32_t *dqTurnCounter(const BackwardParams &p, int32_t batch, int32_t head,
                                                  int32_t mBlock) {
  return p.dqTurn + (int64_t(batch) * p.heads + head) * p.queryBlocks + mBlock;
}

// One thread: spins until the counter names keyBlock.
__device__ __forceinline__ void spinUntilTurn(const int32_t *turn, int32_t keyBlock) {
  while (loadAcquire(turn) != keyBlock) __nanosleep(64);
}

// One CTA's place in the turn order. The key block before it in the order adds into query block m first iff
// waitSign * m <= waitBound (ascending: m <= the last block key block n - 1 sees; descending: m >= the first block key
// block n + 1 sees: the key blocks seeing one query block are consecutive, and their ranges move up with the key
// block); the counter names its turn with `mine`, and it hands on by storing `next`.
struct TurnOrder {
  int32_t waitSign;
  int32_t waitBound;
  int32_t mine;
  int32_t next;

  __device__ __forceinline__ bool waitsFor(int32_t mBlock) const { return waitSign * mBlock <= waitBound; }
};

// The order of key block `keyBlock` (keys from n0) of a sequence: ascending, or descending with descendingTurns.
__device__ __forceinline__ TurnOrder turnOrderOf(const BackwardParams &p, const SequenceExtent &e, int32_t keyBlock,
                                                 int32_t n0, int32_t blockM, int32_t blockN) {
  if (p.descendingTurns) {
    const BlockRange next = queryBlocksOf(p, e, n0 + blockN, blockM, blockN);
    return TurnOrder{-1, next.first <= next.last ? -next.first : INT32_MIN, keyBlock + 1, keyBlock};
  }
  TurnOrder o{1, -1, keyBlock, keyBlock + 1};
  if (keyBlock > 0) {
    const BlockRange prev = queryBlocksOf(p, e, n0 - blockN, blockM, blockN);
    o.waitBound = prev.first <= prev.last ? prev.last : -1;
  }
  return o;
}

// Whole CTA: returns once every key block before this one in the turn order has added into query block mBlock.
__device__ __forceinline__ void waitForTurn(const int32_t *turn, const TurnOrder &order, int32_t mBlock) {
  if (order.waitsFor(mBlock) && threadIdx.x == 0) spinUntilTurn(turn, order.mine);
  __syncthreads();
}

// Whole CTA, after its additions: hands the query block to the next key block in the turn order.
__device__ __forceinline__ void passTurn(int32_t *turn, const TurnOrder &order) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) storeRelease(turn, order.next);
}

}  // namespace flashattn::cuda::backward
