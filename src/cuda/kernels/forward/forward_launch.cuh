// SPDX-License-Identifier: BSD-3-Clause
// The definition of launchInstance<Element, HeadDim>: picks the kernel and tile of an instance, raises its dynamic
// shared-memory limit once per device, and enqueues one launch. Included only by the generated instance files.
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

template <typename Element, int HeadDim>
cudaError_t launchInstance(const ForwardParams &params, int device, cudaStream_t stream) {
  static std::atomic<uint64_t> configuredDevices{0};  // one per kernel: the FP32 or the plain tensor-core kernel
  const int64_t ctas = int64_t(params.queryBlocks) * params.heads * params.batch;
  if (ctas <= 0) return cudaSuccess;
  if constexpr (std::is_same_v<Element, float>) {
    constexpr TileShape tile = fp32TileFor(HeadDim);
    constexpr std::size_t shared = fp32SharedBytes(HeadDim);
    const auto kernel = forwardFp32Kernel<HeadDim, tile.blockM, tile.blockN, tile.warps>;
    const cudaError_t err = ensureSharedLimit(kernel, shared, device, configuredDevices);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(unsigned(ctas)), dim3(tile.warps * 32), shared, stream>>>(params);
  } else {
    constexpr TileShape tile = mmaTileFor(HeadDim);
    constexpr std::size_t shared = mmaSharedBytes(HeadDim);
    static std::atomic<uint64_t> configuredTransform{0};
    const bool transform = params.softcap > 0.f || params.alibiSlopes != nullptr;
    const auto kernel =
        transform ? forwardMmaKernel<Element, HeadDim, tile.blockM, tile.blockN, tile.warps, tile.minBlocksPerSM, true>
                  : forwardMmaKernel<Element, HeadDim, tile.blockM, tile.blockN, tile.warps, tile.minBlocksPerSM, false>;
    const cudaError_t err = ensureSharedLimit(kernel, shared, device, transform ? configuredTransform : configuredDevices);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(unsigned(ctas)), dim3(tile.warps * 32), shared, stream>>>(params);
  }
  return cudaGetLastError();
}

}  // namespace flashattn::cuda::forward
