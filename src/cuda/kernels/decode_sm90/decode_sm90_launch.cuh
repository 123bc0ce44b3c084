// SPDX-License-Identifier: BSD-3-Clause
// Launch of the wgmma decode kernels of one instance: V read from K's stages or from its own, dense or paged cache.
// Included by the generated instance files (decode_sm90_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/kernels/decode_sm90/decode_sm90.hpp"
#include "cuda/kernels/decode_sm90/decode_sm90_kernel.cuh"
#include "cuda/kernels/decode_sm90/decode_sm90_narrow.cuh"
#include "cuda/primitives/cluster.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::decode_sm90 {

// A launch of `ctas` CTAs of the wide kernel in clusters of clusterSize; `attribute` (one entry) holds the shape.
inline cudaLaunchConfig_t clusterLaunch(uint32_t ctas, std::size_t sharedBytes, int clusterSize,
                                        cudaLaunchAttribute *attribute) {
  return prim::clusterLaunchConfig(ctas, kThreads, sharedBytes, clusterSize, attribute);
}

template <typename Element, int DK, int DV, bool VFromK, bool Paged>
cudaError_t launchKernel(const DecodeParams &params, int device, cudaStream_t stream) {
  using Layout = SharedLayout<DK, DV, VFromK>;
  static std::atomic<uint64_t> configured{0};
  const auto kernel = decodeSm90Kernel<Element, DK, DV, VFromK, Paged>;
  const cudaError_t err = ensureSharedLimit(kernel, Layout::kDynamicBytes, device, configured);
  if (err != cudaSuccess) return err;
  const int64_t ctas =
      int64_t(params.batch) * int32_t(params.kvHeads) * int32_t(params.rowBlocks) * int32_t(params.numChunks);
  if (ctas <= 0) return cudaSuccess;
  if (params.clusterMerge) {  // the chunks of a unit are one cluster (findWork: the chunk varies fastest)
    cudaLaunchAttribute attribute[1];
    const cudaLaunchConfig_t config = clusterLaunch(uint32_t(ctas), Layout::kDynamicBytes, params.numChunks, attribute);
    cudaLaunchConfig_t streamed = config;
    streamed.stream = stream;
    const cudaError_t launched = cudaLaunchKernelEx(&streamed, kernel, params);
    return launched != cudaSuccess ? launched : cudaGetLastError();
  }
  kernel<<<dim3(uint32_t(ctas)), dim3(kThreads), Layout::kDynamicBytes, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int DK, int DV, int N, bool VFromK, bool Paged>
cudaError_t launchNarrowKernel(const DecodeParams &params, int device, cudaStream_t stream) {
  using Layout = NarrowLayout<DK, DV, N, VFromK>;
  static std::atomic<uint64_t> configured{0};
  const auto kernel = decodeSm90NarrowKernel<Element, DK, DV, N, VFromK, Paged>;
  const cudaError_t err = ensureSharedLimit(kernel, Layout::kDynamicBytes, device, configured);
  if (err != cudaSuccess) return err;
  const int64_t ctas = int64_t(params.batch) * int32_t(params.kvHeads) * int32_t(params.numChunks);
  if (ctas <= 0) return cudaSuccess;
  kernel<<<dim3(uint32_t(ctas)), dim3(kNarrowThreads), Layout::kDynamicBytes, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int DK, int DV, int N>
cudaError_t launchNarrow(const DecodeParams &params, bool vFromK, int device, cudaStream_t stream) {
  if (params.paged)
    return vFromK ? launchNarrowKernel<Element, DK, DV, N, true, true>(params, device, stream)
                  : launchNarrowKernel<Element, DK, DV, N, false, true>(params, device, stream);
  return vFromK ? launchNarrowKernel<Element, DK, DV, N, true, false>(params, device, stream)
                : launchNarrowKernel<Element, DK, DV, N, false, false>(params, device, stream);
}

template <typename Element, int DK, int DV>
cudaError_t launchDecodeSm90Instance(const DecodeParams &params, bool vFromK, int narrowRows, int device,
                                     cudaStream_t stream) {
  if constexpr (hasNarrowKernels(DK)) {
    if (narrowRows == 16) return launchNarrow<Element, DK, DV, 16>(params, vFromK, device, stream);
    if (narrowRows == 32) return launchNarrow<Element, DK, DV, 32>(params, vFromK, device, stream);
  }
  if (narrowRows != 0) return cudaErrorInvalidValue;
  if (params.paged)
    return vFromK ? launchKernel<Element, DK, DV, true, true>(params, device, stream)
                  : launchKernel<Element, DK, DV, false, true>(params, device, stream);
  return vFromK ? launchKernel<Element, DK, DV, true, false>(params, device, stream)
                : launchKernel<Element, DK, DV, false, false>(params, device, stream);
}

// Clusters of clusterSize wide-kernel CTAs (V apart: the instance's largest shared memory) resident at once, asked once
// per device and size; 0 when the runtime cannot tell.
template <typename Element, int DK, int DV>
int clusterCapacitySm90Instance(int device, int clusterSize) {
  using Layout = SharedLayout<DK, DV, false>;
  static std::atomic<int> cache[64][kMostClusterChunks + 1] = {};  // capacity + 1; 0 = not asked
  if (clusterSize < 1 || clusterSize > kMostClusterChunks) return 0;
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable && cache[device][clusterSize].load() > 0) return cache[device][clusterSize].load() - 1;
  static std::atomic<uint64_t> configured{0};
  const auto kernel = decodeSm90Kernel<Element, DK, DV, false, false>;
  int clusters = 0;
  const bool asked = askDevice(device, [&] {
    const cudaError_t err = ensureSharedLimit(kernel, Layout::kDynamicBytes, device, configured);
    if (err != cudaSuccess) return err;
    cudaLaunchAttribute attribute[1];
    const cudaLaunchConfig_t config =
        clusterLaunch(uint32_t(clusterSize), Layout::kDynamicBytes, clusterSize, attribute);
    return cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  });
  if (!asked) return 0;
  if (cacheable) cache[device][clusterSize].store(clusters + 1);
  return clusters;
}

}  // namespace flashattn::cuda::decode_sm90
