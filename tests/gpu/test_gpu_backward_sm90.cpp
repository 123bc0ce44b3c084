// SPDX-License-Identifier: BSD-3-Clause
// The Hopper wgmma backward (src/cuda/kernels/backward_sm90) through the public API on an sm90 GPU: CheckSupport must
// name the wgmma kernel for the problems it serves, and flashAttnBackward's dQ, dK, dV (NaN-poisoned first) must pass
// both gates of docs/testing.md against the float64 oracle (factor 3 against the storage-rounded arithmetic, and the
// normwise bound; stress inputs bounded by the rounded variant's own normwise error, as test_gpu_backward.cpp does).
// Covers tails, every mask incl. bottom-right with seqQ > seqK (fully masked rows), windows, GQA (6,2) and (6,1),
// ragged batches, seqlensK, both dtypes, head dims 64, 128, and 192, 256 and 192/128 (their own kernel:
// splitGridCases), the zero-padded 48, 96, 120 (d64, d128), 144, 160 (d192), 240 (not padded: portable), and graph
// replay equal to eager; the d128 instance in both its loader forms (FLASHATTN_BACKWARD_LOADER) and, unmasked, in
// its 80-row form; softcap and ALiBi (per head and per sequence) on every kernel's transform form.
// FLASHATTN_TEST_SLICE=edge runs a few small shapes (for compute-sanitizer). The case setup (strided placement,
// descriptors, forward then backward) is backward_harness.hpp's, shared with test_gpu_backward.cpp. Deterministic mode
// on these kernels is covered by test_gpu_backward.cpp's determinism suite. A case whose instances this build left out
// (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS: the portable ones, and the wgmma one it is meant for) skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backward_harness.hpp"
#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;
using namespace fa_test::backward_harness;

namespace {

// ---- the grid --------------------------------------------------------------------------------------------------

// The edge slices' case for the transform kernels: softcap and ALiBi, GQA, a bottom-right mask with fully masked rows.
BwdCase transformEdgeCase() {
  BwdCase t;
  t.heads = 4;
  t.kvHeads = 2;
  t.sq = 90;
  t.sk = 70;
  t.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  t.softcap = 8.f;
  t.alibi = 1;
  return t;
}

std::vector<BwdCase> gridCases() {
  std::vector<BwdCase> cases;
  uint64_t seed = 9000;
  auto add = [&](BwdCase c, const std::string &name) {
    c.seed = seed++;
    c.name = std::string(typeName(c.dtype)) + "_" + name;
    cases.push_back(c);
  };
  if (edgeSliceOnly()) {
    BwdCase c;
    c.headDim = 64;
    c.heads = 2;
    c.kvHeads = 1;
    c.sq = 3;
    c.sk = 70;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(c, "d64_3x70_causalBR_mqa");
    c.sq = 70;
    c.sk = 3;
    add(c, "d64_70x3_causalBR_fully_masked_rows");
    c.dtype = FLASHATTN_DATA_FP16;
    c.sq = 300;
    c.sk = 150;
    c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(c, "d64_300x150_causalTL_mqa");  // d64's 128-row query blocks: two full, one partial, masked diagonal
    BwdCase r;
    r.dtype = FLASHATTN_DATA_FP16;
    r.headDim = 128;
    r.raggedQ = {1, 0, 40};
    r.raggedK = {0, 5, 130};
    r.sq = 40;
    r.sk = 130;
    add(r, "d128_ragged_zero_length");
    BwdCase wide;  // without a mask: the 80-row form where the producer warpgroup serves it (two blocks and 70 rows)
    wide.headDim = 128;
    wide.heads = 4;
    wide.kvHeads = 2;
    wide.sq = 230;
    wide.sk = 200;
    add(wide, "d128_230x200_gqa_unmasked");
    wide.raggedQ = {100, 0, 230};  // the ragged tails come by cp.async into the 80-row stages
    wide.raggedK = {90, 5, 200};
    add(wide, "d128_ragged_gqa_unmasked");
    BwdCase g;
    g.headDim = 128;
    g.sq = g.sk = 65;
    g.usedK = {40};
    g.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(g, "d128_65x65_seqlensK40_causalTL");
    g.headDim = 96;  // zero-padded on d128: loads, dK/dV stores and the dQ panels past column 96
    g.kvHeads = 1;
    g.heads = 2;
    add(g, "d96_65x65_seqlensK40_causalTL_mqa");
    g.headDim = 160;  // zero-padded on the split kernel's d192: each warpgroup's column shares cut short
    add(g, "d160_65x65_seqlensK40_causalTL_mqa");
    BwdCase t = transformEdgeCase();
    t.headDim = 128;
    add(t, "d128_90x70_gqa_softcap_alibi_causalBR");
    t.headDim = 64;
    t.dtype = FLASHATTN_DATA_FP16;
    add(t, "d64_90x70_gqa_softcap_alibi_causalBR");
    return cases;
  }
  const flashAttnDataType_t types[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16};
  for (flashAttnDataType_t t : types)
    for (int64_t d : {64, 128, 96}) {
      BwdCase c;
      c.dtype = t;
      c.headDim = d;
      c.heads = 6;
      c.kvHeads = 2;
      c.sq = 113;
      c.sk = 211;
      add(c, "d" + std::to_string(d) + "_113x211_gqa6_2");
      c.kvHeads = 1;
      c.sq = 128;
      c.sk = 217;
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      c.order = Order::BSHD;
      add(c, "d" + std::to_string(d) + "_128x217_mqa6_1_causalBR_bshd");
      BwdCase w;
      w.dtype = t;
      w.headDim = d;
      w.heads = w.kvHeads = 2;
      w.sq = 300;
      w.sk = 333;
      w.windowLeft = 70;
      w.windowRight = 5;
      add(w, "d" + std::to_string(d) + "_300x333_window70_5");
      BwdCase big = w;
      big.windowLeft = big.windowRight = -1;
      big.sq = big.sk = 1024;
      big.heads = big.kvHeads = 2;
      big.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
      add(big, "d" + std::to_string(d) + "_1024_causalTL");
      BwdCase stress = big;
      stress.sq = stress.sk = 384;
      stress.mask = FLASHATTN_MASK_NONE;
      stress.inputScale = 5.0;
      add(stress, "d" + std::to_string(d) + "_384_stress_x5");
    }
  struct Shape {
    int64_t q, k;
  };
  int rotate = 0;
  for (Shape s : {Shape{1, 1}, Shape{2, 1}, Shape{239, 1}, Shape{3, 513}, Shape{113, 203}, Shape{256, 512},
                  Shape{512, 256}, Shape{640, 128}})
    for (flashAttnMaskMode_t m :
         {FLASHATTN_MASK_NONE, FLASHATTN_MASK_CAUSAL_TOP_LEFT, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT}) {
      BwdCase c;
      c.dtype = types[rotate % 2];
      c.headDim = (rotate / 2) % 2 ? 128 : 64;
      c.heads = 3;
      c.kvHeads = rotate % 4 == 3 ? 1 : 3;
      c.sq = s.q;
      c.sk = s.k;
      c.mask = m;
      c.order = rotate % 3 ? Order::BSHD : Order::BHSD;
      ++rotate;
      add(c, "d" + std::to_string(c.headDim) + "_" + std::to_string(s.q) + "x" + std::to_string(s.k) + "_mask" +
                 std::to_string(int(m)));
    }
  BwdCase r;
  r.headDim = 128;
  r.heads = 4;
  r.kvHeads = 2;
  r.raggedQ = {300, 0, 257, 64};
  r.raggedK = {129, 400, 511, 1};
  r.sq = 300;
  r.sk = 511;
  r.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  add(r, "d128_ragged_gqa4_2_causalBR");
  r.dtype = FLASHATTN_DATA_FP16;
  r.headDim = 64;
  r.mask = FLASHATTN_MASK_NONE;
  add(r, "d64_ragged_gqa4_2");
  BwdCase u;
  u.headDim = 64;
  u.batch = 3;
  u.heads = 2;
  u.kvHeads = 2;
  u.sq = 150;
  u.sk = 300;
  u.usedK = {300, 17, 0};
  u.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  add(u, "d64_b3_150x300_seqlensK_causalBR");
  // The other zero-padded widths: 48 on d64 (a quarter of its columns zero), 120 on d128 (one 8-column chunk); on the
  // split kernel 144 and 160 on d192 (dK's 64-column share of warpgroup 0 keeps 16 and 32 columns; dQ by bulk reduce
  // into 64-column panels). 240 stays on the portable kernel (d256 adds dQ row-major, every column of the instance).
  for (int64_t d : {48, 120, 144, 160, 240}) {
    BwdCase z;
    z.headDim = d;
    z.heads = 6;
    z.kvHeads = 2;
    z.sq = 113;
    z.sk = 211;
    z.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(z, "d" + std::to_string(d) + "_113x211_gqa6_2_causalBR");
  }
  // Softcap and ALiBi on the d64/d128 kernel's transform form (full width at d96), in both types.
  for (flashAttnDataType_t t : types) {
    BwdCase sc;
    sc.dtype = t;
    sc.headDim = 64;
    sc.heads = 6;
    sc.kvHeads = 2;
    sc.sq = 200;
    sc.sk = 300;
    sc.softcap = 5.f;
    sc.inputScale = 3.0;
    sc.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(sc, "d64_200x300_gqa6_2_softcap5_x3_causalBR");
    BwdCase al;
    al.dtype = t;
    al.headDim = 128;
    al.batch = 2;
    al.heads = al.kvHeads = 2;
    al.sq = 300;
    al.sk = 333;
    al.alibi = 2;  // per sequence and head
    al.softcap = 8.f;
    al.windowLeft = 70;
    al.windowRight = 5;
    add(al, "d128_b2_300x333_alibi_per_batch_softcap8_window");
  }
  BwdCase ra;
  ra.headDim = 128;
  ra.heads = 4;
  ra.kvHeads = 2;
  ra.raggedQ = {200, 0, 129};
  ra.raggedK = {150, 7, 300};
  ra.sq = 200;
  ra.sk = 300;
  ra.alibi = 1;
  ra.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  add(ra, "d128_ragged_alibi_causalTL");
  BwdCase pad;
  pad.headDim = 96;  // zero-padded on d128: the transform kernel contracts over all 128 columns
  pad.heads = 6;
  pad.kvHeads = 2;
  pad.sq = 113;
  pad.sk = 211;
  pad.softcap = 30.f;
  add(pad, "d96_113x211_gqa6_2_softcap30");
  // Five 80-row blocks without a mask: the d128 80-row form (producer warpgroup) in both types, with x5 inputs.
  for (flashAttnDataType_t t : types) {
    BwdCase w;
    w.dtype = t;
    w.headDim = 128;
    w.heads = 6;
    w.kvHeads = 2;
    w.sq = w.sk = 400;
    w.inputScale = 5.0;
    add(w, "d128_400_gqa6_2_stress_x5");
  }
  return cases;
}

// Head dims from 192 run their own kernel (64 keys per CTA; S^T / dP^T split by query columns, dK, dV, dQ by output
// columns across the two warpgroups: halves at 256, 128 + 64 at 192, with V/O's share apart at 192/128), so this grid
// aims at what that layout can get wrong: key tails inside a 64-key block, query tails inside a 64-row block, the
// masks, GQA, ragged and seqlensK again.
std::vector<BwdCase> splitGridCases(int64_t headDim, int64_t headDimV) {
  std::vector<BwdCase> cases;
  uint64_t seed = uint64_t(100 * headDim + headDimV);
  const std::string dims = "_d" + std::to_string(headDim) + (headDimV ? "v" + std::to_string(headDimV) : "") + "_";
  auto add = [&](BwdCase c, const std::string &name) {
    c.seed = seed++;
    c.headDim = headDim;
    c.headDimV = headDimV;
    c.name = std::string(typeName(c.dtype)) + dims + name;
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
    add(transformEdgeCase(), "90x70_gqa_softcap_alibi_causalBR");
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
    // The transform kernel: softcap on x3 inputs (logits past the cap) with GQA and fully masked rows; ALiBi per
    // sequence and head under a window, with softcap.
    BwdCase sc;
    sc.dtype = t;
    sc.heads = 6;
    sc.kvHeads = 2;
    sc.sq = 200;
    sc.sk = 150;
    sc.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    sc.softcap = 5.f;
    sc.inputScale = 3.0;
    add(sc, "200x150_gqa6_2_softcap5_x3_causalBR");
    BwdCase al;
    al.dtype = t;
    al.batch = 2;
    al.heads = al.kvHeads = 2;
    al.sq = 300;
    al.sk = 333;
    al.windowLeft = 70;
    al.windowRight = 5;
    al.alibi = 2;  // per sequence and head
    al.softcap = 8.f;
    add(al, "b2_300x333_alibi_per_batch_softcap8_window");
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

std::vector<BwdCase> allGridCases() {
  std::vector<BwdCase> cases = gridCases();
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{256, 0}, {192, 0}, {192, 128}}) {
    const std::vector<BwdCase> wide = splitGridCases(d, dv);
    cases.insert(cases.end(), wide.begin(), wide.end());
  }
  return cases;
}

class BackwardSm90Grid : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardSm90Grid, WgmmaServesAndMatchesFloat64Oracle) {
  if (!deviceIsSm90()) GTEST_SKIP() << "the wgmma backward runs on sm90 only";
  const BwdCase &c = GetParam();
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  const std::string described = describeBackward(h, *s);
  // Instances 64, 128, 192, 256 and 192/128; equal head dims from three quarters of an instance zero-padded on it.
  const int64_t d = c.headDim;
  const bool padded = c.headDimV == 0 && d % 8 == 0 &&
                      ((d >= 48 && d < 64) || (d >= 96 && d < 128) || (d >= 144 && d < 192));
  const char *loader = std::getenv("FLASHATTN_BACKWARD_LOADER");
  const bool pinnedCpAsync = loader != nullptr && std::string(loader) == "cp.async";
  // Softcap and ALiBi: every kernel's transform form, unordered; at d128 (and 96-120 on it) the producer form only.
  const bool transform = c.softcap > 0.f || c.alibi != 0;
  const bool transformServed = !c.deterministic && !(c.headDimV == 0 && d > 64 && d <= 128 && pinnedCpAsync);
  const bool served = (c.headDimV == 0 ? d == 64 || d == 128 || d == 192 || d == 256 || padded
                                       : d == 192 && c.headDimV == 128) &&
                      (!transform || transformServed);
  // The wgmma instance it is meant for: its own head dims, or the next one up where padded.
  const int64_t instance = c.headDimV != 0 || !padded ? d : d < 64 ? 64 : d < 128 ? 128 : 192;
  if (served) {
    SKIP_UNLESS_BUILT(Family::BackwardSm90, c.dtype, instance, c.headDimV);
  }
  if (served)
    EXPECT_NE(described.find("cuda.bwd.wgmma"), std::string::npos) << c.name << ": " << described;
  else
    EXPECT_EQ(described.find("cuda.bwd.wgmma"), std::string::npos) << c.name << ": " << described;
  // 96 keys a CTA at 192/128 without a logit transform, in the producer form, unless FLASHATTN_BACKWARD_TILE pins the
  // narrow tile (this suite's 192/128 cases run under both: tests/gpu/CMakeLists.txt).
  const char *tile = std::getenv("FLASHATTN_BACKWARD_TILE");
  const bool pinnedNarrow = tile != nullptr && std::string(tile) == "narrow";
  const bool wideKeys = served && d == 192 && c.headDimV == 128 && !transform && !pinnedCpAsync && !pinnedNarrow;
  if (served && c.headDim > 128) {
    EXPECT_NE(described.find(wideKeys ? "tile 64x96" : "tile 64x64"), std::string::npos) << c.name << ": " << described;
  }
  if (served && padded) EXPECT_NE(described.find("zero-padded"), std::string::npos) << c.name << ": " << described;
  // d96 takes the d128 kernel whose S^T and dP^T contract over 96 columns only (trimmedQKWidth).
  EXPECT_EQ(described.find("S^T and dP^T over 96 columns") != std::string::npos, served && d == 96 && !transform)
      << c.name << ": " << described;
  // The producer-warpgroup form (hasTmaForm: the d128 instance and 96-120 on it; the 192 one, 144-184 on it and
  // 192/128, and the 256 one; deterministic or not) serves dense and ragged layouts (every served case's strides
  // encode), unless FLASHATTN_BACKWARD_LOADER pins the cp.async form (this suite runs under both:
  // tests/gpu/CMakeLists.txt).
  const bool on128 = c.headDimV == 0 && d > 64 && d <= 128;
  const bool on192 = (c.headDimV == 0 && d >= 144 && d <= 192) || (d == 192 && c.headDimV == 128);
  const bool on256 = c.headDimV == 0 && d == 256;
  const bool producerForm = served && !pinnedCpAsync && (on128 || on192 || on256);
  EXPECT_EQ(described.find("producer warpgroup") != std::string::npos, producerForm) << c.name << ": " << described;
  runAndCheckAgainstOracle(h, c, *s);
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackwardSm90Grid, ::testing::ValuesIn(allGridCases()), caseName);

// Graph capture: the wgmma path replayed from a graph writes the same bytes as eager up to atomic order: dK/dV are
// compared bitwise, dQ (whose additions are unordered) by max|replay - eager| <= 1e-2 * max|eager|, after every eager
// gradient element is checked to be finite.
TEST(BackwardSm90, GraphReplayMatchesEager) {
  if (!deviceIsSm90()) GTEST_SKIP() << "the wgmma backward runs on sm90 only";
  int checked = 0;
  for (auto [headDim, headDimV] : {std::pair<int64_t, int64_t>{128, 0}, {256, 0}, {192, 128}}) {
    BwdCase c;
    c.name = "bf16_d" + std::to_string(headDim) + (headDimV ? "v" + std::to_string(headDimV) : "") + "_b2_gqa4_2_causalBR";
    c.headDim = headDim;
    c.headDimV = headDimV;
    c.heads = 4;
    c.kvHeads = 2;
    c.batch = 2;
    c.sq = edgeSliceOnly() ? 70 : 700;
    c.sk = edgeSliceOnly() ? 90 : 900;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    if (const std::string missing = notBuiltFor(c); !missing.empty()) {
      leaveOutPart(c.name + ": " + missing);
      continue;
    }
    if (!partBuilt(Family::BackwardSm90, c.dtype, headDim, headDimV)) continue;
    ++checked;
    SCOPED_TRACE(c.name);
    expectGraphReplayMatchesEager(c, "cuda.bwd.wgmma");
  }
  if (checked == 0) GTEST_SKIP() << "none of its wgmma backward instances is in this build";
}

// Problems outside the family's scope stay on the portable kernel (chooser names it), on every device; on sm90 the
// description also says why the wgmma kernel was not used.
TEST(BackwardSm90, OutOfScopeRoutesToPortable) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  // False where the case is left out: its portable instances are not in this build. A reason given at the wgmma
  // instance of head dim `wgmmaInstance` (0: any of the storage type) is checked where that instance is built.
  auto expectPortable = [&](const BwdCase &c, const std::string &reason, int64_t wgmmaInstance) {
    if (const std::string missing = notBuiltFor(c); !missing.empty()) {
      leaveOutPart(reason + ": " + missing);
      return false;
    }
    auto s = build(c);
    const std::string described = describeBackward(h, *s);
    EXPECT_EQ(described.find("cuda.bwd.wgmma"), std::string::npos) << described;
    if (deviceIsSm90() && (wgmmaInstance == 0 ? builtDtype(Family::BackwardSm90, c.dtype)
                                              : partBuilt(Family::BackwardSm90, c.dtype, wgmmaInstance))) {
      EXPECT_NE(described.find("wgmma kernel not used: " + reason), std::string::npos) << described;
    }
    return true;
  };
  BwdCase c;
  c.headDim = 128;
  c.sq = c.sk = 64;
  c.deterministic = true;
  c.softcap = 30.f;
  expectPortable(c, "softcap in deterministic mode", 128);
  c.softcap = 0.f;
  c.alibi = 1;
  expectPortable(c, "ALiBi in deterministic mode", 128);
  c.alibi = 0;
  c.deterministic = false;
  c.headDim = 80;  // zero columns would be more than a quarter of the d128 kernel's products
  expectPortable(c, "headDim 80", 0);
  c.headDim = 192;
  c.headDimV = 64;
  expectPortable(c, "headDim 192 / headDimV 64", 0);
  c.headDimV = 0;
  // The portable kernel's d256 result for a problem the d256 wgmma kernel refuses is still checked.
  c.headDim = 256;
  c.softcap = 30.f;
  c.deterministic = true;
  if (!expectPortable(c, "softcap in deterministic mode", 256)) return;
  if (edgeSliceOnly()) return;
  c.name = "bf16_d256_97x130_softcap_causalBR_det";
  c.sq = 97;
  c.sk = 130;
  c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  auto s = build(c);
  runAndCheckAgainstOracle(h, c, *s);
}

}  // namespace
