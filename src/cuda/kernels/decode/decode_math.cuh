// SPDX-License-Identifier: BSD-3-Clause
// The split-KV decode's math: Q K^T, the online softmax and P V over one warp's 16 query rows.
//
// Engines: FP16/BF16 use mma.sync m16n8k16 (Q K^T with K through ldmatrix, P from registers times V through
// ldmatrix.trans); FP32 storage uses CUDA-core FMAs in the same fragment layout, so that the softmax, the masking and
// the epilogue are shared. RowSoftmax keeps each warp's online-softmax state (row max m, row sum l, FP32 O) for its 16
// rows over the keys it saw: lane (g = lane / 4, t = lane % 4) owns rows g and g + 8 of the row tile.
//
// Logits: FP32 with the tensor cores; FP64 with FP32 storage, as the FP32 forward forms them. FP32 products are exact
// in FP64 and only logit - max, a small number, is rounded to FP32 for the exponential: at |logit| ~ 1e6 an FP32 logit
// is off by ~0.06, which moves the weights of keys whose logits differ by less than one by percent.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/problem.hpp"
#include "cuda/kernels/decode/decode_params.hpp"
#include "cuda/kernels/decode/decode_work.cuh"
#include "cuda/primitives/merge_state.cuh"
#include "cuda/primitives/primitives.cuh"

namespace flashattn::cuda::decode {

// Tensor-core engine (FP16/BF16). Fragment layouts are those of prim::mmaM16N8K16; see mma.cuh.
// BoxKeys 0: K/V tiles in padded rows. Otherwise the tensor loader's layout: boxes of 64 columns, BoxKeys keys of 128
// bytes each, whose 16-byte chunk c of key k sits at chunk c ^ (k % 8) (the copy engine's 128-byte swizzle). The lane's
// key % 8 is lane % 8 in both ldmatrix patterns, and its chunk within a row is 2 * (step % 4) plus one lane bit, so the
// swizzled chunk is (2 * (step % 4)) ^ (lane bit ^ lane % 8).
template <typename Element, int HeadDim, int BoxKeys = 0>
struct MmaEngine {
  using Logit = float;
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

  // Shared address of 16-byte chunk `chunkPair * 2 + laneBit` (row-relative) of this lane's key row. laneXor (boxed):
  // laneBit ^ key % 8.
  static __device__ __forceinline__ uint32_t chunkAddress(uint32_t rowAddress, int chunkPair, uint32_t laneXor) {
    if constexpr (BoxKeys == 0) {
      return rowAddress + uint32_t(chunkPair) * 32u;
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
                                           : prim::smemAddress(kTile + key * 64);
    const uint32_t laneXor = uint32_t(laneBit ^ (lane & 7));
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
                                           : prim::smemAddress(vTile + key * 64);
    const uint32_t laneXor = uint32_t(laneBit ^ (lane & 7));
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
  using Logit = double;
  static constexpr int kRow = smemRowElements(4, HeadDim);
  const float *qTile = nullptr;

  __device__ __forceinline__ void init(const float *tile, int) { qTile = tile; }
  __device__ __forceinline__ void loadQ() {}

  __device__ __forceinline__ void scores(const float *kTile, int lane, double (&s)[2][4]) const {
    const int g = lane >> 2, t = lane & 3;
    const float *q0 = qTile + g * kRow;
    const float *q1 = qTile + (g + 8) * kRow;
    const float *k0 = kTile + (2 * t) * kRow;
    const float *k1 = k0 + kRow;
    const float *k2 = kTile + (8 + 2 * t) * kRow;
    const float *k3 = k2 + kRow;
#pragma unroll 4
    for (int d = 0; d < HeadDim; d += 4) {
      const float4 a[2] = {*reinterpret_cast<const float4 *>(q0 + d), *reinterpret_cast<const float4 *>(q1 + d)};
      const float4 b[4] = {*reinterpret_cast<const float4 *>(k0 + d), *reinterpret_cast<const float4 *>(k1 + d),
                           *reinterpret_cast<const float4 *>(k2 + d), *reinterpret_cast<const float4 *>(k3 + d)};
      // s[n][2 * row + e]: row g (a[0]) or g + 8 (a[1]), key b[2 * n + e].
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int row = 0; row < 2; ++row)
#pragma unroll
          for (int e = 0; e < 2; ++e) s[n][2 * row + e] = dot4(a[row], b[2 * n + e], s[n][2 * row + e]);
    }
  }

  static __device__ __forceinline__ double dot4(float4 a, float4 b, double acc) {
    acc = fma(double(a.x), double(b.x), acc);
    acc = fma(double(a.y), double(b.y), acc);
    acc = fma(double(a.z), double(b.z), acc);
    return fma(double(a.w), double(b.w), acc);
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

template <typename Element, int HeadDim, int BoxKeys>
using Engine =
    std::conditional_t<std::is_same_v<Element, float>, SimtEngine<HeadDim>, MmaEngine<Element, HeadDim, BoxKeys>>;


// One warp's rows: their visible keys, ALiBi slopes and online-softmax state, fed tile by tile.
// BoxKeys: 0 for K/V tiles in padded rows (cp.async), the tile's keys for the tensor-map loader's 64-column boxes.
template <typename Element, int HeadDim, int TileKeys, int BoxKeys>
struct RowSoftmax {
  static constexpr int kSubTiles = TileKeys / 16;
  static constexpr int kKeyStride = BoxKeys == 0 ? smemRowElements(int(sizeof(Element)), HeadDim) : 64;

  using EngineType = Engine<Element, HeadDim, BoxKeys>;
  using Logit = typename EngineType::Logit;
  static constexpr Logit kLog2e = Logit(1.4426950408889634);

  EngineType engine;
  // Per owned row (g and g + 8): visible keys [lo, hi], aligned diagonal, ALiBi slope (log2 units).
  int rowLo[2], rowHi[2], rowAligned[2];
  Logit rowSlope[2];
  Logit rowMax[2];  // log2 units
  float rowSum[2];  // this lane's columns only; summed over the quad at the end
  float acc[HeadDim / 8][4];
  Logit scaleLog2;
  bool softcap, alibi;

  // qTile: the warp's row tile of Q in shared memory (read once it has landed, by loadQ()).
  __device__ __forceinline__ void init(const DecodeParams &p, const DecodeWork &w, int rowTile, int lane,
                                       const Element *qTile) {
    const Mask mask = Mask(p.mask);
    const int g = lane >> 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = w.firstRow + rowTile * kRowsPerTile + g + 8 * half;
      rowLo[half] = 1;
      rowHi[half] = 0;
      rowAligned[half] = 0;
      rowSlope[half] = 0;
      if (row < p.rows) {
        const int groupHead = row / p.seqQ;
        const int token = row - groupHead * p.seqQ;
        const KeyRange r = visibleKeys(mask, p.windowLeft, p.windowRight, token, p.seqQ, w.seqLen);
        if (r.lo <= r.hi) {  // clamped to the sequence by the rule
          rowLo[half] = int(r.lo);
          rowHi[half] = int(r.hi);
        }
        rowAligned[half] = alignedRow(token, p.seqQ, w.seqLen);
        if (p.alibiSlopes) {
          const int64_t head = w.headOf(p, groupHead);
          rowSlope[half] = Logit(__ldg(p.alibiSlopes + int64_t(w.batch) * p.alibiBatchStride + head)) * kLog2e;
        }
      }
    }
    engine.init(qTile, lane);
    rowMax[0] = rowMax[1] = Logit(prim::negInf());
    rowSum[0] = rowSum[1] = 0.f;
#pragma unroll
    for (int n = 0; n < HeadDim / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    scaleLog2 = Logit(p.scale) * kLog2e;
    softcap = p.softcap > 0.f;
    alibi = p.alibiSlopes != nullptr;
  }

  __device__ __forceinline__ void loadQ() { engine.loadQ(); }

  // Online softmax over the warp's sub-tiles (keyGroup, keyGroup + keyGroups, ...) of the tile whose first key is
  // tileKey0. present: bit k for key k of the tile that exists. pScratch: the FP32 engine's 16 x 20 floats of P.
  __device__ __forceinline__ void consume(const DecodeParams &p, const Element *kTile, const Element *vTile,
                                          int tileKey0, uint64_t present, int keyGroup, int lane, float *pScratch) {
    const int t = lane & 3;
    for (int sub = keyGroup; sub < kSubTiles; sub += p.keyGroups) {
      Logit s[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
      engine.scores(kTile + sub * 16 * kKeyStride, lane, s);

      float prob[2][4];
      float rescale[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        Logit newMax = rowMax[half];
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int keyInTile = sub * 16 + n * 8 + 2 * t + e;
            const int key = tileKey0 + keyInTile;
            Logit x = s[n][2 * half + e];
            if (softcap) {
              x = Logit(p.softcap) * tanh(x * Logit(p.scale) / Logit(p.softcap)) * kLog2e;
            } else {
              x *= scaleLog2;
            }
            if (alibi) x -= rowSlope[half] * Logit(abs(key - rowAligned[half]));
            const bool visible = ((present >> keyInTile) & 1u) && key >= rowLo[half] && key <= rowHi[half];
            x = visible ? x : Logit(prim::negInf());
            s[n][2 * half + e] = x;
            newMax = max(newMax, x);
          }
        }
        newMax = prim::quadMax(newMax);
        // A row that saw no visible key: every probability exactly 0.
        const Logit base = newMax == Logit(prim::negInf()) ? Logit(0) : newMax;
        rescale[half] = prim::exp2Fast(float(rowMax[half] - base));
        rowMax[half] = newMax;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            prob[n][2 * half + e] = prim::exp2Fast(float(s[n][2 * half + e] - base));
            sum += prob[n][2 * half + e];
          }
        }
        rowSum[half] = rowSum[half] * rescale[half] + sum;
      }
      // Once the running max settles (after the first few tiles of a long chunk) it rarely moves: skip the 4 x
      // HeadDim / 8 multiplies by exactly 1 when no row of the warp moved. They sit between the scores and P V on
      // every tile's path, and at one CTA per SM the consumers are busy ~85% of the time, so their latency per tile
      // paces the stage ring (NOTES.md: +3..7% on B1 L64k / L128k and B8). One vote for both halves keeps the branch
      // uniform and off the halves' chains; the result is bitwise the same.
      if (!__all_sync(0xffffffffu, rescale[0] == 1.f && rescale[1] == 1.f)) {
#pragma unroll
        for (int n = 0; n < HeadDim / 8; ++n) {
          acc[n][0] *= rescale[0];
          acc[n][1] *= rescale[0];
          acc[n][2] *= rescale[1];
          acc[n][3] *= rescale[1];
        }
      }
      // The tensor-map loader leaves the rows of absent keys as they came (a cache slot past the sequence may hold NaN,
      // and NaN * 0 is NaN): their halves of this lane's V fragments are cleared in registers instead.
      uint32_t keep[2] = {~0u, ~0u};
      if constexpr (BoxKeys != 0) {
        const uint32_t pair0 = uint32_t(present >> (sub * 16 + 2 * t)) & 3u;
        const uint32_t pair1 = uint32_t(present >> (sub * 16 + 8 + 2 * t)) & 3u;
        keep[0] = ((pair0 & 1u) ? 0x0000ffffu : 0u) | ((pair0 & 2u) ? 0xffff0000u : 0u);
        keep[1] = ((pair1 & 1u) ? 0x0000ffffu : 0u) | ((pair1 & 2u) ? 0xffff0000u : 0u);
      }
      engine.accumulate(prob, vTile + sub * 16 * kKeyStride, lane, acc, pScratch, keep);
    }
  }

  // The warp's state of its 16 rows into the epilogue's scratch: per row (headDim + 4 floats of O, unnormalized) at
  // scratchO[row], (m, l) at scratchStats[row].
  __device__ __forceinline__ void park(float *scratchO, float *scratchStats, int scratchRow, int lane) const {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // The state leaves with an FP32 max: with FP64 logits its sum and O are re-expressed against the rounded max
      // (a factor within 2^(+-1/16)), so that the state still means what it meant.
      const float storedMax = float(rowMax[half]);
      float toStored = 1.f;
      if constexpr (!std::is_same_v<Logit, float>) {
        if (Logit(storedMax) != rowMax[half]) toStored = prim::exp2Fast(float(rowMax[half] - Logit(storedMax)));
      }
      const float sum = prim::quadSum(rowSum[half]) * toStored;
      const int localRow = g + 8 * half;
      float *dst = scratchO + localRow * scratchRow + 2 * t;
#pragma unroll
      for (int n = 0; n < HeadDim / 8; ++n)
        *reinterpret_cast<float2 *>(dst + n * 8) =
            make_float2(acc[n][2 * half] * toStored, acc[n][2 * half + 1] * toStored);
      if (t == 0) {
        scratchStats[localRow * 2] = storedMax;
        scratchStats[localRow * 2 + 1] = sum;
      }
    }
  }
};

}  // namespace flashattn::cuda::decode
