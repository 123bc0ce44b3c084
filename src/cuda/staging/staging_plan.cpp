// SPDX-License-Identifier: BSD-3-Clause
#include "cuda/staging/staging_plan.hpp"

#include "cuda/vector_rule.hpp"

#include <cstdint>
#include <string>

#include "core/plan.hpp"

namespace flashattn::cuda {

namespace {

constexpr int64_t kVectorBytes = 16;
// Matches the problem builder's bound on what a tensor may span.
constexpr long double kMaxSpanBytes = 4611686018427387904.0L;  // 2^62

// AttnProblem or const AttnProblem: the same switch gives the layout to read or to replace.
template <typename Problem>
auto &layoutIn(Problem &p, Staged t) {
  switch (t) {
    case Staged::Q: return p.q;
    case Staged::K: return p.k;
    case Staged::V: return p.v;
    case Staged::O: return p.o;
    case Staged::dO: return p.dO;
    case Staged::dQ: return p.dQ;
    case Staged::dK: return p.dK;
    case Staged::dV: return p.dV;
  }
  return p.q;
}

bool isKeySide(Staged t) { return t == Staged::K || t == Staged::V || t == Staged::dK || t == Staged::dV; }

// The head dim of Q/K (and dQ/dK) or of V/O (and dV/dO).
int64_t headDimOf(const AttnProblem &p, Staged t) {
  return (t == Staged::Q || t == Staged::K || t == Staged::dQ || t == Staged::dK) ? p.headDim : p.headDimV;
}

}  // namespace

const void *stagedPointer(const AttnBuffers &b, Staged t) {
  switch (t) {
    case Staged::Q: return b.q;
    case Staged::K: return b.k;
    case Staged::V: return b.v;
    case Staged::O: return b.o;
    case Staged::dO: return b.dO;
    case Staged::dQ: return b.dQ;
    case Staged::dK: return b.dK;
    case Staged::dV: return b.dV;
  }
  return nullptr;
}

const Layout &stagedLayout(const AttnProblem &p, Staged t) { return layoutIn(p, t); }

const char *stagedName(Staged t) {
  static const char *const names[kStagedCount] = {"Q", "K", "V", "O", "dO", "dQ", "dK", "dV"};
  return names[int(t)];
}

StagingPlan planStaging(const AttnProblem &p, uint32_t room) {
  StagingPlan s;
  s.elementBytes = int64_t(dtypeSize(p.dtype));
  if (p.op != Op::Backward && (p.op != Op::DecodeChunk || decodeRunsAsForward(p))) return s;
  const int64_t perVector = kVectorBytes / s.elementBytes;
  std::size_t offset = 0;
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    StagedTensor &st = s.tensor[i];
    st.candidate = p.op == Op::Backward || i <= int(Staged::O);
    if (!st.candidate) continue;
    st.output = p.op == Op::Backward ? (t == Staged::dQ || t == Staged::dK || t == Staged::dV) : t == Staged::O;
    st.user = stagedLayout(p, t);
    const bool keySide = isKeySide(t);
    const bool paged = p.paged && keySide;
    const int64_t heads = keySide ? p.kvHeads : p.heads;
    // Where the kernels walk a dimension (the families' vectorStridesFit): a paged cache's page stride
    // always, a dense batch stride when there are several sequences, a head stride when there are several heads.
    const bool batchWalked = paged || (!p.ragged && p.batch > 1);
    const bool headWalked = heads > 1;
    const StrideBreak broken = firstStrideBreak(st.user, s.elementBytes, batchWalked, headWalked);
    if (broken.dimension != nullptr) {
      st.byStrides = true;
      st.why = broken.dimension;
      st.whyStride = broken.stride;
    }
    st.reserved = st.byStrides || (room & stagedBit(t)) != 0;
    if (!st.reserved) continue;

    if (paged) {
      st.wholePool = true;
      st.batch = p.numPages;
      st.rows = p.pageSize;
    } else if (p.ragged) {
      st.batch = 1;
      st.rows = keySide ? p.totalK : p.totalQ;
    } else {
      st.batch = p.batch;
      st.rows = keySide ? p.seqK : p.seqQ;
    }
    st.heads = heads;
    st.headDim = headDimOf(p, t);
    st.pitch = (st.headDim + perVector - 1) / perVector * perVector;
    // A broadcast input dimension is copied once; an output never has one (the builder refuses overlapping outputs).
    // A ragged tensor's Layout.batch is 0 by construction and its batch extent 1: nothing to collapse there.
    const bool keepBatch = st.output || st.user.batch != 0;
    const bool keepHeads = st.output || st.user.head != 0;
    const bool keepRows = st.output || st.user.row != 0;
    if (!keepBatch) st.batch = 1;
    if (!keepHeads) st.heads = 1;
    if (!keepRows) st.rows = 1;

    const int64_t row = st.pitch;
    if (paged) {  // [page][row][head][dim], the order of the descriptor the caller gave
      st.packed.head = keepHeads ? row : 0;
      st.packed.row = keepRows ? st.heads * row : 0;
      st.packed.batch = keepBatch ? st.rows * st.heads * row : 0;
    } else if (p.ragged) {  // [token][head][dim]
      st.packed.head = keepHeads ? row : 0;
      st.packed.row = keepRows ? st.heads * row : 0;
      st.packed.batch = 0;
    } else {  // [batch][head][row][dim]
      st.packed.row = keepRows ? row : 0;
      st.packed.head = keepHeads ? st.rows * row : 0;
      st.packed.batch = keepBatch ? st.heads * st.rows * row : 0;
    }

    // Only inputs skip rows: an output row the kernels write (a key past seqlensK gets a zero gradient) must arrive.
    // A ragged output skips the tokens past cuSeqlens[batch] too, which no sequence owns and no kernel writes, so they
    // stay as the caller left them, as without staging.
    if (p.ragged) {
      const int32_t *cu = keySide ? p.cuSeqlensK : p.cuSeqlensQ;
      if (cu != nullptr && keepRows) st.rowLimit = cu + p.batch;
    } else if (!st.output && !paged && keySide && p.seqlensK != nullptr && keepBatch && keepRows) {
      st.rowLimit = p.seqlensK;
    }

    const long double span = (long double)st.batch * (long double)st.heads * (long double)st.rows *
                             (long double)st.pitch * (long double)s.elementBytes;
    if (span >= kMaxSpanBytes) {
      s.addressable = false;
      st.bytes = 0;
      continue;
    }
    st.offset = offset;
    st.bytes = alignWorkspace(std::size_t(span));
    offset += st.bytes;
  }
  s.totalBytes = s.addressable ? offset : 0;
  return s;
}

bool stagedInCall(const StagingPlan &s, Staged t, const AttnBuffers &user) {
  const StagedTensor &st = s[t];
  // A tensor of no element moves nothing, whatever its strides; an unaddressable plan is refused by the caller.
  if (!st.reserved || st.bytes == 0) return false;
  const void *ptr = stagedPointer(user, t);
  if (ptr == nullptr) return false;
  return st.byStrides || reinterpret_cast<uintptr_t>(ptr) % uintptr_t(kVectorBytes) != 0;
}

AttnProblem restage(const AttnProblem &p, const StagingPlan &s) {
  AttnProblem out = p;
  for (int i = 0; i < kStagedCount; ++i)
    if (s.tensor[i].byStrides && s.tensor[i].bytes > 0) layoutIn(out, Staged(i)) = s.tensor[i].packed;
  return out;
}

AttnProblem restage(const AttnProblem &p, const StagingPlan &s, const AttnBuffers &user) {
  AttnProblem out = p;
  for (int i = 0; i < kStagedCount; ++i)
    if (stagedInCall(s, Staged(i), user)) layoutIn(out, Staged(i)) = s.tensor[i].packed;
  return out;
}

std::string describeStaging(const StagingPlan &s) {
  std::string text;
  for (int i = 0; i < kStagedCount; ++i) {
    const StagedTensor &st = s.tensor[i];
    if (!st.byStrides) continue;
    if (!text.empty()) text += ", ";
    text += std::string(stagedName(Staged(i))) + " (" + st.why + " stride " + std::to_string(st.whyStride) + ")";
  }
  return text;
}

}  // namespace flashattn::cuda
