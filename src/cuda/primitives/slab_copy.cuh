// SPDX-License-Identifier: BSD-3-Clause
// Copies of 16-bit row tiles into the layout the wgmma shared-memory descriptors read (wgmma.cuh's 128-byte swizzle):
// a Rows x D tile is a stack of D / 64 slabs [Rows][64], and the 16-byte chunk c of row r lands in slab c / 8 at chunk
// (c % 8) ^ (r % 8). Used by the sm90 forward (producer warpgroup) and backward (whole CTA) families.
#pragma once

#include <cstdint>

#include "cuda/primitives/cp_async.cuh"

namespace flashattn::cuda::prim {

// Rows x D elements from `rows` (rowStride elements apart) into the slab stack at shared address `tile`, by the
// Threads threads 0 .. Threads - 1 with cp.async. D / 8 neighbouring threads share a row, so a warp reads whole
// 128..512-byte row segments. Rows >= validRows and 8-element chunks >= validChunks (a head dim narrower than the
// tile's D) become zeros and read nothing (their source is `safeAddress`, any valid global address). Unroll is the
// pass loop's unroll factor. Where the threads do not split into whole rows (D 192: 24 chunks a row), each thread
// takes every Threads-th chunk of the tile instead.
template <typename Element, int D, int Rows, int Threads, int Unroll>
__device__ __forceinline__ void cpAsyncTileToSlabs(uint32_t tile, const Element *rows, int64_t rowStride,
                                                   int validRows, int thread, const void *safeAddress,
                                                   int validChunks = D / 8) {
  constexpr int kChunksPerRow = D / 8;
  static_assert(D % 64 == 0, "a slab is 64 elements wide");
  if constexpr (Threads % kChunksPerRow != 0) {
#pragma unroll 1
    for (int index = thread; index < Rows * kChunksPerRow; index += Threads) {
      const int row = index / kChunksPerRow;
      const int chunk = index - row * kChunksPerRow;
      const uint32_t destination =
          tile + uint32_t(chunk / 8) * Rows * 128 + uint32_t(row) * 128 + ((uint32_t(chunk % 8) ^ uint32_t(row & 7)) << 4);
      const bool valid = row < validRows && chunk < validChunks;
      cpAsync16(destination, valid ? static_cast<const void *>(rows + int64_t(row) * rowStride + chunk * 8) : safeAddress,
                valid);
    }
  } else {
    constexpr int kRowsPerPass = Threads / kChunksPerRow;
    static_assert(Rows % kRowsPerPass == 0, "tile rows must split into whole passes");
    const int chunk = thread % kChunksPerRow;
    const bool chunkValid = chunk < validChunks;
    int row = thread / kChunksPerRow;
    const uint32_t slab = tile + uint32_t(chunk / 8) * Rows * 128;
    const uint32_t chunkInSlab = uint32_t(chunk % 8);
    const Element *source = rows + int64_t(row) * rowStride + chunk * 8;
    const int64_t passStride = int64_t(kRowsPerPass) * rowStride;
#pragma unroll Unroll
    for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {
      const uint32_t destination = slab + uint32_t(row) * 128 + ((chunkInSlab ^ uint32_t(row & 7)) << 4);
      const bool valid = row < validRows && chunkValid;
      cpAsync16(destination, valid ? static_cast<const void *>(source) : safeAddress, valid);
      row += kRowsPerPass;
      source += passStride;
    }
  }
}

// The same with each row's source given by a table: row r starts at element offset rowOffsets[r] from `base`
// (rowOffsets in shared memory, e.g. a paged cache's rows); a row whose offset is negative is absent, and it and the
// chunks >= validChunks become zeros and read nothing. The offsets of a group of Group passes are read before any of its copies is issued, so their
// shared-memory latency is paid once per group, not once per copy (measured: the paged sm90 forward's producer
// otherwise stalls on each read in turn).
template <typename Element, int D, int Rows, int Threads, int Group>
__device__ __forceinline__ void cpAsyncTableRowsToSlabs(uint32_t tile, const Element *base, const int64_t *rowOffsets,
                                                        int thread, const void *safeAddress, int validChunks = D / 8) {
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = Threads / kChunksPerRow;
  constexpr int kPasses = Rows / kRowsPerPass;
  static_assert(D % 64 == 0, "a slab is 64 elements wide");
  static_assert(Rows % kRowsPerPass == 0, "tile rows must split into whole passes");
  static_assert(kPasses % Group == 0, "passes must split into whole groups");
  const int chunk = thread % kChunksPerRow;
  const int row0 = thread / kChunksPerRow;
  const uint32_t slab = tile + uint32_t(chunk / 8) * Rows * 128;
  const uint32_t chunkInSlab = uint32_t(chunk % 8);
  const bool chunkValid = chunk < validChunks;
  const Element *columns = base + chunk * 8;
#pragma unroll 1
  for (int first = 0; first < kPasses; first += Group) {
    int64_t offsets[Group];
#pragma unroll
    for (int g = 0; g < Group; ++g) offsets[g] = rowOffsets[row0 + (first + g) * kRowsPerPass];
#pragma unroll
    for (int g = 0; g < Group; ++g) {
      const int row = row0 + (first + g) * kRowsPerPass;
      const uint32_t destination = slab + uint32_t(row) * 128 + ((chunkInSlab ^ uint32_t(row & 7)) << 4);
      const bool valid = offsets[g] >= 0 && chunkValid;
      cpAsync16(destination, valid ? static_cast<const void *>(columns + offsets[g]) : safeAddress, valid);
    }
  }
}

}  // namespace flashattn::cuda::prim
