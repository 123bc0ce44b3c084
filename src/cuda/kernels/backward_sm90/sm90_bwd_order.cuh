// SPDX-License-Identifier: BSD-3-Clause
// The order in which a CTA of the wgmma backward walks its (query head, query block) steps, and in deterministic mode
// which query blocks it adds into first (no wait for a predecessor key block).
//
// Unordered mode keeps the measured order: heads of the group in turn, query blocks ascending within each.
// Deterministic mode (dQ additions of one query block ordered by key block, backward_common.cuh's turn counters),
// every head of the group per block:
// - ascending turns (key block n waits for n - 1): query blocks descending. Then CTA n reaches each (block, head) at
//   the same step as CTA n - 1 whenever both see the block, so it trails its predecessor only by the time of one
//   ordered addition (wait, reduce, release), not by whole steps; but a chain of co-resident CTAs trails by one
//   hand-over per link. With a left window CTA n - 1's range ends a block lower (where the window, not the last
//   row, bounds it) and it is a step ahead.
// - descending turns (BackwardParams::descendingTurns: causal or a right window, no left window; key block n waits
//   for n + 1, which the grid launches first): query blocks ascending from the range's start. Key block n + 1's range
//   starts a block higher wherever the mask rather than the sequence's first row bounds it, so it reaches each block
//   a step (heads steps) before key block n: the turn has usually passed when a CTA gets there, and no chain of
//   waits builds up. (Key blocks whose ranges all start at block 0, the prefix of a bottom-right causal problem with
//   more keys than rows, still form a chain, as without a mask.)
// With heads in the outer loop, causal key blocks with fewer blocks per head would start each further head earlier
// than their predecessor and wait for it there.
#pragma once

#include <cstdint>

#include "cuda/fast_divisor.hpp"
#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/primitives/mbarrier.cuh"

namespace flashattn::cuda::backward_sm90 {

struct StepOrder {
  int32_t first;  // unordered: the first of the query blocks [first, last] that see this CTA's keys; deterministic:
                  // the walk's first block (last, or first with descending turns)
  int32_t walk;   // deterministic: -1 (ascending turns, the walk descends) or +1
  backward::TurnOrder turn;  // deterministic: this CTA's place in the turn order (backward_common.cuh)
  FastDivisor perRound;  // steps per round of the walk's outer loop (deterministic: heads; else: blocks per head),
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
  StepOrder o{qb.first, 1, backward::TurnOrder{1, -1, keyBlock, keyBlock + 1},
              FastDivisor(Deterministic ? p.headsPerKvHead : (qb.last >= qb.first ? qb.last - qb.first + 1 : 1))};
  if constexpr (Deterministic) {
    o.turn = backward::turnOrderOf(p, e, keyBlock, n0, blockM, blockN);
    if (!p.descendingTurns) {
      o.first = qb.last;
      o.walk = -1;
    }
  }
  return o;
}

template <bool Deterministic>
__device__ __forceinline__ StepBlock stepBlock(const StepOrder &o, int32_t t) {
  const int32_t r = o.perRound.divide(t);
  const int32_t i = o.perRound.remainder(t, r);
  if constexpr (Deterministic)
    return StepBlock{i, o.first + o.walk * r};
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
__device__ __forceinline__ void passTurnNamed(int32_t *turn, int32_t next) {
  turnBarrier<Unaligned>();
  if (threadIdx.x == 0) backward::storeRelease(turn, next);
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
// under them; it delays the next key block by the time to queue those products. Deferred = false (the split kernel,
// whose reductions go out while dV and dK still run): released at once, the release already runs under dV and dK;
// deferring it would hold the next key block back by dV and dK as well (measured at d256: -16% at S8k causal, where
// every link of the key-block chain adds its delay; +6% without the causal mask).
template <bool Enabled, bool Deferred, bool Unaligned = false>
struct DqTurns {
  __device__ __forceinline__ void peek(const backward::BackwardParams &, int32_t, int32_t, int32_t,
                                       const StepOrder &) {}
  __device__ __forceinline__ void acquire(const StepOrder &) {}
  __device__ __forceinline__ void release(const StepOrder &) {}
  __device__ __forceinline__ void flush(const StepOrder &) {}
};

template <bool Deferred, bool Unaligned>
struct DqTurns<true, Deferred, Unaligned> {
  int32_t *current = nullptr;  // counter of the query block being added into
  int32_t *pending = nullptr;  // counter whose additions are issued but not yet handed on
  bool first = false;          // the key block before ours in the turn order does not see the block: no wait
  bool seen = false;           // thread 0: the peek already found our turn

  __device__ __forceinline__ void peek(const backward::BackwardParams &p, int32_t batch, int32_t head, int32_t mBlock,
                                       const StepOrder &order) {
    current = backward::dqTurnCounter(p, batch, head, mBlock);
    first = !order.turn.waitsFor(mBlock);
    seen = first || (threadIdx.x == 0 && backward::loadAcquire(current) == order.turn.mine);
  }
  __device__ __forceinline__ void acquire(const StepOrder &order) {
    if (first) return;
    if (threadIdx.x == 0 && !seen) backward::spinUntilTurn(current, order.turn.mine);
    turnBarrier<Unaligned>();
  }
  __device__ __forceinline__ void release(const StepOrder &order) {
    if constexpr (Deferred) {
      pending = current;
    } else {
      passTurnNamed<Unaligned>(current, order.turn.next);
    }
  }
  __device__ __forceinline__ void flush(const StepOrder &order) {
    if (!Deferred || pending == nullptr) return;
    passTurnNamed<Unaligned>(pending, order.turn.next);
    pending = nullptr;
  }
};

}  // namespace flashattn::cuda::backward_sm90
