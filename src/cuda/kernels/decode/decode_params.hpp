// SPDX-License-Identifier: BSD-3-Clause
// What a split-KV decode kernel instance receives (by value, its only parameter), and the shape rules that the plan
// (host) and the kernel (device) must agree on: kernel variants, tile sizes, shared-memory layout and the chunk split.
//
// A CTA serves one (batch, KV head, chunk, row block). Its rows are the query rows of every head of the KV head's GQA
// group and every query token: row r is (group head r / seqQ, token r % seqQ). Rows are cut into 16-row tiles (one
// mma.sync M), up to four per CTA; the warps left over split each KV tile's 16-key sub-tiles between them.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte value; the driver is reached through cudaGetDriverEntryPoint)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/fast_divisor.hpp"
#include "cuda/kernels/paged_kv.hpp"

namespace flashattn::cuda {
struct DeviceInfo;
}

namespace flashattn::cuda::decode {

constexpr int kMaxRowTilesPerCta = 4;
constexpr int kRowsPerTile = 16;

// How K/V tiles reach shared memory.
//   CpAsync: every thread issues 16-byte cp.async copies into padded rows (sm80+; any cache: dense or paged, any
//     element type).
//   TensorMap: a producer warp beside the Warps consumer warps issues cp.async.bulk.tensor copies through tensor maps
//     of the cache (sm90+, FP16/BF16, kernel head dim a multiple of 64; paged caches with pages of a multiple of 8
//     keys that divide or are divided by the tile, see pagedTensorPieces), 128-byte swizzled. Each stage has a
//     "full" mbarrier (the copies' bytes) and an "empty" one (every consumer warp arrives once it has read the stage),
//     so the producer refills a stage as soon as it is free and no warp waits for the slowest one at a CTA barrier per
//     tile. One copy takes a whole K (or V) tile where the encoder takes a {64 columns, keys, boxes} view of the cache
//     and the problem's head dim is the kernel's; otherwise one copy per 64-column box (the same shared layout).
//     Columns past the head dim and keys past the capacity arrive as zeros.
//   PagedTensorMap: the same for paged caches, a kernel of its own so that the dense one carries none of the block
//     table's work (its paged branches cost the dense cache 3-5% of its rate on an H200, 16% at B1 L8k).
enum Loader : int { kLoaderCpAsync = 0, kLoaderTensorMap = 1, kLoaderPagedTensorMap = 2 };
constexpr bool isTensorLoader(int loader) { return loader == kLoaderTensorMap || loader == kLoaderPagedTensorMap; }
// Threads of a CTA: the consumer warps (Variant::warps), plus the tensor-map loader's producer warp.
constexpr int ctaThreads(int warps, int loader) { return (warps + (isTensorLoader(loader) ? 1 : 0)) * 32; }

// How the partial states of a split KV range are combined.
//   Fused: the decode kernel merges: each CTA publishes its partial state and counts itself in on its unit's tagged
//     word in the workspace (MergeCount); the CTA that completes the count merges the chunks in chunk order and leaves
//     the word at zero for the next launch. A word without the tag (a new workspace, or one last used for something
//     else) sends the launch to flags instead (MergeFlag: the CTA that sees every chunk's flag raised merges, and
//     tags the word): no memset per call, whatever the workspace held before.
//   Separate: a merge kernel launched after the decode kernel (as a programmatic dependent on sm90).
//   Cluster (sm90, <= kMaxClusterChunks chunks): the chunks of a unit are one thread-block cluster; each CTA parks its
//     warps' states in its shared memory, and after a cluster barrier the CTAs merge a share of the rows each, reading
//     every chunk's states through distributed shared memory: one launch, no partial states in global memory.
enum MergeMode : int { kMergeFused = 0, kMergeSeparate = 1, kMergeCluster = 2 };
constexpr int kMaxClusterChunks = 16;  // the largest (non-portable) cluster on sm90

// The workspace regions of a split decode (Plan::regions): FP32 partial O per chunk, each partial state's max and sum
// (kept apart so the merge is exact at any logit magnitude), and the fused merge's count words and flags.
enum DecodeRegion : int { kPartialORegion = 0, kPartialLseRegion = 1, kMergeCountsRegion = 2, kMergeFlagsRegion = 3 };

// The fused merge's words. A count word is kMergeTag in its high half and the arrivals so far in its low half; every
// launch leaves it at kMergeCountIdle. A flag ([unit][chunk]) is kMergeFlagRaised when raised, anything else when
// lowered; a launch that raises flags lowers them all before it ends. Both values are NaN payloads no kernel computes
// (hardware NaNs are canonical), so leftover partial states or LSEs of another plan never read as a tagged word or a
// raised flag; and they differ, because another plan's flags may lie on this plan's idle count words (whose high
// halves are kMergeTag). Only a launch that never completed could leave a count or a raised flag behind, and that
// loses the CUDA context.
constexpr uint32_t kMergeTag = 0x7fd3c0deu;
constexpr uint32_t kMergeFlagRaised = 0x7fd3f1a6u;
constexpr unsigned long long kMergeCountIdle = static_cast<unsigned long long>(kMergeTag) << 32;

// One compiled kernel configuration. tileKeys 0 means defaultTileKeys of the instance.
struct Variant {
  int warps = 4;
  int tileKeys = 0;
  int stages = 3;
  int loader = kLoaderCpAsync;
};

// Keys per pipeline stage: about 16 KB of K (and as much of V) per stage, a multiple of the 16-key sub-tile.
constexpr int defaultTileKeys(int elementBytes, int headDim) {
  const int rowBytes = elementBytes * headDim;
  return rowBytes <= 256 ? 64 : rowBytes <= 512 ? 32 : 16;
}

constexpr int resolvedTileKeys(const Variant &v, int elementBytes, int headDim) {
  return v.tileKeys > 0 ? v.tileKeys : defaultTileKeys(elementBytes, headDim);
}

// The variants the library instances compile, by index: the portable one first (any sm80+ GPU), then the Hopper ones
// (dense and paged caches), whose index is their loader; last the portable one with a two-stage ring, for the GPUs
// whose 99 KB of shared memory per block do not hold three stages of the wider instances (sm86, sm89: FP16/BF16 head
// dim 128 needs 106 KB with three).
constexpr int kVariantTwoStages = 3;
constexpr int kLibraryVariantCount = 4;
constexpr Variant libraryVariant(int index) {
  return index == kVariantTwoStages ? Variant{4, 0, 2, kLoaderCpAsync} : Variant{4, 0, 3, index};
}
static_assert(libraryVariant(kLoaderCpAsync).loader == kLoaderCpAsync &&
                  libraryVariant(kLoaderPagedTensorMap).loader == kLoaderPagedTensorMap,
              "a Hopper variant's index is its loader");
// The library variant of these warps, stages and loader, or -1 (a plan's DecodeConfig names its variant so).
constexpr int libraryVariantIndex(const Variant &v) {
  for (int i = 0; i < kLibraryVariantCount; ++i) {
    const Variant l = libraryVariant(i);
    if (l.warps == v.warps && l.stages == v.stages && l.loader == v.loader) return i;
  }
  return -1;
}

// Shared-memory row of a K, V or Q tile: the instance head dim plus 16 bytes, so the 8 rows one ldmatrix (or one
// 16-byte cp.async wavefront) touches start in 8 distinct 16-byte bank groups.
constexpr int smemRowElements(int elementBytes, int headDim) { return headDim + 16 / elementBytes; }

// Whether a kernel of this head dim and element size can use the tensor loader.
constexpr bool tensorLoadable(int elementBytes, int headDim) { return elementBytes == 2 && headDim % 64 == 0; }

// The tensor loader's copies per key tile of a paged cache (pages of pageSize keys; tiles start at multiples of
// tileKeys): one where a page holds whole tiles, tileKeys / pageSize where a tile holds whole pages, 0 where neither
// (or the pieces would be shorter than the 8 rows of one swizzle pattern): those caches take the cp.async loader.
constexpr int pagedTensorPieces(int64_t pageSize, int tileKeys) {
  return pageSize % 8 != 0                ? 0
         : pageSize % tileKeys == 0       ? 1
         : tileKeys % pageSize == 0       ? int(tileKeys / pageSize)
                                          : 0;
}

// Byte layout of the dynamic shared memory. The epilogue's per-warp partial states reuse the K/V stages.
//   cp.async: a stage is [2 (K, V)][tileKeys][rowElements] (padded rows).
//   tensor: a stage is [2 (K, V)][headDim / 64 boxes][tileKeys][64 elements], 128-byte swizzled; the region starts at the next 1024-byte boundary of the shared window at run time (the swizzle
//     pattern is 1024 bytes), hence the slack.
struct SmemLayout {
  std::size_t q = 0;          // [rowsPerCta][rowElements]
  std::size_t kv = 0;         // K/V stages (tensor: before the run-time 1024-byte alignment)
  std::size_t offsets = 0;    // cp.async: [2][tileKeys] pairs of int64 (K, V element offsets), by tile parity
  std::size_t validMask = 0;  // [maskSlots][2] uint32: which keys of a tile exist (in range, valid page)
  std::size_t pageIds = 0;    // paged: [pageIdSlots][max(tileKeys, 32)] int32, block-table entries read ahead
  std::size_t barriers = 0;   // tensor: [stages] mbarriers (full), then [stages] (empty)
  std::size_t pScratch = 0;   // FP32 engine: [warps][16][16 + 4] floats of P
  std::size_t total = 0;
  std::size_t kvBytes = 0;
};

constexpr std::size_t alignUp(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

constexpr int maskSlots(int stages, int loader) { return isTensorLoader(loader) ? stages : stages + 1; }
// The ring of block-table entries of the cp.async loader (one per key of a tile) and of the paged tensor-map loader's
// producer lanes (one per piece): tile y's are copied with tile y - stages and read before tile y is issued, so
// stages + 1 slots keep a slot from being refilled while a thread may still read it.
constexpr int pageIdSlots(int stages) { return stages + 1; }

constexpr SmemLayout smemLayout(int elementBytes, int headDim, int warps, int tileKeys, int stages, int loader,
                                int rowTilesPerCta) {
  SmemLayout s;
  const std::size_t row = std::size_t(smemRowElements(elementBytes, headDim)) * std::size_t(elementBytes);
  const std::size_t keys = std::size_t(tileKeys);
  const std::size_t qBytes = std::size_t(rowTilesPerCta) * kRowsPerTile * row;
  const bool tensor = isTensorLoader(loader);
  const std::size_t stageBytes = tensor ? std::size_t(stages) * 2 * keys * std::size_t(headDim) * elementBytes + 1024
                                        : std::size_t(stages) * 2 * keys * row;
  // Epilogue: per warp 16 rows of (headDim + 4) floats plus (m, l) per row; then the cluster merge's (m, l) per row of
  // the CTA's combined state.
  const std::size_t epilogueBytes = std::size_t(warps) * kRowsPerTile * (std::size_t(headDim) + 4) * 4 +
                                    std::size_t(warps) * kRowsPerTile * 2 * 4 +
                                    std::size_t(kMaxRowTilesPerCta) * kRowsPerTile * 2 * 4;
  s.q = 0;
  s.kv = alignUp(qBytes, 128);
  s.kvBytes = stageBytes > epilogueBytes ? stageBytes : epilogueBytes;
  s.offsets = alignUp(s.kv + s.kvBytes, 16);
  s.validMask = s.offsets + (tensor ? 0 : 2 * keys * 16);
  s.pageIds = alignUp(s.validMask + std::size_t(maskSlots(stages, loader)) * 2 * 4, 16);
  const std::size_t pageIdBytes =
      loader == kLoaderTensorMap ? 0 : std::size_t(pageIdSlots(stages)) * std::max<std::size_t>(keys, 32) * 4;
  s.barriers = alignUp(s.pageIds + pageIdBytes, 16);
  const std::size_t barrierCount = tensor ? 2 * std::size_t(stages) : 0;
  s.pScratch = alignUp(s.barriers + barrierCount * 8, 16);
  const std::size_t pBytes = elementBytes == 4 ? std::size_t(warps) * kRowsPerTile * (16 + 4) * 4 : 0;
  s.total = alignUp(s.pScratch + pBytes, 128);
  return s;
}

// The smallest opt-in shared memory per block of the GPUs the portable kernels run on (sm86, sm89: 99 KB).
constexpr std::size_t kSmallestSmemPerBlock = 101376;
// Whether an instance compiles the two-stage variant: only where the three-stage one may not fit kSmallestSmemPerBlock
// (its largest row tiling); elsewhere that index stands for the three-stage variant, which every sm80+ GPU holds.
constexpr bool twoStagesCompiled(int elementBytes, int headDim) {
  const Variant v = libraryVariant(kLoaderCpAsync);
  return smemLayout(elementBytes, headDim, v.warps, resolvedTileKeys(v, elementBytes, headDim), v.stages, v.loader,
                    kMaxRowTilesPerCta)
             .total > kSmallestSmemPerBlock;
}

// Which tensor-map dimension (1..3; 0 is the head dim) holds the key, KV head and batch coordinate: the map lists them
// by increasing stride, as the tensor-map encoder wants.
// Rank 5 maps (the wide view) also have a dimension of the 64-column boxes of a row (stride 128 bytes); its
// coordinate is always 0, since one copy takes every box.
struct TensorMapSlots {
  int8_t key = 1;
  int8_t head = 2;
  int8_t batch = 3;
  int8_t rank = 4;
};

// The kernel reads its parameters through the constant cache, one miss per line first touched, and each miss stalls the
// warp: the fields each phase reads are kept together, in the order the phases run (the prologue's and Q's in the 128
// bytes before the tensor maps; NOTES.md eighth pass).
struct DecodeParams {
  // Prologue: which unit and chunk (block index divided without a division instruction), its key range, the first
  // copies; then Q and the rows' masks.
  const int32_t *seqlensK = nullptr;
  int64_t windowLeft = -1;
  int64_t windowRight = -1;
  FastDivisor numChunks = 1;
  FastDivisor rowBlocks = 1;  // CTAs along the rows of one (batch, KV head)
  FastDivisor kvHeads = 1;    // effective: 1 when K and V broadcast one head (head stride 0)
  int32_t seqK = 0;           // capacity; per-sequence lengths are clamped to it
  int32_t seqQ = 0;
  int32_t mask = 0;  // flashattn::Mask
  int32_t rowTilesPerCta = 1;
  TensorMapSlots kSlots, vSlots;
  bool clusterMerge = false;  // kMergeCluster: launched in clusters of numChunks CTAs, the chunk varying fastest
  const void *q = nullptr;
  int64_t qBatch = 0, qHead = 0, qRow = 0;
  int32_t groupSize = 0;  // heads / kvHeads
  int32_t rows = 0;       // groupSize * seqQ rows per (batch, KV head)

  CUtensorMap kMap = {};  // tensor loader only (otherwise not read)
  CUtensorMap vMap = {};

  // The main loop: the consumers' split, scores, the other loaders, ALiBi.
  int32_t keyGroups = 4;  // warps sharing one row tile, each taking every keyGroups-th 16-key sub-tile
  int32_t headDim = 0;    // the problem's; the instance may be wider (zero-filled columns)
  float scale = 1.f;
  float softcap = 0.f;
  const void *k = nullptr;
  const void *v = nullptr;
  int64_t kBatch = 0, kHead = 0, kRow = 0;  // paged: kBatch is the page stride, kRow the row stride in a page
  int64_t vBatch = 0, vHead = 0, vRow = 0;
  const float *alibiSlopes = nullptr;
  int64_t alibiBatchStride = 0;
  const float *sinks = nullptr;  // [heads]: joins each row's state once, where O and LSE are finished
  bool paged = false;
  int32_t pagePieces = 1;   // tensor loader, paged: copies (pages or slices of one) per key tile
  paged::PagedCache cache;  // paged caches: the address rule's table, page size and pool

  // Epilogue and merge.
  int32_t batch = 0;
  int32_t heads = 0;
  float *partialO = nullptr;    // numChunks > 1: [chunk][batch][heads][seqQ][headDim] FP32
  float *partialLse = nullptr;  // numChunks > 1: [chunk][batch][heads][seqQ] x (max in base-2 logit units, sum)
  unsigned long long *mergeCounts = nullptr;  // fused merge: [batch][kvHeads][rowBlocks] tagged counts (kMergeTag)
  uint32_t *mergeFlags = nullptr;             // fused merge: [batch][kvHeads][rowBlocks][numChunks] raised flags
  void *o = nullptr;
  float *lse = nullptr;  // nullptr: no LSE output
  int64_t oBatch = 0, oHead = 0, oRow = 0;
  int64_t lseBatch = 0, lseHead = 0, lseRow = 0;
};
static_assert(offsetof(DecodeParams, kMap) == 128, "the prologue's and Q's fields fill the 128 bytes before the maps");

// Chunk c of numChunks over `tiles` key tiles: the first tiles % n chunks take one tile more than the others. In 32
// bits (tiles < 2^31, as FastDivisor needs: the planner caps the cache at INT32_MAX keys) and without a division
// instruction.
__host__ __device__ inline int chunkTileBegin(int chunk, int tiles, const FastDivisor &numChunks) {
  const int share = numChunks.divide(tiles);
  const int extra = numChunks.remainder(tiles, share);
  return chunk * share + (chunk < extra ? chunk : extra);
}

// Chunk count: as many chunks as fit beside the problem's units in one wave of `slots` CTAs, at least two key tiles
// each (H200 sweep in NOTES.md: every count that spills into a second, partial wave was 10-30% slower). A count just
// over 32 is trimmed to 32, which the merge reads in one pass. The slots: every resident CTA for the loaders that keep
// Stages - 1 tiles in flight (counts below one full wave lost up to 10%), one CTA per SM for the producer-warp loader,
// whose CTA has its whole ring in flight (B1 L8k / L64k / L128k: 16 chunks beat 32 by 8 / 3.5 / 1.3%, B8 L8k 2 beat 4
// by 1.6%).
inline int64_t chooseChunks(int64_t units, int64_t tiles, int64_t slots) {
  int64_t chunks = std::max<int64_t>(1, slots / std::max<int64_t>(units, 1));
  chunks = std::min(chunks, std::max<int64_t>(1, tiles / 2));
  if (chunks > 32 && chunks <= 36) chunks = 32;
  return std::min<int64_t>(chunks, 1024);
}

// Tensor maps of the caches (the tensor loader here, and the wgmma decode of decode_sm90/).

// How a map views a row: 64-column boxes (one copy per box), or the rank-5 wide view whose one copy takes every box of
// a tile, landing them one after another ([box][key][64], as the boxes do).
enum MapView : int { kMapBoxes = 0, kMapWide = 1 };

// Everything a cache's tensor map depends on (a map is a pure function of it).
struct CacheMapKey {
  const void *base = nullptr;
  int64_t dtype = 0, tileKeys = 0, headDim = 0, seqK = 0, kvHeads = 0, batch = 0;
  int64_t rowStride = 0, headStride = 0, batchStride = 0;  // elements
  int64_t view = 0;  // MapView
};

// The map of one K or V cache, and which map dimension holds the key, KV head and batch (decode.cu).
bool encodeCacheMap(const CacheMapKey &key, CUtensorMap *map, TensorMapSlots *slots);

// The key of a cache's map: a dense cache, or a paged one seen as a batch of pages of pageSize keys whose boxes are a
// piece of a tile (a page, or the tile where a page holds whole tiles).
CacheMapKey cacheMapKey(const AttnProblem &p, const void *base, const Layout &layout, int64_t kvHeads, int tileKeys,
                        int view);

// The KV heads a decode kernel walks: one where K and V broadcast a single head through a zero head stride (the
// descriptor then says kvHeads == heads), else the problem's.
inline int64_t effectiveKvHeads(const AttnProblem &p) {
  return p.kvHeads > 1 && p.k.head == 0 && p.v.head == 0 ? 1 : p.kvHeads;
}

// What every decode kernel's parameters take from the problem alone: the tensors and their strides, the shape (rows of
// `kvHeads` effective KV heads), lengths, paged cache, mask, scale, softcap, ALiBi, sinks, the chunk count and, for
// more than one chunk, the partial states' workspace regions (kPartialORegion, kPartialLseRegion). The row tiling,
// merge words and tensor maps are the family's to add.
void fillProblemParams(const AttnProblem &p, const AttnBuffers &buf, const Plan &plan, void *workspace,
                       int64_t kvHeads, DecodeParams *params);

// The kernel parameters of a planned problem (tensor maps encoded for the tensor loader).
cudaError_t buildDecodeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace,
                              DecodeParams *params);

// Whether the library merges `chunks` chunks in a cluster rather than in the kernel through the workspace (the fused
// merge). H200, one device call each (NOTES.md, fourth and eighth passes): pairs gain in a cluster (B8 L8k: 72.8-73.1
// us per call against 74.4-75.8 fused); 16-CTA clusters fit only where a board holds every unit's cluster at once (7
// or 14 clusters of 16 on the H200s measured), and then place some chunks two to an SM, whose CTAs the cluster waits
// for; the fused merge has neither limit.
inline bool clusterMergePays(int64_t chunks) { return chunks == 2; }

// FLASHATTN_DECODE_MERGE, read once: how split KV ranges are merged where the planner would choose. "kernel" (the
// separate merge kernel), "fused" (in the decode kernel, tagged counts in the workspace), "cluster" (a cluster of the
// chunks wherever every unit's cluster is resident at once, else fused); unset or anything else: the planner's
// choice. For measurements and for the tests that cover every mode; results are the same to rounding in every mode.
// The wgmma decode has no fused merge: it takes "fused" as the merge kernel.
enum class MergeOverride { kAuto, kKernel, kFused, kCluster };
MergeOverride mergeOverride();

// The separate merge (kMergeSeparate) of a launch's partial states; a programmatic dependent launch on sm90.
cudaError_t launchDecodeMergeKernel(DType dtype, const DecodeParams &params, bool dependentLaunch,
                                    cudaStream_t stream);

// Library instances exist per (element type, head dim); each compiles the libraryVariant()s.
template <typename Element, int HeadDim>
cudaError_t launchDecodeInstance(const DecodeParams &params, int libraryVariantIndex, const DeviceInfo &dev,
                                 cudaStream_t stream);
template <typename Element, int HeadDim>
int occupancyDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta);
// Clusters of clusterSize CTAs (the cluster merge) the device holds at once; 0 when the runtime cannot tell.
template <typename Element, int HeadDim>
int clusterCapacityDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta, int clusterSize);

}  // namespace flashattn::cuda::decode
