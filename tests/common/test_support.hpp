// Small helpers every test suite shares: the oracle's rounding for a storage type, its name, and the edge-slice switch
// (FLASHATTN_TEST_SLICE=edge) with which the sanitizer runs select a few small shapes.
#pragma once

#include <cstdlib>
#include <cstring>

#include "flashattn/flashattn.h"
#include "reference.hpp"

namespace fa_test {

inline fa_ref::Rounding roundingOf(flashAttnDataType_t t) {
  return t == FLASHATTN_DATA_FP16 ? fa_ref::Rounding::FP16
         : t == FLASHATTN_DATA_BF16 ? fa_ref::Rounding::BF16
                                    : fa_ref::Rounding::FP32;
}

inline const char *typeName(flashAttnDataType_t t) {
  return t == FLASHATTN_DATA_FP16 ? "fp16" : t == FLASHATTN_DATA_BF16 ? "bf16" : t == FLASHATTN_DATA_FP32 ? "fp32" : "?";
}

inline bool edgeSliceOnly() {
  const char *slice = std::getenv("FLASHATTN_TEST_SLICE");
  return slice != nullptr && std::strcmp(slice, "edge") == 0;
}

}  // namespace fa_test
