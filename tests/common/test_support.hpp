// SPDX-License-Identifier: BSD-3-Clause
// Small helpers every test suite shares: the oracle's rounding for a storage type, its name, and the edge-slice switch
// (FLASHATTN_TEST_SLICE=edge) with which the sanitizer runs select a few small shapes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

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

// The normwise bound for a result: docs/testing.md's bound for the storage type, or, where the arithmetic rounded to
// the storage type (the oracle's low-precision variant) itself misses it, `slack` times that variant's own normwise
// error -- a kernel must be about as accurate as storage-precision arithmetic, it cannot be asked to be more. It
// happens with stress inputs (x3, x5: the peaked softmax cancels in dP - D), with gradients made of a few rows (a short
// sequence under a bottom-right mask), where one bf16 rounding weighs on the whole norm, and with outputs whose norm is
// a few units in the last place (every probability underflowing its rounding: both round to zero, the error is the
// norm).
inline double storageNormTolerance(flashAttnDataType_t t, const std::vector<double> &lowPrecision,
                                   const std::vector<double> &exact, double slack = 1.0) {
  const double bound = fa_ref::normTolerance(roundingOf(t));
  return std::max(bound, slack * fa_ref::checkGates(lowPrecision, exact, lowPrecision, 3.0, bound).normwise);
}

// The gradients' second floor (FP16/BF16): the normwise error of the same arithmetic rounded where the kernels round
// (fa_ref::backwardKernelRounding), with 10% for what that model leaves out (the order of the FP32 accumulations,
// exp2 on the SFU). It matters only where a few nonzero rows make one rounding weigh on the whole norm, where it can
// lie above both the fixed bound and the oracle variant's: for the sm90 backward's bf16 d192 70 x 3 case the model
// gives the GPU's dQ and dK errors (6.936e-3, 6.157e-3) to every printed digit.
inline double kernelRoundingNormTolerance(const std::vector<double> &kernelRounding, const std::vector<double> &exact) {
  return 1.1 * fa_ref::checkGates(kernelRounding, exact, kernelRounding, 3.0, 0.0).normwise;
}

// The LSE bound for a storage type: within 1e-4 of the float64 value (docs/testing.md) or, for FP16/BF16, within 8e-6
// of its largest finite magnitude when that is larger: the tensor cores accumulate Q.K in FP32 with truncation, so the
// largest logit (which LSE follows) carries an error proportional to |Q.K|; with x5 inputs (|LSE| ~ 90) 1.8e-4 was
// measured on H200. FP32 storage (FP64 logits) keeps the plain 1e-4.
inline double lseTolerance(flashAttnDataType_t t, const std::vector<double> &refLse) {
  if (t == FLASHATTN_DATA_FP32) return 1e-4;
  double largest = 0;
  for (double x : refLse)
    if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
  return std::max(1e-4, 8e-6 * largest);
}

// FLASHATTN_TEST_STRIDE=n runs every n-th case of the HOST grids, each case whole: the sanitizer builds (ASan,
// TSan), where the full grids would take most of CI's time, still reach every kind of case. Unset: every case.
inline size_t caseStride() {
  const char *text = std::getenv("FLASHATTN_TEST_STRIDE");
  const long n = text ? std::strtol(text, nullptr, 10) : 1;
  return n >= 1 ? size_t(n) : 1;
}

inline bool edgeSliceOnly() {
  const char *slice = std::getenv("FLASHATTN_TEST_SLICE");
  return slice != nullptr && std::strcmp(slice, "edge") == 0;
}

}  // namespace fa_test
