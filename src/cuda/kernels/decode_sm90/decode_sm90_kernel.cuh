// SPDX-License-Identifier: BSD-3-Clause
// The Hopper (sm_90a) wgmma decode: split-KV decode for query rows too wide for one warp's registers, above all
// absorbed-MLA decode (Q/K 576 = 512 latent + 64 rope, V/O 512, one KV head). A CTA serves 64 query rows (heads x
// tokens of one KV head, as the split-KV decode numbers them) against one chunk of the keys:
//   warpgroup 0, producer: one thread issues tensor-map copies of 64-key tiles of K (and of V, unless V is K's first
//     DV columns) into a ring of stages guarded by full / empty mbarriers;
//   V/O of 128 columns or fewer (splitsKeys): each consumer warpgroup holds all of O and takes every other tile,
//     S = Q K^T (wgmma m64n64, Q resident in shared memory), the mask, its own online softmax and O += P V from
//     registers; warpgroup 2 hands its state (max, sum, O) to warpgroup 1 at the end, which merges the two;
//   wider V/O, split by columns (one warpgroup cannot hold 64 x 512 FP32 accumulators, 256 registers a thread):
//     warpgroup 1 computes S, the mask and the online softmax, hands P and the rows' rescale factor over through
//     shared memory, and accumulates O[:, 0 : DV/2] += P V from registers; warpgroup 2 O[:, DV/2 : DV] += P V with P
//     read from shared memory.
// With split keys a warpgroup issues its next tile's S before this tile's P V, so the next softmax runs while the
// tensor cores work. With the column split warpgroup 1 issues this tile's P V first and the next S behind it, and
// releases the tile's stage once its P V is done: with two stages of 576 columns the refill must start under that S.
//
// The CTA's work (row block, chunk, key range), the mask rule, the partial states (normalized O and (max, sum) per
// row) and the sink's place are the split-KV decode's (decode_work.cuh, decode_epilogue.cuh): the partial states of
// split chunks are merged by decodeMergeKernel. Keys of a tile past the chunk's end exist in memory (another chunk's,
// or unused slots that may hold NaN): their logits are masked, and their V rows are zeroed before any P V reads them,
// since 0 x NaN would reach O.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/mask.hpp"
#include "cuda/kernels/decode/decode_epilogue.cuh"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode/decode_work.cuh"
#include "cuda/kernels/decode_sm90/decode_sm90.hpp"
#include "cuda/kernels/forward_sm90/forward_sm90_kernel.cuh"
#include "cuda/kernels/paged_kv.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/merge_state.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma.cuh"

namespace flashattn::cuda::decode_sm90 {

// Named barriers between the two consumer warpgroups (0 is __syncthreads).
// Every hand-over barrier is a bar.sync on both sides (bar.arrive on the writing side would order the writes as well):
// the writing side never runs ahead here anyway, since warpgroup 1 reaches kPReady with warpgroup 2 already waiting
// there (it passed kPFree just before), and reaches kStatsReady after its own last kPFree, which warpgroup 2 passes
// right before its epilogue. racecheck reports these hand-overs in either form (NOTES.md, open question 1).
constexpr uint32_t kQReady = 1;      // Q has landed (both consumer warpgroups)
constexpr uint32_t kPReady = 2;      // warpgroup 1 -> 2: P, the rescale factors and zeroed tail rows of a tile
constexpr uint32_t kPFree = 3;       // warpgroup 2 -> 1: P and the factors may be overwritten
constexpr uint32_t kStatsReady = 4;  // warpgroup 1 -> 2: the rows' final (max, sum)
constexpr uint32_t kTailZeroed = 5;  // inside a warpgroup (5 + its index): every thread's zeroing is done before P V

// setmaxnreg split: 384 threads x 168 at entry >= 2 x 128 x 240 + 128 x 24 (the producer thread keeps a few).
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

struct KeySpan {
  int32_t lo, hi;  // inclusive; empty when lo > hi
};

// Copies one tile (a rank-5 map: every 64-column box of 64 keys in one copy) of a K or V map into `destination`.
__device__ __forceinline__ void copyTile(uint32_t destination, const CUtensorMap *map, const decode::TensorMapSlots &s,
                                         int key, int kvHead, int outer, uint32_t barrier) {
  auto coordinate = [&](int dim) { return s.key == dim ? key : s.head == dim ? kvHead : s.batch == dim ? outer : 0; };
  prim::tensorCopy5d(destination, map, 0, coordinate(1), coordinate(2), coordinate(3), coordinate(4), barrier);
}

// Q rows [firstRow, firstRow + Rows) of the CTA's (batch, KV head) into DK / 64 K-major slabs of Rows rows at sQ,
// 128-byte swizzled, by `threads` threads numbered from 0 (`thread`): rows past the group's arrive as zeros. The
// caller commits, waits, fences the proxies and meets its readers at a barrier.
template <typename Element, int DK, int Rows>
__device__ __forceinline__ void loadQRows(const DecodeParams &p, const decode::DecodeWork &w, uint32_t sQ, int thread,
                                          int threads) {
  constexpr int kChunks = DK / 8;
  const Element *q = static_cast<const Element *>(p.q);
  for (int item = thread; item < Rows * kChunks; item += threads) {
    const int r = item / kChunks;
    const int c = item - r * kChunks;
    const int row = w.firstRow + r;
    const bool valid = row < p.rows;
    const int groupHead = valid ? row / p.seqQ : 0;
    const int token = valid ? row - groupHead * p.seqQ : 0;
    const Element *source =
        valid ? q + int64_t(w.batch) * p.qBatch + w.headOf(p, groupHead) * p.qHead + int64_t(token) * p.qRow + c * 8
              : q;
    prim::cpAsync16(sQ + uint32_t(c / 8) * Rows * 128 + uint32_t(r * 128 + 16 * ((c % 8) ^ (r % 8))), source, valid);
  }
}

// The dynamic shared window of a kernel with layout L, rounded up to 1024 bytes (the 128-byte swizzle's pattern;
// the window itself is only 16-byte aligned), and the addresses of its stage ring.
template <typename L, bool VFromK>
struct SharedWindow {
  using Layout = L;
  uint32_t base;
  unsigned char *pointer;
  __device__ __forceinline__ explicit SharedWindow(unsigned char *raw) {
    const uint32_t rawAddress = prim::smemAddress(raw);
    base = (rawAddress + 1023u) & ~1023u;
    pointer = raw + (base - rawAddress);
  }
  __device__ __forceinline__ uint32_t k(int slot) const { return base + L::kStage0 + uint32_t(slot) * L::kStageBytes; }
  __device__ __forceinline__ uint32_t v(int slot) const { return VFromK ? k(slot) : k(slot) + L::kKBytes; }
  // Split keys: where warpgroup 2 leaves its O for the merge, given the stage no copy refills.
  template <typename T>
  __device__ __forceinline__ T *mergeRegion(int freeSlot) const {
    return reinterpret_cast<T *>(pointer + (L::kMergeInStage ? L::kStage0 + uint32_t(freeSlot) * L::kStageBytes
                                                             : L::kMerge));
  }
  // Split keys, cluster merge: the shared address of the CTA's merged O ([64][DV] FP32), once every tile is consumed
  // (no stage is then in use): the stage after mergeRegion's, or (stages too small for it, V from K's) the first ones.
  __device__ __forceinline__ uint32_t clusterState(int freeSlot) const {
    static_assert(L::kMergeInStage || uint32_t(L::kStages) * L::kStageBytes >= L::kMergeO,
                  "the cluster's O fits the first stages");
    return L::kMergeInStage ? k((freeSlot + 1) % L::kStages) : base + L::kStage0;
  }
  __device__ __forceinline__ uint32_t full(int slot) const { return base + L::kBarriers + 8u * uint32_t(slot); }
  __device__ __forceinline__ uint32_t empty(int slot) const {
    return base + L::kBarriers + 8u * uint32_t(L::kStages + slot);
  }
  __device__ __forceinline__ uint32_t mergeReady() const { return base + L::kBarriers + 16u * uint32_t(L::kStages); }
};

// One thread's setup of a CTA's stages: full barriers (the producer's one arrival with the bytes) and empty ones (one
// arrival per consumer warp), made visible to the async proxy, and the maps' prefetch so the first copy does not wait
// for them. The CTA barrier that follows publishes them.
template <int Stages, bool VFromK>
__device__ __forceinline__ void prepareStages(const DecodeParams &p, uint32_t barriers, uint32_t consumerWarps) {
  for (int st = 0; st < Stages; ++st) {
    prim::mbarrierInit(barriers + 8u * uint32_t(st), 1u);
    prim::mbarrierInit(barriers + 8u * uint32_t(Stages + st), consumerWarps);
  }
  prim::fenceBarrierInit();
  prim::prefetchTensorMap(&p.kMap);
  if constexpr (!VFromK) prim::prefetchTensorMap(&p.vMap);
}

// The producer's loop, one thread: tile x of the chunk into stage x % Stages (K, and V unless it is K's), once the
// consumers released the tile Stages before it. Barriers at `barriers`: full[Stages], then empty[Stages].
template <int Stages, bool VFromK, bool Paged>
__device__ __forceinline__ void produceTiles(const DecodeParams &p, const decode::DecodeWork &w, uint32_t stage0,
                                             uint32_t stageBytes, uint32_t kBytes, uint32_t barriers) {
  for (int x = 0; x < w.numTiles; ++x) {
    const int slot = x % Stages;
    const uint32_t full = barriers + 8u * uint32_t(slot);
    if (x >= Stages) prim::mbarrierWait(barriers + 8u * uint32_t(Stages + slot), uint32_t(x / Stages - 1) & 1u);
    const int key0 = w.keyBegin + x * kTileKeys;
    int key = key0, outer = w.batch;
    if constexpr (Paged) {  // tiles start at multiples of 64 and pages hold whole tiles: one page per tile
      const int index = p.cache.pageSize.divide(key0);
      outer = paged::pageAt(p.cache, w.batch, index);  // -1: outside the map, the copy reads zeros
      key = p.cache.pageSize.remainder(key0, index);
    }
    const uint32_t stage = stage0 + uint32_t(slot) * stageBytes;
    prim::mbarrierArriveExpectTx(full, stageBytes);
    copyTile(stage, &p.kMap, p.kSlots, key, w.kvHead, outer, full);
    if constexpr (!VFromK) copyTile(stage + kBytes, &p.vMap, p.vSlots, key, w.kvHead, outer, full);
  }
}

// O (+)= P V for one warpgroup's Half columns: V slabs from `vHalf` (64 keys each, MN-major B), P as A fragments.
template <typename Element, int Half>
__device__ __forceinline__ void issuePVRegisters(float (&o)[Half / 2], const uint32_t (&p)[kTileKeys / 16][4],
                                                 uint32_t vHalf) {
  const uint64_t v = prim::wgmmaDescriptorSw128(vHalf, kTileKeys * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
    prim::WgmmaOp<Element, Half>::rsTransB(o, p[kk], prim::wgmmaDescriptorAdvance(v, uint32_t(kk) * 2048));
}

// The same with P read from its shared slab (K-major A: a k-step of 16 keys is 32 bytes into each row).
template <typename Element, int Half>
__device__ __forceinline__ void issuePVShared(float (&o)[Half / 2], uint32_t sP, uint32_t vHalf) {
  const uint64_t a = prim::wgmmaDescriptorSw128(sP, 16, 1024);
  const uint64_t v = prim::wgmmaDescriptorSw128(vHalf, kTileKeys * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
    prim::WgmmaOp<Element, Half>::template ssTransposed<0, 1>(o, prim::wgmmaDescriptorAdvance(a, uint32_t(kk) * 32),
                                                              prim::wgmmaDescriptorAdvance(v, uint32_t(kk) * 2048), 1u);
}

// P's fragments into the swizzled slab, at the places wgmma reads A from: row r, key k at r * 128 + 16 * ((k / 8) ^
// (r % 8)) + 2 * (k % 8). A thread holds rows row0, row0 + 8 and keys 16 kk + 8 c + 2 quad (+1) per fragment register.
__device__ __forceinline__ void storeP(uint32_t sP, const uint32_t (&p)[kTileKeys / 16][4], int row0, int quad) {
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + 8 * (r & 1);
      const int chunk = 2 * kk + (r >> 1);
      const uint32_t address = sP + uint32_t(row * 128 + 16 * (chunk ^ (row & 7)) + 4 * quad);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(p[kk][r]) : "memory");
    }
}

// Rows [first, 64) of every V slab of a stage to zeros (keys past the chunk: 0 x NaN must not reach O), by the 128
// threads of warpgroup 1.
template <int DV>
__device__ __forceinline__ void zeroTailRows(uint32_t vStage, int first, int thread) {
  constexpr int kChunksPerRow = 8;  // 128 bytes of a slab row
  const int rows = kTileKeys - first;
  for (int item = thread; item < rows * kChunksPerRow * (DV / 64); item += 128) {
    const int slab = item / (rows * kChunksPerRow);
    const int rest = item - slab * rows * kChunksPerRow;
    const int row = first + rest / kChunksPerRow;
    const int chunk = rest % kChunksPerRow;
    prim::storeShared16(vStage + uint32_t(slab) * kTileKeys * 128 + uint32_t(row * 128 + chunk * 16),
                        make_uint4(0u, 0u, 0u, 0u));
  }
}

// The keys a thread's two rows (localRow0, localRow0 + 8) see inside the chunk: the mask rule of each row's token,
// cut at the chunk's end; and the masking of a tile's S by them.
struct RowKeys {
  KeySpan span[2];
  bool anyMask;
  __device__ __forceinline__ RowKeys(const DecodeParams &p, const decode::DecodeWork &w, int localRow0) {
    anyMask = Mask(p.mask) != Mask::None || p.windowLeft >= 0 || p.windowRight >= 0;
    const Diagonals diagonals = visibleDiagonals(Mask(p.mask), p.windowLeft, p.windowRight, p.seqQ, w.seqLen);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int token = (w.firstRow + localRow0 + 8 * h) % p.seqQ;
      span[h] = anyMask ? keysOnDiagonals<KeySpan>(diagonals, token, w.seqLen) : KeySpan{0, w.seqLen - 1};
      span[h].hi = min(span[h].hi, w.keyEnd - 1);
    }
  }
  // S of the tile starting at key0, keys outside a row's span to -inf.
  __device__ __forceinline__ void mask(float (&s)[kTileKeys / 2], int key0, int keyEnd, int quad) const {
    if (!anyMask && key0 + kTileKeys <= keyEnd) return;
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * nt + 2 * quad + e;
          if (key < span[h].lo || key > span[h].hi) s[4 * nt + 2 * h + e] = forward_sm90::negativeInfinity();
        }
  }
};

// S = Q K^T of tile x once its stage has landed (one commit group).
template <typename Element, int DK, int Stages, typename Window>
__device__ __forceinline__ void issueTileS(float (&s)[kTileKeys / 2], uint64_t qDescriptor, const Window &window,
                                           int x, bool landed = false) {
  if (!landed) prim::mbarrierWait(window.full(x % Stages), uint32_t(x / Stages) & 1u);
  prim::wgmmaFence();
  forward_sm90::issueQK<Element, DK, kTileKeys, kRows>(s, qDescriptor,
                                                       prim::wgmmaDescriptorSw128(window.k(x % Stages), 16, 1024));
  prim::wgmmaCommitGroup();
}

// One consumer warpgroup's O columns [column0, column0 + Columns) of its rows (of DV), from the accumulators and the
// rows' (max in log2 units, sum): with one chunk, O and the LSE with the sink folded in (decode_epilogue.cuh's rule);
// otherwise the chunk's partial state (normalized O, and (max, sum) apart) for decodeMergeKernel. A row without a
// visible key (sum 0) gets O = 0. The LSE and (max, sum) come from the warpgroup that writesStats.
template <typename Element, int Columns, int DV>
__device__ __forceinline__ void storeRows(const DecodeParams &p, const decode::DecodeWork &w,
                                          const float (&o)[Columns / 2], const float (&maxLog2)[2],
                                          const float (&total)[2], int localRow0, int quad, int column0,
                                          bool writesStats) {
  const bool direct = int32_t(p.numChunks) == 1;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = w.firstRow + localRow0 + 8 * h;
    if (row >= p.rows) continue;
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    const int64_t head = w.headOf(p, groupHead);
    float m = maxLog2[h];
    float l = total[h];
    float keep = 1.f;
    if (direct && p.sinks != nullptr) keep = prim::foldSink<prim::Exp2>(m, l, __ldg(p.sinks + head) * prim::kLog2e);
    const bool emptyRow = !(l > 0.f);
    const float inverse = emptyRow ? 0.f : keep / l;
    if (direct) {
      Element *out = static_cast<Element *>(p.o) + int64_t(w.batch) * p.oBatch + head * p.oHead +
                     int64_t(token) * p.oRow + column0 + 2 * quad;
#pragma unroll
      for (int dt = 0; dt < Columns / 8; ++dt)
        *reinterpret_cast<uint32_t *>(out + dt * 8) =
            prim::packFloat2<Element>(o[4 * dt + 2 * h] * inverse, o[4 * dt + 2 * h + 1] * inverse);
      if (writesStats && quad == 0 && p.lse != nullptr)
        p.lse[int64_t(w.batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] =
            emptyRow ? prim::negInf() : float((double(m) + double(log2f(l))) * double(prim::kLn2));
    } else {
      const int64_t stateRow = ((int64_t(w.chunk) * p.batch + w.batch) * p.heads + head) * p.seqQ + token;
      float *dst = p.partialO + stateRow * DV + column0 + 2 * quad;
#pragma unroll
      for (int dt = 0; dt < Columns / 8; ++dt)
        *reinterpret_cast<float2 *>(dst + dt * 8) =
            make_float2(o[4 * dt + 2 * h] * inverse, o[4 * dt + 2 * h + 1] * inverse);
      if (writesStats && quad == 0) *reinterpret_cast<float2 *>(p.partialLse + 2 * stateRow) = make_float2(m, l);
    }
  }
}

// Split keys (splitsKeys(DV)): consumer warpgroup `group` takes tiles group, group + 2, ... of the chunk with all of
// O and a softmax of its own (the next tile's S issued before this tile's P V, as in warpgroup 1 of the column split);
// then warpgroup 2 leaves its rows' (max, sum) in `stats` and its O in the stage of its last tile, which no copy
// refills (only warpgroup 1's last tile can come after it; without a tile of its own, tile 1's, which does not exist),
// or where a stage is too small (V from K's stages) in the layout's merge region, as [DV / 2][128] FP32: a thread's
// registers at a stride of 128, so both sides' accesses are conflict-free; each of its threads then arrives on the
// merge barrier. Warpgroup 1 waits there, merges the two states (merge_state.cuh's rule: each weighted by exp2 of its
// max against the larger) and writes the rows.
template <typename Element, int DK, int DV, int Stages, typename Window>
__device__ __forceinline__ void consumeAlternateTiles(const DecodeParams &p, const decode::DecodeWork &w,
                                                      const Window &window, uint32_t sQ, float2 *stats, int group,
                                                      int thread) {
  static_assert(Stages % 2 == 0 && Stages >= 4, "each warpgroup's tiles x and x + 2 need stages of their own");
  using Fragments = uint32_t[kTileKeys / 16][4];
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int quad = lane % 4;
  const int localRow0 = 16 * warp + lane / 4;  // this thread's rows: localRow0 and localRow0 + 8
  const int numTiles = w.numTiles;
  const float scaleLog2 = p.scale * prim::kLog2e;
  const RowKeys rowKeys(p, w, localRow0);
  const uint64_t qDescriptor = prim::wgmmaDescriptorSw128(sQ, 16, 1024);
  float o[DV / 2];
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
  float s[kTileKeys / 2];
  Fragments pEven, pOdd;  // P of this warpgroup's current tile and of its next one
  float rowMax[2] = {forward_sm90::negativeInfinity(), forward_sm90::negativeInfinity()};
  float rowSum[2] = {0.f, 0.f};
  float correction[2] = {1.f, 1.f};
  bool moved = false;

  // S of tile x (complete) -> masked, P = exp2 into `fragments`, the rows' correction factors; V's rows past the
  // chunk zeroed in the stage (0 x NaN must not reach O) before any thread of the warpgroup issues its P V.
  auto softmax = [&](int x, Fragments &fragments) {
    rowKeys.mask(s, w.keyBegin + x * kTileKeys, w.keyEnd, quad);
    moved = __any_sync(0xffffffffu, forward_sm90::softmaxBlock<kTileKeys>(s, rowMax, rowSum, correction, scaleLog2));
    forward_sm90::convertP<Element, kTileKeys>(s, fragments);
    const int inChunk = w.keyEnd - (w.keyBegin + x * kTileKeys);
    if (inChunk < kTileKeys) {
      zeroTailRows<DV>(window.v(x % Stages), inChunk, thread);
      prim::fenceProxyAsyncShared();
      prim::namedBarrierSync(kTailZeroed + uint32_t(group), 128);
    }
  };
  auto issuePV = [&](int x, const Fragments &fragments) {
    if (moved) forward_sm90::rescaleO<DV>(o, correction);
    prim::wgmmaFence();
    issuePVRegisters<Element, DV>(o, fragments, window.v(x % Stages));
    prim::wgmmaCommitGroup();
  };
  auto finishPV = [&](int x, Fragments &fragments) {
    prim::wgmmaWaitGroup<0>();
    prim::wgmmaFenceOperands(o);
    prim::wgmmaFenceOperands(fragments);
    __syncwarp();
    if (lane == 0) prim::mbarrierArrive(window.empty(x % Stages));
  };
  auto step = [&](int x, Fragments &current, Fragments &next) {
    issueTileS<Element, DK, Stages>(s, qDescriptor, window, x + 2);
    issuePV(x, current);
    prim::wgmmaWaitGroup<1>();  // S of the next tile; this tile's P V may still run
    prim::wgmmaFenceOperands(s);
    softmax(x + 2, next);  // its factors: O takes them once this P V is done
    finishPV(x, current);
  };

  int x = group;
  if (x < numTiles) {
    issueTileS<Element, DK, Stages>(s, qDescriptor, window, x);
    prim::wgmmaWaitGroup<0>();
    prim::wgmmaFenceOperands(s);
    softmax(x, pEven);
  }
#pragma unroll 1
  while (x + 2 < numTiles) {
    step(x, pEven, pOdd);
    x += 2;
    if (x + 2 >= numTiles) break;
    step(x, pOdd, pEven);
    x += 2;
  }
  if (x < numTiles) {
    if ((x - group) / 2 % 2 == 0) {
      issuePV(x, pEven);
      finishPV(x, pEven);
    } else {
      issuePV(x, pOdd);
      finishPV(x, pOdd);
    }
  }

  float maxLog2[2], total[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    total[h] = prim::quadSum(rowSum[h]);
    maxLog2[h] = rowMax[h] == forward_sm90::negativeInfinity() ? rowMax[h] : rowMax[h] * scaleLog2;
  }
  const int mergeSlot = (numTiles < 2 ? 1 : (numTiles - 2) | 1) % Stages;
  float *mergeO = window.template mergeRegion<float>(mergeSlot);
  // Cluster merge (the unit's chunks are one cluster): warpgroup 1 leaves the CTA's merged state, O unnormalized as
  // [64 rows][DV] FP32 at clusterState (columns XOR-swizzled by 8 (row % 4), so that a warp's float2 stores, 8 rows x
  // 4 quads, take two wavefronts) and (m, l) per row in the P slab (unused with split keys); after a cluster barrier
  // the 256 consumer threads of each CTA merge their share of the rows from every CTA (decode::mergeClusterRows).
  const uint32_t clusterO = window.clusterState(mergeSlot);
  const uint32_t clusterStats = window.base + Window::Layout::kP;
  auto mergeCluster = [&]() {
    __syncwarp();  // the cluster barrier is .aligned
    prim::clusterSync();
    decode::mergeClusterRows<Element, DV>(
        p, w, DV, clusterStats,
        [&](int localRow, int d) { return clusterO + uint32_t(localRow * DV + (d ^ (8 * (localRow % 4)))) * 4u; },
        thread + 128 * group, 256);
    prim::clusterSync();  // the other CTAs have read this one's state
  };
  if (group == 1) {
    if (quad == 0) {
      stats[localRow0] = make_float2(maxLog2[0], total[0]);
      stats[localRow0 + 8] = make_float2(maxLog2[1], total[1]);
    }
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) mergeO[i * 128 + thread] = o[i];
    prim::mbarrierArrive(window.mergeReady());  // every thread its own writes (racecheck follows these, not bar.sync)
    if (p.clusterMerge) mergeCluster();
    return;
  }
  prim::mbarrierWait(window.mergeReady(), 0u);
  float mine[2], theirs[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float2 other = stats[localRow0 + 8 * h];
    const float top = fmaxf(maxLog2[h], other.x);
    const float base = prim::softmaxBase(top);  // both empty: weights exp2(-inf) = 0, no -inf - -inf
    mine[h] = exp2f(maxLog2[h] - base);
    theirs[h] = exp2f(other.x - base);
    total[h] = total[h] * mine[h] + other.y * theirs[h];
    maxLog2[h] = top;
  }
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) {
    const int h = (i / 2) % 2;  // accumulator i = 4 dt + 2 h + e
    o[i] = o[i] * mine[h] + mergeO[i * 128 + thread] * theirs[h];
  }
  if (!p.clusterMerge) {
    storeRows<Element, DV, DV>(p, w, o, maxLog2, total, localRow0, quad, 0, true);
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = localRow0 + 8 * h;
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      const int column = (8 * dt + 2 * quad) ^ (8 * (row % 4));
      prim::storeSharedFloat2(clusterO + uint32_t(row * DV + column) * 4u, o[4 * dt + 2 * h], o[4 * dt + 2 * h + 1]);
    }
    if (quad == 0) prim::storeSharedFloat2(clusterStats + uint32_t(row) * 8u, maxLog2[h], total[h]);
  }
  mergeCluster();
}

template <typename Element, int DK, int DV, bool VFromK, bool Paged>
__global__ void __launch_bounds__(kThreads, 1) decodeSm90Kernel(const __grid_constant__ DecodeParams p) {
  using L = SharedLayout<DK, DV, VFromK>;
  constexpr int kStages = L::kStages;
  constexpr int kHalf = DV / 2;
  static_assert(kHalf % 64 == 0 && kHalf <= 256, "a consumer warpgroup's O columns are one wgmma N of whole slabs");
  extern __shared__ __align__(16) unsigned char smemRaw[];
  const SharedWindow<L, VFromK> window(smemRaw);
  const uint32_t sQ = window.base + L::kQ;
  const uint32_t sP = window.base + L::kP;
  float *factors = reinterpret_cast<float *>(window.pointer + L::kFactors);
  float2 *stats = reinterpret_cast<float2 *>(window.pointer + L::kStats);

  // Every consumer warp releases each stage; with split keys, the four of the warpgroup that took its tile.
  if (threadIdx.x == 0) {
    prepareStages<kStages, VFromK>(p, window.full(0), L::kSplitKeys ? 4u : 8u);
    if constexpr (L::kSplitKeys) prim::mbarrierInit(window.mergeReady(), 128u);
  }
  const decode::DecodeWork w = decode::findWork<kTileKeys, Paged>(p);
  __syncthreads();
  const int warpGroup = int(threadIdx.x) / 128;
  const int numTiles = w.numTiles;

  if (warpGroup == 0) {
    // ---------------------------------------------------------------------------------------------------- producer
    prim::setMaxRegistersDecrease<kProducerRegisters>();
    if (threadIdx.x == 0)
      produceTiles<kStages, VFromK, Paged>(p, w, window.k(0), L::kStageBytes, L::kKBytes, window.full(0));
    if constexpr (L::kSplitKeys) {
      if (p.clusterMerge) {  // a cluster barrier counts every thread of the cluster: the consumers' two
        __syncwarp();
        prim::clusterSync();
        prim::clusterSync();
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------------------------------ consumers
  prim::setMaxRegistersIncrease<kConsumerRegisters>();
  const int group = warpGroup - 1;
  const int thread = int(threadIdx.x) - 128 * warpGroup;
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int quad = lane % 4;
  const int localRow0 = 16 * warp + lane / 4;  // this thread's rows: localRow0 and localRow0 + 8

  {  // Q by the 256 consumer threads
    loadQRows<Element, DK, kRows>(p, w, sQ, int(threadIdx.x) - 128, 256);
    prim::cpAsyncCommit();
    prim::cpAsyncWaitAll();
    prim::fenceProxyAsyncShared();  // cp.async wrote through the generic proxy; wgmma reads through the async one
    prim::namedBarrierSync(kQReady, 256);
  }

  if constexpr (L::kSplitKeys) {
    consumeAlternateTiles<Element, DK, DV, kStages>(p, w, window, sQ, stats, group, thread);
  } else {
    auto releaseStage = [&](int slot) {
      __syncwarp();
      if (lane == 0) prim::mbarrierArrive(window.empty(slot));
    };

    if (group == 0) {
      // ---------------------------------------------------------------------------- warpgroup 1: S, softmax, O half 0
      const float scaleLog2 = p.scale * prim::kLog2e;
      const RowKeys rowKeys(p, w, localRow0);
      float o[kHalf / 2];
#pragma unroll
      for (int i = 0; i < kHalf / 2; ++i) o[i] = 0.f;
      float s[kTileKeys / 2];
      uint32_t pTile[kTileKeys / 16][4];  // P of the tile whose P V is next
      float rowMax[2] = {forward_sm90::negativeInfinity(), forward_sm90::negativeInfinity()};
      float rowSum[2] = {0.f, 0.f};
      float correction[2] = {1.f, 1.f};
      bool moved = false;  // whether a row maximum of this warp moved in the last softmax (else O's rescale is 1)
      const uint64_t qDescriptor = prim::wgmmaDescriptorSw128(sQ, 16, 1024);

      auto issueS = [&](int x, bool landed = false) {
        issueTileS<Element, DK, kStages>(s, qDescriptor, window, x, landed);
      };
      // S of tile x (complete) -> masked, P = exp2 in place, the rows' correction factors.
      auto softmax = [&](int x) {
        rowKeys.mask(s, w.keyBegin + x * kTileKeys, w.keyEnd, quad);
        moved =
            __any_sync(0xffffffffu, forward_sm90::softmaxBlock<kTileKeys>(s, rowMax, rowSum, correction, scaleLog2));
      };
      // P of tile x (into pTile) and the factors to warpgroup 2, once it has read the previous ones; V's rows past the
      // chunk are zeroed in the stage first.
      auto handOver = [&](int x) {
        forward_sm90::convertP<Element, kTileKeys>(s, pTile);
        if (x > 0) prim::namedBarrierSync(kPFree, 256);
        const int inChunk = w.keyEnd - (w.keyBegin + x * kTileKeys);
        if (inChunk < kTileKeys) zeroTailRows<DV>(window.v(x % kStages), inChunk, thread);
        storeP(sP, pTile, localRow0, quad);
        if (quad == 0) {
          factors[localRow0] = correction[0];
          factors[localRow0 + 8] = correction[1];
        }
        prim::fenceProxyAsyncShared();  // P and the zeros are read by wgmma (async proxy), here and in warpgroup 2
        if (inChunk < kTileKeys) prim::namedBarrierSync(kTailZeroed, 128);
        prim::namedBarrierSync(kPReady, 256);
      };
      auto issuePV = [&](int x) {
        if (moved) forward_sm90::rescaleO<kHalf>(o, correction);
        prim::wgmmaFence();
        issuePVRegisters<Element, kHalf>(o, pTile, window.v(x % kStages));
        prim::wgmmaCommitGroup();
      };
      auto finishPV = [&](int x) {
        prim::wgmmaWaitGroup<0>();
        prim::wgmmaFenceOperands(o);
        prim::wgmmaFenceOperands(pTile);
        releaseStage(x % kStages);
      };
      // A turn of the loop takes tile x from its S (landed in `s`) to its P V, and issues the next tile's S. With two
      // stages that S goes to the tensor cores behind this P V, so that this tile's stage is released while the S
      // runs: the copy of tile x + 2, which refills it, then lands under the S, softmax and hand-over of tile x + 1.
      // (With the S first and the release after the next hand-over, the copy started only then and the S of tile
      // x + 2 waited for it: 0.89-0.95x this order at 128 heads, NOTES.md.) With one stage the next tile's copy waits
      // for this tile's release. Either way this P V is done before the next P is formed, so one set of fragments
      // serves (two, alternating, made ptxas spill ~180 bytes in this order).
      if (numTiles > 0) {
        issueS(0);
        prim::wgmmaWaitGroup<0>();
      }
#pragma unroll 1
      for (int x = 0; x < numTiles; ++x) {
        prim::wgmmaFenceOperands(s);
        softmax(x);
        handOver(x);
        if (x + 1 == numTiles) {
          issuePV(x);
          finishPV(x);
        } else if constexpr (kStages > 1) {
          // This P V goes out before the wait for the next tile's copy, so that a late copy does not hold up this
          // tile's release (and with it the copy after next). The wait's retry loop is one asm block: a compiled loop
          // with the P V in flight made ptxas spill around it.
          issuePV(x);
          prim::mbarrierWaitInline(window.full((x + 1) % kStages), uint32_t((x + 1) / kStages) & 1u);
          issueS(x + 1, true);
          prim::wgmmaWaitGroup<1>();  // this tile's P V; the next S may still run
          prim::wgmmaFenceOperands(o);
          prim::wgmmaFenceOperands(pTile);
          releaseStage(x % kStages);
          prim::wgmmaWaitGroup<0>();
        } else {
          issuePV(x);
          finishPV(x);
          issueS(x + 1);
          prim::wgmmaWaitGroup<0>();
        }
      }
      if (numTiles > 0) prim::namedBarrierSync(kPFree, 256);  // balances warpgroup 2's last arrival
      float maxLog2[2], total[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        total[h] = prim::quadSum(rowSum[h]);
        maxLog2[h] = rowMax[h] == forward_sm90::negativeInfinity() ? rowMax[h] : rowMax[h] * scaleLog2;
      }
      if (quad == 0) {
        stats[localRow0] = make_float2(maxLog2[0], total[0]);
        stats[localRow0 + 8] = make_float2(maxLog2[1], total[1]);
      }
      prim::namedBarrierSync(kStatsReady, 256);
      storeRows<Element, kHalf, DV>(p, w, o, maxLog2, total, localRow0, quad, 0, true);
    } else {
      // --------------------------------------------------------------------------------- warpgroup 2: O half 1
      float o[kHalf / 2];
#pragma unroll
      for (int i = 0; i < kHalf / 2; ++i) o[i] = 0.f;
#pragma unroll 1
      for (int x = 0; x < numTiles; ++x) {
        prim::namedBarrierSync(kPReady, 256);
        const float c[2] = {factors[localRow0], factors[localRow0 + 8]};
        if (__any_sync(0xffffffffu, c[0] != 1.f || c[1] != 1.f)) forward_sm90::rescaleO<kHalf>(o, c);
        prim::wgmmaFence();
        issuePVShared<Element, kHalf>(o, sP, window.v(x % kStages) + uint32_t(kHalf / 64) * kTileKeys * 128);
        prim::wgmmaCommitGroup();
        prim::wgmmaWaitGroup<0>();
        prim::wgmmaFenceOperands(o);
        // The stage first: with one stage, warpgroup 1 reaches kPFree only once the next tile has landed in it.
        releaseStage(x % kStages);
        prim::namedBarrierSync(kPFree, 256);
      }
      prim::namedBarrierSync(kStatsReady, 256);
      float maxLog2[2], total[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 st = stats[localRow0 + 8 * h];
        maxLog2[h] = st.x;
        total[h] = st.y;
      }
      storeRows<Element, kHalf, DV>(p, w, o, maxLog2, total, localRow0, quad, kHalf, false);
    }
  }
}

}  // namespace flashattn::cuda::decode_sm90
