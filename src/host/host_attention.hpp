// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend's arithmetic: attention over host pointers accumulated in double (host_attention.cpp says why),
// shared by forward, backward, decode and merge. Every function here runs on problems the C entry points have
// validated and on index arrays that validateIndexArrays() has checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace flashattn::host {

// Throws Error(BAD_PARAM) naming the array, the index and the value when cu_seqlens, seqlensK or the block table
// would send a read outside the tensors.
void validateIndexArrays(const AttnProblem &p);

// Decode: the number of KV chunks per sequence (p.numChunks, or a choice by cache capacity when 0) and the
// workspace that holds their partial states: FP32 O [chunks, batch, heads, seqQ, headDimV] at offset 0, then FP32
// LSE [chunks, batch, heads, seqQ] at lseOffset.
int32_t decodeChunkCount(const AttnProblem &p);
struct DecodeWorkspace {
  std::size_t lseOffset = 0;
  std::size_t totalBytes = 0;
};
DecodeWorkspace decodeWorkspace(const AttnProblem &p, int32_t chunks);

void forward(const AttnProblem &p, const AttnBuffers &buf);
// Deterministic by construction: every output element is summed by one thread in a fixed order.
void backward(const AttnProblem &p, const AttnBuffers &buf);
void decode(const AttnProblem &p, int32_t chunks, const DecodeWorkspace &layout, const AttnBuffers &buf,
            void *workspace);
void merge(const MergeProblem &p, const MergeBuffers &buf);

}  // namespace flashattn::host
