// SPDX-License-Identifier: BSD-3-Clause
#include "grid.hpp"

#include <algorithm>
#include <random>

namespace host_test {

const std::vector<int64_t> kHeadDims = {32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256};
const std::vector<SeqPair> kShapes = {{1, 1},     {1, 3},     {2, 1},     {239, 1},     {799, 3},
                                      {3, 513},   {113, 203}, {128, 217}, {113, 211},   {108, 256},
                                      {256, 512}, {512, 256}, {640, 128}, {1023, 1024}, {1024, 1023}};
const std::vector<SeqPair> kLargeShapes = {{2048, 2048}, {4224, 4224}};
// (64, 800) is past the split-KV kernels' 16 query tokens: DecodeChunk runs it as the forward.
const std::vector<SeqPair> kDecodeShapes = {{1, 128},    {1, 339},   {3, 799},  {16, 800},
                                            {16, 20000}, {1, 131072}, {64, 800}};
const std::vector<int32_t> kChunkCounts = {0, 1, 2, 3, 5, 17, 55, 133};
const std::vector<int64_t> kPageSizes = {0, 1, 8, 16, 64, 256};

namespace {

const flashAttnDataType_t kTypes[] = {FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP32};
const int64_t kHeadConfigs[][2] = {{6, 6}, {6, 2}, {6, 1}};
constexpr int kMaskVariants = 5;

// Oracle multiply-adds one case may cost (the float64 reference runs twice: exact and storage-rounded).
constexpr double kCaseBudget = 2.5e7;

// Mask variant v of a (seqQ, seqK) problem: none, causal top-left, causal bottom-right, a random window, causal
// bottom-right with a random left window (sliding-window attention).
void applyMask(AttnCase &c, int variant, std::mt19937_64 &rng) {
  auto extent = [&](int64_t n) {
    std::uniform_int_distribution<int64_t> d(-1, std::max<int64_t>(n, 1));
    return d(rng);
  };
  switch (variant % kMaskVariants) {
    case 0: c.mask = FLASHATTN_MASK_NONE; break;
    case 1: c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT; break;
    case 2: c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
    case 3:
      c.mask = FLASHATTN_MASK_NONE;
      c.windowLeft = extent(c.seqK / 2);
      c.windowRight = extent(c.seqK / 4);
      if (c.windowLeft < 0 && c.windowRight < 0) c.windowRight = 0;
      break;
    default:
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      c.windowLeft = std::max<int64_t>(extent(c.seqK / 3), 0);
      break;
  }
}

// Shrinks a case that would cost the oracle too much: batch first, then headDim, then heads.
void fitBudget(AttnCase &c) {
  if (c.cost() > kCaseBudget) c.batch = 1;
  if (c.cost() > kCaseBudget) c.headDim = c.headDimV = std::min<int64_t>(c.headDim, 64);
  if (c.cost() > kCaseBudget) {
    c.heads = 2;
    c.kvHeads = 1;
    c.broadcastKv = false;
  }
  if (c.cost() > kCaseBudget) {
    c.heads = c.kvHeads = 1;
    c.headDim = c.headDimV = 32;
  }
  c.alibi = std::min(c.alibi, 2);
}

// Features rotated over the grid so every one meets many shapes, types and masks.
void rotateFeatures(AttnCase &c, int index) {
  c.order = index % 2 ? fa_test::Order::BSHD : fa_test::Order::BHSD;
  c.rowPad = index % 3 == 0 ? 3 : 0;
  c.softcap = index % 4 == 1 ? 8.f : 0.f;
  c.alibi = index % 6 == 2 ? 1 : index % 6 == 5 ? 2 : 0;
  c.valueScale = index % 5 == 4 ? 5.0 : 1.0;
  c.withLse = index % 7 != 6;
  c.broadcastKv = c.heads == c.kvHeads && index % 4 == 3;
}

AttnCase baseCase(flashAttnDataType_t t, SeqPair s, int64_t headDim, const int64_t heads[2], uint64_t seed) {
  AttnCase c;
  c.dtype = t;
  c.batch = 2;
  c.seqQ = s.q;
  c.seqK = s.k;
  c.headDim = c.headDimV = headDim;
  c.heads = heads[0];
  c.kvHeads = heads[1];
  c.seed = seed;
  return c;
}

}  // namespace

std::vector<AttnCase> shapeMaskCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(101);
  int index = 0;
  for (size_t si = 0; si < kShapes.size(); ++si)
    for (int m = 0; m < kMaskVariants; ++m, ++index) {
      AttnCase c = baseCase(kTypes[(si + size_t(m)) % 3], kShapes[si], kHeadDims[(si * 5 + size_t(m)) % 12],
                            kHeadConfigs[(si + size_t(m)) % 3], 1000 + uint64_t(index));
      rotateFeatures(c, index);
      applyMask(c, m, rng);
      fitBudget(c);
      cases.push_back(c);
    }
  return cases;
}

std::vector<AttnCase> shapeTypeCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(202);
  int index = 0;
  for (size_t si = 0; si < kShapes.size(); ++si)
    for (int t = 0; t < 3; ++t, ++index) {
      AttnCase c = baseCase(kTypes[t], kShapes[si], kHeadDims[(si * 3 + size_t(t) + 7) % 12],
                            kHeadConfigs[(si + 2 * size_t(t)) % 3], 2000 + uint64_t(index));
      rotateFeatures(c, index + 1);
      applyMask(c, int(si) + 2 * t + 1, rng);
      fitBudget(c);
      cases.push_back(c);
    }
  return cases;
}

std::vector<AttnCase> headDimCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(303);
  const SeqPair shapes[] = {{33, 70}, {70, 33}, {1, 3}, {2, 1}, {17, 129}};
  int index = 0;
  for (size_t hd = 0; hd < kHeadDims.size(); ++hd)
    for (int t = 0; t < 3; ++t)
      for (int h = 0; h < 3; ++h, ++index) {
        AttnCase c =
            baseCase(kTypes[t], shapes[size_t(index) % 5], kHeadDims[hd], kHeadConfigs[h], 3000 + uint64_t(index));
        rotateFeatures(c, index);
        applyMask(c, index, rng);
        cases.push_back(c);
      }
  return cases;
}

std::vector<AttnCase> featureCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(404);
  uint64_t seed = 4000;
  const int64_t gqa[2] = {6, 2}, mha[2] = {6, 6}, mqa[2] = {6, 1};
  for (int t = 0; t < 3; ++t) {
    // softcap, small and large, with and without masks
    for (float cap : {1.f, 5.f, 30.f}) {
      AttnCase c = baseCase(kTypes[t], {113, 203}, 64, gqa, seed++);
      c.softcap = cap;
      c.valueScale = 5.0;
      applyMask(c, int(cap), rng);
      cases.push_back(c);
    }
    // ALiBi per head and per batch, with causal and window
    for (int alibi = 1; alibi <= 2; ++alibi) {
      AttnCase c = baseCase(kTypes[t], {128, 217}, 80, mqa, seed++);
      c.alibi = alibi;
      applyMask(c, alibi == 1 ? 2 : 4, rng);
      cases.push_back(c);
    }
    // stride-0 KV broadcast in both orders
    for (int order = 0; order < 2; ++order) {
      AttnCase c = baseCase(kTypes[t], {70, 121}, 96, mha, seed++);
      c.broadcastKv = true;
      c.order = order ? fa_test::Order::BSHD : fa_test::Order::BHSD;
      c.rowPad = order ? 0 : 5;
      applyMask(c, order ? 1 : 3, rng);
      cases.push_back(c);
    }
    // explicit scale
    for (float scale : {0.05f, 0.9f}) {
      AttnCase c = baseCase(kTypes[t], {64, 64}, 128, gqa, seed++);
      c.scale = scale;
      cases.push_back(c);
    }
    // headDim != headDimV
    const int64_t dims[][2] = {{64, 128}, {128, 64}, {59, 111}, {32, 256}};
    for (const auto &d : dims) {
      AttnCase c = baseCase(kTypes[t], {45, 77}, d[0], gqa, seed++);
      c.headDimV = d[1];
      applyMask(c, int(d[0]), rng);
      cases.push_back(c);
    }
    // random windows, including zero-width ones, and seqQ > seqK with bottom-right causal (fully masked rows)
    for (int w = 0; w < 6; ++w) {
      AttnCase c = baseCase(kTypes[t], w % 2 ? SeqPair{150, 90} : SeqPair{90, 150}, 40, kHeadConfigs[w % 3], seed++);
      std::uniform_int_distribution<int64_t> extent(-1, 12);
      c.windowLeft = extent(rng);
      c.windowRight = w == 0 ? 0 : extent(rng);
      c.mask = w % 3 == 0   ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT
               : w % 3 == 1 ? FLASHATTN_MASK_CAUSAL_TOP_LEFT
                            : FLASHATTN_MASK_NONE;
      c.valueScale = w == 5 ? 5.0 : 1.0;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<AttnCase> raggedCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(505);
  uint64_t seed = 5000;
  const std::vector<std::vector<int64_t>> qLens = {{0, 17, 5, 64, 1}, {33, 0, 0, 7}, {1, 1, 1}, {128, 0, 90}};
  const std::vector<std::vector<int64_t>> kLens = {{3, 0, 40, 64, 100}, {12, 9, 0, 70}, {1, 300, 0}, {128, 60, 0}};
  int index = 0;
  for (int t = 0; t < 3; ++t)
    for (size_t l = 0; l < qLens.size(); ++l, ++index) {
      AttnCase c;
      c.dtype = kTypes[t];
      c.raggedQ = qLens[l];
      c.raggedK = kLens[l];
      c.batch = int64_t(qLens[l].size());
      // maxSeqlen may exceed every length: it is only an upper bound
      c.seqQ = *std::max_element(qLens[l].begin(), qLens[l].end()) + (index % 2);
      c.seqK = *std::max_element(kLens[l].begin(), kLens[l].end()) + (index % 3 == 0 ? 5 : 0);
      c.headDim = c.headDimV = kHeadDims[size_t(index * 5) % 12];
      c.heads = kHeadConfigs[index % 3][0];
      c.kvHeads = kHeadConfigs[index % 3][1];
      c.seed = seed++;
      rotateFeatures(c, index);
      applyMask(c, index, rng);
      cases.push_back(c);
    }
  // Dense batches whose caches are only partly used (seqlensK), zero included; unused rows hold NaN.
  const std::vector<std::vector<int64_t>> used = {{100, 0, 37}, {1, 64}, {0, 0, 5, 99}};
  for (int t = 0; t < 3; ++t)
    for (size_t u = 0; u < used.size(); ++u, ++index) {
      AttnCase c = baseCase(kTypes[t], {u == 1 ? int64_t(40) : int64_t(21), 100}, kHeadDims[size_t(index) % 12],
                            kHeadConfigs[u], seed++);
      c.batch = int64_t(used[u].size());
      c.kvLengths = used[u];
      rotateFeatures(c, index);
      applyMask(c, index + 1, rng);
      cases.push_back(c);
    }
  return cases;
}

std::vector<AttnCase> pagedCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(606);
  int index = 0;
  // Chunked prefill against a paged cache: several query rows per sequence, every page size, lengths including 0.
  for (size_t pi = 1; pi < kPageSizes.size(); ++pi)
    for (int t = 0; t < 3; ++t, ++index) {
      AttnCase c = baseCase(kTypes[t], {index % 2 ? int64_t(37) : int64_t(90), 300}, kHeadDims[size_t(index * 7) % 12],
                            kHeadConfigs[size_t(index) % 3], 6500 + uint64_t(index));
      c.batch = 3;
      c.pageSize = kPageSizes[pi];
      c.kvLengths = {300, index % 2 ? int64_t(0) : int64_t(1), std::uniform_int_distribution<int64_t>(1, 300)(rng)};
      rotateFeatures(c, index);
      c.broadcastKv = false;
      applyMask(c, index, rng);
      cases.push_back(c);
    }
  return cases;
}

std::vector<AttnCase> chunkedPrefillCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(616);
  struct Sequence {
    int64_t newTokens, prefix;
  };
  // Per batch: one token after a long prefix, an empty chunk, a chunk ending on a page boundary of several page sizes
  // (40 + 24 = 64), a first chunk (no prefix), a sequence with nothing at all, and a chunk longer than its prefix.
  const std::vector<std::vector<Sequence>> batches = {
      {{17, 0}, {1, 300}, {0, 45}, {40, 24}},
      {{128, 200}, {5, 0}, {1, 1}},
      {{64, 448}, {33, 16}},
      {{3, 2}, {0, 0}, {9, 247}},
  };
  const int64_t pageSizes[] = {1, 3, 8, 16, 64, 256};
  const int64_t headDims[] = {32, 40, 64, 59, 96, 128};
  const int64_t heads[][2] = {{4, 4}, {8, 2}, {8, 1}};  // GQA 1, 4, 8
  int index = 0;
  for (int64_t pageSize : pageSizes)
    for (const std::vector<Sequence> &batch : batches) {
      AttnCase c;
      c.dtype = kTypes[size_t(index) % 3];
      c.batch = int64_t(batch.size());
      for (const Sequence &s : batch) {
        c.raggedQ.push_back(s.newTokens);
        c.kvLengths.push_back(s.prefix + s.newTokens);
      }
      // maxSeqlenQ only bounds the lengths; the capacity may exceed every sequence's keys.
      c.seqQ = std::max<int64_t>(*std::max_element(c.raggedQ.begin(), c.raggedQ.end()), 1) + index % 2;
      c.seqK = std::max<int64_t>(*std::max_element(c.kvLengths.begin(), c.kvLengths.end()), 1) + (index % 3) * 5;
      c.pageSize = pageSize;
      c.headDim = c.headDimV = headDims[size_t(index * 5) % 6];
      c.heads = heads[size_t(index) % 3][0];
      c.kvHeads = heads[size_t(index) % 3][1];
      rotateFeatures(c, index);
      c.broadcastKv = false;
      if (index % 4 == 3)
        applyMask(c, index / 4, rng);
      else
        c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      if (index % 5 == 2)
        for (int64_t h = 0; h < c.heads; ++h) c.sinks.push_back(h % 3 == 1 ? 30.f : 0.5f * float(h) - 1.f);
      c.seed = 6600 + uint64_t(index++);
      cases.push_back(c);
    }
  return cases;
}

std::vector<AttnCase> largeCases() {
  std::vector<AttnCase> cases;
  const int64_t one[2] = {1, 1}, two[2] = {2, 1};
  AttnCase a = baseCase(FLASHATTN_DATA_BF16, kLargeShapes[0], 32, two, 6000);
  a.batch = 1;
  a.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  a.order = fa_test::Order::BSHD;
  cases.push_back(a);
  AttnCase b = baseCase(FLASHATTN_DATA_FP32, kLargeShapes[1], 32, one, 6001);
  b.batch = 1;
  b.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  b.windowLeft = 1500;
  cases.push_back(b);
  return cases;
}

std::vector<AttnCase> backwardCases() {
  std::vector<AttnCase> cases;
  std::mt19937_64 rng(707);
  uint64_t seed = 7000;
  int index = 0;
  // every headDim x dtype, heads and masks rotating
  const SeqPair small[] = {{33, 70}, {70, 33}, {2, 1}, {17, 45}};
  for (size_t hd = 0; hd < kHeadDims.size(); ++hd)
    for (int t = 0; t < 3; ++t, ++index) {
      AttnCase c =
          baseCase(kTypes[t], small[size_t(index) % 4], kHeadDims[hd], kHeadConfigs[size_t(index) % 3], seed++);
      c.batch = 1;
      rotateFeatures(c, index);
      applyMask(c, index, rng);
      cases.push_back(c);
    }
  // every mask variant x dtype on a grid shape
  for (int m = 0; m < kMaskVariants; ++m)
    for (int t = 0; t < 3; ++t, ++index) {
      AttnCase c =
          baseCase(kTypes[t], m % 2 ? SeqPair{113, 203} : SeqPair{128, 217}, 64, kHeadConfigs[size_t(m) % 3], seed++);
      c.batch = 1;
      rotateFeatures(c, index);
      applyMask(c, m, rng);
      cases.push_back(c);
    }
  // every grid shape once
  for (size_t si = 0; si < kShapes.size(); ++si, ++index) {
    AttnCase c = baseCase(kTypes[si % 3], kShapes[si], kHeadDims[(si * 7) % 12], kHeadConfigs[si % 3], seed++);
    rotateFeatures(c, index);
    applyMask(c, int(si), rng);
    fitBudget(c);
    cases.push_back(c);
  }
  // softcap, ALiBi, broadcast, x5, headDim != headDimV
  for (int t = 0; t < 3; ++t) {
    AttnCase a = baseCase(kTypes[t], {50, 80}, 64, kHeadConfigs[1], seed++);
    a.softcap = 4.f;
    a.alibi = 1 + t % 2;
    a.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    cases.push_back(a);
    AttnCase b = baseCase(kTypes[t], {64, 64}, 96, kHeadConfigs[0], seed++);
    b.broadcastKv = true;
    b.order = fa_test::Order::BSHD;
    b.valueScale = 5.0;
    cases.push_back(b);
    AttnCase d = baseCase(kTypes[t], {40, 90}, 128, kHeadConfigs[2], seed++);
    d.headDimV = 64;
    d.windowLeft = 10;
    d.windowRight = 3;
    cases.push_back(d);
  }
  // ragged batches with zero-length sequences, padded caches
  const std::vector<AttnCase> ragged = raggedCases();
  for (size_t r = 0; r < ragged.size(); r += 2) cases.push_back(ragged[r]);
  // Backward uses the stored O for D_i = dO_i . O_i (the API's semantics: O and LSE as written by Forward, which
  // context-parallel callers replace by the merged ones). With x5 inputs the softmax is so peaked that dS is a small
  // difference of large terms, and the FP16/BF16 rounding of O alone moves dQ/dK by ~1e-3 / ~1e-2 normwise, past the
  // 6e-4 / 5e-3 gates while the relative gate holds with 10x room. So x5 values meet backward in FP32 only; forward
  // tests them in every type.
  for (AttnCase &c : cases)
    if (c.dtype != FLASHATTN_DATA_FP32) c.valueScale = 1.0;
  return cases;
}

std::vector<DecodeCase> decodeCases() {
  std::vector<DecodeCase> cases;
  std::mt19937_64 rng(808);
  uint64_t seed = 8000;
  const int64_t decodeHeadDims[] = {32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256};
  int index = 0;
  for (size_t si = 0; si < kDecodeShapes.size(); ++si) {
    const SeqPair s = kDecodeShapes[si];
    const bool big = s.k >= 20000;
    // Small shapes: one case per dtype, each on every cache kind with every chunk count. Big shapes: one case whose
    // cache kinds take three chunk counts each (sampled: the oracle is float64 and the CI has two cores).
    for (int t = 0; t < (big ? 1 : 3); ++t, ++index) {
      DecodeCase c;
      c.dtype = kTypes[big ? si % 3 : size_t(t)];
      c.seqQ = s.q;
      c.seqK = s.k;
      c.pageSizes = kPageSizes;
      c.paddedPages = index % 2 == 1;
      c.chunks = kChunkCounts;
      if (big) {
        c.heads = 2;
        c.kvHeads = 1;
        c.headDim = c.headDimV = 64;
        c.batch = s.k > 100000 ? 1 : 2;
        if (c.batch == 2) c.kvLengths = {std::uniform_int_distribution<int64_t>(1, s.k)(rng), s.k};
        c.chunksPerCache = 3;
      } else {
        c.heads = kHeadConfigs[size_t(index) % 3][0];
        c.kvHeads = kHeadConfigs[size_t(index) % 3][1];
        c.headDim = c.headDimV = decodeHeadDims[size_t(index * 5) % 12];
        c.batch = 3;
        c.kvLengths = {s.k, 0, std::uniform_int_distribution<int64_t>(1, s.k)(rng)};
        if (s.q * s.k > 2000) {  // half the counts per cache kind, the other half in the next dtype's case
          c.chunksPerCache = 4;
          c.chunkRotation = t;
        }
      }
      switch (index % 5) {
        case 0: break;
        case 1: c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
        case 2:
          c.windowLeft = std::uniform_int_distribution<int64_t>(0, s.k / 2)(rng);
          c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
          break;
        case 3: c.softcap = 6.f; break;
        default: c.alibi = 1 + index % 2; break;
      }
      c.withLse = index % 4 != 3;
      c.seed = seed++;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<MergeCase> mergeCases() {
  std::vector<MergeCase> cases;
  uint64_t seed = 9000;
  const int64_t states[] = {1, 2, 3, 5, 17};
  int index = 0;
  for (int64_t s : states)
    for (int t = 0; t < 3; ++t, ++index) {
      MergeCase c;
      c.outType = kTypes[t];
      c.states = s;
      c.batch = 1 + index % 3;
      c.heads = 1 + index % 4;
      c.seqQ = 1 + (index * 7) % 13;
      c.headDimV = kHeadDims[size_t(index) % 12];
      c.stridedPartials = index % 2 == 1;
      c.emptyFraction = index % 3 == 0 ? 0.0 : index % 3 == 1 ? 0.3 : 0.9;
      c.withLse = index % 5 != 4;
      c.seed = seed++;
      cases.push_back(c);
    }
  return cases;
}

}  // namespace host_test
