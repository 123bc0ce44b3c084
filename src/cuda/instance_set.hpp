// SPDX-License-Identifier: BSD-3-Clause
// Which kernel instances this build compiled (FLASHATTN_HEAD_DIMS / FLASHATTN_DTYPES become the
// FLASHATTN_HAS_HEADDIM_<d> / FLASHATTN_HAS_DTYPE_<T> definitions), so every family's chooser answers NOT_SUPPORTED
// with the same words for an instance the build left out. A new native head dim goes into kNativeHeadDims and the
// CMake default list.
#pragma once

#include <string>

#include "core/problem.hpp"

namespace flashattn::cuda {

constexpr int kNativeHeadDims[] = {64, 96, 128, 192, 256};

// The smallest native head dim >= headDim (0 when none): other multiples of 8 run zero-padded on it.
inline int nativeHeadDimFor(int64_t headDim) {
  for (int d : kNativeHeadDims)
    if (d >= headDim) return d;
  return 0;
}

// Internal linkage: the library's sources and the sm_90a object libraries (cmake/FlashAttnInstances.cmake) see
// different FLASHATTN_HAS_* sets and link into one .so, so each translation unit must keep its own definitions.
namespace {

inline bool dtypeCompiled(DType t) {
  switch (t) {
#if defined(FLASHATTN_HAS_DTYPE_FP16)
    case DType::FP16: return true;
#endif
#if defined(FLASHATTN_HAS_DTYPE_BF16)
    case DType::BF16: return true;
#endif
#if defined(FLASHATTN_HAS_DTYPE_FP32)
    case DType::FP32: return true;
#endif
    default: return false;
  }
}

inline bool headDimCompiled(int64_t d) {
  switch (d) {
#if defined(FLASHATTN_HAS_HEADDIM_64)
    case 64:
#endif
#if defined(FLASHATTN_HAS_HEADDIM_96)
    case 96:
#endif
#if defined(FLASHATTN_HAS_HEADDIM_128)
    case 128:
#endif
#if defined(FLASHATTN_HAS_HEADDIM_192)
    case 192:
#endif
#if defined(FLASHATTN_HAS_HEADDIM_256)
    case 256:
#endif
      return true;
    default:
      return false;
  }
}

inline std::string compiledHeadDims() {
  std::string list;
  for (int d : kNativeHeadDims)
    if (headDimCompiled(d)) list += (list.empty() ? "" : ", ") + std::to_string(d);
  return list.empty() ? "none" : list;
}

}  // namespace

}  // namespace flashattn::cuda
