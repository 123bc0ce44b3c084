// SPDX-License-Identifier: BSD-3-Clause
// The Hopper forward family's chooser and launcher (see forward_sm90.hpp). Compiled for sm_90a only, in the object
// library of sources.cmake; which instances exist follows FLASHATTN_HAS_DTYPE_* / FLASHATTN_HAS_HEADDIM_*.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "cuda/kernels/forward_sm90/forward_sm90.hpp"
#include "cuda/kernels/forward_sm90/forward_sm90_params.hpp"
#include "cuda/instance_set.hpp"

namespace flashattn::cuda::forward_sm90 {
namespace {

std::size_t sharedBytesFor(int64_t headDim) {
  return headDim <= 64 ? instanceSharedBytes<64>() : headDim <= 128 ? instanceSharedBytes<128>()
                                                                     : instanceSharedBytes<256>();
}

// The stride of a dimension that is walked must be a whole number of 16-byte vectors (8 elements).
bool strideFits(const char *tensor, const char *name, int64_t stride, bool used, std::string *whyNot) {
  if (!used || stride % 8 == 0) return true;
  if (whyNot != nullptr)
    *whyNot = std::string(tensor) + " " + name + " stride " + std::to_string(stride) +
              " is not a multiple of 8 elements (16 bytes), which the sm90 forward kernels need";
  return false;
}

bool isAligned16(const void *pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

// Persistent CTAs measured 3-11% faster than one CTA per tile for causal masks with seqK <= 4096 at head dims 64 and
// 128 (short, unequal tiles: the next tile's loads overlap the current one's tail), and slower at longer keys and at
// head dim 256, where the hardware's dynamic CTA scheduling balances better than static waves (NOTES.md).
bool runsPersistent(const AttnProblem &p) { return p.mask != Mask::None && p.headDim <= 128 && p.seqK <= 4096; }

}  // namespace

bool sm90Supports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return false;
  };
  if (dev.arch() != 90)
    return refuse("the sm90 forward kernels need compute capability 9.0; device " + std::to_string(dev.device) +
                  " is sm" + std::to_string(dev.arch()));
  if (p.op != Op::Forward) return refuse("the sm90 kernels serve the forward operation only");
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16)
    return refuse(std::string("data type ") + dtypeName(p.dtype) + " has no sm90 forward kernel (FP16/BF16 only)");
  if (!dtypeCompiled(p.dtype))
    return refuse(std::string("data type ") + dtypeName(p.dtype) + " has no sm90 forward kernel in this build");
  if (p.headDimV != p.headDim)
    return refuse("headDimV " + std::to_string(p.headDimV) + " differs from headDim " + std::to_string(p.headDim));
  if (p.headDim != 64 && p.headDim != 128 && p.headDim != 256)
    return refuse("headDim " + std::to_string(p.headDim) + " has no sm90 forward kernel (64, 128, 256)");
  if (!headDimCompiled(int(p.headDim)))
    return refuse("headDim " + std::to_string(p.headDim) + " has no sm90 forward instance in this build");
  if (p.paged) return refuse("paged K/V caches are not served by the sm90 forward kernels");
  if (p.softcap > 0.f) return refuse("softcap runs on the portable forward kernels");
  if (p.alibiSlopes != nullptr) return refuse("ALiBi runs on the portable forward kernels");
  const bool batchUsed = !p.ragged && p.batch > 1;
  const struct {
    const char *name;
    const Layout &layout;
    bool headUsed;
  } tensors[] = {{"Q", p.q, p.heads > 1}, {"K", p.k, p.kvHeads > 1}, {"V", p.v, p.kvHeads > 1}, {"O", p.o, p.heads > 1}};
  for (const auto &t : tensors)
    if (!strideFits(t.name, "batch", t.layout.batch, batchUsed, whyNot) ||
        !strideFits(t.name, "head", t.layout.head, t.headUsed, whyNot) ||
        !strideFits(t.name, "row", t.layout.row, true, whyNot))
      return false;
  const std::size_t shared = sharedBytesFor(p.headDim);
  if (shared > dev.smemPerBlockOptin)
    return refuse("the sm90 d" + std::to_string(p.headDim) + " forward tile needs " + std::to_string(shared) +
                  " bytes of shared memory per block; the device allows " + std::to_string(dev.smemPerBlockOptin));
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  if (p.seqQ > kMaxSeq || p.seqK > kMaxSeq)
    return refuse("sequence lengths above " + std::to_string(kMaxSeq) + " run on the portable kernels");
  const TileConfig t = tileFor(int(p.headDim));
  const int64_t blockM = 64 * t.consumerGroups;
  const int64_t ctas = (p.seqQ + blockM - 1) / blockM * p.heads * p.batch;
  if (p.heads > std::numeric_limits<int32_t>::max() || p.batch > std::numeric_limits<int32_t>::max() ||
      ctas > int64_t(std::numeric_limits<int32_t>::max()))
    return refuse("batch x heads x query blocks exceeds the sm90 forward grid limit of 2^31 - 1 blocks");
  return true;
}

bool routeToSm90(const DeviceInfo &dev, const AttnProblem &p, Plan *plan) {
  std::string whyNot;
  if (!sm90Supports(dev, p, &whyNot)) {
    // On an sm90 device the caller learns why its problem stays on the portable kernel (CheckSupport's text).
    if (dev.arch() == 90 && !whyNot.empty()) plan->description += "; wgmma kernel not used: " + whyNot;
    return false;
  }
  const TileConfig t = tileFor(int(p.headDim));
  std::ostringstream description;
  description << "cuda.fwd.wgmma sm90a " << dtypeName(p.dtype) << " d" << p.headDim << " tile " << 64 * t.consumerGroups
              << "x" << t.blockN << " " << t.consumerGroups << " consumer warpgroups + cp.async producer, " << t.stages
              << " stages" << (t.pingPong ? ", ping-pong" : "")
              << (runsPersistent(p) ? ", persistent" : "")
              << ", longest tiles first"
              << " (portable kernel when a buffer is not 16-byte aligned); fp32 accumulate; deterministic";
  plan->description = description.str();
  plan->config = portableConfig(plan->config) | kConfigTag;
  return true;
}

bool buffersAligned(const AttnBuffers &buf) {
  return isAligned16(buf.q) && isAligned16(buf.k) && isAligned16(buf.v) && isAligned16(buf.o);
}

// Softcap and ALiBi never reach this family (sm90Supports routes them to the portable kernels), and rows are
// 16-byte vectors by the same check.
ForwardParams sm90Params(const AttnProblem &p, const AttnBuffers &buf) {
  ForwardParams params = forward::makeForwardParams(p, buf);
  params.vectorAccess = true;
  return params;
}

cudaError_t launchSm90(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                       cudaStream_t stream) {
  (void)plan;  // the instance follows from the problem; the tag only said "this family"
  const ForwardParams params = sm90Params(p, buf);
  LaunchOptions options;
  options.persistent = runsPersistent(p);
  options.numSMs = dev.numSMs;
  options.l2Bytes = dev.l2Bytes;

  const bool half = p.dtype == DType::FP16;
  switch (p.headDim) {
#if defined(FLASHATTN_HAS_HEADDIM_64)
    case 64:
#if defined(FLASHATTN_HAS_DTYPE_FP16)
      if (half) return launchSm90Instance<__half, 64>(params, options, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
      if (!half) return launchSm90Instance<__nv_bfloat16, 64>(params, options, dev.device, stream);
#endif
      break;
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
    case 128:
#if defined(FLASHATTN_HAS_DTYPE_FP16)
      if (half) return launchSm90Instance<__half, 128>(params, options, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
      if (!half) return launchSm90Instance<__nv_bfloat16, 128>(params, options, dev.device, stream);
#endif
      break;
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
    case 256:
#if defined(FLASHATTN_HAS_DTYPE_FP16)
      if (half) return launchSm90Instance<__half, 256>(params, options, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
      if (!half) return launchSm90Instance<__nv_bfloat16, 256>(params, options, dev.device, stream);
#endif
      break;
#endif
    default:
      break;
  }
  (void)half;
  return cudaErrorInvalidValue;  // a plan this build cannot have made
}

}  // namespace flashattn::cuda::forward_sm90
