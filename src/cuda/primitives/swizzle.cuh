// SPDX-License-Identifier: BSD-3-Clause
// XOR swizzle of shared-memory tiles stored as rows of 16-byte chunks, so that the 8 row addresses of one ldmatrix
// (same chunk column, 8 consecutive rows) and the 16-byte cp.async stores of a warp land in distinct bank groups.
//
// Shared memory has 32 banks of 4 bytes, i.e. 8 groups of 16 bytes. A row of ChunksPerRow chunks starts at bank group
// (row * ChunksPerRow) % 8:
//   ChunksPerRow % 8 == 0 (head dims 64, 128, 192, 256): every row starts at group 0, so XOR the low 3 chunk bits with
//     row % 8; the permutation stays inside each aligned group of 8 chunks, hence inside the row.
//   ChunksPerRow % 8 == 4 (head dim 96): rows alternate between groups 0 and 4, so pairs of rows need separating:
//     XOR the low 2 chunk bits with (row / 2) % 4 (stays inside each aligned group of 4 chunks).
//   otherwise no swizzle is defined (static_assert), pick a tile width that is a multiple of 4 chunks.
#pragma once

namespace flashattn::cuda::prim {

// The chunk permutation of a row is chunk ^ swizzleRowXor(row). It depends only on row % 8, so a tile address can be
// split into a per-lane part (row % 8, and the low chunk bit a lane adds) and compile-time parts (row offsets that are
// multiples of 8, even chunk offsets): chunk ^ xor == (evenOffset ^ (laneBit ^ xor)) since evenOffset + laneBit ==
// evenOffset ^ laneBit.
template <int ChunksPerRow>
__device__ __forceinline__ int swizzleRowXor(int row) {
  static_assert(ChunksPerRow % 4 == 0, "swizzle needs rows of a multiple of 4 chunks (64 bytes)");
  if constexpr (ChunksPerRow % 8 == 0) {
    return row & 7;
  } else {
    return (row >> 1) & 3;
  }
}

template <int ChunksPerRow>
__device__ __forceinline__ int swizzleChunk(int row, int chunk) {
  return chunk ^ swizzleRowXor<ChunksPerRow>(row);
}

// Element offset of (row, column) in a swizzled tile of 16-bit elements, ColumnsPerRow elements per row.
// column must be a multiple of 8 (a chunk start) or lie inside the chunk; the offset within the chunk is preserved.
template <int ColumnsPerRow>
__device__ __forceinline__ int swizzledOffset16(int row, int column) {
  constexpr int kChunks = ColumnsPerRow / 8;
  static_assert(ColumnsPerRow % 8 == 0, "rows must be whole 16-byte chunks");
  return row * ColumnsPerRow + swizzleChunk<kChunks>(row, column >> 3) * 8 + (column & 7);
}

}  // namespace flashattn::cuda::prim
