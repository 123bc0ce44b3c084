// SPDX-License-Identifier: BSD-3-Clause
// The Hopper (sm_90a) forward kernel: warp-specialized FlashAttention with wgmma, for FP16/BF16 storage.
//
// A tile is BlockM = 64 * ConsumerGroups query rows of one (sequence, head); a CTA serves one tile or, persistent,
// a sequence of them (forEachTile), with the slot and phase counters running on across tiles. Warpgroup 0 is the
// producer: its 128 threads copy the tile's Q and then K and V blocks of BlockN keys with cp.async into
// 128-byte-swizzled shared memory (the layout wgmma reads), in a ring of Stages slots per tensor guarded by mbarriers
// (full: data landed; empty: every consumer warp is done reading; Q has its own pair). Each consumer warpgroup owns
// 64 query rows:
//   S = Q K^T      wgmma m64nBlockNk16, Q and K from shared memory (K-major)
//   P = softmax    online, in registers (exp2 with the scale folded in); the S accumulator layout is the A-register
//                  layout of the next product, so P never touches shared memory
//   O += P V       wgmma m64nDk16, P from registers, V from shared memory read MN-major (transposed B)
// Within a warpgroup the next block's S = Q K^T and the current P V are issued together and the softmax of the next
// block runs while P V is still on the tensor cores. With PingPong the consumer warpgroups take turns issuing their
// products (named barriers), so one warpgroup's softmax overlaps the other's matrix work.
//
// Key blocks are visited from the last visible one down to the first; blocks outside the tile's visible key range are
// never loaded, and only blocks that straddle a mask edge (or the end of the keys) are masked element by element.
// Rows past the sequence and keys past seqK arrive as zeros (cp.async zero-fill), so unused memory is never read into
// the products. Semantics (masks, windows, empty rows, ragged sequences, seqlensK) are those of forward_common.cuh.
//
// Paged (a compile-time switch: the dense kernel has none of it), by tensor maps (Tma): a block is whole copies of
// page runs, one map box per run and 64 columns (KernelParams::pageBoxRows). By cp.async: before each K or V block
// load the producer threads write the block's row offsets into one of two row tables (paged_kv.cuh's rule, one thread
// per key), meet at a named barrier of the producer warpgroup, and copy each row from its offset. The barrier of one
// load also orders the previous load's reads of the other table before the next write to it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels/forward/forward_common.cuh"
#include "cuda/kernels/forward_sm90/forward_sm90_params.hpp"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/slab_copy.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the forward_sm90 kernels use wgmma and setmaxnreg: compile them with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace flashattn::cuda::forward_sm90 {

using forward::ForwardParams;

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000u); }

// A Rows x D tile into the swizzled slab stack at `tile` with the 128 producer threads (thread 0..127); rows >=
// validRows and columns past the problem's head dim (a narrower problem on this instance) are zero-filled and read
// nothing.
template <typename Element, int D, int Rows>
__device__ __forceinline__ void loadTileAsync(uint32_t tile, const Element *rows, int64_t rowStride, int validRows,
                                              int thread, const void *safeAddress, int headDim) {
  prim::cpAsyncTileToSlabs<Element, D, Rows, 128, 4>(tile, rows, rowStride, validRows, thread, safeAddress,
                                                     headDim / 8);
}

// S = Q K^T for one consumer warpgroup: QKWidth / 16 k-steps (QKWidth: the instance's head dim, or fewer columns where
// the problem's are zeros past it); step ks reads slab ks / 4 at byte 32 * (ks % 4) of each row.
template <typename Element, int QKWidth, int BlockN, int BlockM>
__device__ __forceinline__ void issueQK(float (&s)[BlockN / 2], uint64_t qDescriptor, uint64_t kDescriptor) {
#pragma unroll
  for (int ks = 0; ks < QKWidth / 16; ++ks) {
    const uint32_t qOffset = uint32_t(ks / 4) * BlockM * 128 + uint32_t(ks % 4) * 32;
    const uint32_t kOffset = uint32_t(ks / 4) * BlockN * 128 + uint32_t(ks % 4) * 32;
    prim::WgmmaOp<Element, BlockN>::ss(s, prim::wgmmaDescriptorAdvance(qDescriptor, qOffset),
                                       prim::wgmmaDescriptorAdvance(kDescriptor, kOffset), ks > 0 ? 1u : 0u);
  }
}

// The same with Q as A fragments in registers (loaded once per tile by loadQFragments).
template <typename Element, int QKWidth, int BlockN>
__device__ __forceinline__ void issueQKFromRegisters(float (&s)[BlockN / 2], const uint32_t (&q)[QKWidth / 16][4],
                                                     uint64_t kDescriptor) {
#pragma unroll
  for (int ks = 0; ks < QKWidth / 16; ++ks) {
    const uint32_t kOffset = uint32_t(ks / 4) * BlockN * 128 + uint32_t(ks % 4) * 32;
    prim::WgmmaOp<Element, BlockN>::rs(s, q[ks], prim::wgmmaDescriptorAdvance(kDescriptor, kOffset),
                                       ks > 0 ? 1u : 0u);
  }
}

// A fragments of a warp's 16 Q rows (rows 16 * warp + 0..15 of the warpgroup's 64 at sQRows) for every k-step: lane l
// addresses row l % 16, k-chunk l / 16 of the step; the row's XOR is l % 8 since the rows start on multiples of 8.
template <int QKWidth, int BlockM>
__device__ __forceinline__ void loadQFragments(uint32_t (&q)[QKWidth / 16][4], uint32_t sQRows, int warp, int lane) {
  const uint32_t row = uint32_t(16 * warp + (lane % 16));
  const uint32_t rowAddress = sQRows + row * 128;
#pragma unroll
  for (int ks = 0; ks < QKWidth / 16; ++ks) {
    const uint32_t chunk = uint32_t(2 * (ks % 4) + lane / 16) ^ uint32_t(lane % 8);
    prim::ldmatrixX4(q[ks], rowAddress + uint32_t(ks / 4) * BlockM * 128 + (chunk << 4));
  }
}

// O += P V: BlockN / 16 k-steps of 16 keys; step kk starts 16 rows (2048 bytes) further into every V slab.
template <typename Element, int D, int BlockN>
__device__ __forceinline__ void issuePV(float (&o)[D / 2], const uint32_t (&p)[BlockN / 16][4],
                                        uint64_t vDescriptor) {
#pragma unroll
  for (int kk = 0; kk < BlockN / 16; ++kk)
    prim::WgmmaOp<Element, D>::rsTransB(o, p[kk], prim::wgmmaDescriptorAdvance(vDescriptor, uint32_t(kk) * 2048));
}

// The mask rule's diagonal form (core/mask.hpp) per element. Row i sees the keys [lo, hi] of keysOnDiagonals; this
// thread's element (nt, e) of the row holds key n0 + 2 quad + 8 nt + e, so with the row's bounds taken relative to
// n0 + 2 quad once, each element costs two compares against a constant (instead of its distance and three compares).
template <int BlockN>
__device__ __forceinline__ void maskBlock(float (&s)[BlockN / 2], int n0, int row0, int quad, Diagonals diagonals,
                                          int seqK) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const forward::RowKeys keys = keysOnDiagonals<forward::RowKeys>(diagonals, row0 + 8 * h, seqK);
    const int first = keys.lo - (n0 + 2 * quad), last = keys.hi - (n0 + 2 * quad);
#pragma unroll
    for (int nt = 0; nt < BlockN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * nt + e < first || 8 * nt + e > last) s[4 * nt + 2 * h + e] = negativeInfinity();
  }
}

// Softcap and ALiBi (the TransformLogits kernels): S becomes log2-domain logits (prim::LogitTransform), so that the
// softmax that follows runs with a unit scale.
template <int BlockN>
__device__ __forceinline__ void transformLogits(float (&s)[BlockN / 2], int n0, int row0, int quad,
                                                const prim::LogitTransform &t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Element (nt, e)'s distance: row row0 + 8h's to key n0 + 2 quad, plus 8 nt + e.
    const float distance0 = float(n0 + 2 * quad - (row0 + 8 * h + t.shift));
#pragma unroll
    for (int nt = 0; nt < BlockN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float unused;
        s[4 * nt + 2 * h + e] = t.logitLog2(s[4 * nt + 2 * h + e], distance0 + float(8 * nt + e), &unused);
      }
  }
}

// Online softmax of one block: new row maxima, the factor for what was accumulated so far, P = exp2(S * scale - max)
// in place of S, and the running row sums (per thread: only this thread's columns; the quad is summed at the end).
// Returns whether any maximum of this thread moved (when none of the warp did, the O rescale is exactly 1).
template <int BlockN>
__device__ __forceinline__ bool softmaxBlock(float (&s)[BlockN / 2], float (&rowMax)[2], float (&rowSum)[2],
                                             float (&correction)[2], float scaleLog2) {
  bool moved = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float blockMax = negativeInfinity();
#pragma unroll
    for (int nt = 0; nt < BlockN / 8; ++nt) blockMax = fmaxf(blockMax, fmaxf(s[4 * nt + 2 * h], s[4 * nt + 2 * h + 1]));
    blockMax = prim::quadMax(blockMax);
    const float newMax = fmaxf(rowMax[h], blockMax);
    // A row with nothing visible yet keeps max -inf: subtracting 0 keeps every exp2 argument -inf (P = 0) instead of
    // -inf - -inf = NaN, and the correction exp2(-inf) = 0 applies to zeros.
    const float newMaxScaled = prim::scaledMax(newMax, scaleLog2);
    correction[h] = prim::maxCorrection(rowMax[h], newMaxScaled, scaleLog2);
    moved |= newMax != rowMax[h];
    rowMax[h] = newMax;
    float blockSum = 0.f;
#pragma unroll
    for (int nt = 0; nt < BlockN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = prim::exp2Fast(fmaf(s[4 * nt + 2 * h + e], scaleLog2, -newMaxScaled));
        s[4 * nt + 2 * h + e] = pe;
        blockSum += pe;
      }
    rowSum[h] = rowSum[h] * correction[h] + blockSum;
  }
  return moved;
}

// Two adjacent 8-key accumulator blocks of S are one 16-key A fragment of P V.
template <typename Element, int BlockN>
__device__ __forceinline__ void convertP(const float (&s)[BlockN / 2], uint32_t (&p)[BlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BlockN / 16; ++kk) {
    p[kk][0] = prim::packFloat2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
    p[kk][1] = prim::packFloat2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = prim::packFloat2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = prim::packFloat2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

template <int D>
__device__ __forceinline__ void rescaleO(float (&o)[D / 2], const float (&correction)[2]) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      o[4 * dt + 2 * h] *= correction[h];
      o[4 * dt + 2 * h + 1] *= correction[h];
    }
}

// Every consumer warp arrives once (the barrier counts warps): its wgmma reads of the slot are complete.
__device__ __forceinline__ void releaseSlot(uint32_t emptyBarrier, int lane) {
  __syncwarp();
  if (lane == 0) prim::mbarrierArrive(emptyBarrier);
}

// No visible key for any of these rows: O = 0, LSE = the sink or -inf (16-byte stores: the launcher checked
// alignment).
template <typename Element>
__device__ __forceinline__ void writeEmptyRows(const ForwardParams &p, Element *oRows, float *lseRows, int rows,
                                               int thread, int threads, float emptyLse) {
  const int chunks = p.headDimV / 8;
  for (int idx = thread; idx < rows * chunks; idx += threads) {
    const int r = idx / chunks;
    const int c = idx - r * chunks;
    *reinterpret_cast<uint4 *>(oRows + int64_t(r) * p.oRow + c * 8) = make_uint4(0u, 0u, 0u, 0u);
  }
  if (lseRows != nullptr)
    for (int r = thread; r < rows; r += threads) lseRows[int64_t(r) * p.lseRow] = emptyLse;
}

// The register split of setmaxnreg: the producer only computes addresses; the consumers hold S, P and O. The paged
// tensor-map producer (four issuing warps, each with its pages and barrier phases) spills 40 bytes at 40 registers;
// with two consumer groups it gets 56, beside which their code fits in 224 without spilling (ptxas, CUDA 13.0). With
// three (d64), 152 registers make the consumers spill 48 bytes, so the producer keeps 32 (and spills 92).
template <int ConsumerGroups, bool PagedTma = false>
struct RegisterSplit;
template <>
struct RegisterSplit<2> {  // 384 threads x 168 at entry = 2 x 128 x 232 + 128 x 40
  static constexpr int kProducer = 40;
  static constexpr int kConsumer = 232;
};
template <>
struct RegisterSplit<3> {  // 512 threads x 128 at entry = 3 x 128 x 160 + 128 x 32
  static constexpr int kProducer = 32;
  static constexpr int kConsumer = 160;
};
template <>
struct RegisterSplit<2, true> {  // 2 x 128 x 224 + 128 x 56
  static constexpr int kProducer = 56;
  static constexpr int kConsumer = 224;
};
template <>
struct RegisterSplit<3, true> : RegisterSplit<3> {};

constexpr uint32_t kSchedulerBarrierBase = 1;  // named barriers 1..ConsumerGroups (0 is __syncthreads)
constexpr uint32_t kProducerBarrier = 4;       // the paged producer's row tables (past every consumer group's)

// One (sequence, head, query block) tile and everything both roles derive from it the same way.
struct Tile {
  forward::WorkItem work;
  forward::SequenceExtent seq;
  int m0;
  int rowsHere;
  forward::RowKeys allRows;  // keys every row of the tile sees: a key block inside needs no per-element mask
  int firstKeyBlock;
  int lastKeyBlock;
  bool active;  // the sequence has rows here (ragged batches: the grid covers the longest sequence)
  bool empty;   // no row of the tile sees any key
};

// Tiles run section by section (pairsPerSection (sequence, head) pairs each, so the CTAs running together share K/V
// in L2); inside a section the longest query blocks (causal: the last) come first, so the short ones fill the tail.
template <int BlockM, int BlockN, bool Paged>
__device__ __forceinline__ Tile decodeTile(const KernelParams &kp, int64_t index) {
  const ForwardParams &p = kp.f;
  const int64_t pairs = int64_t(p.batch) * p.heads;
  const int64_t sectionTiles = kp.pairsPerSection * p.queryBlocks;
  const int64_t section = index / sectionTiles;
  const int64_t firstPair = section * kp.pairsPerSection;
  const int64_t pairsHere = pairs - firstPair < kp.pairsPerSection ? pairs - firstPair : kp.pairsPerSection;
  const int64_t rest = index - section * sectionTiles;
  const int64_t rank = rest / pairsHere;
  const int64_t pair = firstPair + (rest - rank * pairsHere);
  Tile t;
  t.work.batch = int32_t(pair / p.heads);
  t.work.head = int32_t(pair - int64_t(t.work.batch) * p.heads);
  t.work.queryBlock = p.queryBlocks - 1 - int32_t(rank);
  t.seq = forward::sequenceExtent<Paged>(p, t.work.batch);
  t.m0 = t.work.queryBlock * BlockM;
  t.active = t.m0 < t.seq.seqQ;
  t.rowsHere = t.active ? min(BlockM, t.seq.seqQ - t.m0) : 0;
  const forward::RowKeys firstRow = forward::rowKeys(p, t.m0, t.seq.seqQ, t.seq.seqK);
  const forward::RowKeys lastRow = forward::rowKeys(p, t.m0 + max(t.rowsHere, 1) - 1, t.seq.seqQ, t.seq.seqK);
  const forward::RowKeys tileKeys = keysOfRows(firstRow, lastRow);
  const BlockRange keyBlocks = blocksOf(tileKeys, BlockN);
  t.allRows = keysOfEveryRow(firstRow, lastRow);
  t.empty = tileKeys.lo > tileKeys.hi;
  t.firstKeyBlock = keyBlocks.first;
  t.lastKeyBlock = keyBlocks.last;
  return t;
}

// The tiles of one CTA: waves of gridDim.x consecutive indices, walked forward in even waves and backward in odd ones,
// so a persistent CTA that drew a long tile of one wave draws a short one of the next (tiles are sorted longest
// first). With one CTA per tile (gridDim.x == tiles) this is just blockIdx.x.
template <typename Body>
__device__ __forceinline__ void forEachTile(int64_t totalTiles, Body &&body) {
#pragma unroll 1
  for (int64_t first = 0; first < totalTiles; first += gridDim.x) {
    const bool backward = ((first / gridDim.x) & 1) != 0;
    const int64_t index = first + (backward ? int64_t(gridDim.x) - 1 - blockIdx.x : int64_t(blockIdx.x));
    if (index < totalTiles) body(index);
  }
}

// A tile's loads in the order the consumers use them: K of the last visible block, Q, then K(n - 1) together with
// V(n), ..., the first block's V last. Both producers walk it.
template <typename LoadK, typename LoadQ, typename LoadV>
__device__ __forceinline__ void issueTileLoads(const Tile &t, LoadK &&loadK, LoadQ &&loadQ, LoadV &&loadV) {
  loadK(t.lastKeyBlock);  // the first K block can land while the consumers still read the previous tile's Q
  loadQ();
#pragma unroll 1
  for (int n = t.lastKeyBlock - 1; n >= t.firstKeyBlock; --n) {
    loadK(n);
    loadV(n + 1);
  }
  loadV(t.firstKeyBlock);
}

// D: the Q/K head dim of the instance; DV: its V/O head dim (D but for instances compiled for the two apart); QKWidth:
// the columns S = Q K^T contracts over (D, or trimmedQKWidth where the problem's columns past it are zeros).
template <typename Element, int D, int BlockN, int ConsumerGroups, int Stages, bool PingPong, bool AsyncArrive,
          bool QInRegisters, bool Paged, bool Tma, bool TransformLogits, int DV = D, int QKWidth = D>
__global__ void __launch_bounds__((ConsumerGroups + 1) * 128, 1)
    forwardSm90Kernel(const __grid_constant__ KernelParams kp) {
  using Layout = SharedLayout<D, BlockN, ConsumerGroups, Stages, Paged, DV>;
  static_assert(QKWidth % 16 == 0 && QKWidth <= D, "S contracts over whole k-steps of the instance's columns");
  static_assert(kProducerBarrier > kSchedulerBarrierBase + ConsumerGroups - 1, "named barriers overlap");
  static_assert(!Paged || BlockN <= 128, "the row tables take one producer thread per key of a block");
  static_assert(!(Paged && Tma) || 32 % (DV / 8) == 0, "the paged tail block's V rows split over one warp");
  constexpr int kBlockM = Layout::kBlockM;
  using Split = RegisterSplit<ConsumerGroups, Paged && Tma>;  // the producer's and the consumers' setmaxnreg
  // Paged rows by cp.async: how many rows' table offsets a thread reads before their copies go out (slab_copy.cuh);
  // under the 32 registers of a three-consumer-group producer (d64) more than one spills.
  constexpr int kTableGroup = Split::kProducer > 32 ? 4 : 1;
  const ForwardParams &p = kp.f;
  extern __shared__ unsigned char sm90Shared[];
  const uint32_t base = (prim::smemAddress(sm90Shared) + 1023u) & ~1023u;
  const uint32_t sQ = base + Layout::kQ;
  const uint32_t barriers = base + Layout::kBarriers;
  auto sK = [&](int slot) { return base + Layout::kK + uint32_t(slot) * Layout::kTileBytes; };
  auto sV = [&](int slot) { return base + Layout::kV + uint32_t(slot) * Layout::kVTileBytes; };
  const uint32_t qFull = barriers;
  const uint32_t qEmpty = barriers + 8u;
  auto kFull = [&](int slot) { return barriers + 8u * uint32_t(2 + slot); };
  auto kEmpty = [&](int slot) { return barriers + 8u * uint32_t(2 + Stages + slot); };
  auto vFull = [&](int slot) { return barriers + 8u * uint32_t(2 + 2 * Stages + slot); };
  auto vEmpty = [&](int slot) { return barriers + 8u * uint32_t(2 + 3 * Stages + slot); };

  // Full barriers: one arrival per producer thread (cp.async), or the issuing thread's (tensor maps, whose bytes
  // complete the phase).
  constexpr uint32_t kFullArrivals = Tma ? 1 : 128;
  if (threadIdx.x == 0) {
    prim::mbarrierInit(qFull, kFullArrivals);
    prim::mbarrierInit(qEmpty, 4 * ConsumerGroups);
    for (int slot = 0; slot < Stages; ++slot) {
      prim::mbarrierInit(kFull(slot), kFullArrivals);
      prim::mbarrierInit(vFull(slot), kFullArrivals);
      prim::mbarrierInit(kEmpty(slot), 4 * ConsumerGroups);
      prim::mbarrierInit(vEmpty(slot), 4 * ConsumerGroups);
    }
    prim::fenceBarrierInit();
    if constexpr (Tma) {
      prim::prefetchTensorMap(&kp.qMap);
      prim::prefetchTensorMap(&kp.kMap);
      prim::prefetchTensorMap(&kp.vMap);
    }
  }
  __syncthreads();

  const int warpGroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);

  if (warpGroup == 0 && Tma) {
    // ---------------------------------------------------------------------------------- producer (tensor maps)
    // Warp 0: lane 0 issues every copy (paged: the Q copy, every barrier's expected bytes and its share of the page
    // runs); the warp copies the one block whose V rows need zeros the copy engine does not give
    // (KernelParams::copyTailBlock). Paged, the other producer warps issue the rest of the runs, warp w every
    // kIssuers-th from run w: one thread issues small copies too slowly to feed the consumers (H200, d128, pages of
    // 16 keys, 16 copies a block: 0.55-0.62 of the dense cache's speed from one warp, 0.75-0.83 from two, 0.89-0.98
    // from four).
    // Their copies may complete before warp 0 adds the bytes they carry to the barrier, which the barrier's
    // transaction count allows (its phase waits for warp 0's arrival as well). Dense, the other warps exit.
    constexpr int kIssuers = Paged ? 4 : 1;
    prim::setMaxRegistersDecrease<Split::kProducer>();
    const int runs = Paged ? BlockN / kp.pageBoxRows : 0;  // paged: copies of page runs per block and box column
    if (int(threadIdx.x) >= 32 * (Paged ? min(kIssuers, runs) : 1)) return;  // warps with no run to issue
    const int lane = kIssuers == 1 ? int(threadIdx.x) : int(threadIdx.x) % 32;
    // Warp-uniform by a shuffle from lane 0, so that a run's copy coordinates (run, key, row, page) are too and its
    // tensor copies take them from uniform registers, without a loop over the lanes' distinct values.
    const int issuerWarp = kIssuers == 1 ? 0 : __shfl_sync(0xffffffffu, int(threadIdx.x) / 32, 0);
    const bool issuer = lane == 0;
    const bool leader = kIssuers == 1 ? issuer : threadIdx.x == 0;
    int kSlot = 0, vSlot = 0;
    uint32_t kPhase = 0, vPhase = 0, qPhase = 0;
    forEachTile(kp.totalTiles, [&](int64_t index) {
      const Tile t = decodeTile<kBlockM, BlockN, Paged>(kp, index);
      if (!t.active || t.empty) return;  // the consumers write empty tiles themselves
      const int kvHead = t.work.head / p.headsPerKvHead;
      const int batch = p.ragged ? 0 : t.work.batch;  // a ragged map has a batch of one
      const int kRow0 = int(t.seq.kStart);
      // Rows x (64 * boxes) from the map at (row, head) into the slab stack at tile, completing on full.
      auto copyTile = [&](uint32_t tile, const CUtensorMap *map, int rows, int row, int head, uint32_t full,
                          auto boxes) {
        if (leader) {
          prim::mbarrierArriveExpectTx(full, uint32_t(rows) * decltype(boxes)::value * 128);
#pragma unroll
          for (int box = 0; box < decltype(boxes)::value; ++box)
            prim::tensorCopy4d(tile + uint32_t(box * rows * 128), map, box * 64, row, head, batch, full);
        }
      };
      // Paged: a block is BlockN / pageBoxRows runs of pageBoxRows keys in one page each (KernelParams); lane c
      // looks up run c's page. A run past the sequence, or in a page outside the pool, gets page -1: its box lies
      // outside the map, which the copy engine fills with zeros, and no table entry past the sequence is read.
      auto lookupPages = [&](int n) {
        int page = -1;
        const int key = n * BlockN + lane * kp.pageBoxRows;
        if constexpr (Paged)
          if (n >= 0 && lane < runs && key < t.seq.seqK) page = paged::pagedRow(p.cache, t.work.batch, key).page;
        return page;
      };
      // Block n from the pages in `pages` (lookupPages(n)) into the slab stack at tile; runs start on multiples of 8
      // rows (1024 bytes), so each lands in the swizzle the whole block would have had.
      auto copyPagedTile = [&](uint32_t tile, const CUtensorMap *map, int n, int pages, uint32_t full, auto boxes) {
        if (leader) prim::mbarrierArriveExpectTx(full, uint32_t(BlockN) * decltype(boxes)::value * 128);
#pragma unroll 1
        for (int run = issuerWarp; run < runs; run += kIssuers) {
          const int page = __shfl_sync(0xffffffffu, pages, run);
          if (issuer) {
            const int key = n * BlockN + run * kp.pageBoxRows;
            const int row = p.cache.pageSize.remainder(key, p.cache.pageSize.divide(key));
            const uint32_t runTile = tile + uint32_t(run * kp.pageBoxRows * 128);
#pragma unroll
            for (int box = 0; box < decltype(boxes)::value; ++box)
              prim::tensorCopy4d(runTile + uint32_t(box * BlockN * 128), map, box * 64, row, kvHead, page, full);
          }
        }
      };
      using QkBoxes = std::integral_constant<int, D / 64>;
      using VBoxes = std::integral_constant<int, DV / 64>;
      // Paged: K walks the blocks from the last down and V one block behind; each block's pages are looked up one K
      // block ahead (nextPages) and kept for V, so the table reads' latency passes under the waits.
      int nextPages = lookupPages(t.lastKeyBlock), kPages = -1, vPages = -1;
      auto loadK = [&](int n) {
        if constexpr (Paged) {
          vPages = kPages;  // block n + 1's, for V(n + 1) next
          kPages = nextPages;
          nextPages = lookupPages(n - 1);
        }
        prim::mbarrierWait(kEmpty(kSlot), kPhase ^ 1u);
        if constexpr (Paged)
          copyPagedTile(sK(kSlot), &kp.kMap, n, kPages, kFull(kSlot), QkBoxes{});
        else
          copyTile(sK(kSlot), &kp.kMap, BlockN, kRow0 + n * BlockN, kvHead, kFull(kSlot), QkBoxes{});
        if (++kSlot == Stages) kSlot = 0, kPhase ^= 1u;
      };
      auto loadV = [&](int n) {
        prim::mbarrierWait(vEmpty(vSlot), vPhase ^ 1u);
        if (kp.copyTailBlock && (n + 1) * BlockN > t.seq.seqK) {
          if (issuerWarp != 0) {  // warp 0's alone
            if (++vSlot == Stages) vSlot = 0, vPhase ^= 1u;
            return;
          }
          // Landed before the one arrival the barrier expects (the warp waits once per tile, for this block only).
          if constexpr (Paged) {
            // The row offsets in the first row table (written, read and waited for before the next tile's tail).
            int64_t *const tailRows = reinterpret_cast<int64_t *>(
                sm90Shared + (base - prim::smemAddress(sm90Shared)) + Layout::kRowTables);
            for (int r = lane; r < BlockN; r += 32) {
              const forward::PagedRowLookup l = forward::lookupRow(p, t.work.batch, n * BlockN + r, t.seq.seqK);
              tailRows[r] = l.present ? paged::rowOffset(l.row, p.vBatch, p.vRow) + int64_t(kvHead) * p.vHead : -1;
            }
            __syncwarp();
            prim::cpAsyncTableRowsToSlabs<Element, DV, BlockN, 32, kTableGroup>(
                sV(vSlot), static_cast<const Element *>(p.v), tailRows, lane, p.headDimV / 8);
          } else {
            const Element *vRows = static_cast<const Element *>(p.v) + int64_t(t.work.batch) * p.vBatch +
                                   int64_t(kvHead) * p.vHead + (t.seq.kStart + int64_t(n) * BlockN) * p.vRow;
            prim::cpAsyncTileToSlabs<Element, DV, BlockN, 32, 4>(sV(vSlot), vRows, p.vRow, t.seq.seqK - n * BlockN,
                                                                 lane, p.v, p.headDimV / 8);
          }
          prim::cpAsyncWaitAll();
          __syncwarp();
          if (issuer) prim::mbarrierArrive(vFull(vSlot));
        } else if constexpr (Paged) {
          // V(n) follows K(n - 1), which moved block n's pages to vPages; the first block's V follows no K load.
          copyPagedTile(sV(vSlot), &kp.vMap, n, n == t.firstKeyBlock ? kPages : vPages, vFull(vSlot), VBoxes{});
        } else {
          copyTile(sV(vSlot), &kp.vMap, BlockN, kRow0 + n * BlockN, kvHead, vFull(vSlot), VBoxes{});
        }
        if (++vSlot == Stages) vSlot = 0, vPhase ^= 1u;
      };
      auto loadQ = [&]() {
        if (issuerWarp == 0) {
          prim::mbarrierWait(qEmpty, qPhase ^ 1u);
          copyTile(sQ, &kp.qMap, kBlockM, int(t.seq.qStart + t.m0), t.work.head, qFull, QkBoxes{});
        }
        qPhase ^= 1u;
      };
      issueTileLoads(t, loadK, loadQ, loadV);
    });
  } else if (warpGroup == 0) {
    // ------------------------------------------------------------------------------------- producer (cp.async)
    prim::setMaxRegistersDecrease<Split::kProducer>();
    const int thread = int(threadIdx.x);
    int kSlot = 0, vSlot = 0;
    uint32_t kPhase = 0, vPhase = 0, qPhase = 0;
    // In-order hand-over (AsyncArrive off): a copy group is signalled once this thread's copies of it completed
    // (wait_group) and were fenced into the async proxy; one group late, so the next group's copies are in flight.
    uint32_t pending = 0;
    auto handOver = [&](uint32_t full) {
      if constexpr (AsyncArrive) {
        prim::cpAsyncMbarrierArrive(full);
      } else {
        prim::cpAsyncCommit();
        if (pending != 0) {
          prim::cpAsyncWait<1>();
          prim::fenceProxyAsyncShared();
          prim::mbarrierArrive(pending);
        }
        pending = full;
      }
    };
    // Paged: two row tables of BlockN offsets, alternating load by load.
    int64_t *const rowTables =
        reinterpret_cast<int64_t *>(sm90Shared + (base - prim::smemAddress(sm90Shared)) + Layout::kRowTables);
    uint32_t rowTable = 0;
    forEachTile(kp.totalTiles, [&](int64_t index) {
      const Tile t = decodeTile<kBlockM, BlockN, Paged>(kp, index);
      if (!t.active || t.empty) return;  // the consumers write empty tiles themselves
      const int kvHead = t.work.head / p.headsPerKvHead;
      const Element *qRows = static_cast<const Element *>(p.q) + int64_t(t.work.batch) * p.qBatch +
                             int64_t(t.work.head) * p.qHead + (t.seq.qStart + t.m0) * p.qRow;
      const Element *kRows = static_cast<const Element *>(p.k) + int64_t(t.work.batch) * p.kBatch +
                             int64_t(kvHead) * p.kHead + t.seq.kStart * p.kRow;
      const Element *vRows = static_cast<const Element *>(p.v) + int64_t(t.work.batch) * p.vBatch +
                             int64_t(kvHead) * p.vHead + t.seq.kStart * p.vRow;
      // Paged: block n's row offsets in one tensor (page and row by the rule, plus the KV head), -1 for keys past the
      // sequence or in a page outside the pool. K walks the blocks from the last down and V one block behind, so each
      // block-table read is issued one K block ahead (nextK) and kept for V (lookupV): its latency passes under the
      // copies instead of stalling the producer before every block.
      forward::PagedRowLookup lookupK{}, nextK{}, lookupV{};
      auto lookupBlock = [&](int n) {
        // Past the first block: a key index past every sequence, which lookupRow reports absent without a read.
        return forward::lookupRow(p, t.work.batch, n >= 0 ? n * BlockN + thread : t.seq.seqK, t.seq.seqK);
      };
      if constexpr (Paged && !Tma) nextK = lookupBlock(t.lastKeyBlock);
      auto stageRows = [&](forward::PagedRowLookup l, int64_t pageStride, int64_t rowStride,
                           int64_t headOffset) {
        int64_t *table = rowTables + rowTable * BlockN;
        rowTable ^= 1u;
        if (thread < BlockN)
          table[thread] = l.present ? paged::rowOffset(l.row, pageStride, rowStride) + headOffset : -1;
        prim::namedBarrierSync(kProducerBarrier, 128);
        return static_cast<const int64_t *>(table);
      };
      auto loadK = [&](int n) {
        if constexpr (Paged && !Tma) {
          lookupV = lookupK;  // block n + 1's, for V(n + 1) next
          lookupK = nextK;
          nextK = lookupBlock(n - 1);
          const int64_t *rows = stageRows(lookupK, p.kBatch, p.kRow, int64_t(kvHead) * p.kHead);
          prim::mbarrierWait(kEmpty(kSlot), kPhase ^ 1u);
          prim::cpAsyncTableRowsToSlabs<Element, D, BlockN, 128, kTableGroup>(
              sK(kSlot), static_cast<const Element *>(p.k), rows, thread, p.headDim / 8);
        } else {
          prim::mbarrierWait(kEmpty(kSlot), kPhase ^ 1u);
          loadTileAsync<Element, D, BlockN>(sK(kSlot), kRows + int64_t(n) * BlockN * p.kRow, p.kRow,
                                            t.seq.seqK - n * BlockN, thread, p.k, p.headDim);
        }
        handOver(kFull(kSlot));
        if (++kSlot == Stages) kSlot = 0, kPhase ^= 1u;
      };
      auto loadV = [&](int n) {
        if constexpr (Paged && !Tma) {
          // V(n) follows K(n - 1), which moved block n's lookup to lookupV; the last V block follows no K load.
          forward::PagedRowLookup l = lookupV;
          if (n == t.firstKeyBlock) l = lookupK;
          const int64_t *rows = stageRows(l, p.vBatch, p.vRow, int64_t(kvHead) * p.vHead);
          prim::mbarrierWait(vEmpty(vSlot), vPhase ^ 1u);
          prim::cpAsyncTableRowsToSlabs<Element, DV, BlockN, 128, kTableGroup>(
              sV(vSlot), static_cast<const Element *>(p.v), rows, thread, p.headDimV / 8);
        } else {
          prim::mbarrierWait(vEmpty(vSlot), vPhase ^ 1u);
          loadTileAsync<Element, DV, BlockN>(sV(vSlot), vRows + int64_t(n) * BlockN * p.vRow, p.vRow,
                                             t.seq.seqK - n * BlockN, thread, p.v, p.headDimV);
        }
        handOver(vFull(vSlot));
        if (++vSlot == Stages) vSlot = 0, vPhase ^= 1u;
      };
      auto loadQ = [&]() {
        prim::mbarrierWait(qEmpty, qPhase ^ 1u);
        loadTileAsync<Element, D, kBlockM>(sQ, qRows, p.qRow, t.rowsHere, thread, p.q, p.headDim);
        handOver(qFull);
        qPhase ^= 1u;
      };
      issueTileLoads(t, loadK, loadQ, loadV);
    });
    if constexpr (!AsyncArrive) {
      if (pending != 0) {
        prim::cpAsyncWait<0>();
        prim::fenceProxyAsyncShared();
        prim::mbarrierArrive(pending);
      }
    }
    prim::cpAsyncWaitAll();  // no copy outlives its issuing thread
  } else {
    // ------------------------------------------------------------------------------------------------ consumers
    prim::setMaxRegistersIncrease<Split::kConsumer>();
    const int group = warpGroup - 1;
    const int thread = int(threadIdx.x) - 128 * warpGroup;
    const int warp = thread / 32;
    const int lane = thread % 32;
    const int quad = lane % 4;
    const int rowInBlock = group * 64 + warp * 16 + lane / 4;  // this thread's rows: rowInBlock and rowInBlock + 8
    // With TransformLogits, S is turned into log2-domain logits before the softmax, which then scales by one.
    const float scaleLog2 = TransformLogits ? 1.f : p.scale * prim::kLog2e;

    const uint64_t qDescriptor = prim::wgmmaDescriptorSw128(sQ + uint32_t(group) * 64 * 128, 16, 1024);
    auto kDescriptor = [&](int slot) { return prim::wgmmaDescriptorSw128(sK(slot), 16, 1024); };
    auto vDescriptor = [&](int slot) { return prim::wgmmaDescriptorSw128(sV(slot), BlockN * 128, 1024); };
    // cp.async lands through the generic proxy; wgmma reads through the async proxy. Tensor-map copies write
    // through the async proxy, except a tile's tail block of V (copyTail: the first V block the tile reads).
    auto waitFull = [&](uint32_t full, uint32_t phase, bool copied = !Tma && AsyncArrive) {
      prim::mbarrierWait(full, phase);
      if (copied) prim::fenceProxyAsyncShared();
    };

    if constexpr (PingPong) {
      // The first consumer warpgroup gets the first turn.
      if (group == 0) prim::namedBarrierArrive(kSchedulerBarrierBase, 256);
    }
    int kSlot = 0, vSlot = 0;
    uint32_t kPhase = 0, vPhase = 0, qPhase = 0;

    forEachTile(kp.totalTiles, [&](int64_t index) {
      const Tile t = decodeTile<kBlockM, BlockN, Paged>(kp, index);
      if (!t.active) return;
      Element *oRows = static_cast<Element *>(p.o) + int64_t(t.work.batch) * p.oBatch +
                       int64_t(t.work.head) * p.oHead + (t.seq.qStart + t.m0) * p.oRow;
      float *lseRows = p.lse == nullptr ? nullptr
                                        : p.lse + int64_t(t.work.batch) * p.lseBatch +
                                              int64_t(t.work.head) * p.lseHead + (t.seq.qStart + t.m0) * p.lseRow;
      if (t.empty) {
        const int first = group * 64;
        if (first < t.rowsHere)
          writeEmptyRows<Element>(p, oRows + int64_t(first) * p.oRow,
                                  lseRows == nullptr ? nullptr : lseRows + int64_t(first) * p.lseRow,
                                  min(64, t.rowsHere - first), thread, 128, forward::sinkOf(p, t.work.head));
        return;
      }
      const int numBlocks = t.lastKeyBlock - t.firstKeyBlock + 1;
      const bool copyTail = Tma && kp.copyTailBlock && (t.lastKeyBlock + 1) * BlockN > t.seq.seqK;
      const int row0 = t.m0 + rowInBlock;
      const Diagonals diagonals = forward::diagonalsOf(p, t.seq.seqQ, t.seq.seqK);
      const int allLo = t.allRows.lo;
      const int allHi = t.allRows.hi;
      prim::LogitTransform logits{};
      if constexpr (TransformLogits) {
        logits = prim::LogitTransform::of(p.scale, p.softcap, t.seq.seqQ, t.seq.seqK);
        logits.slopeLog2 = forward::alibiSlope(p, t.work.batch, t.work.head) * prim::kLog2e;
      }

      float o[DV / 2];
      float s[BlockN / 2];
      uint32_t pFragments[BlockN / 16][4];
#pragma unroll
      for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
      float rowMax[2] = {negativeInfinity(), negativeInfinity()};
      float rowSum[2] = {0.f, 0.f};
      float correction[2];

      // Q as register fragments: read once, after which the producer may refill the Q tile.
      uint32_t qFragments[QInRegisters ? QKWidth / 16 : 1][4];
      auto issueS = [&](int slot) {
        if constexpr (QInRegisters)
          issueQKFromRegisters<Element, QKWidth, BlockN>(s, qFragments, kDescriptor(slot));
        else
          issueQK<Element, QKWidth, BlockN, kBlockM>(s, qDescriptor, kDescriptor(slot));
      };
      waitFull(qFull, qPhase);
      qPhase ^= 1u;
      if constexpr (QInRegisters) {
        loadQFragments<QKWidth, kBlockM>(qFragments, sQ + uint32_t(group) * 64 * 128, warp, lane);
        releaseSlot(qEmpty, lane);
      }
      {  // the last visible block: S only
        const int n0 = t.lastKeyBlock * BlockN;
        waitFull(kFull(kSlot), kPhase);
        prim::wgmmaFence();
        issueS(kSlot);
        prim::wgmmaCommitGroup();
        prim::wgmmaWaitGroup<0>();
        prim::wgmmaFenceOperands(s);
        releaseSlot(kEmpty(kSlot), lane);
        if (!QInRegisters && numBlocks == 1) releaseSlot(qEmpty, lane);
        if (++kSlot == Stages) kSlot = 0, kPhase ^= 1u;
        if constexpr (TransformLogits) transformLogits<BlockN>(s, n0, row0, quad, logits);
        if (n0 < allLo || n0 + BlockN - 1 > allHi) maskBlock<BlockN>(s, n0, row0, quad, diagonals, t.seq.seqK);
        softmaxBlock<BlockN>(s, rowMax, rowSum, correction, scaleLog2);
        convertP<Element, BlockN>(s, pFragments);
      }

#pragma unroll 1
      for (int it = 1; it < numBlocks; ++it) {
        const int n0 = (t.lastKeyBlock - it) * BlockN;
        waitFull(kFull(kSlot), kPhase);
        if constexpr (PingPong) prim::namedBarrierSync(kSchedulerBarrierBase + group, 256);
        prim::wgmmaFence();
        issueS(kSlot);
        prim::wgmmaCommitGroup();
        waitFull(vFull(vSlot), vPhase, Tma ? it == 1 && copyTail : AsyncArrive);
        prim::wgmmaFence();  // the wait loop sits between: keep O and P ordered before the P V reads
        issuePV<Element, DV, BlockN>(o, pFragments, vDescriptor(vSlot));
        prim::wgmmaCommitGroup();
        if constexpr (PingPong)
          prim::namedBarrierArrive(kSchedulerBarrierBase + (group + 1) % ConsumerGroups, 256);

        prim::wgmmaWaitGroup<1>();  // S of this block is complete; P V of the previous one may still run
        prim::wgmmaFenceOperands(s);
        releaseSlot(kEmpty(kSlot), lane);
        if (!QInRegisters && it == numBlocks - 1) releaseSlot(qEmpty, lane);
        if (++kSlot == Stages) kSlot = 0, kPhase ^= 1u;
        if constexpr (TransformLogits) transformLogits<BlockN>(s, n0, row0, quad, logits);
        if (n0 < allLo || n0 + BlockN - 1 > allHi) maskBlock<BlockN>(s, n0, row0, quad, diagonals, t.seq.seqK);
        const bool moved = softmaxBlock<BlockN>(s, rowMax, rowSum, correction, scaleLog2);

        prim::wgmmaWaitGroup<0>();  // P V done: O and the P registers are free
        prim::wgmmaFenceOperands(o);
        prim::wgmmaFenceOperands(pFragments);
        releaseSlot(vEmpty(vSlot), lane);
        if (++vSlot == Stages) vSlot = 0, vPhase ^= 1u;
        if (__any_sync(0xffffffffu, moved)) rescaleO<DV>(o, correction);
        convertP<Element, BlockN>(s, pFragments);
      }

      waitFull(vFull(vSlot), vPhase, Tma ? numBlocks == 1 && copyTail : AsyncArrive);
      prim::wgmmaFence();
      issuePV<Element, DV, BlockN>(o, pFragments, vDescriptor(vSlot));
      prim::wgmmaCommitGroup();
      prim::wgmmaWaitGroup<0>();
      prim::wgmmaFenceOperands(o);
      releaseSlot(vEmpty(vSlot), lane);
      if (++vSlot == Stages) vSlot = 0, vPhase ^= 1u;

      // Epilogue: normalize and store from the accumulators (a quad writes 16 contiguous bytes of a row) while the
      // producer already loads the next tile.
      const float sinkLog2 = forward::sinkOf(p, t.work.head) * prim::kLog2e;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float total = prim::quadSum(rowSum[h]);
        float maxLog2 = rowMax[h] * scaleLog2;
        const float keep = p.sinks ? prim::foldSink<prim::Exp2>(maxLog2, total, sinkLog2) : 1.f;
        const bool empty = !(total > 0.f);  // no visible key and no sink: O = 0, LSE = -inf
        const float inverse = empty ? 0.f : keep / total;
        const int localRow = rowInBlock + 8 * h;
        if (localRow >= t.rowsHere) continue;
        Element *oRow = oRows + int64_t(localRow) * p.oRow + 2 * quad;
#pragma unroll
        for (int dt = 0; dt < DV / 8; ++dt)
          if (dt * 8 < p.headDimV)  // the columns of the problem's V/O head dim
            *reinterpret_cast<uint32_t *>(oRow + dt * 8) =
                prim::packFloat2<Element>(o[4 * dt + 2 * h] * inverse, o[4 * dt + 2 * h + 1] * inverse);
        if (lseRows != nullptr && quad == 0)
          lseRows[int64_t(localRow) * p.lseRow] =
              empty ? negativeInfinity() : (maxLog2 + __log2f(total)) * prim::kLn2;
      }
    });
    if constexpr (PingPong) {
      // The last group's final turn handed to the first group was never claimed (nor, with no turns at all, the
      // opening one): claim it so every named barrier ends balanced.
      if (group == 0) prim::namedBarrierSync(kSchedulerBarrierBase, 256);
    }
  }
}

}  // namespace flashattn::cuda::forward_sm90
