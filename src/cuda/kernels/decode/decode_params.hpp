// What a split-KV decode kernel instance receives (by value, its only parameter), and the shape rules that the plan
// (host) and the kernel (device) must agree on: tile sizes, shared-memory layout and the chunk split.
//
// A CTA serves one (batch, KV head, chunk, row block). Its rows are the query rows of every head of the KV head's GQA
// group and every query token: row r is (group head r / seqQ, token r % seqQ). Rows are cut into 16-row tiles (one
// mma.sync M), up to four per CTA; when one tile suffices, the four warps split each KV tile's keys instead.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashattn::cuda::decode {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxRowTilesPerCta = 4;
constexpr int kRowsPerTile = 16;

// Keys per pipeline stage: about 16 KB of K (and as much of V) per stage, a multiple of the 16-key sub-tile.
constexpr int tileKeys(int elementBytes, int headDim) {
  const int rowBytes = elementBytes * headDim;
  return rowBytes <= 128 ? 64 : rowBytes <= 256 ? 64 : rowBytes <= 512 ? 32 : 16;
}

// Three stages keep up to three tiles in flight (the next one is issued before the current one is waited for) and
// stay under half of an SM's shared memory for the common head dims, so two CTAs share an SM and one's prologue or
// epilogue overlaps the other's streaming. FLASHATTN_DECODE_STAGES overrides it for experiments.
#ifndef FLASHATTN_DECODE_STAGES
#define FLASHATTN_DECODE_STAGES 3
#endif
constexpr int defaultStages(int elementBytes, int headDim) {
  (void)elementBytes;
  (void)headDim;
  return FLASHATTN_DECODE_STAGES;
}

// Shared-memory row of a K, V or Q tile: the instance head dim plus 16 bytes, so the 8 rows one ldmatrix (or one
// 16-byte cp.async wavefront) touches start in 8 distinct 16-byte bank groups.
constexpr int smemRowElements(int elementBytes, int headDim) { return headDim + 16 / elementBytes; }

// Byte layout of the dynamic shared memory. The epilogue's per-warp partial states reuse the K/V stages.
struct SmemLayout {
  std::size_t q = 0;          // [rowsPerCta][rowElements]
  std::size_t kv = 0;         // [stages][2 (K, V)][tileKeys][rowElements]
  std::size_t offsets = 0;    // [2][tileKeys] pairs of int64 (K, V element offsets), double-buffered by tile parity
  std::size_t validMask = 0;  // [stages + 1][2] uint32: which keys of a tile exist (in range, valid page)
  std::size_t pScratch = 0;   // FP32 engine: [warps][16][16 + 4] floats of P
  std::size_t total = 0;
  std::size_t kvBytes = 0;
};

constexpr std::size_t alignUp(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

constexpr SmemLayout smemLayout(int elementBytes, int headDim, int stages, int rowTilesPerCta) {
  SmemLayout s;
  const std::size_t row = std::size_t(smemRowElements(elementBytes, headDim)) * std::size_t(elementBytes);
  const std::size_t keys = std::size_t(tileKeys(elementBytes, headDim));
  const std::size_t qBytes = std::size_t(rowTilesPerCta) * kRowsPerTile * row;
  const std::size_t stageBytes = std::size_t(stages) * 2 * keys * row;
  // Epilogue: per active warp 16 rows of (headDim + 4) floats plus (m, l) per row.
  const std::size_t epilogueBytes = std::size_t(kWarps) * kRowsPerTile * (std::size_t(headDim) + 4) * 4 +
                                    std::size_t(kWarps) * kRowsPerTile * 2 * 4;
  s.q = 0;
  s.kv = alignUp(qBytes, 128);
  s.kvBytes = stageBytes > epilogueBytes ? stageBytes : epilogueBytes;
  s.offsets = alignUp(s.kv + s.kvBytes, 16);
  s.validMask = s.offsets + 2 * keys * 16;
  s.pScratch = alignUp(s.validMask + std::size_t(stages + 1) * 2 * 4, 16);
  const std::size_t pBytes = elementBytes == 4 ? std::size_t(kWarps) * kRowsPerTile * (16 + 4) * 4 : 0;
  s.total = alignUp(s.pScratch + pBytes, 128);
  return s;
}

struct DecodeParams {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;         // nullptr: no LSE output
  float *partialO = nullptr;    // numChunks > 1: [chunk][batch][heads][seqQ][headDim] FP32
  float *partialLse = nullptr;  // numChunks > 1: [chunk][batch][heads][seqQ]

  int64_t qBatch = 0, qHead = 0, qRow = 0;
  int64_t kBatch = 0, kHead = 0, kRow = 0;  // paged: kBatch is the page stride, kRow the row stride in a page
  int64_t vBatch = 0, vHead = 0, vRow = 0;
  int64_t oBatch = 0, oHead = 0, oRow = 0;
  int64_t lseBatch = 0, lseHead = 0, lseRow = 0;

  int32_t batch = 0;
  int32_t heads = 0;
  int32_t kvHeads = 0;    // effective: 1 when K and V broadcast one head (head stride 0)
  int32_t groupSize = 0;  // heads / kvHeads
  int32_t seqQ = 0;
  int32_t seqK = 0;       // capacity; per-sequence lengths are clamped to it
  int32_t headDim = 0;    // the problem's; the instance may be wider (zero-filled columns)
  int32_t rows = 0;       // groupSize * seqQ rows per (batch, KV head)
  int32_t rowTilesPerCta = 1;
  int32_t keyGroups = 4;  // warps sharing one row tile, each taking every keyGroups-th 16-key sub-tile
  int32_t rowBlocks = 1;  // CTAs along the rows of one (batch, KV head)
  int32_t numChunks = 1;

  const int32_t *seqlensK = nullptr;
  bool paged = false;
  const int32_t *blockTable = nullptr;
  int32_t pageSize = 0;
  int32_t maxPagesPerSeq = 0;
  int64_t numPages = 0;

  float scale = 1.f;
  float softcap = 0.f;
  int32_t mask = 0;  // flashattn::Mask
  int64_t windowLeft = -1;
  int64_t windowRight = -1;
  const float *alibiSlopes = nullptr;
  int64_t alibiBatchStride = 0;
};

// Chunk c of numChunks over `tiles` key tiles: tiles [c * tiles / n, (c + 1) * tiles / n), sizes differing by <= 1.
__host__ __device__ inline int64_t chunkTileBegin(int64_t chunk, int64_t tiles, int64_t numChunks) {
  return chunk * tiles / numChunks;
}

// The kernel parameters of a planned problem (plan from planDecode), and the merge of its partial states when
// plan.numChunks > 1; launchDecode is these two plus the planned instance. Exposed for benchmarks of other variants.
DecodeParams buildDecodeParams(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace);
cudaError_t launchDecodeMerge(const AttnProblem &p, const DecodeParams &params, bool dependentLaunch,
                              cudaStream_t stream);

// Instances exist per (element type, head dim); each runs kernels of one element type and one instance head dim.
template <typename Element, int HeadDim>
cudaError_t launchDecodeInstance(const DecodeParams &params, cudaStream_t stream);

}  // namespace flashattn::cuda::decode
