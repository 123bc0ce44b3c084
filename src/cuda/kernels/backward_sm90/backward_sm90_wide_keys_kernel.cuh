// SPDX-License-Identifier: BSD-3-Clause
// The Hopper (sm_90a) backward main kernel for Q/K 192 with V/O 128 (DeepSeek-V3's MLA prefill), in the
// producer form: 96 keys per CTA, 1.5x the split kernel's 64, so each query block's Q/dO loads and dQ additions are
// spent on 1.5x the products (FlashAttention's CuTe-DSL Hopper backward takes the same tile for these head dims).
// Warpgroup g owns keys 48g .. 48g + 47 of the block:
//   S    = Q K^T         m64n48k16 x D/16: queries as M, so each thread holds two query rows' statistics
//   dP   = dO V^T        m64n48k16 x DV/16
//   P, dS                in registers (dS without the softmax scale: dK takes it at its store, dQ in the convert
//                        kernel; dsUnscaled), stored transposed by stmatrix .trans as P^T / dS^T [key][query], one
//                        128-byte slab row per key (the warpgroup's rows of one tile each)
//   dV^T += dO^T P       A = dO read M-major, B = the warpgroup's P^T rows (K-major): DV/64 m64 tiles over its 48 keys
//   dK^T += Q^T dS       likewise, D/64 tiles
//   dQ    = dS K         A = dS read M-major from the whole dS^T tile (both warpgroups' keys), B = K MN-major: a share
//                        of dQ's columns, whole 64-column slabs (an MN-major operand starts at a slab): 128 + 64
//                        (split::shareColumns), so the warpgroups run two bodies with compile-time shares
//   dQ accumulator      += dQ by one bulk reduce per warp and 64-column panel from shared staging (the split
//                        kernel's scheme), while dK^T, committed after dQ, still runs; in deterministic mode by two
//                        warps of the producer warpgroup in the query block's turn (the split kernel's dqWarpForm:
//                        addDqInTurns), the other two loading
// Order of a step's products: S, dP; dV^T once the warpgroup's P^T rows are stored (it runs under the dS work and
// the CTA barrier: 1.008-1.017x over issuing it beside dK^T); after the barrier dQ, then dK^T.
// Registers: dK^T and dV^T hold 72 + 48 floats a thread, S and dP 24 + 24, dQ 64 or 32 (S and dP are dead by then).
// Shared memory: K 36 + V 24 + Q 2 x 24 + dO 2 x 16 + P^T, dS^T 2 x 12 + dQ staging 48 KB, with the statistics,
// barriers and alignment 219,392 bytes. One P^T / dS^T tile: a warpgroup overwrites its half of dS^T only once the
// other's dQ product of the previous step has read it (a named barrier per warpgroup, arrived by the other); its own
// P^T / dS^T rows only its own products read. dK and dV leave through the Q and dO stages (free once both warpgroups
// are past their last step) as [key][column] rows, transposed by stmatrix, then in 16-byte row pieces to global
// memory.
// Softcap and ALiBi stay on the split kernel (backward_sm90_split_kernel.cuh); masking, GQA, ragged batches, seqlensK
// and deterministic mode's step order and turns follow backward_common.cuh and sm90_bwd_order.cuh as there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_split_kernel.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_order.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_primitives.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_tiles.cuh"
#include "cuda/primitives/bulk_reduce.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the backward_sm90 kernels use wgmma: compile them with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace flashattn::cuda::backward_sm90 {

namespace wide_keys {

// Byte offsets from a 1024-aligned base. 16-bit tiles are stacks of 128-byte-swizzled slabs [width / 64][rows][64].
template <int D, int DV>
struct Layout {
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = kWideKeysBlockN;
  static constexpr int kGroupKeys = kBlockN / 2;  // a consumer warpgroup's keys
  static_assert(hasWideKeysForm(D, DV) && D % 64 == 0 && DV % 64 == 0, "the head dims this kernel is built for");
  static_assert(kGroupKeys % 16 == 0, "a warpgroup's keys are whole stmatrix pairs of 8-key matrices");
  static constexpr uint32_t kQuerySlab = uint32_t(kBlockM) * 128u;  // one slab of a 64-row Q or dO tile
  static constexpr uint32_t kKeySlab = uint32_t(kBlockN) * 128u;    // one slab of the K or V tile, P^T or dS^T
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + (D / 64) * kKeySlab;
  static constexpr uint32_t kQStage = (D / 64) * kQuerySlab;
  static constexpr uint32_t kDOStage = (DV / 64) * kQuerySlab;
  static constexpr uint32_t kQ = kV + (DV / 64) * kKeySlab;  // 2 stages
  static constexpr uint32_t kDO = kQ + 2 * kQStage;           // 2 stages
  static constexpr uint32_t kPT = kDO + 2 * kDOStage;         // P^T [key][query]
  static constexpr uint32_t kDST = kPT + kKeySlab;            // dS^T [key][query]
  static constexpr uint32_t kLse = kDST + kKeySlab;           // 2 stages x BlockM floats
  static constexpr uint32_t kRowDot = kLse + 2 * kBlockM * 4;
  // Each stage's full and empty mbarriers (full + 8 s, empty + 8 s) and, deterministic, the dQ warps' (staged + 8 j,
  // free + 8 j); 256 bytes kept.
  static constexpr uint32_t kFull = kRowDot + 2 * kBlockM * 4;
  static constexpr uint32_t kEmpty = kFull + 2 * 8;
  static constexpr uint32_t kDqStaged = kEmpty + 2 * 8;
  static constexpr uint32_t kDqFree = kDqStaged + kDqWarps * 8;
  // dQ staging: each consumer warp's 16 rows x its warpgroup's dQ columns in 4 KB panels (stageDqRows).
  static constexpr uint32_t kDqStage = kFull + 256;
  static constexpr uint32_t kDqStageBytes = 4u * 16u * uint32_t(D) * 4u;
  static constexpr uint32_t kEnd = kDqStage + kDqStageBytes;
  static constexpr std::size_t kDynamicBytes = std::size_t(kEnd) + 1024;  // room to align the base
  // The epilogue's dK and dV rows [key][columns + 8] in the Q and dO stages: the 8 padding elements put the 8 rows a
  // stmatrix writes in 8 different 16-byte bank groups.
  static constexpr uint32_t kDkPitch = uint32_t(D + 8) * 2u;
  static constexpr uint32_t kDvPitch = uint32_t(DV + 8) * 2u;
  static_assert(kBlockN * kDkPitch <= 2 * kQStage && kBlockN * kDvPitch <= 2 * kDOStage,
                "the epilogue's rows fit in the stages they reuse");
  static_assert(kV % 1024 == 0 && kQ % 1024 == 0 && kDO % 1024 == 0 && kPT % 1024 == 0 && kDST % 1024 == 0 &&
                    (uint32_t(kGroupKeys) * 128u) % 1024 == 0,
                "swizzle atoms (and each warpgroup's first key row) are 1024-byte aligned");
  static_assert(kDqStage % 256 == 0, "the dQ staging stores need 256-byte aligned tiles (stageDqRows)");
  static_assert(kDqFree + kDqWarps * 8 <= kDqStage, "the barriers fit before the staging");
  static_assert(kDynamicBytes <= 232448, "the tiles fit sm90's shared memory per block");
};

constexpr uint32_t kCtaBarrier = split::kCtaBarrier;  // both consumer warpgroups: the step's dS^T is whole
constexpr uint32_t kDsFreeBarrier = 2;                // + g: warpgroup g may overwrite its dS^T rows
constexpr uint32_t kGroupBarrier = 5;                 // + g: warpgroup g's own rows are stored (P^T, then dK / dV)
static_assert(kCtaBarrier != kTurnBarrier && kDsFreeBarrier + 1 < kTurnBarrier && kGroupBarrier > kTurnBarrier &&
                  kGroupBarrier + 1 < 16,
              "the kernel's named barriers stay apart from each other and from the turns' (sm90_bwd_order.cuh)");

// Rows 48g .. of a warpgroup's transposed accumulators (Tiles m64 tiles of head-dim rows x its 48 keys) into the
// epilogue's [key][column] rows at `rows` (pitch bytes apart), times `multiplier`: each 8 x 8 matrix (8 head-dim rows
// x 8 keys) goes in by stmatrix .trans, which gives each of its keys 16 contiguous bytes of head-dim columns.
template <typename Element, int Tiles, int Keys>
__device__ __forceinline__ void stageTransposed(const float (&acc)[Tiles][Keys / 2], uint32_t rows, uint32_t pitch,
                                                int group, int warp, int lane, float multiplier) {
  const int matrix = lane / 8;
#pragma unroll
  for (int mt = 0; mt < Tiles; ++mt) {
    const uint32_t column = uint32_t(64 * mt + 16 * warp + 8 * (matrix % 2));
#pragma unroll
    for (int j = 0; j < Keys / 8; j += 2) {
      const uint32_t key = uint32_t(group * Keys + 8 * (j + matrix / 2) + lane % 8);
      const float *a = acc[mt] + 4 * j;
      stmatrixX4Trans(rows + key * pitch + column * 2u, prim::packFloat2<Element>(a[0] * multiplier, a[1] * multiplier),
                      prim::packFloat2<Element>(a[2] * multiplier, a[3] * multiplier),
                      prim::packFloat2<Element>(a[4] * multiplier, a[5] * multiplier),
                      prim::packFloat2<Element>(a[6] * multiplier, a[7] * multiplier));
    }
  }
}

// A warpgroup's staged rows (Keys keys from key row group * Keys, `columns` wide, pitch bytes apart) to the caller's
// rows, 16 bytes a thread a pass; rows >= rowsLeft and columns >= validColumns are not written.
template <int Columns, int Keys>
__device__ __forceinline__ void storeStagedRows(const unsigned char *rows, uint32_t pitch, int group, void *out,
                                                int64_t rowStride, int rowsLeft, int validColumns, int thread) {
  constexpr int kChunks = Columns / 8;
#pragma unroll 1
  for (int index = thread; index < Keys * kChunks; index += 128) {
    const int row = index / kChunks;
    const int chunk = index - row * kChunks;
    if (row < rowsLeft && 8 * chunk < validColumns)
      *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(out) + int64_t(row) * rowStride + 8 * chunk) =
          *reinterpret_cast<const uint4 *>(rows + uint32_t(group * Keys + row) * pitch + uint32_t(chunk) * 16u);
  }
}

}  // namespace wide_keys

// Consumer warpgroup Group's walk over the CTA's query blocks (its body: the dQ share is compile-time). Deterministic:
// the dQ additions go to the producer warpgroup's dQ warps, which add them in the query block's turn.
template <typename Element, int D, int DV, bool Deterministic, int Group>
__device__ __forceinline__ void wideKeysWalk(const BackwardParams &p, uint32_t base, unsigned char *baseGeneric) {
  using L = wide_keys::Layout<D, DV>;
  constexpr int kBlockM = L::kBlockM;
  constexpr int kBlockN = L::kBlockN;
  constexpr int kKeys = L::kGroupKeys;
  constexpr int kDq = split::shareColumns(D, Group, split::kDqLowerMore);
  constexpr int kDqFirst = split::shareFirst(D, Group, split::kDqLowerMore);
  constexpr int kDvTiles = DV / 64, kDkTiles = D / 64;

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

  float dvT[kDvTiles][kKeys / 2], dkT[kDkTiles][kKeys / 2];
#pragma unroll
  for (int mt = 0; mt < kDvTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) dvT[mt][i] = 0.f;
#pragma unroll
  for (int mt = 0; mt < kDkTiles; ++mt)
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) dkT[mt][i] = 0.f;

  // K and V are the consumers' copies; Q, dO and the statistics come with the stages' full barriers.
  if (steps > 0) loadKeyBlock<Element, D, DV, kBlockN>(p, w, e, n0, base + L::kK, base + L::kV, thread);
  prim::cpAsyncCommit();
  prim::cpAsyncWait<0>();
  prim::fenceProxyAsyncShared();
  prim::namedBarrierSyncUnaligned(wide_keys::kCtaBarrier, 256);

  const float scaleLog2 = p.scale * prim::kLog2e;
  const uint32_t groupRows = uint32_t(Group * kKeys) * 128u;  // the warpgroup's first key row in a 96-row slab
  const uint64_t kRowsDesc = prim::wgmmaDescriptorSw128(base + L::kK + groupRows, 16, 1024);
  const uint64_t vRowsDesc = prim::wgmmaDescriptorSw128(base + L::kV + groupRows, 16, 1024);
  const uint64_t kColsDesc =
      prim::wgmmaDescriptorSw128(base + L::kK + uint32_t(kDqFirst / 64) * L::kKeySlab, L::kKeySlab, 1024);
  const uint64_t pTDesc = prim::wgmmaDescriptorSw128(base + L::kPT + groupRows, 16, 1024);
  const uint64_t dSTDesc = prim::wgmmaDescriptorSw128(base + L::kDST + groupRows, 16, 1024);
  const uint64_t dSDesc = prim::wgmmaDescriptorSw128(base + L::kDST, L::kKeySlab, 1024);
  const uint32_t full = base + L::kFull, empty = base + L::kEmpty;
  const int rowInTile = 16 * warp + lane / 4;  // + 8 hh: this thread's query rows of S, dP and dQ
  const int32_t keyBase = n0 + Group * kKeys + 2 * quad;  // + 8 j + e: its keys
  // This warp's dQ staging tiles: warpgroup 0's warps first, then warpgroup 1's.
  const uint32_t dqStage =
      base + L::kDqStage + uint32_t(Group == 0 ? 0 : 4 * 16 * 4 * split::shareColumns(D, 0, split::kDqLowerMore)) +
      uint32_t(warp) * uint32_t(16 * 4 * kDq);
  // P or dS (queries x this warpgroup's keys) into its rows of a [key][query] tile by stmatrix .trans: lane l
  // addresses row l % 8 (a key) of matrix l / 8, whose query rows are those of accumulator half (l / 8) % 2 and whose
  // keys are those of column block j + l / 16.
  const int matrix = lane / 8;
  const uint32_t queryChunk = uint32_t(2 * warp + matrix % 2);
  auto storeKeyRows = [&](uint32_t tile, const float(&f)[kKeys / 2]) {
#pragma unroll
    for (int j = 0; j < kKeys / 8; j += 2) {
      const uint32_t key = uint32_t(Group * kKeys + 8 * (j + matrix / 2) + lane % 8);
      stmatrixX4Trans(tile + key * 128u + ((queryChunk ^ (key & 7u)) << 4),
                      prim::packFloat2<Element>(f[4 * j], f[4 * j + 1]),
                      prim::packFloat2<Element>(f[4 * j + 2], f[4 * j + 3]),
                      prim::packFloat2<Element>(f[4 * j + 4], f[4 * j + 5]),
                      prim::packFloat2<Element>(f[4 * j + 6], f[4 * j + 7]));
    }
  };

  // dV^T += dO^T P or dK^T += Q^T dS: k = the 64 queries, 16 rows (2048 bytes) down the M-major dO / Q slabs (one m64
  // tile of head-dim columns each) and 32 bytes along the K-major P^T / dS^T rows of this warpgroup's keys.
  auto addTransposed = [&](auto &acc, uint32_t columnTile, uint64_t keyRowsDesc) {
    constexpr int kTiles = sizeof(acc) / sizeof(acc[0]);
#pragma unroll
    for (int mt = 0; mt < kTiles; ++mt) {
      const uint64_t columns =
          prim::wgmmaDescriptorSw128(columnTile + uint32_t(mt) * L::kQuerySlab, L::kQuerySlab, 1024);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        prim::WgmmaOp<Element, kKeys>::template ssTransposed<1, 0>(
            acc[mt], prim::wgmmaDescriptorAdvance(columns, uint32_t(kk) * 2048),
            prim::wgmmaDescriptorAdvance(keyRowsDesc, uint32_t(kk) * 32), 1u);
    }
  };

  for (int32_t t = 0; t < steps; ++t) {
    const int stage = t & 1;
    prim::mbarrierWaitInline(full + 8 * stage, uint32_t(t >> 1) & 1u);
    const StepBlock sb = stepBlock<Deterministic>(order, t);
    const int32_t m0 = sb.mBlock * kBlockM;
    // A ragged sequence's last block came by cp.async (generic proxy); wgmma reads the async proxy.
    if (p.ragged && m0 + kBlockM > sq) prim::fenceProxyAsyncShared();
    const int32_t h = headBase + sb.head;
    const uint32_t qTile = base + L::kQ + uint32_t(stage) * L::kQStage;
    const uint32_t dOTile = base + L::kDO + uint32_t(stage) * L::kDOStage;

    float s[kKeys / 2], dp[kKeys / 2];
    prim::wgmmaFence();
    {
      const uint64_t qDesc = prim::wgmmaDescriptorSw128(qTile, 16, 1024);
      const uint64_t dODesc = prim::wgmmaDescriptorSw128(dOTile, 16, 1024);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        prim::WgmmaOp<Element, kKeys>::ss(
            s, prim::wgmmaDescriptorAdvance(qDesc, uint32_t(ks / 4) * L::kQuerySlab + uint32_t(ks % 4) * 32),
            prim::wgmmaDescriptorAdvance(kRowsDesc, uint32_t(ks / 4) * L::kKeySlab + uint32_t(ks % 4) * 32),
            ks > 0 ? 1u : 0u);
      prim::wgmmaCommitGroup();
#pragma unroll
      for (int ks = 0; ks < DV / 16; ++ks)
        prim::WgmmaOp<Element, kKeys>::ss(
            dp, prim::wgmmaDescriptorAdvance(dODesc, uint32_t(ks / 4) * L::kQuerySlab + uint32_t(ks % 4) * 32),
            prim::wgmmaDescriptorAdvance(vRowsDesc, uint32_t(ks / 4) * L::kKeySlab + uint32_t(ks % 4) * 32),
            ks > 0 ? 1u : 0u);
      prim::wgmmaCommitGroup();
    }

    const float *const lseRow = sLse + stage * kBlockM + rowInTile;
    const float *const dotRow = sRowDot + stage * kBlockM + rowInTile;
    const float lse[2] = {lseRow[0], lseRow[8]};
    const float dot[2] = {dotRow[0], dotRow[8]};
    const bool fullyVisible = backward::blockFullyVisible(diagonals, m0, n0 + Group * kKeys, kBlockM, kKeys, sq, sk);
    backward::RowKeys rows[2];
    bool rowValid[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int32_t i = m0 + rowInTile + 8 * hh;
      rows[hh] = backward::rowKeys(diagonals, i, sk);
      rowValid[hh] = i < sq;
    }
    // P while dP is still in flight.
    prim::wgmmaWaitGroup<1>();
    prim::wgmmaFenceOperands(s);
    if (fullyVisible) {
#pragma unroll
      for (int idx = 0; idx < kKeys / 2; ++idx) s[idx] = prim::exp2Fast(fmaf(s[idx], scaleLog2, -lse[(idx / 2) % 2]));
    } else {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int idx = 4 * j + 2 * hh + ee;
            const int32_t key = keyBase + 8 * j + ee;
            const bool visible = rowValid[hh] && key >= rows[hh].lo && key <= rows[hh].hi;
            s[idx] = visible ? prim::exp2Fast(fmaf(s[idx], scaleLog2, -lse[hh])) : 0.f;
          }
    }
    // P^T rows: read by this warpgroup's dV product only, which the previous step waited for.
    storeKeyRows(base + L::kPT, s);
    // dV^T(t) as soon as the warpgroup's P^T rows are whole, so that the tensor cores have it during the dS work and
    // the CTA barrier.
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSync(wide_keys::kGroupBarrier + Group, 128);
    prim::wgmmaFence();
    addTransposed(dvT, dOTile, pTDesc);
    prim::wgmmaCommitGroup();
    prim::wgmmaWaitGroup<1>();
    prim::wgmmaFenceOperands(dp);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      // A row that sees one key has P = 1 whatever its logit, so its dS is exactly zero; dP - D would instead leave
      // the difference of two dot products accumulated apart (wgmma's and the preprocess's). Masked entries already
      // have P = 0. A sink shares the row's softmax: P < 1.
      const bool oneKey = !fullyVisible && rows[hh].lo == rows[hh].hi && p.sinks == nullptr;
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int ee = 0; ee < 2; ++ee) {
          const int idx = 4 * j + 2 * hh + ee;
          dp[idx] = oneKey ? 0.f : s[idx] * (dp[idx] - dot[hh]);
        }
    }
    // dS^T rows: the other warpgroup's dQ product of step t - 1 read them until it arrived here.
    if (t > 0) prim::namedBarrierSyncUnaligned(wide_keys::kDsFreeBarrier + Group, 256);
    storeKeyRows(base + L::kDST, dp);
    prim::fenceProxyAsyncShared();
    prim::namedBarrierSyncUnaligned(wide_keys::kCtaBarrier, 256);

    // dQ first, in its own group, so that its additions go out while dV^T and dK^T still run on the tensor cores.
    float dq[kDq / 2];
    prim::wgmmaFence();
    // k = the 96 keys: dS read M-major from the dS^T rows and K MN-major, 16 key rows (2048 bytes) a step.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      prim::WgmmaOp<Element, kDq>::template ssTransposed<1, 1>(
          dq, prim::wgmmaDescriptorAdvance(dSDesc, uint32_t(kk) * 2048),
          prim::wgmmaDescriptorAdvance(kColsDesc, uint32_t(kk) * 2048), kk > 0 ? 1u : 0u);
    prim::wgmmaCommitGroup();
    addTransposed(dkT, qTile, dSTDesc);
    prim::wgmmaCommitGroup();
    prim::wgmmaWaitGroup<1>();
    prim::wgmmaFenceOperands(dq);
    // This warpgroup's dQ product has read the whole dS^T tile: the other may write its rows of the next step.
    if (t + 1 < steps) prim::namedBarrierArrive(wide_keys::kDsFreeBarrier + (Group ^ 1), 256);

    // dQ rows 16 * warp + lane / 4 + 8h of the block, through the warp's staging tiles.
    {
      const int32_t iFirst = m0 + 16 * warp;
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, iFirst);
      if constexpr (Deterministic) {
        // Once step t - 1's dQ warp has read the tiles; this step's adds them in the query block's turn.
        stageDqForWarps<kDq, kDqWarps>(dqStage, dq, wsRow0, lane, quad, base + L::kDqStaged, base + L::kDqFree, t);
      } else {
        stageDqRows<kDq>(dqStage, dq, wsRow0, lane, quad);
        if (lane == 0) addDqRows<kDq / 64>(p, wsRow0, kDqFirst / 64, dqStage, sq - iFirst < 16 ? sq - iFirst : 16);
      }
    }
    prim::wgmmaWaitGroup<0>();
#pragma unroll
    for (int mt = 0; mt < kDvTiles; ++mt) prim::wgmmaFenceOperands(dvT[mt]);
#pragma unroll
    for (int mt = 0; mt < kDkTiles; ++mt) prim::wgmmaFenceOperands(dkT[mt]);
    // The stage's last readers (S, dP, dV^T, dK^T) are complete: the producer may refill it.
    prim::mbarrierArrive(empty + 8 * stage);
  }
  if (!Deterministic && lane == 0) prim::bulkWait<0>();  // the staging tiles must outlive the reads

  // dK, dV rows of this warpgroup's keys (keys past seqlensK but inside the sequence's rows get zeros: nothing
  // touched them). The Q and dO stages are free once both warpgroups are past their last step's products.
  prim::namedBarrierSyncUnaligned(wide_keys::kCtaBarrier, 256);
  const int32_t rowsLeft = e.rowsK - (n0 + Group * kKeys);
  if (rowsLeft > 0) {
    wide_keys::stageTransposed<Element, kDkTiles, kKeys>(dkT, base + L::kQ, L::kDkPitch, Group, warp, lane, p.scale);
    wide_keys::stageTransposed<Element, kDvTiles, kKeys>(dvT, base + L::kDO, L::kDvPitch, Group, warp, lane, 1.f);
    prim::namedBarrierSync(wide_keys::kGroupBarrier + Group, 128);
    const int64_t key0 = e.kStart + n0 + Group * kKeys;
    const int groupThread = thread % 128;
    wide_keys::storeStagedRows<D, kKeys>(
        baseGeneric + L::kQ, L::kDkPitch, Group,
        static_cast<Element *>(p.dK) + int64_t(w.batch) * p.dKBatch + int64_t(w.kvHead) * p.dKHead + key0 * p.dKRow,
        p.dKRow, rowsLeft, p.headDim, groupThread);
    wide_keys::storeStagedRows<DV, kKeys>(
        baseGeneric + L::kDO, L::kDvPitch, Group,
        static_cast<Element *>(p.dV) + int64_t(w.batch) * p.dVBatch + int64_t(w.kvHead) * p.dVHead + key0 * p.dVRow,
        p.dVRow, rowsLeft, p.headDimV, groupThread);
  }
}

// One CTA per (96-key block, KV head, sequence): two consumer warpgroups (wideKeysWalk) and a producer warpgroup that
// brings each step's Q, dO and statistics (produceQuerySteps, as the split kernel's producer form) with all four
// warps, or (Deterministic) with two while the other two add dQ in turns.
template <typename Element, int D, int DV, bool Deterministic>
__global__ void __launch_bounds__(384, 1) backwardSm90WideKeysKernel(const __grid_constant__ Sm90KernelParams kp) {
  using L = wide_keys::Layout<D, DV>;
  constexpr int kLoaders = Deterministic ? kDqWarpLoaders : 128;
  const BackwardParams &p = kp.b;
  extern __shared__ unsigned char sm90BwdWideKeysShared[];
  const uint32_t base = (prim::smemAddress(sm90BwdWideKeysShared) + 1023u) & ~1023u;
  unsigned char *const baseGeneric = sm90BwdWideKeysShared + (base - prim::smemAddress(sm90BwdWideKeysShared));
  // Warp-uniform, and broadcast from lane 0 so that the compiler knows it.
  const int group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
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
    const backward::WorkItem w = backward::decodeWorkItem(p);
    const backward::SequenceExtent e = backward::sequenceExtent(p, w.batch);
    const int32_t n0 = w.keyBlock * L::kBlockN;
    const BlockRange qb = backward::queryBlocksOf(p, e, n0, L::kBlockM, L::kBlockN);
    const StepOrder order = stepOrder<Deterministic>(p, e, w.keyBlock, n0, qb, L::kBlockM, L::kBlockN);
    const int32_t headBase = w.kvHead * p.headsPerKvHead;
    const int32_t steps = split::stepsOf(p, qb);
    const int pt = int(threadIdx.x) - 256;
    if (pt < kLoaders) {
      produceQuerySteps<Element, D, DV, L::kBlockM, 2, Deterministic, kLoaders>(
          kp, w, e, order, headBase, steps, base, L::kQ, L::kDO, L::kQStage, L::kDOStage, L::kLse, L::kRowDot,
          base + L::kFull, base + L::kEmpty, pt);
    } else if constexpr (Deterministic) {
      auto addTiles = [&](int lane, int32_t mBlock, int32_t h) {
        split::addStagedDq<D, L::kBlockM>(p, w, e, base + L::kDqStage, lane, mBlock, h);
      };
      addDqInTurns<kDqWarps>(p, w, order, headBase, steps, base + L::kDqStaged, base + L::kDqFree, pt - kLoaders,
                             addTiles);
    }
    return;
  }
  prim::setMaxRegistersIncrease<consumerRegisters(L::kBlockM)>();
  if (group == 0)
    wideKeysWalk<Element, D, DV, Deterministic, 0>(p, base, baseGeneric);
  else
    wideKeysWalk<Element, D, DV, Deterministic, 1>(p, base, baseGeneric);
}

}  // namespace flashattn::cuda::backward_sm90
