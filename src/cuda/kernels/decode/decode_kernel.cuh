// SPDX-License-Identifier: BSD-3-Clause
// Split-KV decode kernel: one CTA per (batch, KV head, KV chunk, row block).
//
// Memory is the bound: every K/V byte of a chunk is read once into a ring of `Stages` shared-memory tiles, Stages - 1
// tiles in flight while one is consumed. Two loaders fill the ring (decode_params.hpp, Loader):
//   CpAsync: the row addresses of each tile (dense or through the block table) are computed one tile ahead by one
//     thread per key into a small table, then every thread issues 16-byte cp.async copies into padded rows.
//   Tensor (sm90, dense FP16/BF16 caches): thread 0 issues one cp.async.bulk.tensor copy per 64-column box of K and V
//     through tensor maps (kernel parameters), 128-byte swizzled; each stage has an mbarrier that completes with the
//     bytes, so no warp waits on per-thread copies and one CTA barrier per tile remains. The warp-specialized variants
//     give the copies to a producer warp that refills each stage once its "empty" mbarrier says every consumer warp
//     has read it: no CTA barrier in the main loop, and the whole ring in flight.
// Keys outside the chunk or in a page whose id is out of range are marked absent in a per-tile bit mask (their scores
// become -inf) and their V rows are zero in shared memory (cp.async zero-fills them; the tensor loader's last partial
// tile is zeroed after it lands, or with a producer warp cleared in the V fragments), so neither NaN in unused cache slots nor a bad block id can reach the output.
//
// Compute engines: FP16/BF16 use mma.sync m16n8k16 (Q K^T with K through ldmatrix, P from registers times V through
// ldmatrix.trans); FP32 storage uses CUDA-core FMAs in the same fragment layout so that the softmax, masking and the
// epilogue are shared. Each warp keeps an online-softmax state (row max m, row sum l, FP32 O) for 16 rows over the
// keys it saw; at the end the warps of one row tile combine through shared memory, and the CTA writes either O (one
// chunk) or the chunk's partial O and LSE. Partial states are merged in chunk order, either by the last CTA of the
// (batch, KV head, row block) to finish (fused, counted in a self-resetting tagged word), by decodeMergeKernel, or
// (cluster merge) by the CTAs of a cluster of the unit's chunks reading each other's shared memory; the order never
// depends on timing, so the result is bitwise deterministic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>
#if defined(FLASHATTN_DECODE_PHASES)
#include <cstdio>
#include <cstdlib>
#endif

#include "core/problem.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/ops.hpp"
#include "cuda/primitives/gpu_flags.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/primitives.cuh"
#include "cuda/shared_limit.hpp"

namespace flashattn::cuda::decode {

namespace detail {

#if defined(FLASHATTN_DECODE_PHASES)
// Measurement builds only (-DFLASHATTN_DECODE_PHASES; bench/decode_phases/ reads the output, NOTES.md seventh pass):
// per CTA, %globaltimer at the kernel's phases for the last kPhaseCalls launches, written to the file named by
// $FLASHATTN_DECODE_PHASES at exit. Every CTA of a launch reads the same call number: the last CTA to finish advances
// it, after all have read it.
constexpr int kPhaseCalls = 320, kPhaseBlocks = 1024, kPhaseSlots = 16;
static __device__ unsigned long long gPhase[kPhaseCalls][kPhaseBlocks][kPhaseSlots];
static __device__ unsigned int gPhaseGrid[kPhaseCalls];
static __device__ unsigned int gPhaseCall, gPhaseDone;
__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Stamps stay in registers until the end (a store needs the call number, a global load whose wait would stall the
// phase being timed).
__device__ __forceinline__ void phaseStore(const unsigned long long (&stamps)[kPhaseSlots]) {
  const unsigned call = *static_cast<volatile unsigned *>(&gPhaseCall);
  if (blockIdx.x < kPhaseBlocks)
    for (int i = 0; i < kPhaseSlots; ++i)
      if (stamps[i]) gPhase[call % kPhaseCalls][blockIdx.x][i] = stamps[i];
}
__device__ __forceinline__ void phaseFinish(unsigned long long (&stamps)[kPhaseSlots]) {
  if (threadIdx.x != 0) return;
  stamps[6] = globalTimer();
  stamps[15] = clock64();
  phaseStore(stamps);
  const unsigned call = *static_cast<volatile unsigned *>(&gPhaseCall);
  if (blockIdx.x == 0) gPhaseGrid[call % kPhaseCalls] = gridDim.x;
  __threadfence();
  if (atomicAdd(&gPhaseDone, 1u) == gridDim.x - 1) {
    gPhaseDone = 0;
    __threadfence();
    atomicAdd(&gPhaseCall, 1u);
  }
}
static const char *gPhaseTag = "decode";
static bool gPhaseDumpRegistered = false;
static void dumpPhases() {
  const char *path = std::getenv("FLASHATTN_DECODE_PHASES");
  if (!path) return;
  static unsigned long long host[kPhaseCalls][kPhaseBlocks][kPhaseSlots];
  static unsigned grid[kPhaseCalls];
  unsigned calls = 0;
  if (cudaMemcpyFromSymbol(host, gPhase, sizeof host) != cudaSuccess ||
      cudaMemcpyFromSymbol(grid, gPhaseGrid, sizeof grid) != cudaSuccess ||
      cudaMemcpyFromSymbol(&calls, gPhaseCall, sizeof calls) != cudaSuccess)
    return;
  FILE *out = std::fopen(path, "a");
  if (!out) return;
  const unsigned first = calls > unsigned(kPhaseCalls) ? calls - kPhaseCalls : 0u;
  for (unsigned c = first; c < calls; ++c) {
    const unsigned slot = c % kPhaseCalls, blocks = grid[slot] < unsigned(kPhaseBlocks) ? grid[slot] : kPhaseBlocks;
    for (unsigned b = 0; b < blocks; ++b) {
      std::fprintf(out, "%s %u %u %u", gPhaseTag, c, grid[slot], b);
      for (int i = 0; i < kPhaseSlots; ++i) std::fprintf(out, " %llu", host[slot][b][i]);
      std::fprintf(out, "\n");
    }
  }
  std::fclose(out);
}
// The kernels' hooks: stamps 0 start, 8 barriers set, 9 first copy issued, 1 ring issued, 2 first tile, 3 last tile,
// 4 epilogue, 5 cluster barrier / merge decided, 6 end, 7 (tiles << 32 | SM id), 10 key range found, 11 partial state
// stored, 12 counted in, 13 merged; 14 and 15 the SM clock (clock64) at the start and the end.
#define FA_PHASE_BEGIN()                                       \
  unsigned long long phaseStamps[detail::kPhaseSlots] = {}; \
  phaseStamps[0] = detail::globalTimer();                   \
  phaseStamps[14] = clock64()
#define FA_PHASE(slot) (phaseStamps[slot] = detail::globalTimer())
#define FA_PHASE_SM(tiles)                                                          \
  do {                                                                              \
    unsigned smid_;                                                                 \
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));                             \
    phaseStamps[7] = (unsigned long long)(tiles) << 32 | smid_;                     \
    phaseStamps[10] = detail::globalTimer();                                        \
  } while (0)
#define FA_PHASE_PRODUCER_DONE() \
  (phaseStamps[0] = phaseStamps[7] = phaseStamps[14] = 0, detail::phaseStore(phaseStamps))
#define FA_PHASE_END() detail::phaseFinish(phaseStamps)
#define FA_PHASE_SYNC() __syncthreads()
#else
#define FA_PHASE_BEGIN() ((void)0)
#define FA_PHASE(slot) ((void)0)
#define FA_PHASE_SM(tiles) ((void)0)
#define FA_PHASE_PRODUCER_DONE() ((void)0)
#define FA_PHASE_END() ((void)0)
#define FA_PHASE_SYNC() ((void)0)
#endif

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

template <typename Element>
__device__ __forceinline__ void storeOut4(Element *dst, float a, float b, float c, float d);

template <>
__device__ __forceinline__ void storeOut4<float>(float *dst, float a, float b, float c, float d) {
  *reinterpret_cast<float4 *>(dst) = make_float4(a, b, c, d);
}

template <>
__device__ __forceinline__ void storeOut4<__half>(__half *dst, float a, float b, float c, float d) {
  uint2 packed;
  packed.x = prim::packFloat2<__half>(a, b);
  packed.y = prim::packFloat2<__half>(c, d);
  *reinterpret_cast<uint2 *>(dst) = packed;
}

template <>
__device__ __forceinline__ void storeOut4<__nv_bfloat16>(__nv_bfloat16 *dst, float a, float b, float c, float d) {
  uint2 packed;
  packed.x = prim::packFloat2<__nv_bfloat16>(a, b);
  packed.y = prim::packFloat2<__nv_bfloat16>(c, d);
  *reinterpret_cast<uint2 *>(dst) = packed;
}

// Tensor-core engine (FP16/BF16). Fragment layouts are those of prim::mmaM16N8K16; see mma.cuh.
// BoxKeys 0: K/V tiles in padded rows. Otherwise the tensor loader's layout: boxes of 64 columns, BoxKeys keys of 128
// bytes each, whose 16-byte chunk c of key k sits at chunk c ^ (k % 8) (the copy engine's 128-byte swizzle). The lane's
// key % 8 is lane % 8 in both ldmatrix patterns, and its chunk within a row is 2 * (step % 4) plus one lane bit, so the
// swizzled chunk is (2 * (step % 4)) ^ (lane bit ^ lane % 8).
// RowsLayout (TensorWSRows): keys are whole rows of HeadDim / 64 boxes, [key][box][64]; the 128-byte line of (key, box)
// is key * boxes + box, and the swizzle XORs the chunk with that line index % 8.
template <typename Element, int HeadDim, int BoxKeys = 0, bool RowsLayout = false>
struct MmaEngine {
  static constexpr int kBoxes = HeadDim / 64;
  static constexpr int kRow = smemRowElements(int(sizeof(Element)), HeadDim);
  static constexpr int kKSteps = HeadDim / 16;
  // Q fragments stay in registers when they fit beside the O accumulators; wider heads reload them per key tile.
  static constexpr bool kQInRegisters = HeadDim <= 128;

  uint32_t qFrag[kQInRegisters ? kKSteps : 1][4];
  uint32_t qAddress = 0;  // this lane's ldmatrix row address in the Q tile of its row tile

  __device__ __forceinline__ void init(const Element *qTile, int lane) {
    const int row = (((lane >> 3) & 1) << 3) + (lane & 7);
    const int col = (lane >> 4) << 3;
    qAddress = prim::smemAddress(qTile + row * kRow + col);
  }

  __device__ __forceinline__ void loadQ() {
    if constexpr (kQInRegisters) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) prim::ldmatrixX4(qFrag[kk], qAddress + kk * 32);
    }
  }

  // Shared address of 16-byte chunk `chunkPair * 2 + laneBit` (row-relative) of this lane's key row. laneXor: boxed,
  // laneBit ^ key % 8; rows layout, laneBit ^ (key * boxes) % 8 (the box is added here: chunkPair is a constant).
  static __device__ __forceinline__ uint32_t chunkAddress(uint32_t rowAddress, int chunkPair, uint32_t laneXor) {
    if constexpr (BoxKeys == 0) {
      return rowAddress + uint32_t(chunkPair) * 32u;
    } else if constexpr (RowsLayout) {
      const uint32_t box = uint32_t(chunkPair / 4);
      const uint32_t line = ((laneXor >> 1) + box) & 7u;  // (key * boxes + box) % 8
      return rowAddress + box * 128u + (((2u * uint32_t(chunkPair % 4) + (laneXor & 1u)) ^ line) << 4);
    } else {
      return rowAddress + uint32_t(chunkPair / 4) * uint32_t(BoxKeys * 128) +
             (((2u * uint32_t(chunkPair % 4)) ^ laneXor) << 4);
    }
  }

  // s[n][.] = Q K^T for the 16 keys starting at kTile (two n8 tiles). Up to head dim 128 the k-steps accumulate in
  // kScoreChains chains (k-step kk in chain kk % kScoreChains) summed at the end: one chain of kKSteps dependent mma
  // per tile paces a short chunk (NOTES.md, ninth pass); wider heads have no registers to spare at 2 CTAs/SM.
  static constexpr int kScoreChains = HeadDim <= 128 ? 2 : 1;
  __device__ __forceinline__ void scores(const Element *kTile, int lane, float (&s)[2][4]) const {
    const int key = ((lane >> 4) << 3) + (lane & 7);
    const int laneBit = (lane >> 3) & 1;
    const uint32_t kAddress = BoxKeys == 0 ? prim::smemAddress(kTile + key * kRow + laneBit * 8)
                              : RowsLayout ? prim::smemAddress(kTile + key * HeadDim)
                                           : prim::smemAddress(kTile + key * 64);
    const uint32_t laneXor = RowsLayout ? (uint32_t((key * kBoxes) & 7) << 1) | uint32_t(laneBit)
                                        : uint32_t(laneBit ^ (lane & 7));
    float chains[kScoreChains][2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t a[4];
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = qFrag[kk][i];
      } else {
        prim::ldmatrixX4(a, qAddress + kk * 32);
      }
      uint32_t b[4];
      prim::ldmatrixX4(b, chunkAddress(kAddress, kk, laneXor));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
      float(&chain)[2][4] = chains[kk % kScoreChains];
      prim::mmaM16N8K16<Element>(chain[0], a, b0);
      prim::mmaM16N8K16<Element>(chain[1], a, b1);
    }
#pragma unroll
    for (int c = 0; c < kScoreChains; ++c)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] += chains[c][n][i];
  }

  // o += P V for the 16 keys starting at vTile; p in the accumulator layout of scores().
  // keep[0] / keep[1]: bit masks over this lane's V fragment registers of keys 2t, 2t + 1 / 8 + 2t, 9 + 2t (the
  // ldmatrix.trans B layout), all ones but for absent keys whose rows the loader did not zero.
  __device__ __forceinline__ void accumulate(const float (&p)[2][4], const Element *vTile, int lane,
                                             float (&o)[HeadDim / 8][4], float *, const uint32_t (&keep)[2]) const {
    uint32_t a[4];
    a[0] = prim::packFloat2<Element>(p[0][0], p[0][1]);
    a[1] = prim::packFloat2<Element>(p[0][2], p[0][3]);
    a[2] = prim::packFloat2<Element>(p[1][0], p[1][1]);
    a[3] = prim::packFloat2<Element>(p[1][2], p[1][3]);
    const int key = (((lane >> 3) & 1) << 3) + (lane & 7);
    const int laneBit = lane >> 4;
    const uint32_t vAddress = BoxKeys == 0 ? prim::smemAddress(vTile + key * kRow + laneBit * 8)
                              : RowsLayout ? prim::smemAddress(vTile + key * HeadDim)
                                           : prim::smemAddress(vTile + key * 64);
    const uint32_t laneXor = RowsLayout ? (uint32_t((key * kBoxes) & 7) << 1) | uint32_t(laneBit)
                                        : uint32_t(laneBit ^ (lane & 7));
#pragma unroll
    for (int dp = 0; dp < HeadDim / 16; ++dp) {
      uint32_t b[4];
      prim::ldmatrixX4Trans(b, chunkAddress(vAddress, dp, laneXor));
      const uint32_t b0[2] = {b[0] & keep[0], b[1] & keep[1]};
      const uint32_t b1[2] = {b[2] & keep[0], b[3] & keep[1]};
      prim::mmaM16N8K16<Element>(o[2 * dp], a, b0);
      prim::mmaM16N8K16<Element>(o[2 * dp + 1], a, b1);
    }
  }
};

// CUDA-core engine for FP32 storage (tensor-core TF32 would miss the FP32 accuracy gate). Same fragment layout as the
// mma engine: lane (g = lane / 4, t = lane % 4) owns rows g and g + 8 and keys 2t, 2t + 1, 8 + 2t, 9 + 2t.
template <int HeadDim>
struct SimtEngine {
  static constexpr int kRow = smemRowElements(4, HeadDim);
  const float *qTile = nullptr;

  __device__ __forceinline__ void init(const float *tile, int) { qTile = tile; }
  __device__ __forceinline__ void loadQ() {}

  __device__ __forceinline__ void scores(const float *kTile, int lane, float (&s)[2][4]) const {
    const int g = lane >> 2, t = lane & 3;
    const float *q0 = qTile + g * kRow;
    const float *q1 = qTile + (g + 8) * kRow;
    const float *k0 = kTile + (2 * t) * kRow;
    const float *k1 = k0 + kRow;
    const float *k2 = kTile + (8 + 2 * t) * kRow;
    const float *k3 = k2 + kRow;
#pragma unroll 4
    for (int d = 0; d < HeadDim; d += 4) {
      const float4 a0 = *reinterpret_cast<const float4 *>(q0 + d);
      const float4 a1 = *reinterpret_cast<const float4 *>(q1 + d);
      const float4 b0 = *reinterpret_cast<const float4 *>(k0 + d);
      const float4 b1 = *reinterpret_cast<const float4 *>(k1 + d);
      const float4 b2 = *reinterpret_cast<const float4 *>(k2 + d);
      const float4 b3 = *reinterpret_cast<const float4 *>(k3 + d);
      s[0][0] += a0.x * b0.x + a0.y * b0.y + a0.z * b0.z + a0.w * b0.w;
      s[0][1] += a0.x * b1.x + a0.y * b1.y + a0.z * b1.z + a0.w * b1.w;
      s[0][2] += a1.x * b0.x + a1.y * b0.y + a1.z * b0.z + a1.w * b0.w;
      s[0][3] += a1.x * b1.x + a1.y * b1.y + a1.z * b1.z + a1.w * b1.w;
      s[1][0] += a0.x * b2.x + a0.y * b2.y + a0.z * b2.z + a0.w * b2.w;
      s[1][1] += a0.x * b3.x + a0.y * b3.y + a0.z * b3.z + a0.w * b3.w;
      s[1][2] += a1.x * b2.x + a1.y * b2.y + a1.z * b2.z + a1.w * b2.w;
      s[1][3] += a1.x * b3.x + a1.y * b3.y + a1.z * b3.z + a1.w * b3.w;
    }
  }

  // P goes through the warp's 16 x 20 float scratch so every lane sees its two rows whole.
  __device__ __forceinline__ void accumulate(const float (&p)[2][4], const float *vTile, int lane,
                                             float (&o)[HeadDim / 8][4], float *pScratch, const uint32_t (&)[2]) const {
    constexpr int kP = 20;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      pScratch[g * kP + n * 8 + 2 * t] = p[n][0];
      pScratch[g * kP + n * 8 + 2 * t + 1] = p[n][1];
      pScratch[(g + 8) * kP + n * 8 + 2 * t] = p[n][2];
      pScratch[(g + 8) * kP + n * 8 + 2 * t + 1] = p[n][3];
    }
    __syncwarp();
    // Four keys at a time, their P read back as float4 (broadcast within each quad), so that every register index
    // is a compile-time constant.
#pragma unroll
    for (int k4 = 0; k4 < 16; k4 += 4) {
      const float4 x = *reinterpret_cast<const float4 *>(pScratch + g * kP + k4);
      const float4 y = *reinterpret_cast<const float4 *>(pScratch + (g + 8) * kP + k4);
      const float p0[4] = {x.x, x.y, x.z, x.w};
      const float p1[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float *vRow = vTile + (k4 + k) * kRow + 2 * t;
#pragma unroll
        for (int n = 0; n < HeadDim / 8; ++n) {
          const float2 v = *reinterpret_cast<const float2 *>(vRow + n * 8);
          o[n][0] += p0[k] * v.x;
          o[n][1] += p0[k] * v.y;
          o[n][2] += p1[k] * v.x;
          o[n][3] += p1[k] * v.y;
        }
      }
    }
    __syncwarp();  // the scratch is rewritten by the next sub-tile
  }
};

template <typename Element, int HeadDim, int BoxKeys, bool RowsLayout>
using Engine = std::conditional_t<std::is_same_v<Element, float>, SimtEngine<HeadDim>,
                                  MmaEngine<Element, HeadDim, BoxKeys, RowsLayout>>;

struct KeyOffsets {
  int64_t k;
  int64_t v;
};

// Hopper tensor copies (sm90; the mbarriers they complete on are prim's). Older targets trap: the planner picks the
// tensor loader only on sm90+, and every instance still compiles for each architecture of the build.
__device__ __forceinline__ void prefetchTensorMap(const CUtensorMap *tensorMap) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tensorMap)) : "memory");
#else
  __trap();
#endif
}

// One box of a rank-4 tensor map at coordinates (c0 innermost .. c3) into shared memory (1024-byte aligned for the
// 128-byte swizzle); completes its bytes on the mbarrier. tensorMap is the generic address of a __grid_constant__
// kernel parameter. With a cache policy (createL2EvictFirstPolicy) the lines it fills in L2 are the first to go.
__device__ __forceinline__ void tensorCopy4d(uint32_t destination, const CUtensorMap *tensorMap, int c0, int c1, int c2,
                                             int c3, uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(tensorMap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tensorCopy4dHinted(uint32_t destination, const CUtensorMap *tensorMap, int c0, int c1,
                                                   int c2, int c3, uint32_t barrier, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, "
      "%4, %5}], [%6], %7;\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(tensorMap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// One copy through a rank-5 map (the wide and rows views: every 64-column box of a tile's rows at once).
__device__ __forceinline__ void tensorCopy5d(uint32_t destination, const CUtensorMap *tensorMap, int c1, int c2, int c3,
                                             int c4, uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(tensorMap)), "r"(0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(barrier)
      : "memory");
#else
  __trap();
#endif
}

// Cluster merge (sm90): a barrier over every thread of the cluster (release / acquire: the shared-memory states written
// before it are visible to the other CTAs' reads after it), and loads from another CTA's shared memory.
__device__ __forceinline__ void clusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The address in CTA `rank` of the cluster of this CTA's shared address `local`.
__device__ __forceinline__ uint32_t clusterAddress(uint32_t local, uint32_t rank) {
  uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
#else
  __trap();
#endif
  return remote;
}

__device__ __forceinline__ float clusterLoad(uint32_t address) {
  float x = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(x) : "r"(address) : "memory");
#else
  __trap();
#endif
  return x;
}

__device__ __forceinline__ float4 clusterLoad4(uint32_t address) {
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
               : "r"(address)
               : "memory");
#else
  __trap();
#endif
  return x;
}

// K/V bytes are read once per launch: an evict-first policy keeps them from pushing the partial states (and whatever
// the caller reads next) out of L2.
__device__ __forceinline__ uint64_t createL2EvictFirstPolicy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#else
  __trap();
#endif
  return policy;
}

// O row (4 columns from d) and LSE of one query row from the chunks' partial states, in chunk order, Batch chunks at a
// time: all of a batch's loads in flight, then its largest LSE, then every chunk's weight at once and the sums in chunk
// order (an online merge per chunk chained a compare, a branch and two exponentials per chunk: ~1 us of the fused
// merge at 16 chunks, NOTES.md eighth pass). A chunk whose LSE is -inf saw no visible key and weighs nothing; a row no
// chunk saw gets O = 0 and LSE = -inf. The partial states were written by other CTAs of this or an earlier grid, so
// the loads bypass L1.
template <typename Element, int Batch>
__device__ __forceinline__ void mergeChunksOfRow(const DecodeParams &p, int batch, int64_t head, int token, int d) {
  // Chunk c's state is c * stateRows rows past chunk 0's: one stride per array, and loads past the last chunk read the
  // last chunk again (then count as empty), so the loads go out back to back with no branch between them.
  const int64_t stateRows = int64_t(p.batch) * p.heads * p.seqQ;
  const int64_t stateRow0 = (int64_t(batch) * p.heads + head) * p.seqQ + token;
  const float *lse0 = p.partialLse + stateRow0;
  const float *o0 = p.partialO + stateRow0 * p.headDim + d;
  const int64_t oStride = stateRows * p.headDim;
  const int chunks = p.numChunks;
  float maxLse = negInf();
  float sum = 0.f;
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
  for (int c0 = 0; c0 < chunks; c0 += Batch) {
    float l[Batch];
    float4 v[Batch];
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      const int c = min(c0 + u, chunks - 1);
      l[u] = __ldcg(lse0 + c * stateRows);
      v[u] = __ldcg(reinterpret_cast<const float4 *>(o0 + c * oStride));
    }
#pragma unroll
    for (int u = 0; u < Batch; ++u)
      if (c0 + u >= chunks) l[u] = negInf();
    float batchMax = maxLse;
#pragma unroll
    for (int u = 0; u < Batch; ++u) batchMax = fmaxf(batchMax, l[u]);
    if (batchMax == negInf()) continue;  // no chunk so far saw a key
    const float rescale = expf(maxLse - batchMax);  // 0 while nothing was seen (maxLse = -inf)
    sum *= rescale, a0 *= rescale, a1 *= rescale, a2 *= rescale, a3 *= rescale;
    maxLse = batchMax;
#pragma unroll
    for (int u = 0; u < Batch; ++u) {
      const float weight = expf(l[u] - batchMax);  // 0 for an empty chunk (-inf); independent of the sums
      sum += weight;
      a0 += weight * v[u].x, a1 += weight * v[u].y, a2 += weight * v[u].z, a3 += weight * v[u].w;
    }
  }
  float lse = negInf();
  if (maxLse != negInf()) {
    const float inv = 1.f / sum;
    a0 *= inv, a1 *= inv, a2 *= inv, a3 *= inv;
    lse = maxLse + logf(sum);
  }
  Element *out = static_cast<Element *>(p.o) + int64_t(batch) * p.oBatch + head * p.oHead + int64_t(token) * p.oRow + d;
  storeOut4<Element>(out, a0, a1, a2, a3);
  if (p.lse && d == 0) p.lse[int64_t(batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] = lse;
}

}  // namespace detail

template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, int LoaderKind>
__global__ void __launch_bounds__(ctaThreads(Warps, LoaderKind), Warps >= 8 ? 2 : 1)
    decodeKernel(const __grid_constant__ DecodeParams p) {
  using namespace detail;
  constexpr int kThreads = ctaThreads(Warps, LoaderKind);
  constexpr bool kTensor = isTensorLoader(LoaderKind);
  constexpr bool kProducerWarp = hasProducerWarp(LoaderKind);
  constexpr bool kRowsLayout = LoaderKind == kLoaderTensorWSRows;
  constexpr int kElementBytes = int(sizeof(Element));
  constexpr int kVec = 16 / kElementBytes;  // elements per 16-byte copy
  constexpr int kChunksPerRow = HeadDim / kVec;
  constexpr int kRow = smemRowElements(kElementBytes, HeadDim);
  constexpr int kSubTiles = TileKeys / 16;
  constexpr int kMaskSlots = maskSlots(Stages, LoaderKind);
  // Elements from one key's row to the next in a K/V tile, and from K to V in a stage.
  constexpr int kKeyStride = kRowsLayout ? HeadDim : kTensor ? 64 : kRow;
  constexpr int kBoxes = HeadDim / 64;  // tensor loader: 64-column boxes per row
  constexpr int kStageHalf = kTensor ? kBoxes * TileKeys * 64 : TileKeys * kRow;
  static_assert(HeadDim % 16 == 0 && TileKeys % 16 == 0 && TileKeys <= 64 && Stages >= 2, "tile shape");
  static_assert(!kTensor || tensorLoadable(kElementBytes, HeadDim), "tensor loader: 16-bit elements, head dim % 64");
  static_assert(Warps >= 2 && Warps <= 8, "the cp.async offset table takes the first two warps");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Let a separate merge kernel (launched with programmatic stream serialization) get scheduled early; it still waits
  // for this grid's completion and memory flush before reading the partial states.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  FA_PHASE_BEGIN();

  extern __shared__ __align__(128) unsigned char smem[];
  // Every CTA has the same layout for a given launch; rowTilesPerCta only sizes the Q region.
  const SmemLayout layout = smemLayout(kElementBytes, HeadDim, Warps, TileKeys, Stages, LoaderKind, p.rowTilesPerCta);
  Element *qSmem = reinterpret_cast<Element *>(smem + layout.q);
  // The tensor loader's stages start at a 1024-byte boundary of the shared window (the swizzle repeats every 1024 B).
  const uint32_t kvShift = kTensor ? ((1024u - (prim::smemAddress(smem + layout.kv) & 1023u)) & 1023u) : 0u;
  Element *kvSmem = reinterpret_cast<Element *>(smem + layout.kv + kvShift);
  KeyOffsets *offsetTable = reinterpret_cast<KeyOffsets *>(smem + layout.offsets);
  uint32_t *validMask = reinterpret_cast<uint32_t *>(smem + layout.validMask);
  float *pScratchAll = reinterpret_cast<float *>(smem + layout.pScratch);
  const uint32_t barrierBase = prim::smemAddress(smem + layout.barriers);  // full barriers, then (producer) empty
  const uint32_t emptyBase = barrierBase + 8u * uint32_t(Stages);

  const int tid = int(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;

  // The thread that issues the tensor copies: thread 0, or the producer warp's first lane. It sets up the stage
  // barriers and starts fetching the maps first thing, so that both overlap the index arithmetic instead of delaying
  // the first copy (NOTES.md, seventh and eighth passes). The prefetches come after the barriers' fence, which would
  // otherwise wait for them. (Placed after the block arithmetic, this block was compiled into warp-uniform
  // instructions that racecheck reads as another thread's writes.)
  constexpr int kIssuer = kProducerWarp ? Warps * 32 : 0;
  if constexpr (kTensor) {
    if (tid == kIssuer) {
      for (int st = 0; st < Stages; ++st) prim::mbarrierInit(barrierBase + 8u * uint32_t(st), 1u);
      if constexpr (kProducerWarp)
        for (int st = 0; st < Stages; ++st) prim::mbarrierInit(emptyBase + 8u * uint32_t(st), uint32_t(Warps));
      prim::fenceBarrierInit();
      prefetchTensorMap(&p.kMap);
      prefetchTensorMap(&p.vMap);
      FA_PHASE(8);
    }
  }

  // Block -> (row block, chunk, KV head, batch); the row block varies fastest so CTAs sharing K/V run together, except
  // for the cluster merge, whose clusters are consecutive blocks: the chunk varies fastest there (rank = chunk).
  int block = int(blockIdx.x);
  auto splitOff = [&block](const FastDivisor &d) {  // block % d, leaving block / d
    const int quotient = d.divide(block);
    const int remainder = d.remainder(block, quotient);
    block = quotient;
    return remainder;
  };
  int rowBlock = 0, chunk = 0;
  if (p.clusterMerge) {
    chunk = splitOff(p.numChunks);
    rowBlock = splitOff(p.rowBlocks);
  } else {
    rowBlock = splitOff(p.rowBlocks);
    chunk = splitOff(p.numChunks);
  }
  const int kvHead = splitOff(p.kvHeads);
  const int batch = block;
  // The sequence's length goes out before the rest of the range arithmetic, which its round trip then overlaps.
  int seqLenLoaded = p.seqK;
  if (p.seqlensK) seqLenLoaded = __ldg(p.seqlensK + batch);

  // The sequence's used length, clamped so that no key index leaves the cache whatever the index data says.
  const int seqLen = min(max(seqLenLoaded, 0), p.seqK);
  const Mask mask = Mask(p.mask);

  // Keys some row of this sequence can see: the visible range is monotone in the query token, so the union over
  // tokens runs from the first token's lower end to the last token's upper end. Without a mask or window it is the
  // whole length (no 64-bit range arithmetic on the way to the first copy).
  int64_t unionLo = 0, unionHi = int64_t(seqLen) - 1;
  if (mask != Mask::None || p.windowLeft >= 0 || p.windowRight >= 0) {
    const KeyRange firstRange = visibleKeys(mask, p.windowLeft, p.windowRight, 0, p.seqQ, seqLen);
    const KeyRange lastRange = visibleKeys(mask, p.windowLeft, p.windowRight, p.seqQ - 1, p.seqQ, seqLen);
    unionLo = firstRange.lo > 0 ? firstRange.lo : 0;
    unionHi = lastRange.hi < unionHi ? lastRange.hi : unionHi;
  }
  const int64_t unionKeys = unionHi >= unionLo ? unionHi - unionLo + 1 : 0;
  const int tilesTotal = int((unionKeys + TileKeys - 1) / TileKeys);
  const int tileBegin = chunkTileBegin(chunk, tilesTotal, p.numChunks);
  const int tileEnd = chunkTileBegin(chunk + 1, tilesTotal, p.numChunks);
  const int numTiles = tileEnd - tileBegin;
  const int keyBegin = int(unionLo + int64_t(tileBegin) * TileKeys);
  const int keyEnd = int(min(unionLo + int64_t(tileEnd) * TileKeys, unionHi + 1));
  FA_PHASE_SM(numTiles);

  const Element *qBase = static_cast<const Element *>(p.q);
  const Element *kBase = static_cast<const Element *>(p.k);
  const Element *vBase = static_cast<const Element *>(p.v);
  const int rowsPerCta = p.rowTilesPerCta * kRowsPerTile;
  const int firstRow = rowBlock * rowsPerCta;

  // Element offsets of a key's K and V rows; false when it has none (a page id out of range). pageId: the block-table
  // entry of the key's page, for paged caches.
  auto rowOffsets = [&](int key, int32_t pageId, KeyOffsets &off) -> bool {
    if (p.paged) {
      if (pageId < 0 || int64_t(pageId) >= p.numPages) return false;
      const uint32_t page = uint32_t(key) / uint32_t(p.pageSize);
      const int64_t inPage = int64_t(uint32_t(key) - page * uint32_t(p.pageSize));
      off.k = int64_t(pageId) * p.kBatch + inPage * p.kRow + int64_t(kvHead) * p.kHead;
      off.v = int64_t(pageId) * p.vBatch + inPage * p.vRow + int64_t(kvHead) * p.vHead;
    } else {
      off.k = int64_t(batch) * p.kBatch + int64_t(kvHead) * p.kHead + int64_t(key) * p.kRow;
      off.v = int64_t(batch) * p.vBatch + int64_t(kvHead) * p.vHead + int64_t(key) * p.vRow;
    }
    return true;
  };
  // The block-table entry of a key's page, -1 past the sequence's table row (the entry there is never read).
  auto pageIdOf = [&](int key) -> int32_t {
    const uint32_t page = uint32_t(key) / uint32_t(p.pageSize);
    return int64_t(page) < p.maxPagesPerSeq ? __ldg(p.blockTable + int64_t(batch) * p.maxPagesPerSeq + page) : -1;
  };

  // ---- cp.async loader: tile x's key addresses, one thread per key (the first TileKeys threads), plus the presence
  // mask; then every thread copies 16-byte pieces.
  auto computeOffsets = [&](int x) {
    if (tid < ((TileKeys + 31) & ~31)) {
      const int key = keyBegin + x * TileKeys + tid;
      KeyOffsets off{0, 0};
      bool present = tid < TileKeys && key < keyEnd;
      if (present) present = rowOffsets(key, p.paged ? pageIdOf(key) : 0, off);
      if (tid < TileKeys) offsetTable[(x & 1) * TileKeys + tid] = off;
      const uint32_t bits = __ballot_sync(0xffffffffu, present);
      if (lane == 0) validMask[(x % kMaskSlots) * 2 + warp] = bits;
      if (TileKeys <= 32 && tid == 0) validMask[(x % kMaskSlots) * 2 + 1] = 0u;
    }
  };
  auto issueTile = [&](int x) {
    const KeyOffsets *offsets = offsetTable + (x & 1) * TileKeys;
    const uint32_t *bits = validMask + (x % kMaskSlots) * 2;
    Element *kTile = kvSmem + (x % Stages) * 2 * TileKeys * kRow;
    Element *vTile = kTile + TileKeys * kRow;
#pragma unroll 4
    for (int idx = tid; idx < TileKeys * kChunksPerRow; idx += kThreads) {
      const int key = idx / kChunksPerRow;
      const int c = idx - key * kChunksPerRow;
      const bool valid = ((bits[key >> 5] >> (key & 31)) & 1u) && c * kVec < p.headDim;
      const KeyOffsets off = offsets[key];
      const Element *kSrc = valid ? kBase + off.k + c * kVec : kBase;
      const Element *vSrc = valid ? vBase + off.v + c * kVec : vBase;
      prim::cpAsync16(prim::smemAddress(kTile + key * kRow + c * kVec), kSrc, valid);
      prim::cpAsync16(prim::smemAddress(vTile + key * kRow + c * kVec), vSrc, valid);
    }
  };

  // ---- tensor loader (thread 0): tile x's presence mask, then its K and V boxes on the stage's barrier. Dense
  // caches only: keys exist up to the chunk's end; boxes reaching past the capacity are zero-filled by the copy engine.
  auto issueTensor = [&](int x) {
    const int slot = x % Stages;
    const uint32_t barrier = barrierBase + 8u * uint32_t(slot);
    const int key0 = keyBegin + x * TileKeys;
    if constexpr (!kProducerWarp) {  // the consumers of the warp-specialized loaders derive the mask themselves
      const int present = min(TileKeys, keyEnd - key0);
      validMask[slot * 2] = present >= 32 ? 0xffffffffu : (1u << present) - 1u;
      validMask[slot * 2 + 1] = present >= 64 ? 0xffffffffu : present > 32 ? (1u << (present - 32)) - 1u : 0u;
    }
    prim::mbarrierArriveExpectTx(barrier, uint32_t(2 * kBoxes * TileKeys * 128));
    const uint32_t kTile = prim::smemAddress(kvSmem + slot * 2 * kStageHalf);
    const uint32_t vTile = kTile + uint32_t(kStageHalf * kElementBytes);
    // The box dimension of a rank-5 map (the one not named) takes coordinate 0.
    auto coordinate = [&](const TensorMapSlots &slots, int dim) {
      return slots.key == dim ? key0 : slots.head == dim ? kvHead : slots.batch == dim ? batch : 0;
    };
    const int k1 = coordinate(p.kSlots, 1), k2 = coordinate(p.kSlots, 2), k3 = coordinate(p.kSlots, 3);
    const int v1 = coordinate(p.vSlots, 1), v2 = coordinate(p.vSlots, 2), v3 = coordinate(p.vSlots, 3);
    if constexpr (LoaderKind == kLoaderTensorWSWide || kRowsLayout) {
      if (kRowsLayout || p.kSlots.rank == 5) {  // the planner gives K and V maps of the same rank
        tensorCopy5d(kTile, &p.kMap, k1, k2, k3, coordinate(p.kSlots, 4), barrier);
        tensorCopy5d(vTile, &p.vMap, v1, v2, v3, coordinate(p.vSlots, 4), barrier);
        return;
      }
    }
    // K's boxes back to back, then V's: the two halves of a 256-byte row go out close together.
    if (p.evictFirst) {
      const uint64_t policy = createL2EvictFirstPolicy();
#pragma unroll
      for (int box = 0; box < kBoxes; ++box)
        tensorCopy4dHinted(kTile + uint32_t(box * TileKeys * 128), &p.kMap, box * 64, k1, k2, k3, barrier, policy);
#pragma unroll
      for (int box = 0; box < kBoxes; ++box)
        tensorCopy4dHinted(vTile + uint32_t(box * TileKeys * 128), &p.vMap, box * 64, v1, v2, v3, barrier, policy);
    } else {
#pragma unroll
      for (int box = 0; box < kBoxes; ++box)
        tensorCopy4d(kTile + uint32_t(box * TileKeys * 128), &p.kMap, box * 64, k1, k2, k3, barrier);
#pragma unroll
      for (int box = 0; box < kBoxes; ++box)
        tensorCopy4d(vTile + uint32_t(box * TileKeys * 128), &p.vMap, box * 64, v1, v2, v3, barrier);
    }
  };

  if constexpr (kTensor) {
    if (tid == kIssuer) {
      // With a producer warp every stage starts empty: the whole ring goes out before anything else.
      for (int x = 0; x < (kProducerWarp ? Stages : Stages - 1) && x < numTiles; ++x) {
        issueTensor(x);
        if (x == 0) FA_PHASE(9);
      }
      FA_PHASE(1);
    }
  }

  // Q rows of this CTA (zero rows past the last, zero columns past the head dim); cp.async: part of tile 0's group.
  for (int idx = tid; idx < rowsPerCta * kChunksPerRow; idx += kThreads) {
    const int localRow = idx / kChunksPerRow;
    const int c = idx - localRow * kChunksPerRow;
    const int row = firstRow + localRow;
    const bool valid = row < p.rows && c * kVec < p.headDim;
    const Element *src = qBase;
    if (valid) {
      const int groupHead = row / p.seqQ;
      const int token = row - groupHead * p.seqQ;
      const int64_t head = int64_t(kvHead) * p.groupSize + groupHead;
      src = qBase + int64_t(batch) * p.qBatch + head * p.qHead + int64_t(token) * p.qRow + c * kVec;
    }
    prim::cpAsync16(prim::smemAddress(qSmem + localRow * kRow + c * kVec), src, valid);
  }

  // This warp's rows and key share.
  const int rowTiles = p.rowTilesPerCta;
  const int rowTile = warp % rowTiles;
  const int keyGroup = warp / rowTiles;
  const bool computes = warp < rowTiles * p.keyGroups;
  const int g = lane >> 2;
  const int t = lane & 3;

  // Per owned row (g and g + 8 of the row tile): visible keys [lo, hi], aligned diagonal, ALiBi slope (log2 units).
  int rowLo[2], rowHi[2], rowAligned[2];
  float rowSlope[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = firstRow + rowTile * kRowsPerTile + g + 8 * half;
    rowLo[half] = 1;
    rowHi[half] = 0;
    rowAligned[half] = 0;
    rowSlope[half] = 0.f;
    if (row < p.rows) {
      const int groupHead = row / p.seqQ;
      const int token = row - groupHead * p.seqQ;
      const KeyRange r = visibleKeys(mask, p.windowLeft, p.windowRight, token, p.seqQ, seqLen);
      const int64_t lo = r.lo > 0 ? r.lo : 0;
      const int64_t hi = r.hi < int64_t(seqLen) - 1 ? r.hi : int64_t(seqLen) - 1;
      if (lo <= hi) {
        rowLo[half] = int(lo);
        rowHi[half] = int(hi);
      }
      rowAligned[half] = token + seqLen - p.seqQ;
      if (p.alibiSlopes) {
        const int64_t head = int64_t(kvHead) * p.groupSize + groupHead;
        rowSlope[half] = __ldg(p.alibiSlopes + int64_t(batch) * p.alibiBatchStride + head) * prim::kLog2e;
      }
    }
  }

  Engine<Element, HeadDim, kTensor ? TileKeys : 0, kRowsLayout> engine;
  engine.init(qSmem + rowTile * kRowsPerTile * kRow, lane);
  float *pScratch = pScratchAll + warp * kRowsPerTile * 20;

  float rowMax[2] = {negInf(), negInf()};  // log2 units
  float rowSum[2] = {0.f, 0.f};            // this lane's columns only; summed over the quad at the end
  float acc[HeadDim / 8][4];
#pragma unroll
  for (int n = 0; n < HeadDim / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  const float scaleLog2 = p.scale * prim::kLog2e;
  const bool softcap = p.softcap > 0.f;
  const bool alibi = p.alibiSlopes != nullptr;

  // Online softmax over this warp's sub-tiles of tile `it`, held in stage `slot`.
  // present: bit k for key k of the tile that exists (in the chunk, in a valid page).
  auto consume = [&](int it, int slot, uint64_t present) {
    const Element *kTile = kvSmem + slot * 2 * kStageHalf;
    const Element *vTile = kTile + kStageHalf;
    const int tileKey0 = keyBegin + it * TileKeys;

    for (int sub = keyGroup; sub < kSubTiles; sub += p.keyGroups) {
      float s[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      engine.scores(kTile + sub * 16 * kKeyStride, lane, s);

      float rescale[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float newMax = rowMax[half];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int keyInTile = sub * 16 + n * 8 + 2 * t + e;
            const int key = tileKey0 + keyInTile;
            float x = s[n][2 * half + e];
            if (softcap) {
              x = p.softcap * tanhf(x * p.scale / p.softcap) * prim::kLog2e;
            } else {
              x *= scaleLog2;
            }
            if (alibi) x -= rowSlope[half] * fabsf(float(key - rowAligned[half]));
            const bool visible = ((present >> keyInTile) & 1u) && key >= rowLo[half] && key <= rowHi[half];
            x = visible ? x : negInf();
            s[n][2 * half + e] = x;
            newMax = fmaxf(newMax, x);
          }
        }
        newMax = prim::quadMax(newMax);
        // A row that has seen no visible key keeps max -inf; exponentiate against 0 then so -inf - -inf never
        // makes a NaN (its probabilities are all exactly 0).
        const float base = newMax == negInf() ? 0.f : newMax;
        rescale[half] = prim::exp2Fast(rowMax[half] - base);
        rowMax[half] = newMax;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float prob = prim::exp2Fast(s[n][2 * half + e] - base);
            s[n][2 * half + e] = prob;
            sum += prob;
          }
        }
        rowSum[half] = rowSum[half] * rescale[half] + sum;
      }
      // Once the running max settles (after the first few tiles of a long chunk) it rarely moves: skip the 4 x
      // HeadDim / 8 multiplies by exactly 1 when no row of the warp moved. They sit between the scores and P V on
      // every tile's path, and at one CTA per SM the consumers are busy ~85% of the time, so their latency per tile
      // paces the stage ring (NOTES.md, fifth pass: +3..7% on B1 L64k / L128k and B8). One vote for both halves keeps
      // the branch uniform and off the halves' chains (ninth pass); the result is bitwise the same.
      if (!__all_sync(0xffffffffu, rescale[0] == 1.f && rescale[1] == 1.f)) {
#pragma unroll
        for (int n = 0; n < HeadDim / 8; ++n) {
          acc[n][0] *= rescale[0];
          acc[n][1] *= rescale[0];
          acc[n][2] *= rescale[1];
          acc[n][3] *= rescale[1];
        }
      }
      // The warp-specialized loaders leave the rows of absent keys as they came (a cache slot past the sequence may
      // hold NaN, and NaN * 0 is NaN): their halves of this lane's V fragments are cleared in registers instead, so
      // that no thread writes a stage the copy engine fills.
      uint32_t keep[2] = {~0u, ~0u};
      if constexpr (kProducerWarp) {
        const uint32_t pair0 = uint32_t(present >> (sub * 16 + 2 * t)) & 3u;
        const uint32_t pair1 = uint32_t(present >> (sub * 16 + 8 + 2 * t)) & 3u;
        keep[0] = ((pair0 & 1u) ? 0x0000ffffu : 0u) | ((pair0 & 2u) ? 0xffff0000u : 0u);
        keep[1] = ((pair1 & 1u) ? 0x0000ffffu : 0u) | ((pair1 & 2u) ? 0xffff0000u : 0u);
      }
      engine.accumulate(s, vTile + sub * 16 * kKeyStride, lane, acc, pScratch, keep);
    }
  };

  // Tile it's key presence: the keys before the chunk's end (dense caches: every key there exists).
  auto tilePresence = [&](int it) -> uint64_t {
    const int present = min(TileKeys, keyEnd - (keyBegin + it * TileKeys));
    return present >= 64 ? ~0ull : (1ull << present) - 1ull;
  };

  if constexpr (kProducerWarp) {
    // Q and the barriers' initialization are visible to every warp after this one CTA barrier; from here on the
    // producer and the consumers meet only at the stages' full / empty barriers.
    prim::cpAsyncCommit();
    prim::cpAsyncWaitAll();
    __syncthreads();
    if (warp == Warps) {
      if (lane == 0) {
        for (int x = Stages; x < numTiles; ++x) {
          const int slot = x % Stages;
          // Stage `slot` is free once every consumer warp has read tile x - Stages (its empty phase x / Stages - 1).
          const uint32_t parity = uint32_t(x / Stages - 1) & 1u;
          prim::mbarrierWait(emptyBase + 8u * uint32_t(slot), parity);
          issueTensor(x);
        }
        FA_PHASE_PRODUCER_DONE();
      }
      __syncwarp();
    } else {
      engine.loadQ();
      for (int it = 0; it < numTiles; ++it) {
        const int slot = it % Stages;
        const uint32_t parity = uint32_t(it / Stages) & 1u;
        prim::mbarrierWait(barrierBase + 8u * uint32_t(slot), parity);
        if (it == 0 && tid == 0) FA_PHASE(2);
        if (computes) consume(it, slot, tilePresence(it));
        __syncwarp();
        if (lane == 0) prim::mbarrierArrive(emptyBase + 8u * uint32_t(slot));
      }
      if (tid == 0) FA_PHASE(3);
    }
  } else if constexpr (kTensor) {
    prim::cpAsyncCommit();
    // One barrier per tile: it frees the stage consumed in the previous iteration for tile it + Stages - 1 and orders
    // the presence mask of tile it (written by thread 0 at least one iteration earlier) before its reads.
    for (int it = 0; it < numTiles; ++it) {
      if (it == 0) prim::cpAsyncWaitAll();
      __syncthreads();
      const int x = it + Stages - 1;
      if (tid == 0 && x < numTiles) issueTensor(x);
      if (it == 0) engine.loadQ();
      const int slot = it % Stages;
      const uint32_t parity = uint32_t(it / Stages) & 1u;
      prim::mbarrierWait(barrierBase + 8u * uint32_t(slot), parity);
      const int tileKey0 = keyBegin + it * TileKeys;
      if (tileKey0 + TileKeys > keyEnd) {
        // The chunk ends inside this tile (only the last tile of a sequence's key range): the rows past it are cache
        // slots no sequence uses, which may hold NaN, and P * V would spread it. Zero those V rows (K is masked).
        const int firstAbsent = keyEnd - tileKey0;
        uint4 *vTile = reinterpret_cast<uint4 *>(kvSmem + slot * 2 * kStageHalf + kStageHalf);
        const int pieces = (TileKeys - firstAbsent) * 8;  // 16-byte pieces of one box's absent rows
        for (int idx = tid; idx < kBoxes * pieces; idx += kThreads) {
          const int box = idx / pieces;
          const int piece = idx - box * pieces;
          vTile[(box * TileKeys + firstAbsent) * 8 + piece] = make_uint4(0u, 0u, 0u, 0u);
        }
        __syncthreads();
      }
      if (computes) consume(it, slot, uint64_t(validMask[slot * 2]) | (uint64_t(validMask[slot * 2 + 1]) << 32));
    }
  } else {
    // Iterations before 0 only fill the pipeline. Iteration it issues tile it + Stages - 1 (copy group
    // it + Stages - 1; Q joins group 0) and consumes tile it. Hazards: the data slot a tile is copied into was consumed
    // two barriers earlier; offset tables alternate by tile parity; the presence masks have Stages + 1 slots so that
    // the one written before the first barrier never belongs to a tile a slow warp may still be reading.
    for (int it = -(Stages - 1); it < numTiles; ++it) {
      const int x = it + Stages - 1;
      if (x < numTiles) computeOffsets(x);
      __syncthreads();
      if (x < numTiles) issueTile(x);
      prim::cpAsyncCommit();
      if (it < 0) continue;
      prim::cpAsyncWait<Stages - 1>();
      __syncthreads();
      if (it == 0) engine.loadQ();
      const uint32_t *bits = validMask + (it % kMaskSlots) * 2;
      if (computes) consume(it, it % Stages, uint64_t(bits[0]) | (uint64_t(bits[1]) << 32));
    }
  }

  // Epilogue: each computing warp parks (m, l, O) of its 16 rows; the CTA combines the key groups of each row tile.
  prim::cpAsyncWaitAll();
  __syncthreads();
  constexpr int kScratchRow = HeadDim + 4;
  float *scratchO = reinterpret_cast<float *>(smem + layout.kv);
  float *scratchStats = scratchO + Warps * kRowsPerTile * kScratchRow;
  if (computes) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = prim::quadSum(rowSum[half]);
      const int localRow = g + 8 * half;
      float *dst = scratchO + (warp * kRowsPerTile + localRow) * kScratchRow + 2 * t;
#pragma unroll
      for (int n = 0; n < HeadDim / 8; ++n)
        *reinterpret_cast<float2 *>(dst + n * 8) = make_float2(acc[n][2 * half], acc[n][2 * half + 1]);
      if (t == 0) {
        scratchStats[(warp * kRowsPerTile + localRow) * 2] = rowMax[half];
        scratchStats[(warp * kRowsPerTile + localRow) * 2 + 1] = sum;
      }
    }
  }
  __syncthreads();
  if (tid == 0) FA_PHASE(4);

  constexpr int kQuads = HeadDim / 4;
  // The key groups' states of one row (local row `localRow`, columns d..d+3) combined: the largest max (log2 units),
  // the sum rescaled to it and O unnormalized. Every key group is read at once (Warps bounds them), so the chain per
  // row is one max, one exponential and one multiply-add deep rather than a loop's worth.
  auto combineKeyGroups = [&](int localRow, int d, float &maxAll, float &total, float4 &o) {
    const int tile = localRow / kRowsPerTile;
    const int inTile = localRow - tile * kRowsPerTile;
    float m[Warps], l[Warps];
    float4 part[Warps];
#pragma unroll
    for (int kg = 0; kg < Warps; ++kg) {
      const int w = kg * rowTiles + tile;
      const bool used = kg < p.keyGroups;
      m[kg] = used ? scratchStats[(w * kRowsPerTile + inTile) * 2] : negInf();
      l[kg] = used ? scratchStats[(w * kRowsPerTile + inTile) * 2 + 1] : 0.f;
      part[kg] = used ? *reinterpret_cast<const float4 *>(scratchO + (w * kRowsPerTile + inTile) * kScratchRow + d)
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    maxAll = negInf();
#pragma unroll
    for (int kg = 0; kg < Warps; ++kg) maxAll = fmaxf(maxAll, m[kg]);
    // A key group that saw no visible key (m = -inf) weighs 0; so does every one of a row nothing saw.
    const float base = maxAll == negInf() ? 0.f : maxAll;
    total = 0.f;
    o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int kg = 0; kg < Warps; ++kg) {
      const float weight = prim::exp2Fast(m[kg] - base);
      total += weight * l[kg];
      o.x += weight * part[kg].x, o.y += weight * part[kg].y, o.z += weight * part[kg].z, o.w += weight * part[kg].w;
    }
  };
  if (p.clusterMerge && p.numChunks > 1) {
    // Step 1, in each CTA: its key groups' states combined per row, unnormalized, over the key group 0 slot of the row
    // (each item reads and writes only its own 4 columns there) with (m, l) beside; step 2, after a cluster barrier:
    // CTA `chunk` takes items chunk, chunk + numChunks, ... of the row block and merges the numChunks combined states
    // in chunk order, all of a row's loads from the other CTAs' shared memory in flight at once. The last barrier
    // keeps each CTA's shared memory alive until the others have read it.
    float *clusterStats = scratchStats + Warps * kRowsPerTile * 2;  // [rowsPerCta][2]: (m log2 units, l)
    for (int item = tid; item < rowsPerCta * kQuads; item += kThreads) {
      const int localRow = item / kQuads;
      const int d = (item - localRow * kQuads) * 4;
      if (firstRow + localRow >= p.rows || d >= p.headDim) continue;
      const int tile = localRow / kRowsPerTile;
      const int inTile = localRow - tile * kRowsPerTile;
      float maxAll, total;
      float4 o;
      combineKeyGroups(localRow, d, maxAll, total, o);
      *reinterpret_cast<float4 *>(scratchO + (tile * kRowsPerTile + inTile) * kScratchRow + d) = o;
      if (d == 0) clusterStats[localRow * 2] = maxAll, clusterStats[localRow * 2 + 1] = total;
    }
    clusterSync();
    if (tid == 0) FA_PHASE(5);
    const uint32_t statsBase = prim::smemAddress(clusterStats);
    const uint32_t oBase = prim::smemAddress(scratchO);
    for (int item = chunk * kThreads + tid; item < rowsPerCta * kQuads; item += p.numChunks * kThreads) {
      const int localRow = item / kQuads;
      const int d = (item - localRow * kQuads) * 4;
      const int row = firstRow + localRow;
      if (row >= p.rows || d >= p.headDim) continue;
      const int tile = localRow / kRowsPerTile;
      const int inTile = localRow - tile * kRowsPerTile;
      const uint32_t statsAt = statsBase + uint32_t(localRow * 2) * 4u;
      const uint32_t oAt = oBase + uint32_t((tile * kRowsPerTile + inTile) * kScratchRow + d) * 4u;
      float m[kMaxClusterChunks], l[kMaxClusterChunks];
      float4 part[kMaxClusterChunks];
#pragma unroll
      for (int c = 0; c < kMaxClusterChunks; ++c) {
        m[c] = negInf(), l[c] = 0.f, part[c] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < p.numChunks) {
          const uint32_t rank = uint32_t(c);
          m[c] = clusterLoad(clusterAddress(statsAt, rank));
          l[c] = clusterLoad(clusterAddress(statsAt + 4u, rank));
          part[c] = clusterLoad4(clusterAddress(oAt, rank));
        }
      }
      float maxAll = negInf();
#pragma unroll
      for (int c = 0; c < kMaxClusterChunks; ++c) maxAll = fmaxf(maxAll, m[c]);
      float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
      float lse = negInf();
      if (maxAll != negInf()) {
        float total = 0.f;
#pragma unroll
        for (int c = 0; c < kMaxClusterChunks; ++c) {
          const float weight = exp2f(m[c] - maxAll);  // 0 for a chunk that saw no visible key (and past numChunks)
          total += weight * l[c];
          o0 += weight * part[c].x, o1 += weight * part[c].y, o2 += weight * part[c].z, o3 += weight * part[c].w;
        }
        const float inv = 1.f / total;
        o0 *= inv, o1 *= inv, o2 *= inv, o3 *= inv;
        lse = (maxAll + log2f(total)) * prim::kLn2;
      }
      const int groupHead = row / p.seqQ;
      const int token = row - groupHead * p.seqQ;
      const int64_t head = int64_t(kvHead) * p.groupSize + groupHead;
      Element *out =
          static_cast<Element *>(p.o) + int64_t(batch) * p.oBatch + head * p.oHead + int64_t(token) * p.oRow + d;
      storeOut4<Element>(out, o0, o1, o2, o3);
      if (p.lse && d == 0) p.lse[int64_t(batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] = lse;
    }
    clusterSync();
    FA_PHASE_END();
    return;
  }

  const bool direct = p.numChunks == 1;
  for (int item = tid; item < rowsPerCta * kQuads; item += kThreads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = firstRow + localRow;
    if (row >= p.rows || d >= p.headDim) continue;
    float maxAll, total;
    float4 o;
    combineKeyGroups(localRow, d, maxAll, total, o);
    float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
    float lse = negInf();
    if (maxAll != negInf()) {
      const float inv = __fdividef(1.f, total);  // total >= 1: the largest key group's own sum
      o0 = o.x * inv, o1 = o.y * inv, o2 = o.z * inv, o3 = o.w * inv;
      lse = (maxAll + __log2f(total)) * prim::kLn2;
    }
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    const int64_t head = int64_t(kvHead) * p.groupSize + groupHead;
    if (direct) {
      Element *out = static_cast<Element *>(p.o) + int64_t(batch) * p.oBatch + head * p.oHead +
                     int64_t(token) * p.oRow + d;
      storeOut4<Element>(out, o0, o1, o2, o3);
      if (p.lse && d == 0) p.lse[int64_t(batch) * p.lseBatch + head * p.lseHead + int64_t(token) * p.lseRow] = lse;
    } else {
      const int64_t stateRow = ((int64_t(chunk) * p.batch + batch) * p.heads + head) * p.seqQ + token;
      *reinterpret_cast<float4 *>(p.partialO + stateRow * p.headDim + d) = make_float4(o0, o1, o2, o3);
      if (d == 0) p.partialLse[stateRow] = lse;
    }
  }
  FA_PHASE_SYNC();
  if (direct || p.mergeCounts == nullptr) {
    FA_PHASE_END();
    return;
  }

  // Fused merge. Once every thread's partial state is stored, thread 0 counts the CTA in on the unit's tagged word with
  // one release-acquire addition: the CTA that completes the count has every chunk's state visible, merges, and leaves
  // the word at zero arrivals for the next launch (no memset, no compare-and-swap loop: a CAS count serialized 16
  // arrivals for several us, NOTES.md seventh pass). A word without the tag held something else before this launch;
  // every CTA of the unit sees the same high half, and the launch falls back to flags: each CTA raises its own, and
  // after a sequentially consistent fence reads the unit's. Of two CTAs that both raise and then read, at least one
  // sees the other's flag, so the last to fence sees them all; one finishing beside it may too, and both then merge,
  // with the same loads in the same order, writing the same bytes. A merging CTA lowers the flags and tags the word.
  __syncthreads();
  if (tid == 0) FA_PHASE(11);
  enum : int { kSkip = 0, kMerge = 1, kUntagged = 2 };
  volatile int *decision = reinterpret_cast<volatile int *>(validMask);  // the masks are no longer read
  const int unit = (batch * p.kvHeads + kvHead) * p.rowBlocks + rowBlock;
  if (tid == 0) {
    const unsigned long long seen = prim::atomicAddAcqRelGpu(p.mergeCounts + unit, 1ull);
    int verdict = kUntagged;
    const uint32_t chunks = uint32_t(int(p.numChunks));
    if (uint32_t(seen >> 32) == kMergeTag && uint32_t(seen) < chunks) {
      const bool last = uint32_t(seen) + 1u == chunks;
      if (last) prim::storeRelaxedGpu(p.mergeCounts + unit, kMergeCountIdle);
      verdict = last ? kMerge : kSkip;
    }
    *decision = verdict;
    FA_PHASE(12);
  }
  __syncthreads();
  if (*decision == kUntagged) {
    __syncthreads();  // every thread has read the decision before warp 0 rewrites it
    if (warp == 0) {
      uint32_t *flags = p.mergeFlags + int64_t(unit) * p.numChunks;
      if (lane == 0) prim::storeReleaseGpu(flags + chunk, kMergeFlagRaised);
      __syncwarp();
      prim::fenceSeqCstGpu();
      bool allRaised = true;
      for (int c = lane; c < p.numChunks; c += 32)
        allRaised = allRaised && prim::loadRelaxedGpu(flags + c) == kMergeFlagRaised;
      allRaised = __all_sync(0xffffffffu, allRaised);
      if (allRaised) {
        prim::fenceAcquireGpu();
        for (int c = lane; c < p.numChunks; c += 32) prim::storeRelaxedGpu(flags + c, 0u);
        if (lane == 0) prim::storeRelaxedGpu(p.mergeCounts + unit, kMergeCountIdle);
      }
      if (lane == 0) *decision = allRaised ? kMerge : kSkip;
    }
    __syncthreads();
  }
  if (tid == 0) FA_PHASE(5);
  if (*decision != kMerge) {
    FA_PHASE_END();
    return;
  }
  for (int item = tid; item < rowsPerCta * kQuads; item += kThreads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = firstRow + localRow;
    if (row >= p.rows || d >= p.headDim) continue;
    const int groupHead = row / p.seqQ;
    const int token = row - groupHead * p.seqQ;
    mergeChunksOfRow<Element, 16>(p, batch, int64_t(kvHead) * p.groupSize + groupHead, token, d);
  }
  if (tid == 0) FA_PHASE(13);
  FA_PHASE_SYNC();
  FA_PHASE_END();
}

// The separate merge: one thread per (query row, 4 columns); with programmatic dependent launch it waits on the device
// for the decode grid's completion and memory flush.
template <typename Element>
__global__ void __launch_bounds__(128) decodeMergeKernel(const __grid_constant__ DecodeParams p) {
  FA_PHASE_BEGIN();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  FA_PHASE(2);
  FA_PHASE_SYNC();
  FA_PHASE_END();
  const int quads = p.headDim / 4;
  const int64_t item = int64_t(blockIdx.x) * 128 + threadIdx.x;
  if (item >= int64_t(p.batch) * p.heads * p.seqQ * quads) return;
  int64_t rest = item / quads;
  const int d = int(item - rest * quads) * 4;
  const int token = int(rest % p.seqQ);
  rest /= p.seqQ;
  const int64_t head = rest % p.heads;
  const int batch = int(rest / p.heads);
  detail::mergeChunksOfRow<Element, 16>(p, batch, head, token, d);
}

// One kernel configuration: launch, shared-memory limit, and resident CTAs per SM.
template <typename Element, int HeadDim, int Warps, int TileKeys, int Stages, int LoaderKind>
struct DecodeKernel {
  static constexpr int kThreads = ctaThreads(Warps, LoaderKind);

  static std::size_t smemBytes(int rowTilesPerCta) {
    return smemLayout(int(sizeof(Element)), HeadDim, Warps, TileKeys, Stages, LoaderKind, rowTilesPerCta).total;
  }

  // Raises the dynamic shared-memory limit once per device to what the largest launch of this kernel needs (capped by
  // the device; the planner rejects what does not fit).
  static cudaError_t prepare(const DeviceInfo &dev) {
    static std::atomic<uint64_t> configuredDevices{0};
    const std::size_t largest = smemBytes(kMaxRowTilesPerCta);
    const std::size_t optin = std::size_t(dev.smemPerBlockOptin > 0 ? dev.smemPerBlockOptin : 0);
    return ensureSharedLimit(decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>,
                             largest < optin ? largest : optin, dev.device, configuredDevices);
  }

  // Clusters of more than 8 CTAs are a per-kernel opt-in (sm90); the planner caps the chunks at kMaxClusterChunks.
  static cudaError_t allowLargeClusters(int device) {
    static bool allowed[64] = {};
    if (device >= 0 && device < 64 && allowed[device]) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>,
                                                 cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err == cudaSuccess && device >= 0 && device < 64) allowed[device] = true;
    return err;
  }

  // A launch of `blocks` CTAs in clusters of clusterSize; `attribute` (one entry) holds the cluster shape.
  static cudaLaunchConfig_t clusterConfig(uint32_t blocks, int rowTilesPerCta, int clusterSize,
                                          cudaLaunchAttribute *attribute) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smemBytes(rowTilesPerCta);
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = uint32_t(clusterSize);
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    return config;
  }

  static cudaError_t launch(const DecodeParams &params, const DeviceInfo &dev, cudaStream_t stream) {
#if defined(FLASHATTN_DECODE_PHASES)
    if (!detail::gPhaseDumpRegistered) detail::gPhaseDumpRegistered = std::atexit(detail::dumpPhases) == 0;
#endif
    cudaError_t err = prepare(dev);
    if (err != cudaSuccess) return err;
    const int64_t blocks = int64_t(params.rowBlocks) * params.numChunks * params.kvHeads * params.batch;
    auto *kernel = decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>;
    if (params.clusterMerge && params.numChunks > 1) {
      if (params.numChunks > 8) {
        err = allowLargeClusters(dev.device);
        if (err != cudaSuccess) return err;
      }
      cudaLaunchAttribute attribute[1];
      cudaLaunchConfig_t config = clusterConfig(uint32_t(blocks), params.rowTilesPerCta, params.numChunks, attribute);
      config.stream = stream;
      err = cudaLaunchKernelEx(&config, kernel, params);
      if (err != cudaSuccess) return err;
      return cudaGetLastError();
    }
    kernel<<<dim3(uint32_t(blocks)), dim3(kThreads), smemBytes(params.rowTilesPerCta), stream>>>(params);
    return cudaGetLastError();
  }

  // Runs query() (a cudaError_t) on dev.device, switching to it and back, once the kernel's shared-memory limit is
  // raised; false when the runtime cannot answer (the error is cleared).
  template <typename Query>
  static bool askDevice(const DeviceInfo &dev, Query &&query) {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    if (previous != dev.device && cudaSetDevice(dev.device) != cudaSuccess) return false;
    cudaError_t err = prepare(dev);
    if (err == cudaSuccess) err = query();
    if (previous >= 0 && previous != dev.device) cudaSetDevice(previous);
    if (err != cudaSuccess) cudaGetLastError();
    return err == cudaSuccess;
  }

  // CTAs of rowTilesPerCta row tiles one SM holds at once (registers, threads and shared memory), asked once per device
  // and row tiling; 1 when the runtime cannot tell (the chunk choice then assumes one CTA per SM).
  static int occupancy(const DeviceInfo &dev, int rowTilesPerCta) {
    static int cache[64][kMaxRowTilesPerCta + 1] = {};
    const bool cacheable = dev.device >= 0 && dev.device < 64 && rowTilesPerCta >= 1 &&
                           rowTilesPerCta <= kMaxRowTilesPerCta;
    if (cacheable && cache[dev.device][rowTilesPerCta] > 0) return cache[dev.device][rowTilesPerCta];
    int blocks = 0;
    const bool asked = askDevice(dev, [&] {
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>, kThreads,
          smemBytes(rowTilesPerCta));
    });
    if (!asked) return 1;
    blocks = blocks > 0 ? blocks : 1;
    if (cacheable) cache[dev.device][rowTilesPerCta] = blocks;
    return blocks;
  }

  // Clusters of clusterSize CTAs resident at once (cudaOccupancyMaxActiveClusters), asked once per device, row tiling
  // and size. A 16-CTA cluster must fit in one GPC, and how many GPCs can take one differs between boards of the same
  // model (7 or 14 on the H200s measured, NOTES.md seventh pass); 0 when the runtime cannot tell.
  static int clusterCapacity(const DeviceInfo &dev, int rowTilesPerCta, int clusterSize) {
    static int cache[64][kMaxRowTilesPerCta + 1][kMaxClusterChunks + 1] = {};  // capacity + 1; 0 = not asked
    if (clusterSize < 1 || clusterSize > kMaxClusterChunks || rowTilesPerCta < 1 ||
        rowTilesPerCta > kMaxRowTilesPerCta)
      return 0;
    const bool cacheable = dev.device >= 0 && dev.device < 64;
    if (cacheable && cache[dev.device][rowTilesPerCta][clusterSize] > 0)
      return cache[dev.device][rowTilesPerCta][clusterSize] - 1;
    int clusters = 0;
    const bool asked = askDevice(dev, [&] {
      cudaError_t err = clusterSize > 8 ? allowLargeClusters(dev.device) : cudaSuccess;
      if (err != cudaSuccess) return err;
      cudaLaunchAttribute attribute[1];
      const cudaLaunchConfig_t config = clusterConfig(uint32_t(clusterSize), rowTilesPerCta, clusterSize, attribute);
      auto *kernel = decodeKernel<Element, HeadDim, Warps, TileKeys, Stages, LoaderKind>;
      return cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    });
    if (!asked) return 0;
    if (cacheable) cache[dev.device][rowTilesPerCta][clusterSize] = clusters + 1;
    return clusters;
  }
};

// The library's variant `Index` of an instance; where the tensor loader cannot serve the instance (FP32, head dims
// that are not whole 64-column boxes) the planner never asks for it, and it stands for the portable variant.
template <typename Element, int HeadDim, int Index>
constexpr Variant instanceVariant() {
  return Index == 1 && !tensorLoadable(int(sizeof(Element)), HeadDim) ? libraryVariant(0) : libraryVariant(Index);
}

template <typename Element, int HeadDim, int Index>
using LibraryKernel =
    DecodeKernel<Element, HeadDim, instanceVariant<Element, HeadDim, Index>().warps,
                 resolvedTileKeys(instanceVariant<Element, HeadDim, Index>(), int(sizeof(Element)), HeadDim),
                 instanceVariant<Element, HeadDim, Index>().stages, instanceVariant<Element, HeadDim, Index>().loader>;

template <typename Element, int HeadDim>
cudaError_t launchDecodeInstance(const DecodeParams &params, int libraryVariantIndex, const DeviceInfo &dev,
                                 cudaStream_t stream) {
  static_assert(kLibraryVariantCount == 2, "one branch per library variant");
  return libraryVariantIndex == 0 ? LibraryKernel<Element, HeadDim, 0>::launch(params, dev, stream)
                                  : LibraryKernel<Element, HeadDim, 1>::launch(params, dev, stream);
}

template <typename Element, int HeadDim>
int occupancyDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta) {
  return libraryVariantIndex == 0 ? LibraryKernel<Element, HeadDim, 0>::occupancy(dev, rowTilesPerCta)
                                  : LibraryKernel<Element, HeadDim, 1>::occupancy(dev, rowTilesPerCta);
}

template <typename Element, int HeadDim>
int clusterCapacityDecodeInstance(const DeviceInfo &dev, int libraryVariantIndex, int rowTilesPerCta, int clusterSize) {
  return libraryVariantIndex == 0
             ? LibraryKernel<Element, HeadDim, 0>::clusterCapacity(dev, rowTilesPerCta, clusterSize)
             : LibraryKernel<Element, HeadDim, 1>::clusterCapacity(dev, rowTilesPerCta, clusterSize);
}

}  // namespace flashattn::cuda::decode
