// SPDX-License-Identifier: BSD-3-Clause
// The Hopper forward family, cuda.fwd.wgmma (src/cuda/family.hpp): its plan function and launcher. Compiled for
// sm_90a only, in the object library of sources.cmake, with the instances of the generated list
// (src/cuda/generate.py); it registers itself, ranked before the portable forward it replaces on sm90.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/forward_sm90_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/tensor_map.hpp"
#include "cuda/kernels/forward_sm90/forward_sm90.hpp"
#include "cuda/kernels/forward_sm90/forward_sm90_params.hpp"
#include "cuda/vector_rule.hpp"

namespace flashattn::cuda::forward_sm90 {
namespace {

const InstanceList &kSm90Instances = generated::kForwardSm90Instances;

// An instance's shared memory (its paged kernel's adds the row tables; the short tile's is dense), from the generated
// list of instances.
std::size_t sharedBytesFor(const InstanceKey &key, bool paged, bool shortTile) {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV)                                                    \
  if (key.headDim == HD && key.widthV() == HDV)                                              \
    return shortTile ? shortTileSharedBytes<HD, HDV>()                                       \
                     : paged ? instanceSharedBytes<HD, true, HDV>() : instanceSharedBytes<HD, false, HDV>();
#include "cuda/generated/forward_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
  return 0;  // unreachable: instances come from the same list
}

TileConfig tileOf(const InstanceKey &key, bool shortTile = false) {
  return shortTile ? shortTileFor(key.headDim, key.widthV()) : tileFor(key.headDim, key.widthV());
}

// The instance's short-sequence tile (shortTileFor) against its main one, H200, bf16, persistent, tensor maps
// (bench/forward_sm90_variants, NOTES.md). d64 causal, 128x128 in three stages against 192x128: 1.13x at S 512, 1.10x
// at 1k, 0.94x at 2k; without a mask 0.96x and 0.94x (192 rows keep the tensor cores busier). d256 causal, 128x64
// against 128x80 ping-pong: 1.04x at S 512; without a mask even. So masked problems only, with both seqQ and seqK
// short (a short query chunk over a long prefix has long tiles). Only the plain dense tensor-map kernel has it.
bool usesShortTile(const AttnProblem &p, const InstanceKey &key, bool tma) {
  if (!tma || p.paged || p.softcap > 0.f || p.alibiSlopes != nullptr || p.mask == Mask::None) return false;
  if (shortTileFor(key.headDim, key.widthV()).blockN == 0) return false;
  return std::max(p.seqQ, p.seqK) <= shortTileMaxSeq(key.headDim);
}

// Whether a paged cache's blocks split into tensor-map copies of whole page runs (pagedBoxRows: page sizes that are
// multiples of 8 and share 8 or more with BlockN) whose tail block the warp can copy (V/O head dim 64, 128 or 256), and
// no logit transform (whose kernel has no paged form). The maps themselves are checked by tmaServes.
bool pagedTmaShape(const AttnProblem &p, const InstanceKey &key) {
  return p.paged && pagedBoxRows(p.pageSize, tileOf(key).blockN) > 0 && 32 % (key.widthV() / 8) == 0 &&
         p.softcap <= 0.f && p.alibiSlopes == nullptr;
}

// Persistent CTAs (one per SM, looping over tiles: the next tile's loads overlap the current one's tail) against one
// CTA per tile, H200, bf16, tensor-map loads (NOTES.md): without a mask every tile is as long as the next, and
// persistence gains 10-27% at S 512-2k and 0-4% at 4k-16k (d64, d128), up to 4k at d256 (from 8k one CTA per tile
// is 1-2% ahead); with a causal mask or a window tiles differ in length and static waves balance them worse than the
// hardware's CTA scheduler from S 8k at d64/d128 and from 1k at d256 (d256 causal 16k: 435 against 769 TFLOP/s).
// The cp.async producer (paged caches, strides no tensor map takes) loses 5-10% persistent from S 8k without a mask.
// Causal at d192 (bench/forward_sm90_variants, H200): persistent 1.13x at S 512, 1.07x at 1k, 0.995x at 2k; at d256
// 1.01x at 512 and 0.91x at 1k, so d256 stays one CTA per tile.
// The short tiles run persistent (d256 128x64 causal at S 512: 1.03x one CTA per tile).
bool runsPersistent(const AttnProblem &p, int32_t instance, bool tma, bool shortTile) {
  if (shortTile) return true;
  const bool equalTiles = p.mask == Mask::None && p.windowLeft < 0 && p.windowRight < 0;
  if (equalTiles) return tma ? instance <= 128 || p.seqK <= 4096 : p.seqK <= 4096;
  return instance <= 128 ? p.seqK <= 4096 : instance <= 192 && p.seqK <= 1024;
}

// The instance that serves the problem (the narrowest compiled one at least as wide: columns in between are zeros in
// shared memory and never stored; one compiled for the problem's two head dims where it is narrower), or a key of
// head dim 0 with *whyNot naming the argument.
InstanceKey sm90Serves(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot) {
  auto refuse = [&](const std::string &reason) {
    if (whyNot != nullptr) *whyNot = reason;
    return InstanceKey{p.dtype, 0};
  };
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16)
    return refuse(std::string("data type ") + dtypeName(p.dtype) + " has no sm90 forward kernel (FP16/BF16 only)");
  std::string why;
  // Multiples of 8 only (the copies move 16-byte chunks; other widths run on the portable kernels), Q/K's and V/O's
  // apart: both pad to the instance of the wider.
  const int32_t padded = kSm90Instances.paddedInstanceFor(p, "sm90 forward kernels", &why, {false, true});
  if (padded == 0) return refuse(why);
  InstanceKey key{p.dtype, padded};
  if (const InstanceKey *pair = kSm90Instances.pairFor(p.dtype, p.headDim, p.headDimV))
    if (pair->headDim + pair->headDimV < 2 * padded) key = *pair;
  const std::string instance = instanceName(key);
  // A paged cache comes by tensor-map copies of page runs, whose tail block's V rows split over one warp (V/O head
  // dims 64, 128 and 256), or by the cp.async producer, which gives each 8-element chunk of a row one thread of its
  // 128 (both head dims 64, 128 or 256).
  if (p.paged && !pagedTmaShape(p, key) && (128 % (key.headDim / 8) != 0 || 128 % (key.widthV() / 8) != 0))
    return refuse("a paged K/V on the " + instance + " instance runs on the portable kernels");
  // A paged cache's page stride (its Layout.batch) is walked whatever the batch.
  const bool batchUsed = !p.ragged && p.batch > 1;
  if (!vectorStridesFit(p.dtype,
                        {{"Q", p.q, batchUsed, p.heads > 1},
                         {"K", p.k, batchUsed || p.paged, p.kvHeads > 1},
                         {"V", p.v, batchUsed || p.paged, p.kvHeads > 1},
                         {"O", p.o, batchUsed, p.heads > 1}},
                        "sm90 forward kernels", whyNot))
    return InstanceKey{p.dtype, 0};
  const std::size_t shared = sharedBytesFor(key, p.paged, false);
  if (shared > dev.smemPerBlockOptin)
    return refuse("the sm90 " + instance + " forward tile needs " + std::to_string(shared) +
                  " bytes of shared memory per block; the device allows " + std::to_string(dev.smemPerBlockOptin));
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  if (p.seqQ > kMaxSeq || p.seqK > kMaxSeq)
    return refuse("sequence lengths above " + std::to_string(kMaxSeq) + " run on the portable kernels");
  const TileConfig t = tileOf(key);
  const int64_t blockM = 64 * t.consumerGroups;
  const int64_t ctas = (p.seqQ + blockM - 1) / blockM * p.heads * p.batch;
  if (p.heads > std::numeric_limits<int32_t>::max() || p.batch > std::numeric_limits<int32_t>::max() ||
      ctas > int64_t(std::numeric_limits<int32_t>::max()))
    return refuse("batch x heads x query blocks exceeds the sm90 forward grid limit of 2^31 - 1 blocks");
  if (!p.buffersAligned16) return refuse("a data pointer is not 16-byte aligned");
  return key;
}

// Q, K and V by tensor-map copies where their maps encode: the same maps as the launch's at a stand-in address (the
// call's pointers are 16-byte aligned, which sm90Serves checked), with row and page coordinates in 32 bits. A paged
// cache whose blocks do not split into whole page runs (pagedTmaShape) comes through row tables instead.
bool tmaServes(const AttnProblem &p, const InstanceKey &key, const TileConfig &t) {
  if (p.paged && !pagedTmaShape(p, key)) return false;
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max() - 1024;
  if (p.ragged ? std::max(p.totalQ, p.totalK) > kMaxRows : std::max(p.seqQ, p.seqK) > kMaxRows) return false;
  if (p.paged && p.numPages > kMaxRows) return false;
  AttnBuffers standIn{};
  void *const address = reinterpret_cast<void *>(uintptr_t(1) << 20);
  standIn.q = standIn.k = standIn.v = address;
  standIn.o = address;
  KernelParams scratch;
  if (p.paged) scratch.pageBoxRows = pagedBoxRows(p.pageSize, t.blockN);
  return encodeForwardMaps(sm90Params(p, standIn), p.dtype, 64 * t.consumerGroups, t.blockN, &scratch);
}

Verdict planSm90(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (dev.arch() != 90) return Verdict::NotForThis;  // sm_90a machine code runs on sm90 only
  const InstanceKey key = sm90Serves(dev, p, whyNot);
  if (key.headDim == 0) return Verdict::Refused;
  const bool tma = tmaServes(p, key, tileOf(key));
  if (p.paged && !tma && (128 % (key.headDim / 8) != 0 || 128 % (key.widthV() / 8) != 0)) {
    if (whyNot != nullptr)
      *whyNot = concat("a paged K/V on the ", instanceName(key),
                       " instance takes tensor-map copies, which its strides or the driver refuse here; it runs on "
                       "the portable kernels");
    return Verdict::Refused;
  }
  const bool transformsLogits = p.softcap > 0.f || p.alibiSlopes != nullptr;
  if (transformsLogits && (!tma || p.paged)) {
    if (whyNot != nullptr)
      *whyNot = concat(p.softcap > 0.f ? "softcap" : "ALiBi", " runs on the portable forward kernels ",
                       p.paged                        ? "with a paged K/V"
                       : !tensorMapEncoderAvailable() ? "without the driver's tensor-map encoder"
                                                      : "with strides no tensor map takes");
    return Verdict::Refused;
  }
  // The short tile where it pays, its maps encode and its shared memory fits (both as the main tile's, smaller).
  const bool shortTile = usesShortTile(p, key, tma) && tmaServes(p, key, tileOf(key, true)) &&
                         sharedBytesFor(key, false, true) <= dev.smemPerBlockOptin;
  const TileConfig t = tileOf(key, shortTile);
  const bool persistent = runsPersistent(p, key.headDim, tma, shortTile);
  // The instance's kernel with the narrower S contraction where the problem's Q/K columns end within it (the plain
  // dense tensor-map kernel of the main tile, which is where it is compiled: forward_sm90_launch.cuh).
  const int trimmed = trimmedQKWidth(key.headDim, key.widthV());
  const bool plainDense = tma && !p.paged && !transformsLogits && !shortTile;
  const int32_t qkWidth = plainDense && trimmed > 0 && p.headDim <= trimmed ? trimmed : 0;
  std::ostringstream description;
  description << kernelIdName(KernelId::ForwardWgmma) << " sm90a " << dtypeName(p.dtype) << " " << instanceName(key);
  if (p.headDimV != p.headDim) {
    description << " (headDim " << p.headDim << ", headDimV " << p.headDimV;
    description << (key.headDimV > 0 ? ")" : ", both zero-padded to one width)");
  } else if (key.headDim != p.headDim) {
    description << " (headDim " << p.headDim << " zero-padded)";
  }
  if (qkWidth > 0) description << ", S = Q K^T over " << qkWidth << " columns";
  description << " tile " << 64 * t.consumerGroups << "x" << t.blockN << " " << t.consumerGroups
              << " consumer warpgroups + " << (tma ? "tensor-map" : "cp.async") << " producer, " << t.stages
              << " stages"
              << (t.pingPong ? ", ping-pong" : "") << (persistent ? ", persistent" : "")
              << (!p.paged ? ""
                  : tma    ? concat(", paged K/V in tensor-map copies of ", pagedBoxRows(p.pageSize, t.blockN),
                                    "-key page runs")
                           : std::string(", paged K/V through per-block row tables"))
              << (p.softcap > 0.f ? ", softcap" : "") << (p.alibiSlopes != nullptr ? ", ALiBi" : "")
              << ", longest tiles first; fp32 accumulate; deterministic";
  ForwardConfig config;
  config.instance = key;
  config.blockM = 64 * t.consumerGroups;
  config.blockN = t.blockN;
  config.warps = 4 * (t.consumerGroups + 1);
  config.persistent = persistent;
  config.tma = tma;
  config.shortTile = shortTile;
  config.qkWidth = qkWidth;
  plan->config = config;
  plan->description = description.str();
  plan->deterministic = true;
  return Verdict::Served;
}

}  // namespace

// Rows are 16-byte vectors (sm90Serves checked).
ForwardParams sm90Params(const AttnProblem &p, const AttnBuffers &buf) {
  ForwardParams params = forward::makeForwardParams(p, buf);
  params.vectorAccess = true;
  return params;
}

namespace {

cudaError_t launchSm90(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                       void *workspace, cudaStream_t stream) {
  (void)workspace;  // the forward needs none
  const ForwardConfig &config = plan.as<ForwardConfig>();
  const ForwardParams params = sm90Params(p, buf);
  LaunchOptions options;
  options.persistent = config.persistent;
  options.tma = config.tma;
  options.shortTile = config.shortTile;
  options.qkWidth = config.qkWidth;
  options.numSMs = dev.numSMs;
  options.l2Bytes = dev.l2Bytes;
  const InstanceKey key = config.instance;
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV)                                \
  if (key.dtype == DType::DT && key.headDim == HD && key.widthV() == HDV) \
    return launchSm90Instance<CT, HD, HDV>(params, options, dev.device, stream);
#include "cuda/generated/forward_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
  return cudaErrorInvalidValue;  // unreachable: plans name instances of the same list
}

}  // namespace

// Ranked before the portable forward (100): on sm90 it takes the problems it serves.
FLASHATTN_REGISTER_FAMILY(KernelId::ForwardWgmma, Op::Forward, 10, false, "wgmma kernel", planSm90, launchSm90);

}  // namespace flashattn::cuda::forward_sm90
