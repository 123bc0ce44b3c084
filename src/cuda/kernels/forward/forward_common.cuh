// SPDX-License-Identifier: BSD-3-Clause
// Device pieces shared by the tensor-core and the FP32 forward kernels: which (sequence, head, query block) a CTA
// serves, the sequence's extent (ragged offsets and per-sequence KV lengths, clamped so bad offsets never address
// outside the tensors), the mask rule's forms on the forward's parameters, and a paged cache's row table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/kernels/forward/forward_params.hpp"
#include "cuda/kernels/paged_kv.cuh"
#include "cuda/primitives/merge_state.cuh"

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

// A paged cache's keys start at 0 in each sequence's pages (kStart 0) and end at its seqlensK, under a dense or a
// ragged Q alike (Paged: the kernel's compile-time form of p.paged).
template <bool Paged>
__device__ __forceinline__ SequenceExtent sequenceExtent(const ForwardParams &p, int32_t b) {
  SequenceExtent e{0, 0, p.seqQ, p.seqK};
  if (p.ragged) {
    const int64_t q0 = clampInt64(p.cuSeqlensQ[b], 0, p.totalQ);
    const int64_t q1 = clampInt64(p.cuSeqlensQ[b + 1], q0, p.totalQ);
    e.qStart = q0;
    e.seqQ = int32_t(q1 - q0 < p.seqQ ? q1 - q0 : p.seqQ);
    if constexpr (!Paged) {
      const int64_t k0 = clampInt64(p.cuSeqlensK[b], 0, p.totalK);
      const int64_t k1 = clampInt64(p.cuSeqlensK[b + 1], k0, p.totalK);
      e.kStart = k0;
      e.seqK = int32_t(k1 - k0 < p.seqK ? k1 - k0 : p.seqK);
    }
  }
  if (p.seqlensK != nullptr) e.seqK = int32_t(clampInt64(p.seqlensK[b], 0, e.seqK));
  return e;
}

// The mask rule of core/mask.hpp on this family's parameters. Kernel lengths fit 32 bits and the rule's ranges are
// clamped into [0, seqK] and [-1, seqK - 1], so narrowing them to 32 bits is exact. The block forms (keysOfRows,
// keysOfEveryRow, blocksOf) take a block's first and last RowKeys.
struct RowKeys {
  int32_t lo;
  int32_t hi;
};

__device__ __forceinline__ RowKeys rowKeys(const ForwardParams &p, int64_t i, int32_t sq, int32_t sk) {
  const KeyRange r = visibleKeys(static_cast<Mask>(p.mask), p.windowLeft, p.windowRight, i, sq, sk);
  return RowKeys{int32_t(r.lo), int32_t(r.hi)};
}

// The per-element form (visibleOnDiagonals), which needs no per-row registers.
__device__ __forceinline__ Diagonals diagonalsOf(const ForwardParams &p, int32_t sq, int32_t sk) {
  return visibleDiagonals(static_cast<Mask>(p.mask), p.windowLeft, p.windowRight, sq, sk);
}

// The attention sink of a query head (natural-log units), -inf without sinks: folded into each row's state in the
// epilogues (prim::foldSink), it is also the LSE of a row that sees no key.
__device__ __forceinline__ float sinkOf(const ForwardParams &p, int32_t head) {
  return p.sinks == nullptr ? prim::negInf() : __ldg(p.sinks + head);
}

__device__ __forceinline__ float alibiSlope(const ForwardParams &p, int32_t b, int32_t h) {
  return p.alibiSlopes == nullptr ? 0.f : p.alibiSlopes[int64_t(b) * p.alibiBatchStride + h];
}

// A paged cache's key tile, as element offsets of each key's K and V rows (KV head included) in shared memory: entry
// r of the table is {K offset, V offset} of key n0 + r, or -1 where the key is past the sequence or its page lies
// outside the pool (such rows load as zeros). Key r's table entry is looked up by thread r (BlockN <= threads), with
// its block-table read first (lookupRow) and its store later (storeRow), so the read's latency can pass under other
// work of the thread.
struct PagedRowLookup {
  paged::PagedRow row;
  bool present;
};

__device__ __forceinline__ PagedRowLookup lookupRow(const ForwardParams &p, int32_t b, int32_t key, int32_t seqK) {
  PagedRowLookup l{{-1, 0}, key < seqK};
  if (l.present) l.row = paged::pagedRow(p.cache, b, key);
  l.present = l.present && l.row.page >= 0;
  return l;
}

__device__ __forceinline__ void storeRow(const ForwardParams &p, int32_t kvHead, PagedRowLookup l, int64_t *entry) {
  entry[0] = l.present ? paged::rowOffset(l.row, p.kBatch, p.kRow) + int64_t(kvHead) * p.kHead : -1;
  entry[1] = l.present ? paged::rowOffset(l.row, p.vBatch, p.vRow) + int64_t(kvHead) * p.vHead : -1;
}

}  // namespace flashattn::cuda::forward
