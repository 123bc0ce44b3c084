// SPDX-License-Identifier: BSD-3-Clause
// Host-side FP16/BF16 <-> FP32 conversion, round to nearest even, NaN preserved. Used by the HOST backend and by the
// tests; the CUDA kernels use cuda_fp16.h / cuda_bf16.h instead.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashattn {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bitsFloat(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t floatToFp16(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf (>= 65520)
  if (absu < 0x38800000u) {                                 // below the smallest normal 2^-14: subnormal or zero
    // Adding 0.5 (2^-1) aligns the value so that the float adder rounds it to a multiple of 2^-24 (nearest even).
    const float shifted = bitsFloat(absu) + 0.5f;
    return uint16_t(sign | uint16_t(floatBits(shifted) - floatBits(0.5f)));
  }
  uint32_t mant_odd = (absu >> 13) & 1u;
  uint32_t v = absu + 0xfffu + mant_odd;  // round to nearest even at bit 13
  v -= (112u << 23);
  return uint16_t(sign | uint16_t(v >> 13));
}

}  // namespace flashattn
