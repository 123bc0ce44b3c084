// SPDX-License-Identifier: BSD-3-Clause
// The Hopper backward family, cuda.bwd.wgmma (src/cuda/family.hpp): its plan function and the dispatch to its main
// kernels (backward_sm90_kernel.cuh for d64 and d128, backward_sm90_split_kernel.cuh from 192,
// backward_sm90_wide_keys_kernel.cuh for 192/128 in the producer form), around which it runs
// the portable backward's pipeline (preprocess, convert, workspace: backward_params.hpp). Built only into the sm_90a
// object library (sources.cmake), with the instances of the generated list (src/cuda/generate.py); it registers
// itself ranked before the portable backward.
#include "cuda/kernels/backward_sm90/backward_sm90.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "core/knobs.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/backward_sm90_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/kernels/backward_sm90/backward_sm90_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_split_kernel.cuh"
#include "cuda/kernels/backward_sm90/backward_sm90_wide_keys_kernel.cuh"

namespace flashattn::cuda::backward_sm90 {

namespace {

const InstanceList &kSm90Instances = generated::kBackwardSm90Instances;

// The dynamic shared memory the launch of an instance's kernel asks for (wide: its wider tile).
template <int HD, int HDV>
constexpr std::size_t instanceSharedBytes(bool wide) {
  if constexpr (hasWideKeysForm(HD, HDV)) {
    if (wide) return wide_keys::Layout<HD, HDV>::kDynamicBytes;
  }
  if constexpr (runsSplitKernel(HD))  // the larger of its two forms (the producer form's second P^T / dS^T tiles)
    return std::max(split::Layout<HD, HDV>::kDynamicBytes, split::Layout<HD, HDV, hasTmaForm(HD)>::kDynamicBytes);
  else if constexpr (hasWideForm(HD))
    return wide ? SharedLayout<HD, kWideBlockM>::kDynamicBytes : SharedLayout<HD>::kDynamicBytes;
  else
    return SharedLayout<HD>::kDynamicBytes;
}
std::size_t sharedBytesFor(const InstanceKey &key, bool wide = false) {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV) \
  if (key.headDim == HD && key.widthV() == HDV) return instanceSharedBytes<HD, HDV>(wide);
#include "cuda/generated/backward_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
  return 0;  // unreachable: instances come from the same list
}

// Whether an instance's kernel adds dQ by bulk reduce into the paneled accumulator (the d64/d128 kernel always; the
// split kernel where its staging fits) or by red.global into the row-major one.
template <int HD, int HDV>
constexpr bool instanceDqPaneled() {
  if constexpr (runsSplitKernel(HD))
    return split::bulkDq<HD, HDV>();
  else
    return true;
}
bool dqPaneledFor(const InstanceKey &key) {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV) \
  if (key.headDim == HD && key.widthV() == HDV) return instanceDqPaneled<HD, HDV>();
#include "cuda/generated/backward_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
  return false;  // unreachable: instances come from the same list
}

// The producer-warpgroup form where the instance has one and the maps of Q and dO encode (the launch's maps at a
// stand-in address: the call's pointers are 16-byte aligned, which planBackwardCommon requires), with row coordinates
// in 32 bits; FLASHATTN_BACKWARD_LOADER may pin either form.
bool tmaServes(const AttnProblem &p, const InstanceKey &instance, int blockM) {
  if (!hasTmaForm(instance.headDim) || knobIs(Knob::BackwardLoader, "cp.async")) return false;
  constexpr int64_t kMaxRows = int64_t(std::numeric_limits<int32_t>::max()) - 1024;
  if (!tensorMapEncoderAvailable() || (p.ragged ? p.totalQ : p.seqQ) > kMaxRows) return false;
  backward::BackwardParams b;
  void *const address = reinterpret_cast<void *>(uintptr_t(1) << 20);
  b.q = b.dO = address;
  b.headDim = int32_t(p.headDim), b.headDimV = int32_t(p.headDimV);
  b.seqQ = int32_t(p.seqQ), b.heads = int32_t(p.heads), b.batch = int32_t(p.batch);
  b.ragged = p.ragged, b.totalQ = p.totalQ;
  b.qRow = p.q.row, b.qHead = p.q.head, b.qBatch = p.q.batch;
  b.dORow = p.dO.row, b.dOHead = p.dO.head, b.dOBatch = p.dO.batch;
  Sm90KernelParams scratch;
  return encodeQueryMaps(b, p.dtype, blockM, &scratch);
}

// The 80-row form runs a query row about 4% faster than the instance's narrow blocks (narrowBlockM: d128's 64; bf16
// without a mask, 1k-16k rows on an H200) but pads each sequence to a multiple of 80: it pays where its padded rows, so
// discounted, are fewer (not at 512 rows: 560 against 512; not at 64 or fewer). Ragged batches go by their longest
// sequence.
bool wideRowsPay(int64_t seqQ, int narrowBlockM) {
  const int64_t wideRows = (seqQ + kWideBlockM - 1) / kWideBlockM * kWideBlockM;
  const int64_t narrowRows = (seqQ + narrowBlockM - 1) / narrowBlockM * narrowBlockM;
  return 25 * wideRows <= 26 * narrowRows;
}

Verdict planSm90(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (dev.arch() != 90) return Verdict::NotForThis;  // sm_90a machine code runs on sm90 only
  auto refuse = [&](const std::string &reason) {
    *whyNot = reason;
    return Verdict::Refused;
  };
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16)
    return refuse(concat("data type ", dtypeName(p.dtype), " has no wgmma backward kernel (FP16/BF16 only)"));
  // An instance of exactly the problem's head dims, else (equal head dims) the next instance up with zero columns
  // where they cost at most a quarter of its products and its dQ goes into whole 64-column panels: 48-56 on d64,
  // 96-120 on d128, 144-184 on d192 (d256 adds dQ row-major by red.global, every column of the instance). Narrower
  // problems keep to the portable kernel.
  const InstanceKey *instance = kSm90Instances.exactFor(p.dtype, p.headDim, p.headDimV);
  if (instance == nullptr && p.headDimV == p.headDim) {
    std::string ignored;
    const int32_t wider = kSm90Instances.paddedInstanceFor(p, "wgmma backward kernels", &ignored);
    const InstanceKey *candidate = wider > 0 ? kSm90Instances.exactFor(p.dtype, wider, wider) : nullptr;
    if (candidate != nullptr && 4 * p.headDim >= 3 * wider && dqPaneledFor(*candidate)) instance = candidate;
  }
  if (instance == nullptr)
    return refuse(concat("headDim ", p.headDim, " / headDimV ", p.headDimV,
                         " has no wgmma backward kernel in this build (", dtypeName(p.dtype), ": ",
                         kSm90Instances.headDims(p.dtype),
                         "; Q/K / V/O where they differ; equal head dims within three quarters of an instance "
                         "zero-padded on it)"));
  // Softcap and ALiBi: the kernels' transform form, unordered (hasTransformForm).
  const bool transform = p.softcap > 0.f || p.alibiSlopes != nullptr;
  const char *const transformName =
      p.softcap > 0.f ? (p.alibiSlopes != nullptr ? "softcap and ALiBi" : "softcap") : "ALiBi";
  if (transform && !hasTransformForm(instance->headDim))
    return refuse(concat(transformName, " at head dim ", instance->headDim, " runs on the portable backward kernel"));
  if (transform && p.deterministic)
    return refuse(concat(transformName, " in deterministic mode runs on the portable backward kernel"));
  if (p.paged) return refuse("paged K/V caches are not supported by the backward kernels");
  const std::size_t sharedBytes = sharedBytesFor(*instance);
  if (sharedBytes > dev.smemPerBlockOptin)
    return refuse(concat("the wgmma backward needs ", sharedBytes,
                         " bytes of shared memory per block; device allows ", dev.smemPerBlockOptin));
  const Sm90BackwardTile tile = sm90BackwardTileFor(instance->headDim);
  BackwardConfig config;
  config.instance = *instance;
  config.blockM = tile.blockM;
  config.blockN = tile.blockN;
  config.warps = tile.warps;
  // Bulk additions of whole 16-row warp tiles need the paneled accumulator; red.global adds row-major.
  config.dqPaneled = dqPaneledFor(*instance);
  config.dsUnscaled = true;  // both kernels leave the softmax scale out of dS
  config.tma = tmaServes(p, *instance, tile.blockM);
  if (config.tma) config.warps = tile.warps + 4;
  // The d64/d128 kernel's transform form is compiled in hasTmaForm's form only; the split kernel's in both.
  if (transform && !runsSplitKernel(instance->headDim) && config.tma != hasTmaForm(instance->headDim))
    return refuse(concat(transformName, " at head dim ", instance->headDim,
                         " runs in the producer-warpgroup form only (the Q and dO tensor maps of this call do not "
                         "encode, or FLASHATTN_BACKWARD_LOADER pins cp.async): the portable backward kernel"));
  // 80-row query blocks (hasWideForm) where nothing is masked but the ends of the sequences and the additions are
  // unordered, over the instance's full width, by tensor maps, and the padding leaves the form ahead.
  // FLASHATTN_BACKWARD_TILE=narrow keeps the instance's narrow tile.
  const bool narrowTiles = knobIs(Knob::BackwardTile, "narrow");
  const bool wide = config.tma && !transform && !narrowTiles && hasWideForm(instance->headDim) &&
                    wideRowsPay(p.seqQ, tile.blockM) && p.mask == Mask::None && p.windowLeft < 0 &&
                    p.windowRight < 0 && !p.deterministic &&
                    qkWidthFor(instance->headDim, p.headDim) == instance->headDim &&
                    sharedBytesFor(*instance, true) <= dev.smemPerBlockOptin && tmaServes(p, *instance, kWideBlockM);
  if (wide) config.blockM = kWideBlockM;
  // 96 keys a CTA (hasWideKeysForm) wherever the producer form serves the problem without a logit transform.
  const bool wideKeys = config.tma && !transform && !narrowTiles &&
                        hasWideKeysForm(instance->headDim, instance->widthV()) && p.headDim == instance->headDim &&
                        p.headDimV == instance->widthV() && sharedBytesFor(*instance, true) <= dev.smemPerBlockOptin;
  if (wideKeys) config.blockN = kWideKeysBlockN;
  config.groupsPerSection = backward::groupsPerSectionFor(dev, p);
  config.descendingTurns = backward::descendingTurnsPay(p);
  const Verdict verdict =
      backward::planBackwardCommon(dev, p, config, kernelIdName(KernelId::BackwardWgmma), plan, whyNot);
  // The launch takes the same width (backward_sm90_launch.cuh launchD64D128Form); the transform kernel the full one.
  const int qkWidth = qkWidthFor(instance->headDim, p.headDim);
  if (verdict == Verdict::Served && !transform && !runsSplitKernel(instance->headDim) && qkWidth < instance->headDim)
    plan->description += concat("; S^T and dP^T over ", qkWidth, " columns");
  if (verdict == Verdict::Served && transform) plan->description += concat("; logits with ", transformName);
  return verdict;
}

cudaError_t launchSm90Main(const DeviceInfo &dev, const Plan &plan, const backward::BackwardParams &params,
                           cudaStream_t stream) {
  const BackwardConfig &config = plan.as<BackwardConfig>();
  const InstanceKey key = config.instance;
  const bool wide = config.blockM == kWideBlockM || config.blockN == kWideKeysBlockN;
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV)                                \
  if (key.dtype == DType::DT && key.headDim == HD && key.widthV() == HDV) \
    return launchSm90Instance<CT, HD, HDV>(params, config.tma, wide, dev.device, stream);
#include "cuda/generated/backward_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
  return cudaErrorInvalidValue;  // unreachable: plans name instances of the same list
}

cudaError_t launchSm90(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                       void *workspace, cudaStream_t stream) {
  return backward::launchBackwardPipeline(dev, p, plan, buf, workspace, stream, launchSm90Main);
}

}  // namespace

FLASHATTN_REGISTER_FAMILY(KernelId::BackwardWgmma, Op::Backward, 10, false, "wgmma kernel", planSm90, launchSm90);

}  // namespace flashattn::cuda::backward_sm90
