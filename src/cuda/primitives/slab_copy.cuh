// SPDX-License-Identifier: BSD-3-Clause
// Copies of 16-bit row tiles into the layout the wgmma shared-memory descriptors read (wgmma.cuh's 128-byte swizzle):
// a Rows x D tile is a stack of D / 64 slabs [Rows][64], and the 16-byte chunk c of row r lands in slab c / 8 at chunk
// (c % 8) ^ (r % 8). Used by the sm90 forward (producer warpgroup) and backward (whole CTA) families.
#pragma once

#include <cstdint>
#include <type_traits>

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
// chunks >= validChunks become zeros and read nothing (their source is `base` itself, which must be readable).
// Four neighbouring threads share a row, each copying every fourth 16-byte chunk of it, so one table read and one
// address serve D / 32 copies whose offsets from it (global and shared) are immediates; a warp's copy then covers 64
// contiguous bytes of each of 8 rows (whole 32-byte sectors). With D / 8 threads a row, as the dense copy above
// takes them, every copy paid its own table read and 64-bit address (about 16 instructions a copy, ptxas 13.0, the
// paged sm90 forward's producer). The offsets of a group of Group passes are read before any of its copies is
// issued, so their shared-memory latency is paid once per group.
template <typename Element, int D, int Rows, int Threads, int Group>
__device__ __forceinline__ void cpAsyncTableRowsToSlabs(uint32_t tile, const Element *base, const int64_t *rowOffsets,
                                                        int thread, int validChunks = D / 8) {
  constexpr int kLanesPerRow = 4;
  constexpr int kCopies = D / 8 / kLanesPerRow;  // per thread and row
  constexpr int kRowsPerPass = Threads / kLanesPerRow;
  constexpr int kPasses = (Rows + kRowsPerPass - 1) / kRowsPerPass;  // the last one partial where Rows is not whole
  constexpr int kGroup = Group < kPasses ? Group : kPasses;
  static_assert(D % 64 == 0, "a slab is 64 elements wide");
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows share one swizzle phase (row % 8)");
  const int quarter = thread % kLanesPerRow;
  const int row0 = thread / kLanesPerRow;
  // Chunk quarter + 4 i of row r lands in slab i / 2 at chunk (quarter + 4 (i % 2)) ^ (r % 8), which is
  // (quarter ^ (r % 8)) ^ 4 (i % 2): two base addresses, 64 bytes apart by XOR, and immediates for slab and pass.
  const uint32_t even = tile + uint32_t(row0) * 128 + ((uint32_t(quarter) ^ uint32_t(row0 & 7)) << 4);
  const uint32_t odd = even ^ 64u;
  const Element *columns = base + quarter * 8;
  // Where every chunk is in the head dim (the instance's own width; a uniform branch), an absent row's copies read
  // nothing from the first row of `base`, and every copy's address is the row's plus an immediate; narrower head
  // dims select each copy's address.
  auto copyRows = [&](auto wholeRows) {
#pragma unroll 1
    for (int first = 0; first < kPasses; first += kGroup) {
      auto inTile = [&](int g) {
        const int pass = first + g;
        return (kPasses % kGroup == 0 || pass < kPasses) &&
               (Rows % kRowsPerPass == 0 || row0 + pass * kRowsPerPass < Rows);
      };
      int64_t offsets[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) offsets[g] = inTile(g) ? rowOffsets[row0 + (first + g) * kRowsPerPass] : -1;
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (!inTile(g)) continue;
        const bool present = offsets[g] >= 0;
        const Element *source = columns + (present ? offsets[g] : 0);
        const uint32_t passBytes = uint32_t((first + g) * kRowsPerPass) * 128;
        const int limit = present ? validChunks - quarter : 0;  // copy i is valid where 4 i < limit
#pragma unroll
        for (int i = 0; i < kCopies; ++i) {
          const uint32_t destination = (i % 2 ? odd : even) + passBytes + uint32_t(i / 2) * Rows * 128;
          if constexpr (decltype(wholeRows)::value) {
            cpAsync16(destination, source + 32 * i, present);
          } else {
            const bool valid = 4 * i < limit;
            cpAsync16(destination, valid ? static_cast<const void *>(source + 32 * i) : base, valid);
          }
        }
      }
    }
  };
  if (validChunks == D / 8)
    copyRows(std::true_type{});
  else
    copyRows(std::false_type{});
}

}  // namespace flashattn::cuda::prim
