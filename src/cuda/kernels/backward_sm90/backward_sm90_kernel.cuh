// SPDX-License-Identifier: BSD-3-Clause
// The Hopper (sm_90a) backward main kernel for head dims 64 and 128: FlashAttention backward with wgmma for FP16/BF16
// storage (the wider head dims have their own kernel: backward_sm90_split_kernel.cuh).
//
// A CTA owns BlockN = 128 keys of one (sequence, KV head): K and V stay in shared memory (loaded once), dK and dV stay
// in registers, and the CTA walks every query block of every query head of the KV head's group that can see its keys
// (GQA sums dK/dV on chip). Two warpgroups, each owning 64 of the keys, do per query block of BlockM rows (d128: 64,
// d64: 128, so that each step's products outweigh its fixed costs: barriers, loads, statistics, dQ reductions):
//   S^T  = K Q^T        wgmma m64nBlockMk16, K and Q K-major in shared memory
//   dP^T = V dO^T       wgmma m64nBlockMk16, same
//   P^T  = exp2(S^T * scale * log2 e - LSE * log2 e), dS^T = P^T (dP^T - D)   in registers (the softmax scale left
//                       out of dS: dK takes it once at its store, dQ in the convert kernel; dsUnscaled)
//   dV  += P^T dO       wgmma m64nDk16, P^T as A registers (accumulator layout = A layout), dO MN-major
//   dK  += dS^T Q       same with dS^T and Q
//   dS^T -> dS          stmatrix.trans into shared memory (K-major A operand of the next product)
//   dQ   = dS K         wgmma m64n64k16, K read MN-major; d128: warpgroup g computes columns 64g.. over all 128 keys;
//                       d64: warpgroup g computes query rows 64g.. over all 128 keys
//   dQ accumulator     += dQ: unordered, each warp stages its 16 x 64 tile in shared memory and adds it to the
//                       FP32 workspace with one bulk reduce-add (cp.reduce.async.bulk): the workspace is paneled
//                       (backward_common.cuh's dqAccumIndex), so the tile is contiguous there; deterministic mode
//                       issues the same additions in key-block order. The convert kernel writes dQ.
// d64 splits the products into batches (S^T | dP^T | dV | dK) so P is computed under dP^T and dS under dV.
// Pipeline: three stages of (Q, dO, the workspace's D and LSE*log2 e rows), copied with cp.async by all 256 threads,
// each thread's copies arriving on the stage's mbarrier as they land (noinc), so a warpgroup starts a step as soon as
// its data is there, with no CTA-wide barrier. The copies for step t + 2 go out once both warpgroups have passed the
// dS barrier of step t (then step t - 1, whose stage they reuse, is finished everywhere). The one dS tile is guarded by
// a pair of named barriers: a warpgroup writes dS of step t only after the other has finished its dQ product of step
// t - 1. Rows past the sequence arrive as zeros; per-element masking only runs on blocks that are not fully visible
// (backward_common.cuh's rules), so rows with no visible key (LSE*log2 e = +inf from the preprocess) and keys past
// seqK contribute nothing.
// Producer-warpgroup form (template flag Tma, d128): a third warpgroup brings each step's Q and dO by tensor-map copies
// (one thread; a ragged sequence's last block by cp.async from every producer thread, so that the rows past the
// sequence are zeros) and its row statistics by cp.async (every thread, one value each) into the same three stages, and
// waits for every consumer thread's "stage empty" arrival before it reuses one; the consumers issue no copies past
// their K/V block and hold 240 registers (setmaxnreg), the producer 24.
// Deterministic mode (template flag): the dQ additions of a query block are ordered by key block through the
// workspace's turn counters, and the walk order changes (sm90_bwd_order.cuh).
// 80-row form (BlockM = kWideBlockM; d128, producer form, no mask, unordered): 80-row query blocks in two stages; dQ
// is computed transposed, dQ^T = K^T dS^T (warpgroup g: its 64 head-dim columns over the 80 rows), staged per
// warpgroup and added by one bulk reduce-add per warpgroup and step; dV's product lands before dQ^T's is issued.
// Transform (softcap, ALiBi; hasTransformForm): P^T from the forward's logits, softcap * tanh(S^T * scale / softcap)
// minus the ALiBi slope times the key's distance to the row's diagonal, computed element by element as on masked
// blocks, and dS^T = P^T (dP^T - D) * (1 - tanh^2) (softcap's derivative; 1 without it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/sm90_bwd_order.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_primitives.cuh"
#include "cuda/kernels/backward_sm90/sm90_bwd_tiles.cuh"
#include "cuda/primitives/bulk_reduce.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the backward_sm90 kernels use wgmma: compile them with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace flashattn::cuda::backward_sm90 {

using backward::BackwardParams;

// Shared memory (byte offsets from a 1024-aligned base). Every 16-bit tile is a stack of 128-byte-swizzled slabs
// [D / 64][rows][64]: chunk c of row r at chunk c ^ (r % 8).
template <int D, int BlockM = sm90BackwardTileFor(D).blockM>
struct SharedLayout {
  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = sm90BackwardTileFor(D).blockN;
  static constexpr int kThreads = 32 * sm90BackwardTileFor(D).warps;
  static_assert(kBlockN == 128 && kThreads == 256, "two consumer warpgroups of 64 keys each");
  static_assert(kThreads == int(kTurnThreads), "the hand-over barrier counts the consumer threads");
  static_assert((D == 128 && (kBlockM == 64 || (kBlockM == kWideBlockM && hasWideForm(D)))) ||
                    (D == 64 && kBlockM == 128),
                "d128: 64-row query blocks (registers), or the 80-row form; d64: 128-row blocks (fixed costs)");
  // The 80-row form computes dQ transposed and stages it per warpgroup; its larger tiles leave room for two stages.
  static constexpr bool kDqTransposed = kBlockM == kWideBlockM;
  static constexpr int kStages = kDqTransposed ? 2 : 3;
  // A warp's dQ tile: 16 rows of 64 floats in the workspace's paneled order (swizzled columns, no padding), so one
  // bulk reduce-add moves it; in the 80-row form a warpgroup's: kBlockM rows of its 64-column panel.
  static constexpr uint32_t kDqWarpBytes = 16 * 64 * 4;
  static constexpr uint32_t kDqBytes = kDqTransposed ? 2u * kBlockM * 256u : 8u * kDqWarpBytes;
  static constexpr uint32_t kKBytes = uint32_t(kBlockN) * D * 2;
  static constexpr uint32_t kQBytes = uint32_t(kBlockM) * D * 2;
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kKBytes;
  static constexpr uint32_t kQ = kV + kKBytes;             // kStages stages
  static constexpr uint32_t kDO = kQ + kStages * kQBytes;  // kStages stages
  static constexpr uint32_t kDS = kDO + kStages * kQBytes; // [BlockN / 64][BlockM][64]
  static constexpr uint32_t kDq = kDS + uint32_t(kBlockM) * kBlockN * 2;  // kDqBytes
  static constexpr uint32_t kLse = kDq + kDqBytes;                         // kStages x BlockM floats
  static constexpr uint32_t kRowDot = kLse + kStages * kBlockM * 4;
  static constexpr uint32_t kFull = kRowDot + kStages * kBlockM * 4;  // kStages mbarriers
  static constexpr uint32_t kEmpty = kFull + kStages * 8;              // kStages mbarriers (producer form)
  static constexpr uint32_t kKeys = kEmpty + kStages * 8;              // K and V have landed (producer form)
  static constexpr uint32_t kDqStaged = kKeys + 8;                     // the dQ warps' (deterministic producer form)
  static constexpr uint32_t kDqFree = kDqStaged + kDqWarps * 8;
  static constexpr uint32_t kEnd = kDqFree + kDqWarps * 8;
  static constexpr std::size_t kDynamicBytes = std::size_t(kEnd) + 1024;  // room to align the base
  static_assert(kDq % 256 == 0 && kFull % 8 == 0,
                "the dQ staging stores need 256-byte aligned tiles (stageDqRows), mbarriers 8-byte alignment");
};

// Named barriers (0 is __syncthreads): the dS hand-over of both warpgroups, and the per-warpgroup "my dQ product of
// the previous step is done" signals that guard the dS tile (kDsFree + g: warpgroup g waits there, the other arrives).
constexpr uint32_t kDsReadyBarrier = 1;
constexpr uint32_t kDsFreeBarrier = 2;
// The 80-row form's per-warpgroup dQ staging (kDqStagedBarrier + g): the tile is free, then written.
constexpr uint32_t kDqStagedBarrier = 5;

// The two 8-column accumulator blocks 2kk, 2kk + 1 of a 64 x N accumulator are the A fragment of k-step kk.
template <typename Element, int Count>
__device__ __forceinline__ void toFragments(const float (&s)[Count], uint32_t (&a)[Count / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < Count / 8; ++kk) {
    a[kk][0] = prim::packFloat2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
    a[kk][1] = prim::packFloat2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
    a[kk][2] = prim::packFloat2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
    a[kk][3] = prim::packFloat2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// Deterministic mode hands a query block's dQ on only once this CTA's additions into it are performed: the bulk
// reduce-adds have completed (not just read their source) and are ordered before the generic-proxy release.
template <bool Deterministic>
__device__ __forceinline__ void completeDqAdditions(int lane) {
  if constexpr (Deterministic) {
    if (lane == 0) {
      prim::bulkWait<0>();
      prim::fenceProxyAsyncGlobal();
    }
  }
}

// Deterministic = true orders the dQ additions (backward_common.cuh's turn counters) and walks the query blocks in the
// order that keeps the ordering cheap (stepBlock); false is the unordered kernel. Tma: the producer-warpgroup form
// (kp's maps), else every thread copies its share of each step (kp.b only).
// QKWidth: the columns S^T = K Q^T and dP^T = V dO^T contract over (D, or trimmedQKWidth where the problem's columns
// past it are zeros; every other product keeps the instance's width).
// BlockM: the query rows of a step (sm90BackwardTileFor's, or kWideBlockM: the 80-row form). Transform: softcap and
// ALiBi (prim::LogitTransform).
template <typename Element, int D, bool Deterministic, bool Tma, int QKWidth = D,
          int BlockM = sm90BackwardTileFor(D).blockM, bool Transform = false>
__global__ void __launch_bounds__(Tma ? 384 : 256, 1) backwardSm90Kernel(const __grid_constant__ Sm90KernelParams kp) {
  using L = SharedLayout<D, BlockM>;
  static_assert(QKWidth % 16 == 0 && QKWidth <= D, "S^T and dP^T contract over whole k-steps of the instance");
  static_assert(!L::kDqTransposed || (Tma && !Deterministic && QKWidth == D),
                "the 80-row form: producer warpgroup, unordered additions, the instance's full width");
  static_assert(!Transform || (hasTransformForm(D) && Tma == hasTmaForm(D) && !Deterministic && QKWidth == D &&
                               BlockM == sm90BackwardTileFor(D).blockM),
                "the transform kernel: hasTmaForm's form, unordered additions, full width, the instance's tile");
  constexpr int kBlockM = L::kBlockM;
  constexpr int kBlockN = L::kBlockN;
  static_assert(!Tma || hasTmaForm(D), "the producer form is compiled where hasTmaForm says");
  const BackwardParams &p = kp.b;

  extern __shared__ unsigned char sm90BwdShared[];
  const uint32_t base = (prim::smemAddress(sm90BwdShared) + 1023u) & ~1023u;
  unsigned char *const baseGeneric = sm90BwdShared + (base - prim::smemAddress(sm90BwdShared));
  const float *const sLse = reinterpret_cast<const float *>(baseGeneric + L::kLse);
  const float *const sRowDot = reinterpret_cast<const float *>(baseGeneric + L::kRowDot);

  const int thread = threadIdx.x;
  // Consumer warpgroup (keys 64 * group ..), broadcast from lane 0 so that the compiler knows it warp-uniform: the
  // wgmma descriptors built from it then stay in uniform registers instead of being moved there for every product.
  const int group = __shfl_sync(0xffffffffu, thread / 128, 0);
  const int warp = (thread % 128) / 32;
  const int lane = thread % 32;
  const int quad = lane % 4;

  const backward::WorkItem w = backward::decodeWorkItem(p);
  const backward::SequenceExtent e = backward::sequenceExtent(p, w.batch);
  const int32_t n0 = w.keyBlock * kBlockN;
  const int32_t sq = e.seqQ, sk = e.seqK;
  const Diagonals diagonals = backward::diagonalsOf(p, sq, sk);
  const BlockRange qb = backward::queryBlocksOf(p, e, n0, kBlockM, kBlockN);
  const int32_t blocksPerHead = qb.last >= qb.first ? qb.last - qb.first + 1 : 0;
  const int32_t steps = blocksPerHead * p.headsPerKvHead;
  const int32_t headBase = w.kvHead * p.headsPerKvHead;
  const StepOrder order = stepOrder<Deterministic>(p, e, w.keyBlock, n0, qb, kBlockM, kBlockN);
  // Deterministic producer form: two producer warps add dQ in turn (addDqInTurns) and the consumers only stage it, so
  // the turn's wait, the reduce's completion and the hand-over leave the consumers' path (at 192 that took
  // deterministic / unordered from 0.52-0.83 to 0.64-0.94); the other form orders the additions itself.
  constexpr bool kDqWarp = Tma && Deterministic && !L::kDqTransposed;
  constexpr bool kTurnsHere = Deterministic && !kDqWarp;
  constexpr int kLoaders = kDqWarp ? kDqWarpLoaders : 128;
  DqTurns<kTurnsHere, true> turns;

  const uint32_t full = base + L::kFull;  // stage s's mbarrier at full + 8 s
  const uint32_t empty = base + L::kEmpty;
  const uint32_t keysLanded = base + L::kKeys;
  if (thread == 0) {
    // Producer form: the loaders' cp.async arrivals and thread 0's expect_tx arrival; every consumer thread's.
    for (int st = 0; st < L::kStages; ++st) {
      prim::mbarrierInit(full + 8 * st, Tma ? kLoaders + 1 : L::kThreads);
      if constexpr (Tma) prim::mbarrierInit(empty + 8 * st, L::kThreads);
    }
    if constexpr (kDqWarp) {
      for (int j = 0; j < kDqWarps; ++j) {
        prim::mbarrierInit(base + L::kDqStaged + 8 * j, kDqStagingWarps);
        prim::mbarrierInit(base + L::kDqFree + 8 * j, 1);
      }
    }
    if constexpr (Tma) {
      prim::mbarrierInit(keysLanded, L::kThreads);
      prim::fenceBarrierInit();
    }
  }
  __syncthreads();

  // Producer form: a ragged sequence's last query block, whose rows past the sequence come by cp.async as zeros.
  auto raggedTail = [&](int32_t m0) { return p.ragged && m0 + kBlockM > sq; };
  if constexpr (Tma) {
    if (group == 2) {
      prim::setMaxRegistersDecrease<producerRegisters(kBlockM)>();
      const int pt = thread - 256;
      if (pt < kLoaders) {
        produceQuerySteps<Element, D, D, kBlockM, L::kStages, Deterministic, kLoaders>(
            kp, w, e, order, headBase, steps, base, L::kQ, L::kDO, L::kQBytes, L::kQBytes, L::kLse, L::kRowDot, full,
            empty, pt);
      } else if constexpr (kDqWarp) {
        // Lane l < 8 adds consumer warp l's staging tile: rows 16 (l % 4) of the block (d64: + 64 (l / 4)), panel
        // l / 4 (d64: 0), as the consumers' unordered path does.
        auto addTiles = [&](int lane, int32_t mBlock, int32_t h) {
          const int owner = lane / 4;
          const int32_t iFirst = mBlock * kBlockM + (D == 128 ? 0 : 64 * owner) + 16 * (lane % 4);
          const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, iFirst);
          addDqRows<1>(p, wsRow0, D == 128 ? owner : 0, base + L::kDq + uint32_t(lane) * L::kDqWarpBytes,
                       sq - iFirst < 16 ? sq - iFirst : 16);
        };
        addDqInTurns<kDqWarps>(p, w, order, headBase, steps, base + L::kDqStaged, base + L::kDqFree, pt - kLoaders,
                               addTiles);
      }
      return;
    }
    prim::setMaxRegistersIncrease<consumerRegisters(kBlockM)>();
  }

  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv[i] = dk[i] = 0.f;

  // Issues the copies of step t (query head, query block) into stage t % kStages; each thread's copies arrive on the
  // stage's barrier as they land.
  auto loadStep = [&](int32_t t) {
    const int stage = t % L::kStages;
    loadQueryStep<Element, D, D, kBlockM, Deterministic>(p, w, e, order, headBase, t, stage, base,
                                                         L::kQ, L::kDO, L::kQBytes, L::kQBytes, L::kLse, L::kRowDot,
                                                         thread);
    prim::cpAsyncMbarrierArrive(full + 8 * stage);
  };

  if (steps > 0) loadKeyBlock<Element, D, D, kBlockN>(p, w, e, n0, base + L::kK, base + L::kV, thread);
  if constexpr (Tma) {
    if (steps > 0) {
      prim::cpAsyncMbarrierArrive(keysLanded);
      prim::mbarrierWaitInline(keysLanded, 0);
      prim::fenceProxyAsyncShared();  // K and V were generic-proxy writes; wgmma reads through the async proxy
    }
  } else {
    for (int32_t t = 0; t < L::kStages - 1 && t < steps; ++t) loadStep(t);  // step 0's arrival covers K and V too
  }

  const float scaleLog2 = p.scale * prim::kLog2e;
  [[maybe_unused]] prim::LogitTransform transform{};
  if constexpr (Transform) transform = prim::LogitTransform::of(p.scale, p.softcap, sq, sk);
  // Descriptors: this warpgroup's 64 K / V rows as A (K-major); Q / dO as B (K-major) for S^T, dP^T and as MN-major B
  // (leading byte offset = slab stride) for dK, dV.
  const uint64_t kRowsDesc = prim::wgmmaDescriptorSw128(base + L::kK + uint32_t(group) * 64 * 128, 16, 1024);
  const uint64_t vRowsDesc = prim::wgmmaDescriptorSw128(base + L::kV + uint32_t(group) * 64 * 128, 16, 1024);
  const int keyInGroup = 16 * warp + lane / 4;  // + 8h: this thread's accumulator rows (keys) of S^T

  // kPipelined (d64, 128-row query blocks): S^T and dP^T go in separate batches so P is computed while dP^T still
  // runs, dV's product is issued once P is there and runs while dS is computed (+3% measured), and dK's right after
  // dS, both under the dS hand-over. d128: one batch for S^T and dP^T (splitting it measured 0.92-0.99x), dV after dS
  // and dK after dQ, so that dQ's additions run under dK's product (1.03-1.08x at d128, 0.91-0.95x at d64 measured).
  // The transform kernel takes d128's order at d64 too: dS needs the softcap's derivative, which is known beside P.
  constexpr bool kPipelined = kBlockM == 128 && !Transform;
  constexpr int kCols = kBlockM / 2;     // accumulator floats per thread of S^T, dP^T (64 keys x kBlockM queries)
  constexpr int kQuerySteps = kBlockM / 16;

  // This warp's dQ staging tile.
  const uint32_t dqStage = base + L::kDq + uint32_t(thread / 32) * L::kDqWarpBytes;

  int stage = 0;
  uint32_t phase = 0;  // parity of the stage barrier's current use
  for (int32_t t = 0; t < steps; ++t) {
    prim::mbarrierWaitInline(full + 8 * stage, phase);
    const StepBlock sb = stepBlock<Deterministic>(order, t);
    const int32_t m0 = sb.mBlock * kBlockM;
    // cp.async copies are generic-proxy writes, which wgmma reads through the async proxy; tensor-map copies are
    // async-proxy writes already.
    if (!Tma || raggedTail(m0)) prim::fenceProxyAsyncShared();

    const int32_t h = headBase + sb.head;
    if constexpr (Transform) transform.slopeLog2 = backward::alibiSlope(p, w.batch, h) * prim::kLog2e;
    const uint32_t qTile = base + L::kQ + stage * L::kQBytes;
    const uint32_t dOTile = base + L::kDO + stage * L::kQBytes;

    // One descriptor per operand and step, advanced per k-step: built per product from the address, the descriptors
    // were most of the consumers' integer instructions (ncu, NOTES.md).
    const uint64_t qKDesc = prim::wgmmaDescriptorSw128(qTile, 16, 1024);
    const uint64_t dOKDesc = prim::wgmmaDescriptorSw128(dOTile, 16, 1024);
    float s[kCols], dp[kCols];
    prim::wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < QKWidth / 16; ++ks) {
      const uint32_t aOffset = uint32_t(ks / 4) * kBlockN * 128 + uint32_t(ks % 4) * 32;
      const uint32_t bOffset = uint32_t(ks / 4) * kBlockM * 128 + uint32_t(ks % 4) * 32;
      prim::WgmmaOp<Element, kBlockM>::ss(s, prim::wgmmaDescriptorAdvance(kRowsDesc, aOffset),
                                          prim::wgmmaDescriptorAdvance(qKDesc, bOffset), ks > 0 ? 1u : 0u);
    }
    if constexpr (kPipelined) prim::wgmmaCommitGroup();
#pragma unroll
    for (int ks = 0; ks < QKWidth / 16; ++ks) {
      const uint32_t aOffset = uint32_t(ks / 4) * kBlockN * 128 + uint32_t(ks % 4) * 32;
      const uint32_t bOffset = uint32_t(ks / 4) * kBlockM * 128 + uint32_t(ks % 4) * 32;
      prim::WgmmaOp<Element, kBlockM>::ss(dp, prim::wgmmaDescriptorAdvance(vRowsDesc, aOffset),
                                          prim::wgmmaDescriptorAdvance(dOKDesc, bOffset), ks > 0 ? 1u : 0u);
    }
    prim::wgmmaCommitGroup();
    completeDqAdditions<kTurnsHere>(lane);
    turns.flush(order);  // the previous step's hand-over, under this step's products
    if constexpr (kPipelined) {
      prim::wgmmaWaitGroup<1>();
      prim::wgmmaFenceOperands(s);
    } else {
      prim::wgmmaWaitGroup<0>();
      prim::wgmmaFenceOperands(s);
      prim::wgmmaFenceOperands(dp);
    }

    // Columns of S^T are query rows 8j + 2 * quad + (0, 1) of the block.
    const float *lseRow = sLse + stage * kBlockM + 2 * quad;
    const float *dotRow = sRowDot + stage * kBlockM + 2 * quad;
    const bool fullyVisible = backward::blockFullyVisible(diagonals, m0, n0, kBlockM, kBlockN, sq, sk);
    const int32_t key0 = n0 + 64 * group + keyInGroup;
    // The transform's ALiBi distance of element (j, hh, ee): this one plus 8 hh - 8 j - ee (prim::LogitTransform).
    [[maybe_unused]] const float distance0 = Transform ? float(key0 - (m0 + 2 * quad + transform.shift)) : 0.f;
    const uint64_t dODesc = prim::wgmmaDescriptorSw128(dOTile, kBlockM * 128, 1024);
    const uint64_t qDesc = prim::wgmmaDescriptorSw128(qTile, kBlockM * 128, 1024);
    uint32_t pA[kQuerySteps][4];
    // A row that sees one key has P = 1 whatever its logit, so its dS is exactly zero; dP - D would instead leave the
    // difference of two dot products accumulated apart (wgmma's and the preprocess's).
    if constexpr (kPipelined) {
      uint32_t oneKeyColumns = 0;  // bit 2j + e: query column 8j + 2 * quad + e is such a row
      if (fullyVisible) {
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            s[4 * j + 2 * hh] = prim::exp2Fast(fmaf(s[4 * j + 2 * hh], scaleLog2, -lse.x));
            s[4 * j + 2 * hh + 1] = prim::exp2Fast(fmaf(s[4 * j + 2 * hh + 1], scaleLog2, -lse.y));
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int32_t i = m0 + 8 * j + 2 * quad + ee;
            const backward::RowKeys r = backward::rowKeys(diagonals, i, sk);
            const bool rowValid = i < sq;
            // With a sink the row's softmax has two entries: P < 1.
            if (r.lo == r.hi && p.sinks == nullptr) oneKeyColumns |= 1u << (2 * j + ee);
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
      toFragments<Element>(s, pA);
      prim::wgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kQuerySteps; ++kk)
        prim::WgmmaOp<Element, D>::rsTransB(dv, pA[kk], prim::wgmmaDescriptorAdvance(dODesc, uint32_t(kk) * 2048));
      prim::wgmmaCommitGroup();
      prim::wgmmaWaitGroup<1>();  // dP^T has landed; dV's product keeps running
      prim::wgmmaFenceOperands(dp);
      // dS^T = P^T (dP^T - D), the scale left out (dsUnscaled); invisible entries have P = 0 (dP and D are finite:
      // zero rows past the sequence).
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j) {
        const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int idx = 4 * j + 2 * hh;
          const float d0 = s[idx] * (dp[idx] - dot.x);
          const float d1 = s[idx + 1] * (dp[idx + 1] - dot.y);
          dp[idx] = (oneKeyColumns >> (2 * j)) & 1u ? 0.f : d0;
          dp[idx + 1] = (oneKeyColumns >> (2 * j + 1)) & 1u ? 0.f : d1;
        }
      }
    } else {
      // d128 (and the transform kernel): P and dS in one pass per column pair (both products have landed).
      if (!Transform && fullyVisible) {
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
          const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float p0 = prim::exp2Fast(fmaf(s[4 * j + 2 * hh], scaleLog2, -lse.x));
            const float p1 = prim::exp2Fast(fmaf(s[4 * j + 2 * hh + 1], scaleLog2, -lse.y));
            s[4 * j + 2 * hh] = p0;
            s[4 * j + 2 * hh + 1] = p1;
            dp[4 * j + 2 * hh] = p0 * (dp[4 * j + 2 * hh] - dot.x);
            dp[4 * j + 2 * hh + 1] = p1 * (dp[4 * j + 2 * hh + 1] - dot.y);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j) {
          const float2 lse = *reinterpret_cast<const float2 *>(lseRow + 8 * j);
          const float2 dot = *reinterpret_cast<const float2 *>(dotRow + 8 * j);
#pragma unroll
          for (int ee = 0; ee < 2; ++ee) {
            const int32_t i = m0 + 8 * j + 2 * quad + ee;
            const backward::RowKeys r = backward::rowKeys(diagonals, i, sk);
            const bool rowValid = i < sq;
            const bool oneKey = r.lo == r.hi && p.sinks == nullptr;  // a sink shares the row's softmax: P < 1
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int32_t key = key0 + 8 * hh;
              const bool visible = rowValid && key >= r.lo && key <= r.hi;
              const int idx = 4 * j + 2 * hh + ee;
              if constexpr (Transform) {
                transformedGradient(transform, s[idx], dp[idx], distance0 + float(8 * hh - 8 * j - ee),
                                    ee ? lse.y : lse.x, ee ? dot.y : dot.x, visible, oneKey);
              } else {
                const float pv = visible ? prim::exp2Fast(fmaf(s[idx], scaleLog2, -(ee ? lse.y : lse.x))) : 0.f;
                s[idx] = pv;
                dp[idx] = visible && !oneKey ? pv * (dp[idx] - (ee ? dot.y : dot.x)) : 0.f;
              }
            }
          }
        }
      }
      toFragments<Element>(s, pA);
    }
    uint32_t dsA[kQuerySteps][4];
    toFragments<Element>(dp, dsA);

    // dK += dS^T Q (kPipelined: here; otherwise after dQ, below).
    auto issueDk = [&] {
#pragma unroll
      for (int kk = 0; kk < kQuerySteps; ++kk)
        prim::WgmmaOp<Element, D>::rsTransB(dk, dsA[kk], prim::wgmmaDescriptorAdvance(qDesc, uint32_t(kk) * 2048));
      prim::wgmmaCommitGroup();
    };
    prim::wgmmaFence();
    if constexpr (kPipelined) {
      issueDk();
    } else {
#pragma unroll
      for (int kk = 0; kk < kQuerySteps; ++kk)
        prim::WgmmaOp<Element, D>::rsTransB(dv, pA[kk], prim::wgmmaDescriptorAdvance(dODesc, uint32_t(kk) * 2048));
      prim::wgmmaCommitGroup();
    }

    // The other warpgroup's dQ product of step t - 1 still reads the dS tile until it arrives here.
    if (t > 0) prim::namedBarrierSync(kDsFreeBarrier + group, 256);
    // dS^T fragments -> dS [query][key] (K-major A of dQ = dS K): matrix mIdx of k-step kk holds keys
    // 16 * warp + 8 * (mIdx % 2) .. + 7 and queries 16 * kk + 8 * (mIdx / 2) .. + 7 (d64: while dK's product reads the
    // same fragments as A registers; only reads, and ptxas inserts no wait).
    {
      const int mIdx = lane / 8;
      const uint32_t chunk = uint32_t(2 * warp + (mIdx % 2));
      const uint32_t slab = base + L::kDS + uint32_t(group) * kBlockM * 128;
#pragma unroll
      for (int kk = 0; kk < kQuerySteps; ++kk) {
        const uint32_t query = uint32_t(16 * kk + 8 * (mIdx / 2) + lane % 8);
        stmatrixX4Trans(slab + query * 128 + ((chunk ^ (query & 7)) << 4), dsA[kk][0], dsA[kk][1], dsA[kk][2],
                        dsA[kk][3]);
      }
    }
    prim::fenceProxyAsyncShared();
    if constexpr (L::kDqTransposed) {
      // dV's product has landed before dQ^T's is issued: P^T's fragments are then dead, which keeps the wgmmas
      // within the registers (with them live, ptxas serializes every wgmma: C7512).
      prim::wgmmaWaitGroup<0>();
      prim::wgmmaFenceOperands(pA);
    }
    prim::namedBarrierSync(kDsReadyBarrier, 256);

    // d128: warpgroup g computes dQ columns 64g.. over all 128 keys; d64: query rows 64g.. of the 128-row block over
    // all 128 keys. Either way every dQ element of the block is added once per CTA. The 80-row form computes
    // dQ^T = K^T dS^T (80 is not a wgmma M): A is this warpgroup's K slab read M-major (its 64 head-dim columns), B
    // the dS tile as stored ([query][key]: K-major), N the block's rows.
    float dq[L::kDqTransposed ? kBlockM / 2 : 32];
    prim::wgmmaFence();
    if constexpr (D == 128) {
      const uint64_t kDesc =
          prim::wgmmaDescriptorSw128(base + L::kK + uint32_t(group) * kBlockN * 128, kBlockN * 128, 1024);
      const uint64_t dsBaseDesc = prim::wgmmaDescriptorSw128(base + L::kDS, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint64_t dsDesc =
            prim::wgmmaDescriptorAdvance(dsBaseDesc, uint32_t(kk / 4) * kBlockM * 128 + uint32_t(kk % 4) * 32);
        const uint64_t kStep = prim::wgmmaDescriptorAdvance(kDesc, uint32_t(kk) * 2048);
        if constexpr (L::kDqTransposed)
          prim::WgmmaOp<Element, kBlockM>::template ssTransposed<1, 0>(dq, kStep, dsDesc, kk > 0 ? 1u : 0u);
        else
          prim::WgmmaOp<Element, 64>::template ssTransposed<0, 1>(dq, dsDesc, kStep, kk > 0 ? 1u : 0u);
      }
    } else {
      const uint64_t kDesc = prim::wgmmaDescriptorSw128(base + L::kK, kBlockN * 128, 1024);
      const uint64_t dsBaseDesc = prim::wgmmaDescriptorSw128(base + L::kDS + uint32_t(group) * 64 * 128, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint64_t dsDesc =
            prim::wgmmaDescriptorAdvance(dsBaseDesc, uint32_t(kk / 4) * kBlockM * 128 + uint32_t(kk % 4) * 32);
        prim::WgmmaOp<Element, 64>::template ssTransposed<0, 1>(
            dq, dsDesc, prim::wgmmaDescriptorAdvance(kDesc, uint32_t(kk) * 2048), kk > 0 ? 1u : 0u);
      }
    }
    prim::wgmmaCommitGroup();
    if constexpr (!kPipelined) issueDk();
    turns.peek(p, w.batch, h, sb.mBlock, order);
    auto releaseStage = [&] {
      if constexpr (Tma) {
        // This thread is done with the stage: its warpgroup's products have landed, and it read its statistics
        // before them. Every thread arrives (release), so each read is ordered before the producer's next write.
        prim::mbarrierArrive(empty + 8 * stage);
      } else {
        // Both warpgroups are past their step t - 1 (the dS barrier, which each reaches after its step t - 1
        // products have landed): its stage is free for step t + 2.
        if (t + L::kStages - 1 < steps) loadStep(t + L::kStages - 1);
      }
    };
    auto productsLanded = [&] {
      prim::wgmmaFenceOperands(dv);
      prim::wgmmaFenceOperands(dk);
      prim::wgmmaFenceOperands(dsA);
    };
    if constexpr (kPipelined) {
      prim::wgmmaWaitGroup<0>();
      productsLanded();
    } else {
      prim::wgmmaWaitGroup<1>();  // dV and dQ have landed; dK's product keeps running
    }
    prim::wgmmaFenceOperands(dq);
    if constexpr (!L::kDqTransposed) prim::wgmmaFenceOperands(pA);  // the 80-row form fenced it before dQ^T
    // This warpgroup's reads of the dS tile are over: the other may write step t + 1's.
    if (t + 1 < steps) prim::namedBarrierArrive(kDsFreeBarrier + (group ^ 1), 256);
    if constexpr (kPipelined) releaseStage();

    // dQ rows rowBase + 16 * warp + lane / 4 + 8h of the block, columns colBase + 8j + 2 * quad.
    const int colBase = D == 128 ? 64 * group : 0;
    const int rowBase = D == 128 ? 0 : 64 * group;
    if constexpr (L::kDqTransposed) {
      // The warpgroup's kBlockM x 64 tile of panel `group` goes through its staging tile in one addition, issued by
      // its first thread once the previous one has read the tile and every warp has written it.
      const uint32_t tile = base + L::kDq + uint32_t(group) * kBlockM * 256;
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, m0);
      const bool issuer = thread % 128 == 0;
      if (issuer) prim::bulkWaitRead<0>();
      prim::namedBarrierSync(kDqStagedBarrier + group, 128);
      stageDqColumns<kBlockM>(tile, dq, wsRow0, warp, lane, quad);
      prim::fenceProxyAsyncShared();
      prim::namedBarrierSync(kDqStagedBarrier + group, 128);
      if (issuer) addDqRows<1>(p, wsRow0, group, tile, sq - m0 < kBlockM ? sq - m0 : kBlockM);
    } else if constexpr (kDqWarp) {
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, m0 + rowBase + 16 * warp);
      stageDqForWarps<64, kDqWarps>(dqStage, dq, wsRow0, lane, quad, base + L::kDqStaged, base + L::kDqFree, t);
    } else {
      // The warp's tile goes through its staging tile.
      const int32_t iFirst = m0 + rowBase + 16 * warp;
      const int64_t wsRow0 = backward::workspaceRow(p, w.batch, h, e, iFirst);
      stageDqRows<64>(dqStage, dq, wsRow0, lane, quad);
      turns.acquire(order);
      if (lane == 0) {
        // Deterministic: the turn was taken by a generic-proxy acquire; the addition goes through the async proxy.
        if constexpr (Deterministic) prim::fenceProxyAsyncGlobal();
        addDqRows<1>(p, wsRow0, colBase / 64, dqStage, sq - iFirst < 16 ? sq - iFirst : 16);
      }
      turns.release(order);
    }

    if constexpr (!kPipelined) {
      prim::wgmmaWaitGroup<0>();
      productsLanded();
      releaseStage();
    }
    if (++stage == L::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  if (lane == 0) prim::bulkWait<0>();  // the staging tile must outlive the reads
  completeDqAdditions<kTurnsHere>(lane);
  turns.flush(order);

  // dK, dV rows this CTA owns (keys past seqlensK but inside the sequence's rows get zeros: nothing touched them).
  const int32_t rowsLeft = e.rowsK - n0 - 64 * group;
  if (rowsLeft > 0) {
    const int64_t key0 = e.kStart + n0 + 64 * group;
    storeRows<Element, D>(dk,
                          static_cast<Element *>(p.dK) + int64_t(w.batch) * p.dKBatch + int64_t(w.kvHead) * p.dKHead +
                              key0 * p.dKRow,
                          p.dKRow, keyInGroup, rowsLeft, p.headDim, quad, p.scale);  // the scale dS left out
    storeRows<Element, D>(dv,
                          static_cast<Element *>(p.dV) + int64_t(w.batch) * p.dVBatch + int64_t(w.kvHead) * p.dVHead +
                              key0 * p.dVRow,
                          p.dVRow, keyInGroup, rowsLeft, p.headDimV, quad);
  }
}

}  // namespace flashattn::cuda::backward_sm90
