// SPDX-License-Identifier: BSD-3-Clause
#include "core/problem_builder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace flashattn {

namespace {

std::string listOf(const int64_t *values, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}
std::string shapeOf(const flashAttnTensorStruct &t) { return listOf(t.dims, t.rank); }

// First check on every tensor a call names: the offsets of its elements fit int64 and its bytes kMaxSpanBytes. Every
// later computation from its dims and strides (overlap, pointer ranges, the backends' offsets) relies on it.
void expectAddressable(const flashAttnTensorStruct &t, const char *name) {
  int64_t elements = 0, bytes = 0;
  if (!spanElementsOk(t.rank, t.dims, t.strides, &elements) ||
      !spanBytesOk(elements, int64_t(dtypeSize(t.dtype)), &bytes))
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " (dims ", shapeOf(t), ", strides ", listOf(t.strides, t.rank),
         ") spans more than 2^62 bytes: not addressable");
}

void expectRank(const flashAttnTensorStruct &t, const char *name, int rank, const char *layout) {
  if (t.rank != rank)
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " has rank ", t.rank, " (dims ", shapeOf(t), "): expected rank ", rank,
         " ", layout);
}

void expectType(const flashAttnTensorStruct &t, const char *name, DType want, const char *wantFrom) {
  if (t.dtype != want)
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " is ", dtypeName(t.dtype), " but ", wantFrom, " is ", dtypeName(want),
         ": the types must match");
}

void expectDim(const flashAttnTensorStruct &t, const char *name, int dim, int64_t want, const char *what,
               const char *from) {
  if (t.dims[dim] != want)
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " has ", what, " ", t.dims[dim], " (dims ", shapeOf(t), ") but ", from,
         " has ", want);
}

void expectSameShape(const flashAttnTensorStruct &t, const char *name, const flashAttnTensorStruct &like,
                     const char *likeName) {
  bool same = t.rank == like.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.dims[i] == like.dims[i];
  if (!same)
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " has dims ", shapeOf(t), " but ", likeName, " has ", shapeOf(like),
         ": they must match");
}

// An output whose elements overlap each other would be written by several threads at once. Sufficient test: with
// the dimensions sorted by stride, each stride reaches past everything the smaller strides span.
// On the stack: this runs on every call of every operation.
void expectNonOverlapping(const flashAttnTensorStruct &t, const char *name) {
  std::pair<int64_t, int64_t> strideDim[FLASHATTN_MAX_TENSOR_RANK];
  int n = 0;
  for (int i = 0; i < t.rank && i < FLASHATTN_MAX_TENSOR_RANK; ++i)
    if (t.dims[i] > 1) strideDim[n++] = {t.strides[i], t.dims[i]};
  for (int i = 1; i < n; ++i)  // insertion sort: at most 8 entries
    for (int j = i; j > 0 && strideDim[j] < strideDim[j - 1]; --j) std::swap(strideDim[j], strideDim[j - 1]);
  int64_t extent = 1;
  for (int i = 0; i < n; ++i) {
    const auto [stride, dim] = strideDim[i];
    if (stride < extent)
      fail(FLASHATTN_STATUS_BAD_PARAM, name, " is an output whose elements overlap (a dimension of size ", dim,
           " has stride ", stride, ", below the ", extent, " elements the smaller strides span)");
    // The message is built only on failure: this is every call's path.
    if (!mulAddOk(stride, dim - 1, extent, &extent))
      fail(FLASHATTN_STATUS_BAD_PARAM, name, " (dims ", shapeOf(t), ") spans more than int64 elements");
  }
}

Layout layout4(const flashAttnTensorStruct &t) { return Layout{t.strides[0], t.strides[1], t.strides[2]}; }
// Ragged rank-3 [tokens, heads, dim]: rows are tokens.
Layout layoutRagged(const flashAttnTensorStruct &t) { return Layout{0, t.strides[1], t.strides[0]}; }

const char *const kDenseQ = "[batch, heads, seqQ, headDim]";
const char *const kDenseK = "[batch, kvHeads, seqK, headDim]";
const char *const kRaggedQ = "[totalTokensQ, heads, headDim] (ragged seqDesc)";
const char *const kRaggedK = "[totalTokensK, kvHeads, headDim] (ragged seqDesc)";
const char *const kPagedK = "[numPages, pageSize, kvHeads, headDim] (paged seqDesc)";

void resolveAttention(AttnProblem &p, const flashAttnAttentionStruct *attn) {
  const flashAttnAttentionStruct defaults;
  const flashAttnAttentionStruct &a = attn ? *attn : defaults;
  p.scale = a.scale > 0 ? a.scale : float(1.0 / std::sqrt(double(p.headDim)));
  p.softcap = a.softcap;
  p.mask = a.mask;
  p.windowLeft = a.windowLeft;
  p.windowRight = a.windowRight;
  p.alibiSlopes = a.alibiSlopes;
  p.alibiBatchStride = a.alibiPerBatch ? p.heads : 0;
  p.deterministic = a.deterministic != 0;
  p.sinks = a.sinks;
  if (p.op == Op::Backward) {
    if (a.dSinks && !a.sinks)
      fail(FLASHATTN_STATUS_BAD_PARAM, "dSinks (flashAttnSetAttentionSinksGradient) is set but the attention ",
           "descriptor has no sinks (flashAttnSetAttentionSinks)");
    p.dSinks = a.dSinks;
  }
}

}  // namespace

const char *dtypeName(DType t) {
  switch (t) {
    case DType::FP16: return "FP16";
    case DType::BF16: return "BF16";
    case DType::FP32: return "FP32";
  }
  return "unknown";
}

std::size_t spanBytes(const flashAttnTensorStruct &t) {
  int64_t elements = 0, bytes = 0;
  if (!spanElementsOk(t.rank, t.dims, t.strides, &elements) ||
      !spanBytesOk(elements, int64_t(dtypeSize(t.dtype)), &bytes))
    fail(FLASHATTN_STATUS_INTERNAL_ERROR, "a tensor of dims ", shapeOf(t), " reached spanBytes unchecked");
  return std::size_t(bytes);
}

AttnProblem buildAttnProblem(Op op, const flashAttnAttentionStruct *attn, const flashAttnSeqStruct *seq,
                             const AttnTensors &t, int32_t numChunks) {
  AttnProblem p;
  p.op = op;
  const bool ragged = seq && seq->raggedBatch > 0;
  const bool paged = seq && seq->pagedBatch > 0;
  const bool kvLengths = seq && seq->seqlensK;
  if (op == Op::DecodeChunk && ragged)
    fail(FLASHATTN_STATUS_BAD_PARAM,
         "seqDesc is ragged: DecodeChunk takes a dense Q [batch, heads, seqQ, headDim] and per-sequence KV lengths");
  if (op == Op::Backward && paged)
    fail(FLASHATTN_STATUS_BAD_PARAM, "seqDesc has a paged KV cache: Backward takes dense or ragged K and V");
  // A ragged Q over a paged cache: the keys of sequence b are its pages' first seqlensK[b] rows, so key offsets
  // (cuSeqlensK) would be a second, conflicting statement of them.
  if (ragged && paged && seq->cuSeqlensK)
    fail(FLASHATTN_STATUS_BAD_PARAM, "seqDesc is ragged with cuSeqlensK and has a paged KV cache: a paged cache's keys ",
         "are given by seqlensK and the block table; set cuSeqlensK NULL (flashAttnSetSeqRagged)");
  if (ragged && !paged && !seq->cuSeqlensK)
    fail(FLASHATTN_STATUS_BAD_PARAM, "seqDesc is ragged with cuSeqlensK NULL but has no paged KV cache: ragged K and V ",
         "need cuSeqlensK (only a paged cache, flashAttnSetSeqPaged, takes a ragged Q without it)");
  if (ragged && !paged && kvLengths)
    fail(FLASHATTN_STATUS_NOT_SUPPORTED,
         "seqDesc has both cuSeqlensK and per-sequence KV lengths: give the used lengths through cuSeqlensK");
  if (paged && !kvLengths)
    fail(FLASHATTN_STATUS_BAD_PARAM,
         "seqDesc has a block table but no per-sequence KV lengths (flashAttnSetSeqKvLengths): a paged cache needs them");

  // Spans first: everything below reads dims and strides, and the overlap and pointer checks add them up.
  const struct {
    const flashAttnTensorStruct *desc;
    const char *name;
  } all[] = {{t.q, "Q"},   {t.k, "K"},   {t.v, "V"},   {t.o, "O"},  {t.lse, "LSE"},
             {t.dO, "dO"}, {t.dQ, "dQ"}, {t.dK, "dK"}, {t.dV, "dV"}};
  for (const auto &tensor : all)
    if (tensor.desc) expectAddressable(*tensor.desc, tensor.name);

  const flashAttnTensorStruct &q = *t.q, &k = *t.k, &v = *t.v, &o = *t.o;
  const char *const kvLayout = paged ? kPagedK : ragged ? kRaggedK : kDenseK;
  expectRank(q, "Q", ragged ? 3 : 4, ragged ? kRaggedQ : kDenseQ);
  expectRank(k, "K", paged || !ragged ? 4 : 3, kvLayout);
  expectRank(v, "V", paged || !ragged ? 4 : 3, kvLayout);
  expectRank(o, "O", ragged ? 3 : 4, ragged ? kRaggedQ : kDenseQ);
  p.dtype = q.dtype;
  expectType(k, "K", p.dtype, "Q");
  expectType(v, "V", p.dtype, "Q");
  expectType(o, "O", p.dtype, "Q");

  const int hd = q.rank - 1;  // head-dim position of Q/O
  const int kvHeadDimPos = k.rank - 1;
  const int kvHeadsPos = paged ? 2 : 1;
  p.heads = q.dims[1];
  p.headDim = q.dims[hd];
  p.kvHeads = k.dims[kvHeadsPos];
  p.headDimV = v.dims[kvHeadDimPos];
  expectDim(k, "K", kvHeadDimPos, p.headDim, "headDim", "Q");
  expectDim(v, "V", kvHeadsPos, p.kvHeads, "kvHeads", "K");
  for (int i = 0; i < k.rank - 1; ++i)
    if (i != kvHeadsPos) expectDim(v, "V", i, k.dims[i], i == 0 ? (paged ? "numPages" : ragged ? "tokens" : "batch") : (paged ? "pageSize" : "seqK"), "K");
  if (p.heads % p.kvHeads != 0)
    fail(FLASHATTN_STATUS_BAD_PARAM, "K has ", p.kvHeads, " heads, Q has ", p.heads,
         ": Q heads must be a multiple of K heads");
  expectDim(o, "O", 1, p.heads, "heads", "Q");
  expectDim(o, "O", hd, p.headDimV, "headDimV", "V");
  expectDim(o, "O", 0, q.dims[0], ragged ? "tokens" : "batch", "Q");

  if (ragged) {
    p.ragged = true;
    p.batch = seq->raggedBatch;
    p.cuSeqlensQ = seq->cuSeqlensQ;
    p.seqQ = seq->maxSeqlenQ;
    p.totalQ = q.dims[0];
    p.q = layoutRagged(q);
    p.o = layoutRagged(o);
    if (!paged) {
      p.cuSeqlensK = seq->cuSeqlensK;
      p.seqK = seq->maxSeqlenK;
      p.totalK = k.dims[0];
      p.k = layoutRagged(k);
      p.v = layoutRagged(v);
    }
  } else {
    p.batch = q.dims[0];
    p.seqQ = q.dims[2];
    expectDim(o, "O", 2, p.seqQ, "seqQ", "Q");
    if (!paged) {
      expectDim(k, "K", 0, p.batch, "batch", "Q");
      p.seqK = k.dims[2];
      p.k = layout4(k);
      p.v = layout4(v);
    }
    p.q = layout4(q);
    p.o = layout4(o);
  }
  if (paged) {
    p.paged = true;
    p.blockTable = seq->blockTable;
    p.numPages = k.dims[0];
    p.pageSize = k.dims[1];
    p.maxPagesPerSeq = seq->maxPagesPerSeq;
    if (seq->pagedBatch != p.batch)
      fail(FLASHATTN_STATUS_BAD_PARAM, "seqDesc block table has ", seq->pagedBatch, " rows but ",
           ragged ? "the ragged seqDesc has batch " : "Q has batch ", p.batch);
    p.seqK = mulOr(p.maxPagesPerSeq, p.pageSize, FLASHATTN_STATUS_BAD_PARAM, "seqDesc maxPagesPerSeq ",
                   p.maxPagesPerSeq, " times pageSize ", p.pageSize, " overflows int64");
    // Paged K [page, row, head, dim]: Layout.batch = page stride, Layout.row = row stride.
    p.k = Layout{k.strides[0], k.strides[2], k.strides[1]};
    p.v = Layout{v.strides[0], v.strides[2], v.strides[1]};
  }
  if (kvLengths) {
    if (seq->kvLengthsBatch != p.batch)
      fail(FLASHATTN_STATUS_BAD_PARAM, "seqDesc seqlensK has ", seq->kvLengthsBatch, " entries but the batch is ",
           p.batch);
    p.seqlensK = seq->seqlensK;
  }

  if (t.lse) {
    const flashAttnTensorStruct &l = *t.lse;
    expectType(l, "LSE", DType::FP32, "the LSE type required");
    if (ragged) {
      expectRank(l, "LSE", 2, "[totalTokensQ, heads] (ragged seqDesc)");
      expectDim(l, "LSE", 0, p.totalQ, "tokens", "Q");
      expectDim(l, "LSE", 1, p.heads, "heads", "Q");
      p.lse = Layout{0, l.strides[1], l.strides[0]};
    } else {
      expectRank(l, "LSE", 3, "[batch, heads, seqQ]");
      expectDim(l, "LSE", 0, p.batch, "batch", "Q");
      expectDim(l, "LSE", 1, p.heads, "heads", "Q");
      expectDim(l, "LSE", 2, p.seqQ, "seqQ", "Q");
      p.lse = Layout{l.strides[0], l.strides[1], l.strides[2]};
    }
    p.hasLse = true;
  } else if (op == Op::Backward) {
    fail(FLASHATTN_STATUS_BAD_PARAM, "LSE descriptor is NULL: Backward needs the LSE written by Forward");
  }

  if (op == Op::Backward) {
    struct Grad {
      const flashAttnTensorStruct *desc;
      const char *name;
      const flashAttnTensorStruct *like;
      const char *likeName;
      Layout *layout;
    } grads[] = {{t.dO, "dO", &o, "O", &p.dO}, {t.dQ, "dQ", &q, "Q", &p.dQ}, {t.dK, "dK", &k, "K", &p.dK},
                 {t.dV, "dV", &v, "V", &p.dV}};
    for (const Grad &g : grads) {
      if (!g.desc) continue;  // size query and CheckSupport: gradients take the layout of their tensor
      expectSameShape(*g.desc, g.name, *g.like, g.likeName);
      expectType(*g.desc, g.name, p.dtype, "Q");
    }
    for (const Grad &g : grads) {
      const flashAttnTensorStruct &d = g.desc ? *g.desc : *g.like;
      *g.layout = ragged ? layoutRagged(d) : layout4(d);
    }
  }

  expectNonOverlapping(o, "O");
  if (t.lse && op != Op::Backward) expectNonOverlapping(*t.lse, "LSE");
  if (op == Op::Backward) {
    if (t.dQ) expectNonOverlapping(*t.dQ, "dQ");
    if (t.dK) expectNonOverlapping(*t.dK, "dK");
    if (t.dV) expectNonOverlapping(*t.dV, "dV");
  }

  if (op == Op::DecodeChunk) {
    if (numChunks < 0) fail(FLASHATTN_STATUS_BAD_PARAM, "numChunks is ", numChunks, ": use 0 (automatic) or >= 1");
    p.numChunks = numChunks;
  }
  resolveAttention(p, attn);
  // The index arrays' extents come from counts set one by one (batch and maxPagesPerSeq up to 2^31 each, heads up
  // to 2^40): their products are checked here, so that the overlap checks and the HOST backend can form them.
  CallMemory arrays;
  addIndexArrays(arrays, p);
  return p;
}

MergeProblem buildMergeProblem(const flashAttnTensorStruct &partialO, const flashAttnTensorStruct *partialLse,
                               const flashAttnTensorStruct &o, const flashAttnTensorStruct *lse) {
  MergeProblem m;
  expectAddressable(partialO, "partialO");
  if (partialLse) expectAddressable(*partialLse, "partialLse");
  expectAddressable(o, "O");
  if (lse) expectAddressable(*lse, "LSE");
  expectRank(partialO, "partialO", 5, "[states, batch, heads, seqQ, headDimV]");
  expectType(partialO, "partialO", DType::FP32, "the partial-state type required");
  m.states = partialO.dims[0];
  m.batch = partialO.dims[1];
  m.heads = partialO.dims[2];
  m.seqQ = partialO.dims[3];
  m.headDimV = partialO.dims[4];
  for (int i = 0; i < 4; ++i) m.partialOStride[i] = partialO.strides[i];
  expectRank(o, "O", 4, "[batch, heads, seqQ, headDimV]");
  const char *what[] = {"batch", "heads", "seqQ", "headDimV"};
  for (int i = 0; i < 4; ++i) expectDim(o, "O", i, partialO.dims[i + 1], what[i], "partialO");
  m.outType = o.dtype;
  m.o = layout4(o);
  expectNonOverlapping(o, "O");
  if (partialLse) {
    expectRank(*partialLse, "partialLse", 4, "[states, batch, heads, seqQ]");
    expectType(*partialLse, "partialLse", DType::FP32, "the partial-state type required");
    const char *stateWhat[] = {"states", "batch", "heads", "seqQ"};
    for (int i = 0; i < 4; ++i) expectDim(*partialLse, "partialLse", i, partialO.dims[i], stateWhat[i], "partialO");
    for (int i = 0; i < 4; ++i) m.partialLseStride[i] = partialLse->strides[i];
  } else {
    // CheckSupport's stand-in: a packed partial LSE. Its products are bounded by the non-overlapping O checked above
    // except for the states factor, hence checked.
    const auto overflow = [&] {
      fail(FLASHATTN_STATUS_BAD_PARAM, "partialO (dims ", shapeOf(partialO),
           "): a packed partial LSE of that shape spans more than int64 elements");
    };
    int64_t headStride = 0, batchStride = 0, stateStride = 0, bytes = 0;
    if (!mulOk(m.heads, m.seqQ, &headStride) || !mulOk(m.batch, headStride, &batchStride) ||
        !mulOk(m.states, batchStride, &stateStride) || !spanBytesOk(stateStride, 4, &bytes))
      overflow();
    m.partialLseStride[3] = 1;
    m.partialLseStride[2] = m.seqQ;
    m.partialLseStride[1] = headStride;
    m.partialLseStride[0] = batchStride;
  }
  if (lse) {
    expectRank(*lse, "LSE", 3, "[batch, heads, seqQ]");
    expectType(*lse, "LSE", DType::FP32, "the LSE type required");
    for (int i = 0; i < 3; ++i) expectDim(*lse, "LSE", i, partialO.dims[i + 1], what[i], "partialO");
    expectNonOverlapping(*lse, "LSE");
    m.lse = Layout{lse->strides[0], lse->strides[1], lse->strides[2]};
    m.hasLse = true;
  }
  return m;
}

void CallMemory::add(const char *name, const void *ptr, std::size_t bytes, bool output) {
  const auto lo = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t hi = 0;
  if (__builtin_add_overflow(lo, bytes, &hi))
    fail(FLASHATTN_STATUS_BAD_PARAM, name, " pointer ", ptr, " plus its ", bytes, " bytes wraps the address space");
  if (count_ == int(sizeof ranges_ / sizeof ranges_[0]))
    fail(FLASHATTN_STATUS_INTERNAL_ERROR, "more memory ranges in one call than CallMemory holds");
  ranges_[count_++] = Range{name, lo, hi, output};
}

void addIndexArrays(CallMemory &memory, const AttnProblem &p) {
  const auto arrayBytes = [](const char *name, int64_t count) {
    int64_t bytes = 0;
    if (!spanBytesOk(count, 4, &bytes))
      fail(FLASHATTN_STATUS_BAD_PARAM, name, " holds ", count, " elements: more than 2^62 bytes, not addressable");
    return std::size_t(bytes);
  };
  const auto add = [&](const char *name, const void *ptr, int64_t count, bool output = false) {
    const std::size_t bytes = arrayBytes(name, count);
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, name, " pointer ", ptr, " is not aligned to its 4-byte elements");
    memory.add(name, ptr, bytes, output);
  };
  if (p.ragged) {
    const int64_t entries = addOr(p.batch, 1, FLASHATTN_STATUS_BAD_PARAM, "ragged batch ", p.batch, " overflows");
    add("cuSeqlensQ", p.cuSeqlensQ, entries);
    if (p.cuSeqlensK) add("cuSeqlensK", p.cuSeqlensK, entries);
  }
  if (p.seqlensK) add("seqlensK", p.seqlensK, p.batch);
  if (p.paged)
    add("blockTable", p.blockTable,
        mulOr(p.batch, p.maxPagesPerSeq, FLASHATTN_STATUS_BAD_PARAM, "blockTable of ", p.batch, " x ",
              p.maxPagesPerSeq, " entries overflows int64"));
  if (p.alibiSlopes)
    add("ALiBi slopes", p.alibiSlopes,
        p.alibiBatchStride ? mulOr(p.batch, p.heads, FLASHATTN_STATUS_BAD_PARAM, "ALiBi slopes of ", p.batch,
                                   " x ", p.heads, " entries overflow int64")
                           : p.heads);
  if (p.sinks) add("sinks", p.sinks, p.heads);
  if (p.dSinks) add("dSinks", p.dSinks, p.heads, true);
}

CallMemory checkBuffers(std::initializer_list<BufferArg> args, const AttnProblem *indexArraysOf) {
  CallMemory memory;
  for (const BufferArg &a : args) {
    if (!a.desc) {
      if (a.ptr)
        fail(FLASHATTN_STATUS_BAD_PARAM, a.name, " pointer is set but its descriptor is NULL: give both or neither");
      continue;
    }
    if (!a.ptr) fail(FLASHATTN_STATUS_BAD_PARAM, a.name, " pointer is NULL");
    const std::size_t align = dtypeSize(a.desc->dtype);
    if (reinterpret_cast<uintptr_t>(a.ptr) % align != 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, a.name, " pointer ", a.ptr, " is not aligned to its ", align,
           "-byte elements");
    memory.add(a.name, a.ptr, spanBytes(*a.desc), a.output);
  }
  if (indexArraysOf) addIndexArrays(memory, *indexArraysOf);
  // Outputs must not overlap inputs, index arrays or each other: a kernel reading what another block already
  // overwrote, or two outputs racing, gives garbage that no test of the op alone would explain.
  for (const CallMemory::Range &out : memory) {
    if (!out.output) continue;
    for (const CallMemory::Range &other : memory) {
      if (&other == &out) continue;
      if (out.lo < other.hi && other.lo < out.hi)
        fail(FLASHATTN_STATUS_BAD_PARAM, "output ", out.name, " [", reinterpret_cast<const void *>(out.lo), ", +",
             out.hi - out.lo, " bytes) overlaps ", other.output ? "output " : "input ", other.name, " [",
             reinterpret_cast<const void *>(other.lo), ", +", other.hi - other.lo, " bytes)");
    }
  }
  return memory;
}

void checkWorkspace(const Plan &plan, const void *workspace, std::size_t workspaceBytes, const CallMemory &memory) {
  if (workspaceBytes < plan.workspaceBytes)
    fail(FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE, "workspaceBytes is ", workspaceBytes, " but this call needs ",
         plan.workspaceBytes, " (ask the ...GetWorkspaceSize function)");
  if (workspaceBytes > 0 && !workspace)
    fail(FLASHATTN_STATUS_BAD_PARAM, "workspace is NULL but workspaceBytes is ", workspaceBytes);
  if (plan.workspaceBytes == 0) return;
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    fail(FLASHATTN_STATUS_BAD_PARAM, "workspace pointer ", workspace, " is not aligned to ", kWorkspaceAlignment,
         " bytes");
  // Only the bytes the plan uses are scratch: a caller may place other data after them in a larger allocation.
  CallMemory self;
  self.add("workspace", workspace, plan.workspaceBytes, true);
  const CallMemory::Range &ws = *self.begin();
  for (const CallMemory::Range &r : memory)
    if (ws.lo < r.hi && r.lo < ws.hi)
      fail(FLASHATTN_STATUS_BAD_PARAM, "workspace [", workspace, ", +", plan.workspaceBytes, " bytes) overlaps ",
           r.output ? "output " : "input ", r.name, " [", reinterpret_cast<const void *>(r.lo), ", +", r.hi - r.lo,
           " bytes)");
}

}  // namespace flashattn
