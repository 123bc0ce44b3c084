// SPDX-License-Identifier: BSD-3-Clause
// Thread-block clusters and distributed shared memory (sm90): a barrier over every thread of the cluster, the address
// of a shared variable in another CTA of the cluster, and loads through such addresses. Older targets trap: kernels
// that also compile for them are only planned onto cluster launches on sm90.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashattn::cuda::prim {

// The launch of `ctas` CTAs of `threads` threads in one-dimensional clusters of clusterSize (host side, for
// cudaLaunchKernelEx and cudaOccupancyMaxActiveClusters); `attribute` (one entry) holds the cluster shape.
inline cudaLaunchConfig_t clusterLaunchConfig(uint32_t ctas, uint32_t threads, std::size_t sharedBytes, int clusterSize,
                                              cudaLaunchAttribute *attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = sharedBytes;
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = uint32_t(clusterSize);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// Release / acquire: the shared-memory writes of every CTA before the barrier are visible to the cluster's reads
// after it. Every thread of every CTA of the cluster calls it (.aligned: warp-uniform).
__device__ __forceinline__ void clusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The address in CTA `rank` of the cluster of this CTA's shared address `local` (mapa).
__device__ __forceinline__ uint32_t clusterAddress(uint32_t local, uint32_t rank) {
  uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
#else
  __trap();
#endif
  return remote;
}

__device__ __forceinline__ float clusterLoad(uint32_t address) {
  float x = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(x) : "r"(address) : "memory");
#else
  __trap();
#endif
  return x;
}

__device__ __forceinline__ float4 clusterLoad4(uint32_t address) {
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
               : "r"(address)
               : "memory");
#else
  __trap();
#endif
  return x;
}

}  // namespace flashattn::cuda::prim
