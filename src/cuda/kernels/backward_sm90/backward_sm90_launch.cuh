// SPDX-License-Identifier: BSD-3-Clause
// The definition of launchSm90Instance<Element, HeadDim, HeadDimV>: raises the kernel's shared-memory limit once per
// device and enqueues one CTA per (key block, KV head, sequence). Included only by the generated instance files
// (backward_sm90_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_split_kernel.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::backward_sm90 {

namespace detail {

// Both kernels run one CTA per (key block, KV head, sequence). Every kernel here has the same function type, so
// `configuredDevices` comes from the caller: one set of flags per kernel (shared_limit.hpp).
template <typename Kernel>
cudaError_t launchPerKeyBlock(Kernel *kernel, int threads, std::size_t sharedBytes,
                              const backward::BackwardParams &params, int device,
                              std::atomic<uint64_t> &configuredDevices, cudaStream_t stream) {
  const int64_t ctas = int64_t(params.keyBlocks) * params.kvHeads * params.batch;
  if (ctas <= 0) return cudaSuccess;
  const cudaError_t err = ensureSharedLimit(kernel, sharedBytes, device, configuredDevices);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(unsigned(ctas)), dim3(threads), sharedBytes, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int D>
cudaError_t launchD64D128(const backward::BackwardParams &params, int device, cudaStream_t stream) {
  using L = SharedLayout<D>;
  // The kernel writes the paneled dQ accumulator only (whole 64-column panels: the plan sizes it so); the convert
  // kernel reads what the plan says was written. A narrower problem's columns past its head dim are zeros.
  if (!params.dqPaneled || params.headDim > D || params.headDimV != params.headDim) return cudaErrorInvalidValue;
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
  return params.deterministic ? launchPerKeyBlock(backwardSm90Kernel<Element, D, true>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDeterministic, stream)
                              : launchPerKeyBlock(backwardSm90Kernel<Element, D, false>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDevices, stream);
}

template <typename Element, int D, int DV>
cudaError_t launchSplit(const backward::BackwardParams &params, int device, cudaStream_t stream) {
  using L = split::Layout<D, DV>;
  // The kernel adds dQ in the layout the plan chose for it (paneled where it adds by bulk reduce) and stores the
  // problem's columns: D and DV, or (an instance of equal head dims that adds dQ in whole 64-column panels) fewer of
  // both, zero-padded; the row-major accumulator's additions take every column of the instance.
  const bool exact = params.headDim == D && params.headDimV == DV;
  const bool padded = L::kBulkDq && D == DV && params.headDim == params.headDimV && params.headDim < D;
  if (params.dqPaneled != L::kBulkDq || !(exact || padded)) return cudaErrorInvalidValue;
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
  return params.deterministic ? launchPerKeyBlock(backwardSm90SplitKernel<Element, D, DV, true>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDeterministic, stream)
                              : launchPerKeyBlock(backwardSm90SplitKernel<Element, D, DV, false>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDevices, stream);
}

}  // namespace detail

template <typename Element, int HeadDim, int HeadDimV>
cudaError_t launchSm90Instance(const backward::BackwardParams &params, int device, cudaStream_t stream) {
  if constexpr (runsSplitKernel(HeadDim)) {
    return detail::launchSplit<Element, HeadDim, HeadDimV>(params, device, stream);
  } else {
    static_assert(HeadDimV == HeadDim, "the d64/d128 kernel has one head dim");
    return detail::launchD64D128<Element, HeadDim>(params, device, stream);
  }
}

}  // namespace flashattn::cuda::backward_sm90
