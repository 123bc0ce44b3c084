// Backward on the CUDA backend through the public API: flashAttnForward writes O and LSE, flashAttnBackward writes
// dQ, dK, dV (poisoned with NaN first), compared with the float64 oracle's backward under both gates of TESTING.md
// (factor 3 against the same arithmetic rounded to the storage type, and the normwise bound). Plus determinism (20
// runs bitwise equal), graph-capture replay equal to eager, and what the planner refuses.
//
// FLASHATTN_TEST_SLICE=edge runs only a few small shapes (for compute-sanitizer); otherwise the sampled grid runs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
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

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;

namespace {

struct BwdCase {
  std::string name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t batch = 1, heads = 1, kvHeads = 1, headDim = 64;
  int64_t sq = 1, sk = 1;                 // dense lengths, or the maxima of a ragged batch
  std::vector<int64_t> raggedQ, raggedK;  // per-sequence lengths: ragged when non-empty
  std::vector<int64_t> usedK;             // dense: per-sequence KV lengths (seqlensK)
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 [heads], 2 [batch, heads]
  Order order = Order::BHSD;
  int64_t rowPad = 0;  // unused elements after each row of Q, K, V, O, dQ, dK, dV
  int64_t dOPad = 8;   // dO: the other order and its own padding, so it never shares Q's strides
  bool deterministic = false;
  double inputScale = 1.0;
  uint64_t seed = 1;
  bool ragged() const { return !raggedQ.empty(); }
};

// Worst gate figures per storage type, printed when the test program ends.
struct WorstErrors {
  std::mutex lock;
  std::map<std::string, std::pair<double, std::string>> normwise;  // dtype -> (worst normwise, case)
  std::map<std::string, std::pair<double, std::string>> ratio;     // dtype -> (worst maxErr / lowp maxErr, case)
  void note(const std::string &type, const std::string &name, const fa_ref::Gate &g) {
    std::lock_guard<std::mutex> guard(lock);
    auto &n = normwise[type];
    if (g.normwise >= n.first) n = {g.normwise, name};
    const double r = g.maxErr / std::max(g.maxErrLp, 1e-30);
    auto &q = ratio[type];
    if (g.maxErrLp > 0 && r >= q.first) q = {r, name};
  }
};
WorstErrors &worst() {
  static WorstErrors w;
  return w;
}

class WorstErrorReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (auto &[type, n] : worst().normwise)
      std::printf("[backward worst] %s: normwise %.3e (%s); max err / lowp max err %.2f (%s)\n", type.c_str(),
                  n.first, n.second.c_str(), worst().ratio[type].first, worst().ratio[type].second.c_str());
  }
};
::testing::Environment *const kWorstErrorReport = ::testing::AddGlobalTestEnvironment(new WorstErrorReport);

// Where element (b, h, i, d) of a canonical [b][h][s][d] tensor lives on the device, for dense (rank-4 strides) and
// ragged (rank-3 [tokens, heads, dim], sequence b starting at token cu[b]) tensors.
struct Placement {
  HostTensor host;
  bool ragged = false;
  std::vector<int64_t> start;  // ragged: first token of each sequence
  std::vector<int64_t> rows;   // rows of each sequence
  int64_t offset(int64_t b, int64_t h, int64_t i, int64_t d) const {
    if (ragged) return (start[size_t(b)] + i) * host.strides[0] + h * host.strides[1] + d * host.strides[2];
    return b * host.strides[0] + h * host.strides[1] + i * host.strides[2] + d * host.strides[3];
  }
};

Placement makePlacement(const BwdCase &c, flashAttnDataType_t t, int64_t heads, bool keys, int64_t dim, Order order,
                        int64_t pad) {
  Placement p;
  const int64_t maxS = keys ? c.sk : c.sq;
  const int64_t batch = c.ragged() ? int64_t(c.raggedQ.size()) : c.batch;
  if (c.ragged()) {
    p.ragged = true;
    int64_t tokens = 0;
    for (int64_t b = 0; b < batch; ++b) {
      p.start.push_back(tokens);
      const int64_t n = keys ? c.raggedK[size_t(b)] : c.raggedQ[size_t(b)];
      p.rows.push_back(n);
      tokens += n;
    }
    const int64_t row = dim + pad;
    p.host = HostTensor(t, {std::max<int64_t>(tokens, 1), heads, dim}, {heads * row, row, 1});
    p.host.dims[0] = tokens;
  } else {
    p.rows.assign(size_t(batch), maxS);
    p.host = HostTensor(t, {batch, heads, maxS, dim}, stridesFor(order, batch, heads, maxS, dim, pad));
  }
  return p;
}

void fill(Placement &p, const std::vector<double> &canon, int64_t heads, int64_t maxS, int64_t dim) {
  for (size_t b = 0; b < p.rows.size(); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < p.rows[b]; ++i)
        for (int64_t d = 0; d < dim; ++d)
          storeElement(p.host.bytes.data(), p.host.dtype, p.offset(int64_t(b), h, i, d),
                       canon[size_t(((int64_t(b) * heads + h) * maxS + i) * dim + d)]);
}

std::vector<double> extract(const Placement &p, int64_t heads, int64_t maxS, int64_t dim) {
  std::vector<double> canon(p.rows.size() * size_t(heads * maxS * dim), 0.0);
  for (size_t b = 0; b < p.rows.size(); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < p.rows[b]; ++i)
        for (int64_t d = 0; d < dim; ++d)
          canon[size_t(((int64_t(b) * heads + h) * maxS + i) * dim + d)] =
              loadElement(p.host.bytes.data(), p.host.dtype, p.offset(int64_t(b), h, i, d));
  return canon;
}

// Everything one case needs on the device, built through the public API.
struct Setup {
  BwdCase c;
  fa_ref::Problem ref;
  std::vector<double> q, k, v, dO;
  Placement pq, pk, pv, po, pdO, pdQ, pdK, pdV;
  DeviceBuffer dq, dk, dv, dout, ddO, ddQ, ddK, ddV, dlse, dcuQ, dcuK, dused, dslopes, dws;
  std::unique_ptr<TensorDesc> tq, tk, tv, to, tdO, tdQ, tdK, tdV, tlse;
  AttnDesc attn;
  SeqDesc seq;
  bool useSeq = false;
  size_t lseBytes = 0;
  size_t wsBytes = 0;
};

std::unique_ptr<TensorDesc> descFor(const Placement &p) {
  auto d = std::make_unique<TensorDesc>();
  EXPECT_EQ(d->set(p.host.dtype, p.host.dims, p.host.strides), FLASHATTN_STATUS_SUCCESS) << lastError();
  return d;
}

std::unique_ptr<Setup> build(const BwdCase &c) {
  auto s = std::make_unique<Setup>();
  s->c = c;
  fa_ref::Problem &r = s->ref;
  const int64_t batch = c.ragged() ? int64_t(c.raggedQ.size()) : c.batch;
  r.batch = batch;
  r.heads = c.heads;
  r.kvHeads = c.kvHeads;
  r.headDim = r.headDimV = c.headDim;
  r.maxSq = c.sq;
  r.maxSk = c.sk;
  if (c.ragged()) {
    r.sq = c.raggedQ;
    r.sk = c.raggedK;
  } else if (!c.usedK.empty()) {
    r.sk = c.usedK;
  }
  // The library resolves the default scale in FP32; the oracle uses the same value.
  r.scale = double(float(1.0 / std::sqrt(double(c.headDim))));
  r.softcap = c.softcap;
  r.mask = fa_ref::Mask(int(c.mask));
  r.windowLeft = c.windowLeft;
  r.windowRight = c.windowRight;
  std::mt19937_64 rng(c.seed);
  std::vector<float> slopes;
  if (c.alibi) {
    std::uniform_real_distribution<double> u(0.01, 0.5);
    for (int64_t i = 0; i < (c.alibi == 2 ? batch * c.heads : c.heads); ++i) {
      slopes.push_back(float(u(rng)));
      r.alibi.push_back(slopes.back());
    }
  }
  s->q = randomValues(rng, r.qSize(), c.dtype, c.inputScale);
  s->k = randomValues(rng, r.kSize(), c.dtype, c.inputScale);
  s->v = randomValues(rng, r.vSize(), c.dtype, c.inputScale);
  s->dO = randomValues(rng, r.oSize(), c.dtype, 1.0);

  const Order dOOrder = c.order == Order::BHSD ? Order::BSHD : Order::BHSD;
  s->pq = makePlacement(c, c.dtype, c.heads, false, c.headDim, c.order, c.rowPad);
  s->pk = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  s->pv = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  s->po = makePlacement(c, c.dtype, c.heads, false, c.headDim, c.order, c.rowPad);
  s->pdO = makePlacement(c, c.dtype, c.heads, false, c.headDim, dOOrder, c.dOPad);
  s->pdQ = makePlacement(c, c.dtype, c.heads, false, c.headDim, c.order, c.rowPad);
  s->pdK = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  s->pdV = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  fill(s->pq, s->q, c.heads, c.sq, c.headDim);
  fill(s->pk, s->k, c.kvHeads, c.sk, c.headDim);
  fill(s->pv, s->v, c.kvHeads, c.sk, c.headDim);
  fill(s->pdO, s->dO, c.heads, c.sq, c.headDim);
  s->dq = DeviceBuffer(s->pq.host);
  s->dk = DeviceBuffer(s->pk.host);
  s->dv = DeviceBuffer(s->pv.host);
  s->ddO = DeviceBuffer(s->pdO.host);
  s->dout = DeviceBuffer(s->po.host.bytes.size());
  s->ddQ = DeviceBuffer(s->pdQ.host.bytes.size());
  s->ddK = DeviceBuffer(s->pdK.host.bytes.size());
  s->ddV = DeviceBuffer(s->pdV.host.bytes.size());

  s->tq = descFor(s->pq);
  s->tk = descFor(s->pk);
  s->tv = descFor(s->pv);
  s->to = descFor(s->po);
  s->tdO = descFor(s->pdO);
  s->tdQ = descFor(s->pdQ);
  s->tdK = descFor(s->pdK);
  s->tdV = descFor(s->pdV);
  s->tlse = std::make_unique<TensorDesc>();
  if (c.ragged()) {
    const int64_t tokens = s->pq.host.dims[0];
    EXPECT_EQ(s->tlse->set(FLASHATTN_DATA_FP32, {tokens, c.heads}, {c.heads, 1}), FLASHATTN_STATUS_SUCCESS)
        << lastError();
    s->lseBytes = size_t(std::max<int64_t>(tokens, 1) * c.heads) * 4;
  } else {
    EXPECT_EQ(s->tlse->set(FLASHATTN_DATA_FP32, {batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    s->lseBytes = size_t(batch * c.heads * c.sq) * 4;
  }
  s->dlse = DeviceBuffer(s->lseBytes);

  EXPECT_EQ(flashAttnSetAttentionMask(s->attn, c.mask), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(flashAttnSetAttentionWindow(s->attn, c.windowLeft, c.windowRight), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(flashAttnSetAttentionSoftcap(s->attn, c.softcap), FLASHATTN_STATUS_SUCCESS);
  EXPECT_EQ(flashAttnSetAttentionDeterministic(s->attn, c.deterministic ? 1 : 0), FLASHATTN_STATUS_SUCCESS);
  if (c.alibi) {
    s->dslopes = DeviceBuffer(slopes.data(), slopes.size() * 4);
    EXPECT_EQ(flashAttnSetAttentionAlibiSlopes(s->attn, s->dslopes.get<float>(), c.alibi == 2 ? 1 : 0),
              FLASHATTN_STATUS_SUCCESS);
  }
  if (c.ragged()) {
    std::vector<int32_t> cuQ{0}, cuK{0};
    for (size_t b = 0; b < c.raggedQ.size(); ++b) {
      cuQ.push_back(cuQ.back() + int32_t(c.raggedQ[b]));
      cuK.push_back(cuK.back() + int32_t(c.raggedK[b]));
    }
    s->dcuQ = DeviceBuffer(cuQ.data(), cuQ.size() * 4);
    s->dcuK = DeviceBuffer(cuK.data(), cuK.size() * 4);
    EXPECT_EQ(flashAttnSetSeqRagged(s->seq, batch, s->dcuQ.get<int32_t>(), s->dcuK.get<int32_t>(), c.sq, c.sk),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    s->useSeq = true;
  } else if (!c.usedK.empty()) {
    std::vector<int32_t> used(c.usedK.begin(), c.usedK.end());
    s->dused = DeviceBuffer(used.data(), used.size() * 4);
    EXPECT_EQ(flashAttnSetSeqKvLengths(s->seq, batch, s->dused.get<int32_t>()), FLASHATTN_STATUS_SUCCESS)
        << lastError();
    s->useSeq = true;
  }
  return s;
}

flashAttnSeqDescriptor_t seqOf(const Setup &s) { return s.useSeq ? flashAttnSeqDescriptor_t(s.seq) : nullptr; }

// Forward through the library: O and LSE as a user's backward would receive them.
void runForward(Handle &h, Setup &s) {
  size_t bytes = 0;
  ASSERT_EQ(flashAttnForwardGetWorkspaceSize(h, s.attn, seqOf(s), *s.tq, *s.tk, *s.tv, *s.to, *s.tlse, &bytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  DeviceBuffer ws(bytes);
  s.dout.poison();
  s.dlse.poison();
  ASSERT_EQ(flashAttnForward(h, s.attn, seqOf(s), *s.tq, s.dq.ptr, *s.tk, s.dk.ptr, *s.tv, s.dv.ptr, *s.to,
                             s.dout.ptr, *s.tlse, s.dlse.get<float>(), ws.ptr, bytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void prepareBackward(Handle &h, Setup &s) {
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSize(h, s.attn, seqOf(s), *s.tq, *s.tk, *s.tv, *s.to, *s.tlse, &s.wsBytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  s.dws = DeviceBuffer(s.wsBytes);
}

flashAttnStatus_t enqueueBackward(Handle &h, Setup &s) {
  return flashAttnBackward(h, s.attn, seqOf(s), *s.tq, s.dq.ptr, *s.tk, s.dk.ptr, *s.tv, s.dv.ptr, *s.to, s.dout.ptr,
                           *s.tdO, s.ddO.ptr, *s.tlse, s.dlse.get<float>(), *s.tdQ, s.ddQ.ptr, *s.tdK, s.ddK.ptr,
                           *s.tdV, s.ddV.ptr, s.dws.ptr, s.wsBytes);
}

void poisonGradients(Setup &s) {
  s.ddQ.poison();
  s.ddK.poison();
  s.ddV.poison();
}

std::vector<uint8_t> gradientBytes(const Setup &s) {
  std::vector<uint8_t> all = s.ddQ.raw();
  const auto k = s.ddK.raw(), v = s.ddV.raw();
  all.insert(all.end(), k.begin(), k.end());
  all.insert(all.end(), v.begin(), v.end());
  return all;
}

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
  // The shapes of TESTING.md x masks (bottom-right with seqQ > seqK gives fully masked rows).
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

std::string caseName(const ::testing::TestParamInfo<BwdCase> &info) {
  std::string n = info.param.name;
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class BackwardGrid : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardGrid, MatchesFloat64Oracle) {
  const BwdCase &c = GetParam();
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  // The oracle's two backward passes run beside the GPU work.
  auto exact = std::async(std::launch::async, [&] {
    std::vector<double> dq, dk, dv;
    fa_ref::backward(s->ref, s->q, s->k, s->v, s->dO, dq, dk, dv);
    return std::vector<std::vector<double>>{dq, dk, dv};
  });
  auto lowp = std::async(std::launch::async, [&] {
    std::vector<double> dq, dk, dv;
    fa_ref::backward(s->ref, s->q, s->k, s->v, s->dO, dq, dk, dv, roundingOf(c.dtype));
    return std::vector<std::vector<double>>{dq, dk, dv};
  });
  runForward(h, *s);
  prepareBackward(h, *s);
  poisonGradients(*s);
  ASSERT_EQ(enqueueBackward(h, *s), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  s->ddQ.download(s->pdQ.host);
  s->ddK.download(s->pdK.host);
  s->ddV.download(s->pdV.host);
  const std::vector<double> got[3] = {extract(s->pdQ, c.heads, c.sq, c.headDim),
                                      extract(s->pdK, c.kvHeads, c.sk, c.headDim),
                                      extract(s->pdV, c.kvHeads, c.sk, c.headDim)};
  const auto ref = exact.get();
  const auto lp = lowp.get();
  const char *names[3] = {"dQ", "dK", "dV"};
  for (int g = 0; g < 3; ++g) {
    const double tol = gradientNormTolerance(c.dtype, lp[size_t(g)], ref[size_t(g)]);
    const fa_ref::Gate gate = fa_ref::checkGates(got[g], ref[size_t(g)], lp[size_t(g)], 3.0, tol);
    worst().note(typeName(c.dtype), c.name + " " + names[g], gate);
    EXPECT_TRUE(gate.pass) << c.name << " " << names[g] << ": " << gate.describe();
  }
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
  BwdCase r = a;
  r.name = "bf16_d256_ragged";
  r.headDim = 256;
  r.raggedQ = {300, 0, 257};
  r.raggedK = {129, 400, 511};
  r.sq = 300;
  r.sk = 511;
  if (edgeSliceOnly()) {
    a.sq = 70;
    a.sk = 90;
    a.name += "_edge";
    return {a};
  }
  return {a, b, f, r};
}

class BackwardDeterminism : public ::testing::TestWithParam<BwdCase> {};

TEST_P(BackwardDeterminism, TwentyRunsBitwiseEqualAndGraphReplayEqualsEager) {
  const BwdCase &c = GetParam();
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  runForward(h, *s);
  prepareBackward(h, *s);
  poisonGradients(*s);
  ASSERT_EQ(enqueueBackward(h, *s), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  const std::vector<uint8_t> first = gradientBytes(*s);
  const int runs = edgeSliceOnly() ? 3 : 20;
  for (int run = 1; run < runs; ++run) {
    poisonGradients(*s);
    ASSERT_EQ(enqueueBackward(h, *s), FLASHATTN_STATUS_SUCCESS) << lastError();
    FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    ASSERT_TRUE(gradientBytes(*s) == first) << c.name << ": run " << run << " differs from run 0";
  }

  cudaStream_t stream = nullptr;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_EQ(flashAttnSetStream(h, stream), FLASHATTN_STATUS_SUCCESS);
  poisonGradients(*s);
  flashAttnStatus_t captured = FLASHATTN_STATUS_INTERNAL_ERROR;
  captureAndReplay(stream, [&] { captured = enqueueBackward(h, *s); });
  EXPECT_EQ(captured, FLASHATTN_STATUS_SUCCESS) << lastError();
  EXPECT_TRUE(gradientBytes(*s) == first) << c.name << ": graph replay differs from eager";
  ASSERT_EQ(flashAttnSetStream(h, nullptr), FLASHATTN_STATUS_SUCCESS);
  FA_CUDA_CHECK(cudaStreamDestroy(stream));
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
  const SupportQuery padded = checkSupport(h, FLASHATTN_DATA_BF16, 80, 80, false);
  EXPECT_EQ(padded.status, FLASHATTN_STATUS_SUCCESS) << padded.text;
  EXPECT_NE(padded.text.find("bwd"), std::string::npos) << padded.text;
  EXPECT_EQ(padded.deterministic, 0) << padded.text;
  const SupportQuery det = checkSupport(h, FLASHATTN_DATA_BF16, 128, 128, true);
  EXPECT_EQ(det.status, FLASHATTN_STATUS_SUCCESS) << det.text;
  EXPECT_EQ(det.deterministic, 1) << det.text;
  const SupportQuery odd = checkSupport(h, FLASHATTN_DATA_FP16, 59, 59, false);
  EXPECT_EQ(odd.status, FLASHATTN_STATUS_NOT_SUPPORTED) << odd.text;
  EXPECT_NE(odd.text.find("59"), std::string::npos) << odd.text;
  const SupportQuery wide = checkSupport(h, FLASHATTN_DATA_FP16, 264, 264, false);
  EXPECT_EQ(wide.status, FLASHATTN_STATUS_NOT_SUPPORTED) << wide.text;
  const SupportQuery mixed = checkSupport(h, FLASHATTN_DATA_BF16, 128, 64, false);
  EXPECT_EQ(mixed.status, FLASHATTN_STATUS_NOT_SUPPORTED) << mixed.text;
  EXPECT_NE(mixed.text.find("headDimV"), std::string::npos) << mixed.text;
}

TEST(BackwardSupport, DeterministicWorkspaceIsLargerAndExact) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  BwdCase c;
  c.headDim = 128;
  c.heads = 4;
  c.kvHeads = 4;
  c.sq = 300;
  c.sk = 300;
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
