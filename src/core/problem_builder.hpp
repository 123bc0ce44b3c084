// SPDX-License-Identifier: BSD-3-Clause
// From public descriptors to one validated, normalized problem (problem.hpp). Every shape, type, stride and attribute
// rule of the API (flashattn.h, docs/semantics.md) is checked here, once, for every backend; the failure names the
// argument and the values.
#pragma once

#include <cstddef>
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

// Bytes from a tensor's base pointer to the end of its last element.
std::size_t spanBytes(const flashAttnTensorStruct &t);

// The pointers of one call: required ones non-NULL, aligned to their element size, outputs overlapping no input
// and no other output.
struct BufferArg {
  const char *name;
  const void *ptr;
  const flashAttnTensorStruct *desc;  // nullptr: argument absent (then ptr must be NULL too)
  bool output;
};
void checkBuffers(std::initializer_list<BufferArg> args);
void checkWorkspace(const Plan &plan, const void *workspace, std::size_t workspaceBytes,
                    std::initializer_list<BufferArg> outputs);

}  // namespace flashattn
