// SPDX-License-Identifier: BSD-3-Clause
// The definition of launchSm90Instance<Element, HeadDim, HeadDimV>: raises the kernel's shared-memory limit once per
// device and enqueues one CTA per (key block, KV head, sequence). Included only by the generated instance files
// (backward_sm90_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/backward_sm90/backward_sm90.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_split_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_wide_keys_kernel.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::backward_sm90 {

namespace detail {

// Both kernels run one CTA per (key block, KV head, sequence). Kernels here share function types, so
// `configuredDevices` comes from the caller: one set of flags per kernel (shared_limit.hpp).
template <typename Kernel, typename Params>
cudaError_t launchPerKeyBlock(Kernel *kernel, int threads, std::size_t sharedBytes, const Params &params,
                              const backward::BackwardParams &b, int device,
                              std::atomic<uint64_t> &configuredDevices, cudaStream_t stream) {
  const int64_t ctas = int64_t(b.keyBlocks) * b.kvHeads * b.batch;
  if (ctas <= 0) return cudaSuccess;
  const cudaError_t err = ensureSharedLimit(kernel, sharedBytes, device, configuredDevices);
  if (err != cudaSuccess) return err;
  kernel<<<dim3(unsigned(ctas)), dim3(threads), sharedBytes, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int D, bool Tma, int QKWidth>
cudaError_t launchD64D128Width(const Sm90KernelParams &kp, int device, cudaStream_t stream) {
  using L = SharedLayout<D>;
  constexpr int kThreads = Tma ? L::kThreads + 128 : L::kThreads;
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
  return kp.b.deterministic
             ? launchPerKeyBlock(backwardSm90Kernel<Element, D, true, Tma, QKWidth>, kThreads, L::kDynamicBytes, kp,
                                 kp.b, device, configuredDeterministic, stream)
             : launchPerKeyBlock(backwardSm90Kernel<Element, D, false, Tma, QKWidth>, kThreads, L::kDynamicBytes, kp,
                                 kp.b, device, configuredDevices, stream);
}

// The 80-row form (hasWideForm): producer warpgroup, unordered, the instance's full width.
template <typename Element, int D>
cudaError_t launchWide(const Sm90KernelParams &kp, int device, cudaStream_t stream) {
  if constexpr (hasWideForm(D)) {
    using L = SharedLayout<D, kWideBlockM>;
    static std::atomic<uint64_t> configuredDevices{0};
    if (kp.b.deterministic || qkWidthFor(D, kp.b.headDim) != D) return cudaErrorInvalidValue;
    return launchPerKeyBlock(backwardSm90Kernel<Element, D, false, true, D, kWideBlockM>, L::kThreads + 128,
                             L::kDynamicBytes, kp, kp.b, device, configuredDevices, stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

// Softcap or ALiBi (hasTransformForm): the kernel that transforms the logits, in the form hasTmaForm names, unordered,
// over the instance's full width.
template <typename Element, int D>
cudaError_t launchTransform(const Sm90KernelParams &kp, int device, cudaStream_t stream) {
  if constexpr (hasTransformForm(D)) {
    using L = SharedLayout<D>;
    constexpr bool kTma = hasTmaForm(D);
    static std::atomic<uint64_t> configuredDevices{0};
    if (kp.b.deterministic) return cudaErrorInvalidValue;
    return launchPerKeyBlock(backwardSm90Kernel<Element, D, false, kTma, D, L::kBlockM, true>,
                             kTma ? L::kThreads + 128 : L::kThreads, L::kDynamicBytes, kp, kp.b, device,
                             configuredDevices, stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

// The kernel with the trimmed S^T / dP^T contraction where the problem's head dim ends within it.
template <typename Element, int D, bool Tma>
cudaError_t launchD64D128Form(const Sm90KernelParams &kp, int device, cudaStream_t stream) {
  constexpr int kTrimmed = trimmedQKWidth(D);
  if constexpr (kTrimmed > 0) {
    if (qkWidthFor(D, kp.b.headDim) == kTrimmed)
      return launchD64D128Width<Element, D, Tma, kTrimmed>(kp, device, stream);
  }
  return launchD64D128Width<Element, D, Tma, D>(kp, device, stream);
}

template <typename Element, int D>
cudaError_t launchD64D128(const backward::BackwardParams &params, bool tma, bool wide, int device,
                          cudaStream_t stream) {
  // The kernel writes the paneled dQ accumulator only (whole 64-column panels: the plan sizes it so); the convert
  // kernel reads what the plan says was written. A narrower problem's columns past its head dim are zeros.
  if (!params.dqPaneled || params.headDim > D || params.headDimV != params.headDim) return cudaErrorInvalidValue;
  Sm90KernelParams kp;
  kp.b = params;
  // Plans ask for each form only where the instance has it, and for the transform kernel only in hasTmaForm's form.
  const bool transform = params.softcap > 0.f || params.alibiSlopes != nullptr;
  if (transform && (wide || tma != hasTmaForm(D))) return cudaErrorInvalidValue;
  if constexpr (hasTmaForm(D)) {
    if (tma) {
      constexpr DType kDtype = std::is_same_v<Element, __half> ? DType::FP16 : DType::BF16;
      if (!encodeQueryMaps(params, kDtype, wide ? kWideBlockM : SharedLayout<D>::kBlockM, &kp))
        return cudaErrorInvalidValue;
      if (transform) return launchTransform<Element, D>(kp, device, stream);
      return wide ? launchWide<Element, D>(kp, device, stream) : launchD64D128Form<Element, D, true>(kp, device, stream);
    }
  }
  if (tma || wide) return cudaErrorInvalidValue;
  if (transform) return launchTransform<Element, D>(kp, device, stream);
  return launchD64D128Form<Element, D, false>(kp, device, stream);
}

// The split kernel in one form (Producer: kp's maps encoded) over the three kinds of problem.
template <typename Element, int D, int DV, bool Producer>
cudaError_t launchSplitForm(const Sm90KernelParams &kp, int device, cudaStream_t stream) {
  using L = split::Layout<D, DV, Producer>;
  constexpr int kThreads = Producer ? L::kThreads + 128 : L::kThreads;
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0}, configuredTransform{0};
  const backward::BackwardParams &params = kp.b;
  const split::KernelParams<Producer> &kernelParams = split::hostParams<Producer>(kp);
  // Softcap or ALiBi (hasTransformForm): the transform kernel, unordered only (plans keep deterministic ones off it).
  if (params.softcap > 0.f || params.alibiSlopes != nullptr)
    return params.deterministic
               ? cudaErrorInvalidValue
               : launchPerKeyBlock(backwardSm90SplitKernel<Element, D, DV, false, true, Producer>, kThreads,
                                   L::kDynamicBytes, kernelParams, params, device,
                                   configuredTransform, stream);
  if (params.deterministic)
    return launchPerKeyBlock(backwardSm90SplitKernel<Element, D, DV, true, false, Producer>, kThreads,
                             L::kDynamicBytes, kernelParams, params, device, configuredDeterministic, stream);
  return launchPerKeyBlock(backwardSm90SplitKernel<Element, D, DV, false, false, Producer>, kThreads,
                           L::kDynamicBytes, kernelParams, params, device, configuredDevices, stream);
}

template <typename Element, int D, int DV>
cudaError_t launchSplit(const backward::BackwardParams &params, bool tma, int device, cudaStream_t stream) {
  using L = split::Layout<D, DV>;
  // The kernel adds dQ in the layout the plan chose for it (paneled where it adds by bulk reduce) and stores the
  // problem's columns: D and DV, or (an instance of equal head dims that adds dQ in whole 64-column panels) fewer of
  // both, zero-padded; the row-major accumulator's additions take every column of the instance.
  const bool exact = params.headDim == D && params.headDimV == DV;
  const bool padded = L::kBulkDq && D == DV && params.headDim == params.headDimV && params.headDim < D;
  if (params.dqPaneled != L::kBulkDq || !(exact || padded)) return cudaErrorInvalidValue;
  Sm90KernelParams kp;
  kp.b = params;
  if constexpr (hasTmaForm(D)) {
    if (tma) {
      constexpr DType kDtype = std::is_same_v<Element, __half> ? DType::FP16 : DType::BF16;
      if (!encodeQueryMaps(params, kDtype, L::kBlockM, &kp)) return cudaErrorInvalidValue;
      return launchSplitForm<Element, D, DV, true>(kp, device, stream);
    }
  }
  if (tma) return cudaErrorInvalidValue;
  return launchSplitForm<Element, D, DV, false>(kp, device, stream);
}

// The 96-key kernel (hasWideKeysForm): producer form, no logit transform, the instance's exact head dims.
template <typename Element, int D, int DV>
cudaError_t launchWideKeys(const backward::BackwardParams &params, bool tma, int device, cudaStream_t stream) {
  if constexpr (hasWideKeysForm(D, DV)) {
    using L = wide_keys::Layout<D, DV>;
    if (!tma || params.softcap > 0.f || params.alibiSlopes != nullptr || !params.dqPaneled || params.headDim != D ||
        params.headDimV != DV)
      return cudaErrorInvalidValue;
    Sm90KernelParams kp;
    kp.b = params;
    constexpr DType kDtype = std::is_same_v<Element, __half> ? DType::FP16 : DType::BF16;
    if (!encodeQueryMaps(params, kDtype, L::kBlockM, &kp)) return cudaErrorInvalidValue;
    static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
    return params.deterministic
               ? launchPerKeyBlock(backwardSm90WideKeysKernel<Element, D, DV, true>, 384, L::kDynamicBytes, kp,
                                   params, device, configuredDeterministic, stream)
               : launchPerKeyBlock(backwardSm90WideKeysKernel<Element, D, DV, false>, 384, L::kDynamicBytes, kp,
                                   params, device, configuredDevices, stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace detail

template <typename Element, int HeadDim, int HeadDimV>
cudaError_t launchSm90Instance(const backward::BackwardParams &params, bool tma, bool wide, int device,
                               cudaStream_t stream) {
  if constexpr (runsSplitKernel(HeadDim)) {
    if (wide) return detail::launchWideKeys<Element, HeadDim, HeadDimV>(params, tma, device, stream);
    return detail::launchSplit<Element, HeadDim, HeadDimV>(params, tma, device, stream);
  } else {
    static_assert(HeadDimV == HeadDim, "the d64/d128 kernel has one head dim");
    return detail::launchD64D128<Element, HeadDim>(params, tma, wide, device, stream);
  }
}

}  // namespace flashattn::cuda::backward_sm90
