// SPDX-License-Identifier: BSD-3-Clause
// Overflow-checked size arithmetic: every extent, stride product, item count and workspace size the library computes
// from caller-supplied numbers goes through here, so a huge dimension or stride is refused with a message instead of
// wrapping in int64 (undefined behaviour, and in practice a negative or tiny size that passes every later check).
//
// The plain functions return false on overflow and leave *out unspecified; the `...Or` forms throw Error with the
// status and message the caller names. Header-only, host code only (nvcc host passes included).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/error.hpp"

namespace flashattn {

// Largest byte span a tensor or array may address. Kernels and the HOST backend form element offsets in int64; 2^62
// leaves a factor of two for the offsets and byte counts computed from a valid span (base + span, span * 2).
constexpr int64_t kMaxSpanBytes = int64_t(1) << 62;

inline bool mulOk(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
inline bool addOk(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
inline bool mulAddOk(int64_t a, int64_t b, int64_t c, int64_t *out) {
  int64_t product;
  return mulOk(a, b, &product) && addOk(product, c, out);
}

// a * b for a, b >= 0, or INT64_MAX when it overflows: for counts that a following limit check refuses anyway (grid
// sizes in the CUDA planners), so that the check sees a huge value instead of a wrapped one.
inline int64_t mulSat(int64_t a, int64_t b) {
  int64_t out;
  return mulOk(a, b, &out) ? out : INT64_MAX;
}

// floor(a * b / c) for a, b >= 0 and c > 0 without the intermediate product overflowing: the chunk bounds
// sk * c / chunks of split-KV decode, where sk reaches 2^40 and c 2^31. The result is at most a (b <= c) or
// checked by the caller.
inline int64_t mulDivFloor(int64_t a, int64_t b, int64_t c) {
  return int64_t(static_cast<__int128>(a) * static_cast<__int128>(b) / static_cast<__int128>(c));
}

// Elements from a strided tensor's first to its last element, inclusive: 1 + sum (dims[i] - 1) * strides[i].
// Dims must be >= 1 and strides >= 0 (the descriptor setter guarantees both).
inline bool spanElementsOk(int rank, const int64_t *dims, const int64_t *strides, int64_t *out) {
  int64_t last = 0;
  for (int i = 0; i < rank; ++i)
    if (!mulAddOk(dims[i] - 1, strides[i], last, &last)) return false;
  return addOk(last, 1, out);
}

// Bytes of `count` elements of `elementBytes` each, refused past kMaxSpanBytes.
inline bool spanBytesOk(int64_t count, int64_t elementBytes, int64_t *out) {
  return count >= 0 && mulOk(count, elementBytes, out) && *out <= kMaxSpanBytes;
}

template <typename... Why>
int64_t mulOr(int64_t a, int64_t b, flashAttnStatus_t status, Why &&...why) {
  int64_t out;
  if (!mulOk(a, b, &out)) fail(status, std::forward<Why>(why)...);
  return out;
}

template <typename... Why>
int64_t addOr(int64_t a, int64_t b, flashAttnStatus_t status, Why &&...why) {
  int64_t out;
  if (!addOk(a, b, &out)) fail(status, std::forward<Why>(why)...);
  return out;
}

template <typename... Why>
int64_t mulAddOr(int64_t a, int64_t b, int64_t c, flashAttnStatus_t status, Why &&...why) {
  int64_t out;
  if (!mulAddOk(a, b, c, &out)) fail(status, std::forward<Why>(why)...);
  return out;
}

// Workspace sizes: a product of non-negative counts, in bytes, as size_t. A size past kMaxSpanBytes cannot be
// allocated anywhere, so it is refused like an overflow.
template <typename... Why>
std::size_t bytesOr(std::initializer_list<int64_t> factors, flashAttnStatus_t status, Why &&...why) {
  int64_t out = 1;
  for (int64_t f : factors)
    if (f < 0 || !mulOk(out, f, &out) || out > kMaxSpanBytes) fail(status, std::forward<Why>(why)...);
  return std::size_t(out);
}

// Sum of workspace parts, each already bounded by kMaxSpanBytes; refused past it.
template <typename... Why>
std::size_t bytesSumOr(std::size_t a, std::size_t b, flashAttnStatus_t status, Why &&...why) {
  if (a > std::size_t(kMaxSpanBytes) || b > std::size_t(kMaxSpanBytes) - a) fail(status, std::forward<Why>(why)...);
  return a + b;
}

}  // namespace flashattn
