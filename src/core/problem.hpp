// SPDX-License-Identifier: BSD-3-Clause
// The normalized problem description: what every backend and kernel sees, whatever descriptors the user passed.
//
// The C entry points validate the descriptors and build one of these (problem.cpp); backends never look at the public
// descriptors. Everything here is plain data (no pointers owned, no virtuals) so a CUDA kernel can take it by value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/mask.hpp"  // Mask, and the visible-key rule every backend and kernel uses

namespace flashattn {

enum class DType : int32_t { FP16 = 0, BF16 = 1, FP32 = 2 };
enum class Op : int32_t { Forward = 0, Backward = 1, DecodeChunk = 2, MergeStates = 3 };

inline std::size_t dtypeSize(DType t) { return t == DType::FP32 ? 4 : 2; }
const char *dtypeName(DType t);

// Element strides of a [batch, head, row, headDim] tensor (headDim stride is always 1).
// Ragged tensors: batch = 0 and row is the token stride; the row of sequence b starts at cuSeqlens[b].
// Paged caches: batch is the page stride and row the stride between rows of a page.
struct Layout {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t row = 0;
};

// Forward, backward and decode share this description.
struct AttnProblem {
  Op op = Op::Forward;
  DType dtype = DType::FP16;  // storage of Q, K, V, O (and dO, dQ, dK, dV)

  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;    // heads % kvHeads == 0; kvHeads == heads also for stride-0 broadcast
  int64_t seqQ = 0;       // dense: the length; ragged: maxSeqlenQ
  int64_t seqK = 0;       // dense: the length (cache capacity); ragged: maxSeqlenK; paged: maxPagesPerSeq*pageSize
  int64_t headDim = 0;    // of Q and K
  int64_t headDimV = 0;   // of V and O

  // Ragged batches: token offsets per sequence (backend memory), totals are the tensors' first dimension. With a paged
  // cache only Q and O are ragged: cuSeqlensK is nullptr, totalK 0, and the keys come from seqlensK and the pages.
  bool ragged = false;
  const int32_t *cuSeqlensQ = nullptr;
  const int32_t *cuSeqlensK = nullptr;
  int64_t totalQ = 0;
  int64_t totalK = 0;

  // Per-sequence used KV lengths (dense padded caches and paged caches); nullptr = seqK for every sequence.
  const int32_t *seqlensK = nullptr;

  // Paged KV cache (forward and decode): K/V are [numPages, pageSize, kvHeads, headDim].
  bool paged = false;
  const int32_t *blockTable = nullptr;  // [batch, maxPagesPerSeq]
  int64_t pageSize = 0;
  int64_t numPages = 0;
  int64_t maxPagesPerSeq = 0;

  Layout q, k, v, o, dO, dQ, dK, dV;
  // LSE [batch, heads, seqQ] as (batch, head, row) strides; ragged: batch = 0, row = token stride.
  Layout lse;
  bool hasLse = false;

  float scale = 0.f;        // resolved: never 0 here
  float softcap = 0.f;      // 0 = off
  Mask mask = Mask::None;
  int64_t windowLeft = -1;  // -1 = unbounded
  int64_t windowRight = -1;
  const float *alibiSlopes = nullptr;  // [heads] or [batch, heads]
  int64_t alibiBatchStride = 0;        // 0 or heads
  bool deterministic = false;
  const float *sinks = nullptr;  // [heads]: one logit per query head in every row's softmax denominator
  float *dSinks = nullptr;       // [heads], Backward only: where the sinks' gradient goes (nullptr: not computed)
  // Whether every data pointer of the call is 16-byte aligned. CheckSupport and the size queries have no pointers and
  // assume so (as cudaMalloc gives); the run sets it from the real ones, so a chooser may pick a kernel that serves
  // unaligned rows instead (docs/semantics.md).
  bool buffersAligned16 = true;

  int32_t numChunks = 0;  // decode: 0 = automatic
};

// DecodeChunk's split-KV kernels take up to this many query tokens per sequence, and one head dim for Q/K and V/O, a
// multiple of 8. Any other DecodeChunk runs as the forward over the same (dense or paged) cache on every backend: one
// pass over each sequence's keys, O and LSE as the split would give them, numChunks without effect and no workspace of
// its own (docs/semantics.md).
constexpr int64_t kMaxSplitKvQueries = 16;
inline bool decodeRunsAsForward(const AttnProblem &p) {
  return p.op == Op::DecodeChunk && (p.seqQ > kMaxSplitKvQueries || p.headDimV != p.headDim || p.headDim % 8 != 0);
}

inline bool operator==(const Layout &a, const Layout &b) {
  return a.batch == b.batch && a.head == b.head && a.row == b.row;
}

// Every field: a plan is a pure function of the device and the problem, so equal problems may share one (the decode
// planner caches by this). A new field of AttnProblem must be compared here too.
inline bool operator==(const AttnProblem &a, const AttnProblem &b) {
  static_assert(sizeof(void *) != 8 || sizeof(AttnProblem) == 448, "AttnProblem changed: compare its new fields here");
  return a.op == b.op && a.dtype == b.dtype && a.batch == b.batch && a.heads == b.heads && a.kvHeads == b.kvHeads &&
         a.seqQ == b.seqQ && a.seqK == b.seqK && a.headDim == b.headDim && a.headDimV == b.headDimV &&
         a.ragged == b.ragged && a.cuSeqlensQ == b.cuSeqlensQ && a.cuSeqlensK == b.cuSeqlensK &&
         a.totalQ == b.totalQ && a.totalK == b.totalK && a.seqlensK == b.seqlensK && a.paged == b.paged &&
         a.blockTable == b.blockTable && a.pageSize == b.pageSize && a.numPages == b.numPages &&
         a.maxPagesPerSeq == b.maxPagesPerSeq && a.q == b.q && a.k == b.k && a.v == b.v && a.o == b.o &&
         a.dO == b.dO && a.dQ == b.dQ && a.dK == b.dK && a.dV == b.dV && a.lse == b.lse && a.hasLse == b.hasLse &&
         a.scale == b.scale && a.softcap == b.softcap && a.mask == b.mask && a.windowLeft == b.windowLeft &&
         a.windowRight == b.windowRight && a.alibiSlopes == b.alibiSlopes &&
         a.alibiBatchStride == b.alibiBatchStride && a.deterministic == b.deterministic && a.sinks == b.sinks &&
         a.dSinks == b.dSinks &&
         a.buffersAligned16 == b.buffersAligned16 &&
         a.numChunks == b.numChunks;
}

// Merge of partial states: partialO [S, batch, heads, seqQ, headDimV] FP32, partialLse [S, batch, heads, seqQ] FP32.
struct MergeProblem {
  int64_t states = 0;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t seqQ = 0;
  int64_t headDimV = 0;
  DType outType = DType::FP32;
  int64_t partialOStride[4] = {0, 0, 0, 0};    // state, batch, head, row
  int64_t partialLseStride[4] = {0, 0, 0, 0};  // state, batch, head, row
  Layout o;
  Layout lse;
  bool hasLse = false;
};

// The data pointers of one call, in backend memory.
struct AttnBuffers {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;           // forward/decode output; backward input (const there)
  float *lse = nullptr;        // forward/decode output; backward input
  const void *dO = nullptr;
  void *dQ = nullptr;
  void *dK = nullptr;
  void *dV = nullptr;
};

struct MergeBuffers {
  const float *partialO = nullptr;
  const float *partialLse = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
};

}  // namespace flashattn
