// SPDX-License-Identifier: BSD-3-Clause
// Host-visible description of the Hopper wgmma decode (cuda.decode.wgmma): the shared-memory layout of an instance
// and its launch entry point (defined by the generated instance files). The kernel takes the split-KV decode's
// DecodeParams, so a CTA's work, the mask rule, the partial states and their merge are that family's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/decode/decode_params.hpp"

namespace flashattn::cuda::decode_sm90 {

using decode::DecodeParams;

constexpr int kRows = 64;                     // query rows per CTA: one wgmma M (heads x tokens of one KV head)
constexpr int kTileKeys = 64;                 // keys per stage: one wgmma N of S = Q K^T, four k-steps of O += P V
constexpr int kThreads = 384;                 // a producer warpgroup and two consumer warpgroups
constexpr std::size_t kSharedLimit = 232448;  // sm90's opt-in shared memory per block (227 KB)
constexpr int kMostClusterChunks = 8;         // the cluster merge's largest cluster: the portable size, no opt-in

// How the two consumer warpgroups of the wide kernel share a 64-row block. Where one warpgroup holds all of O (V/O up
// to 128 columns: 64 FP32 registers a thread), they take alternate tiles, each with an online softmax of its own,
// and merge their two states at the end: two S -> softmax -> P V chains a CTA, no hand-over per tile, and one
// mbarrier at the end that the sanitizers follow (racecheck and synccheck report the column split's named-barrier
// hand-overs). Multi-token decode at D128 (H200): 0.99-1.04x the column split at six stages too. Wider O is split by
// columns: warpgroup 1 computes S and the softmax of every tile and hands P to warpgroup 2.
constexpr bool splitsKeys(int headDimV) { return headDimV <= 128; }

// Shared memory of instance (DK, DV): Q [DK / 64][64 rows][64] and each stage's K [DK / 64][64 keys][64] (and V
// [DV / 64][64 keys][64] unless V is K's first DV columns), 128-byte swizzled 1024-byte-aligned slabs as wgmma reads
// them; then P [64 rows][64 keys] (one slab), the rows' rescale factors and final (max, sum), and the mbarriers.
// Stages: as many as fit, at most 4, or 6 with split keys (each warpgroup holds two, its tile in P V and its next in
// S, and two more stay in flight); the dynamic window is only 16-byte aligned, hence 1024 bytes of slack.
template <int DK, int DV, bool VFromK>
struct SharedLayout {
  static_assert(DK % 64 == 0 && DV % 128 == 0,
                "Q/K tiles are whole 64-column slabs; V/O splits into two halves of slabs");
  static_assert(!VFromK || DV <= DK, "V read from K's columns needs DV <= DK");
  static constexpr bool kSplitKeys = splitsKeys(DV);
  static constexpr uint32_t kSlab = uint32_t(kRows) * 128;  // 64 rows (or keys) x 64 elements x 2 bytes
  static constexpr uint32_t kQBytes = uint32_t(DK / 64) * kSlab;
  static constexpr uint32_t kKBytes = uint32_t(DK / 64) * kSlab;
  static constexpr uint32_t kVBytes = VFromK ? 0u : uint32_t(DV / 64) * kSlab;
  static constexpr uint32_t kStageBytes = kKBytes + kVBytes;
  // Split keys: warpgroup 2 leaves its O for the merge ([DV / 2][128] FP32) in a stage that no copy refills where
  // it fits one, else (V from K's stages) in a region of its own.
  static constexpr uint32_t kMergeO = uint32_t(kRows) * DV * 4u;
  static constexpr bool kMergeInStage = kStageBytes >= kMergeO;
  static constexpr uint32_t kMergeBytes = kSplitKeys && !kMergeInStage ? kMergeO : 0u;
  // P, factors, (max, sum), the merge's own region, barriers (up to 6 stages' and the merge's)
  static constexpr uint32_t kTailBytes = kSlab + 3u * kRows * 4u + kMergeBytes + 104u;
  static constexpr int kFitting = int((kSharedLimit - 1024 - kQBytes - kTailBytes) / kStageBytes);
  static constexpr int kMostStages = kSplitKeys ? 6 : 4;
  static constexpr int kStages = kFitting > kMostStages ? kMostStages : kFitting;
  static_assert(kStages >= 1, "one stage must fit beside Q");
  static_assert(!kSplitKeys || kStages == 6, "split keys: two stages a warpgroup and two in flight");
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kStage0 = kQ + kQBytes;
  static constexpr uint32_t kP = kStage0 + uint32_t(kStages) * kStageBytes;
  static constexpr uint32_t kFactors = kP + kSlab;            // [64] FP32 rescale of the tile being handed over
  static constexpr uint32_t kStats = kFactors + kRows * 4u;   // [64] x (max in log2 units, sum)
  static constexpr uint32_t kMerge = kStats + kRows * 8u;
  // full[kStages], empty[kStages], and with split keys the merge's hand-over
  static constexpr uint32_t kBarriers = kMerge + kMergeBytes;
  static constexpr uint32_t kBytes = kBarriers + (2u * uint32_t(kStages) + (kSplitKeys ? 1u : 0u)) * 8u;
  static constexpr std::size_t kDynamicBytes = std::size_t(kBytes) + 1024;
  static_assert(kDynamicBytes <= kSharedLimit, "the layout must fit sm90's shared memory per block");
};

// The narrow kernel (decode_sm90_narrow.cuh) for at most kNarrowRows query rows per KV head: the 64 keys of a tile
// are the wgmma M, the N rows the N (16 or 32), so no MMA work goes to padding rows. Q [DK / 64][N rows][64], each
// stage as above, then P [N rows][64 keys] (one N-row slab), the warps' row maxima and sums, and the mbarriers.
constexpr int kNarrowRows = 32;
constexpr int kNarrowThreads = 160;  // one consumer warpgroup and a producer warp

template <int DK, int DV, int N, bool VFromK>
struct NarrowLayout {
  static_assert(N == 16 || N == 32, "narrow kernels take 16 or 32 rows");
  static_assert(DK % 64 == 0 && DV % 64 == 0, "tiles are whole 64-column slabs");
  static constexpr uint32_t kTileSlab = uint32_t(kTileKeys) * 128;
  static constexpr uint32_t kRowSlab = uint32_t(N) * 128;
  static constexpr uint32_t kQBytes = uint32_t(DK / 64) * kRowSlab;
  static constexpr uint32_t kKBytes = uint32_t(DK / 64) * kTileSlab;
  static constexpr uint32_t kVBytes = VFromK ? 0u : uint32_t(DV / 64) * kTileSlab;
  static constexpr uint32_t kStageBytes = kKBytes + kVBytes;
  static constexpr uint32_t kPBytes = ((kRowSlab + 1023u) / 1024u) * 1024u;
  static constexpr uint32_t kReduceBytes = 3u * 4u * N * 4u;  // [2][4 warps][N] maxima by tile parity, [4][N] sums
  static constexpr uint32_t kTailBytes = kPBytes + kReduceBytes + 64u;
  static constexpr int kFitting =
      int((kSharedLimit - 1024 - ((kQBytes + 1023u) / 1024u) * 1024u - kTailBytes) / kStageBytes);
  static constexpr int kStages = kFitting > 4 ? 4 : kFitting;
  static_assert(kStages >= 1, "one stage must fit beside Q");
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kStage0 = ((kQBytes + 1023u) / 1024u) * 1024u;
  static constexpr uint32_t kP = kStage0 + uint32_t(kStages) * kStageBytes;
  static constexpr uint32_t kReduce = kP + kPBytes;
  static constexpr uint32_t kBarriers = kReduce + kReduceBytes;
  static constexpr uint32_t kBytes = kBarriers + 2u * uint32_t(kStages) * 8u;
  static constexpr std::size_t kDynamicBytes = std::size_t(kBytes) + 1024;
  static_assert(kDynamicBytes <= kSharedLimit, "the layout must fit sm90's shared memory per block");
};

// Whether an instance compiles the narrow kernels: only where no other family serves the head dims (the split-KV
// decode takes the few rows of narrower ones well).
constexpr bool hasNarrowKernels(int headDim) { return headDim > 256; }

// Defined once per (Element, DK, DV) by the generated instance files; Element is __half or __nv_bfloat16.
// vFromK: V is K's first DV columns (same memory and strides), read from K's stages; paged: pages of a multiple of
// 64 keys; narrowRows: 16 or 32 for the narrow kernel of that many rows, 0 for the wide one. The plan checked that
// both maps encode.
template <typename Element, int DK, int DV>
cudaError_t launchDecodeSm90Instance(const DecodeParams &params, bool vFromK, int narrowRows, int device,
                                     cudaStream_t stream);

// Clusters of clusterSize wide-kernel CTAs the device holds at once (the cluster merge); 0 when the runtime cannot
// tell. Defined with the launch, instantiated by the generated instance files.
template <typename Element, int DK, int DV>
int clusterCapacitySm90Instance(int device, int clusterSize);

// Shared memory of an instance's kernels (the largest: V apart), for the plan's check against the device.
template <int DK, int DV>
constexpr std::size_t instanceSharedBytes() {
  std::size_t bytes = SharedLayout<DK, DV, false>::kDynamicBytes;
  if constexpr (hasNarrowKernels(DK)) {
    bytes =
        NarrowLayout<DK, DV, 32, false>::kDynamicBytes > bytes ? NarrowLayout<DK, DV, 32, false>::kDynamicBytes : bytes;
  }
  return bytes;
}

}  // namespace flashattn::cuda::decode_sm90
