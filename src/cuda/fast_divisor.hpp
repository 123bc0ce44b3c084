// SPDX-License-Identifier: BSD-3-Clause
// A divisor fixed at launch, with the multiplier and shift that divide by it without a division instruction (GPUs have
// none: a 32-bit division by a run-time value is ~25 dependent instructions). Built on the host, read by kernels.
// Round-up method (Granlund and Montgomery): with l = ceil(log2 d) and m = ceil(2^(31 + l) / d), m * d exceeds
// 2^(31 + l) by less than d <= 2^l, so floor(n / d) = floor(n * m / 2^(31 + l)) for every 0 <= n < 2^31.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASHATTN_FAST_DIVISOR_FN __host__ __device__
#else
#define FLASHATTN_FAST_DIVISOR_FN
#endif

namespace flashattn::cuda {

struct FastDivisor {
  int32_t value = 1;
  uint32_t multiplier = 1u << 31;  // for 1: ceil(2^31 / 1)
  uint32_t shift = 31;

  FastDivisor() = default;
  // value >= 1.
  FLASHATTN_FAST_DIVISOR_FN FastDivisor(int32_t d) : value(d) {  // NOLINT(google-explicit-constructor): an int
    uint32_t log2 = 0;
    while ((uint64_t(1) << log2) < uint64_t(d)) ++log2;
    shift = 31 + log2;
    multiplier = uint32_t(((uint64_t(1) << shift) + uint64_t(d) - 1) / uint64_t(d));
  }
  FLASHATTN_FAST_DIVISOR_FN operator int32_t() const { return value; }

  // n / value and n % value for 0 <= n < 2^31.
  FLASHATTN_FAST_DIVISOR_FN int32_t divide(int32_t n) const {
    return int32_t((uint64_t(uint32_t(n)) * multiplier) >> shift);
  }
  FLASHATTN_FAST_DIVISOR_FN int32_t remainder(int32_t n, int32_t quotient) const { return n - quotient * value; }
};

}  // namespace flashattn::cuda
