// SPDX-License-Identifier: BSD-3-Clause
// The definition of launchInstance<Element, HeadDim>: picks the kernel (dense or paged K/V; for FP16/BF16 plain or
// with softcap/ALiBi) and tile of an instance, raises its dynamic shared-memory limit once per device, and enqueues one
// launch. Included only by the generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/forward/forward_fp32_kernel.cuh"
#include "cuda/kernels/forward/forward_mma_kernel.cuh"
#include "cuda/kernels/forward/forward_params.hpp"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::forward {

// One kernel of an instance: its shared-memory limit raised once per device (a configured-device set per kernel), then
// one launch of ctas CTAs.
template <typename Kernel>
cudaError_t launchKernel(Kernel kernel, std::atomic<uint64_t> &configuredDevices, int64_t ctas, int threads,
                         std::size_t shared, const ForwardParams &params, int device, cudaStream_t stream) {
  const cudaError_t err = ensureSharedLimit(kernel, shared, device, configuredDevices);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(unsigned(ctas)), dim3(threads), shared, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int HeadDim, bool Paged>
cudaError_t launchFp32(int64_t ctas, const ForwardParams &params, int device, cudaStream_t stream) {
  static std::atomic<uint64_t> configuredDevices{0};
  constexpr TileShape tile = fp32TileFor(HeadDim);
  return launchKernel(forwardFp32Kernel<HeadDim, tile.blockM, tile.blockN, tile.warps, Paged>, configuredDevices,
                      ctas, tile.warps * 32, fp32SharedBytes(HeadDim, Paged), params, device, stream);
}

template <typename Element, int HeadDim, bool Transform, bool Paged>
cudaError_t launchMma(int64_t ctas, const ForwardParams &params, int device, cudaStream_t stream) {
  static std::atomic<uint64_t> configuredDevices{0};
  constexpr TileShape tile = mmaTileFor(HeadDim);
  return launchKernel(
      forwardMmaKernel<Element, HeadDim, tile.blockM, tile.blockN, tile.warps, tile.minBlocksPerSM, Transform, Paged>,
      configuredDevices, ctas, tile.warps * 32, mmaSharedBytes(HeadDim, Paged), params, device, stream);
}

template <typename Element, int HeadDim>
cudaError_t launchInstance(const ForwardParams &params, int device, cudaStream_t stream) {
  const int64_t ctas = int64_t(params.queryBlocks) * params.heads * params.batch;
  if (ctas <= 0) return cudaSuccess;
  if constexpr (std::is_same_v<Element, float>) {
    return params.paged ? launchFp32<Element, HeadDim, true>(ctas, params, device, stream)
                        : launchFp32<Element, HeadDim, false>(ctas, params, device, stream);
  } else {
    const bool transform = params.softcap > 0.f || params.alibiSlopes != nullptr;
    if (params.paged)
      return transform ? launchMma<Element, HeadDim, true, true>(ctas, params, device, stream)
                       : launchMma<Element, HeadDim, false, true>(ctas, params, device, stream);
    return transform ? launchMma<Element, HeadDim, true, false>(ctas, params, device, stream)
                     : launchMma<Element, HeadDim, false, false>(ctas, params, device, stream);
  }
}

}  // namespace flashattn::cuda::forward
