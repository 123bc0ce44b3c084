// SPDX-License-Identifier: BSD-3-Clause
// The Hopper (sm_90a) backward main kernel for the wide head dims (Q/K 192 or 256; V/O 128, 192 or 256; FP16/BF16).
//
// The d128 kernel's layout (128 keys per CTA, dK and dV of a warpgroup's 64 keys in registers) would need 192 to 256
// accumulator floats per thread here. Instead a CTA owns 64 keys and its two warpgroups split every product:
//   S^T  = K Q^T        m64n32k16 x D/16: warpgroup g computes query columns 32g .. 32g + 31 for all 64 keys
//   dP^T = V dO^T       m64n32k16 x DV/16, same
//   P^T, dS^T           in registers (the softmax scale left out of dS^T: dK takes it at its store, dQ in the
//                       convert kernel; dsUnscaled), stored as bf16/fp16 [key][query] to shared memory,
//                       where the other warpgroup's query columns are needed
//   dV  += P^T dO       A = P^T K-major, B = dO MN-major: warpgroup g owns a share of dV's columns
//   dK  += dS^T Q       same, over dK's columns
//   dQ   = dS K         A = dS read M-major from the same dS^T tile, B = K MN-major: a share of dQ's columns
//   dQ accumulator     += dQ into the FP32 workspace (the convert kernel writes dQ) while dV and dK, committed after
//                       dQ, still run: where shared memory has room for a staging tile per warp (192), by one bulk
//                       reduce (cp.reduce.async.bulk) per warp and 64-column panel into the paneled accumulator, as
//                       the d128 kernel does; else (256) by red.global.add.v2.f32 into the row-major one
// The shares are whole 64-column slabs (an MN-major operand starts at a slab). A width of 128 or 256 splits in halves,
// and both warpgroups run one body with the group as a value; 192 splits 128 + 64, and the warpgroups run two bodies
// (the accumulators' sizes are compile-time): the 128-column share of dQ and dV goes to warpgroup 0 and that of dK to
// warpgroup 1 (at 192/128 each warpgroup then owns 256 output columns; at 192/192, 320 against 256).
// The next query block (Q, dO, D and LSE rows) streams by cp.async from all 256 threads into the other half of a double
// buffer, issued right after S^T / dP^T so the tensor cores start first (shared memory at 256: K, V 64 KB + Q, dO
// 2 x 64 KB + P^T, dS^T 16 KB = 209 KB; 1 CTA per SM). Two CTA barriers per query block: after the copies land, and
// after the P^T / dS^T stores (each warpgroup's products read the other's query columns).
// Producer form (template flag Producer; hasTmaForm: 192 and 256, either order of dQ): a third warpgroup brings each
// step's Q and dO by tensor-map copies and its statistics by cp.async into the two stages (produceQuerySteps, as the
// d128 kernel's), with full and empty mbarriers per stage; the consumers copy only their K/V block and hold 232
// registers (setmaxnreg). P^T and dS^T alternate between two tiles by step, so the first CTA barrier goes: a warpgroup
// writes step t's tile after the P^T / dS^T barrier of step t - 1, which the other passed only once its step t - 2
// products, the last readers of that tile, were complete. At 256 the producer warpgroup's 40 registers do not hold its
// eight tensor copies' coordinates: ptxas spills 32-36 bytes there (eight local loads a step, off the consumers' path;
// the consumers' loop has none). (ncu at 192/128 put a quarter of the stall samples on the copies' wait, the barrier
// after it and the copies' address arithmetic.)
// Deterministic mode at 192 hands the ordered dQ additions to two of the producer warpgroup's warps (dqWarpForm,
// addDqInTurns); the consumers only stage dQ.
// Masking, GQA, ragged and seqlensK follow backward_common.cuh exactly as the d128 kernel does. Softcap and ALiBi
// (Transform, unordered only): P^T and dS^T in one pass once both S^T and dP^T have landed, since dS^T needs the
// softcap's derivative, which is known beside P (prim::LogitTransform, as the d64/d128 kernel's transform form).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/sm90_bwd_order.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_primitives.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_tiles.cuh"
#include "cuda/primitives/bulk_reduce.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/red_global.cuh"
#include "cuda/primitives/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the backward_sm90 kernels use wgmma: compile them with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace flashattn::cuda::backward_sm90 {

using backward::BackwardParams;

namespace split {

// Byte offsets from a 1024-aligned base. 16-bit tiles are stacks of 128-byte-swizzled slabs [width / 64][rows][64].
template <int D, int DV, bool Producer = false>
struct Layout {
  static constexpr int kBlockM = sm90BackwardTileFor(D).blockM;
  static constexpr int kBlockN = sm90BackwardTileFor(D).blockN;
  static constexpr int kThreads = 32 * sm90BackwardTileFor(D).warps;
  static_assert(kBlockM == 64 && kBlockN == 64 && kThreads == 256,
                "64 keys and 64 query rows per step, each product split between two warpgroups");
  static_assert(D % 64 == 0 && DV % 64 == 0 && D >= DV && D <= 256, "head dims of whole slabs, DV <= D <= 256");
  static constexpr uint32_t kSlab = 64u * 128u;  // one slab of a 64-row tile
  static constexpr uint32_t kTileBytes = uint32_t(kBlockM) * D * 2;    // a Q or K tile
  static constexpr uint32_t kTileBytesV = uint32_t(kBlockM) * DV * 2;  // a dO or V tile
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kTileBytes;
  static constexpr uint32_t kQ = kV + kTileBytesV;       // 2 stages
  static constexpr uint32_t kDO = kQ + 2 * kTileBytes;   // 2 stages
  static constexpr int kTransposeTiles = Producer ? 2 : 1;  // P^T and dS^T tiles (alternated by step)
  static constexpr uint32_t kPT = kDO + 2 * kTileBytesV;    // P^T [key][query], one slab a tile
  static constexpr uint32_t kDST = kPT + kTransposeTiles * kSlab;  // dS^T [key][query], one slab a tile
  static constexpr uint32_t kLse = kDST + kTransposeTiles * kSlab; // 2 stages x BlockM floats
  static constexpr uint32_t kRowDot = kLse + 2 * kBlockM * 4;
  // Producer form: each stage's full and empty mbarriers (full + 8 s, empty + 8 s) and the dQ warps' (dqWarpForm:
  // staged, free), 256 bytes kept for the staging's alignment.
  static constexpr uint32_t kFull = kRowDot + 2 * kBlockM * 4;
  static constexpr uint32_t kEmpty = kFull + 2 * 8;
  static constexpr uint32_t kDqStaged = kEmpty + 2 * 8;         // one per dQ warp: staged + 8 j
  static constexpr uint32_t kDqFree = kDqStaged + kDqWarps * 8;  // free + 8 j
  // dQ staging (where it fits): each warp's 16 rows x its warpgroup's dQ columns, one 4 KB tile [16][64] per 64-column
  // panel, added to the paneled accumulator by one bulk reduce per panel (backward_sm90_kernel.cuh's scheme). The two
  // warpgroups' shares together are D columns: 4 warps x 16 rows x D x 4 bytes.
  static constexpr uint32_t kDqStage = kFull + (Producer ? 256 : 0);
  static constexpr uint32_t kDqStageBytes = 4u * 16u * uint32_t(D) * 4u;
  static_assert(kDqStage % 256 == 0, "the dQ staging stores need 256-byte aligned tiles (stageDqRows)");
  static_assert(!Producer || kDqFree + kDqWarps * 8 <= kDqStage, "the producer form's barriers fit before the staging");
  static constexpr std::size_t kSharedLimit = 232448;  // sm90's opt-in shared memory per block (227 KB)
  static constexpr bool kBulkDq = std::size_t(kDqStage) + kDqStageBytes + 1024 <= kSharedLimit;
  static constexpr uint32_t kEnd = kBulkDq ? kDqStage + kDqStageBytes : kDqStage;
  static constexpr std::size_t kDynamicBytes = std::size_t(kEnd) + 1024;  // room to align the base
  static_assert(kDynamicBytes <= kSharedLimit, "the tiles fit sm90's shared memory per block");
};
// The producer form adds dQ as the other does (the plan sizes the accumulator by bulkDq).
static_assert(Layout<192, 192, true>::kBulkDq && Layout<192, 128, true>::kBulkDq, "the producer form's staging fits");
static_assert(!Layout<256, 256>::kBulkDq && !Layout<256, 256, true>::kBulkDq, "both forms at 256 add dQ by red.global");

// Whether deterministic mode's ordered dQ additions go to warps of the producer warpgroup (sm90_bwd_tiles.cuh's
// addDqInTurns) instead of the consumers: the producer form where dQ is staged in shared memory (192). The consumers
// then only stage a step's dQ and go on; the wait for the predecessor key block's turn, the bulk reduce's round trip
// and the hand-over run beside their next steps instead of on their path. One warp doing that for every step was
// itself the limit (H200, D192: 1.02-1.12x the consumers' additions, two warps 1.08-1.34x over one). The loads then
// come from the producer's other two warps (kLoaderThreads; ptxas: at 192/128 their 40 registers spill 48 bytes,
// loaded a few times a step, as d256's producer does).
template <int D, int DV, bool Producer, bool Deterministic>
constexpr bool dqWarpForm() {
  return Producer && Deterministic && Layout<D, DV, true>::kBulkDq;
}
template <int D, int DV, bool Producer, bool Deterministic>
constexpr int kLoaderThreads = dqWarpForm<D, DV, Producer, Deterministic>() ? kDqWarpLoaders : 128;

// Whether both warpgroups take equal shares of every product (then they run one body).
constexpr bool evenSplit(int d, int dv) { return d % 128 == 0 && dv % 128 == 0; }

// Whether the instance adds dQ by bulk reduce from shared-memory staging (its accumulator paneled) rather than by
// red.global (row-major): where the staging fits beside the tiles (192; not 256).
template <int D, int DV>
constexpr bool bulkDq() {
  return Layout<D, DV>::kBulkDq;
}

// The columns of a product `width` wide that warpgroup `group` owns: halves where they are whole slabs, else (192)
// 128 + 64 with the 128 to warpgroup 0 where `lowerTakesMore`.
constexpr int shareColumns(int width, int group, bool lowerTakesMore) {
  if (width % 128 == 0) return width / 2;
  return (group == 0) == lowerTakesMore ? width - width / 3 : width / 3;
}
constexpr int shareFirst(int width, int group, bool lowerTakesMore) {
  return group == 0 ? 0 : width - shareColumns(width, 1, lowerTakesMore);
}
constexpr bool kDqLowerMore = true, kDkLowerMore = false, kDvLowerMore = true;

// The kernel's parameters: the producer form's carry the Q and dO maps (a larger parameter block cost the other form
// 10-40 registers, ptxas).
template <bool Producer>
using KernelParams = std::conditional_t<Producer, Sm90KernelParams, BackwardParams>;
__device__ __forceinline__ const BackwardParams &backwardParams(const Sm90KernelParams &kp) { return kp.b; }
__device__ __forceinline__ const BackwardParams &backwardParams(const BackwardParams &p) { return p; }
template <bool Producer>
inline const KernelParams<Producer> &hostParams(const Sm90KernelParams &kp) {
  if constexpr (Producer)
    return kp;
  else
    return kp.b;
}

// The query steps of a CTA whose key block the query blocks qb see: each block once per query head of the group.
__device__ __forceinline__ int32_t stepsOf(const BackwardParams &p, const BlockRange &qb) {
  return (qb.last >= qb.first ? qb.last - qb.first + 1 : 0) * p.headsPerKvHead;
}

// Deterministic mode's dQ warps' side of the staging both the split kernel and the 96-key kernel fill (warpgroup 0's
// four warps' tiles of 16 rows x its dQ columns, then warpgroup 1's): lane l < 8 adds the tiles of consumer warp l % 4
// of warpgroup l / 4 (query block mBlock, BlockM rows, of head h) by addDqRows.
template <int D, int BlockM>
__device__ __forceinline__ void addStagedDq(const BackwardParams &p, const backward::WorkItem &w,
                                            const backward::SequenceExtent &e, uint32_t staging, int lane,
                                            int32_t mBlock, int32_t h) {
  constexpr int kDq0 = shareColumns(D, 0, kDqLowerMore);
  constexpr int kDq1 = shareColumns(D, 1, kDqLowerMore);
  const int owner = lane / 4, warp = lane % 4;
  const uint32_t tile = staging + uint32_t(owner == 0 ? 0 : 4 * 16 * 4 * kDq0) +
                        uint32_t(warp) * uint32_t(16 * 4 * (owner == 0 ? kDq0 : kDq1));
  const int32_t iFirst = mBlock * BlockM + 16 * warp;
  const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, iFirst);
  const int32_t rows = e.seqQ - iFirst < 16 ? e.seqQ - iFirst : 16;
  if (owner == 0)
    addDqRows<kDq0 / 64>(p, wsRow0, 0, tile, rows);
  else
    addDqRows<kDq1 / 64>(p, wsRow0, shareFirst(D, 1, kDqLowerMore) / 64, tile, rows);
}

// The CTA barrier of each step. A named one: at 192 the two warpgroups reach it from their own bodies, where
// __syncthreads (which wants every thread at the same call) would be divergent.
constexpr uint32_t kCtaBarrier = 1;

}  // namespace split

// One warpgroup's walk over the CTA's query blocks. Group >= 0: the body of that warpgroup (uneven shares); Group < 0:
// the body of both (even shares; `group` tells them apart at run time). Transform: softcap and ALiBi.
template <typename Element, int D, int DV, bool Deterministic, int Group, bool Transform, bool Producer>
__device__ __forceinline__ void splitWalk(const BackwardParams &p, uint32_t base, unsigned char *baseGeneric,
                                          int group) {
  using L = split::Layout<D, DV, Producer>;
  constexpr int kBlockM = L::kBlockM;
  constexpr int kBlockN = L::kBlockN;
  constexpr int kShareGroup = Group < 0 ? 0 : Group;
  constexpr int kDq = split::shareColumns(D, kShareGroup, split::kDqLowerMore);
  constexpr int kDk = split::shareColumns(D, kShareGroup, split::kDkLowerMore);
  constexpr int kDv = split::shareColumns(DV, kShareGroup, split::kDvLowerMore);
  const int dqFirst = Group < 0 ? group * kDq : split::shareFirst(D, kShareGroup, split::kDqLowerMore);
  const int dkFirst = Group < 0 ? group * kDk : split::shareFirst(D, kShareGroup, split::kDkLowerMore);
  const int dvFirst = Group < 0 ? group * kDv : split::shareFirst(DV, kShareGroup, split::kDvLowerMore);

  const float *const sLse = reinterpret_cast<const float *>(baseGeneric + L::kLse);
  const float *const sRowDot = reinterpret_cast<const float *>(baseGeneric + L::kRowDot);
  const int thread = threadIdx.x;
  const int warp = (thread % 128) / 32;
  const int lane = thread % 32;
  const int quad = lane % 4;

  const backward::WorkItem w = backward::decodeWorkItem(p);
  const backward::SequenceExtent e = backward::sequenceExtent(p, w.batch);
  const int32_t n0 = w.keyBlock * kBlockN;
  const int32_t sq = e.seqQ, sk = e.seqK;
  const Diagonals diagonals = backward::diagonalsOf(p, sq, sk);
  const BlockRange qb = backward::queryBlocksOf(p, e, n0, kBlockM, kBlockN);
  const int32_t steps = split::stepsOf(p, qb);
  const int32_t headBase = w.kvHead * p.headsPerKvHead;
  const StepOrder order = stepOrder<Deterministic>(p, e, w.keyBlock, n0, qb, kBlockM, kBlockN);
  // Ordered additions here, or by the producer warpgroup's dQ warps (then the consumers only stage dQ).
  constexpr bool kDqWarp = split::dqWarpForm<D, DV, Producer, Deterministic>();
  constexpr bool kTurnsHere = Deterministic && !kDqWarp;
  DqTurns<kTurnsHere, false, true> turns;

  float dv[kDv / 2], dk[kDk / 2];
#pragma unroll
  for (int i = 0; i < kDv / 2; ++i) dv[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kDk / 2; ++i) dk[i] = 0.f;

  // Issues the copies of step t (query head, query block) into stage t % 2.
  auto loadStep = [&](int32_t t) {
    loadQueryStep<Element, D, DV, kBlockM, Deterministic>(p, w, e, order, headBase, t, t & 1, base,
                                                          L::kQ, L::kDO, L::kTileBytes, L::kTileBytesV, L::kLse,
                                                          L::kRowDot, thread);
  };

  if (steps > 0) {
    loadKeyBlock<Element, D, DV, kBlockN>(p, w, e, n0, base + L::kK, base + L::kV, thread);
    if constexpr (!Producer) loadStep(0);
  }
  prim::cpAsyncCommit();
  if constexpr (Producer) {
    // K and V are every consumer thread's copies; Q, dO and the statistics come with the stages' full barriers.
    prim::cpAsyncWait<0>();
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSyncUnaligned(split::kCtaBarrier, 256);
  }

  const float scaleLog2 = p.scale * prim::kLog2e;
  [[maybe_unused]] prim::LogitTransform transform = prim::LogitTransform::of(p.scale, p.softcap, sq, sk);
  const uint64_t kRowsDesc = prim::wgmmaDescriptorSw128(base + L::kK, 16, 1024);
  const uint64_t vRowsDesc = prim::wgmmaDescriptorSw128(base + L::kV, 16, 1024);
  // The MN-major B operands of this warpgroup's output columns start at a slab (leading byte offset = slab).
  const uint64_t kColsDesc =
      prim::wgmmaDescriptorSw128(base + L::kK + uint32_t(dqFirst / 64) * L::kSlab, L::kSlab, 1024);
  const uint64_t pTDesc0 = prim::wgmmaDescriptorSw128(base + L::kPT, 16, 1024);
  const uint64_t dSTDesc0 = prim::wgmmaDescriptorSw128(base + L::kDST, 16, 1024);
  const uint64_t dSDesc0 = prim::wgmmaDescriptorSw128(base + L::kDST, L::kSlab, 1024);
  const uint32_t full = base + L::kFull, empty = base + L::kEmpty;
  const int keyInTile = 16 * warp + lane / 4;  // + 8h: this thread's accumulator rows (keys) of S^T and dK/dV
  // This warp's dQ staging tiles (L::kBulkDq): warpgroup 0's warps first, then warpgroup 1's.
  const uint32_t dqStageOffset =
      L::kDqStage + uint32_t(group == 0 ? 0 : 4 * 16 * 4 * split::shareColumns(D, 0, split::kDqLowerMore)) +
      uint32_t(warp) * uint32_t(16 * 4 * kDq);
  const int queryCol0 = 32 * group + 2 * quad;  // + 8j + e: this thread's query columns of S^T

  for (int32_t t = 0; t < steps; ++t) {
    const int stage = t & 1;
    if constexpr (Producer) {
      prim::mbarrierWaitInline(full + 8 * stage, uint32_t(t >> 1) & 1u);
    } else {
      prim::cpAsyncWait<0>();
      prim::fenceProxyAsyncShared();
      prim::namedBarrierSyncUnaligned(split::kCtaBarrier, 256);
    }
    const StepBlock sb = stepBlock<Deterministic>(order, t);
    const int32_t m0 = sb.mBlock * kBlockM;
    // Producer form: a ragged sequence's last block came by cp.async (generic proxy); wgmma reads the async proxy.
    if (Producer && p.ragged && m0 + kBlockM > sq) prim::fenceProxyAsyncShared();
    // This step's P^T and dS^T tiles.
    const uint32_t transposeTile = uint32_t(Producer ? stage : 0) * L::kSlab;
    const uint64_t pTDesc = prim::wgmmaDescriptorAdvance(pTDesc0, transposeTile);
    const uint64_t dSTDesc = prim::wgmmaDescriptorAdvance(dSTDesc0, transposeTile);
    const uint64_t dSDesc = prim::wgmmaDescriptorAdvance(dSDesc0, transposeTile);
    const int32_t h = headBase + sb.head;
    if constexpr (Transform) transform.slopeLog2 = backward::alibiSlope(p, w.batch, h) * prim::kLog2e;
    const uint32_t qTile = base + L::kQ + stage * L::kTileBytes;
    const uint32_t dOTile = base + L::kDO + stage * L::kTileBytesV;

    float s[16], dp[16];
    prim::wgmmaFence();
    {
      const uint32_t bRows = uint32_t(group) * 32 * 128;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t offset = uint32_t(ks / 4) * L::kSlab + uint32_t(ks % 4) * 32;
        prim::WgmmaOp<Element, 32>::ss(s, prim::wgmmaDescriptorAdvance(kRowsDesc, offset),
                                       prim::wgmmaDescriptorSw128(qTile + bRows + offset, 16, 1024), ks > 0 ? 1u : 0u);
      }
      prim::wgmmaCommitGroup();
#pragma unroll
      for (int ks = 0; ks < DV / 16; ++ks) {
        const uint32_t offset = uint32_t(ks / 4) * L::kSlab + uint32_t(ks % 4) * 32;
        prim::WgmmaOp<Element, 32>::ss(dp, prim::wgmmaDescriptorAdvance(vRowsDesc, offset),
                                       prim::wgmmaDescriptorSw128(dOTile + bRows + offset, 16, 1024), ks > 0 ? 1u : 0u);
      }
      prim::wgmmaCommitGroup();
    }
    // The next block's copies go out once the tensor cores have work (its stage was last read in step t - 1).
    if constexpr (!Producer) {
      if (t + 1 < steps) loadStep(t + 1);
      prim::cpAsyncCommit();
    }

    const float *lseRow = sLse + stage * kBlockM + queryCol0;
    const float *dotRow = sRowDot + stage * kBlockM + queryCol0;
    const bool fullyVisible = backward::blockFullyVisible(diagonals, m0, n0, kBlockM, kBlockN, sq, sk);
    if constexpr (Transform) {
      prim::wgmmaWaitGroup<0>();
      prim::wgmmaFenceOperands(s);
      prim::wgmmaFenceOperands(dp);
      const int32_t key0 = n0 + keyInTile;
      // Element (j, hh, ee)'s ALiBi distance: this one plus 8 hh - 8 j - ee.
      const float distance0 = float(key0 - (m0 + queryCol0 + transform.shift));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
        const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
        for (int ee = 0; ee < 2; ++ee) {
          const int32_t i = m0 + queryCol0 + 8 * j + ee;
          const backward::RowKeys r = backward::rowKeys(diagonals, i, sk);
          const bool rowValid = i < sq;
          const bool oneKey = r.lo == r.hi && p.sinks == nullptr;  // dS exactly 0 (below)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int32_t key = key0 + 8 * hh;
            const bool visible = rowValid && key >= r.lo && key <= r.hi;
            const int idx = 4 * j + 2 * hh + ee;
            transformedGradient(transform, s[idx], dp[idx], distance0 + float(8 * hh - 8 * j - ee),
                                ee ? lse.y : lse.x, ee ? dot.y : dot.x, visible, oneKey);
          }
        }
      }
    } else {
      // P^T while dP^T is still in flight.
      prim::wgmmaWaitGroup<1>();
      prim::wgmmaFenceOperands(s);
      if (fullyVisible) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            s[4 * j + 2 * hh] = prim::exp2Fast(fmaf(s[4 * j + 2 * hh], scaleLog2, -lse.x));
            s[4 * j + 2 * hh + 1] = prim::exp2Fast(fmaf(s[4 * j + 2 * hh + 1], scaleLog2, -lse.y));
          }
        }
      } else {
        const int32_t key0 = n0 + keyInTile;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int32_t i = m0 + queryCol0 + 8 * j + ee;
            const backward::RowKeys r = backward::rowKeys(diagonals, i, sk);
            const bool rowValid = i < sq;
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int32_t key = key0 + 8 * hh;
              const bool visible = rowValid && key >= r.lo && key <= r.hi;
              const int idx = 4 * j + 2 * hh + ee;
              s[idx] = visible ? prim::exp2Fast(fmaf(s[idx], scaleLog2, -(ee ? lse.y : lse.x))) : 0.f;
            }
          }
        }
      }
      prim::wgmmaWaitGroup<0>();
      prim::wgmmaFenceOperands(dp);
      if (fullyVisible) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            dp[4 * j + 2 * hh] = s[4 * j + 2 * hh] * (dp[4 * j + 2 * hh] - dot.x);
            dp[4 * j + 2 * hh + 1] = s[4 * j + 2 * hh + 1] * (dp[4 * j + 2 * hh + 1] - dot.y);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int32_t i = m0 + queryCol0 + 8 * j + ee;
            const backward::RowKeys r = backward::rowKeys(diagonals, i, sk);
            // A row that sees one key has P = 1 whatever its logit, so its dS is exactly zero; dP - D would instead
            // leave the difference of two dot products accumulated apart (wgmma's and the preprocess's). Masked
            // entries already have P = 0.
            const bool oneKey = r.lo == r.hi && p.sinks == nullptr;  // a sink shares the row's softmax: P < 1
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int idx = 4 * j + 2 * hh + ee;
              dp[idx] = oneKey ? 0.f : s[idx] * (dp[idx] - (ee ? dot.y : dot.x));
            }
          }
        }
      }
    }

    // P^T and dS^T as [key][query] rows (one 128-byte swizzled slab each): element pairs of 4 bytes; a warp's 32
    // stores hit 8 rows x 4 quads = 32 distinct banks thanks to the swizzle.
    {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const uint32_t key = uint32_t(keyInTile + 8 * hh);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t chunk = uint32_t(4 * group + j);
          const uint32_t offset = key * 128 + ((chunk ^ (key & 7)) << 4) + uint32_t(quad) * 4;
          *reinterpret_cast<uint32_t *>(baseGeneric + L::kPT + transposeTile + offset) =
              prim::packFloat2<Element>(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]);
          *reinterpret_cast<uint32_t *>(baseGeneric + L::kDST + transposeTile + offset) =
              prim::packFloat2<Element>(dp[4 * j + 2 * hh], dp[4 * j + 2 * hh + 1]);
        }
      }
    }
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSyncUnaligned(split::kCtaBarrier, 256);

    // dQ first, in its own group, so that its additions go out while dV and dK still run on the tensor cores
    // (measured: +7-10% over one group for all three).
    float dq[kDq / 2];
    prim::wgmmaFence();
    // k = the 64 keys: dS read M-major from the dS^T rows and K MN-major, 16 key rows (2048 bytes) per step.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      prim::WgmmaOp<Element, kDq>::template ssTransposed<1, 1>(
          dq, prim::wgmmaDescriptorAdvance(dSDesc, uint32_t(kk) * 2048),
          prim::wgmmaDescriptorAdvance(kColsDesc, uint32_t(kk) * 2048), kk > 0 ? 1u : 0u);
    prim::wgmmaCommitGroup();
    turns.peek(p, w.batch, h, sb.mBlock, order);
    {
      // k = the 64 queries: 16 per step, 32 bytes along the K-major P^T / dS^T rows, 16 rows (2048 bytes) down the
      // MN-major dO / Q slabs of this warpgroup's columns.
      const uint64_t dODesc = prim::wgmmaDescriptorSw128(dOTile + uint32_t(dvFirst / 64) * L::kSlab, L::kSlab, 1024);
      const uint64_t qDesc = prim::wgmmaDescriptorSw128(qTile + uint32_t(dkFirst / 64) * L::kSlab, L::kSlab, 1024);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        prim::WgmmaOp<Element, kDv>::template ssTransposed<0, 1>(
            dv, prim::wgmmaDescriptorAdvance(pTDesc, uint32_t(kk) * 32),
            prim::wgmmaDescriptorAdvance(dODesc, uint32_t(kk) * 2048), 1u);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        prim::WgmmaOp<Element, kDk>::template ssTransposed<0, 1>(
            dk, prim::wgmmaDescriptorAdvance(dSTDesc, uint32_t(kk) * 32),
            prim::wgmmaDescriptorAdvance(qDesc, uint32_t(kk) * 2048), 1u);
    }
    prim::wgmmaCommitGroup();
    prim::wgmmaWaitGroup<1>();
    prim::wgmmaFenceOperands(dq);
    // Deterministic: the turn is taken, and handed on below, while dV and dK still run on the tensor cores.
    turns.acquire(order);

    // dQ rows 16 * warp + lane / 4 + 8h of the block, columns dqFirst + 8j + 2 quad.
    if constexpr (kDqWarp) {
      // Once step t - 1's dQ warp has read the tiles; this step's adds them in the query block's turn.
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, m0 + 16 * warp);
      stageDqForWarps<kDq, kDqWarps>(base + dqStageOffset, dq, wsRow0, lane, quad, base + L::kDqStaged,
                                     base + L::kDqFree, t);
    } else if constexpr (L::kBulkDq) {
      // Through the warp's staging tiles.
      const int32_t iFirst = m0 + 16 * warp;
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, iFirst);
      stageDqRows<kDq>(base + dqStageOffset, dq, wsRow0, lane, quad);
      if (lane == 0) {
        // Deterministic: the turn was taken by a generic-proxy acquire; the additions go through the async proxy.
        if constexpr (Deterministic) prim::fenceProxyAsyncGlobal();
        addDqRows<kDq / 64>(p, wsRow0, dqFirst / 64, base + dqStageOffset, sq - iFirst < 16 ? sq - iFirst : 16);
        // Deterministic: the turn is handed on only once the additions are performed, not just issued.
        if constexpr (Deterministic) {
          prim::bulkWait<0>();
          prim::fenceProxyAsyncGlobal();
        }
      }
    } else {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int32_t i = m0 + 16 * warp + lane / 4 + 8 * hh;
        if (i >= sq) continue;
        float *row =
            p.dqAccum + backward::workspaceRow(p, w.batch, h, e, i) * int64_t(p.dqPitch) + dqFirst + 2 * quad;
#pragma unroll
        for (int j = 0; j < kDq / 8; ++j)
          prim::redAddFloat2(row + 8 * j, dq[4 * j + 2 * hh], dq[4 * j + 2 * hh + 1]);
      }
    }
    turns.release(order);
    prim::wgmmaWaitGroup<0>();
    prim::wgmmaFenceOperands(dv);
    prim::wgmmaFenceOperands(dk);
    // The stage's last readers (S^T, dP^T, dV, dK) are complete: the producer may refill it.
    if constexpr (Producer) prim::mbarrierArrive(empty + 8 * stage);
  }
  prim::cpAsyncWait<0>();
  if constexpr (L::kBulkDq) {
    if (lane == 0) prim::bulkWait<0>();  // the staging tiles must outlive the reads
  }

  // dK, dV rows of this CTA (keys past seqlensK but inside the sequence's rows get zeros: nothing touched them).
  const int32_t rowsLeft = e.rowsK - n0;
  if (rowsLeft > 0) {
    const int64_t key0 = e.kStart + n0;
    // Each warpgroup holds its shares of the columns of its 64 keys' dK and dV.
    storeRows<Element, kDk>(dk,
                            static_cast<Element *>(p.dK) + int64_t(w.batch) * p.dKBatch + int64_t(w.kvHead) * p.dKHead +
                                key0 * p.dKRow + dkFirst,
                            p.dKRow, keyInTile, rowsLeft, p.headDim - dkFirst, quad, p.scale);
    storeRows<Element, kDv>(dv,
                            static_cast<Element *>(p.dV) + int64_t(w.batch) * p.dVBatch + int64_t(w.kvHead) * p.dVHead +
                                key0 * p.dVRow + dvFirst,
                            p.dVRow, keyInTile, rowsLeft, p.headDimV - dvFirst, quad);
  }
}

// Deterministic: the dQ additions of one query block are ordered by key block (sm90_bwd_order.cuh). Transform:
// softcap and ALiBi, unordered. Producer: the producer-warpgroup form (hasTmaForm; kp's maps), else every thread
// copies its share of each step (kp.b only).
template <typename Element, int D, int DV, bool Deterministic, bool Transform = false, bool Producer = false>
__global__ void __launch_bounds__(Producer ? 384 : 256, 1)
    backwardSm90SplitKernel(const __grid_constant__ split::KernelParams<Producer> kp) {
  static_assert(!(Transform && Deterministic), "the transform kernel adds dQ unordered");
  static_assert(!Producer || hasTmaForm(D), "the producer form is compiled where hasTmaForm says");
  using L = split::Layout<D, DV, Producer>;
  constexpr int kLoaders = split::kLoaderThreads<D, DV, Producer, Deterministic>;
  const BackwardParams &p = split::backwardParams(kp);
  extern __shared__ unsigned char sm90BwdSplitShared[];
  const uint32_t base = (prim::smemAddress(sm90BwdSplitShared) + 1023u) & ~1023u;
  unsigned char *const baseGeneric = sm90BwdSplitShared + (base - prim::smemAddress(sm90BwdSplitShared));
  // Warp-uniform (the two bodies' CTA barriers pair up warp by warp), and broadcast from lane 0 so that the compiler
  // knows it: the wgmma descriptors built from it then stay in uniform registers.
  const int group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if constexpr (Producer) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < 2; ++st) {
        prim::mbarrierInit(base + L::kFull + 8 * st, kLoaders + 1);  // the loaders' cp.async arrivals and thread 0's
        prim::mbarrierInit(base + L::kEmpty + 8 * st, 256);          // every consumer thread's
      }
      for (int j = 0; j < kDqWarps; ++j) {
        prim::mbarrierInit(base + L::kDqStaged + 8 * j, kDqStagingWarps);
        prim::mbarrierInit(base + L::kDqFree + 8 * j, 1);
      }
      prim::fenceBarrierInit();
    }
    __syncthreads();
    if (group == 2) {
      prim::setMaxRegistersDecrease<producerRegisters(L::kBlockM)>();
      // The consumers' walk (splitWalk), whose steps it fills.
      const backward::WorkItem w = backward::decodeWorkItem(p);
      const backward::SequenceExtent e = backward::sequenceExtent(p, w.batch);
      const int32_t n0 = w.keyBlock * L::kBlockN;
      const BlockRange qb = backward::queryBlocksOf(p, e, n0, L::kBlockM, L::kBlockN);
      const StepOrder order = stepOrder<Deterministic>(p, e, w.keyBlock, n0, qb, L::kBlockM, L::kBlockN);
      const int pt = int(threadIdx.x) - 256;
      if (pt < kLoaders) {
        produceQuerySteps<Element, D, DV, L::kBlockM, 2, Deterministic, kLoaders>(
            kp, w, e, order, w.kvHead * p.headsPerKvHead, split::stepsOf(p, qb), base, L::kQ, L::kDO, L::kTileBytes,
            L::kTileBytesV, L::kLse, L::kRowDot, base + L::kFull, base + L::kEmpty, pt);
      } else if constexpr (split::dqWarpForm<D, DV, Producer, Deterministic>()) {
        auto addTiles = [&](int lane, int32_t mBlock, int32_t h) {
          split::addStagedDq<D, L::kBlockM>(p, w, e, base + L::kDqStage, lane, mBlock, h);
        };
        if (pt < kLoaders + 32 * kDqWarps)
          addDqInTurns<kDqWarps>(p, w, order, w.kvHead * p.headsPerKvHead, split::stepsOf(p, qb),
                                 base + L::kDqStaged, base + L::kDqFree, pt - kLoaders, addTiles);
      }
      return;
    }
    prim::setMaxRegistersIncrease<consumerRegisters(L::kBlockM)>();
  }
  if constexpr (split::evenSplit(D, DV)) {
    splitWalk<Element, D, DV, Deterministic, -1, Transform, Producer>(p, base, baseGeneric, group);
  } else if (group == 0) {
    splitWalk<Element, D, DV, Deterministic, 0, Transform, Producer>(p, base, baseGeneric, 0);
  } else {
    splitWalk<Element, D, DV, Deterministic, 1, Transform, Producer>(p, base, baseGeneric, 1);
  }
}

}  // namespace flashattn::cuda::backward_sm90
