// SPDX-License-Identifier: BSD-3-Clause
// From public descriptors to one validated, normalized problem (problem.hpp). Every shape, type, stride and attribute
// rule of the API (flashattn.h, docs/semantics.md) is checked here, once, for every backend; the failure names the
// argument and the values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/descriptors.hpp"
#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashattn {

// The tensor descriptors of one attention call; absent ones are nullptr.
struct AttnTensors {
  const flashAttnTensorStruct *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr;
  const flashAttnTensorStruct *dO = nullptr, *dQ = nullptr, *dK = nullptr, *dV = nullptr;
};

AttnProblem buildAttnProblem(Op op, const flashAttnAttentionStruct *attn, const flashAttnSeqStruct *seq,
                             const AttnTensors &t, int32_t numChunks);

// partialLse and lse may be nullptr (CheckSupport has no partial-LSE descriptor: a packed one is assumed).
MergeProblem buildMergeProblem(const flashAttnTensorStruct &partialO, const flashAttnTensorStruct *partialLse,
                               const flashAttnTensorStruct &o, const flashAttnTensorStruct *lse);

// Bytes from a tensor's base pointer to the end of its last element. Only for descriptors that buildAttnProblem or
// buildMergeProblem has accepted (their spans are checked); throws INTERNAL_ERROR otherwise.
std::size_t spanBytes(const flashAttnTensorStruct &t);

// The pointers of one call: required ones non-NULL, aligned to their element size.
struct BufferArg {
  const char *name;
  const void *ptr;
  const flashAttnTensorStruct *desc;  // nullptr: argument absent (then ptr must be NULL too)
  bool output;
};

// Every byte range one call reads or writes: its tensors and the problem's index arrays (cu_seqlens, KV lengths,
// block table, ALiBi slopes), which the kernels read while the outputs are being written.
class CallMemory {
 public:
  struct Range {
    const char *name;
    uintptr_t lo, hi;  // [lo, hi)
    bool output;
  };
  void add(const char *name, const void *ptr, std::size_t bytes, bool output);
  const Range *begin() const { return ranges_; }
  const Range *end() const { return ranges_ + count_; }

 private:
  Range ranges_[20];
  int count_ = 0;
};

// Adds the problem's index arrays, checking that their byte counts are addressable and their pointers 4-byte aligned.
void addIndexArrays(CallMemory &memory, const AttnProblem &p);

// Checks the pointers (NULL, alignment) of the tensors and, when `indexArraysOf` is given, of its index arrays, and
// that no output overlaps an input, an index array or another output. Returns every range for checkWorkspace.
CallMemory checkBuffers(std::initializer_list<BufferArg> args, const AttnProblem *indexArraysOf = nullptr);
// The workspace: large enough, aligned, and overlapping nothing the call reads or writes (a block table or an input
// inside the workspace would be overwritten by the first phase that uses it as scratch).
void checkWorkspace(const Plan &plan, const void *workspace, std::size_t workspaceBytes, const CallMemory &memory);

}  // namespace flashattn
