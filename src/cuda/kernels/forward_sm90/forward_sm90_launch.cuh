// SPDX-License-Identifier: BSD-3-Clause
// Launch of one forward_sm90 kernel configuration, and of the tile each (storage type, head dim) instance uses.
// Included by the generated instance files (forward_sm90_instance.cu.in) and by benchmark drivers that compare tiles.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/forward_sm90/forward_sm90_kernel.cuh"
#include "cuda/kernels/forward_sm90/forward_sm90_params.hpp"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::forward_sm90 {

// (sequence, head) pairs per scheduling section: as many as keep their K and V within half the L2 (query heads of
// one GQA group share theirs), at least one.
inline int64_t pairsPerSectionFor(const ForwardParams &params, std::size_t l2Bytes) {
  const int64_t pairs = int64_t(params.batch) * params.heads;
  const int64_t bytesPerPair =
      std::max<int64_t>(1, int64_t(params.seqK) * params.headDim * 2 * 2 / std::max(1, params.headsPerKvHead));
  const int64_t fit = int64_t(l2Bytes / 2) / bytesPerPair;
  return std::max<int64_t>(1, std::min(pairs, fit));
}

template <typename Element, int D, int BlockN, int ConsumerGroups, int Stages, bool PingPong, bool AsyncArrive,
          bool QInRegisters, bool Paged, bool Tma = false, bool TransformLogits = false, int DV = D, int QKWidth = D>
cudaError_t launchKernel(const ForwardParams &params, const LaunchOptions &options, int device, cudaStream_t stream) {
  using Layout = SharedLayout<D, BlockN, ConsumerGroups, Stages, Paged, DV>;
  static std::atomic<uint64_t> configured{0};
  KernelParams kp;
  kp.f = params;
  kp.f.queryBlocks = int32_t((int64_t(params.seqQ) + Layout::kBlockM - 1) / Layout::kBlockM);
  kp.totalTiles = int64_t(kp.f.queryBlocks) * params.heads * params.batch;
  if (kp.totalTiles <= 0) return cudaSuccess;
  if constexpr (Tma) {
    // The plan encoded the same maps at a stand-in address (tmaServes): only the addresses differ here.
    constexpr DType kDtype = std::is_same_v<Element, __half> ? DType::FP16 : DType::BF16;
    if constexpr (Paged) kp.pageBoxRows = pagedBoxRows(params.cache.pageSize.value, BlockN);
    if (!encodeForwardMaps(params, kDtype, Layout::kBlockM, BlockN, &kp)) return cudaErrorInvalidValue;
    kp.copyTailBlock = Paged || params.ragged || params.seqlensK != nullptr;
  }
  kp.pairsPerSection = options.pairsPerSection > 0 ? std::min<int64_t>(options.pairsPerSection,
                                                                        int64_t(params.batch) * params.heads)
                                                   : pairsPerSectionFor(params, options.l2Bytes);
  const int64_t ctas =
      options.persistent && options.numSMs > 0 ? std::min<int64_t>(kp.totalTiles, options.numSMs) : kp.totalTiles;
  const auto kernel =
      forwardSm90Kernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, Paged, Tma,
                        TransformLogits, DV, QKWidth>;
  const cudaError_t err = ensureSharedLimit(kernel, Layout::kDynamicBytes, device, configured);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(unsigned(ctas)), dim3((ConsumerGroups + 1) * 128), Layout::kDynamicBytes, stream>>>(kp);
  return cudaGetLastError();
}

// A configuration's dense or paged kernel, as the parameters say.
template <typename Element, int D, int BlockN, int ConsumerGroups, int Stages, bool PingPong, bool AsyncArrive,
          bool QInRegisters, int DV = D>
cudaError_t launchConfiguration(const ForwardParams &params, const LaunchOptions &options, int device,
                                cudaStream_t stream) {
  if (params.paged) {
    // Tensor-map copies of whole runs of a page where the plan found them (the tail block's V rows split over one
    // warp); else the cp.async producer, which gives each 8-element chunk of a row one of its 128 threads. The plan
    // keeps other head dims away.
    if (options.tma) {
      if constexpr (32 % (DV / 8) == 0)
        return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, true,
                            true, false, DV>(params, options, device, stream);
      else
        return cudaErrorInvalidValue;
    }
    if constexpr (128 % (D / 8) == 0 && 128 % (DV / 8) == 0)
      return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, true, false,
                          false, DV>(params, options, device, stream);
    else
      return cudaErrorInvalidValue;
  }
  if (options.tma) {
    // Softcap and ALiBi have a kernel of their own, so the plain one carries none of their code (tensor-map loads
    // only: the plan leaves them to the portable kernels otherwise).
    if (params.softcap > 0.f || params.alibiSlopes != nullptr)
      return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, false,
                          true, true, DV>(params, options, device, stream);
    // The trimmed contraction (trimmedQKWidth) where the plan chose it: the plain dense kernel only.
    constexpr int kTrimmed = trimmedQKWidth(D, DV);
    if constexpr (kTrimmed > 0) {
      if (options.qkWidth == kTrimmed)
        return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, false,
                            true, false, DV, kTrimmed>(params, options, device, stream);
    }
    return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, false, true,
                        false, DV>(params, options, device, stream);
  }
  return launchKernel<Element, D, BlockN, ConsumerGroups, Stages, PingPong, AsyncArrive, QInRegisters, false, false,
                      false, DV>(params, options, device, stream);
}

template <typename Element, int D, int DV>
cudaError_t launchSm90Instance(const ForwardParams &params, const LaunchOptions &options, int device,
                               cudaStream_t stream) {
  constexpr TileConfig s = shortTileFor(D, DV);
  if (options.shortTile) {
    if constexpr (s.blockN > 0) {
      if (!options.tma || params.paged || params.softcap > 0.f || params.alibiSlopes != nullptr)
        return cudaErrorInvalidValue;  // the plan takes the short tile for the plain tensor-map kernel only
      return launchKernel<Element, D, s.blockN, s.consumerGroups, s.stages, s.pingPong, s.asyncArrive,
                          s.qInRegisters, false, true, false, DV>(params, options, device, stream);
    } else {
      return cudaErrorInvalidValue;
    }
  }
  constexpr TileConfig t = tileFor(D, DV);
  return launchConfiguration<Element, D, t.blockN, t.consumerGroups, t.stages, t.pingPong, t.asyncArrive,
                             t.qInRegisters, DV>(params, options, device, stream);
}

}  // namespace flashattn::cuda::forward_sm90
