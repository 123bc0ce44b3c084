// SPDX-License-Identifier: BSD-3-Clause
// Forward on the HOST backend through the public API, against the float64 oracle (both gates, LSE, poisoned outputs).
#include "grid_runner.hpp"

using namespace host_test;

TEST(HostForward, EveryShapeEveryMask) { runAttnGrid("forward shape x mask", shapeMaskCases(), false); }
TEST(HostForward, EveryShapeEveryType) { runAttnGrid("forward shape x dtype", shapeTypeCases(), false); }
TEST(HostForward, EveryHeadDimTypeAndHeads) { runAttnGrid("forward headDim x dtype x heads", headDimCases(), false); }
TEST(HostForward, Features) { runAttnGrid("forward features", featureCases(), false); }
TEST(HostForward, RaggedAndPaddedBatches) { runAttnGrid("forward ragged / seqlensK", raggedCases(), false); }
TEST(HostForward, PagedCaches) { runAttnGrid("forward paged caches", pagedCases(), false); }
TEST(HostForward, LargeShapes) { runAttnGrid("forward large shapes", largeCases(), false); }
