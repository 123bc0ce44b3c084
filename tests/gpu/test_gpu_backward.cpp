// SPDX-License-Identifier: BSD-3-Clause
// Backward on the CUDA backend through the public API: flashAttnForward writes O and LSE, flashAttnBackward writes
// dQ, dK, dV (poisoned with NaN first), compared with the float64 oracle's backward under both gates of docs/testing.md
// (factor 3 against the same arithmetic rounded to the storage type, and the normwise bound). Plus determinism (20
// runs bitwise equal), graph-capture replay equal to eager, and what the planner refuses. A case whose instances this
// build left out (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS) skips (backward_harness.hpp notBuiltFor).
//
// FLASHATTN_TEST_SLICE=edge runs only a few small shapes (for compute-sanitizer); otherwise the sampled grid runs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
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

// ---- the grid --------------------------------------------------------------------------------------------------

std::vector<BwdCase> gridCases() {
  std::vector<BwdCase> cases;
  uint64_t seed = 1000;
  auto add = [&](BwdCase c, const std::string &name) {
    c.seed = seed++;
    c.name = std::string(typeName(c.dtype)) + "_" + name;
    cases.push_back(c);
  };
  const flashAttnDataType_t types[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16, FLASHATTN_DATA_FP32};

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
    c.deterministic = true;
    add(c, "d64_70x3_causalBR_fully_masked_rows_det");
    c.dtype = FLASHATTN_DATA_FP16;
    c.headDim = 128;
    c.raggedQ = {1, 0, 40};
    c.raggedK = {0, 5, 130};
    c.sq = 40;
    c.sk = 130;
    c.mask = FLASHATTN_MASK_NONE;
    add(c, "d128_ragged_zero_length_det");
    BwdCase f;
    f.dtype = FLASHATTN_DATA_FP32;
    f.headDim = 96;
    f.heads = f.kvHeads = 2;
    f.sq = 33;
    f.sk = 17;
    f.windowLeft = 4;
    f.windowRight = 2;
    f.deterministic = true;
    add(f, "d96_33x17_window_det");
    BwdCase g;
    g.headDim = 256;
    g.sq = g.sk = 65;
    g.usedK = {40};
    g.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(g, "d256_65x65_seqlensK40_causalTL");
    BwdCase m;  // MLA-style head dims with tails and fully masked rows
    m.headDim = 192;
    m.headDimV = 128;
    m.heads = 4;
    m.kvHeads = 2;
    m.sq = 70;
    m.sk = 45;
    m.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(m, "d192_v128_70x45_causalBR_gqa");
    BwdCase o;  // a head dim ending inside a 16-byte vector, rows padded to whole vectors: partial copies and stores
    o.headDim = 59;
    o.heads = 2;
    o.kvHeads = 1;
    o.sq = 33;
    o.sk = 70;
    o.order = Order::BSHD;
    o.rowPad = o.dOPad = 5;
    add(o, "d59_33x70_rows_padded_mqa");
    return cases;
  }

  // Every instance head dim x dtype, GQA (6,2) and MQA (6,1), with and without a mask, deterministic or not.
  for (flashAttnDataType_t t : types)
    for (int64_t d : {64, 96, 128, 192, 256}) {
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
      c.deterministic = true;
      c.order = Order::BSHD;
      add(c, "d" + std::to_string(d) + "_128x217_mqa6_1_causalBR_bshd_det");
    }
  // Head dims padded to the next instance.
  for (int64_t d : {32, 40, 80, 160, 224}) {
    BwdCase c;
    c.dtype = d == 40 ? FLASHATTN_DATA_FP32 : d == 80 ? FLASHATTN_DATA_FP16 : FLASHATTN_DATA_BF16;
    c.headDim = d;
    c.heads = 2;
    c.kvHeads = 2;
    c.sq = 113;
    c.sk = 203;
    c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(c, "d" + std::to_string(d) + "_padded_113x203_causalTL");
  }
  // The shapes of the test grid (docs/testing.md) x masks (bottom-right with seqQ > seqK gives fully masked rows).
  struct Shape {
    int64_t q, k;
  };
  int rotate = 0;
  for (Shape s : {Shape{1, 1}, Shape{1, 3}, Shape{2, 1}, Shape{239, 1}, Shape{799, 3}, Shape{3, 513}, Shape{113, 203},
                  Shape{128, 217}, Shape{113, 211}, Shape{108, 256}, Shape{256, 512}, Shape{512, 256}, Shape{640, 128}})
    for (flashAttnMaskMode_t m : {FLASHATTN_MASK_NONE, FLASHATTN_MASK_CAUSAL_TOP_LEFT, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT}) {
      BwdCase c;
      c.dtype = types[rotate % 3];
      c.headDim = rotate % 2 ? 128 : 64;
      c.heads = 3;
      c.kvHeads = rotate % 4 == 3 ? 1 : 3;
      c.sq = s.q;
      c.sk = s.k;
      c.mask = m;
      c.order = rotate % 2 ? Order::BSHD : Order::BHSD;
      c.deterministic = rotate % 5 == 0;
      ++rotate;
      add(c, "d" + std::to_string(c.headDim) + "_" + std::to_string(s.q) + "x" + std::to_string(s.k) + "_mask" +
                 std::to_string(int(m)));
    }
  {
    BwdCase c;
    c.headDim = 128;
    c.heads = c.kvHeads = 1;
    c.sq = 1023;
    c.sk = 1024;
    c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(c, "d128_1023x1024_causalTL");
    c.dtype = FLASHATTN_DATA_FP16;
    c.sq = 1024;
    c.sk = 1023;
    c.mask = FLASHATTN_MASK_NONE;
    c.deterministic = true;
    add(c, "d128_1024x1023_det");
    c.dtype = FLASHATTN_DATA_BF16;
    c.headDim = 64;
    c.sq = c.sk = 2048;
    c.deterministic = false;
    add(c, "d64_2048x2048");
    c.sq = c.sk = 4224;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(c, "d64_4224x4224_causal");
  }
  // Random windows, softcap, ALiBi (per head and per batch), inputs x5.
  {
    std::mt19937 rng(7);
    for (int i = 0; i < 4; ++i) {
      BwdCase c;
      c.dtype = types[i % 3];
      c.headDim = i % 2 ? 96 : 128;
      c.heads = 4;
      c.kvHeads = 2;
      c.sq = 200 + int64_t(rng() % 300);
      c.sk = 200 + int64_t(rng() % 300);
      c.windowLeft = rng() % 4 == 0 ? -1 : int64_t(rng() % 120);
      c.windowRight = rng() % 4 == 0 ? -1 : int64_t(rng() % 60);
      c.mask = i == 3 ? FLASHATTN_MASK_CAUSAL_TOP_LEFT : FLASHATTN_MASK_NONE;
      c.deterministic = i % 2 == 1;
      add(c, "d" + std::to_string(c.headDim) + "_" + std::to_string(c.sq) + "x" + std::to_string(c.sk) + "_window" +
                 std::to_string(c.windowLeft) + "_" + std::to_string(c.windowRight));
    }
    BwdCase s;
    s.headDim = 64;
    s.heads = s.kvHeads = 2;
    s.sq = 256;
    s.sk = 512;
    s.softcap = 5.f;
    s.inputScale = 3.0;
    add(s, "d64_256x512_softcap5_inputs_x3");
    s.softcap = 0.f;
    s.inputScale = 1.0;
    s.alibi = 1;
    s.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    s.dtype = FLASHATTN_DATA_FP16;
    add(s, "d64_256x512_alibi_causalBR");
    s.alibi = 2;
    s.batch = 2;
    s.softcap = 8.f;
    s.windowLeft = 64;
    s.windowRight = 16;
    s.headDim = 128;
    s.dtype = FLASHATTN_DATA_FP32;
    add(s, "d128_b2_256x512_alibi_per_batch_softcap_window");
    s.dtype = FLASHATTN_DATA_BF16;
    s.headDim = 192;
    s.deterministic = true;
    add(s, "d192_b2_256x512_alibi_per_batch_softcap_window_det");
    BwdCase x;
    x.headDim = 64;
    x.heads = x.kvHeads = 2;
    x.sq = x.sk = 256;
    x.inputScale = 5.0;
    x.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    add(x, "d64_256x256_causal_inputs_x5");
    x.dtype = FLASHATTN_DATA_FP16;
    x.headDim = 128;
    x.mask = FLASHATTN_MASK_NONE;
    add(x, "d128_256x256_inputs_x5");
  }
  // Attention sinks: the forward (O, LSE) and dSinks against the oracle beside dQ, dK, dV; rows that see no key
  // (bottom-right causal with seqQ > seqK: O = 0, LSE = the sink), GQA, ragged.
  {
    int i = 0;
    for (const flashAttnDataType_t t : types)
      for (const int64_t dim : {64, 128}) {
        BwdCase c;
        c.dtype = t;
        c.headDim = dim;
        c.heads = 8;
        c.kvHeads = 2;
        c.batch = 2;
        c.sq = 300;
        c.sk = i % 2 ? 220 : 513;
        c.mask = i % 3 == 0 ? FLASHATTN_MASK_NONE : FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        c.sinks = true;
        c.seed = 40 + uint64_t(i++);
        add(c, "sinks_d" + std::to_string(dim) + "_b2_gqa4_300x" + std::to_string(c.sk) +
                   (c.mask == FLASHATTN_MASK_NONE ? "" : "_causalBR"));
      }
    BwdCase r;
    r.dtype = FLASHATTN_DATA_BF16;
    r.headDim = 128;
    r.heads = 4;
    r.kvHeads = 4;
    r.raggedQ = {37, 0, 190};
    r.raggedK = {100, 3, 190};
    r.sq = 190;
    r.sk = 190;
    r.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    r.sinks = true;
    r.deterministic = true;
    add(r, "sinks_d128_ragged_causalBR_det");
  }
  // Q/K and V/O head dims apart (DeepSeek-style 192/128, a narrower and a wider V), with GQA, masks, ragged batches
  // and the deterministic mode.
  {
    int i = 0;
    const std::pair<int64_t, int64_t> dims[] = {{192, 128}, {64, 128}, {128, 64}, {40, 24}};
    for (const flashAttnDataType_t t : types)
      for (const auto &d : dims) {
        BwdCase c;
        c.dtype = t;
        c.headDim = d.first;
        c.headDimV = d.second;
        c.heads = 8;
        c.kvHeads = i % 2 ? 4 : 8;
        c.batch = 2;
        c.sq = 257;
        c.sk = i % 3 == 0 ? 257 : 513;
        c.mask = i % 2 ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : FLASHATTN_MASK_NONE;
        c.deterministic = i % 4 == 3;
        c.order = i % 2 ? Order::BSHD : Order::BHSD;
        c.seed = 80 + uint64_t(i++);
        add(c, "d" + std::to_string(d.first) + "_v" + std::to_string(d.second) + "_b2_h8_" +
                   std::to_string(c.kvHeads) + "_257x" + std::to_string(c.sk) +
                   (c.mask == FLASHATTN_MASK_NONE ? "" : "_causalBR") + (c.deterministic ? "_det" : ""));
      }
    BwdCase r;
    r.dtype = FLASHATTN_DATA_BF16;
    r.headDim = 192;
    r.headDimV = 128;
    r.heads = 4;
    r.kvHeads = 1;
    r.raggedQ = {37, 0, 190};
    r.raggedK = {100, 3, 190};
    r.sq = 190;
    r.sk = 190;
    r.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(r, "d192_v128_ragged_causalBR_mqa");
  }
  // Head dims that are not multiples of 8: packed rows (strides that are not whole 16-byte vectors: staged), and rows
  // padded to whole vectors (the kernels copy a row's last vector in part, zero-filling the rest, and store it in part).
  {
    int i = 0;
    for (const flashAttnDataType_t t : types)
      for (const bool padded : {false, true}) {
        BwdCase c;
        c.dtype = t;
        c.headDim = t == FLASHATTN_DATA_FP32 ? 37 : 59;
        c.heads = 4;
        c.kvHeads = 2;
        c.batch = 2;
        c.sq = 130;
        c.sk = 257;
        c.order = Order::BSHD;
        if (padded) {
          c.rowPad = c.dOPad = t == FLASHATTN_DATA_FP32 ? 3 : 5;  // rows of 40 floats, 64 halves
        } else {
          c.headDimV = t == FLASHATTN_DATA_FP32 ? 21 : 37;
          c.rowPad = 0;
          c.dOPad = 0;
        }
        c.mask = padded ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : FLASHATTN_MASK_NONE;
        c.deterministic = i % 3 == 2;
        c.seed = 120 + uint64_t(i++);
        add(c, "d" + std::to_string(c.headDim) + "_v" + std::to_string(c.dimV()) + (padded ? "_rows_padded" : "_packed") +
                   (c.deterministic ? "_det" : ""));
      }
  }
  // Strides: BSHD with padded rows, dO in the other order with other padding.
  {
    BwdCase c;
    c.headDim = 128;
    c.heads = 6;
    c.kvHeads = 1;
    c.batch = 2;
    c.sq = 200;
    c.sk = 300;
    c.order = Order::BSHD;
    c.rowPad = 8;
    c.dOPad = 24;
    add(c, "d128_b2_200x300_mqa_bshd_pad8_dO_bhsd_pad24");
    c.dtype = FLASHATTN_DATA_FP32;
    c.headDim = 64;
    add(c, "d64_b2_200x300_mqa_bshd_pad8_dO_bhsd_pad24");
  }
  // Ragged batches with zero-length sequences; padded caches (per-sequence KV lengths).
  {
    BwdCase c;
    c.headDim = 64;
    c.heads = 4;
    c.kvHeads = 2;
    c.raggedQ = {5, 0, 130, 64, 77};
    c.raggedK = {7, 33, 0, 200, 77};
    c.sq = 130;
    c.sk = 200;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    add(c, "d64_ragged_zero_lengths_causalBR");
    c.mask = FLASHATTN_MASK_NONE;
    c.dtype = FLASHATTN_DATA_FP16;
    c.headDim = 128;
    c.deterministic = true;
    add(c, "d128_ragged_zero_lengths_det");
    c.dtype = FLASHATTN_DATA_FP32;
    c.headDim = 64;
    c.deterministic = false;
    c.windowLeft = 20;
    c.windowRight = 3;
    add(c, "d64_ragged_window");
    BwdCase u;
    u.headDim = 128;
    u.heads = u.kvHeads = 2;
    u.batch = 3;
    u.sq = 150;
    u.sk = 300;
    u.usedK = {300, 17, 0};
    add(u, "d128_b3_150x300_seqlensK_300_17_0");
    u.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    u.dtype = FLASHATTN_DATA_FP16;
    u.headDim = 256;
    add(u, "d256_b3_150x300_seqlensK_causalBR");
  }
  return cases;
}

class BackwardGrid : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardGrid, MatchesFloat64Oracle) {
  const BwdCase &c = GetParam();
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  // The oracle's two backward passes run beside the GPU work.
  runAndCheckAgainstOracle(h, c, *s);
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackwardGrid, ::testing::ValuesIn(gridCases()), caseName);

// ---- determinism and graphs --------------------------------------------------------------------------------------

std::vector<BwdCase> determinismCases() {
  BwdCase a;
  a.name = "bf16_d128_b2_gqa4_2_1000x1100";
  a.headDim = 128;
  a.heads = 4;
  a.kvHeads = 2;
  a.batch = 2;
  a.sq = 1000;
  a.sk = 1100;
  a.deterministic = true;
  BwdCase b = a;
  b.name = "fp16_d64_b2_1000x1100_causalBR";
  b.dtype = FLASHATTN_DATA_FP16;
  b.headDim = 64;
  b.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  BwdCase f = a;
  f.name = "fp32_d128_300x400_window";
  f.dtype = FLASHATTN_DATA_FP32;
  f.sq = 300;
  f.sk = 400;
  f.windowLeft = 50;
  f.windowRight = 10;
  BwdCase f192 = f;  // the FP32 kernel in the descending turn order (causal, d192 without GQA)
  f192.name = "fp32_d192_h2_300x300_causalTL";
  f192.headDim = 192;
  f192.heads = f192.kvHeads = 2;
  f192.sq = f192.sk = 300;
  f192.windowLeft = f192.windowRight = -1;
  f192.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  BwdCase r = a;
  r.name = "bf16_d256_ragged";
  r.headDim = 256;
  r.raggedQ = {300, 0, 257};
  r.raggedK = {129, 400, 511};
  r.sq = 300;
  r.sk = 511;
  // On sm90 the FP16/BF16 cases at d64/d128/d256 run on the wgmma kernels (ordered by key block there too): causal
  // masks with GQA at every head dim, so that key blocks wait on predecessors that see fewer or more query blocks.
  BwdCase c = a;
  c.name = "fp16_d128_gqa6_2_700x700_causalTL";
  c.dtype = FLASHATTN_DATA_FP16;
  c.batch = 1;
  c.heads = 6;
  c.kvHeads = 2;
  c.sq = c.sk = 700;
  c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  BwdCase d = c;
  d.name = "bf16_d64_mqa4_1_600x900_causalBR_sinks";
  d.sinks = true;  // dSinks is bitwise too
  d.dtype = FLASHATTN_DATA_BF16;
  d.headDim = 64;
  d.heads = 4;
  d.kvHeads = 1;
  d.sq = 600;
  d.sk = 900;
  d.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  BwdCase e = c;
  e.name = "fp16_d256_gqa4_2_b2_400x450_causalTL";
  e.headDim = 256;
  e.batch = 2;
  e.heads = 4;
  e.sq = 400;
  e.sk = 450;
  BwdCase r192 = r;  // the split kernel's ragged tails at 192, where deterministic mode's dQ warp adds
  r192.name = "fp16_d192_ragged";
  r192.dtype = FLASHATTN_DATA_FP16;
  r192.headDim = 192;
  // Descending turns (causal or a right window, no left window, d192 without GQA): ragged causal lengths,
  // per-sequence KV lengths, a right window alone, where the key blocks that see a query block end at different
  // places.
  BwdCase rc = r192;
  rc.name = "bf16_d192_ragged_causalBR";
  rc.dtype = FLASHATTN_DATA_BF16;
  rc.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  rc.kvHeads = rc.heads;
  BwdCase rw = a;
  rw.name = "bf16_d192_b2_h4_500x700_right_window_seqlensK";
  rw.headDim = 192;
  rw.kvHeads = 4;
  rw.sq = 500;
  rw.sk = 700;
  rw.windowRight = 150;
  rw.usedK = {700, 333};
  BwdCase g = e;  // the split kernel's uneven shares (Q/K 192: 128 + 64 columns; V/O 128: halves)
  g.name = "bf16_d192v128_gqa4_2_b2_400x450_causalTL";
  g.dtype = FLASHATTN_DATA_BF16;
  g.headDim = 192;
  g.headDimV = 128;
  if (edgeSliceOnly()) {
    // Several key blocks per KV head at every head dim, so the sanitizers see the turn waits and hand-overs.
    a.sq = 70;
    a.sk = 300;
    a.name += "_edge";
    d.sq = 150;
    d.sk = 300;
    d.name = "bf16_d64_mqa4_1_150x300_causalBR_sinks_edge";
    e.batch = 1;
    e.sq = 70;
    e.sk = 130;
    e.name = "fp16_d256_gqa4_2_70x130_causalTL_edge";
    g.batch = 1;
    g.sq = 70;
    g.sk = 130;
    g.name = "bf16_d192v128_gqa4_2_70x130_causalTL_edge";
    return {a, d, e, g, r192, rc};
  }
  return {a, b, c, d, e, f, f192, g, r, r192, rc, rw};
}

class BackwardDeterminism : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardDeterminism, TwentyRunsBitwiseEqualAndGraphReplayEqualsEager) {
  const BwdCase &c = GetParam();
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  // Ordered additions are no excuse for a wrong result: the first run passes the oracle gates, then every later one
  // must repeat it bitwise. The wgmma family serves deterministic problems of its head dims and types on sm90.
  if (deviceIsSm90() && c.dtype != FLASHATTN_DATA_FP32 &&
      (c.headDim == 64 || c.headDim == 128 || c.headDim == 192 || c.headDim == 256) &&
      partBuilt(Family::BackwardSm90, c.dtype, c.headDim, c.headDimV)) {
    const std::string described = describeBackward(h, *s);
    EXPECT_NE(described.find("cuda.bwd.wgmma"), std::string::npos) << c.name << ": " << described;
    EXPECT_NE(described.find("; deterministic"), std::string::npos) << c.name << ": " << described;
  }
  {
    // Every family: descending turns under a mask bounding the rows from below without a left window, at head dims
    // above 128 without GQA (backward.cu descendingTurnsPay).
    const std::string described = describeBackward(h, *s);
    const bool descending = c.headDim > 128 && c.heads == c.kvHeads && c.windowLeft < 0 &&
                            (c.mask != FLASHATTN_MASK_NONE || c.windowRight >= 0);
    EXPECT_EQ(described.find("descending key block") != std::string::npos, descending) << c.name << ": " << described;
  }
  runAndCheckAgainstOracle(h, c, *s);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<uint8_t> first = gradientBytes(*s);
  const int runs = edgeSliceOnly() ? 3 : 20;
  for (int run = 1; run < runs; ++run) {
    poisonGradients(*s);
    ASSERT_EQ(enqueueBackward(h, *s), FLASHATTN_STATUS_SUCCESS) << lastError();
    FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    ASSERT_TRUE(gradientBytes(*s) == first) << c.name << ": run " << run << " differs from run 0";
  }

  runBackwardFromGraph(h, *s);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(gradientBytes(*s) == first) << c.name << ": graph replay differs from eager";
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackwardDeterminism, ::testing::ValuesIn(determinismCases()), caseName);

// ---- what the planner says ---------------------------------------------------------------------------------------

struct SupportQuery {
  flashAttnStatus_t status;
  std::string text;
  int32_t deterministic;
};

SupportQuery checkSupport(Handle &h, flashAttnDataType_t t, int64_t headDim, int64_t headDimV, bool deterministic) {
  TensorDesc q, k, v, o;
  EXPECT_EQ(q.set(t, {1, 2, 64, headDim}, {2 * 64 * headDim, 64 * headDim, headDim, 1}), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(k.set(t, {1, 2, 64, headDim}, {2 * 64 * headDim, 64 * headDim, headDim, 1}), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(v.set(t, {1, 2, 64, headDimV}, {2 * 64 * headDimV, 64 * headDimV, headDimV, 1}), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(o.set(t, {1, 2, 64, headDimV}, {2 * 64 * headDimV, 64 * headDimV, headDimV, 1}), FLASHATTN_STATUS_SUCCESS);
  AttnDesc attn;
  EXPECT_EQ(flashAttnSetAttentionDeterministic(attn, deterministic ? 1 : 0), FLASHATTN_STATUS_SUCCESS);
  char text[512] = {};
  SupportQuery r{};
  r.deterministic = -1;
  r.status = flashAttnCheckSupport(h, FLASHATTN_OP_BACKWARD, attn, nullptr, q, k, v, o, text, sizeof text,
                                   &r.deterministic);
  r.text = r.status == FLASHATTN_STATUS_SUCCESS ? std::string(text) : lastError();
  return r;
}

TEST(BackwardSupport, PlannerAnswers) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  // Multiples of 8 pad to the next instance; others are refused with a reason naming the head dim.
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_BF16, 80)) {
    const SupportQuery padded = checkSupport(h, FLASHATTN_DATA_BF16, 80, 80, false);
    EXPECT_EQ(padded.status, FLASHATTN_STATUS_SUCCESS) << padded.text;
    EXPECT_NE(padded.text.find("bwd"), std::string::npos) << padded.text;
    EXPECT_EQ(padded.deterministic, 0) << padded.text;
  }
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_BF16, 128)) {
    const SupportQuery det = checkSupport(h, FLASHATTN_DATA_BF16, 128, 128, true);
    EXPECT_EQ(det.status, FLASHATTN_STATUS_SUCCESS) << det.text;
    EXPECT_EQ(det.deterministic, 1) << det.text;
  }
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_FP16, 59)) {
    const SupportQuery odd = checkSupport(h, FLASHATTN_DATA_FP16, 59, 59, false);
    EXPECT_EQ(odd.status, FLASHATTN_STATUS_SUCCESS) << odd.text;
    EXPECT_NE(odd.text.find("headDim 59"), std::string::npos) << odd.text;
  }
  const SupportQuery wide = checkSupport(h, FLASHATTN_DATA_FP16, 264, 264, false);
  EXPECT_EQ(wide.status, FLASHATTN_STATUS_NOT_SUPPORTED) << wide.text;
  // Q/K and V/O head dims apart pad to the instance of the wider; past 256 is refused naming headDimV.
  if (partBuiltAtLeast(Family::Backward, FLASHATTN_DATA_BF16, 128, 64)) {
    const SupportQuery mixed = checkSupport(h, FLASHATTN_DATA_BF16, 128, 64, false);
    EXPECT_EQ(mixed.status, FLASHATTN_STATUS_SUCCESS) << mixed.text;
    EXPECT_NE(mixed.text.find("headDimV 64"), std::string::npos) << mixed.text;
  }
  const SupportQuery wideV = checkSupport(h, FLASHATTN_DATA_BF16, 128, 512, false);
  EXPECT_EQ(wideV.status, FLASHATTN_STATUS_NOT_SUPPORTED) << wideV.text;
  EXPECT_NE(wideV.text.find("headDimV 512"), std::string::npos) << wideV.text;
}

TEST(BackwardSupport, DeterministicWorkspaceIsLargerAndExact) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  BwdCase c;
  c.headDim = 128;
  c.heads = 4;
  c.kvHeads = 4;
  c.sq = 300;
  c.sk = 300;
  SKIP_IF_NOT_BUILT(notBuiltFor(c));
  auto a = build(c);
  c.deterministic = true;
  auto b = build(c);
  prepareBackward(h, *a);
  prepareBackward(h, *b);
  EXPECT_GT(a->wsBytes, 0u);
  EXPECT_GT(b->wsBytes, a->wsBytes);
  // One byte less than the size query answered is refused before anything runs.
  runForward(h, *a);
  poisonGradients(*a);
  const size_t exact = a->wsBytes;
  a->wsBytes = exact - 1;
  EXPECT_EQ(enqueueBackward(h, *a), FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE) << lastError();
  a->wsBytes = exact;
  EXPECT_EQ(enqueueBackward(h, *a), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

}  // namespace

namespace {

// Strides that are not whole 16-byte vectors: CheckSupport (which sees no gradient descriptor) says SUCCESS, and the
// call must then succeed too, staging those tensors through the workspace (src/cuda/staging). The first case is the
// one where the two used to disagree (bf16, headDim 176 padded to 192, B3 Hq16 Hkv2, seq 3, causal bottom-right,
// deterministic, dO in odd strides); the second has every tensor of an FP32 d96 problem in odd strides.
TEST(BackwardSupport, OddStridesAreStagedAndAgreeWithCheckSupport) {
  BwdCase a;
  a.name = "bf16_d176_b3_h16_2_seq3_causalBR_det_dO_odd";
  a.dtype = FLASHATTN_DATA_BF16;
  a.headDim = 176;
  a.batch = 3, a.heads = 16, a.kvHeads = 2, a.sq = 3, a.sk = 3;
  a.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  a.deterministic = true;
  a.dOPad = 3;  // dO rows of 179 elements: no stride of dO is a multiple of 8
  BwdCase b;
  b.name = "fp32_d96_b2_h4_2_all_odd";
  b.dtype = FLASHATTN_DATA_FP32;
  b.headDim = 96;
  b.batch = 2, b.heads = 4, b.kvHeads = 2, b.sq = 70, b.sk = 90;
  b.rowPad = 1;  // every tensor: rows of 97 floats
  b.dOPad = 1;
  int checked = 0;
  for (const BwdCase &c : {a, b}) {
    SCOPED_TRACE(c.name);
    if (const std::string missing = notBuiltFor(c); !missing.empty()) {
      leaveOutPart(c.name + ": " + missing);
      continue;
    }
    ++checked;
    Handle h(FLASHATTN_BACKEND_CUDA);
    auto s = build(c);
    const std::string described = describeBackward(h, *s);
    EXPECT_EQ(described.find("refused"), std::string::npos) << described;
    runAndCheckAgainstOracle(h, c, *s);
  }
  if (checked == 0) GTEST_SKIP() << "neither case has its instances in this build";
}

}  // namespace
