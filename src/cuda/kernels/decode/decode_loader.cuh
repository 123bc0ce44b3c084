// SPDX-License-Identifier: BSD-3-Clause
// The split-KV decode's loaders: how Q and the K/V tiles of a chunk reach shared memory, and the pipeline that hands
// each tile to the math (decode_params.hpp, Loader, says when each is used).
//
// Both expose the same surface to the kernel: prepare() (first thing in the kernel), start() (once the CTA knows its
// work), kTile() / vTile() of a stage with kKeyStride elements from one key's row to the next, and run(), which calls
// loadQ() once Q has landed and consume(tile, stage, present) for each tile of the chunk in order, `present` holding
// bit k for key k of the tile that exists (inside the chunk, in a valid page).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode/decode_work.cuh"
#include "cuda/kernels/paged_kv.cuh"
#include "cuda/primitives/cp_async_scalar.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/primitives.cuh"
#include "cuda/primitives/tma.cuh"

namespace flashattn::cuda::decode {

// Q rows of this CTA into padded shared rows (zero rows past the last, zero columns past the head dim), by cp.async:
// the cp.async loader's tile 0 group takes them along, the tensor-map loader waits for them once.
template <typename Element, int HeadDim, int Threads>
__device__ __forceinline__ void loadQ(const DecodeParams &p, const DecodeWork &w, Element *qSmem) {
  constexpr int kVec = 16 / int(sizeof(Element));  // elements per 16-byte copy
  constexpr int kChunksPerRow = HeadDim / kVec;
  constexpr int kRow = smemRowElements(int(sizeof(Element)), HeadDim);
  const Element *qBase = static_cast<const Element *>(p.q);
  for (int idx = int(threadIdx.x); idx < w.rowsPerCta * kChunksPerRow; idx += Threads) {
    const int localRow = idx / kChunksPerRow;
    const int c = idx - localRow * kChunksPerRow;
    const int row = w.firstRow + localRow;
    const bool valid = row < p.rows && c * kVec < p.headDim;
    const Element *src = qBase;
    if (valid) {
      const int groupHead = row / p.seqQ;
      const int token = row - groupHead * p.seqQ;
      const int64_t head = w.headOf(p, groupHead);
      src = qBase + int64_t(w.batch) * p.qBatch + head * p.qHead + int64_t(token) * p.qRow + c * kVec;
    }
    prim::cpAsync16(prim::smemAddress(qSmem + localRow * kRow + c * kVec), src, valid);
  }
}

struct KeyOffsets {
  int64_t k;
  int64_t v;
};

// cp.async: the row addresses of tile x (dense, or paged by the rule of paged_kv.cuh) are computed one tile ahead by
// one thread per key (the first TileKeys threads) into a table alternating by tile parity, with the tile's presence
// mask; then every thread issues 16-byte copies into padded rows, absent keys zero-filled. Stages - 1 tiles in flight.
// Paged caches: the block-table entries of the first Stages tiles are read into registers at the start; those of tile
// y >= Stages come by cp.async into a ring of page ids with tile y - Stages's copies, so they have landed Stages - 1
// tiles before they are needed. (Read into registers a tile ahead, an entry waited behind the tiles in flight: under a
// full memory system a request returns about when the copies issued before it do, and pages of one key read at
// 0.76-0.79 of the same kernel on a dense cache of the same row addresses.)
template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages>
struct CpAsyncLoader {
  static constexpr int kThreads = ctaThreads(Warps, kLoaderCpAsync);
  static constexpr int kVec = 16 / int(sizeof(Element));
  static constexpr int kChunksPerRow = HeadDim / kVec;
  static constexpr int kRow = smemRowElements(int(sizeof(Element)), HeadDim);
  static constexpr int kKeyStride = kRow;
  static constexpr int kStageHalf = TileKeys * kRow;
  // The presence masks have Stages + 1 slots so that the one written before a tile's first barrier never belongs to
  // a tile a slow warp may still be reading.
  static constexpr int kMaskSlots = maskSlots(Stages, kLoaderCpAsync);
  static_assert(Warps >= 2 && Warps <= 8, "the offset table takes the first two warps");

  static constexpr int kPageIdSlots = pageIdSlots(Stages);

  Element *kv;
  KeyOffsets *offsetTable;
  uint32_t *validMask;
  int32_t *pageIds;  // paged: [kPageIdSlots][TileKeys] block-table entries, tile y's in slot y % kPageIdSlots

  __device__ __forceinline__ CpAsyncLoader(unsigned char *smem, const SmemLayout &layout)
      : kv(reinterpret_cast<Element *>(smem + layout.kv)),
        offsetTable(reinterpret_cast<KeyOffsets *>(smem + layout.offsets)),
        validMask(reinterpret_cast<uint32_t *>(smem + layout.validMask)),
        pageIds(reinterpret_cast<int32_t *>(smem + layout.pageIds)) {}

  __device__ __forceinline__ void prepare(const DecodeParams &) const {}
  __device__ __forceinline__ void start(const DecodeParams &, const DecodeWork &) const {}
  __device__ __forceinline__ const Element *kTile(int slot) const { return kv + slot * 2 * kStageHalf; }
  __device__ __forceinline__ const Element *vTile(int slot) const { return kTile(slot) + kStageHalf; }

  // Element offsets of a key's K and V rows (paged: at `row`, fetchRow's); false when it has none (its page lies
  // outside the pool).
  static __device__ __forceinline__ bool rowOffsets(const DecodeParams &p, const DecodeWork &w, int key,
                                                    paged::PagedRow row, KeyOffsets &off) {
    if (p.paged) {
      if (row.page < 0) return false;
      off.k = paged::rowOffset(row, p.kBatch, p.kRow) + int64_t(w.kvHead) * p.kHead;
      off.v = paged::rowOffset(row, p.vBatch, p.vRow) + int64_t(w.kvHead) * p.vHead;
    } else {
      off.k = int64_t(w.batch) * p.kBatch + int64_t(w.kvHead) * p.kHead + int64_t(key) * p.kRow;
      off.v = int64_t(w.batch) * p.vBatch + int64_t(w.kvHead) * p.vHead + int64_t(key) * p.vRow;
    }
    return true;
  }

  // Paged caches: this thread's key of tile x (-1 when it has none, or is past the chunk) and its table row index.
  __device__ __forceinline__ bool tileKey(const DecodeParams &p, const DecodeWork &w, int x, int &key,
                                          int &index) const {
    const int tid = int(threadIdx.x);
    key = w.keyBegin + x * TileKeys + tid;
    if (!p.paged || tid >= TileKeys || x >= w.numTiles || key >= w.keyEnd) return false;
    index = p.cache.pageSize.divide(key);
    return true;
  }

  // Where this thread's key of tile x lives (page -1: nowhere), from the block table directly (the first tiles).
  __device__ __forceinline__ paged::PagedRow fetchRow(const DecodeParams &p, const DecodeWork &w, int x) const {
    int key, index;
    if (!tileKey(p, w, x, key, index)) return paged::PagedRow{-1, 0};
    return paged::PagedRow{paged::pageAt(p.cache, w.batch, index), p.cache.pageSize.remainder(key, index)};
  }

  // This thread's block-table entry of tile y into the page-id ring (in the copy group being built).
  __device__ __forceinline__ void copyPageId(const DecodeParams &p, const DecodeWork &w, int y) const {
    int key, index;
    if (!tileKey(p, w, y, key, index)) return;
    const int32_t *entry = paged::entryAddress(p.cache, w.batch, index);
    prim::cpAsync4(prim::smemAddress(pageIds + (y % kPageIdSlots) * TileKeys + int(threadIdx.x)),
                   entry != nullptr ? static_cast<const void *>(entry) : p.k, entry != nullptr);
  }

  // Where this thread's key of tile y lives, from the page-id ring (copyPageId's entry, landed).
  __device__ __forceinline__ paged::PagedRow ringRow(const DecodeParams &p, const DecodeWork &w, int y) const {
    int key, index;
    if (!tileKey(p, w, y, key, index) || !paged::hasEntry(p.cache, index)) return paged::PagedRow{-1, 0};
    const int32_t id = pageIds[(y % kPageIdSlots) * TileKeys + int(threadIdx.x)];
    return paged::PagedRow{paged::checkedPage(p.cache, id), p.cache.pageSize.remainder(key, index)};
  }

  __device__ __forceinline__ void computeOffsets(const DecodeParams &p, const DecodeWork &w, int x,
                                                 paged::PagedRow row) const {
    const int tid = int(threadIdx.x);
    if (tid < ((TileKeys + 31) & ~31)) {
      const int key = w.keyBegin + x * TileKeys + tid;
      KeyOffsets off{0, 0};
      bool present = tid < TileKeys && key < w.keyEnd;
      if (present) present = rowOffsets(p, w, key, row, off);
      if (tid < TileKeys) offsetTable[(x & 1) * TileKeys + tid] = off;
      const uint32_t bits = __ballot_sync(0xffffffffu, present);
      if ((tid & 31) == 0) validMask[(x % kMaskSlots) * 2 + (tid >> 5)] = bits;
      if (TileKeys <= 32 && tid == 0) validMask[(x % kMaskSlots) * 2 + 1] = 0u;
    }
  }

  // Eight neighbouring threads share a key (four where a row is not whole 128-byte lines), each copying every eighth
  // 16-byte chunk of its K and V rows: one offset read and one presence bit serve 2 HeadDim / (8 kVec) copies at
  // immediate offsets from two addresses, and a warp's copy covers whole 128-byte lines of 4 rows, as many lines and
  // requests as with a thread a chunk. (A thread a chunk, taking the tile's chunks in turn, paid a key's offsets,
  // presence bit and 64-bit address for each copy, about 24 instructions a copy (ptxas 13.0); four threads a key of
  // d128, 64 bytes of 8 rows a copy, halved the requests' size and read 0.77-0.94 of it on an H200.)
  static constexpr int kLanesPerKey = kChunksPerRow % 8 == 0 ? 8 : 4;
  static_assert(kChunksPerRow % kLanesPerKey == 0, "a row splits into whole chunks per lane");
  static constexpr int kKeysPerPass = kThreads / kLanesPerKey;

  __device__ __forceinline__ void issueTile(const DecodeParams &p, int x) const {
    const int lane = int(threadIdx.x) % kLanesPerKey;
    const Element *kBase = static_cast<const Element *>(p.k) + lane * kVec;
    const Element *vBase = static_cast<const Element *>(p.v) + lane * kVec;
    const KeyOffsets *offsets = offsetTable + (x & 1) * TileKeys;
    const uint32_t *bits = validMask + (x % kMaskSlots) * 2;
    const uint32_t kDst = prim::smemAddress(kv + (x % Stages) * 2 * TileKeys * kRow + lane * kVec);
    const uint32_t vDst = kDst + uint32_t(TileKeys * kRow * sizeof(Element));
    // Where every chunk is in the head dim (a uniform branch), an absent key's copies read nothing from the start of
    // the cache and every copy is its row's address plus an immediate; narrower head dims select per copy.
    auto copyKeys = [&](auto wholeRows) {
#pragma unroll
      for (int pass = 0; pass < (TileKeys + kKeysPerPass - 1) / kKeysPerPass; ++pass) {
        const int key = int(threadIdx.x) / kLanesPerKey + pass * kKeysPerPass;
        if (TileKeys % kKeysPerPass != 0 && key >= TileKeys) break;
        const bool present = (bits[key >> 5] >> (key & 31)) & 1u;
        const KeyOffsets off = offsets[key];
        const Element *kSrc = kBase + (present ? off.k : 0);
        const Element *vSrc = vBase + (present ? off.v : 0);
        const uint32_t row = uint32_t(key * kRow * sizeof(Element));
#pragma unroll
        for (int i = 0; i < kChunksPerRow / kLanesPerKey; ++i) {
          const uint32_t at = row + uint32_t(kLanesPerKey * i * 16);
          if constexpr (decltype(wholeRows)::value) {
            prim::cpAsync16(kDst + at, kSrc + kLanesPerKey * i * kVec, present);
            prim::cpAsync16(vDst + at, vSrc + kLanesPerKey * i * kVec, present);
          } else {
            const bool valid = present && (lane + kLanesPerKey * i) * kVec < p.headDim;
            prim::cpAsync16(kDst + at, valid ? static_cast<const void *>(kSrc + kLanesPerKey * i * kVec) : p.k, valid);
            prim::cpAsync16(vDst + at, valid ? static_cast<const void *>(vSrc + kLanesPerKey * i * kVec) : p.v, valid);
          }
        }
      }
    };
    if (p.headDim == HeadDim)
      copyKeys(std::true_type{});
    else
      copyKeys(std::false_type{});
  }

  // Iterations before 0 only fill the pipeline. Iteration it issues tile x = it + Stages - 1 and the page ids of tile
  // x + Stages (copy group x; Q joins group 0) and consumes tile it. Hazards: the data slot a tile is copied into was
  // consumed two barriers earlier; offset tables alternate by tile parity; the presence masks rotate over kMaskSlots;
  // tile y's page ids (group y - Stages) have landed at the wait of the iteration before the one that reads them, and
  // their slot is next refilled an iteration after that read, by the thread that read it.
  template <typename LoadQ, typename Consume>
  __device__ __forceinline__ void run(const DecodeParams &p, const DecodeWork &w, LoadQ &&loadQ,
                                      Consume &&consume) const {
    const int numTiles = w.numTiles;
    paged::PagedRow first[Stages];
#pragma unroll
    for (int x = 0; x < Stages; ++x) first[x] = fetchRow(p, w, x);
    for (int it = -(Stages - 1); it < numTiles; ++it) {
      const int x = it + Stages - 1;
      if (x < numTiles) {
        paged::PagedRow row = first[0];
#pragma unroll
        for (int s = 1; s < Stages; ++s)
          if (x == s) row = first[s];
        if (x >= Stages) row = ringRow(p, w, x);
        computeOffsets(p, w, x, row);
      }
      __syncthreads();
      if (x < numTiles) issueTile(p, x);
      copyPageId(p, w, x + Stages);
      prim::cpAsyncCommit();
      if (it < 0) continue;
      prim::cpAsyncWait<Stages - 1>();
      __syncthreads();
      if (it == 0) loadQ();
      const uint32_t *bits = validMask + (it % kMaskSlots) * 2;
      consume(it, it % Stages, uint64_t(bits[0]) | (uint64_t(bits[1]) << 32));
    }
  }
};

// Tensor maps (sm90, FP16/BF16 caches): the producer warp's lane 0 sets up the stages' full / empty mbarriers and
// issues every copy; the consumer warps wait on a stage's full barrier and arrive on its empty one once read. Boxes
// reaching past the capacity are zero-filled by the copy engine. Dense caches: keys exist up to the chunk's end, so
// the consumers derive the presence mask themselves. Paged caches (page size a multiple of 8 that divides or is
// divided by TileKeys; the maps view a page as a batch entry of pageSize keys): a tile is TileKeys / pagePieces-key
// pieces, one page or one page's slice each; the producer warp's lanes read the pieces' page ids from the block table a
// tile ahead, a piece without a page is copied from outside the map (zeros), and lane 0 stores the tile's presence
// mask on the stage before its full barrier's arrival publishes it. Absent keys' V rows are left as they came (the
// math clears them in its fragments), so that no thread writes a stage the copy engine fills.
template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, bool Paged>
struct TensorMapLoader {
  static constexpr int kBoxes = HeadDim / 64;  // 64-column boxes per row
  static constexpr int kKeyStride = 64;
  static constexpr int kStageHalf = kBoxes * TileKeys * 64;
  static constexpr int kMaxPieces = TileKeys / 8;
  static_assert(tensorLoadable(int(sizeof(Element)), HeadDim), "tensor loader: 16-bit elements, head dim % 64");
  static_assert(kMaxPieces <= 32, "one producer lane per piece");

  static constexpr int kPageIdSlots = pageIdSlots(Stages);

  Element *kv;
  uint32_t *validMask;  // paged: [Stages][2] presence bits of the tile on each stage
  int32_t *pageIds;     // paged: [kPageIdSlots][32] the producer lanes' block-table entries, tile y's in y % slots
  uint32_t fullBase;    // [Stages] full barriers, then [Stages] empty ones
  uint32_t emptyBase;

  // The stages start at a 1024-byte boundary of the shared window (the swizzle repeats every 1024 bytes).
  __device__ __forceinline__ TensorMapLoader(unsigned char *smem, const SmemLayout &layout) {
    const uint32_t shift = (1024u - (prim::smemAddress(smem + layout.kv) & 1023u)) & 1023u;
    kv = reinterpret_cast<Element *>(smem + layout.kv + shift);
    validMask = reinterpret_cast<uint32_t *>(smem + layout.validMask);
    pageIds = reinterpret_cast<int32_t *>(smem + layout.pageIds);
    fullBase = prim::smemAddress(smem + layout.barriers);
    emptyBase = fullBase + 8u * uint32_t(Stages);
  }

  __device__ __forceinline__ const Element *kTile(int slot) const { return kv + slot * 2 * kStageHalf; }
  __device__ __forceinline__ const Element *vTile(int slot) const { return kTile(slot) + kStageHalf; }

  static __device__ __forceinline__ bool producer() { return (int(threadIdx.x) >> 5) == Warps; }
  static __device__ __forceinline__ int lane() { return int(threadIdx.x) & 31; }

  // First thing in the kernel: the barriers' setup and the maps' fetch overlap the block arithmetic instead of
  // delaying the first copy (NOTES.md); the prefetches come after the barriers' fence, which would otherwise wait
  // for them. (Placed after the block arithmetic, this was compiled into warp-uniform instructions that racecheck
  // reads as another thread's writes.)
  __device__ __forceinline__ void prepare(const DecodeParams &p) const {
    if (int(threadIdx.x) == Warps * 32) {  // the producer warp's lane 0
      for (int st = 0; st < Stages; ++st) prim::mbarrierInit(fullBase + 8u * uint32_t(st), 1u);
      for (int st = 0; st < Stages; ++st) prim::mbarrierInit(emptyBase + 8u * uint32_t(st), uint32_t(Warps));
      prim::fenceBarrierInit();
      prim::prefetchTensorMap(&p.kMap);
      prim::prefetchTensorMap(&p.vMap);
    }
  }

  // Paged caches: the page of piece `piece` of tile x (-1: the piece starts past the chunk, or its page is outside
  // the pool or the table row). Tile starts are multiples of TileKeys (findWork), so a piece never crosses a page.
  static __device__ __forceinline__ int piecePage(const DecodeParams &p, const DecodeWork &w, int x, int piece) {
    int index;
    if (!pieceIndex(p, w, x, piece, index)) return -1;
    return paged::pageAt(p.cache, w.batch, index);
  }

  // The table row index of piece `piece` of tile x; false where the piece starts past the chunk.
  static __device__ __forceinline__ bool pieceIndex(const DecodeParams &p, const DecodeWork &w, int x, int piece,
                                                    int &index) {
    const int key = w.keyBegin + x * TileKeys + piece * (TileKeys / p.pagePieces);
    if (x >= w.numTiles || piece >= p.pagePieces || key >= w.keyEnd) return false;
    index = p.cache.pageSize.divide(key);
    return true;
  }

  // Tiles from Stages on: lane `piece`'s block-table entry of tile y into the page-id ring by cp.async (a group of its
  // own), read by ringPage Stages tiles later. Read into registers a tile ahead, an entry waited behind the tiles in
  // flight (under a full memory system a request returns about when the copies issued before it do), and the stage
  // stayed empty meanwhile.
  __device__ __forceinline__ void copyPieceEntry(const DecodeParams &p, const DecodeWork &w, int y, int piece) const {
    int index;
    const int32_t *entry = pieceIndex(p, w, y, piece, index) ? paged::entryAddress(p.cache, w.batch, index) : nullptr;
    if (entry != nullptr) prim::cpAsync4(prim::smemAddress(pageIds + (y % kPageIdSlots) * 32 + piece), entry, true);
  }

  __device__ __forceinline__ int ringPage(const DecodeParams &p, const DecodeWork &w, int y, int piece) const {
    int index;
    if (!pieceIndex(p, w, y, piece, index) || !paged::hasEntry(p.cache, index)) return -1;
    return paged::checkedPage(p.cache, pageIds[(y % kPageIdSlots) * 32 + piece]);
  }

  // A map's coordinates 1..4 for one piece: each is the KV head, the key or the outer index (batch or page), as the
  // map's slots say, or 0 (a rank-5 map's box dimension). The slots are taken apart into masks once per tile, so that
  // a piece's coordinates cost two logic operations each: one thread issues every piece of the ring (4 a tile at pages
  // of 16), and compare-and-branch chains per coordinate (~100 instructions a piece) bounded its rate.
  struct PieceCoordinates {
    int fixed[4], keyMask[4], outerMask[4];
    __device__ __forceinline__ PieceCoordinates(const TensorMapSlots &slots, int kvHead) {
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        fixed[d] = slots.head == d + 1 ? kvHead : 0;
        keyMask[d] = slots.key == d + 1 ? -1 : 0;
        outerMask[d] = slots.batch == d + 1 ? -1 : 0;
      }
    }
    // Exactly one of the three parts is nonzero where the dimension is named (the slots are distinct); an outer
    // index of -1 (outside the map) passes through whole.
    __device__ __forceinline__ int at(int dim, int key, int outer) const {
      return fixed[dim - 1] | (key & keyMask[dim - 1]) | (outer & outerMask[dim - 1]);
    }
  };

  // One piece of a tile: `rows` keys from `key` of map dimension slots.key, `outer` in the batch dimension (dense: the
  // batch, paged: the page, -1 outside the map), landing `row0` keys into the stage. The wide (rank-5) view takes
  // every 64-column box in one copy and is only used with whole tiles (row0 0); the box view one copy per box.
  __device__ __forceinline__ void copyPiece(const DecodeParams &p, const PieceCoordinates &kc,
                                            const PieceCoordinates &vc, bool rank5, uint32_t kDst, uint32_t vDst,
                                            uint32_t barrier, int key, int outer, int row0) const {
    const int k1 = kc.at(1, key, outer), k2 = kc.at(2, key, outer), k3 = kc.at(3, key, outer);
    const int v1 = vc.at(1, key, outer), v2 = vc.at(2, key, outer), v3 = vc.at(3, key, outer);
    if (rank5) {  // the planner gives K and V maps of the same rank
      prim::tensorCopy5d(kDst, &p.kMap, 0, k1, k2, k3, kc.at(4, key, outer), barrier);
      prim::tensorCopy5d(vDst, &p.vMap, 0, v1, v2, v3, vc.at(4, key, outer), barrier);
      return;
    }
    const uint32_t rowOffset = uint32_t(row0 * 128);
#pragma unroll
    for (int box = 0; box < kBoxes; ++box)
      prim::tensorCopy4d(kDst + uint32_t(box * TileKeys * 128) + rowOffset, &p.kMap, box * 64, k1, k2, k3, barrier);
#pragma unroll
    for (int box = 0; box < kBoxes; ++box)
      prim::tensorCopy4d(vDst + uint32_t(box * TileKeys * 128) + rowOffset, &p.vMap, box * 64, v1, v2, v3, barrier);
  }

  // Tile x's K and V on its stage's full barrier, issued by the producer warp's lane 0. Paged: every lane of the warp
  // calls it, lane j holding piece j's page; dense: lane 0 alone (lanePage unused), one piece, K's 64-column boxes
  // back to back, then V's (the two halves of a 256-byte row go out close together), or one rank-5 copy each.
  __device__ __forceinline__ void issue(const DecodeParams &p, const DecodeWork &w, int x, int lanePage) const {
    const int slot = x % Stages;
    const uint32_t barrier = fullBase + 8u * uint32_t(slot);
    const int key0 = w.keyBegin + x * TileKeys;
    const PieceCoordinates kc(p.kSlots, w.kvHead), vc(p.vSlots, w.kvHead);
    const bool rank5 = p.kSlots.rank == 5;
    if constexpr (!Paged) {
      prim::mbarrierArriveExpectTx(barrier, uint32_t(2 * kBoxes * TileKeys * 128));
      const uint32_t kDst = prim::smemAddress(kv + slot * 2 * kStageHalf);
      copyPiece(p, kc, vc, rank5, kDst, kDst + uint32_t(kStageHalf * int(sizeof(Element))), barrier, key0, w.batch, 0);
    } else {
      const uint32_t kDst = prim::smemAddress(kv + slot * 2 * kStageHalf);
      const uint32_t vDst = kDst + uint32_t(kStageHalf * int(sizeof(Element)));
      const int pieces = p.pagePieces;
      const int rows = TileKeys / pieces;
      const uint32_t pagesPresent = __ballot_sync(0xffffffffu, lanePage >= 0);
      int pages[kMaxPieces];
#pragma unroll
      for (int j = 0; j < kMaxPieces; ++j) pages[j] = __shfl_sync(0xffffffffu, lanePage, j);
      if (lane() != 0) return;
      uint64_t present = 0;
      const uint64_t pieceBits = rows >= 64 ? ~0ull : (1ull << rows) - 1ull;
      for (int j = 0; j < pieces; ++j)
        if ((pagesPresent >> j) & 1u) present |= pieceBits << (j * rows);
      const int inChunk = w.keyEnd - key0;
      if (inChunk < 64) present &= (1ull << inChunk) - 1ull;
      validMask[slot * 2] = uint32_t(present);
      validMask[slot * 2 + 1] = uint32_t(present >> 32);
      prim::mbarrierArriveExpectTx(barrier, uint32_t(2 * kBoxes * TileKeys * 128));
      // A page at least a tile long holds the whole tile (key0 % pageSize is its first row); shorter pages are whole.
      const int firstRow = pieces == 1 ? p.cache.pageSize.remainder(key0, p.cache.pageSize.divide(key0)) : 0;
#pragma unroll
      for (int j = 0; j < kMaxPieces; ++j)
        if (j < pieces) copyPiece(p, kc, vc, rank5, kDst, vDst, barrier, firstRow, pages[j], j * rows);
    }
  }

  // Every stage starts empty: the whole ring goes out before anything else (the pages of its tiles read at once).
  __device__ __forceinline__ void start(const DecodeParams &p, const DecodeWork &w) const {
    if constexpr (!Paged) {
      if (int(threadIdx.x) == Warps * 32)  // the producer warp's lane 0
        for (int x = 0; x < Stages && x < w.numTiles; ++x) issue(p, w, x, -1);
    } else if (producer()) {
      int pages[Stages];
#pragma unroll
      for (int x = 0; x < Stages; ++x) pages[x] = piecePage(p, w, x, lane());
#pragma unroll
      for (int x = 0; x < Stages; ++x)
        if (x < w.numTiles) issue(p, w, x, pages[x]);
    }
  }

  // Q and the barriers' initialization are visible to every warp after one CTA barrier; from there on the producer
  // and the consumers meet only at the stages' full / empty barriers.
  template <typename LoadQ, typename Consume>
  __device__ __forceinline__ void run(const DecodeParams &p, const DecodeWork &w, LoadQ &&loadQ,
                                      Consume &&consume) const {
    const int warp = int(threadIdx.x) >> 5;
    const int lane = int(threadIdx.x) & 31;
    const int numTiles = w.numTiles;
    prim::cpAsyncCommit();
    prim::cpAsyncWaitAll();
    __syncthreads();
    if (warp == Warps) {
      // Stage `slot` is free once every consumer warp has read tile x - Stages (its empty phase x / Stages - 1).
      auto waitEmpty = [&](int x) {
        prim::mbarrierWait(emptyBase + 8u * uint32_t(x % Stages), uint32_t(x / Stages - 1) & 1u);
      };
      if constexpr (Paged) {
        // Tile y's entries go out with the issue of tile y - Stages (each lane's cp.async groups, in tile order), and
        // slot y % kPageIdSlots was last read at tile y - Stages - 1.
#pragma unroll
        for (int y = Stages; y < 2 * Stages; ++y) {
          copyPieceEntry(p, w, y, lane);
          prim::cpAsyncCommit();
        }
        for (int x = Stages; x < numTiles; ++x) {
          prim::cpAsyncWait<Stages - 1>();
          const int page = ringPage(p, w, x, lane);
          copyPieceEntry(p, w, x + Stages, lane);
          prim::cpAsyncCommit();
          if (lane == 0) waitEmpty(x);
          __syncwarp();
          issue(p, w, x, page);
        }
      } else if (lane == 0) {
        for (int x = Stages; x < numTiles; ++x) {
          waitEmpty(x);
          issue(p, w, x, -1);
        }
      }
      __syncwarp();
    } else {
      loadQ();
      for (int it = 0; it < numTiles; ++it) {
        const int slot = it % Stages;
        const uint32_t parity = uint32_t(it / Stages) & 1u;
        prim::mbarrierWait(fullBase + 8u * uint32_t(slot), parity);
        uint64_t present;
        if constexpr (Paged) {
          present = uint64_t(validMask[slot * 2]) | (uint64_t(validMask[slot * 2 + 1]) << 32);
        } else {  // the keys before the chunk's end (dense caches: every key there exists)
          const int inChunk = min(TileKeys, w.keyEnd - (w.keyBegin + it * TileKeys));
          present = inChunk >= 64 ? ~0ull : (1ull << inChunk) - 1ull;
        }
        consume(it, slot, present);
        __syncwarp();
        if (lane == 0) prim::mbarrierArrive(emptyBase + 8u * uint32_t(slot));
      }
    }
  }
};

template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, int LoaderKind>
using LoaderOf = std::conditional_t<
    isTensorLoader(LoaderKind),
    TensorMapLoader<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind == kLoaderPagedTensorMap>,
    CpAsyncLoader<Element, HeadDim, Warps, TileKeys, Stages>>;

}  // namespace flashattn::cuda::decode
