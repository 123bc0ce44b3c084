// The Hopper wgmma backward at head dim 256 (backward_sm90_d256_kernel.cuh) through the public API on an sm90 GPU:
// CheckSupport must name the wgmma kernel for the d256 problems it serves, and flashAttnBackward's dQ, dK, dV
// (NaN-poisoned first) must pass both gates of TESTING.md against the float64 oracle (backward_harness.hpp).
// The d256 kernel owns 64 keys per CTA and splits S^T / dP^T by query columns and dK, dV, dQ by output columns across
// its two warpgroups, so the grid aims at what that layout can get wrong: key tails inside a 64-key block, query
// tails inside a 64-row block, every mask incl. bottom-right with seqQ > seqK (fully masked rows), windows, GQA (6,2)
// and (6,1), ragged batches with empty sequences, seqlensK, both dtypes, stress inputs, and graph replay.
// FLASHATTN_TEST_SLICE=edge runs a few small shapes (for compute-sanitizer).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backward_harness.hpp"
#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;
using namespace fa_test::backward_harness;

namespace {

std::vector<BwdCase> gridCases() {
  std::vector<BwdCase> cases;
  uint64_t seed = 25600;
  auto add = [&](BwdCase c, const std::string &name) {
    c.seed = seed++;
    c.headDim = 256;
    c.name = std::string(typeName(c.dtype)) + "_d256_" + name;
    cases.push_back(c);
  };
  if (edgeSliceOnly()) {
    BwdCase c;
    c.heads = 2;
    c.kvHeads = 1;
    c.sq = 3;
    c.sk = 70;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(c, "3x70_causalBR_mqa");
    c.sq = 70;
    c.sk = 3;
    add(c, "70x3_causalBR_fully_masked_rows");
    BwdCase r;
    r.dtype = FLASHATTN_DATA_FP16;
    r.raggedQ = {1, 0, 40};
    r.raggedK = {0, 5, 130};
    r.sq = 40;
    r.sk = 130;
    add(r, "ragged_zero_length");
    BwdCase g;
    g.sq = g.sk = 65;
    g.usedK = {40};
    g.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(g, "65x65_seqlensK40_causalTL");
    return cases;
  }
  const flashAttnDataType_t types[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16};
  for (flashAttnDataType_t t : types) {
    BwdCase c;
    c.dtype = t;
    c.heads = 6;
    c.kvHeads = 2;
    c.sq = 113;
    c.sk = 211;
    add(c, "113x211_gqa6_2");
    c.kvHeads = 1;
    c.sq = 128;
    c.sk = 217;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    c.order = Order::BSHD;
    add(c, "128x217_mqa6_1_causalBR_bshd");
    BwdCase w;
    w.dtype = t;
    w.heads = w.kvHeads = 2;
    w.sq = 300;
    w.sk = 333;
    w.windowLeft = 70;
    w.windowRight = 5;
    add(w, "300x333_window70_5");
    BwdCase big = w;
    big.windowLeft = big.windowRight = -1;
    big.sq = big.sk = 1024;
    big.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(big, "1024_causalTL");
    BwdCase stress = big;
    stress.sq = stress.sk = 384;
    stress.mask = FLASHATTN_MASK_NONE;
    stress.inputScale = 5.0;
    add(stress, "384_stress_x5");
  }
  struct Shape {
    int64_t q, k;
  };
  int rotate = 0;
  for (Shape s : {Shape{1, 1}, Shape{2, 1}, Shape{239, 1}, Shape{3, 513}, Shape{113, 203}, Shape{65, 63},
                  Shape{256, 512}, Shape{512, 256}, Shape{640, 128}})
    for (flashAttnMaskMode_t m :
         {FLASHATTN_MASK_NONE, FLASHATTN_MASK_CAUSAL_TOP_LEFT, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT}) {
      BwdCase c;
      c.dtype = types[rotate % 2];
      c.heads = 3;
      c.kvHeads = rotate % 4 == 3 ? 1 : 3;
      c.sq = s.q;
      c.sk = s.k;
      c.mask = m;
      c.order = rotate % 3 ? Order::BSHD : Order::BHSD;
      ++rotate;
      add(c, std::to_string(s.q) + "x" + std::to_string(s.k) + "_mask" + std::to_string(int(m)));
    }
  BwdCase r;
  r.heads = 4;
  r.kvHeads = 2;
  r.raggedQ = {300, 0, 257, 64};
  r.raggedK = {129, 400, 511, 1};
  r.sq = 300;
  r.sk = 511;
  r.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  add(r, "ragged_gqa4_2_causalBR");
  r.dtype = FLASHATTN_DATA_FP16;
  r.mask = FLASHATTN_MASK_NONE;
  add(r, "ragged_gqa4_2");
  BwdCase u;
  u.batch = 3;
  u.heads = 2;
  u.kvHeads = 2;
  u.sq = 150;
  u.sk = 300;
  u.usedK = {300, 17, 0};
  u.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  add(u, "b3_150x300_seqlensK_causalBR");
  return cases;
}

class BackwardSm90D256Grid : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardSm90D256Grid, WgmmaServesAndMatchesFloat64Oracle) {
  if (!deviceIsSm90()) GTEST_SKIP() << "the wgmma backward runs on sm90 only";
  const BwdCase &c = GetParam();
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  const std::string described = describeBackward(h, *s);
  EXPECT_NE(described.find("cuda.bwd.wgmma"), std::string::npos) << c.name << ": " << described;
  EXPECT_NE(described.find("tile 64x64"), std::string::npos) << c.name << ": " << described;
  runAndCheckAgainstOracle(h, c, *s);
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackwardSm90D256Grid, ::testing::ValuesIn(gridCases()), caseName);

// Graph replay writes the same dK/dV bytes as eager (each CTA owns its keys) and dQ up to atomic order.
TEST(BackwardSm90D256, GraphReplayMatchesEager) {
  if (!deviceIsSm90()) GTEST_SKIP() << "the wgmma backward runs on sm90 only";
  BwdCase c;
  c.name = "bf16_d256_b2_gqa4_2_causalBR";
  c.headDim = 256;
  c.heads = 4;
  c.kvHeads = 2;
  c.batch = 2;
  c.sq = edgeSliceOnly() ? 70 : 700;
  c.sk = edgeSliceOnly() ? 90 : 900;
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  expectGraphReplayMatchesEager(c, "cuda.bwd.wgmma");
}

// d256 problems the kernel does not serve stay on the portable kernel, with correct results.
TEST(BackwardSm90D256, OutOfScopeRoutesToPortable) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  BwdCase c;
  c.name = "bf16_d256_out_of_scope";
  c.headDim = 256;
  c.sq = c.sk = 64;
  c.softcap = 30.f;
  auto cap = build(c);
  EXPECT_EQ(describeBackward(h, *cap).find("cuda.bwd.wgmma"), std::string::npos) << describeBackward(h, *cap);
  if (edgeSliceOnly()) return;
  c.sq = 97;
  c.sk = 130;
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  auto cap2 = build(c);
  runAndCheckAgainstOracle(h, c, *cap2);
}

}  // namespace
