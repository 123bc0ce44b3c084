// SPDX-License-Identifier: BSD-3-Clause
// Split-KV decode and merge on the HOST backend through the public API: every chunk count (automatic included) on
// dense and paged caches of every page size (and 64 query tokens, which run as the forward), block tables from random permutations, NaN in every unused cache slot
// and in the workspace, per-sequence lengths including 0; merges with empty (LSE -inf) states and all-empty rows.
#include "grid_runner.hpp"

using namespace host_test;

namespace {

void runDecodeShape(size_t shapeIndex) {
  const SeqPair s = kDecodeShapes[shapeIndex];
  int runs = 0, failed = 0;
  const size_t stride = fa_test::caseStride();
  size_t index = 0;
  for (const DecodeCase &c : decodeCases()) {
    if (c.seqQ != s.q || c.seqK != s.k) continue;
    if (index++ % stride != 0) continue;
    for (const DecodeRun &run : runDecodeCase(c)) {
      ++runs;
      if (!run.report.pass) ++failed;
      EXPECT_TRUE(run.report.pass) << "page size " << run.pageSize << " (0 = dense), chunks " << run.chunks
                                   << " (0 = auto): " << c.describe() << "\n"
                                   << run.report.text;
    }
  }
  std::printf("[grid] decode (%lld, %lld): %d runs (cache kinds x chunk counts), %d failed\n", (long long)s.q,
              (long long)s.k, runs, failed);
}

}  // namespace

TEST(HostDecode, Shape1x128) { runDecodeShape(0); }
TEST(HostDecode, Shape1x339) { runDecodeShape(1); }
TEST(HostDecode, Shape3x799) { runDecodeShape(2); }
TEST(HostDecode, Shape16x800) { runDecodeShape(3); }
TEST(HostDecode, Shape16x20000) { runDecodeShape(4); }
TEST(HostDecode, Shape1x131072) { runDecodeShape(5); }
TEST(HostDecode, Shape64x800) { runDecodeShape(6); }

// Past 16 query tokens DecodeChunk is the forward over the cache: no chunk count and no cache kind may change a bit.
TEST(HostDecode, PastSixteenQueriesEveryRunIsTheForward) {
  int cases = 0;
  for (const DecodeCase &c : decodeCases()) {
    if (c.seqQ <= 16) continue;
    ++cases;
    const std::vector<DecodeRun> runs = runDecodeCase(c);
    ASSERT_FALSE(runs.empty());
    for (const DecodeRun &run : runs) {
      EXPECT_TRUE(run.report.pass) << c.describe() << "\n" << run.report.text;
      EXPECT_TRUE(run.outputs == runs.front().outputs)
          << "page size " << run.pageSize << ", chunks " << run.chunks << " differ from page size "
          << runs.front().pageSize << ", chunks " << runs.front().chunks << ": " << c.describe();
    }
  }
  EXPECT_GT(cases, 0) << "the decode grid has no case past 16 query tokens";
}

TEST(HostMerge, Grid) {
  const std::vector<MergeCase> cases = mergeCases();
  int failed = 0;
  for (size_t i = 0; i < cases.size(); i += fa_test::caseStride()) {
    const MergeCase &c = cases[i];
    const GateReport r = runMergeCase(c);
    if (!r.pass) ++failed;
    EXPECT_TRUE(r.pass) << c.describe() << "\n" << r.text;
  }
  std::printf("[grid] merge: %zu cases, %d failed\n", cases.size(), failed);
}
