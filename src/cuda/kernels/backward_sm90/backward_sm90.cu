// SPDX-License-Identifier: BSD-3-Clause
// The Hopper backward family's chooser predicate and launcher (see backward_sm90.hpp, backward_sm90_kernel.cuh for d64
// and d128, backward_sm90_d256_kernel.cuh for d256).
// Built only into the sm_90a object library (sources.cmake), with the instances of the build's dtype/head-dim sets.
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "core/error.hpp"
#include "cuda/instance_set.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_d256_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_kernel.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::backward_sm90 {

namespace {

// The dynamic shared memory the launch of headDim's kernel asks for.
std::size_t sharedBytesFor(int64_t headDim) {
  if (headDim == 256) return d256::Layout::kDynamicBytes;
  if (headDim == 64) return SharedLayout<64>::kDynamicBytes;
  return SharedLayout<128>::kDynamicBytes;
}

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
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
  return params.deterministic ? launchPerKeyBlock(backwardSm90Kernel<Element, D, true>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDeterministic, stream)
                              : launchPerKeyBlock(backwardSm90Kernel<Element, D, false>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDevices, stream);
}

template <typename Element>
cudaError_t launchD256(const backward::BackwardParams &params, int device, cudaStream_t stream) {
  using L = d256::Layout;
  static std::atomic<uint64_t> configuredDevices{0}, configuredDeterministic{0};
  return params.deterministic ? launchPerKeyBlock(backwardSm90D256Kernel<Element, true>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDeterministic, stream)
                              : launchPerKeyBlock(backwardSm90D256Kernel<Element, false>, L::kThreads,
                                                  L::kDynamicBytes, params, device, configuredDevices, stream);
}

}  // namespace

bool sm90BackwardSupports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return false;
  };
  if (dev.arch() != 90) return refuse(concat("the wgmma backward needs sm90; device is sm", dev.arch()));
  if (!dtypeCompiled(p.dtype)) return refuse(concat("data type ", dtypeName(p.dtype), " has no wgmma backward kernel"));
  if (!headDimCompiled(p.headDim) || p.headDimV != p.headDim)
    return refuse(concat("headDim ", p.headDim, " / headDimV ", p.headDimV,
                         " has no wgmma backward kernel in this build (the family has d64, d128 and d256, with "
                         "headDimV == headDim)"));
  if (p.softcap > 0.f) return refuse(concat("softcap ", p.softcap, " runs on the portable backward kernel"));
  if (p.alibiSlopes != nullptr) return refuse("ALiBi slopes run on the portable backward kernel");
  if (p.paged) return refuse("paged K/V caches are not supported by the backward kernels");
  const std::size_t sharedBytes = sharedBytesFor(p.headDim);
  if (sharedBytes > dev.smemPerBlockOptin)
    return refuse(concat("the wgmma backward needs ", sharedBytes,
                         " bytes of shared memory per block; device allows ", dev.smemPerBlockOptin));
  return true;
}

cudaError_t launchBackwardSm90(DType dtype, int headDim, const backward::BackwardParams &params, int device,
                               cudaStream_t stream) {
#define FLASHATTN_SM90_BWD_DIMS(Element)                                                 \
  switch (headDim) {                                                                    \
    FLASHATTN_SM90_BWD_D64(Element)                                                     \
    FLASHATTN_SM90_BWD_D128(Element)                                                    \
    FLASHATTN_SM90_BWD_D256(Element)                                                    \
    default: return cudaErrorInvalidValue;                                              \
  }
#if defined(FLASHATTN_HAS_HEADDIM_64)
#define FLASHATTN_SM90_BWD_D64(Element) \
  case 64: return launchD64D128<Element, 64>(params, device, stream);
#else
#define FLASHATTN_SM90_BWD_D64(Element)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
#define FLASHATTN_SM90_BWD_D128(Element) \
  case 128: return launchD64D128<Element, 128>(params, device, stream);
#else
#define FLASHATTN_SM90_BWD_D128(Element)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
#define FLASHATTN_SM90_BWD_D256(Element) \
  case 256: return launchD256<Element>(params, device, stream);
#else
#define FLASHATTN_SM90_BWD_D256(Element)
#endif
  switch (dtype) {
#if defined(FLASHATTN_HAS_DTYPE_FP16)
    case DType::FP16: FLASHATTN_SM90_BWD_DIMS(__half)
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
    case DType::BF16: FLASHATTN_SM90_BWD_DIMS(__nv_bfloat16)
#endif
    default: return cudaErrorInvalidValue;
  }
#undef FLASHATTN_SM90_BWD_DIMS
#undef FLASHATTN_SM90_BWD_D64
#undef FLASHATTN_SM90_BWD_D128
#undef FLASHATTN_SM90_BWD_D256
}

}  // namespace flashattn::cuda::backward_sm90
