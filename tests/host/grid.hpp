// SPDX-License-Identifier: BSD-3-Clause
// The test grid (docs/testing.md) as the HOST tests sample it. Every list is deterministic (seeded), so a failure names
// a case that reruns identically. The full cross product would take hours against a float64 oracle on two cores, so
// each list covers every value of its axes and every pair that matters (shape x mask, shape x dtype, headDim x dtype x
// heads), and shrinks heads/headDim only for the few shapes whose oracle cost would blow the CI budget.
#pragma once

#include <vector>

#include "host_harness.hpp"

namespace host_test {

extern const std::vector<int64_t> kHeadDims;
struct SeqPair {
  int64_t q, k;
};
extern const std::vector<SeqPair> kShapes;        // forward (seqQ, seqK) of the grid, the two largest excluded
extern const std::vector<SeqPair> kLargeShapes;   // (2048, 2048), (4224, 4224): a few sampled cases
extern const std::vector<SeqPair> kDecodeShapes;  // decode (seqQ, seqK); seqQ 64 runs as the forward
extern const std::vector<int32_t> kChunkCounts;   // 0 = automatic
extern const std::vector<int64_t> kPageSizes;     // 0 = dense cache

std::vector<AttnCase> shapeMaskCases();  // every shape x every mask variant, dtype and heads rotating
std::vector<AttnCase> shapeTypeCases();  // every shape x every dtype, mask rotating
std::vector<AttnCase> headDimCases();    // every headDim x dtype x heads configuration
std::vector<AttnCase> featureCases();    // softcap, ALiBi, broadcast, strides, scale, x5 values, random windows
std::vector<AttnCase> raggedCases();     // ragged batches with zero-length sequences, and padded caches
std::vector<AttnCase> pagedCases();       // forward with a dense Q on paged caches of every page size
// Chunked prefill: a ragged Q of new tokens (0, 1, at and across page boundaries) over paged caches of page sizes 1 to
// 256 holding each sequence's prefix and chunk (empty prefixes and sequences included), GQA 1, 4 and 8.
std::vector<AttnCase> chunkedPrefillCases();
std::vector<AttnCase> largeCases();
std::vector<AttnCase> backwardCases();  // backward over headDims, masks, features, ragged

// A decode case runs once per chunk count in its list, for every cache kind (dense and page sizes) in the test.
std::vector<DecodeCase> decodeCases();
std::vector<MergeCase> mergeCases();

}  // namespace host_test
