// SPDX-License-Identifier: BSD-3-Clause
// Bulk FP32 additions from shared into global memory (sm90's copy engine, cp.reduce.async.bulk): one instruction adds
// a contiguous run of floats, the issuing thread goes on at once, and the shared-memory source may only be rewritten
// after the group's reads have finished (bulkWaitRead). The math warps then never issue per-element atomics nor wait
// for them.
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

// global[0 .. bytes/4) += shared[0 .. bytes/4); both addresses 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void bulkReduceAddFloats(float *global, uint32_t shared, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
               "r"(shared), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Closes this thread's bulk operations issued since the last commit into one group.
__device__ __forceinline__ void bulkCommitGroup() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Returns once at most Pending of this thread's groups still read their shared-memory source.
template <int Pending>
__device__ __forceinline__ void bulkWaitRead() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Returns once at most Pending of this thread's groups are still in flight (their global writes included).
template <int Pending>
__device__ __forceinline__ void bulkWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Orders this thread's global-memory accesses through the generic proxy (an acquire, a release) against those
// through the async proxy (bulk copies) on either side of it.
__device__ __forceinline__ void fenceProxyAsyncGlobal() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

}  // namespace flashattn::cuda::prim
