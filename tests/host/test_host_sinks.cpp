// SPDX-License-Identifier: BSD-3-Clause
// Attention sinks on the HOST backend through the public API: forward, decode and backward (dQ/dK/dV and dSinks)
// against the float64 oracle with the gates of docs/testing.md, rows that see no key (O = 0, LSE = sink), a sink far
// above the logits (O ~ 0), dSinks against finite differences and bitwise across runs and thread counts, DecodeChunk
// against Forward for several chunk counts, and Forward(sinks) on the full KV against MergeStates of a part with the
// sinks and a part without.
#include <cmath>
#include <cstring>
#include <random>

#include "grid_runner.hpp"

using namespace host_test;

namespace {

std::vector<float> randomSinks(int64_t heads, uint64_t seed, double spread = 2.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, spread);
  std::vector<float> s;
  for (int64_t h = 0; h < heads; ++h) s.push_back(float(dist(rng)));
  return s;
}

std::vector<AttnCase> sinkCases() {
  std::vector<AttnCase> cases;
  uint64_t seed = 7100;
  for (flashAttnDataType_t t : {FLASHATTN_DATA_FP32, FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16}) {
    AttnCase c;
    c.dtype = t;
    c.batch = 2;
    c.heads = 4;
    c.kvHeads = 2;  // GQA
    c.headDim = c.headDimV = 32;
    c.seqQ = 37;
    c.seqK = 70;
    c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
    c.seed = seed++;
    c.sinks = randomSinks(c.heads, c.seed);
    cases.push_back(c);

    AttnCase br = c;  // bottom-right with seqQ > seqK: the first rows see no key
    br.seqQ = 45;
    br.seqK = 30;
    br.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    br.order = Order::BSHD;
    br.seed = seed++;
    br.sinks = randomSinks(br.heads, br.seed);
    cases.push_back(br);
  }
  AttnCase f;  // softcap, ALiBi, a window, x5 values, different dims: the sink takes none of them
  f.batch = 2;
  f.heads = 3;
  f.kvHeads = 1;
  f.headDim = 40;
  f.headDimV = 24;
  f.seqQ = 20;
  f.seqK = 90;
  f.softcap = 8.f;
  f.alibi = 2;
  f.windowLeft = 15;
  f.windowRight = 3;
  f.valueScale = 5.0;
  f.rowPad = 3;
  f.seed = seed++;
  f.sinks = randomSinks(f.heads, f.seed, 4.0);
  cases.push_back(f);

  AttnCase r;  // ragged, one sequence without keys
  r.heads = 2;
  r.kvHeads = 2;
  r.headDim = r.headDimV = 16;
  r.batch = 3;
  r.raggedQ = {5, 17, 3};
  r.raggedK = {0, 40, 9};
  r.seqQ = 17;
  r.seqK = 40;
  r.seed = seed++;
  r.sinks = randomSinks(r.heads, r.seed);
  cases.push_back(r);

  AttnCase k = r;  // dense with seqlensK, one sequence empty
  k.raggedQ.clear();
  k.raggedK.clear();
  k.batch = 2;
  k.seqQ = 9;
  k.seqK = 33;
  k.kvLengths = {33, 0};
  k.seed = seed++;
  k.sinks = randomSinks(k.heads, k.seed);
  cases.push_back(k);
  return cases;
}

double fromBytes(const std::vector<uint8_t> &bytes, size_t index) {
  double x;
  std::memcpy(&x, bytes.data() + index * sizeof(double), sizeof x);
  return x;
}

}  // namespace

TEST(HostSinks, ForwardGrid) { runAttnGrid("forward with sinks", sinkCases(), false); }
TEST(HostSinks, BackwardGrid) { runAttnGrid("backward with sinks (dQ, dK, dV, dSinks)", sinkCases(), true); }

// A row that sees no key: O = 0 exactly and LSE = the sink exactly; its dSinks term is 0.
TEST(HostSinks, RowWithoutKeysGivesZeroAndTheSink) {
  AttnCase c;
  c.batch = 2;
  c.heads = 2;
  c.kvHeads = 1;
  c.headDim = c.headDimV = 16;
  c.seqQ = 6;
  c.seqK = 12;
  c.kvLengths = {0, 12};
  c.sinks = {1.75f, -3.5f};
  c.seed = 7200;
  AttnOutputs out;
  const GateReport r = runAttnCase(c, true, true, &out);
  EXPECT_TRUE(r.pass) << r.text;
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t i = 0; i < c.seqQ; ++i) {
      EXPECT_EQ(fromBytes(out.lse, size_t(h * c.seqQ + i)), double(c.sinks[size_t(h)])) << "head " << h << " row " << i;
      for (int64_t e = 0; e < c.headDimV; ++e) EXPECT_EQ(fromBytes(out.o, size_t((h * c.seqQ + i) * c.headDimV + e)), 0.0);
    }
}

// A sink far above every logit takes all the weight: O ~ 0, LSE ~ sink.
TEST(HostSinks, DominantSinkGivesNearZeroOutput) {
  AttnCase c;
  c.heads = 2;
  c.kvHeads = 2;
  c.headDim = c.headDimV = 32;
  c.seqQ = 10;
  c.seqK = 50;
  c.sinks = {60.f, 80.f};
  c.seed = 7300;
  AttnOutputs out;
  const GateReport r = runAttnCase(c, true, true, &out);
  EXPECT_TRUE(r.pass) << r.text;
  for (size_t x = 0; x < out.o.size() / sizeof(double); ++x) EXPECT_LE(std::fabs(fromBytes(out.o, x)), 1e-15);
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t i = 0; i < c.seqQ; ++i)
      EXPECT_NEAR(fromBytes(out.lse, size_t(h * c.seqQ + i)), double(c.sinks[size_t(h)]), 1e-5);
}

// dSinks (and every other output) bitwise equal across runs and FLASHATTN_HOST_THREADS settings.
TEST(HostSinks, BackwardIsBitwiseDeterministic) {
  AttnCase c = sinkCases()[0];
  c.batch = 3;
  AttnOutputs first;
  {
    ScopedThreads one(1);
    ASSERT_TRUE(runAttnCase(c, true, false, &first).pass);
  }
  ASSERT_EQ(first.dSinks.size(), size_t(c.heads) * sizeof(double));
  for (int threads : {1, 2, 3, 8}) {
    ScopedThreads scoped(threads);
    for (int run = 0; run < 2; ++run) {
      AttnOutputs again;
      ASSERT_TRUE(runAttnCase(c, true, false, &again).pass);
      EXPECT_TRUE(again.dSinks == first.dSinks) << threads << " threads, run " << run;
      EXPECT_TRUE(again == first) << threads << " threads, run " << run;
    }
  }
}

// dSinks against central differences of the float64 forward (and the oracle's dSinks with them).
TEST(HostSinks, DSinksMatchesFiniteDifferences) {
  const int64_t b = 2, heads = 3, kvHeads = 1, sq = 5, sk = 4, d = 6, dv = 5;
  std::mt19937_64 rng(7400);
  fa_ref::Problem p;
  p.batch = b;
  p.heads = heads;
  p.kvHeads = kvHeads;
  p.maxSq = sq;
  p.maxSk = sk;
  p.headDim = d;
  p.headDimV = dv;
  p.mask = fa_ref::Mask::CausalBottomRight;  // row 0 sees no key
  p.softcap = 3.0;
  const std::vector<float> sinks = {0.5f, -1.25f, 2.0f};
  p.sinks.assign(sinks.begin(), sinks.end());
  const auto q = fa_test::randomValues(rng, p.qSize(), FLASHATTN_DATA_FP32);
  const auto k = fa_test::randomValues(rng, p.kSize(), FLASHATTN_DATA_FP32);
  const auto v = fa_test::randomValues(rng, p.vSize(), FLASHATTN_DATA_FP32);
  const auto dO = fa_test::randomValues(rng, p.oSize(), FLASHATTN_DATA_FP32);

  auto Q = fa_test::pack4(q, FLASHATTN_DATA_FP32, b, heads, sq, d, Order::BHSD);
  auto K = fa_test::pack4(k, FLASHATTN_DATA_FP32, b, kvHeads, sk, d, Order::BHSD);
  auto V = fa_test::pack4(v, FLASHATTN_DATA_FP32, b, kvHeads, sk, dv, Order::BHSD);
  auto DO = fa_test::pack4(dO, FLASHATTN_DATA_FP32, b, heads, sq, dv, Order::BHSD);
  HostTensor O(FLASHATTN_DATA_FP32, {b, heads, sq, dv}, fa_test::stridesFor(Order::BHSD, b, heads, sq, dv));
  HostTensor DQ(FLASHATTN_DATA_FP32, Q.dims, Q.strides), DK(FLASHATTN_DATA_FP32, K.dims, K.strides),
      DV(FLASHATTN_DATA_FP32, V.dims, V.strides);
  for (auto *x : {&O, &DQ, &DK, &DV}) x->fillNaN();
  std::vector<float> lse(size_t(b * heads * sq), std::nanf("")), dSinks(size_t(heads), std::nanf(""));

  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::AttnDesc attn;
  flashAttnSetAttentionMask(attn, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT);
  flashAttnSetAttentionSoftcap(attn, 3.f);
  ASSERT_EQ(flashAttnSetAttentionSinks(attn, sinks.data()), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(flashAttnSetAttentionSinksGradient(attn, dSinks.data()), FLASHATTN_STATUS_SUCCESS);
  fa_test::TensorDesc qd(Q), kd(K), vd(V), od(O), dod(DO), dqd(DQ), dkd(DK), dvd(DV), ld;
  ASSERT_EQ(ld.set(FLASHATTN_DATA_FP32, {b, heads, sq}, {heads * sq, sq, 1}), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(flashAttnForward(handle, attn, nullptr, qd, Q.bytes.data(), kd, K.bytes.data(), vd, V.bytes.data(), od,
                             O.bytes.data(), ld, lse.data(), nullptr, 0),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t h = 0; h < heads; ++h) EXPECT_EQ(lse[size_t((bb * heads + h) * sq)], sinks[size_t(h)]);
  size_t bytes = 1;
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSize(handle, attn, nullptr, qd, kd, vd, od, ld, &bytes),
            FLASHATTN_STATUS_SUCCESS);
  Workspace ws(bytes);
  ASSERT_EQ(flashAttnBackward(handle, attn, nullptr, qd, Q.bytes.data(), kd, K.bytes.data(), vd, V.bytes.data(), od,
                              O.bytes.data(), dod, DO.bytes.data(), ld, lse.data(), dqd, DQ.bytes.data(), dkd,
                              DK.bytes.data(), dvd, DV.bytes.data(), ws.data(), ws.size()),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();

  std::vector<double> rq, rk, rv, refSinks;
  fa_ref::backward(p, q, k, v, dO, rq, rk, rv, fa_ref::Rounding::None, &refSinks);
  const double step = 1e-4;
  for (int64_t h = 0; h < heads; ++h) {
    auto loss = [&](double sink) {
      fa_ref::Problem pp = p;
      pp.sinks[size_t(h)] = sink;
      std::vector<double> o, l;
      fa_ref::forward(pp, q, k, v, o, l);
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * dO[i];
      return s;
    };
    const double numeric = (loss(p.sinks[size_t(h)] + step) - loss(p.sinks[size_t(h)] - step)) / (2 * step);
    EXPECT_NEAR(refSinks[size_t(h)], numeric, 1e-7 * (1 + std::fabs(numeric))) << "oracle, head " << h;
    EXPECT_NEAR(double(dSinks[size_t(h)]), numeric, 1e-5 * (1 + std::fabs(numeric))) << "host, head " << h;
  }
  // dQ/dK/dV with the sink's share of the denominator, against the oracle.
  const std::vector<double> got[] = {fa_test::unpack4(DQ), fa_test::unpack4(DK), fa_test::unpack4(DV)};
  const std::vector<double> *ref[] = {&rq, &rk, &rv};
  for (int which = 0; which < 3; ++which) {
    const fa_ref::Gate g = fa_ref::checkGates(got[which], *ref[which], *ref[which], 0.0, 1e-5);
    EXPECT_TRUE(g.finite && g.normwise <= 1e-5 && g.maxErr <= 1e-5) << which << ": " << g.describe();
  }
}

// DecodeChunk with sinks against the oracle's forward (the sink joins once, whatever the chunk count), on dense and
// paged caches, one sequence without keys.
TEST(HostSinks, DecodeEveryChunkCount) {
  int runs = 0;
  uint64_t seed = 7500;
  for (flashAttnDataType_t t : {FLASHATTN_DATA_FP32, FLASHATTN_DATA_BF16}) {
    DecodeCase c;
    c.dtype = t;
    c.batch = 3;
    c.heads = 4;
    c.kvHeads = 2;
    c.headDim = c.headDimV = 32;
    c.seqQ = 3;
    c.seqK = 300;
    c.kvLengths = {300, 0, 77};
    c.pageSizes = {0, 16};
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    c.chunks = {1, 2, 3, 7, 64, 1000, 0};
    c.seed = seed++;
    c.sinks = randomSinks(c.heads, c.seed);
    for (const DecodeRun &run : runDecodeCase(c)) {
      ++runs;
      EXPECT_TRUE(run.report.pass) << "page size " << run.pageSize << ", chunks " << run.chunks << ": " << c.describe()
                                   << "\n"
                                   << run.report.text;
    }
  }
  std::printf("[grid] decode with sinks: %d runs\n", runs);
}

namespace {

// FP32 problem on packed BHSD tensors for the direct comparisons below.
struct Direct {
  int64_t b = 2, heads = 4, kvHeads = 2, sq = 3, sk = 37, d = 16, dv = 16;
  HostTensor Q, K, V;
  std::vector<float> sinks;
  Direct() {
    std::mt19937_64 rng(7600);
    Q = fa_test::pack4(fa_test::randomValues(rng, size_t(b * heads * sq * d), FLASHATTN_DATA_FP32), FLASHATTN_DATA_FP32,
                       b, heads, sq, d, Order::BHSD);
    K = fa_test::pack4(fa_test::randomValues(rng, size_t(b * kvHeads * sk * d), FLASHATTN_DATA_FP32),
                       FLASHATTN_DATA_FP32, b, kvHeads, sk, d, Order::BHSD);
    V = fa_test::pack4(fa_test::randomValues(rng, size_t(b * kvHeads * sk * dv), FLASHATTN_DATA_FP32),
                       FLASHATTN_DATA_FP32, b, kvHeads, sk, dv, Order::BHSD);
    sinks = randomSinks(heads, 7601);
  }
  std::vector<int64_t> oDims() const { return {b, heads, sq, dv}; }
  std::vector<int64_t> oStrides() const { return {heads * sq * dv, sq * dv, dv, 1}; }
};

}  // namespace

// DecodeChunk(sinks) == Forward(sinks) on the same problem for several chunk counts.
TEST(HostSinks, DecodeEqualsForward) {
  Direct x;
  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::AttnDesc attn;
  flashAttnSetAttentionMask(attn, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT);
  ASSERT_EQ(flashAttnSetAttentionSinks(attn, x.sinks.data()), FLASHATTN_STATUS_SUCCESS);
  const std::vector<int32_t> lengths = {int32_t(x.sk), 11};
  fa_test::SeqDesc seq;
  ASSERT_EQ(flashAttnSetSeqKvLengths(seq, x.b, lengths.data()), FLASHATTN_STATUS_SUCCESS);
  fa_test::TensorDesc qd(x.Q), kd(x.K), vd(x.V), od, ld;
  ASSERT_EQ(od.set(FLASHATTN_DATA_FP32, x.oDims(), x.oStrides()), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(ld.set(FLASHATTN_DATA_FP32, {x.b, x.heads, x.sq}, {x.heads * x.sq, x.sq, 1}), FLASHATTN_STATUS_SUCCESS);
  const size_t oCount = size_t(x.b * x.heads * x.sq * x.dv), lCount = size_t(x.b * x.heads * x.sq);
  std::vector<float> fo(oCount, std::nanf("")), fl(lCount, std::nanf(""));
  ASSERT_EQ(flashAttnForward(handle, attn, seq, qd, x.Q.bytes.data(), kd, x.K.bytes.data(), vd, x.V.bytes.data(), od,
                             fo.data(), ld, fl.data(), nullptr, 0),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  for (int32_t chunks : {1, 2, 5, 13, 37, 100, 0}) {
    std::vector<float> o(oCount, std::nanf("")), l(lCount, std::nanf(""));
    size_t bytes = 0;
    ASSERT_EQ(flashAttnDecodeChunkGetWorkspaceSize(handle, attn, seq, qd, kd, vd, od, ld, chunks, &bytes),
              FLASHATTN_STATUS_SUCCESS);
    Workspace ws(bytes);
    ASSERT_EQ(flashAttnDecodeChunk(handle, attn, seq, qd, x.Q.bytes.data(), kd, x.K.bytes.data(), vd,
                                   x.V.bytes.data(), od, o.data(), ld, l.data(), chunks, ws.data(), ws.size()),
              FLASHATTN_STATUS_SUCCESS)
        << fa_test::lastError();
    for (size_t i = 0; i < oCount; ++i) EXPECT_NEAR(o[i], fo[i], 1e-6) << "chunks " << chunks << " O[" << i << "]";
    for (size_t i = 0; i < lCount; ++i) EXPECT_NEAR(l[i], fl[i], 1e-5) << "chunks " << chunks << " LSE[" << i << "]";
  }
}

// Forward(sinks) over all keys == MergeStates(Forward(sinks) over keys [0, split), Forward(no sinks) over the rest).
TEST(HostSinks, MergeWithSinksInOnePart) {
  Direct x;
  const int64_t split = 20;
  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::AttnDesc withSinks, without;
  flashAttnSetAttentionSoftcap(withSinks, 6.f);
  flashAttnSetAttentionSoftcap(without, 6.f);
  ASSERT_EQ(flashAttnSetAttentionSinks(withSinks, x.sinks.data()), FLASHATTN_STATUS_SUCCESS);
  fa_test::TensorDesc qd(x.Q), kd(x.K), vd(x.V), k1, v1, k2, v2, od, ld;
  ASSERT_EQ(k1.set(FLASHATTN_DATA_FP32, {x.b, x.kvHeads, split, x.d}, x.K.strides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(v1.set(FLASHATTN_DATA_FP32, {x.b, x.kvHeads, split, x.dv}, x.V.strides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(k2.set(FLASHATTN_DATA_FP32, {x.b, x.kvHeads, x.sk - split, x.d}, x.K.strides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(v2.set(FLASHATTN_DATA_FP32, {x.b, x.kvHeads, x.sk - split, x.dv}, x.V.strides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(od.set(FLASHATTN_DATA_FP32, x.oDims(), x.oStrides()), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(ld.set(FLASHATTN_DATA_FP32, {x.b, x.heads, x.sq}, {x.heads * x.sq, x.sq, 1}), FLASHATTN_STATUS_SUCCESS);
  const size_t oCount = size_t(x.b * x.heads * x.sq * x.dv), lCount = size_t(x.b * x.heads * x.sq);

  std::vector<float> fo(oCount, std::nanf("")), fl(lCount, std::nanf(""));
  ASSERT_EQ(flashAttnForward(handle, withSinks, nullptr, qd, x.Q.bytes.data(), kd, x.K.bytes.data(), vd,
                             x.V.bytes.data(), od, fo.data(), ld, fl.data(), nullptr, 0),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();

  std::vector<float> po(2 * oCount, std::nanf("")), pl(2 * lCount, std::nanf(""));
  const auto *k = reinterpret_cast<const float *>(x.K.bytes.data());
  const auto *v = reinterpret_cast<const float *>(x.V.bytes.data());
  ASSERT_EQ(flashAttnForward(handle, withSinks, nullptr, qd, x.Q.bytes.data(), k1, k, v1, v, od, po.data(), ld,
                             pl.data(), nullptr, 0),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  ASSERT_EQ(flashAttnForward(handle, without, nullptr, qd, x.Q.bytes.data(), k2, k + split * x.d, v2,
                             v + split * x.dv, od, po.data() + oCount, ld, pl.data() + lCount, nullptr, 0),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();

  fa_test::TensorDesc pod, pld;
  std::vector<int64_t> poDims = {2, x.b, x.heads, x.sq, x.dv}, poStrides = {int64_t(oCount), x.heads * x.sq * x.dv,
                                                                            x.sq * x.dv, x.dv, 1};
  ASSERT_EQ(pod.set(FLASHATTN_DATA_FP32, poDims, poStrides), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(pld.set(FLASHATTN_DATA_FP32, {2, x.b, x.heads, x.sq}, {int64_t(lCount), x.heads * x.sq, x.sq, 1}),
            FLASHATTN_STATUS_SUCCESS);
  std::vector<float> mo(oCount, std::nanf("")), ml(lCount, std::nanf(""));
  size_t bytes = 0;
  ASSERT_EQ(flashAttnMergeStatesGetWorkspaceSize(handle, pod, pld, od, ld, &bytes), FLASHATTN_STATUS_SUCCESS);
  Workspace ws(bytes);
  ASSERT_EQ(flashAttnMergeStates(handle, pod, po.data(), pld, pl.data(), od, mo.data(), ld, ml.data(), ws.data(),
                                 ws.size()),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  for (size_t i = 0; i < oCount; ++i) EXPECT_NEAR(mo[i], fo[i], 2e-6) << "O[" << i << "]";
  for (size_t i = 0; i < lCount; ++i) EXPECT_NEAR(ml[i], fl[i], 1e-5) << "LSE[" << i << "]";
}
