// SPDX-License-Identifier: BSD-3-Clause
// Host-visible description of the forward_sm90 kernels: tile configurations, their shared-memory layout and the
// per-instance launch entry point (defined by the generated instance files). The kernels take the portable family's
// ForwardParams, so masks, windows, ragged batches and seqlensK mean exactly what they mean there.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/forward/forward_params.hpp"
#include "cuda/tensor_map.hpp"

namespace flashattn::cuda::forward_sm90 {

using forward::ForwardParams;

// What a kernel receives: the portable family's parameters (queryBlocks counted in this kernel's BlockM) plus the
// order in which the CTAs walk the (sequence, head, query block) tiles.
// With tensor-map loads (Tma), the maps of Q, K and V: [D][rows][heads][batch] of 64-column boxes, BlockM rows (Q) or
// BlockN keys (K, V) each; a ragged tensor is [D][tokens][heads] with a batch of one; a paged cache's K and V are
// [D][rows of a page][heads][pages] of boxes of pageBoxRows keys, so a block is BlockN / pageBoxRows copies a box
// column.
struct KernelParams {
  CUtensorMap qMap = {};
  CUtensorMap kMap = {};
  CUtensorMap vMap = {};
  ForwardParams f;
  int64_t totalTiles = 0;       // batch * heads * queryBlocks
  int64_t pairsPerSection = 1;  // tiles run section by section: this many (sequence, head) pairs, longest first
  // Tma: a sequence's keys may end before the map's rows do (ragged, seqlensK), so the V rows past its end in its last
  // key block are not zeros of the copy engine but whatever memory holds: that block comes by cp.async, zero-filled.
  bool copyTailBlock = false;
  int32_t pageBoxRows = 0;  // paged, Tma: the keys of one page a copy takes (pagedBoxRows)
};

// BlockM = 64 * consumerGroups query rows per CTA, BlockN keys per step, stages K and V slots each,
// threads = 128 * (consumerGroups + 1) (one producer warpgroup).
struct TileConfig {
  int blockN;
  int consumerGroups;
  int stages;
  bool pingPong;     // consumer warpgroups take turns issuing their matrix products
  bool asyncArrive;   // copies signal their barrier as they land (cp.async.mbarrier.arrive) instead of in order
  bool qInRegisters;  // S = Q K^T takes Q as register fragments (fewer shared-memory reads, more registers)
};

// How one launch walks its tiles. persistent: one CTA per SM loops over tiles (the next tile's loads overlap the
// current tile's last products and stores); otherwise one CTA per tile. pairsPerSection 0: as many (sequence, head)
// pairs as keep their K and V within half the L2, so the CTAs running together share K/V in the cache.
struct LaunchOptions {
  bool persistent = true;
  bool tma = false;  // Q, K and V by tensor-map copies (the plan checked that the maps encode)
  bool shortTile = false;  // the instance's shortTileFor tile (dense tensor-map kernel without logit transforms)
  int64_t pairsPerSection = 0;
  int qkWidth = 0;  // the columns S = Q K^T contracts over: the instance's head dim, or its trimmedQKWidth
  int numSMs = 0;
  std::size_t l2Bytes = 0;
};

// The narrower contraction an instance's plain dense kernel is also compiled with (0: none), for problems whose Q/K
// head dim leaves the columns past it zero: S = Q K^T then skips their k-steps (the tensor maps still zero-fill them
// in shared memory; the rest of the kernel is the instance's). d128 at 96: D96 and D72-88 problems, whose S product
// was a quarter zeros; a trimmed kernel per instance would double the forward's compile time for widths no model uses.
constexpr int trimmedQKWidth(int headDim, int headDimV) { return headDim == 128 && headDimV == 128 ? 96 : 0; }

// The tile of each instance head dim, and of the instances whose V/O head dim differs (measurements behind them:
// NOTES.md beside this file). d256's ping-pong: 1.03-1.05x persistent (no mask, S 1k-4k), 0.98-1.01x one CTA per tile.
constexpr TileConfig tileFor(int headDim, int headDimV = 0) {
  // TILE_D192_V128: 128 x 128. O's 64 accumulator registers per thread (96 at d192) leave room for 128-key blocks,
  // and the narrower V slots fit two stages of them.
  if (headDim == 192 && headDimV == 128) return TileConfig{128, 2, 2, true, true, false};
  return headDim <= 64    ? TileConfig{128, 3, 2, true, true, false}     // TILE_D64: 192 x 128
         : headDim <= 128 ? TileConfig{128, 2, 2, true, true, false}     // TILE_D128: 128 x 128
         : headDim <= 192 ? TileConfig{112, 2, 2, true, true, false}     // TILE_D192: 128 x 112
                          : TileConfig{80, 2, 2, true, false, false};    // TILE_D256: 128 x 80
}

// A second tile for short sequences, where a smaller one wastes fewer rows on the partial last block or, causal,
// on the diagonal and the machine sees more tiles; blockN 0 where an instance has none. Only the dense tensor-map
// kernel without logit transforms is compiled with it. When the plan takes it: forward_sm90.cu usesShortTile.
constexpr TileConfig shortTileFor(int headDim, int headDimV = 0) {
  if (headDimV != 0 && headDimV != headDim) return TileConfig{0, 0, 0, false, false, false};
  return headDim == 64    ? TileConfig{128, 2, 3, true, true, false}   // TILE_D64_SHORT: 128 x 128, three stages
         : headDim == 256 ? TileConfig{64, 2, 2, false, false, false}  // TILE_D256_SHORT: 128 x 64
                          : TileConfig{0, 0, 0, false, false, false};
}

// The longest seqQ and seqK the short tile takes (where it measured ahead of the main one).
constexpr int64_t shortTileMaxSeq(int headDim) { return headDim == 64 ? 1024 : 512; }

// Shared memory: the Q tile, Stages K slots, Stages V slots (each a [D / 64][rows][64] stack of 128-byte-swizzled
// slabs, DV / 64 for V, 1024-byte aligned), then the mbarriers; with a paged cache, then the producer's row tables
// (two of BlockN element offsets, used by alternate K and V block loads).
template <int D, int BlockN, int ConsumerGroups, int Stages, bool Paged = false, int DV = D>
struct SharedLayout {
  static constexpr int kBlockM = 64 * ConsumerGroups;
  static constexpr uint32_t kQBytes = uint32_t(kBlockM) * D * 2;
  static constexpr uint32_t kTileBytes = uint32_t(BlockN) * D * 2;
  static constexpr uint32_t kVTileBytes = uint32_t(BlockN) * DV * 2;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + kQBytes;
  static constexpr uint32_t kV = kK + Stages * kTileBytes;
  static constexpr uint32_t kBarriers = kV + Stages * kVTileBytes;
  // qFull, qEmpty, kFull[Stages], kEmpty[Stages], vFull[Stages], vEmpty[Stages]
  static constexpr uint32_t kBarrierCount = 2 + 4 * Stages;
  static constexpr uint32_t kRowTables = kBarriers + kBarrierCount * 8;
  static constexpr uint32_t kBytes = kRowTables + (Paged ? 2u * BlockN * 8u : 0u);
  // The dynamic shared window is only guaranteed 16-byte aligned; the kernel rounds its base up to 1024.
  static constexpr std::size_t kDynamicBytes = std::size_t(kBytes) + 1024;
  static_assert(D % 64 == 0 && DV % 64 == 0, "tiles are whole 64-element (128-byte) slabs");
  static_assert(BlockN % 16 == 0 && BlockN >= 16 && BlockN <= 256, "BlockN must be a wgmma N and a multiple of 16");
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0 && kVTileBytes % 1024 == 0,
                "every slab must stay 1024-byte aligned");
};

template <int D, bool Paged = false, int DV = D>
constexpr std::size_t instanceSharedBytes() {
  constexpr TileConfig t = tileFor(D, DV);
  return SharedLayout<D, t.blockN, t.consumerGroups, t.stages, Paged, DV>::kDynamicBytes;
}

template <int D, int DV = D>
constexpr std::size_t shortTileSharedBytes() {
  constexpr TileConfig t = shortTileFor(D, DV);
  if constexpr (t.blockN == 0) return 0;
  else return SharedLayout<D, t.blockN, t.consumerGroups, t.stages, false, DV>::kDynamicBytes;
}

// A paged cache's keys by tensor-map copies: each copy takes the same number of keys, from one page, and starts its
// rows in shared memory on a multiple of 8 (one 1024-byte swizzle atom), so a block of BlockN keys is whole copies of
// gcd(pageSize, BlockN) keys; 0 where that is not a multiple of 8 (those caches come by cp.async through row tables).
constexpr int pagedBoxRows(int64_t pageSize, int blockN) {
  int64_t a = pageSize, b = blockN;
  while (b != 0) {
    const int64_t r = a % b;
    a = b, b = r;
  }
  return a % 8 == 0 ? int(a) : 0;
}

// The tensor maps of the Tma kernels (KernelParams): BlockM-row boxes of Q, BlockN-key boxes of K and V, 64 columns
// each, over the problem's head dims (Q/K's, V's: the copy engine zero-fills the columns of a wider instance, whole
// boxes past a narrower V included); a paged K and V in boxes of kp->pageBoxRows keys over [pages, rows of a page,
// heads] (set it first). dtype FP16 or BF16; false when the driver refuses one.
inline bool encodeForwardMaps(const ForwardParams &p, DType dtype, int blockM, int blockN, KernelParams *kp) {
  auto spec = [&](const void *base, int64_t columns, int64_t rows, int64_t heads, int64_t outer, int64_t rowStride,
                  int64_t headStride, int64_t outerStride, int boxRows) {
    return rowTileMapSpec(base, dtype, columns, rows, heads, outer, rowStride, headStride, outerStride, boxRows);
  };
  const int64_t batch = p.ragged ? 1 : p.batch;
  const int64_t kvHeads = p.heads / p.headsPerKvHead;
  const int64_t qRows = p.ragged ? p.totalQ : p.seqQ;
  if (!encodeTiledMap(spec(p.q, p.headDim, qRows, p.heads, batch, p.qRow, p.qHead, p.qBatch, blockM), &kp->qMap))
    return false;
  if (p.paged) {
    // The page stride is the cache's batch stride (flashAttnSetSeqPaged).
    const int64_t pageRows = p.cache.pageSize.value;
    const int boxRows = kp->pageBoxRows;
    return boxRows > 0 && boxRows <= blockN && pageRows % boxRows == 0 &&
           encodeTiledMap(spec(p.k, p.headDim, pageRows, kvHeads, p.cache.numPages, p.kRow, p.kHead, p.kBatch,
                               boxRows),
                          &kp->kMap) &&
           encodeTiledMap(spec(p.v, p.headDimV, pageRows, kvHeads, p.cache.numPages, p.vRow, p.vHead, p.vBatch,
                               boxRows),
                          &kp->vMap);
  }
  const int64_t kRows = p.ragged ? p.totalK : p.seqK;
  return encodeTiledMap(spec(p.k, p.headDim, kRows, kvHeads, batch, p.kRow, p.kHead, p.kBatch, blockN), &kp->kMap) &&
         encodeTiledMap(spec(p.v, p.headDimV, kRows, kvHeads, batch, p.vRow, p.vHead, p.vBatch, blockN), &kp->vMap);
}

// Defined once per (Element, D, DV) by the generated instance files; Element is __half or __nv_bfloat16.
// params.queryBlocks is recomputed for the instance's BlockM.
template <typename Element, int D, int DV>
cudaError_t launchSm90Instance(const ForwardParams &params, const LaunchOptions &options, int device,
                               cudaStream_t stream);

}  // namespace flashattn::cuda::forward_sm90
