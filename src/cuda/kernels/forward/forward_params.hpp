// SPDX-License-Identifier: BSD-3-Clause
// What a forward kernel instance receives (by value, as its only parameter), and the tile of each instance.
//
// Built on the host from AttnProblem + AttnBuffers by launchForward; plain data so it travels as a kernel argument.
// In-sequence row and key indices fit in 32 bits (planForward rejects longer sequences); every address is formed in
// 64 bits from the 64-bit strides.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"
#include "cuda/kernels/paged_kv.hpp"

namespace flashattn::cuda::forward {

struct ForwardParams {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;  // nullptr: no LSE output

  // Element strides (batch, head, row); ragged tensors have batch stride 0 and rows counted from cuSeqlens; a paged
  // K/V has its page stride as batch stride and its in-page row stride as row stride.
  int64_t qBatch = 0, qHead = 0, qRow = 0;
  int64_t kBatch = 0, kHead = 0, kRow = 0;
  int64_t vBatch = 0, vHead = 0, vRow = 0;
  int64_t oBatch = 0, oHead = 0, oRow = 0;
  int64_t lseBatch = 0, lseHead = 0, lseRow = 0;

  int32_t batch = 0;
  int32_t heads = 0;
  int32_t headsPerKvHead = 1;  // query head h reads KV head h / headsPerKvHead
  int32_t seqQ = 0;            // dense length, or the ragged bound maxSeqlenQ (clamps every sequence)
  int32_t seqK = 0;
  int32_t headDim = 0;         // of Q and K: the problem's; the instance's D may be larger (zero-filled columns)
  int32_t headDimV = 0;        // of V and O, at most the instance's D as well
  int32_t queryBlocks = 0;     // ceil(seqQ / BlockM): the fastest-varying part of the 1-D grid

  bool ragged = false;
  const int32_t *cuSeqlensQ = nullptr;
  const int32_t *cuSeqlensK = nullptr;
  int64_t totalQ = 0;
  int64_t totalK = 0;
  const int32_t *seqlensK = nullptr;
  // Paged K/V: sequence b's keys are the first seqlensK[b] rows of its pages (paged_kv.cuh); Q may be dense or ragged
  // (then cuSeqlensK is nullptr). seqK is the capacity, maxPagesPerSeq * pageSize.
  bool paged = false;
  paged::PagedCache cache;

  float scale = 1.f;
  float softcap = 0.f;
  int32_t mask = 0;          // flashattn::Mask
  int64_t windowLeft = -1;   // -1 = unbounded
  int64_t windowRight = -1;
  const float *alibiSlopes = nullptr;
  int64_t alibiBatchStride = 0;
  const float *sinks = nullptr;  // [heads]: joins each row's denominator in the epilogue (merge_state.cuh foldSink)

  // True when every base pointer is 16-byte aligned and every stride and both head dims are multiples of 16 bytes:
  // then tiles move by 16-byte cp.async; otherwise by element loads (same kernel, uniform branch).
  bool vectorAccess = false;
};

// One tile configuration: BlockM query rows x BlockN keys per iteration, Warps warps splitting the rows, and the CTAs
// per SM the register budget is fitted to (__launch_bounds__ minimum blocks).
struct TileShape {
  int blockM;
  int blockN;
  int warps;
  int minBlocksPerSM;
};

// Tiles of the tensor-core (FP16/BF16) instances, per instance head dim (the FlashAttention-2 tiles as a start;
// measured alternatives in NOTES.md beside this file).
constexpr TileShape mmaTileFor(int headDim) {
  return headDim <= 64    ? TileShape{128, 128, 4, 1}  // TILE_D64
         : headDim <= 96  ? TileShape{128, 64, 4, 1}   // TILE_D96
         : headDim <= 128 ? TileShape{128, 64, 4, 1}   // TILE_D128
         : headDim <= 192 ? TileShape{128, 64, 8, 1}   // TILE_D192
                          : TileShape{64, 64, 4, 1};   // TILE_D256
}

// The FP32 instances: plain FFMA (no tensor cores), one 32-row x 16-key tile for every head dim.
constexpr TileShape fp32TileFor(int) { return TileShape{32, 16, 8, 1}; }

// The element offsets of a key tile's K and V rows in a paged cache, per key (-1: no row, read as zeros): the
// tensor-core kernel keeps two (the tile whose V loads and the one whose K loads next), the FP32 kernel one.
constexpr std::size_t pagedRowTableBytes(int blockN, int tiles) { return std::size_t(tiles) * blockN * 2 * 8; }

constexpr std::size_t mmaSharedBytes(int headDim, bool paged = false) {
  // Q tile + one K tile + one V tile of 16-bit elements (a multiple of 16 bytes), then a paged cache's row table.
  return std::size_t(mmaTileFor(headDim).blockM + 2 * mmaTileFor(headDim).blockN) * headDim * 2 +
         (paged ? pagedRowTableBytes(mmaTileFor(headDim).blockN, 2) : 0);
}

constexpr std::size_t fp32SharedBytes(int headDim, bool paged = false) {
  // Q, K and V tiles padded by one float per row (bank-conflict-free column walks), and the P tile; then a paged
  // cache's row table at the next 8-byte boundary.
  constexpr TileShape t = fp32TileFor(0);
  const std::size_t tiles =
      (std::size_t(t.blockM + 2 * t.blockN) * (headDim + 1) + std::size_t(t.blockM) * (t.blockN + 1)) * 4;
  return paged ? (tiles + 7) / 8 * 8 + pagedRowTableBytes(t.blockN, 1) : tiles;
}

// Defined once per (Element, instance head dim) by the generated instance files (forward_instance.cu.in).
// Element is __half, __nv_bfloat16 or float.
template <typename Element, int HeadDim>
cudaError_t launchInstance(const ForwardParams &params, int device, cudaStream_t stream);

// The fields every forward kernel reads, straight from the normalized problem; the families add what depends on
// their tile (queryBlocks) and on the pointers (vectorAccess).
inline ForwardParams makeForwardParams(const AttnProblem &p, const AttnBuffers &buf) {
  ForwardParams params;
  params.q = buf.q;
  params.k = buf.k;
  params.v = buf.v;
  params.o = buf.o;
  params.lse = p.hasLse ? buf.lse : nullptr;
  params.qBatch = p.q.batch;
  params.qHead = p.q.head;
  params.qRow = p.q.row;
  params.kBatch = p.k.batch;
  params.kHead = p.k.head;
  params.kRow = p.k.row;
  params.vBatch = p.v.batch;
  params.vHead = p.v.head;
  params.vRow = p.v.row;
  params.oBatch = p.o.batch;
  params.oHead = p.o.head;
  params.oRow = p.o.row;
  params.lseBatch = p.lse.batch;
  params.lseHead = p.lse.head;
  params.lseRow = p.lse.row;
  params.batch = int32_t(p.batch);
  params.heads = int32_t(p.heads);
  params.headsPerKvHead = int32_t(p.heads / p.kvHeads);
  params.seqQ = int32_t(p.seqQ);
  params.seqK = int32_t(p.seqK);
  params.headDim = int32_t(p.headDim);
  params.headDimV = int32_t(p.headDimV);
  params.ragged = p.ragged;
  params.cuSeqlensQ = p.cuSeqlensQ;
  params.cuSeqlensK = p.cuSeqlensK;
  params.totalQ = p.totalQ;
  params.totalK = p.totalK;
  params.seqlensK = p.seqlensK;
  params.paged = p.paged;
  params.cache = paged::pagedCacheOf(p);
  params.scale = p.scale;
  params.softcap = p.softcap;
  params.mask = int32_t(p.mask);
  params.windowLeft = p.windowLeft;
  params.windowRight = p.windowRight;
  params.alibiSlopes = p.alibiSlopes;
  params.alibiBatchStride = p.alibiBatchStride;
  params.sinks = p.sinks;
  return params;
}

}  // namespace flashattn::cuda::forward
