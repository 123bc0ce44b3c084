// SPDX-License-Identifier: BSD-3-Clause
// The GPU merge of partial attention states, as flashAttnMergeStates runs it. (Split-KV decode merges its own partial
// states, whose layout it fixes, with decodeMergeKernel in cuda/kernels/decode/.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"

namespace flashattn::cuda::merge {

struct MergeParams {
  const float *partialO = nullptr;    // [state][batch][head][row][dimV] with the strides below
  const float *partialLse = nullptr;  // [state][batch][head][row]
  void *o = nullptr;
  float *lse = nullptr;  // nullptr: no LSE output
  int64_t partialOStride[4] = {0, 0, 0, 0};    // state, batch, head, row (dimV stride 1)
  int64_t partialLseStride[4] = {0, 0, 0, 0};  // state, batch, head, row
  int64_t oBatch = 0, oHead = 0, oRow = 0;
  int64_t lseBatch = 0, lseHead = 0, lseRow = 0;
  int64_t rows = 0;  // batch * heads * seqQ
  int64_t heads = 0;
  int64_t seqQ = 0;
  int32_t states = 0;
  int32_t headDimV = 0;
};

// Rows are served one warp each, four warps per CTA.
constexpr int kMergeWarps = 4;

// Rows the merge can address with a 1-D grid (one warp per row).
constexpr int64_t kMaxMergeRows = int64_t(0x7fffffff) * kMergeWarps;

// Enqueues the merge. With dependentLaunch (sm90+) it is launched as a programmatic dependent of the kernel queued
// just before it on the stream: its CTAs may be scheduled while that kernel drains and wait on the device for its
// completion.
cudaError_t launchMergeKernel(const MergeParams &params, DType outType, bool dependentLaunch, cudaStream_t stream);

}  // namespace flashattn::cuda::merge
