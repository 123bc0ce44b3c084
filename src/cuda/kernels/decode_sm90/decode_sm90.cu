// SPDX-License-Identifier: BSD-3-Clause
// The Hopper wgmma decode family, cuda.decode.wgmma (src/cuda/family.hpp): its plan function and launcher. Compiled
// for sm_90a only, in the object library of sources.cmake, with the instances of the generated list
// (src/cuda/generate.py); ranked before the forward that would otherwise take a DecodeChunk whose head dims differ.
//
// It serves the problems of its instances' exact head dims (absorbed-MLA decode: Q/K 576, V/O 512; and head dim 128
// from 16 rows per KV head, multi-token decode, where the split-KV decode's mma.sync engine falls behind the stream):
// any number of query heads per KV head and query tokens (64-row blocks of heads x tokens, or one narrow block of up
// to 32), every mask and window, sinks, per-sequence lengths, dense caches and paged ones whose pages hold whole
// 64-key tiles. V is read from K's stages when the call
// passes K's memory and strides for V (V is K's first headDimV columns), from its own otherwise; the plan does not
// depend on which (the run tells them apart by the pointers). Split key ranges are merged by the split-KV decode's
// merge kernel, from the same partial states, or, in the kernel that keeps all of O in one warpgroup, inside a
// thread-block cluster of the chunks (plan below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/decode_sm90_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode_sm90/decode_sm90.hpp"
#include "cuda/vector_rule.hpp"

namespace flashattn::cuda::decode_sm90 {
namespace {

using LaunchFn = cudaError_t (*)(const DecodeParams &, bool, int, int, cudaStream_t);
using ClusterCapacityFn = int (*)(int, int);

struct Instance {
  DType dtype;
  int headDim;
  int headDimV;
  LaunchFn launch;
  ClusterCapacityFn clusterCapacity;
  std::size_t sharedBytes;  // the largest of its kernels'
};

const Instance kInstances[] = {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV)                                                                        \
  {DType::DT, HD, HDV, &launchDecodeSm90Instance<CT, HD, HDV>, &clusterCapacitySm90Instance<CT, HD, HDV>, \
   instanceSharedBytes<HD, HDV>()},
#include "cuda/generated/decode_sm90_instances.inc"
#undef FLASHATTN_INSTANCE
    {DType::FP32, 0, 0, nullptr, nullptr, 0},  // end marker (keeps the array non-empty)
};
constexpr int kInstanceCount = int(sizeof(kInstances) / sizeof(kInstances[0])) - 1;

// The instance of exactly these head dims: a wider one would read zero columns at the rate of real ones, which the
// split-KV decode and the forward do better for every narrower problem.
const Instance *findInstance(DType dtype, int64_t headDim, int64_t headDimV) {
  for (int i = 0; i < kInstanceCount; ++i)
    if (kInstances[i].dtype == dtype && kInstances[i].headDim == headDim && kInstances[i].headDimV == headDimV)
      return &kInstances[i];
  return nullptr;
}

// The rank-5 maps of K and V (one copy per 64-key tile: every 64-column box of the head dim). V's covers its own
// head dim, whether it lies in K's memory or apart.
bool encodeMaps(const AttnProblem &p, const void *k, const void *v, DecodeParams *d) {
  const int64_t kvHeads = decode::effectiveKvHeads(p);
  decode::CacheMapKey kKey = decode::cacheMapKey(p, k, p.k, kvHeads, kTileKeys, decode::kMapWide);
  decode::CacheMapKey vKey = decode::cacheMapKey(p, v, p.v, kvHeads, kTileKeys, decode::kMapWide);
  kKey.headDim = p.headDim;
  vKey.headDim = p.headDimV;
  if (!decode::encodeCacheMap(kKey, &d->kMap, &d->kSlots) || !decode::encodeCacheMap(vKey, &d->vMap, &d->vSlots))
    return false;
  return d->kSlots.rank == 5 && d->vSlots.rank == 5;
}

// V is K's first headDimV columns: the same memory and strides (absorbed MLA's latent cache).
bool vIsKPrefix(const AttnProblem &p, const AttnBuffers &buf) {
  return buf.v == buf.k && p.v == p.k && p.headDimV <= p.headDim;
}

constexpr int64_t kMinRowsBesideSplitKv = 16;

struct Shape {
  int64_t kvHeads, groupSize, rows, rowBlocks, tiles;
  int narrowRows;  // 16 or 32: the narrow kernel of that many rows (one CTA takes every row); 0: 64-row blocks
};

// The narrow kernel where the rows fit its N and the instance has it: with 64-row blocks, 16 rows of absorbed MLA
// spend three quarters of the MMA work on padding (H200, 16 heads, caches of 288 MiB: 2830-3080 GB/s, 67-73% of copy).
Shape shapeOf(const AttnProblem &p, int instanceHeadDim) {
  Shape s;
  s.kvHeads = decode::effectiveKvHeads(p);
  s.groupSize = p.heads / s.kvHeads;
  s.rows = s.groupSize * p.seqQ;
  s.narrowRows = !hasNarrowKernels(instanceHeadDim) || s.rows > kNarrowRows ? 0 : s.rows <= 16 ? 16 : 32;
  s.rowBlocks = s.narrowRows > 0 ? 1 : (s.rows + kRows - 1) / kRows;
  s.tiles = (p.seqK + kTileKeys - 1) / kTileKeys;
  return s;
}

Verdict planDecodeSm90(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (dev.arch() != 90) return Verdict::NotForThis;  // sm_90a machine code runs on sm90 only
  const Instance *inst = findInstance(p.dtype, p.headDim, p.headDimV);
  if (inst == nullptr) return Verdict::NotForThis;  // head dims of the other decode families
  // Head dims the split-KV decode also serves: from 16 rows per KV head (4 query tokens of GQA 4), where this kernel
  // streams caches of 256 MiB and more at 81-103% of the copy bandwidth against the split-KV decode's 77-103% (H200,
  // GQA 32/8, D128; 8 tokens 81-102% against 61-97%, 16 tokens 75-101% against 41-50%), and only the query tokens the
  // split-KV decode would take.
  const Shape shape = shapeOf(p, inst->headDim);
  if (inst->headDim <= 256 && (shape.rows < kMinRowsBesideSplitKv || p.seqQ > kMaxSplitKvQueries))
    return Verdict::NotForThis;
  const std::string dims = concat("head dims ", p.headDim, "/", p.headDimV);
  auto refuse = [&](const std::string &reason) {
    *whyNot = reason;
    return Verdict::Refused;
  };
  if (p.ragged)
    return refuse("ragged Q: the wgmma decode (" + dims + ") takes a dense Q [batch, heads, seqQ, headDim]");
  if (p.softcap > 0.f) return refuse("softcap: the wgmma decode (" + dims + ") has no softcap");
  if (p.alibiSlopes != nullptr) return refuse("ALiBi slopes: the wgmma decode (" + dims + ") has no ALiBi");
  if (p.paged && p.pageSize % kTileKeys != 0)
    return refuse(concat("pageSize ", p.pageSize, ": the wgmma decode (", dims,
                         ") copies whole 64-key tiles of a page, ", "so pages must hold a multiple of 64 keys"));
  if (!p.buffersAligned16)
    return refuse("a data pointer is not 16-byte aligned: the wgmma decode moves 16-byte vectors");
  if (!vectorStridesFit(p.dtype, {{"Q", p.q, p.batch > 1, p.heads > 1}, {"O", p.o, p.batch > 1, p.heads > 1}},
                        "wgmma decode", whyNot))
    return Verdict::Refused;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  if (p.seqK > kInt32Max - 2 * kTileKeys || p.batch > kInt32Max || p.heads > kInt32Max || shape.rows > kInt32Max ||
      (p.paged && p.pageSize > kInt32Max))
    return refuse(concat("batch ", p.batch, ", heads ", p.heads, ", seqQ ", p.seqQ, ", seqK ", p.seqK,
                         ": the wgmma decode counts them in 32 bits"));
  {
    DecodeParams scratch;
    const void *standIn = reinterpret_cast<const void *>(uintptr_t(1) << 20);
    if (!encodeMaps(p, standIn, standIn, &scratch))
      return refuse(concat("the K/V strides (", p.k.batch, ", ", p.k.head, ", ", p.k.row, ") / (", p.v.batch, ", ",
                           p.v.head, ", ", p.v.row, ") have no tensor map of 64-key tiles for the wgmma decode"));
  }
  if (inst->sharedBytes > dev.smemPerBlockOptin)
    return refuse(concat("the wgmma decode (", dims, ") needs ", inst->sharedBytes,
                         " bytes of shared memory per block; the device allows ", dev.smemPerBlockOptin));

  // One CTA per SM (its shared memory), so the chunks fill one wave of SMs beside the row blocks.
  const int64_t units = p.batch * shape.kvHeads * shape.rowBlocks;
  const int64_t maxChunks = std::max<int64_t>(1, shape.tiles);
  const int64_t chunks = p.numChunks > 0 ? std::min<int64_t>(p.numChunks, maxChunks)
                                         : decode::chooseChunks(units, maxChunks, std::max(dev.numSMs, 1));
  if (units > kInt32Max / chunks)
    return refuse(
        concat("the wgmma decode grid would have ", units, " x ", chunks, " CTAs, more than one launch addresses"));
  // Chunks of a unit merge in a cluster (no partial states in the workspace, no merge kernel) where the kernel keeps
  // all of O in one warpgroup, the split-KV decode's rule says it pays (pairs) and every unit's cluster is resident at
  // once; FLASHATTN_DECODE_MERGE=cluster takes it wherever it fits (up to kMostClusterChunks), =kernel or =fused never
  // (this family has no fused merge).
  const decode::MergeOverride mergeOverride = decode::mergeOverride();
  const bool clusterMerge =
      shape.narrowRows == 0 && splitsKeys(int(inst->headDimV)) && chunks >= 2 &&
      (mergeOverride == decode::MergeOverride::kAuto   ? decode::clusterMergePays(chunks)
       : mergeOverride == decode::MergeOverride::kCluster ? chunks <= kMostClusterChunks
                                                          : false) &&
      inst->clusterCapacity(dev.device, int(chunks)) >= units;

  *plan = Plan{};
  plan->kernel = KernelId::DecodeWgmma;
  DecodeConfig config;
  config.instance = InstanceKey{p.dtype, int32_t(inst->headDim), int32_t(inst->headDimV)};
  config.warps = (shape.narrowRows > 0 ? kNarrowThreads : kThreads) / 32;
  config.rowTileCap = int32_t((shape.narrowRows > 0 ? shape.narrowRows : kRows) / decode::kRowsPerTile);
  config.tileKeys = kTileKeys;
  config.loader = decode::kLoaderTensorMap;
  config.merge = clusterMerge ? decode::kMergeCluster : decode::kMergeSeparate;
  plan->config = config;
  plan->numChunks = int32_t(chunks);
  plan->deterministic = true;
  if (chunks > 1 && !clusterMerge) {
    const std::size_t states = std::size_t(chunks) * std::size_t(p.batch) * std::size_t(p.heads) * std::size_t(p.seqQ);
    if (states > (std::size_t(1) << 52) / std::size_t(p.headDimV))
      return refuse(concat("the decode workspace for ", chunks, " chunks overflows"));
    plan->addRegion(decode::kPartialORegion, "partial O", states * std::size_t(p.headDimV) * 4);
    plan->addRegion(decode::kPartialLseRegion, "partial max and sum", states * 2 * sizeof(float));
  }
  plan->description =
      concat("cuda.decode.wgmma ", dtypeName(p.dtype), " d", inst->headDim, "v", inst->headDimV,
             ": tensor-map copies of 64-key tiles (V from K's stages where V is K's first ", p.headDimV, " columns), ",
             shape.narrowRows > 0
                 ? concat("narrow: S^T = K Q^T and O^T += V^T P^T with the ", shape.rows,
                          " rows as wgmma N = ", shape.narrowRows, ", a producer warp + 1 consumer warpgroup, ")
                 : concat("a producer warpgroup + 2 consumer warpgroups (",
                          splitsKeys(int(inst->headDimV))
                              ? "alternate tiles, each with all of O and its own softmax, merged at the end"
                              : "S and softmax; O split by columns",
                          "), ", shape.rowBlocks, " x 64-row blocks of ", shape.rows, " rows per KV head, "),
             chunks, " KV chunks",
             chunks == 1 ? "" : clusterMerge ? " merged in a cluster of the chunks" : " + merge kernel",
             ", 1 CTA/SM; fp32 accumulate; deterministic");
  return Verdict::Served;
}

cudaError_t buildParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace,
                        DecodeParams *params) {
  const Shape shape = shapeOf(p, plan.as<DecodeConfig>().instance.headDim);
  DecodeParams &d = *params;
  decode::fillProblemParams(p, buf, plan, workspace, shape.kvHeads, &d);
  d.rowTilesPerCta = plan.as<DecodeConfig>().rowTileCap;
  d.rowBlocks = int32_t(shape.rowBlocks);
  d.clusterMerge = plan.as<DecodeConfig>().merge == decode::kMergeCluster && plan.numChunks > 1;
  // The plan encoded the same maps at a stand-in address; only a misaligned pointer fails here.
  return encodeMaps(p, buf.k, buf.v, &d) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t launchDecodeSm90(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                             void *workspace, cudaStream_t stream) {
  const DecodeConfig &config = plan.as<DecodeConfig>();
  const Instance *inst = findInstance(config.instance.dtype, config.instance.headDim, config.instance.headDimV);
  if (inst == nullptr || plan.numChunks < 1) return cudaErrorInvalidValue;
  DecodeParams d;
  cudaError_t err = buildParams(p, plan, buf, workspace, &d);
  if (err != cudaSuccess) return err;
  const int rowsPerCta = config.rowTileCap * decode::kRowsPerTile;
  err = inst->launch(d, vIsKPrefix(p, buf), rowsPerCta < kRows ? rowsPerCta : 0, dev.device, stream);
  if (err != cudaSuccess || plan.numChunks == 1 || d.clusterMerge) return err;
  // The merge reads rows of V/O's width.
  DecodeParams merge = d;
  merge.headDim = int32_t(p.headDimV);
  return decode::launchDecodeMergeKernel(p.dtype, merge, true, stream);
}

}  // namespace

FLASHATTN_REGISTER_FAMILY(KernelId::DecodeWgmma, Op::DecodeChunk, 80, false, "wgmma decode", planDecodeSm90,
                          launchDecodeSm90);

}  // namespace flashattn::cuda::decode_sm90
