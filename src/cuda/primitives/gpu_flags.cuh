// SPDX-License-Identifier: BSD-3-Clause
// Counters and flags in global memory that CTAs of one grid use to agree on who does a step last (the fused decode
// merge). Device scope; sm70+ (the PTX memory model's release / acquire / relaxed / fence.sc forms).
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

// A release store: this thread's earlier writes, and those it observed (other threads' writes ordered before a CTA
// barrier it passed), are visible to a thread that reads the flag and then fences.
__device__ __forceinline__ void storeReleaseGpu(uint32_t *address, uint32_t value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ void storeRelaxedGpu(uint32_t *address, uint32_t value) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t loadRelaxedGpu(const uint32_t *address) {
  uint32_t value = 0;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void storeRelaxedGpu(unsigned long long *address, unsigned long long value) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}

// A counted arrival: release (this thread's and its CTA's earlier writes, through a CTA barrier, go before it) and
// acquire (the writes released by every earlier addition to the same word are visible after it); returns the old value.
__device__ __forceinline__ unsigned long long atomicAddAcqRelGpu(unsigned long long *address, unsigned long long value) {
  unsigned long long old = 0;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;\n" : "=l"(old) : "l"(address), "l"(value) : "memory");
  return old;
}

// Sequentially consistent: of two threads that each store a flag, fence and read the other's, at least one sees the
// other's store (the store-buffering outcome is forbidden).
__device__ __forceinline__ void fenceSeqCstGpu() { asm volatile("fence.sc.gpu;\n" ::: "memory"); }

// After relaxed loads that saw released flags: the writes released before them are visible to what follows.
__device__ __forceinline__ void fenceAcquireGpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

}  // namespace flashattn::cuda::prim
