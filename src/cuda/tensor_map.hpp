// SPDX-License-Identifier: BSD-3-Clause
// Tiled tensor maps (the descriptors of Hopper's bulk tensor copies, TMA) of 16-bit tensors: 128-byte swizzle, so a
// box of 64 columns lands in the layout the wgmma descriptors read (primitives/slab_copy.cuh), and zeros for every
// element of a box outside the tensor. Encoded on the host through the runtime's driver entry point, so the library
// links no driver library.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/problem.hpp"

namespace flashattn::cuda {

struct TiledMapSpec {
  const void *base = nullptr;  // 16-byte aligned
  DType dtype = DType::BF16;   // FP16 or BF16
  int rank = 0;                // 2..5
  uint64_t dims[5] = {};       // elements; dimension 0 is contiguous
  uint64_t strides[5] = {};    // bytes, of dimensions 1..rank-1 (strides[0] is not read): multiples of 16
  uint32_t boxes[5] = {};      // the box, per dimension (box[0] * 2 <= 128 bytes)
  bool l2Promotion256 = false;  // promote L2 fills to 256 bytes instead of 128

  bool operator==(const TiledMapSpec &o) const;
};

// The spec of a [columns][rows][heads][outer] tensor (element strides of a row, a head and an outer index) read in
// boxes of 64 columns x boxRows rows of one head and one outer index: the row tiles the sm90 kernels copy. A dimension
// of one is never stepped, so any valid stride serves for it.
inline TiledMapSpec rowTileMapSpec(const void *base, DType dtype, int64_t columns, int64_t rows, int64_t heads,
                                   int64_t outer, int64_t rowStride, int64_t headStride, int64_t outerStride,
                                   int boxRows) {
  auto stride = [](int64_t size, int64_t elements) { return uint64_t(size > 1 ? elements * 2 : 16); };
  TiledMapSpec s;
  s.base = base;
  s.dtype = dtype;
  s.rank = 4;
  s.dims[0] = uint64_t(columns), s.boxes[0] = 64;
  s.dims[1] = uint64_t(rows), s.strides[1] = stride(rows, rowStride), s.boxes[1] = uint32_t(boxRows);
  s.dims[2] = uint64_t(heads), s.strides[2] = stride(heads, headStride), s.boxes[2] = 1;
  s.dims[3] = uint64_t(outer), s.strides[3] = stride(outer, outerStride), s.boxes[3] = 1;
  return s;
}

// Whether maps can be encoded in this process now: the driver has the encoder and has been initialised (a machine
// without a driver has none, and plans that need maps are not made there).
bool tensorMapEncoderAvailable();

// Encodes the map (kept in a small per-thread cache, since steps of a model reuse their tensors). False, with *map
// untouched, when the driver has no encoder or refuses the spec.
bool encodeTiledMap(const TiledMapSpec &spec, CUtensorMap *map);

}  // namespace flashattn::cuda
