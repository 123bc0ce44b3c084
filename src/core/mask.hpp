// SPDX-License-Identifier: BSD-3-Clause
// The one mask rule: which keys a query row sees, and every form of it the HOST backend and the kernels use.
//
// Key j (0 <= j < sk) is visible to query row i (0 <= i < sq) of a sequence of sq queries and sk keys iff the mask and
// the window both allow it (docs/semantics.md, "Masks and windows"), with i' = i + sk - sq the row aligned with the
// bottom-right diagonal:
//   CausalTopLeft       j <= i
//   CausalBottomRight   j <= i'
//   window (l, r)       i' - l <= j <= i' + r   (l or r = -1: that side unbounded)
// Every bound is the row plus a constant, so the keys of a row are one contiguous range whose two ends never decrease
// as the row grows, and the same holds for the rows that see a key. The block forms rest on that; the rows with no key
// are a prefix of the sequence (or all of it), the keys with no row a prefix and a suffix (or all of it), which is what
// makes the unions below exact rather than bounds.
//
// Nothing else in the library restates the rule: a change of it (a new mask) is made here, and tests/mask checks every
// form against a brute-force definition written separately from this file.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASHATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLASHATTN_HOST_DEVICE inline
#endif

namespace flashattn {

enum class Mask : int32_t { None = 0, CausalTopLeft = 1, CausalBottomRight = 2 };

// Inclusive ranges; empty when lo > hi (first > last). Separate types so a key range is never passed as rows.
struct KeyRange {
  int64_t lo;
  int64_t hi;
};
struct RowRange {
  int64_t lo;
  int64_t hi;
};
struct BlockRange {
  int32_t first;
  int32_t last;
};

namespace mask_detail {
FLASHATTN_HOST_DEVICE int64_t lesser(int64_t a, int64_t b) { return a < b ? a : b; }
FLASHATTN_HOST_DEVICE int64_t greater(int64_t a, int64_t b) { return a > b ? a : b; }
FLASHATTN_HOST_DEVICE int64_t clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }
}  // namespace mask_detail

// The bottom-right aligned row i' (the masks' and ALiBi's diagonal): ALiBi's distance is |j - i'|. A template so
// that 32-bit kernel arithmetic stays 32-bit.
template <typename Index>
FLASHATTN_HOST_DEVICE Index alignedRow(Index i, Index sq, Index sk) {
  return i + sk - sq;
}

// The keys row i (0 <= i < sq) sees, clamped so that lo is in [0, sk] and hi in [-1, sk - 1]: an empty range stays
// empty and both ends fit any index type that holds sk.
FLASHATTN_HOST_DEVICE KeyRange visibleKeys(Mask mask, int64_t windowLeft, int64_t windowRight, int64_t i, int64_t sq,
                                           int64_t sk) {
  using namespace mask_detail;
  const int64_t aligned = alignedRow<int64_t>(i, sq, sk);
  int64_t lo = 0;
  int64_t hi = sk - 1;
  if (mask == Mask::CausalTopLeft) hi = lesser(hi, i);
  if (mask == Mask::CausalBottomRight) hi = lesser(hi, aligned);
  if (windowLeft >= 0) lo = greater(lo, aligned - windowLeft);
  if (windowRight >= 0) hi = lesser(hi, aligned + windowRight);
  return KeyRange{clamp(lo, 0, sk), clamp(hi, -1, sk - 1)};
}

// The rows that see key j (0 <= j < sk): the same inequalities solved for i. lo is in [0, sq], hi in [-1, sq - 1].
FLASHATTN_HOST_DEVICE RowRange visibleRows(Mask mask, int64_t windowLeft, int64_t windowRight, int64_t j, int64_t sq,
                                           int64_t sk) {
  using namespace mask_detail;
  const int64_t shift = sk - sq;  // i' - i
  int64_t lo = 0;
  int64_t hi = sq - 1;
  if (mask == Mask::CausalTopLeft) lo = greater(lo, j);
  if (mask == Mask::CausalBottomRight) lo = greater(lo, j - shift);
  if (windowRight >= 0) lo = greater(lo, j - shift - windowRight);
  if (windowLeft >= 0) hi = lesser(hi, j - shift + windowLeft);
  return RowRange{lesser(lo, sq), greater(hi, -1)};
}

// Block forms. A block of rows [m0, m1] (0 <= m0 <= m1 < sq) is described by the visible keys of its first and last
// rows, from which everything about the rows between follows (the ends are monotone). The range type is a parameter
// so that a kernel can pass the 32-bit ranges it keeps in registers.

// Keys seen by at least one row of the block. Row m1 has none only when no row up to it has (rows without keys are a
// prefix or everything); otherwise the union runs from m0's first key to m1's last: before the first row with a key,
// every row's range starts at key 0, as that row's does.
template <typename Range>
FLASHATTN_HOST_DEVICE Range keysOfRows(Range first, Range last) {
  return Range{last.lo > last.hi ? last.lo : first.lo, last.hi};
}

// Keys seen by every row of the block: m1's first and m0's last.
template <typename Range>
FLASHATTN_HOST_DEVICE Range keysOfEveryRow(Range first, Range last) {
  return Range{last.lo, first.hi};
}

FLASHATTN_HOST_DEVICE KeyRange keysOfRows(Mask mask, int64_t windowLeft, int64_t windowRight, int64_t m0, int64_t m1,
                                          int64_t sq, int64_t sk) {
  return keysOfRows(visibleKeys(mask, windowLeft, windowRight, m0, sq, sk),
                    visibleKeys(mask, windowLeft, windowRight, m1, sq, sk));
}

FLASHATTN_HOST_DEVICE KeyRange keysOfEveryRow(Mask mask, int64_t windowLeft, int64_t windowRight, int64_t m0,
                                              int64_t m1, int64_t sq, int64_t sk) {
  return keysOfEveryRow(visibleKeys(mask, windowLeft, windowRight, m0, sq, sk),
                        visibleKeys(mask, windowLeft, windowRight, m1, sq, sk));
}

// Rows that see at least one key of [n0, n1] (0 <= n0 <= n1 < sk). Keys with no row are a prefix (left window), a
// suffix (top-left causal with sk > sq), or every key (top-left causal with a left window narrower than sk - sq:
// i' - l > i for every row); outside that last case the union runs from n0's first row to n1's last.
FLASHATTN_HOST_DEVICE RowRange rowsOfKeys(Mask mask, int64_t windowLeft, int64_t windowRight, int64_t n0, int64_t n1,
                                          int64_t sq, int64_t sk) {
  const bool noKeyHasRows = mask == Mask::CausalTopLeft && windowLeft >= 0 && sk - sq > windowLeft;
  return RowRange{visibleRows(mask, windowLeft, windowRight, n0, sq, sk).lo,
                  noKeyHasRows ? -1 : visibleRows(mask, windowLeft, windowRight, n1, sq, sk).hi};
}

// The blocks of `size` elements ([b * size, (b + 1) * size)) holding a range, {0, -1} for an empty one: the key blocks
// a query block needs from keysOfRows, the query blocks that see a key block from rowsOfKeys. For the kernels, whose
// lengths fit 32 bits.
template <typename Range>
FLASHATTN_HOST_DEVICE BlockRange blocksOf(Range r, int32_t size) {
  const bool empty = r.lo > r.hi;
  return BlockRange{empty ? 0 : int32_t(r.lo) / size, empty ? -1 : int32_t(r.hi) / size};
}

// The rule on the diagonal d = j - i, for per-element masking without per-row state: for 0 <= i < sq and 0 <= j < sk,
// key j is visible to row i iff lower <= d <= upper. The top-left bound j <= i is d <= 0, the bottom-right one
// d <= sk - sq, the window sk - sq - l <= d <= sk - sq + r. Both ends are clamped into [-sq - 1, sk], outside which d
// never lies, so they fit 32 bits whatever the window.
struct Diagonals {
  int32_t lower;
  int32_t upper;
};

FLASHATTN_HOST_DEVICE Diagonals visibleDiagonals(Mask mask, int64_t windowLeft, int64_t windowRight, int32_t sq,
                                                 int32_t sk) {
  using namespace mask_detail;
  const int64_t shift = int64_t(sk) - sq;
  const int64_t floor = -int64_t(sq) - 1;
  int64_t lower = floor;
  int64_t upper = sk;
  if (windowLeft >= 0) lower = shift - windowLeft;
  if (mask == Mask::CausalTopLeft) upper = 0;
  if (mask == Mask::CausalBottomRight) upper = shift;
  if (windowRight >= 0) upper = lesser(upper, shift + windowRight);
  return Diagonals{int32_t(lesser(greater(lower, floor), sk)), int32_t(lesser(greater(upper, floor), sk))};
}

// Per element: key j (j >= 0) of row i (0 <= i < sq) is visible; j >= sk is not.
FLASHATTN_HOST_DEVICE bool visibleOnDiagonals(Diagonals d, int32_t i, int32_t j, int32_t sk) {
  const int32_t distance = j - i;
  return distance >= d.lower && distance <= d.upper && j < sk;
}

// visibleKeys from the diagonals (same clamps, same result): for a kernel's main loop, where the mask kind's branches
// and the window's 64-bit arithmetic of visibleKeys would run per row of every tile.
template <typename Range>
FLASHATTN_HOST_DEVICE Range keysOnDiagonals(Diagonals d, int32_t i, int32_t sk) {
  using namespace mask_detail;
  return Range{int32_t(clamp(int64_t(i) + d.lower, 0, sk)), int32_t(clamp(int64_t(i) + d.upper, -1, int64_t(sk) - 1))};
}

// True when every (row, key) of the tile [m0, m1] x [n0, n1] (m0, n0 >= 0) lies inside the sequence and is visible,
// so that it needs no per-element mask: the tile's extreme diagonals n0 - m1 and n1 - m0 lie inside [lower, upper].
FLASHATTN_HOST_DEVICE bool tileFullyVisible(Diagonals d, int32_t m0, int32_t m1, int32_t n0, int32_t n1, int32_t sq,
                                            int32_t sk) {
  return m1 < sq && n1 < sk && n0 - m1 >= d.lower && n1 - m0 <= d.upper;
}

}  // namespace flashattn
