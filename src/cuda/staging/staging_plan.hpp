// SPDX-License-Identifier: BSD-3-Clause
// The host half of the staging component (see staging.hpp for why it exists): which tensors of a problem go
// through the workspace, in which packed layout, at which offset. Plain C++ with no CUDA header, so the rule is
// tested on CI machines without a GPU (tests/host/test_host_staging_plan.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/problem.hpp"

namespace flashattn::cuda {

// The tensors a CUDA kernel family moves in 16-byte vectors. The order is the order of the workspace slots.
enum class Staged : int32_t { Q = 0, K, V, O, dO, dQ, dK, dV };
constexpr int kStagedCount = 8;
const char *stagedName(Staged t);

// The caller's pointer and the problem's layout of tensor t.
const void *stagedPointer(const AttnBuffers &b, Staged t);
const Layout &stagedLayout(const AttnProblem &p, Staged t);

// A set of Staged tensors, bit i for Staged(i).
constexpr uint32_t stagedBit(Staged t) { return 1u << uint32_t(t); }
constexpr uint32_t kNoStagedRoom = 0;
constexpr uint32_t kAllStagedRoom = (1u << kStagedCount) - 1;
constexpr uint32_t kGradientRoom =
    stagedBit(Staged::dO) | stagedBit(Staged::dQ) | stagedBit(Staged::dK) | stagedBit(Staged::dV);

// The copy of one tensor. Extents are those the copy walks: [batch][heads][rows][headDim] for dense tensors,
// batch 1 and rows = tokens for ragged ones, [numPages][kvHeads][pageSize] for a paged cache (the whole pool). An
// input dimension of stride 0 (a broadcast) is walked once and keeps stride 0 in the packed layout, so a broadcast
// stays one copy.
struct StagedTensor {
  bool candidate = false;  // the operation's kernels move this tensor in 16-byte vectors
  bool byStrides = false;  // a walked batch/head/row stride is not a multiple of 16 bytes: staged on every call
  bool reserved = false;   // has a workspace slot: byStrides, or room asked for (a misaligned base pointer)
  bool output = false;     // written by the kernels: copied out after them (stageOut), not in before (stageIn)
  bool wholePool = false;  // a paged cache: the slot holds every page of the pool, used or not
  const char *why = "";    // byStrides: the first offending dimension ("row", "head", "batch") and its stride
  int64_t whyStride = 0;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t rows = 0;
  int64_t headDim = 0;
  int64_t pitch = 0;  // packed row length in elements: headDim rounded up to 16 bytes (stageIn zero-fills the tail)
  Layout user;        // the caller's strides (the problem's layout)
  Layout packed;      // the strides the kernels see when the tensor is staged
  // Device int32 indexed by the walked batch index: rows at or past clamp(rowLimit[b], 0, rows) are never read by
  // the kernels (keys past seqlensK; ragged tokens past cuSeqlens[batch]), so the copy skips them. nullptr: copy all.
  const int32_t *rowLimit = nullptr;
  std::size_t offset = 0;  // of the slot in the staging workspace (a multiple of 256)
  std::size_t bytes = 0;   // of the slot (a multiple of 256; 0 when not reserved)
};

struct StagingPlan {
  StagedTensor tensor[kStagedCount];
  std::size_t totalBytes = 0;  // the staging workspace: every reserved slot (0: nothing is ever staged)
  bool addressable = true;     // false: a packed copy would span 2^62 bytes or more; the call must be refused
  int64_t elementBytes = 2;

  const StagedTensor &operator[](Staged t) const { return tensor[int(t)]; }
  StagedTensor &operator[](Staged t) { return tensor[int(t)]; }
};

// Which of the operation's tensors need staging, as a pure function of the problem: a tensor is staged when its
// batch, head or row stride is not a multiple of 16 bytes where that dimension is walked (the rule of the CUDA
// backend's vectorStridesFit: batch when the batch is dense and > 1, or always for a paged cache's page stride;
// head when there is more than one (KV) head; row always). Backward: Q, K, V, O, dO in and dQ, dK, dV out. Decode:
// Q, K, V in (dense or paged caches) and O out. Forward and merge stage nothing: their kernels load unaligned rows
// element-wise themselves; nor does a DecodeChunk past 16 query tokens, which runs as the forward.
//
// `room` (a set of stagedBit) asks for a slot for a candidate tensor even when its strides need none, so that the
// call can stage it when its base POINTER is not 16-byte aligned (the problem has no pointers), or when the size
// query does not know the tensor's strides (backward's takes no gradient descriptors: kGradientRoom). A slot's size
// depends on the shape only (and on which input dimensions are broadcast), so the size query's plan is never smaller
// than the call's.
StagingPlan planStaging(const AttnProblem &p, uint32_t room = kNoStagedRoom);

// Whether this call copies tensor t: a slot exists and either the strides need it or the base pointer is not
// 16-byte aligned. stageIn and stageOut both decide by this, so they agree.
bool stagedInCall(const StagingPlan &s, Staged t, const AttnBuffers &user);

// The problem the kernels see: the layout of every tensor staged by its strides replaced by its packed one. With
// the call's buffers, also those staged for their pointers (their strides were already multiples of 16 bytes, so a
// kernel planned from the first form serves the second).
AttnProblem restage(const AttnProblem &p, const StagingPlan &s);
AttnProblem restage(const AttnProblem &p, const StagingPlan &s, const AttnBuffers &user);

// "dO (batch stride 2819)" for each tensor staged by its strides, comma separated; empty when none is.
std::string describeStaging(const StagingPlan &s);

}  // namespace flashattn::cuda
