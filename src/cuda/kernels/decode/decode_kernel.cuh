// Split-KV decode kernel: one CTA per (batch, KV head, KV chunk, row block), four warps.
//
// Memory is the bound: every K/V byte of a chunk is read once, by 16-byte cp.async copies into a ring of `Stages`
// shared-memory tiles (Stages - 1 tiles in flight while one is consumed). The row addresses of each tile (dense or
// through the block table) are computed one tile ahead by one thread per key into a small table, so the copy loop is
// pure address arithmetic; keys outside the sequence or in a page whose id is out of range are zero-filled and marked
// absent in a per-tile bit mask, so neither NaN in unused cache slots nor a bad block id can reach the output.
//
// Compute engines: FP16/BF16 use mma.sync m16n8k16 (Q K^T with K through ldmatrix, P from registers times V through
// ldmatrix.trans); FP32 storage uses CUDA-core FMAs in the same fragment layout so that the softmax, masking and the
// epilogue are shared. Each warp keeps an online-softmax state (row max m, row sum l, FP32 O) for 16 rows over the
// keys it saw; at the end the warps of one row tile combine through shared memory, and the CTA writes either O (one
// chunk) or the chunk's partial O and LSE (merged later by the merge kernel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/problem.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/primitives/primitives.cuh"

namespace flashattn::cuda::decode {

namespace detail {

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
template <typename Element, int HeadDim>
struct MmaEngine {
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

  // s[n][.] = Q K^T for the 16 keys starting at kTile (two n8 tiles).
  __device__ __forceinline__ void scores(const Element *kTile, int lane, float (&s)[2][4]) const {
    const int key = ((lane >> 4) << 3) + (lane & 7);
    const int col = ((lane >> 3) & 1) << 3;
    const uint32_t kAddress = prim::smemAddress(kTile + key * kRow + col);
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
      prim::ldmatrixX4(b, kAddress + kk * 32);
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
      prim::mmaM16N8K16<Element>(s[0], a, b0);
      prim::mmaM16N8K16<Element>(s[1], a, b1);
    }
  }

  // o += P V for the 16 keys starting at vTile; p in the accumulator layout of scores().
  __device__ __forceinline__ void accumulate(const float (&p)[2][4], const Element *vTile, int lane,
                                             float (&o)[HeadDim / 8][4], float *) const {
    uint32_t a[4];
    a[0] = prim::packFloat2<Element>(p[0][0], p[0][1]);
    a[1] = prim::packFloat2<Element>(p[0][2], p[0][3]);
    a[2] = prim::packFloat2<Element>(p[1][0], p[1][1]);
    a[3] = prim::packFloat2<Element>(p[1][2], p[1][3]);
    const int key = (((lane >> 3) & 1) << 3) + (lane & 7);
    const int col = (lane >> 4) << 3;
    const uint32_t vAddress = prim::smemAddress(vTile + key * kRow + col);
#pragma unroll
    for (int dp = 0; dp < HeadDim / 16; ++dp) {
      uint32_t b[4];
      prim::ldmatrixX4Trans(b, vAddress + dp * 32);
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
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
                                             float (&o)[HeadDim / 8][4], float *pScratch) const {
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

template <typename Element, int HeadDim>
using Engine = std::conditional_t<std::is_same_v<Element, float>, SimtEngine<HeadDim>, MmaEngine<Element, HeadDim>>;

struct KeyOffsets {
  int64_t k;
  int64_t v;
};

}  // namespace detail

template <typename Element, int HeadDim, int Stages>
__global__ void __launch_bounds__(kThreads) decodeKernel(const DecodeParams p) {
  using namespace detail;
  constexpr int kElementBytes = int(sizeof(Element));
  constexpr int kVec = 16 / kElementBytes;           // elements per 16-byte copy
  constexpr int kChunksPerRow = HeadDim / kVec;
  constexpr int kRow = smemRowElements(kElementBytes, HeadDim);
  constexpr int kTileKeys = tileKeys(kElementBytes, HeadDim);
  constexpr int kSubTiles = kTileKeys / 16;
  constexpr int kMaskSlots = Stages + 1;
  static_assert(HeadDim % 16 == 0 && kTileKeys % 16 == 0 && kTileKeys <= 64, "tile shape");

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Let the merge kernel (launched with programmatic stream serialization) get scheduled early; it still waits for
  // this grid's completion and memory flush before reading the partial states.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  extern __shared__ __align__(128) unsigned char smem[];
  // Every CTA has the same layout for a given launch; rowTilesPerCta only sizes the Q region.
  const SmemLayout layout = smemLayout(kElementBytes, HeadDim, Stages, p.rowTilesPerCta);
  Element *qSmem = reinterpret_cast<Element *>(smem + layout.q);
  Element *kvSmem = reinterpret_cast<Element *>(smem + layout.kv);
  KeyOffsets *offsetTable = reinterpret_cast<KeyOffsets *>(smem + layout.offsets);
  uint32_t *validMask = reinterpret_cast<uint32_t *>(smem + layout.validMask);
  float *pScratchAll = reinterpret_cast<float *>(smem + layout.pScratch);

  const int tid = int(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;

  // Block -> (row block, chunk, KV head, batch); the row block varies fastest so CTAs sharing K/V run together.
  uint32_t block = blockIdx.x;
  const int rowBlock = int(block % uint32_t(p.rowBlocks));
  block /= uint32_t(p.rowBlocks);
  const int chunk = int(block % uint32_t(p.numChunks));
  block /= uint32_t(p.numChunks);
  const int kvHead = int(block % uint32_t(p.kvHeads));
  const int batch = int(block / uint32_t(p.kvHeads));

  // The sequence's used length, clamped so that no key index leaves the cache whatever the index data says.
  int seqLen = p.seqK;
  if (p.seqlensK) seqLen = min(max(__ldg(p.seqlensK + batch), 0), p.seqK);
  const Mask mask = Mask(p.mask);

  // Keys some row of this sequence can see: the visible range is monotone in the query token, so the union over
  // tokens runs from the first token's lower end to the last token's upper end.
  const KeyRange firstRange = visibleKeys(mask, p.windowLeft, p.windowRight, 0, p.seqQ, seqLen);
  const KeyRange lastRange = visibleKeys(mask, p.windowLeft, p.windowRight, p.seqQ - 1, p.seqQ, seqLen);
  const int64_t unionLo = firstRange.lo > 0 ? firstRange.lo : 0;
  const int64_t unionHi = lastRange.hi < int64_t(seqLen) - 1 ? lastRange.hi : int64_t(seqLen) - 1;
  const int64_t unionKeys = unionHi >= unionLo ? unionHi - unionLo + 1 : 0;
  const int64_t tilesTotal = (unionKeys + kTileKeys - 1) / kTileKeys;
  const int64_t tileBegin = chunkTileBegin(chunk, tilesTotal, p.numChunks);
  const int64_t tileEnd = chunkTileBegin(chunk + 1, tilesTotal, p.numChunks);
  const int numTiles = int(tileEnd - tileBegin);
  const int keyBegin = int(unionLo + tileBegin * kTileKeys);
  const int keyEnd = int(min(unionLo + tileEnd * kTileKeys, unionHi + 1));

  const Element *qBase = static_cast<const Element *>(p.q);
  const Element *kBase = static_cast<const Element *>(p.k);
  const Element *vBase = static_cast<const Element *>(p.v);
  const int rowsPerCta = p.rowTilesPerCta * kRowsPerTile;
  const int firstRow = rowBlock * rowsPerCta;

  // Q rows of this CTA (zero rows past the last, zero columns past the head dim): part of tile 0's copy group.
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

  // Tile x's key addresses: one thread per key (threads of the first kTileKeys lanes), plus the presence mask.
  auto computeOffsets = [&](int x) {
    if (tid < ((kTileKeys + 31) & ~31)) {
      const int key = keyBegin + x * kTileKeys + tid;
      bool present = tid < kTileKeys && key < keyEnd;
      KeyOffsets off{0, 0};
      if (present) {
        if (p.paged) {
          const uint32_t page = uint32_t(key) / uint32_t(p.pageSize);
          const int64_t inPage = int64_t(uint32_t(key) - page * uint32_t(p.pageSize));
          present = int64_t(page) < p.maxPagesPerSeq;
          const int64_t id = present ? int64_t(__ldg(p.blockTable + int64_t(batch) * p.maxPagesPerSeq + page)) : -1;
          present = id >= 0 && id < p.numPages;
          if (present) {
            off.k = id * p.kBatch + inPage * p.kRow + int64_t(kvHead) * p.kHead;
            off.v = id * p.vBatch + inPage * p.vRow + int64_t(kvHead) * p.vHead;
          }
        } else {
          off.k = int64_t(batch) * p.kBatch + int64_t(kvHead) * p.kHead + int64_t(key) * p.kRow;
          off.v = int64_t(batch) * p.vBatch + int64_t(kvHead) * p.vHead + int64_t(key) * p.vRow;
        }
      }
      if (tid < kTileKeys) offsetTable[(x & 1) * kTileKeys + tid] = off;
      const uint32_t bits = __ballot_sync(0xffffffffu, present);
      if (lane == 0) validMask[(x % kMaskSlots) * 2 + warp] = bits;
      if (kTileKeys <= 32 && tid == 0) validMask[(x % kMaskSlots) * 2 + 1] = 0u;
    }
  };

  auto issueTile = [&](int x) {
    const KeyOffsets *offsets = offsetTable + (x & 1) * kTileKeys;
    const uint32_t *bits = validMask + (x % kMaskSlots) * 2;
    Element *kTile = kvSmem + (x % Stages) * 2 * kTileKeys * kRow;
    Element *vTile = kTile + kTileKeys * kRow;
#pragma unroll 4
    for (int idx = tid; idx < kTileKeys * kChunksPerRow; idx += kThreads) {
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

  Engine<Element, HeadDim> engine;
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

  // Iterations before 0 only fill the pipeline. Iteration it issues tile it + Stages - 1 (copy group it + Stages - 1;
  // Q joins group 0) and consumes tile it. Hazards: the data slot a tile is copied into was consumed two barriers
  // earlier; offset tables alternate by tile parity; the presence masks have Stages + 1 slots so that the one written
  // before the first barrier never belongs to a tile a slow warp may still be reading.
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
    if (!computes) continue;

    const Element *kTile = kvSmem + (it % Stages) * 2 * kTileKeys * kRow;
    const Element *vTile = kTile + kTileKeys * kRow;
    const uint32_t *bits = validMask + (it % kMaskSlots) * 2;
    const uint64_t present = uint64_t(bits[0]) | (uint64_t(bits[1]) << 32);
    const int tileKey0 = keyBegin + it * kTileKeys;

    for (int sub = keyGroup; sub < kSubTiles; sub += p.keyGroups) {
      float s[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      engine.scores(kTile + sub * 16 * kRow, lane, s);

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
        const float rescale = prim::exp2Fast(rowMax[half] - base);
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
        rowSum[half] = rowSum[half] * rescale + sum;
#pragma unroll
        for (int n = 0; n < HeadDim / 8; ++n) {
          acc[n][2 * half] *= rescale;
          acc[n][2 * half + 1] *= rescale;
        }
      }
      engine.accumulate(s, vTile + sub * 16 * kRow, lane, acc, pScratch);
    }
  }

  // Epilogue: each computing warp parks (m, l, O) of its 16 rows; the CTA combines the key groups of each row tile.
  prim::cpAsyncWaitAll();
  __syncthreads();
  constexpr int kScratchRow = HeadDim + 4;
  float *scratchO = reinterpret_cast<float *>(smem + layout.kv);
  float *scratchStats = scratchO + kWarps * kRowsPerTile * kScratchRow;
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

  const bool direct = p.numChunks == 1;
  constexpr int kQuads = HeadDim / 4;
  for (int item = tid; item < rowsPerCta * kQuads; item += kThreads) {
    const int localRow = item / kQuads;
    const int d = (item - localRow * kQuads) * 4;
    const int row = firstRow + localRow;
    if (row >= p.rows || d >= p.headDim) continue;
    const int tile = localRow / kRowsPerTile;
    const int inTile = localRow - tile * kRowsPerTile;
    float maxAll = negInf();
    for (int kg = 0; kg < p.keyGroups; ++kg)
      maxAll = fmaxf(maxAll, scratchStats[((kg * rowTiles + tile) * kRowsPerTile + inTile) * 2]);
    float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
    float lse = negInf();
    if (maxAll != negInf()) {
      float total = 0.f;
      for (int kg = 0; kg < p.keyGroups; ++kg) {
        const int w = kg * rowTiles + tile;
        const float m = scratchStats[(w * kRowsPerTile + inTile) * 2];
        const float weight = exp2f(m - maxAll);  // m = -inf gives 0: that warp saw no visible key of this row
        total += weight * scratchStats[(w * kRowsPerTile + inTile) * 2 + 1];
        const float4 part = *reinterpret_cast<const float4 *>(scratchO + (w * kRowsPerTile + inTile) * kScratchRow + d);
        o0 += weight * part.x;
        o1 += weight * part.y;
        o2 += weight * part.z;
        o3 += weight * part.w;
      }
      const float inv = 1.f / total;
      o0 *= inv, o1 *= inv, o2 *= inv, o3 *= inv;
      lse = (maxAll + log2f(total)) * prim::kLn2;
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
}

// Launches one instance configuration. The dynamic shared-memory limit is raised once per device.
template <typename Element, int HeadDim, int Stages>
cudaError_t launchDecodeVariant(const DecodeParams &params, cudaStream_t stream) {
  const SmemLayout layout = smemLayout(int(sizeof(Element)), HeadDim, Stages, params.rowTilesPerCta);
  auto kernel = decodeKernel<Element, HeadDim, Stages>;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  // Raised once per device to the most any launch of this instance can use (capped by the device; planDecode rejects
  // what does not fit). Every thread would store the same value, so racing first calls need no lock.
  static bool raised[64] = {};
  if (device < 0 || device >= 64 || !raised[device]) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess) return err;
    const int largest = int(smemLayout(int(sizeof(Element)), HeadDim, Stages, kMaxRowTilesPerCta).total);
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, largest < optin ? largest : optin);
    if (err != cudaSuccess) return err;
    if (device >= 0 && device < 64) raised[device] = true;
  }
  const int64_t blocks = int64_t(params.rowBlocks) * params.numChunks * params.kvHeads * params.batch;
  kernel<<<dim3(uint32_t(blocks)), dim3(kThreads), layout.total, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int HeadDim>
cudaError_t launchDecodeInstance(const DecodeParams &params, cudaStream_t stream) {
  return launchDecodeVariant<Element, HeadDim, defaultStages(int(sizeof(Element)), HeadDim)>(params, stream);
}

}  // namespace flashattn::cuda::decode
