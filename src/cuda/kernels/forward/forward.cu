// SPDX-License-Identifier: BSD-3-Clause
// The portable forward families (src/cuda/family.hpp): cuda.fwd.mma_sync for FP16/BF16 (forward_mma_kernel.cuh) and
// cuda.fwd.ffma for FP32 (forward_fp32_kernel.cuh), sm80 and newer. Instances are (storage type, instance head dim)
// pairs from the generated list (src/cuda/generate.py); head dims (Q/K's and V/O's, equal or not) that are not an
// instance run on the next larger one with zero-filled columns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/forward_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/kernels/forward/forward_params.hpp"

namespace flashattn::cuda {
namespace {

using forward::ForwardParams;
using forward::launchInstance;
using forward::TileShape;

const InstanceList &kForwardInstances = generated::kForwardInstances;

TileShape tileFor(DType t, int instanceHeadDim) {
  return t == DType::FP32 ? forward::fp32TileFor(instanceHeadDim) : forward::mmaTileFor(instanceHeadDim);
}

std::size_t sharedBytesFor(DType t, int instanceHeadDim, bool paged) {
  return t == DType::FP32 ? forward::fp32SharedBytes(instanceHeadDim, paged)
                          : forward::mmaSharedBytes(instanceHeadDim, paged);
}

bool isAligned16(const void *pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

bool layoutVectorFriendly(const Layout &l, int64_t elementsPer16) {
  return l.batch % elementsPer16 == 0 && l.head % elementsPer16 == 0 && l.row % elementsPer16 == 0;
}

// Both portable families: FP32 storage on the FFMA kernel, FP16/BF16 on the tensor-core kernel.
Verdict planPortable(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot, bool fp32) {
  if ((p.dtype == DType::FP32) != fp32) return Verdict::NotForThis;
  auto refuse = [&](const std::string &reason) {
    *whyNot = reason;
    return Verdict::Refused;
  };
  if (dev.arch() < 80)
    return refuse(concat("the forward kernels need compute capability 8.0 or newer; device ", dev.device, " is sm",
                         dev.arch()));
  // Any head dims up to 256, Q/K's and V/O's apart: rows that are not whole 16-byte vectors load element by element.
  const int instance = kForwardInstances.paddedInstanceFor(p, "forward kernels", whyNot, {true, true});
  if (instance == 0) return Verdict::Refused;

  const TileShape tile = tileFor(p.dtype, instance);
  const std::size_t shared = sharedBytesFor(p.dtype, instance, p.paged);
  if (shared > dev.smemPerBlockOptin)
    return refuse(concat("the d", instance, " forward tile needs ", shared,
                         " bytes of shared memory per block; the device allows ", dev.smemPerBlockOptin));

  // In-sequence row/key indices are 32-bit in the kernels (with room for one tile past the end); the 1-D grid holds
  // every (sequence, head, query block).
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  if (p.seqQ > kMaxSeq) return refuse(concat("seqQ ", p.seqQ, " exceeds the forward kernels' limit of ", kMaxSeq));
  if (p.seqK > kMaxSeq)
    return refuse(concat("seqK ", p.seqK, p.paged ? " (maxPagesPerSeq x pageSize of the paged cache)" : "",
                         " exceeds the forward kernels' limit of ", kMaxSeq));
  const int64_t queryBlocks = (p.seqQ + tile.blockM - 1) / tile.blockM;
  if (p.heads > std::numeric_limits<int32_t>::max() || p.batch > std::numeric_limits<int32_t>::max() ||
      queryBlocks * p.heads > int64_t(std::numeric_limits<int32_t>::max()) / std::max<int64_t>(p.batch, 1))
    return refuse(concat("batch ", p.batch, " x heads ", p.heads, " x ", queryBlocks, " query blocks of ",
                         tile.blockM, " rows exceeds the forward grid limit of 2^31 - 1 blocks"));

  std::ostringstream description;
  description << (fp32 ? kernelIdName(KernelId::ForwardFfma) : kernelIdName(KernelId::ForwardMma)) << " sm"
              << dev.arch() << " " << dtypeName(p.dtype) << " d" << instance;
  if (p.headDimV != p.headDim) description << " (headDim " << p.headDim << ", headDimV " << p.headDimV << ")";
  else if (instance != p.headDim) description << " (headDim " << p.headDim << " zero-padded)";
  description << " tile " << tile.blockM << "x" << tile.blockN << " " << tile.warps << " warps";
  if (p.paged) description << ", paged K/V (page size " << p.pageSize << ", row table per key block)";
  description << "; ";
  description << (fp32 ? "fp32 arithmetic (no tensor cores)" : "fp32 accumulate");
  description << "; deterministic";

  ForwardConfig config;
  config.instance = InstanceKey{p.dtype, instance};
  config.blockM = tile.blockM;
  config.blockN = tile.blockN;
  config.warps = tile.warps;
  plan->config = config;
  plan->description = description.str();
  plan->deterministic = true;
  return Verdict::Served;
}

Verdict planMma(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  return planPortable(dev, p, plan, whyNot, false);
}

Verdict planFfma(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  return planPortable(dev, p, plan, whyNot, true);
}

cudaError_t launchPortable(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                           void *workspace, cudaStream_t stream) {
  (void)workspace;  // the forward needs none
  const ForwardConfig &config = plan.as<ForwardConfig>();
  ForwardParams params = forward::makeForwardParams(p, buf);
  params.queryBlocks = int32_t((p.seqQ + config.blockM - 1) / config.blockM);
  // Rows that are whole 16-byte vectors at 16-byte addresses load as vectors; any other row element by element (the
  // same kernel, a run-time switch: unaligned strides and pointers are served, not refused).
  const int64_t elementsPer16 = int64_t(16 / dtypeSize(p.dtype));
  params.vectorAccess = isAligned16(buf.q) && isAligned16(buf.k) && isAligned16(buf.v) && isAligned16(buf.o) &&
                        layoutVectorFriendly(p.q, elementsPer16) && layoutVectorFriendly(p.k, elementsPer16) &&
                        layoutVectorFriendly(p.v, elementsPer16) && layoutVectorFriendly(p.o, elementsPer16) &&
                        p.headDim % elementsPer16 == 0 && p.headDimV % elementsPer16 == 0;
  const InstanceKey key = config.instance;
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV) \
  if (key.dtype == DType::DT && key.headDim == HD) return launchInstance<CT, HD>(params, dev.device, stream);
#include "cuda/generated/forward_instances.inc"
#undef FLASHATTN_INSTANCE
  return cudaErrorInvalidValue;  // unreachable: plans name instances of the same list
}

}  // namespace

FLASHATTN_REGISTER_FAMILY(KernelId::ForwardMma, Op::Forward, 100, true, "mma_sync kernel", planMma, launchPortable);
FLASHATTN_REGISTER_FAMILY(KernelId::ForwardFfma, Op::Forward, 100, true, "FFMA kernel", planFfma, launchPortable);

}  // namespace flashattn::cuda
