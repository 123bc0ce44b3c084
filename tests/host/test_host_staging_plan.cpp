// SPDX-License-Identifier: BSD-3-Clause
// planStaging on the CPU: which tensors of a backward or decode problem the CUDA backend copies through the
// workspace, and the packed layouts and slots it gives them. The copies themselves run in tests/gpu/test_gpu_staging.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/staging/staging_plan.hpp"

namespace {

using flashattn::AttnBuffers;
using flashattn::AttnProblem;
using flashattn::DType;
using flashattn::Layout;
using flashattn::Op;
using flashattn::cuda::kAllStagedRoom;
using flashattn::cuda::kGradientRoom;
using flashattn::cuda::kStagedCount;
using flashattn::cuda::planStaging;
using flashattn::cuda::restage;
using flashattn::cuda::Staged;
using flashattn::cuda::stagedBit;
using flashattn::cuda::stagedInCall;
using flashattn::cuda::StagingPlan;

// BSHD strides of [b, h, s, d]: {s*h*d, d, h*d}.
Layout bshd(int64_t h, int64_t s, int64_t d) { return Layout{s * h * d, d, h * d}; }

AttnProblem backwardProblem(DType t, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d) {
  AttnProblem p;
  p.op = Op::Backward;
  p.dtype = t;
  p.batch = b;
  p.heads = hq;
  p.kvHeads = hkv;
  p.seqQ = sq;
  p.seqK = sk;
  p.headDim = p.headDimV = d;
  p.q = p.o = p.dO = p.dQ = bshd(hq, sq, d);
  p.k = p.v = p.dK = p.dV = bshd(hkv, sk, d);
  p.hasLse = true;
  p.lse = Layout{hq * sq, sq, 1};
  return p;
}

Layout &layoutOf(AttnProblem &p, Staged t) {
  Layout *all[] = {&p.q, &p.k, &p.v, &p.o, &p.dO, &p.dQ, &p.dK, &p.dV};
  return *all[int(t)];
}

std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// The case: only dO is staged, as [batch][heads][rows][headDim].
TEST(StagingPlan, BackwardOddBatchStrideOfDOStagesOnlyDO) {
  AttnProblem p = backwardProblem(DType::BF16, 3, 16, 2, 3, 3, 176);
  p.dO.batch = 2819;
  p.mask = flashattn::Mask::CausalBottomRight;
  p.deterministic = true;
  const StagingPlan s = planStaging(p);
  for (int i = 0; i < kStagedCount; ++i) {
    EXPECT_TRUE(s.tensor[i].candidate) << i;
    EXPECT_EQ(s.tensor[i].byStrides, Staged(i) == Staged::dO) << i;
    EXPECT_EQ(s.tensor[i].reserved, Staged(i) == Staged::dO) << i;
  }
  const auto &st = s[Staged::dO];
  EXPECT_FALSE(st.output);
  EXPECT_EQ(st.batch, 3);
  EXPECT_EQ(st.heads, 16);
  EXPECT_EQ(st.rows, 3);
  EXPECT_EQ(st.pitch, 176);
  EXPECT_EQ(st.packed.row, 176);
  EXPECT_EQ(st.packed.head, 3 * 176);
  EXPECT_EQ(st.packed.batch, 16 * 3 * 176);
  EXPECT_EQ(st.offset, 0u);
  EXPECT_EQ(st.bytes, align256(3 * 16 * 3 * 176 * 2));
  EXPECT_EQ(s.totalBytes, st.bytes);
  EXPECT_EQ(flashattn::cuda::describeStaging(s), "dO (batch stride 2819)");

  const AttnProblem k = restage(p, s);
  EXPECT_TRUE(k.dO == st.packed);
  AttnProblem expect = p;
  expect.dO = st.packed;
  EXPECT_TRUE(k == expect) << "restage changes the staged layout and nothing else";
}

TEST(StagingPlan, Fp32RowStrideNotAMultipleOfFourElements) {
  AttnProblem p = backwardProblem(DType::FP32, 2, 4, 4, 33, 40, 96);
  p.k = Layout{40 * 4 * 98, 98, 4 * 98};  // heads 98 elements (392 bytes) apart
  p.dQ = Layout{4 * 33 * 100, 33 * 100, 100};  // 400-byte rows, heads and batches multiples of them
  const StagingPlan s = planStaging(p);
  EXPECT_TRUE(s[Staged::K].byStrides);
  EXPECT_STREQ(s[Staged::K].why, "head");  // 98 elements: the head stride is the first one found off
  EXPECT_FALSE(s[Staged::dQ].byStrides);
  EXPECT_EQ(s[Staged::K].packed.row, 96);
  EXPECT_EQ(s.totalBytes, align256(2 * 4 * 40 * 96 * 4));
}

// A dimension of extent 1 is never walked; a ragged tensor's batch stride is not a stride at all; a paged cache's
// page stride always is; the row stride always is.
TEST(StagingPlan, OnlyWalkedDimensionsCount) {
  AttnProblem p = backwardProblem(DType::FP16, 1, 1, 1, 5, 7, 64);
  p.q.batch = 13;   // batch 1
  p.q.head = 17;    // heads 1
  p.o.row = 72;     // a multiple of 8
  p.dV.row = 68;    // not
  const StagingPlan s = planStaging(p);
  EXPECT_FALSE(s[Staged::Q].byStrides);
  EXPECT_FALSE(s[Staged::O].byStrides);
  EXPECT_TRUE(s[Staged::dV].byStrides);
  EXPECT_TRUE(s[Staged::dV].output);

  AttnProblem r = backwardProblem(DType::BF16, 4, 2, 2, 9, 9, 64);
  r.ragged = true;
  r.totalQ = 30;
  r.totalK = 31;
  for (int i = 0; i < kStagedCount; ++i) layoutOf(r, Staged(i)) = Layout{0, 64, 2 * 64};
  r.q.batch = 3;  // ignored: rows are tokens
  static const int32_t cuQ[5] = {0, 5, 9, 20, 30}, cuK[5] = {0, 8, 8, 20, 29};
  r.cuSeqlensQ = cuQ;
  r.cuSeqlensK = cuK;
  EXPECT_EQ(planStaging(r).totalBytes, 0u);
  r.k.row = 2 * 64 + 4;  // token stride
  const StagingPlan rs = planStaging(r);
  EXPECT_TRUE(rs[Staged::K].byStrides);
  EXPECT_EQ(rs[Staged::K].batch, 1);
  EXPECT_EQ(rs[Staged::K].rows, 31);
  EXPECT_EQ(rs[Staged::K].packed.batch, 0);  // ragged: [token][head][dim]
  EXPECT_EQ(rs[Staged::K].packed.head, 64);
  EXPECT_EQ(rs[Staged::K].packed.row, 2 * 64);
  EXPECT_EQ(rs[Staged::K].rowLimit, cuK + 4) << "tokens past cuSeqlensK[batch] are not copied";

  AttnProblem d = backwardProblem(DType::BF16, 2, 8, 2, 1, 0, 128);
  d.op = Op::DecodeChunk;
  d.paged = true;
  d.numPages = 1;
  d.pageSize = 16;
  d.maxPagesPerSeq = 1;
  d.seqK = 16;
  d.k = Layout{16 * 2 * 128 + 8, 128, 2 * 128};  // page stride off by 8 elements (16 bytes): fine
  d.v = Layout{16 * 2 * 128 + 4, 128, 2 * 128};  // off by 4 (8 bytes), and walked although there is one page
  const StagingPlan ds = planStaging(d);
  EXPECT_FALSE(ds[Staged::K].byStrides);
  EXPECT_TRUE(ds[Staged::V].byStrides);
  EXPECT_TRUE(ds[Staged::V].wholePool);
  EXPECT_EQ(ds[Staged::V].batch, 1);
  EXPECT_EQ(ds[Staged::V].heads, 2);
  EXPECT_EQ(ds[Staged::V].rows, 16);
  EXPECT_EQ(ds[Staged::V].packed.head, 128);  // [page][row][head][dim]
  EXPECT_EQ(ds[Staged::V].packed.row, 2 * 128);
  EXPECT_EQ(ds[Staged::V].packed.batch, 16 * 2 * 128);
}

TEST(StagingPlan, OperationsAndCandidates) {
  AttnProblem p = backwardProblem(DType::BF16, 2, 4, 4, 8, 8, 64);
  for (int i = 0; i < kStagedCount; ++i) layoutOf(p, Staged(i)).row = 4 * 64 + 1;
  p.op = Op::Forward;  // the forward kernels load unaligned rows themselves
  StagingPlan s = planStaging(p, kAllStagedRoom);
  EXPECT_EQ(s.totalBytes, 0u);
  for (int i = 0; i < kStagedCount; ++i) EXPECT_FALSE(s.tensor[i].candidate);

  p.op = Op::DecodeChunk;
  s = planStaging(p, kAllStagedRoom);
  for (int i = 0; i < kStagedCount; ++i) {
    const bool candidate = i <= int(Staged::O);
    EXPECT_EQ(s.tensor[i].candidate, candidate) << i;
    EXPECT_EQ(s.tensor[i].reserved, candidate) << i;
    EXPECT_EQ(s.tensor[i].output, Staged(i) == Staged::O) << i;
  }
  // Past 16 query tokens a DecodeChunk runs as the forward, which loads unaligned rows itself.
  AttnProblem longChunk = p;
  longChunk.seqQ = 17;
  s = planStaging(longChunk, kAllStagedRoom);
  EXPECT_EQ(s.totalBytes, 0u);
  for (int i = 0; i < kStagedCount; ++i) EXPECT_FALSE(s.tensor[i].candidate) << i;

  p.op = Op::Backward;
  s = planStaging(p);
  for (int i = 0; i < kStagedCount; ++i) {
    const Staged t = Staged(i);
    EXPECT_TRUE(s.tensor[i].byStrides);
    EXPECT_EQ(s.tensor[i].output, t == Staged::dQ || t == Staged::dK || t == Staged::dV) << i;
  }
}

// Room for pointers: a slot without staging by strides; the call stages exactly the misaligned pointers.
TEST(StagingPlan, PointerRoom) {
  const AttnProblem p = backwardProblem(DType::FP16, 2, 4, 2, 16, 24, 64);
  EXPECT_EQ(planStaging(p).totalBytes, 0u);
  const StagingPlan none = planStaging(p);
  const StagingPlan s = planStaging(p, stagedBit(Staged::Q) | stagedBit(Staged::dK));
  EXPECT_TRUE(s[Staged::Q].reserved);
  EXPECT_TRUE(s[Staged::dK].reserved);
  EXPECT_FALSE(s[Staged::Q].byStrides);
  EXPECT_EQ(s[Staged::dK].offset, s[Staged::Q].bytes);
  EXPECT_EQ(s.totalBytes, align256(2 * 4 * 16 * 64 * 2) + align256(2 * 2 * 24 * 64 * 2));

  alignas(16) static unsigned char memory[64];
  AttnBuffers user;
  user.q = memory + 2;   // element-aligned, not 16-byte aligned
  user.k = memory + 2;   // misaligned too, but no room was asked for
  user.dK = memory + 16;
  EXPECT_TRUE(stagedInCall(s, Staged::Q, user));
  EXPECT_FALSE(stagedInCall(s, Staged::K, user));
  EXPECT_FALSE(stagedInCall(s, Staged::dK, user));
  EXPECT_FALSE(stagedInCall(none, Staged::Q, user));
  EXPECT_TRUE(restage(p, s) == p) << "pointers are not in the problem";
  const AttnProblem call = restage(p, s, user);
  EXPECT_TRUE(call.q == s[Staged::Q].packed);
  EXPECT_TRUE(call.k == p.k);
  EXPECT_TRUE(call.dK == p.dK);
}

// Backward's size query sees no gradient descriptors and plans them in the layouts of O, Q, K, V; with room for the
// gradients its size covers the call whatever the gradients' strides are.
TEST(StagingPlan, GradientRoomMakesTheQuerySizeCoverTheCall) {
  const AttnProblem query = backwardProblem(DType::BF16, 3, 16, 2, 3, 3, 176);
  AttnProblem call = query;
  call.dO.batch = 2819;
  call.dK = Layout{2 * 3 * 180, 3 * 180, 180};
  call.dQ.row = 16 * 176 + 3;
  EXPECT_LT(planStaging(query).totalBytes, planStaging(call).totalBytes);
  EXPECT_EQ(planStaging(query, kGradientRoom).totalBytes, planStaging(call, kGradientRoom).totalBytes);
  EXPECT_EQ(planStaging(call, kGradientRoom).totalBytes, planStaging(call).totalBytes + align256(3 * 2 * 3 * 176 * 2))
      << "dV is the one gradient staged only for its room";
}

// Broadcast inputs (stride 0) are copied once and stay broadcast: 65537 heads of one row cost one row.
TEST(StagingPlan, ZeroStridesStayZero) {
  AttnProblem p = backwardProblem(DType::BF16, 2, 65537, 65537, 3, 5, 8);
  p.op = Op::DecodeChunk;
  p.q = Layout{3 * 9, 0, 9};  // one head broadcast; 18-byte rows
  p.k = Layout{0, 0, 8};      // one sequence and one head for everything; 16-byte rows
  p.v = Layout{5 * 8, 0, 0};  // one row per sequence
  p.v.batch = 5 * 8 + 2;      // ... at a 4-byte offset: staged
  p.o = Layout{65537 * 3 * 8, 3 * 8, 8};
  const StagingPlan s = planStaging(p);
  EXPECT_TRUE(s[Staged::Q].byStrides);
  EXPECT_EQ(s[Staged::Q].heads, 1);
  EXPECT_EQ(s[Staged::Q].packed.head, 0);
  EXPECT_EQ(s[Staged::Q].packed.row, 8);
  EXPECT_EQ(s[Staged::Q].packed.batch, 3 * 8);
  EXPECT_EQ(s[Staged::Q].bytes, align256(2 * 3 * 8 * 2));
  EXPECT_FALSE(s[Staged::K].reserved);
  EXPECT_TRUE(s[Staged::V].byStrides);
  EXPECT_EQ(s[Staged::V].heads, 1);
  EXPECT_EQ(s[Staged::V].rows, 1);
  EXPECT_EQ(s[Staged::V].packed.row, 0);
  EXPECT_EQ(s[Staged::V].packed.head, 0);
  EXPECT_EQ(s[Staged::V].packed.batch, 8);
  EXPECT_FALSE(s[Staged::O].reserved);
}

TEST(StagingPlan, RowLimitsOnlyForInputsTheKernelsReadPartially) {
  static const int32_t seqlensK[2] = {3, 40};
  AttnProblem p = backwardProblem(DType::FP16, 2, 4, 2, 4, 40, 64);
  p.seqlensK = seqlensK;
  for (int i = 0; i < kStagedCount; ++i) layoutOf(p, Staged(i)).row += 4;
  StagingPlan s = planStaging(p);
  EXPECT_EQ(s[Staged::K].rowLimit, seqlensK);
  EXPECT_EQ(s[Staged::V].rowLimit, seqlensK);
  EXPECT_EQ(s[Staged::dK].rowLimit, nullptr) << "keys past seqlensK get a zero gradient, which must arrive";
  EXPECT_EQ(s[Staged::Q].rowLimit, nullptr);
  p.k.batch = 0;  // one cache for every sequence: its rows serve the longest
  s = planStaging(p);
  EXPECT_EQ(s[Staged::K].batch, 1);
  EXPECT_EQ(s[Staged::K].rowLimit, nullptr);
}

TEST(StagingPlan, UnaddressablePackedCopyIsReported) {
  AttnProblem p = backwardProblem(DType::FP32, int64_t(1) << 30, 1 << 12, 1 << 12, 1, int64_t(1) << 20, 8);
  p.op = Op::DecodeChunk;
  p.k = Layout{1, 1, 3};  // an overlapping input spans little; its packed copy would span 2^66 bytes
  const StagingPlan s = planStaging(p);
  EXPECT_FALSE(s.addressable);
  EXPECT_EQ(s.totalBytes, 0u);
}

// Random problems: the plan stages a tensor exactly when the rule says so, every packed layout is made of 16-byte
// multiples, maps distinct rows to distinct places inside its slot, and slots are 256-byte aligned and disjoint.
TEST(StagingPlan, RandomProblemsKeepTheInvariants) {
  std::mt19937_64 rng(12);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int staged = 0, checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const DType t = DType(pick(0, 2));
    const int64_t e = t == DType::FP32 ? 4 : 2, perVector = 16 / e;
    const int64_t kvh = pick(1, 3), hq = kvh * pick(1, 3), sq = pick(1, 6), sk = pick(1, 6);
    const int64_t d = 8 * pick(1, 4) + (pick(0, 3) == 0 ? pick(1, 7) : 0);  // sometimes not a vector multiple
    AttnProblem p = backwardProblem(t, pick(1, 3), hq, kvh, sq, sk, d);
    p.headDimV = pick(0, 1) ? d : 8 * pick(1, 4);
    p.op = pick(0, 1) ? Op::Backward : Op::DecodeChunk;
    p.ragged = p.op == Op::Backward && pick(0, 3) == 0;
    p.totalQ = p.batch * sq;
    p.totalK = p.batch * sk;
    for (int i = 0; i < kStagedCount; ++i) {
      const bool key = i == 1 || i == 2 || i == 6 || i == 7;
      const bool input = i <= 4 && !(p.op == Op::DecodeChunk && i == 3);
      const int64_t heads = key ? kvh : hq, rows = key ? sk : sq;
      const int64_t cols = (i == 0 || i == 1 || i == 5 || i == 6) ? d : p.headDimV;
      auto pad = [&]() { return pick(0, 1) * pick(0, 9); };
      // An input stride is sometimes 0 (a broadcast); outputs never overlap.
      auto maybeZero = [&](int64_t stride) { return input && pick(0, 5) == 0 ? 0 : stride; };
      Layout &l = layoutOf(p, Staged(i));
      if (p.ragged) {  // [token][head][dim]
        l.head = maybeZero(cols + pad());
        l.row = maybeZero(heads * (cols + 9) + pad());
        l.batch = 0;
      } else {
        l.row = maybeZero(cols + pad());
        l.head = maybeZero(rows * (cols + 9) + pad());
        l.batch = maybeZero(heads * rows * (cols + 9) + 9 + pad());
      }
    }
    const uint32_t room = uint32_t(pick(0, 255)) * uint32_t(pick(0, 1));
    const StagingPlan s = planStaging(p, room);
    ASSERT_TRUE(s.addressable);
    std::size_t end = 0;
    for (int i = 0; i < kStagedCount; ++i) {
      const Staged st = Staged(i);
      const auto &x = s.tensor[i];
      // A DecodeChunk the split-KV kernels do not take (head dims) runs as the forward, which stages nothing.
      const bool candidate = p.op == Op::Backward || (i <= 3 && !decodeRunsAsForward(p));
      ASSERT_EQ(x.candidate, candidate);
      if (!candidate) {
        ASSERT_FALSE(x.reserved);
        continue;
      }
      const bool key = i == 1 || i == 2 || i == 6 || i == 7;
      const Layout &l = layoutOf(p, st);
      const bool rule = (!p.ragged && p.batch > 1 && l.batch % perVector != 0) ||
                        ((key ? kvh : hq) > 1 && l.head % perVector != 0) || l.row % perVector != 0;
      ASSERT_EQ(x.byStrides, rule) << trial << " " << i;
      ASSERT_EQ(x.reserved, rule || (room & stagedBit(st)) != 0);
      if (!x.reserved) continue;
      ++checked;
      staged += rule;
      ASSERT_EQ(x.offset % 256, 0u);
      ASSERT_EQ(x.bytes % 256, 0u);
      ASSERT_GE(x.offset, end) << "slots are disjoint and in order";
      end = x.offset + x.bytes;
      ASSERT_EQ(x.packed.batch % perVector, 0);
      ASSERT_EQ(x.packed.head % perVector, 0);
      ASSERT_EQ(x.packed.row % perVector, 0);
      ASSERT_GE(x.pitch, x.headDim);
      ASSERT_EQ(x.pitch % perVector, 0);
      std::set<int64_t> starts;
      for (int64_t b = 0; b < x.batch; ++b)
        for (int64_t h = 0; h < x.heads; ++h)
          for (int64_t r = 0; r < x.rows; ++r) {
            const int64_t start = b * x.packed.batch + h * x.packed.head + r * x.packed.row;
            ASSERT_TRUE(starts.insert(start).second) << "two rows share a packed place";
            ASSERT_LE(std::size_t(start + x.pitch) * std::size_t(e), x.bytes);
          }
      for (int64_t a : starts) {
        auto next = starts.upper_bound(a);
        if (next != starts.end()) ASSERT_GE(*next - a, x.pitch) << "rows overlap";
      }
    }
    ASSERT_EQ(s.totalBytes, end);
  }
  EXPECT_GT(staged, 500);
  EXPECT_GT(checked, staged);
}

}  // namespace
