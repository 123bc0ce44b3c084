// SPDX-License-Identifier: BSD-3-Clause
// The HOST backend's arithmetic: attention over host pointers accumulated in double (host_attention.cpp says why),
// shared by forward, backward, decode and merge. Every function here runs on problems the C entry points have
// validated and on index arrays that validateIndexArrays() has checked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace flashattn::host {

// The longest query and (owned) key row counts of the sequences actually present: the dense lengths, or for a ragged
// batch the largest cuSeqlens differences (maxSeqlenQ/K only bound them and may be far larger).
struct Extents {
  int64_t maxQueryRows = 0;
  int64_t maxOwnedKeyRows = 0;
};

// Throws Error(BAD_PARAM) naming the array, the index and the value when cu_seqlens, seqlensK or the block table
// would send a read outside the tensors; returns the extents they give.
Extents validateIndexArrays(const AttnProblem &p);

// Decode: the number of KV chunks per sequence (p.numChunks, or a choice by cache capacity when 0) and the
// workspace that holds their states. The chunks are folded in `groups` = min(chunks, kMaxDecodeGroups) contiguous
// groups; per group and row the workspace holds, in double, the unnormalized O [groups, batch, heads, seqQ, headDimV]
// at oOffset, the maximum logit [groups, batch, heads, seqQ] at maxOffset and the sum of exponentials at sumOffset.
constexpr int64_t kMaxDecodeGroups = 64;
int32_t decodeChunkCount(const AttnProblem &p);
struct DecodeWorkspace {
  int64_t groups = 1;
  std::size_t oOffset = 0;
  std::size_t maxOffset = 0;
  std::size_t sumOffset = 0;
  std::size_t totalBytes = 0;
};
DecodeWorkspace decodeWorkspace(const AttnProblem &p, int32_t chunks);
// Backward: D = dO . O of every query row and head, in double.
std::size_t backwardWorkspaceBytes(const AttnProblem &p);

void forward(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf);
// Deterministic by construction: every output element is summed by one thread in a fixed order.
void backward(const AttnProblem &p, const Extents &ext, const AttnBuffers &buf, void *workspace);
void decode(const AttnProblem &p, int32_t chunks, const DecodeWorkspace &layout, const AttnBuffers &buf,
            void *workspace);
void merge(const MergeProblem &p, const MergeBuffers &buf);

}  // namespace flashattn::host
