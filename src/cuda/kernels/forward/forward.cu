// SPDX-License-Identifier: BSD-3-Clause
// The forward family's chooser (planForward) and launcher (launchForward): see src/cuda/ops.hpp.
//
// Instances are (storage type, instance head dim) pairs compiled from forward_instance.cu.in; a head dim that is a
// multiple of 8 but not an instance runs on the next larger instance with zero-filled columns. FP16/BF16 run on the
// tensor-core kernel (forward_mma_kernel.cuh), FP32 on the FFMA kernel (forward_fp32_kernel.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "cuda/kernels/forward/forward_params.hpp"
#include "cuda/instance_set.hpp"
#include "cuda/ops.hpp"
#if defined(FLASHATTN_HAS_SM90A)
#include "cuda/kernels/forward_sm90/forward_sm90.hpp"
#endif

namespace flashattn::cuda {
namespace {

using forward::ForwardParams;
using forward::launchInstance;
using forward::TileShape;

constexpr int32_t instanceKey(DType t, int headDim) { return headDim * 4 + int32_t(t); }

TileShape tileFor(DType t, int instanceHeadDim) {
  return t == DType::FP32 ? forward::fp32TileFor(instanceHeadDim) : forward::mmaTileFor(instanceHeadDim);
}

std::size_t sharedBytesFor(DType t, int instanceHeadDim) {
  return t == DType::FP32 ? forward::fp32SharedBytes(instanceHeadDim) : forward::mmaSharedBytes(instanceHeadDim);
}

bool isAligned16(const void *pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

bool layoutVectorFriendly(const Layout &l, int64_t elementsPer16) {
  return l.batch % elementsPer16 == 0 && l.head % elementsPer16 == 0 && l.row % elementsPer16 == 0;
}

}  // namespace

bool planForward(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return false;
  };
  if (dev.arch() < 80)
    return refuse("the forward kernels need compute capability 8.0 or newer; device " + std::to_string(dev.device) +
                  " is sm" + std::to_string(dev.arch()));
  if (p.paged)
    return refuse("paged K/V caches are not supported by the forward kernels (use flashAttnDecodeChunk)");
  if (p.headDimV != p.headDim)
    return refuse("headDimV " + std::to_string(p.headDimV) + " differs from headDim " + std::to_string(p.headDim) +
                  ": the forward kernels need equal head dims for Q/K and V/O");
  if (p.headDim < 8 || p.headDim > 256 || p.headDim % 8 != 0)
    return refuse("headDim " + std::to_string(p.headDim) +
                  " is not supported by the forward kernels: it must be a multiple of 8 in [8, 256]");
  if (!dtypeCompiled(p.dtype))
    return refuse(std::string("data type ") + dtypeName(p.dtype) +
                  " has no forward kernel in this build (FLASHATTN_DTYPES)");
  const int instance = nativeHeadDimFor(p.headDim);
  if (!headDimCompiled(instance))
    return refuse("headDim " + std::to_string(p.headDim) + " needs the d" + std::to_string(instance) +
                  " forward instance, which this build does not have (FLASHATTN_HEAD_DIMS: compiled " +
                  compiledHeadDims() + ")");

  const TileShape tile = tileFor(p.dtype, instance);
  const std::size_t shared = sharedBytesFor(p.dtype, instance);
  if (shared > dev.smemPerBlockOptin)
    return refuse("the d" + std::to_string(instance) + " forward tile needs " + std::to_string(shared) +
                  " bytes of shared memory per block; the device allows " + std::to_string(dev.smemPerBlockOptin));

  // In-sequence row/key indices are 32-bit in the kernels (with room for one tile past the end); the 1-D grid holds
  // every (sequence, head, query block).
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  if (p.seqQ > kMaxSeq)
    return refuse("seqQ " + std::to_string(p.seqQ) + " exceeds the forward kernels' limit of " +
                  std::to_string(kMaxSeq));
  if (p.seqK > kMaxSeq)
    return refuse("seqK " + std::to_string(p.seqK) + " exceeds the forward kernels' limit of " +
                  std::to_string(kMaxSeq));
  const int64_t queryBlocks = (p.seqQ + tile.blockM - 1) / tile.blockM;
  const int64_t ctas = queryBlocks * p.heads * p.batch;
  if (p.heads > std::numeric_limits<int32_t>::max() || p.batch > std::numeric_limits<int32_t>::max() ||
      ctas > int64_t(std::numeric_limits<int32_t>::max()))
    return refuse("batch " + std::to_string(p.batch) + " x heads " + std::to_string(p.heads) + " x " +
                  std::to_string(queryBlocks) + " query blocks of " + std::to_string(tile.blockM) +
                  " rows exceeds the forward grid limit of 2^31 - 1 blocks");

  std::ostringstream description;
  if (p.dtype == DType::FP32)
    description << "cuda.fwd.ffma sm" << dev.arch() << " fp32 d" << instance;
  else
    description << "cuda.fwd.mma_sync sm" << dev.arch() << " " << dtypeName(p.dtype) << " d" << instance;
  if (instance != p.headDim) description << " (headDim " << p.headDim << " zero-padded)";
  description << " tile " << tile.blockM << "x" << tile.blockN << " " << tile.warps << " warps; ";
  description << (p.dtype == DType::FP32 ? "fp32 arithmetic (no tensor cores)" : "fp32 accumulate");
  description << "; deterministic";

  plan->description = description.str();
  plan->deterministic = true;
  plan->workspaceBytes = 0;
  plan->config = instanceKey(p.dtype, instance);
  plan->numChunks = 0;
#if defined(FLASHATTN_HAS_SM90A)
  forward_sm90::routeToSm90(dev, p, plan);  // on sm90 the wgmma family takes the problems it serves
#endif
  return true;
}

cudaError_t launchForward(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                          void *workspace, cudaStream_t stream) {
#if defined(FLASHATTN_HAS_SM90A)
  if (forward_sm90::isSm90Config(plan.config)) {
    if (forward_sm90::buffersAligned(buf)) return forward_sm90::launchSm90(dev, p, plan, buf, stream);
    Plan portable = plan;  // a buffer is not 16-byte aligned: the portable kernel of the same problem
    portable.config = forward_sm90::portableConfig(plan.config);
    return launchForward(dev, p, portable, buf, workspace, stream);
  }
#endif
  (void)workspace;  // the forward needs none
  const int instance = plan.config / 4;
  const TileShape tile = tileFor(p.dtype, instance);

  ForwardParams params = forward::makeForwardParams(p, buf);
  params.queryBlocks = int32_t((p.seqQ + tile.blockM - 1) / tile.blockM);

  const int64_t elementsPer16 = int64_t(16 / dtypeSize(p.dtype));
  params.vectorAccess = isAligned16(buf.q) && isAligned16(buf.k) && isAligned16(buf.v) && isAligned16(buf.o) &&
                        layoutVectorFriendly(p.q, elementsPer16) && layoutVectorFriendly(p.k, elementsPer16) &&
                        layoutVectorFriendly(p.v, elementsPer16) && layoutVectorFriendly(p.o, elementsPer16) &&
                        p.headDim % elementsPer16 == 0;

  switch (plan.config) {
#if defined(FLASHATTN_HAS_DTYPE_FP16) && defined(FLASHATTN_HAS_HEADDIM_64)
    case instanceKey(DType::FP16, 64):
      return launchInstance<__half, 64>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP16) && defined(FLASHATTN_HAS_HEADDIM_96)
    case instanceKey(DType::FP16, 96):
      return launchInstance<__half, 96>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP16) && defined(FLASHATTN_HAS_HEADDIM_128)
    case instanceKey(DType::FP16, 128):
      return launchInstance<__half, 128>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP16) && defined(FLASHATTN_HAS_HEADDIM_192)
    case instanceKey(DType::FP16, 192):
      return launchInstance<__half, 192>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP16) && defined(FLASHATTN_HAS_HEADDIM_256)
    case instanceKey(DType::FP16, 256):
      return launchInstance<__half, 256>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16) && defined(FLASHATTN_HAS_HEADDIM_64)
    case instanceKey(DType::BF16, 64):
      return launchInstance<__nv_bfloat16, 64>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16) && defined(FLASHATTN_HAS_HEADDIM_96)
    case instanceKey(DType::BF16, 96):
      return launchInstance<__nv_bfloat16, 96>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16) && defined(FLASHATTN_HAS_HEADDIM_128)
    case instanceKey(DType::BF16, 128):
      return launchInstance<__nv_bfloat16, 128>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16) && defined(FLASHATTN_HAS_HEADDIM_192)
    case instanceKey(DType::BF16, 192):
      return launchInstance<__nv_bfloat16, 192>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16) && defined(FLASHATTN_HAS_HEADDIM_256)
    case instanceKey(DType::BF16, 256):
      return launchInstance<__nv_bfloat16, 256>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32) && defined(FLASHATTN_HAS_HEADDIM_64)
    case instanceKey(DType::FP32, 64):
      return launchInstance<float, 64>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32) && defined(FLASHATTN_HAS_HEADDIM_96)
    case instanceKey(DType::FP32, 96):
      return launchInstance<float, 96>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32) && defined(FLASHATTN_HAS_HEADDIM_128)
    case instanceKey(DType::FP32, 128):
      return launchInstance<float, 128>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32) && defined(FLASHATTN_HAS_HEADDIM_192)
    case instanceKey(DType::FP32, 192):
      return launchInstance<float, 192>(params, dev.device, stream);
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32) && defined(FLASHATTN_HAS_HEADDIM_256)
    case instanceKey(DType::FP32, 256):
      return launchInstance<float, 256>(params, dev.device, stream);
#endif
    default:
      return cudaErrorInvalidValue;  // a plan this build cannot have made
  }
}

}  // namespace flashattn::cuda
