// SPDX-License-Identifier: BSD-3-Clause
// The order in which a CTA of the wgmma backward walks its (query head, query block) steps, and in deterministic mode
// which query blocks it adds into first (no wait for a predecessor key block).
//
// Unordered mode keeps the measured order: heads of the group in turn, query blocks ascending within each.
// Deterministic mode (dQ additions of one query block ordered by key block, backward_common.cuh's turn counters):
// query blocks descending, every head of the group per block. Then CTA n reaches each (block, head) at the same step
// as CTA n - 1 whenever both see the block, so it trails its predecessor only by the time of one ordered addition
// (wait, red, fence, release), not by whole steps; under causal masks the high key blocks, which see fewer query
// blocks, start on the same last block as the low ones and finish early instead of queueing behind them. With heads
// in the outer loop, causal key blocks with fewer blocks per head would start each further head earlier than their
// predecessor and wait for it there.
#pragma once

#include <cstdint>

#include "cuda/fast_divisor.hpp"
#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/mbarrier.cuh"

namespace flashattn::cuda::backward_sm90 {

struct StepOrder {
  int32_t first;            // query blocks [first, last] see this CTA's keys
  int32_t last;
  int32_t heads;            // query heads per KV head
  int32_t predecessorLast;  // deterministic: last query block key block n - 1 sees (-1: none); blocks above it are ours
                            // to add into first
  FastDivisor perRound;     // steps per round of the walk's outer loop (deterministic: heads; else: blocks per head),
                            // so that a step's block costs a multiply, not a division, in every loop that asks
};

struct StepBlock {
  int32_t head;  // query head within the group
  int32_t mBlock;
};

template <bool Deterministic>
__device__ __forceinline__ StepOrder stepOrder(const backward::BackwardParams &p, const backward::SequenceExtent &e,
                                               int32_t keyBlock, int32_t n0, BlockRange qb, int32_t blockM,
                                               int32_t blockN) {
  StepOrder o{qb.first, qb.last, p.headsPerKvHead, -1,
              FastDivisor(Deterministic ? p.headsPerKvHead : (qb.last >= qb.first ? qb.last - qb.first + 1 : 1))};
  if (Deterministic && keyBlock > 0) {
    // The key blocks seeing one query block are consecutive (queryBlocksOf), and key block n - 1's range starts no
    // later than ours: a block of ours is unseen by n - 1 exactly when it lies above n - 1's last one.
    const BlockRange prev = backward::queryBlocksOf(p, e, n0 - blockN, blockM, blockN);
    o.predecessorLast = prev.first <= prev.last ? prev.last : -1;
  }
  return o;
}

template <bool Deterministic>
__device__ __forceinline__ StepBlock stepBlock(const StepOrder &o, int32_t t) {
  const int32_t r = o.perRound.divide(t);
  const int32_t i = o.perRound.remainder(t, r);
  if constexpr (Deterministic)
    return StepBlock{i, o.last - r};
  else
    return StepBlock{r, o.first + i};
}

// The CTA barrier of the hand-overs. A named one: the split kernel's warpgroups reach it from their own bodies at 192,
// where __syncthreads (which wants every thread at the same call) would be divergent. Unaligned: without .aligned
// (the split kernel; the compiler then assumes no converged warp there, which costs the d64/d128 kernel registers).
// Its threads are the two consumer warpgroups of either kernel: a producer warpgroup takes no part in the hand-overs.
constexpr uint32_t kTurnBarrier = 4;  // above the kernels' own (d64/d128: 1-3, its 80-row form 5-6; split: 1)
constexpr uint32_t kTurnThreads = 256;
template <bool Unaligned>
__device__ __forceinline__ void turnBarrier() {
  if constexpr (Unaligned)
    prim::namedBarrierSyncUnaligned(kTurnBarrier, kTurnThreads);
  else
    prim::namedBarrierSync(kTurnBarrier, kTurnThreads);
}

// backward::passTurn with that barrier and no separate fence: every thread's additions are issued (the bulk ones
// completed and fenced into the generic proxy by their issuing lanes), the barrier orders them before thread 0's, and
// thread 0's release store, cumulative over what the barrier ordered before it, hands the block on: the pattern of
// CUTLASS's generic barrier (a CTA barrier, then one release operation), instead of a fence in each of the 256
// threads or a gpu-scope fence before the release (which a release store already is).
template <bool Unaligned>
__device__ __forceinline__ void passTurnNamed(int32_t *turn, int32_t keyBlock) {
  turnBarrier<Unaligned>();
  if (threadIdx.x == 0) backward::storeRelease(turn, keyBlock + 1);
}

// Deterministic mode's ordered dQ additions for one CTA (Enabled = false: nothing, and no registers). The turn
// counters and their rule are backward_common.cuh's; what differs from the portable kernel is where the two memory
// round trips of each hand-over go, so that they overlap tensor-core work instead of stalling the CTA:
//   peek     thread 0's acquiring read of the counter, issued right after the dQ product is queued;
//   acquire  the whole CTA, before its additions (d64/d128 and the split kernel at 192: bulk reduce-adds; at 256:
//            red.global): spins only if the peek was early, then a CTA barrier (skipped where this key block is the
//            query block's first adder);
//   release  a CTA barrier behind every thread's additions, then thread 0's release store of the counter
//            (passTurnNamed). The release does not wait for bulk copies: the d64/d128 kernel completes its bulk groups
//            and fences the async proxy before every flush (backward_sm90_kernel.cuh's completeDqAdditions), the
//            split kernel right after issuing them.
// Deferred = true (d64/d128, whose reductions go out after every product of the step has landed): the release waits
// for the next step's S^T and dP^T products to be queued (flush) or the end of the CTA's walk, so the release runs
// under them; it delays the next key block by the time to queue those products. Deferred = false (the split kernel, whose
// reductions go out while dV and dK still run): released at once, the release already runs under dV and dK; deferring
// it would hold the next key block back by dV and dK as well (measured at d256: -16% at S8k causal, where every link
// of the key-block chain adds its delay; +6% without the causal mask).
template <bool Enabled, bool Deferred, bool Unaligned = false>
struct DqTurns {
  __device__ __forceinline__ void peek(const backward::BackwardParams &, int32_t, int32_t, int32_t, int32_t,
                                       const StepOrder &) {}
  __device__ __forceinline__ void acquire(int32_t) {}
  __device__ __forceinline__ void release(int32_t) {}
  __device__ __forceinline__ void flush(int32_t) {}
};

template <bool Deferred, bool Unaligned>
struct DqTurns<true, Deferred, Unaligned> {
  int32_t *current = nullptr;  // counter of the query block being added into
  int32_t *pending = nullptr;  // counter whose additions are issued but not yet handed on
  bool first = false;          // key block n - 1 does not see the block: no wait
  bool seen = false;           // thread 0: the peek already found our turn

  __device__ __forceinline__ void peek(const backward::BackwardParams &p, int32_t batch, int32_t head, int32_t mBlock,
                                       int32_t keyBlock, const StepOrder &order) {
    current = backward::dqTurnCounter(p, batch, head, mBlock);
    first = mBlock > order.predecessorLast;
    seen = first || (threadIdx.x == 0 && backward::loadAcquire(current) == keyBlock);
  }
  __device__ __forceinline__ void acquire(int32_t keyBlock) {
    if (first) return;
    if (threadIdx.x == 0 && !seen) backward::spinUntilTurn(current, keyBlock);
    turnBarrier<Unaligned>();
  }
  __device__ __forceinline__ void release(int32_t keyBlock) {
    if constexpr (Deferred) {
      pending = current;
    } else {
      passTurnNamed<Unaligned>(current, keyBlock);
    }
  }
  __device__ __forceinline__ void flush(int32_t keyBlock) {
    if (!Deferred || pending == nullptr) return;
    passTurnNamed<Unaligned>(pending, keyBlock);
    pending = nullptr;
  }
};

}  // namespace flashattn::cuda::backward_sm90
