// The Hopper backward family's chooser predicate and launcher (see backward_sm90.hpp, backward_sm90_kernel.cuh for d64
// and d128, backward_sm90_d256_kernel.cuh for d256).
// Built only into the sm_90a object library (sources.cmake), with the instances of the build's dtype/head-dim sets.
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_d256_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_kernel.cuh"

namespace flashattn::cuda::backward_sm90 {

namespace {

constexpr bool headDimBuilt(int64_t d) {
#if defined(FLASHATTN_HAS_HEADDIM_64)
  if (d == 64) return true;
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
  if (d == 128) return true;
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
  if (d == 256) return true;
#endif
  (void)d;
  return false;
}

constexpr bool dtypeBuilt(DType t) {
#if defined(FLASHATTN_HAS_DTYPE_FP16)
  if (t == DType::FP16) return true;
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
  if (t == DType::BF16) return true;
#endif
  (void)t;
  return false;
}

// The dynamic shared memory the launch of headDim's kernel asks for.
std::size_t sharedBytesFor(int64_t headDim) {
  if (headDim == 256) return d256::Layout::kDynamicBytes;
  if (headDim == 64) return SharedLayout<64>::kDynamicBytes;
  return SharedLayout<128>::kDynamicBytes;
}

}  // namespace

bool sm90BackwardSupports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return false;
  };
  if (dev.arch() != 90) return refuse(concat("the wgmma backward needs sm90; device is sm", dev.arch()));
  if (!dtypeBuilt(p.dtype)) return refuse(concat("data type ", dtypeName(p.dtype), " has no wgmma backward kernel"));
  if (!headDimBuilt(p.headDim) || p.headDimV != p.headDim)
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

cudaError_t launchBackwardSm90(DType dtype, int headDim, const backward::BackwardParams &params, cudaStream_t stream) {
#define FLASHATTN_SM90_BWD_DIMS(Element)                                                 \
  switch (headDim) {                                                                    \
    FLASHATTN_SM90_BWD_D64(Element)                                                     \
    FLASHATTN_SM90_BWD_D128(Element)                                                    \
    FLASHATTN_SM90_BWD_D256(Element)                                                    \
    default: return cudaErrorInvalidValue;                                              \
  }
#if defined(FLASHATTN_HAS_HEADDIM_64)
#define FLASHATTN_SM90_BWD_D64(Element) \
  case 64: return launchBackwardSm90Instance<Element, 64>(params, stream);
#else
#define FLASHATTN_SM90_BWD_D64(Element)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
#define FLASHATTN_SM90_BWD_D128(Element) \
  case 128: return launchBackwardSm90Instance<Element, 128>(params, stream);
#else
#define FLASHATTN_SM90_BWD_D128(Element)
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
#define FLASHATTN_SM90_BWD_D256(Element) \
  case 256: return launchBackwardSm90D256Instance<Element>(params, stream);
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
