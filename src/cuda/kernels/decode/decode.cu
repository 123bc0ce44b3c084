// SPDX-License-Identifier: BSD-3-Clause
// Split-KV decode: the chooser (planDecode) and the launcher (launchDecode) of src/cuda/ops.hpp.
//
// planDecode picks the instance (the narrowest compiled head dim >= the problem's, zero-filled columns in between),
// the loader (tensor-map copies for dense FP16/BF16 caches on sm90, cp.async otherwise), the row tiling of the GQA group
// times query tokens, and the chunk count from host values only (the lengths and the block table stay on the device):
// each CTA finds its own key range from the real length when it runs. Split KV ranges are merged inside the decode
// kernel: by the CTA of each unit that finishes last, found through tagged counts in the workspace that it leaves at
// zero (the fused merge, no memset, no second launch); or, for pairs of chunks on sm90 with the producer-warp loader
// where the device holds every unit's cluster at once, by a cluster of the two through distributed shared memory
// (clusterMergePays). A separate merge kernel, launched as a programmatic dependent, is the third mode.
// FLASHATTN_DECODE_MERGE overrides the choice (measurements, tests).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/knobs.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/family.hpp"
#include "cuda/generated/decode_instance_list.hpp"
#include "cuda/instances.hpp"
#include "cuda/ops.hpp"
#include "cuda/tensor_map.hpp"
#include "cuda/vector_rule.hpp"

namespace flashattn::cuda {

namespace decode {
namespace {

using InstanceLaunchFn = cudaError_t (*)(const DecodeParams &, int, const DeviceInfo &, cudaStream_t);
using InstanceOccupancyFn = int (*)(const DeviceInfo &, int, int);
using InstanceClusterCapacityFn = int (*)(const DeviceInfo &, int, int, int);

struct Instance {
  DType dtype;
  int headDim;
  InstanceLaunchFn launch;
  InstanceOccupancyFn occupancy;
  InstanceClusterCapacityFn clusterCapacity;
};

#define INSTANCE(T, D) &launchDecodeInstance<T, D>, &occupancyDecodeInstance<T, D>, &clusterCapacityDecodeInstance<T, D>

// The instances this build compiled: the family's generated list (src/cuda/generate.py).
const Instance kInstances[] = {
#define FLASHATTN_INSTANCE(DT, CT, HD, HDV) {DType::DT, HD, INSTANCE(CT, HD)},
#include "cuda/generated/decode_instances.inc"
#undef FLASHATTN_INSTANCE
    {DType::FP32, 0, nullptr, nullptr, nullptr},  // end marker (keeps the array non-empty in a build without instances)
};
#undef INSTANCE
constexpr int kInstanceCount = int(sizeof(kInstances) / sizeof(kInstances[0])) - 1;

// Index in kInstances of the narrowest instance of this dtype whose head dim is >= headDim (the instance list's
// rule, cuda/instances.hpp), or -1.
int findInstance(DType dtype, int64_t headDim) {
  const int32_t instance = generated::kDecodeInstances.headDimFor(dtype, headDim);
  for (int i = 0; i < kInstanceCount; ++i)
    if (kInstances[i].dtype == dtype && kInstances[i].headDim == instance) return i;
  return -1;
}

// What a plan's `config` carries: the kernel (instance, its head dim and variant) and the merge mode.
struct PlannedKernel {
  int instance = 0;
  int libraryVariant = 0;  // index into libraryVariant() when instance is a library instance
  int headDim = 0;         // of the kernel (>= the problem's)
  Variant variant;         // tileKeys resolved
  int merge = kMergeFused;
  int rowTileCap = 0;             // row tiles per CTA at most (0: the loader's own limit)
  bool clusterWhereFits = false;  // planDecode: the cluster merge where it pays and fits (else `merge`)
  bool clusterWherever = false;   // with clusterWhereFits: wherever it fits, paying or not (FLASHATTN_DECODE_MERGE)
};

DecodeConfig toConfig(DType dtype, const PlannedKernel &k) {
  DecodeConfig c;
  c.instance = InstanceKey{dtype, k.headDim};
  c.warps = k.variant.warps;
  c.tileKeys = k.variant.tileKeys;
  c.stages = k.variant.stages;
  c.loader = k.variant.loader;
  c.merge = k.merge;
  c.rowTileCap = k.rowTileCap;
  c.clusterWhereFits = k.clusterWhereFits;
  c.clusterWherever = k.clusterWherever;
  return c;
}

PlannedKernel fromConfig(const DecodeConfig &c) {
  PlannedKernel k;
  k.headDim = c.instance.headDim;
  k.variant = Variant{c.warps, c.tileKeys, c.stages, c.loader};
  k.merge = c.merge;
  k.rowTileCap = c.rowTileCap;
  k.clusterWhereFits = c.clusterWhereFits;
  k.clusterWherever = c.clusterWherever;
  const int index = findInstance(c.instance.dtype, c.instance.headDim);
  // Plans name instances of kInstances only; anything else is caught by launchDecode.
  k.instance = index >= 0 && kInstances[index].headDim == c.instance.headDim ? index : kInstanceCount;
  k.libraryVariant = libraryVariantIndex(k.variant);
  return k;
}

// The CTA tiling of one problem on one kernel.
struct Shape {
  int64_t kvHeads = 0;    // effective: 1 when both K and V broadcast one head through a zero head stride
  int64_t groupSize = 0;  // query heads per effective KV head
  int64_t rows = 0;       // groupSize * seqQ
  int rowTilesPerCta = 1;
  int keyGroups = 4;
  int64_t rowBlocks = 1;
  SmemLayout smem;
};

Shape shapeOf(const AttnProblem &p, int kernelHeadDim, const Variant &v, int rowTileCap = 0) {
  Shape s;
  const int elementBytes = int(dtypeSize(p.dtype));
  s.kvHeads = effectiveKvHeads(p);
  s.groupSize = p.heads / s.kvHeads;
  s.rows = s.groupSize * p.seqQ;
  const int64_t rowTiles = (s.rows + kRowsPerTile - 1) / kRowsPerTile;
  // The tensor loader's CTAs take at most two row tiles, so that every row tile has two warps splitting its keys and
  // two CTAs fit an SM: four warps walking every key of one row tile each were bound by their own math chains (16
  // query tokens of GQA 4, H200: 1210-1430 GB/s at one 4-tile CTA per SM, whatever the chunk count).
  int maxTiles = isTensorLoader(v.loader) ? 2 : kMaxRowTilesPerCta;
  if (rowTileCap > 0) maxTiles = std::min(maxTiles, rowTileCap);
  s.rowTilesPerCta = int(std::min<int64_t>(rowTiles, maxTiles));
  s.keyGroups = v.warps / s.rowTilesPerCta;
  s.rowBlocks = (rowTiles + s.rowTilesPerCta - 1) / s.rowTilesPerCta;
  s.smem = smemLayout(elementBytes, kernelHeadDim, v.warps, v.tileKeys, v.stages, v.loader, s.rowTilesPerCta);
  return s;
}

// The K and V maps of the tensor loader: the rank-5 wide view needs the problem's head dim to be the kernel's (its boxes
// are whole 64-column pieces of real rows) and whole tiles per copy; where it cannot be had the loader falls back to
// 64-column boxes (the same shared layout), so K and V always come in maps of one rank.
bool encodeCacheMaps(const AttnProblem &p, const void *k, const void *v, int64_t kvHeads, int tileKeys, int loader,
                     int kernelHeadDim, DecodeParams *d) {
  const bool exact = p.headDim == kernelHeadDim && (!p.paged || pagedTensorPieces(p.pageSize, tileKeys) == 1);
  auto both = [&](int view) {
    return encodeCacheMap(cacheMapKey(p, k, p.k, kvHeads, tileKeys, view), &d->kMap, &d->kSlots) &&
           encodeCacheMap(cacheMapKey(p, v, p.v, kvHeads, tileKeys, view), &d->vMap, &d->vSlots);
  };
  if (isTensorLoader(loader) && exact && kernelHeadDim > 64 && both(kMapWide)) return true;
  return both(kMapBoxes);
}

// Whether the tensor loader serves this problem on this kernel: sm90, a 16-bit cache (dense, or paged in pages that
// tile the key tiles), a kernel head dim of whole boxes, and strides the encoder accepts (tried on an aligned stand-in
// address, the real one is only known at launch).
bool tensorLoaderServes(const DeviceInfo &dev, const AttnProblem &p, int kernelHeadDim, int64_t kvHeads, int tileKeys,
                        int loader, std::string *whyNot) {
  if (!dev.portableHasSm90() || !tensorLoadable(int(dtypeSize(p.dtype)), kernelHeadDim)) {
    *whyNot = concat("the tensor-map loader needs sm_90+ code on an sm_90+ device (device sm_", dev.arch(),
                     ", code compute_", dev.portableCodeArch, ") and FP16/BF16 with a kernel head dim that is a ",
                     "multiple of 64 (", dtypeName(p.dtype), ", ", kernelHeadDim, ")");
    return false;
  }
  if (p.paged && pagedTensorPieces(p.pageSize, tileKeys) == 0) {
    *whyNot = concat("the tensor-map loader copies whole pages or whole tiles: pageSize ", p.pageSize,
                     " is not a multiple of 8 that divides or is divided by the ", tileKeys, "-key tile");
    return false;
  }
  const void *standIn = reinterpret_cast<const void *>(uintptr_t(1) << 20);
  DecodeParams scratch;
  if (!encodeCacheMaps(p, standIn, standIn, kvHeads, tileKeys, loader, kernelHeadDim, &scratch)) {
    *whyNot = concat("the K/V strides (", p.k.batch, ", ", p.k.head, ", ", p.k.row, ") / (", p.v.batch, ", ", p.v.head,
                     ", ", p.v.row, ") with headDim ", p.headDim, " on the d", kernelHeadDim,
                     " kernel have no tensor map of loader ", loader);
    return false;
  }
  return true;
}

// The plan description's words for the loader (with the view the maps of this problem take).
std::string loaderName(const DeviceInfo &dev, const AttnProblem &p, const PlannedKernel &k, int64_t kvHeads) {
  const int loader = k.variant.loader;
  if (!isTensorLoader(loader)) return "cp.async";
  std::string name = "tensor-map copies (full/empty ring)";
  DecodeParams scratch;
  const void *standIn = reinterpret_cast<const void *>(uintptr_t(1) << 20);
  const bool ok = dev.portableHasSm90() &&
                  encodeCacheMaps(p, standIn, standIn, kvHeads, k.variant.tileKeys, loader, k.headDim, &scratch);
  name += ok && scratch.kSlots.rank == 5 ? " one copy per tile" : " 64-column boxes";
  if (p.paged) name += concat(", ", pagedTensorPieces(p.pageSize, k.variant.tileKeys), " page piece(s) per tile");
  return name;
}

bool multiplyFits(std::size_t a, std::size_t b, std::size_t *out) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// The KV chunks of a plan (before the cluster merge's cap) on a kernel of `variant` (tileKeys resolved) with
// ctasPerSM resident CTAs per SM: the caller's count, or as many as fill one wave beside the units.
int64_t kvChunks(const DeviceInfo &dev, const AttnProblem &p, const Variant &variant, const Shape &shape,
                 int ctasPerSM) {
  const int64_t maxChunks = std::max<int64_t>(1, (p.seqK + variant.tileKeys - 1) / variant.tileKeys);
  if (p.numChunks > 0) return std::min<int64_t>(p.numChunks, maxChunks);
  const int64_t units = p.batch * shape.kvHeads * shape.rowBlocks;
  // One CTA per SM only where the tensor loader's four consumer warps split the keys four ways (up to 16 rows per
  // KV head) of a dense cache; with fewer key groups each warp's math needs a second CTA beside it (8 query tokens of
  // GQA 4, H200: 2090-2640 GB/s at one CTA per SM, 2580-3830 at two), and paged rows their second CTA's bytes in flight.
  const bool onePerSM = isTensorLoader(variant.loader) && !p.paged && shape.keyGroups >= 4;
  const int64_t slots = int64_t(std::max(dev.numSMs, 1)) * (onePerSM ? 1 : ctasPerSM);
  return chooseChunks(units, maxChunks, slots);
}

// Everything of planning that does not depend on where the kernel comes from. occupancy(rowTilesPerCta) gives the
// kernel's resident CTAs per SM.
template <typename Occupancy, typename ClusterCapacity>
bool planKernel(const DeviceInfo &dev, const AttnProblem &p, PlannedKernel kernel, Occupancy &&occupancy,
                ClusterCapacity &&clusterCapacity, Plan *plan, std::string *whyNot) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  const int elementBytes = int(dtypeSize(p.dtype));
  kernel.variant.tileKeys = resolvedTileKeys(kernel.variant, elementBytes, kernel.headDim);
  Shape shape = shapeOf(p, kernel.headDim, kernel.variant, kernel.rowTileCap);
  // Fewer row tiles per CTA where the device's shared memory per block does not hold them beside the ring (sm86/sm89
  // with FP32 or head dim 256 and more than 32 rows per KV head); halving keeps the key groups whole.
  while (shape.smem.total > dev.smemPerBlockOptin && shape.rowTilesPerCta > 1) {
    kernel.rowTileCap = std::max(1, shape.rowTilesPerCta / 2);
    shape = shapeOf(p, kernel.headDim, kernel.variant, kernel.rowTileCap);
  }
  const int loader = kernel.variant.loader;
  if (isTensorLoader(loader) &&
      !tensorLoaderServes(dev, p, kernel.headDim, shape.kvHeads, kernel.variant.tileKeys, loader, whyNot))
    return false;
  const int tileKeys = kernel.variant.tileKeys;
  if (p.seqK > kInt32Max - 2 * tileKeys) {
    *whyNot = concat("seqK ", p.seqK, " (cache capacity): the CUDA decode indexes keys in 32 bits");
    return false;
  }
  if (p.paged && p.pageSize > kInt32Max) {
    *whyNot = concat("pageSize ", p.pageSize, ": the CUDA decode indexes pages in 32 bits");
    return false;
  }
  if (p.batch > kInt32Max || p.heads > kInt32Max || shape.rows > kInt32Max || p.seqQ > kInt32Max) {
    *whyNot = concat("batch ", p.batch, ", heads ", p.heads, ", seqQ ", p.seqQ,
                     ": the CUDA decode counts them in 32 bits");
    return false;
  }
  if (shape.smem.total > dev.smemPerBlockOptin) {
    *whyNot = concat("the decode kernel for headDim ", kernel.headDim, " needs ", shape.smem.total,
                     " bytes of shared memory per block, the device allows ", dev.smemPerBlockOptin);
    return false;
  }

  const int64_t units = p.batch * shape.kvHeads * shape.rowBlocks;
  const int ctasPerSM = std::max(1, occupancy(shape.rowTilesPerCta));
  int64_t chunks = kvChunks(dev, p, kernel.variant, shape, ctasPerSM);
  // The cluster merge only where every unit's cluster is resident at once: a cluster that waits for a second wave
  // costs the whole call (B1 L8k 970 GB/s against 1450 with the merge kernel on a board that holds 7 clusters of 16).
  if (kernel.clusterWhereFits && isTensorLoader(loader) && dev.portableHasSm90() &&
      (kernel.clusterWherever ? chunks >= 2 && chunks <= kMaxClusterChunks : clusterMergePays(chunks)) &&
      clusterCapacity(shape.rowTilesPerCta, int(chunks)) >= units)
    kernel.merge = kMergeCluster;
  if (kernel.merge == kMergeCluster) {
    if (!dev.portableHasSm90()) {
      *whyNot = concat("the cluster merge needs sm_90+ code on an sm_90+ device (device sm_", dev.arch(),
                       ", code compute_", dev.portableCodeArch, ")");
      return false;
    }
    chunks = std::min<int64_t>(chunks, kMaxClusterChunks);
  }
  if (units > kInt32Max / chunks) {
    *whyNot = concat("the decode grid would have ", units, " x ", chunks, " CTAs, more than one launch addresses");
    return false;
  }

  *plan = Plan{};
  plan->kernel = KernelId::DecodeSplitKv;
  plan->config = toConfig(p.dtype, kernel);
  plan->numChunks = int32_t(chunks);
  plan->deterministic = true;
  if (chunks > 1 && kernel.merge != kMergeCluster) {
    std::size_t stateRows = 0, partialO = 0, partialLse = 0;
    bool fits = multiplyFits(std::size_t(chunks), std::size_t(p.batch), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.heads), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.seqQ), &stateRows) &&
                multiplyFits(stateRows, std::size_t(p.headDimV) * 4, &partialO) &&
                multiplyFits(stateRows, 2 * sizeof(float), &partialLse);  // max and sum per state
    fits = fits && partialO < (std::size_t(1) << 62);
    if (!fits) {
      *whyNot = concat("the decode workspace for ", chunks, " chunks overflows");
      return false;
    }
    const bool fused = kernel.merge == kMergeFused;
    const std::size_t counts = fused ? std::size_t(units) * sizeof(unsigned long long) : 0;
    const std::size_t flags = fused ? std::size_t(units) * std::size_t(chunks) * sizeof(uint32_t) : 0;
    plan->addRegion(kPartialORegion, "partial O", partialO);
    plan->addRegion(kPartialLseRegion, "partial max and sum", partialLse);
    plan->addRegion(kMergeCountsRegion, "merge counts", counts);
    plan->addRegion(kMergeFlagsRegion, "merge flags", flags);
  }
  const bool tensorCores = p.dtype != DType::FP32;
  const char *merge = chunks == 1                     ? ""
                      : kernel.merge == kMergeFused   ? " merged in the kernel by the last CTA"
                      : kernel.merge == kMergeCluster ? " merged in a cluster of the chunks"
                                                      : " + merge kernel";
  plan->description =
      concat("cuda.decode.", tensorCores ? "mma_sync" : "simt_fp32", " ", dtypeName(p.dtype), " d", kernel.headDim,
             " (headDim ", p.headDim, "): ", loaderName(dev, p, kernel, shape.kvHeads), ", ", kernel.variant.warps,
             isTensorLoader(loader) ? " consumer warps + a producer warp, " : " warps, ", shape.rowTilesPerCta, " x 16-row tiles x ", shape.keyGroups,
             " key groups per CTA, ", tileKeys, "-key tiles, ", kernel.variant.stages, " stages, ", chunks,
             " KV chunks", merge, ", ", ctasPerSM, " CTAs/SM; fp32 accumulate; deterministic");
  return true;
}

bool checkProblem(const AttnProblem &p, std::string *whyNot) {
  if (p.seqQ > kMaxSplitKvQueries) {
    *whyNot = concat("seqQ ", p.seqQ, ": the split-KV decode kernels take 1..", kMaxSplitKvQueries,
                     " query tokens per sequence");
    return false;
  }
  if (p.ragged) {
    *whyNot = "ragged Q: the CUDA decode takes a dense Q [batch, heads, seqQ, headDim]";
    return false;
  }
  return true;
}

// The decode kernel, and for a separate merge its kernel. launchKernel(params, dev, stream) runs the kernel.
template <typename LaunchKernel>
cudaError_t launchPlanned(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                          void *workspace, LaunchKernel &&launchKernel, cudaStream_t stream) {
  DecodeParams d;
  cudaError_t err = buildDecodeParams(p, plan, buf, workspace, &d);
  if (err != cudaSuccess) return err;
  err = launchKernel(d, dev, stream);
  if (err != cudaSuccess || plan.numChunks == 1 || d.mergeCounts || d.clusterMerge) return err;
  // A programmatic dependent only where the kernels' code waits for its primary (griddepcontrol, sm90 code).
  return launchDecodeMergeKernel(p.dtype, d, dev.portableHasSm90(), stream);
}

// FLASHATTN_DECODE_LOADER, read once: which loader where the planner would choose.
enum class LoaderOverride { kAuto, kTensor, kCpAsync, kCpAsyncTwoStages };
LoaderOverride loaderOverride() {
  static const LoaderOverride value = [] {
    if (knobIs(Knob::DecodeLoader, "tensor")) return LoaderOverride::kTensor;
    if (knobIs(Knob::DecodeLoader, "cp.async")) return LoaderOverride::kCpAsync;
    if (knobIs(Knob::DecodeLoader, "cp.async-2")) return LoaderOverride::kCpAsyncTwoStages;
    return LoaderOverride::kAuto;
  }();
  return value;
}

// Pages that are pieces of a key tile come by one tensor copy per page and 64-column box (16 a tile at page 16)
// against cp.async's row gathers. H200 (GQA 32/8 D128, page 16), since the producer builds a piece's coordinates
// from masks (1f85f3b): the copies stream at 0.99-1.00x the gathers where a CTA walks 64 or more tiles (both now
// near the dense rate), 1.11x at ~32 (B1 L64k, B8 L8k) and 0.97x at 4 (B1 L8k), whose first tiles wait on their
// page reads. The step from 4 to 32 tiles was not measured finer. Pages of 8 (32 copies a tile) stay on cp.async.
constexpr int64_t kPagePiecesMinTiles = 16;
constexpr int kPagePiecesMax = 4;

// Key tiles per chunk of the plan planKernel would make for this problem on `kernel` (its tileKeys resolved).
int64_t tilesPerChunk(const DeviceInfo &dev, const AttnProblem &p, const PlannedKernel &kernel, const Shape &shape,
                      int tileKeys) {
  Variant v = kernel.variant;
  v.tileKeys = tileKeys;
  const int perSM = std::max(1, kInstances[kernel.instance].occupancy(dev, kernel.libraryVariant, shape.rowTilesPerCta));
  const int64_t tiles = std::max<int64_t>(1, (p.seqK + v.tileKeys - 1) / v.tileKeys);
  return tiles / kvChunks(dev, p, v, shape, perSM);
}

bool planDecode(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (!checkProblem(p, whyNot)) return false;
  const int index = findInstance(p.dtype, p.headDim);
  if (index < 0) {
    *whyNot = concat("headDim ", p.headDim, " with ", dtypeName(p.dtype), ": this build's CUDA decode has head dims ",
                     generated::kDecodeInstances.headDims(p.dtype), " for ", dtypeName(p.dtype));
    return false;
  }
  PlannedKernel kernel;
  kernel.instance = index;
  kernel.headDim = kInstances[index].headDim;
  // The tensor loader where it serves (paged caches: where a page holds whole tiles, or where pages are pieces of a
  // tile and the chunks are long), else cp.async.
  kernel.libraryVariant = p.paged ? kLoaderPagedTensorMap : kLoaderTensorMap;
  kernel.variant = libraryVariant(kernel.libraryVariant);
  {
    const Shape shape = shapeOf(p, kernel.headDim, kernel.variant);
    std::string ignored;
    const int tileKeys = resolvedTileKeys(kernel.variant, int(dtypeSize(p.dtype)), kernel.headDim);
    const LoaderOverride pin = loaderOverride();
    const int pieces = p.paged ? pagedTensorPieces(p.pageSize, tileKeys) : 1;
    const bool shortPages = pieces != 1 && pin == LoaderOverride::kAuto &&
                            (pieces == 0 || pieces > kPagePiecesMax ||
                             tilesPerChunk(dev, p, kernel, shape, tileKeys) < kPagePiecesMinTiles);
    if (pin == LoaderOverride::kCpAsync || pin == LoaderOverride::kCpAsyncTwoStages || shortPages ||
        !tensorLoaderServes(dev, p, kernel.headDim, shape.kvHeads, tileKeys, kernel.variant.loader, &ignored)) {
      kernel.libraryVariant = kLoaderCpAsync;
      kernel.variant = libraryVariant(kLoaderCpAsync);
    }
  }
  // Three cp.async stages past the device's shared memory per block (sm86/sm89 at head dim 128 and up): two.
  const int elementBytes = int(dtypeSize(p.dtype));
  if (!isTensorLoader(kernel.variant.loader) && twoStagesCompiled(elementBytes, kernel.headDim)) {
    Variant threeStages = kernel.variant;
    threeStages.tileKeys = resolvedTileKeys(threeStages, elementBytes, kernel.headDim);
    if (loaderOverride() == LoaderOverride::kCpAsyncTwoStages ||
        shapeOf(p, kernel.headDim, threeStages).smem.total > dev.smemPerBlockOptin) {
      kernel.libraryVariant = kVariantTwoStages;
      kernel.variant = libraryVariant(kVariantTwoStages);
    }
  }
  kernel.merge = kMergeFused;
  kernel.clusterWhereFits = true;
  switch (mergeOverride()) {
    case MergeOverride::kKernel: kernel.merge = kMergeSeparate, kernel.clusterWhereFits = false; break;
    case MergeOverride::kFused: kernel.merge = kMergeFused, kernel.clusterWhereFits = false; break;
    case MergeOverride::kCluster: kernel.clusterWherever = true; break;
    case MergeOverride::kAuto: break;
  }
  const Instance &inst = kInstances[index];
  auto occupancy = [&](int rowTiles) { return inst.occupancy(dev, kernel.libraryVariant, rowTiles); };
  auto clusterCapacity = [&](int rowTiles, int size) {
    return inst.clusterCapacity(dev, kernel.libraryVariant, rowTiles, size);
  };
  return planKernel(dev, p, kernel, occupancy, clusterCapacity, plan, whyNot);
}

}  // namespace

MergeOverride mergeOverride() {
  static const MergeOverride value = [] {
    const char *env = knobValue(Knob::DecodeMerge);
    if (env == nullptr) return MergeOverride::kAuto;
    if (std::strcmp(env, "kernel") == 0) return MergeOverride::kKernel;
    if (std::strcmp(env, "fused") == 0) return MergeOverride::kFused;
    if (std::strcmp(env, "cluster") == 0) return MergeOverride::kCluster;
    return MergeOverride::kAuto;
  }();
  return value;
}

// The map of one dense K or V cache: dimension 0 the head dim (64-column boxes, 128-byte swizzle), then keys, KV heads
// and batches by increasing stride (dimensions of size 1 last), boxes of tileKeys keys.
bool encodeCacheMap(const CacheMapKey &key, CUtensorMap *map, TensorMapSlots *slots) {
  const uint64_t elementBytes = key.dtype == int64_t(DType::FP32) ? 4 : 2;
  if (elementBytes != 2 || key.seqK < 1 || key.rowStride <= 0) return false;
  struct Dim {
    uint64_t size, stride;
    int which;  // 0 key, 1 KV head, 2 batch
  };
  Dim dims[3] = {{uint64_t(key.seqK), uint64_t(key.rowStride) * elementBytes, 0},
                 {uint64_t(std::max<int64_t>(key.kvHeads, 1)), uint64_t(key.headStride) * elementBytes, 1},
                 {uint64_t(std::max<int64_t>(key.batch, 1)), uint64_t(key.batchStride) * elementBytes, 2}};
  uint64_t extent = dims[0].size * dims[0].stride;
  for (const Dim &d : dims)
    if (d.size > 1) extent = std::max(extent, d.size * d.stride);
  for (int i = 1; i < 3; ++i)
    if (dims[i].size == 1) dims[i].stride = extent;  // never stepped; placed after the others
  // A stable insertion sort: std::stable_sort takes a heap buffer, and this runs on every launch.
  const auto before = [](const Dim &a, const Dim &b) {
    if ((a.size == 1) != (b.size == 1)) return b.size == 1;
    return a.stride < b.stride;
  };
  for (int i = 1; i < 3; ++i)
    for (int j = i; j > 0 && before(dims[j], dims[j - 1]); --j) std::swap(dims[j], dims[j - 1]);
  // Dimension 0: the head dim, or for the rank-5 view its first 64 columns, the boxes being a dimension of their own
  // (stride 128 bytes) right after the keys (shared layout [box][key][64]).
  const bool rank5 = key.view != kMapBoxes;
  const int64_t boxes = key.headDim / 64;
  if (rank5 && (key.headDim % 64 != 0 || boxes < 1)) return false;
  TiledMapSpec spec;
  spec.base = key.base;
  spec.dtype = DType(key.dtype);
  spec.rank = rank5 ? 5 : 4;
  spec.dims[0] = uint64_t(rank5 ? 64 : key.headDim);
  spec.boxes[0] = 64;
  for (int i = 1; i < 5; ++i) spec.dims[i] = 1, spec.boxes[i] = 1;
  TensorMapSlots s;
  s.rank = int8_t(spec.rank);
  int next = 1;
  for (int i = 0; i < 3; ++i) {
    spec.dims[next] = dims[i].size;
    spec.strides[next] = dims[i].stride;
    if (dims[i].which == 0) s.key = int8_t(next), spec.boxes[next] = uint32_t(key.tileKeys);
    if (dims[i].which == 1) s.head = int8_t(next);
    if (dims[i].which == 2) s.batch = int8_t(next);
    ++next;
    if (dims[i].which == 0 && rank5) {
      spec.dims[next] = uint64_t(boxes);
      spec.strides[next] = 64 * elementBytes;
      spec.boxes[next] = uint32_t(boxes);
      ++next;
    }
  }
  // 128-byte L2 promotion: every request of these copies is a whole 128-byte line already; with 256-byte promotion the
  // decode's own copies stream at 4.19 TB/s instead of 4.62 on an H200 (NOTES.md, fifth pass).
  *slots = s;
  return encodeTiledMap(spec, map);
}

CacheMapKey cacheMapKey(const AttnProblem &p, const void *base, const Layout &layout, int64_t kvHeads, int tileKeys,
                        int view) {
  CacheMapKey k;
  k.view = view;
  k.base = base;
  k.dtype = int64_t(p.dtype);
  k.tileKeys = p.paged ? tileKeys / std::max(pagedTensorPieces(p.pageSize, tileKeys), 1) : tileKeys;
  k.headDim = p.headDim;
  k.seqK = p.paged ? p.pageSize : p.seqK;
  k.kvHeads = kvHeads;
  k.batch = p.paged ? p.numPages : p.batch;
  k.rowStride = layout.row;
  k.headStride = layout.head;
  k.batchStride = layout.batch;
  return k;
}

void fillProblemParams(const AttnProblem &p, const AttnBuffers &buf, const Plan &plan, void *workspace,
                       int64_t kvHeads, DecodeParams *params) {
  DecodeParams &d = *params;
  d = DecodeParams{};
  d.q = buf.q;
  d.k = buf.k;
  d.v = buf.v;
  d.o = buf.o;
  d.lse = p.hasLse ? buf.lse : nullptr;
  if (plan.numChunks > 1) {
    d.partialO = static_cast<float *>(plan.regionPointer(kPartialORegion, workspace));
    d.partialLse = static_cast<float *>(plan.regionPointer(kPartialLseRegion, workspace));
  }
  d.qBatch = p.q.batch, d.qHead = p.q.head, d.qRow = p.q.row;
  d.kBatch = p.k.batch, d.kHead = p.k.head, d.kRow = p.k.row;
  d.vBatch = p.v.batch, d.vHead = p.v.head, d.vRow = p.v.row;
  d.oBatch = p.o.batch, d.oHead = p.o.head, d.oRow = p.o.row;
  d.lseBatch = p.lse.batch, d.lseHead = p.lse.head, d.lseRow = p.lse.row;
  d.batch = int32_t(p.batch);
  d.heads = int32_t(p.heads);
  d.kvHeads = int32_t(kvHeads);
  d.groupSize = int32_t(p.heads / kvHeads);
  d.seqQ = int32_t(p.seqQ);
  d.seqK = int32_t(p.seqK);
  d.headDim = int32_t(p.headDim);
  d.rows = int32_t(p.heads / kvHeads * p.seqQ);
  d.numChunks = plan.numChunks;
  d.seqlensK = p.seqlensK;
  d.paged = p.paged;
  d.cache = paged::pagedCacheOf(p);
  d.scale = p.scale;
  d.softcap = p.softcap;
  d.mask = int32_t(p.mask);
  d.windowLeft = p.windowLeft;
  d.windowRight = p.windowRight;
  d.alibiSlopes = p.alibiSlopes;
  d.alibiBatchStride = p.alibiBatchStride;
  d.sinks = p.sinks;
}

cudaError_t buildDecodeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace,
                              DecodeParams *params) {
  const PlannedKernel kernel = fromConfig(plan.as<DecodeConfig>());
  const Shape shape = shapeOf(p, kernel.headDim, kernel.variant, kernel.rowTileCap);
  DecodeParams &d = *params;
  fillProblemParams(p, buf, plan, workspace, shape.kvHeads, &d);
  d.clusterMerge = kernel.merge == kMergeCluster && plan.numChunks > 1;
  if (d.clusterMerge) d.partialO = nullptr, d.partialLse = nullptr;
  if (plan.numChunks > 1 && kernel.merge == kMergeFused) {
    d.mergeCounts = static_cast<unsigned long long *>(plan.regionPointer(kMergeCountsRegion, workspace));
    d.mergeFlags = static_cast<uint32_t *>(plan.regionPointer(kMergeFlagsRegion, workspace));
  }
  d.rowTilesPerCta = shape.rowTilesPerCta;
  d.keyGroups = shape.keyGroups;
  d.rowBlocks = int32_t(shape.rowBlocks);
  if (p.paged && isTensorLoader(kernel.variant.loader))
    d.pagePieces = pagedTensorPieces(p.pageSize, kernel.variant.tileKeys);
  if (isTensorLoader(kernel.variant.loader)) {
    if (!encodeCacheMaps(p, buf.k, buf.v, shape.kvHeads, kernel.variant.tileKeys, kernel.variant.loader,
                         kernel.headDim, &d))
      return cudaErrorInvalidValue;  // the plan tried these strides; only a misaligned address gets here
  }
  return cudaSuccess;
}

}  // namespace decode

cudaError_t launchDecode(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                         void *workspace, cudaStream_t stream) {
  using namespace decode;
  const PlannedKernel kernel = fromConfig(plan.as<DecodeConfig>());
  if (kernel.instance >= kInstanceCount || kernel.libraryVariant < 0 || plan.numChunks < 1)
    return cudaErrorInvalidValue;
  const Instance &inst = kInstances[kernel.instance];
  auto launchKernel = [&](const DecodeParams &d, const DeviceInfo &device, cudaStream_t s) {
    return inst.launch(d, kernel.libraryVariant, device, s);
  };
  return launchPlanned(dev, p, plan, buf, workspace, launchKernel, stream);
}

namespace {

Verdict planDecodeFamily(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (decodeRunsAsForward(p)) return Verdict::NotForThis;  // the forward's, through planDecodeAsForward
  if (dev.arch() < 80) {
    *whyNot = concat("the decode kernels need compute capability 8.0 or newer; device is sm", dev.arch());
    return Verdict::Refused;
  }
  // Paged caches: Layout.batch is the page stride, always walked.
  const bool batchUsed = !p.ragged && p.batch > 1;
  if (!vectorStridesFit(p.dtype,
                        {{"Q", p.q, batchUsed, p.heads > 1},
                         {"K", p.k, batchUsed || p.paged, p.kvHeads > 1},
                         {"V", p.v, batchUsed || p.paged, p.kvHeads > 1},
                         {"O", p.o, batchUsed, p.heads > 1}},
                        "decode kernels", whyNot))
    return Verdict::Refused;
  if (!p.buffersAligned16) {
    *whyNot = "a data pointer is not 16-byte aligned: the decode kernels move rows in 16-byte vectors";
    return Verdict::Refused;
  }
  return decode::planDecode(dev, p, plan, whyNot) ? Verdict::Served : Verdict::Refused;
}

// DecodeChunk past the split-KV kernels' 16 query tokens (or head dims they do not take: Q/K's and V/O's apart, not
// multiples of 8): the forward over the same cache, which that many rows keep busy without a split. The forward chooser plans it (the same problem as a Forward), so the family, tile, workspace
// (none of its own) and refusals are the forward's; the plan keeps the family that launches it.
Verdict planDecodeAsForward(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot) {
  if (!decodeRunsAsForward(p)) return Verdict::NotForThis;
  AttnProblem forward = p;
  forward.op = Op::Forward;
  forward.numChunks = 0;
  Plan inner;
  if (!choose(dev, forward, &inner, whyNot)) return Verdict::Refused;
  ForwardConfig config = inner.as<ForwardConfig>();
  config.forwardFamily = inner.kernel;
  inner.config = config;
  inner.numChunks = 1;
  inner.description = concat(kernelIdName(KernelId::DecodeAsForward), ": ", p.seqQ, " query tokens per sequence",
                             p.headDimV != p.headDim ? concat(", head dims ", p.headDim, "/", p.headDimV) : "",
                             p.headDim % 8 != 0 ? concat(", headDim ", p.headDim, " not a multiple of 8") : "",
                             " run as the forward (one pass over the keys, numChunks not used): ",
                             inner.description);
  *plan = std::move(inner);
  return Verdict::Served;
}

cudaError_t launchDecodeAsForward(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan,
                                  const AttnBuffers &buf, void *workspace, cudaStream_t stream) {
  const Family *forward = findFamily(plan.as<ForwardConfig>().forwardFamily);
  if (forward == nullptr || forward->op != Op::Forward) return cudaErrorInvalidValue;
  AttnProblem f = p;
  f.op = Op::Forward;
  return forward->launch(dev, f, plan, buf, workspace, stream);
}

}  // namespace

FLASHATTN_REGISTER_FAMILY(KernelId::DecodeSplitKv, Op::DecodeChunk, 100, true, "split-KV decode", planDecodeFamily,
                          launchDecode);
// Each of the two answers only its own query-token counts (the other's are NotForThis), so a refusal names the reason
// of the one that could serve; this one is tried first, its check being the cheaper.
FLASHATTN_REGISTER_FAMILY(KernelId::DecodeAsForward, Op::DecodeChunk, 90, true, "forward for long query chunks",
                          planDecodeAsForward, launchDecodeAsForward);

}  // namespace flashattn::cuda
