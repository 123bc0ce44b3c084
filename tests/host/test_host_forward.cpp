// SPDX-License-Identifier: BSD-3-Clause
// Forward on the HOST backend through the public API, against the float64 oracle (both gates, LSE, poisoned outputs).
#include "grid_runner.hpp"

using namespace host_test;

namespace {

// The same problem with its keys in a dense cache instead of pages: per-sequence KV lengths over a padded cache for a
// dense Q, packed K and V (cuSeqlensK) for a ragged one. Same seed, so the same values.
AttnCase onDenseCache(const AttnCase &paged) {
  AttnCase dense = paged;
  dense.pageSize = 0;
  if (dense.ragged()) {
    dense.raggedK = dense.kvLengths;
    dense.kvLengths.clear();
  }
  return dense;
}

}  // namespace

TEST(HostForward, EveryShapeEveryMask) { runAttnGrid("forward shape x mask", shapeMaskCases(), false); }
TEST(HostForward, EveryShapeEveryType) { runAttnGrid("forward shape x dtype", shapeTypeCases(), false); }
TEST(HostForward, EveryHeadDimTypeAndHeads) { runAttnGrid("forward headDim x dtype x heads", headDimCases(), false); }
TEST(HostForward, Features) { runAttnGrid("forward features", featureCases(), false); }
TEST(HostForward, RaggedAndPaddedBatches) { runAttnGrid("forward ragged / seqlensK", raggedCases(), false); }
TEST(HostForward, PagedCaches) { runAttnGrid("forward paged caches", pagedCases(), false); }
TEST(HostForward, ChunkedPrefillOnPagedCaches) {
  runAttnGrid("forward chunked prefill (ragged Q, paged cache)", chunkedPrefillCases(), false);
}
TEST(HostForward, LargeShapes) { runAttnGrid("forward large shapes", largeCases(), false); }

// The backend reads a key the same way from a page as from a dense row and sums in the same order, so a paged cache
// gives the bytes of the dense one: a wrong page, row or length shows up here even where the gates would allow it.
TEST(HostForward, PagedCacheEqualsDenseCacheBitwise) {
  std::vector<AttnCase> cases = chunkedPrefillCases();
  const std::vector<AttnCase> paged = pagedCases();
  cases.insert(cases.end(), paged.begin(), paged.end());
  int compared = 0;
  for (size_t i = 0; i < cases.size(); i += fa_test::caseStride()) {
    const AttnCase &c = cases[i];
    AttnOutputs fromPages, fromDense;
    const GateReport p = runAttnCase(c, false, false, &fromPages);
    const GateReport d = runAttnCase(onDenseCache(c), false, false, &fromDense);
    ASSERT_TRUE(p.pass && d.pass) << c.describe() << "\n" << p.text << d.text;
    EXPECT_TRUE(fromPages == fromDense) << "paged and dense caches differ: " << c.describe();
    EXPECT_FALSE(fromPages.o.empty());
    ++compared;
  }
  std::printf("[grid] forward paged vs dense cache: %d cases compared bitwise\n", compared);
}
