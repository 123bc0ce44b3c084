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

#include "cuda/kernels/backward/backward_common.cuh"
#include "cuda/kernels/backward/backward_params.hpp"

namespace flashattn::cuda::backward_sm90 {

struct StepOrder {
  int32_t first;            // query blocks [first, last] see this CTA's keys
  int32_t last;
  int32_t heads;            // query heads per KV head
  int32_t predecessorLast;  // deterministic: last query block key block n - 1 sees (-1: none); blocks above it are ours
                            // to add into first
};

struct StepBlock {
  int32_t head;  // query head within the group
  int32_t mBlock;
};

template <bool Deterministic>
__device__ __forceinline__ StepOrder stepOrder(const backward::BackwardParams &p, const backward::SequenceExtent &e,
                                               int32_t keyBlock, int32_t n0, backward::QueryBlocks qb, int32_t blockM,
                                               int32_t blockN) {
  StepOrder o{qb.first, qb.last, p.headsPerKvHead, -1};
  if (Deterministic && keyBlock > 0) {
    // The key blocks seeing one query block are consecutive (queryBlocksOf), and key block n - 1's range starts no
    // later than ours: a block of ours is unseen by n - 1 exactly when it lies above n - 1's last one.
    const backward::QueryBlocks prev = backward::queryBlocksOf(p, e, n0 - blockN, blockM, blockN);
    o.predecessorLast = prev.first <= prev.last ? prev.last : -1;
  }
  return o;
}

template <bool Deterministic>
__device__ __forceinline__ StepBlock stepBlock(const StepOrder &o, int32_t t, int32_t blocksPerHead) {
  if constexpr (Deterministic) {
    const int32_t r = t / o.heads;
    return StepBlock{t - r * o.heads, o.last - r};
  } else {
    const int32_t g = t / blocksPerHead;
    return StepBlock{g, o.first + (t - g * blocksPerHead)};
  }
}

}  // namespace flashattn::cuda::backward_sm90
