// SPDX-License-Identifier: BSD-3-Clause
// What one CTA of the split-KV decode serves: its (batch, KV head, chunk, row block) from the block index, the
// sequence's length, and the keys of its chunk. Every component of the kernel reads it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/kernels/decode/decode_params.hpp"

namespace flashattn::cuda::decode {

struct DecodeWork {
  int rowBlock = 0, chunk = 0, kvHead = 0, batch = 0;
  int seqLen = 0;     // the sequence's used length, clamped to the cache
  int numTiles = 0;   // key tiles of this chunk, keys [keyBegin, keyEnd)
  int keyBegin = 0, keyEnd = 0;
  int firstRow = 0;   // the CTA's first row of the (batch, KV head)'s group heads x tokens
  int rowsPerCta = 0;

  // The query head of head `groupHead` of the KV head's group.
  __device__ __forceinline__ int64_t headOf(const DecodeParams &p, int groupHead) const {
    return int64_t(kvHead) * p.groupSize + groupHead;
  }
};

// AlignTiles: the chunk's tiles start at multiples of TileKeys (the paged tensor-map loader's pages).
template <int TileKeys, bool AlignTiles>
__device__ __forceinline__ DecodeWork findWork(const DecodeParams &p) {
  DecodeWork w;
  // Block -> (row block, chunk, KV head, batch); the row block varies fastest so CTAs sharing K/V run together, except
  // for the cluster merge, whose clusters are consecutive blocks: the chunk varies fastest there (rank = chunk).
  int block = int(blockIdx.x);
  auto splitOff = [&block](const FastDivisor &d) {  // block % d, leaving block / d
    const int quotient = d.divide(block);
    const int remainder = d.remainder(block, quotient);
    block = quotient;
    return remainder;
  };
  if (p.clusterMerge) {
    w.chunk = splitOff(p.numChunks);
    w.rowBlock = splitOff(p.rowBlocks);
  } else {
    w.rowBlock = splitOff(p.rowBlocks);
    w.chunk = splitOff(p.numChunks);
  }
  w.kvHead = splitOff(p.kvHeads);
  w.batch = block;
  // The sequence's length goes out before the rest of the range arithmetic, which its round trip then overlaps.
  int seqLenLoaded = p.seqK;
  if (p.seqlensK) seqLenLoaded = __ldg(p.seqlensK + w.batch);

  // The sequence's used length, clamped so that no key index leaves the cache whatever the index data says.
  const int seqLen = min(max(seqLenLoaded, 0), p.seqK);
  w.seqLen = seqLen;
  const Mask mask = Mask(p.mask);

  // Keys some query token of this sequence can see (the tokens are one row block of the mask rule). Without a mask or
  // window it is the whole length (no 64-bit range arithmetic on the way to the first copy).
  int64_t unionLo = 0, unionHi = int64_t(seqLen) - 1;
  if (mask != Mask::None || p.windowLeft >= 0 || p.windowRight >= 0) {
    const KeyRange seen = keysOfRows(mask, p.windowLeft, p.windowRight, 0, p.seqQ - 1, p.seqQ, seqLen);
    unionLo = seen.lo;
    unionHi = seen.hi;
  }
  // Tiles that start at multiples of TileKeys straddle no page the tensor-map loader copies whole (the keys below the
  // union are outside every row's visible range, the math masks them).
  if constexpr (AlignTiles) unionLo -= unionLo % TileKeys;
  const int64_t unionKeys = unionHi >= unionLo ? unionHi - unionLo + 1 : 0;
  const int tilesTotal = int((unionKeys + TileKeys - 1) / TileKeys);
  const int tileBegin = chunkTileBegin(w.chunk, tilesTotal, p.numChunks);
  const int tileEnd = chunkTileBegin(w.chunk + 1, tilesTotal, p.numChunks);
  w.numTiles = tileEnd - tileBegin;
  w.keyBegin = int(unionLo + int64_t(tileBegin) * TileKeys);
  w.keyEnd = int(min(unionLo + int64_t(tileEnd) * TileKeys, unionHi + 1));
  w.rowsPerCta = p.rowTilesPerCta * kRowsPerTile;
  w.firstRow = w.rowBlock * w.rowsPerCta;
  return w;
}

}  // namespace flashattn::cuda::decode
