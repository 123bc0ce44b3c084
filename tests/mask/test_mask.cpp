// SPDX-License-Identifier: BSD-3-Clause
// The mask rule of src/core/mask.hpp, every form of it, against a brute-force definition written here from
// docs/semantics.md ("Masks and windows") and not from the header: one (row, key) pair at a time, no ranges, no
// algebra. Every shape with sq, sk in 0..12, every mask, windows -1..4 on each side and block sizes 1..5; the grids
// count what they covered (empty rows, empty keys, seqQ > seqK, tiles needing and not needing a mask) so a grid that
// stopped reaching a case fails instead of passing vacuously.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/mask.hpp"

namespace {

using flashattn::BlockRange;
using flashattn::KeyRange;
using flashattn::Mask;
using flashattn::RowRange;

constexpr int kMaxLength = 12;
constexpr int kMaxWindow = 4;
constexpr int kMaxBlock = 5;
constexpr Mask kMasks[] = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};

// semantics.md: key j is visible to row i when the mask and the window both allow it. Top-left: j <= i; bottom-right:
// j <= i + (sk - sq); window (left, right), -1 unbounded: i' - left <= j <= i' + right with i' = i + sk - sq.
bool visible(Mask mask, int left, int right, int i, int j, int sq, int sk) {
  if (i < 0 || i >= sq || j < 0 || j >= sk) return false;
  const int bottomRightRow = i + (sk - sq);
  if (mask == Mask::CausalTopLeft && j > i) return false;
  if (mask == Mask::CausalBottomRight && j > bottomRightRow) return false;
  if (left != -1 && j < bottomRightRow - left) return false;
  if (right != -1 && j > bottomRightRow + right) return false;
  return true;
}

struct Shape {
  Mask mask;
  int left, right, sq, sk;
  bool see(int i, int j) const { return visible(mask, left, right, i, j, sq, sk); }
};

template <typename Body>
void forEachShape(Body body) {
  for (Mask mask : kMasks)
    for (int left = -1; left <= kMaxWindow; ++left)
      for (int right = -1; right <= kMaxWindow; ++right)
        for (int sq = 0; sq <= kMaxLength; ++sq)
          for (int sk = 0; sk <= kMaxLength; ++sk) body(Shape{mask, left, right, sq, sk});
}

// The smallest and largest index in [begin, end) with pred (lo > hi when none),
// also whether the indices with pred are contiguous (the rule promises one range).
struct Span {
  int lo;
  int hi;
  bool contiguous;
  bool empty() const { return lo > hi; }
};

template <typename Pred>
Span span(int begin, int end, Pred pred) {
  Span s{end, begin - 1, true};
  int count = 0;
  for (int x = begin; x < end; ++x)
    if (pred(x)) {
      if (count == 0) s.lo = x;
      s.hi = x;
      ++count;
    }
  s.contiguous = count == 0 || count == s.hi - s.lo + 1;
  return s;
}

std::string describe(const Shape &s) {
  return "mask " + std::to_string(int(s.mask)) + " window (" + std::to_string(s.left) + ", " +
         std::to_string(s.right) + ") sq " + std::to_string(s.sq) + " sk " + std::to_string(s.sk);
}

// Empty ranges are compared as "empty"; the header's clamped ends are checked separately.
template <typename Range>
bool sameRange(const Range &r, const Span &s) {
  if (s.empty()) return r.lo > r.hi;
  return r.lo == s.lo && r.hi == s.hi;
}

// The range type the kernels narrow the rule's ranges to.
struct Keys32 {
  int32_t lo;
  int32_t hi;
};

TEST(MaskRule, RowFormIsTheVisibleKeysOfEachRow) {
  int64_t rows = 0, emptyRows = 0, emptyRowsWithLongerQ = 0;
  forEachShape([&](const Shape &s) {
    for (int i = 0; i < s.sq; ++i) {
      const Span want = span(0, s.sk, [&](int j) { return s.see(i, j); });
      ASSERT_TRUE(want.contiguous) << describe(s) << " row " << i;
      const KeyRange got = flashattn::visibleKeys(s.mask, s.left, s.right, i, s.sq, s.sk);
      ASSERT_TRUE(sameRange(got, want)) << describe(s) << " row " << i << ": got [" << got.lo << ", " << got.hi
                                        << "], want [" << want.lo << ", " << want.hi << "]";
      // The clamp that makes 32-bit narrowing exact.
      ASSERT_TRUE(got.lo >= 0 && got.lo <= s.sk && got.hi >= -1 && got.hi <= s.sk - 1) << describe(s) << " row " << i;
      ASSERT_EQ(flashattn::alignedRow<int64_t>(i, s.sq, s.sk), i + s.sk - s.sq);
      ++rows;
      if (want.empty()) {
        ++emptyRows;
        if (s.sq > s.sk) ++emptyRowsWithLongerQ;
      }
    }
  });
  EXPECT_GT(rows, 0);
  EXPECT_GT(emptyRows, 0);
  EXPECT_GT(emptyRowsWithLongerQ, 0);
}

TEST(MaskRule, KeyFormIsTheRowsThatSeeEachKey) {
  int64_t keys = 0, unseenKeys = 0;
  forEachShape([&](const Shape &s) {
    for (int j = 0; j < s.sk; ++j) {
      const Span want = span(0, s.sq, [&](int i) { return s.see(i, j); });
      ASSERT_TRUE(want.contiguous) << describe(s) << " key " << j;
      const RowRange got = flashattn::visibleRows(s.mask, s.left, s.right, j, s.sq, s.sk);
      ASSERT_TRUE(sameRange(got, want)) << describe(s) << " key " << j << ": got [" << got.lo << ", " << got.hi
                                        << "], want [" << want.lo << ", " << want.hi << "]";
      ASSERT_TRUE(got.lo >= 0 && got.lo <= s.sq && got.hi >= -1 && got.hi <= s.sq - 1) << describe(s) << " key " << j;
      ++keys;
      if (want.empty()) ++unseenKeys;
    }
  });
  EXPECT_GT(keys, 0);
  EXPECT_GT(unseenKeys, 0);
}

TEST(MaskRule, DiagonalFormMatchesEveryElement) {
  int64_t elements = 0;
  forEachShape([&](const Shape &s) {
    const flashattn::Diagonals d = flashattn::visibleDiagonals(s.mask, s.left, s.right, s.sq, s.sk);
    // Keys past the sequence too: the per-element test must reject them (a kernel's last key block overhangs).
    for (int i = 0; i < s.sq; ++i)
      for (int j = 0; j < s.sk + kMaxBlock; ++j) {
        ASSERT_EQ(flashattn::visibleOnDiagonals(d, i, j, s.sk), s.see(i, j)) << describe(s) << " (" << i << ", " << j
                                                                             << ")";
        ++elements;
      }
    for (int i = 0; i < s.sq; ++i) {
      const KeyRange want = flashattn::visibleKeys(s.mask, s.left, s.right, i, s.sq, s.sk);
      const KeyRange got = flashattn::keysOnDiagonals<KeyRange>(d, i, int32_t(s.sk));
      ASSERT_TRUE(got.lo == want.lo && got.hi == want.hi)
          << describe(s) << " row " << i << ": diagonal form [" << got.lo << ", " << got.hi << "], visibleKeys ["
          << want.lo << ", " << want.hi << "]";
    }
  });
  EXPECT_GT(elements, 0);
}

// The blocks of `size` that hold an index with pred, from a brute-force span over [0, end).
template <typename Pred>
Span blockSpan(int end, int size, Pred pred) {
  return span(0, (end + size - 1) / size, [&](int b) {
    for (int x = b * size; x < (b + 1) * size && x < end; ++x)
      if (pred(x)) return true;
    return false;
  });
}

TEST(MaskRule, QueryBlockFormsMatchTheirRows) {
  int64_t blocks = 0, emptyBlocks = 0, allRowsEmptyBlocks = 0;
  forEachShape([&](const Shape &s) {
    for (int blockM = 1; blockM <= kMaxBlock; ++blockM)
      for (int m0 = 0; m0 < s.sq; m0 += blockM) {
        const int m1 = m0 + blockM < s.sq ? m0 + blockM - 1 : s.sq - 1;
        auto seenBySome = [&](int j) {
          for (int i = m0; i <= m1; ++i)
            if (s.see(i, j)) return true;
          return false;
        };
        auto seenByAll = [&](int j) {
          for (int i = m0; i <= m1; ++i)
            if (!s.see(i, j)) return false;
          return true;
        };
        const Span some = span(0, s.sk, seenBySome);
        const Span all = span(0, s.sk, seenByAll);
        ASSERT_TRUE(some.contiguous && all.contiguous) << describe(s) << " rows " << m0 << ".." << m1;
        const std::string where = describe(s) + " rows " + std::to_string(m0) + ".." + std::to_string(m1);

        ASSERT_TRUE(sameRange(flashattn::keysOfRows(s.mask, s.left, s.right, m0, m1, s.sq, s.sk), some)) << where;
        ASSERT_TRUE(sameRange(flashattn::keysOfEveryRow(s.mask, s.left, s.right, m0, m1, s.sq, s.sk), all)) << where;

        // As the kernels call them: on 32-bit copies of the first and last rows' ranges.
        const KeyRange first = flashattn::visibleKeys(s.mask, s.left, s.right, m0, s.sq, s.sk);
        const KeyRange last = flashattn::visibleKeys(s.mask, s.left, s.right, m1, s.sq, s.sk);
        const Keys32 first32{int32_t(first.lo), int32_t(first.hi)}, last32{int32_t(last.lo), int32_t(last.hi)};
        const Keys32 some32 = flashattn::keysOfRows(first32, last32);
        ASSERT_TRUE(sameRange(some32, some)) << where;
        ASSERT_TRUE(sameRange(flashattn::keysOfEveryRow(first32, last32), all)) << where;

        for (int blockN = 1; blockN <= kMaxBlock; ++blockN) {
          const Span want = blockSpan(s.sk, blockN, seenBySome);
          const BlockRange got = flashattn::blocksOf(some32, blockN);
          ASSERT_TRUE(want.empty() ? got.first == 0 && got.last == -1 : got.first == want.lo && got.last == want.hi)
              << where << " blockN " << blockN << ": got [" << got.first << ", " << got.last << "], want ["
              << want.lo << ", " << want.hi << "]";
        }
        ++blocks;
        if (some.empty()) {
          ++emptyBlocks;
          if (m1 > m0) ++allRowsEmptyBlocks;
        }
      }
  });
  EXPECT_GT(blocks, 0);
  EXPECT_GT(emptyBlocks, 0);
  EXPECT_GT(allRowsEmptyBlocks, 0);
}

TEST(MaskRule, KeyBlockFormsMatchTheirKeys) {
  int64_t blocks = 0, unseenBlocks = 0, unseenWideBlocks = 0;
  forEachShape([&](const Shape &s) {
    for (int blockN = 1; blockN <= kMaxBlock; ++blockN)
      for (int n0 = 0; n0 < s.sk; n0 += blockN) {
        const int n1 = n0 + blockN < s.sk ? n0 + blockN - 1 : s.sk - 1;
        auto seesSome = [&](int i) {
          for (int j = n0; j <= n1; ++j)
            if (s.see(i, j)) return true;
          return false;
        };
        const Span some = span(0, s.sq, seesSome);
        ASSERT_TRUE(some.contiguous) << describe(s) << " keys " << n0 << ".." << n1;
        const std::string where = describe(s) + " keys " + std::to_string(n0) + ".." + std::to_string(n1);
        const RowRange rows = flashattn::rowsOfKeys(s.mask, s.left, s.right, n0, n1, s.sq, s.sk);
        ASSERT_TRUE(sameRange(rows, some)) << where << ": got [" << rows.lo << ", " << rows.hi << "], want ["
                                           << some.lo << ", " << some.hi << "]";
        for (int blockM = 1; blockM <= kMaxBlock; ++blockM) {
          const Span want = blockSpan(s.sq, blockM, seesSome);
          const BlockRange got = flashattn::blocksOf(rows, blockM);
          ASSERT_TRUE(want.empty() ? got.first == 0 && got.last == -1 : got.first == want.lo && got.last == want.hi)
              << where << " blockM " << blockM << ": got [" << got.first << ", " << got.last << "], want ["
              << want.lo << ", " << want.hi << "]";
        }
        ++blocks;
        if (some.empty()) {
          ++unseenBlocks;
          if (n1 > n0) ++unseenWideBlocks;
        }
      }
  });
  EXPECT_GT(blocks, 0);
  EXPECT_GT(unseenBlocks, 0);
  EXPECT_GT(unseenWideBlocks, 0);
}

TEST(MaskRule, TileNeedsNoMaskExactlyWhenEveryPairIsVisible) {
  int64_t tiles = 0, fullTiles = 0, maskedTiles = 0, overhangingTiles = 0;
  forEachShape([&](const Shape &s) {
    const flashattn::Diagonals d = flashattn::visibleDiagonals(s.mask, s.left, s.right, s.sq, s.sk);
    for (int blockM = 1; blockM <= kMaxBlock; ++blockM)
      for (int blockN = 1; blockN <= kMaxBlock; ++blockN)
        // Tiles of whole blocks, so the last ones overhang the sequence as a kernel's do.
        for (int m0 = 0; m0 < s.sq; m0 += blockM)
          for (int n0 = 0; n0 < s.sk; n0 += blockN) {
            const int m1 = m0 + blockM - 1, n1 = n0 + blockN - 1;
            bool want = true;
            for (int i = m0; i <= m1 && want; ++i)
              for (int j = n0; j <= n1 && want; ++j) want = s.see(i, j);
            ASSERT_EQ(flashattn::tileFullyVisible(d, m0, m1, n0, n1, s.sq, s.sk), want)
                << describe(s) << " tile " << m0 << ".." << m1 << " x " << n0 << ".." << n1;
            ++tiles;
            (want ? fullTiles : maskedTiles) += 1;
            if (m1 >= s.sq || n1 >= s.sk) ++overhangingTiles;
          }
  });
  EXPECT_GT(tiles, 0);
  EXPECT_GT(fullTiles, 0);
  EXPECT_GT(maskedTiles, 0);
  EXPECT_GT(overhangingTiles, 0);
}

}  // namespace
