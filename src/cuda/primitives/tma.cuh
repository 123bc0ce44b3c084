// SPDX-License-Identifier: BSD-3-Clause
// Hopper bulk tensor copies (TMA, sm90): a copy of one box of a tensor map into shared memory that completes its bytes
// on an mbarrier (mbarrier.cuh: arrive with expect_tx before the copies, wait for the phase).
//
// The tensor map is the generic address of a __grid_constant__ kernel parameter (or of global memory). Older targets
// trap: kernels that also compile for them (the decode family's instances) are only planned onto these paths on sm90.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace flashattn::cuda::prim {

// Starts fetching the map's 128 bytes, so that the first copy does not wait for them.
__device__ __forceinline__ void prefetchTensorMap(const CUtensorMap *tensorMap) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tensorMap)) : "memory");
#else
  __trap();
#endif
}

// The box at coordinates (c0 innermost .. c3) of a rank-4 map into shared memory at `destination` (1024-byte aligned
// for the 128-byte swizzle); its bytes complete on `barrier`.
__device__ __forceinline__ void tensorCopy4d(uint32_t destination, const CUtensorMap *tensorMap, int c0, int c1, int c2,
                                             int c3, uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(tensorMap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
#else
  __trap();
#endif
}

// The same through a rank-5 map, coordinates c0 .. c4.
__device__ __forceinline__ void tensorCopy5d(uint32_t destination, const CUtensorMap *tensorMap, int c0, int c1, int c2,
                                             int c3, int c4, uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(tensorMap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(barrier)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::prim
