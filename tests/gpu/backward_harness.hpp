// SPDX-License-Identifier: BSD-3-Clause
// The backward test harness both backward suites share (test_gpu_backward.cpp: every family through the chooser;
// test_gpu_backward_sm90*.cpp: the wgmma family on sm90): a case, its strided placement on the device, descriptors,
// forward then backward through the public API, NaN poisoning, and the worst errors printed at the end.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace fa_test::backward_harness {

struct BwdCase {
  std::string name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t batch = 1, heads = 1, kvHeads = 1, headDim = 64;
  int64_t headDimV = 0;                   // of V, O, dO, dV; 0: the same as headDim
  int64_t sq = 1, sk = 1;                 // dense lengths, or the maxima of a ragged batch
  std::vector<int64_t> raggedQ, raggedK;  // per-sequence lengths: ragged when non-empty
  std::vector<int64_t> usedK;             // dense: per-sequence KV lengths (seqlensK)
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 [heads], 2 [batch, heads]
  bool sinks = false;  // attention sinks (one above every logit of its rows among them) and their gradient
  Order order = Order::BHSD;
  int64_t rowPad = 0;  // unused elements after each row of Q, K, V, O, dQ, dK, dV
  int64_t dOPad = 8;   // dO: the other order and its own padding, so it never shares Q's strides
  bool deterministic = false;
  double inputScale = 1.0;
  uint64_t seed = 1;
  bool ragged() const { return !raggedQ.empty(); }
  int64_t dimV() const { return headDimV > 0 ? headDimV : headDim; }
};

// What this build lacks for the case, "" when nothing: the portable forward (O and LSE) and backward instances as
// wide as its head dims, of its storage type, which serve it wherever the wgmma family does not
// (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS). A test of the wgmma family asks for its instance on top.
inline std::string notBuiltFor(const BwdCase &c) {
  const std::string forward = notBuiltAtLeast(Family::Forward, c.dtype, c.headDim, c.dimV());
  return forward.empty() ? notBuiltAtLeast(Family::Backward, c.dtype, c.headDim, c.dimV()) : forward;
}

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
inline WorstErrors &worst() {
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
inline ::testing::Environment *const kWorstErrorReport = ::testing::AddGlobalTestEnvironment(new WorstErrorReport);

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

inline Placement makePlacement(const BwdCase &c, flashAttnDataType_t t, int64_t heads, bool keys, int64_t dim,
                               Order order, int64_t pad) {
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

inline void fill(Placement &p, const std::vector<double> &canon, int64_t heads, int64_t maxS, int64_t dim) {
  for (size_t b = 0; b < p.rows.size(); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < p.rows[b]; ++i)
        for (int64_t d = 0; d < dim; ++d)
          storeElement(p.host.bytes.data(), p.host.dtype, p.offset(int64_t(b), h, i, d),
                       canon[size_t(((int64_t(b) * heads + h) * maxS + i) * dim + d)]);
}

inline std::vector<double> extract(const Placement &p, int64_t heads, int64_t maxS, int64_t dim) {
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
  DeviceBuffer dq, dk, dv, dout, ddO, ddQ, ddK, ddV, dlse, dcuQ, dcuK, dused, dslopes, dsinks, ddSinks, dws;
  std::unique_ptr<TensorDesc> tq, tk, tv, to, tdO, tdQ, tdK, tdV, tlse;
  AttnDesc attn;
  SeqDesc seq;
  bool useSeq = false;
  size_t lseBytes = 0;
  size_t wsBytes = 0;
};

inline std::unique_ptr<TensorDesc> descFor(const Placement &p) {
  auto d = std::make_unique<TensorDesc>();
  EXPECT_EQ(d->set(p.host.dtype, p.host.dims, p.host.strides), FLASHATTN_STATUS_SUCCESS) << lastError();
  return d;
}

inline std::unique_ptr<Setup> build(const BwdCase &c) {
  auto s = std::make_unique<Setup>();
  s->c = c;
  fa_ref::Problem &r = s->ref;
  const int64_t batch = c.ragged() ? int64_t(c.raggedQ.size()) : c.batch;
  r.batch = batch;
  r.heads = c.heads;
  r.kvHeads = c.kvHeads;
  r.headDim = c.headDim;
  r.headDimV = c.dimV();
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
  std::vector<float> sinks;
  if (c.sinks) {
    std::uniform_real_distribution<double> u(-2.0, 2.0);
    for (int64_t h = 0; h < c.heads; ++h) sinks.push_back(float(h % 4 == 1 ? 30.0 : u(rng)));
    r.sinks.assign(sinks.begin(), sinks.end());
  }
  s->q = randomValues(rng, r.qSize(), c.dtype, c.inputScale);
  s->k = randomValues(rng, r.kSize(), c.dtype, c.inputScale);
  s->v = randomValues(rng, r.vSize(), c.dtype, c.inputScale);
  s->dO = randomValues(rng, r.oSize(), c.dtype, 1.0);

  const Order dOOrder = c.order == Order::BHSD ? Order::BSHD : Order::BHSD;
  s->pq = makePlacement(c, c.dtype, c.heads, false, c.headDim, c.order, c.rowPad);
  s->pk = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  s->pv = makePlacement(c, c.dtype, c.kvHeads, true, c.dimV(), c.order, c.rowPad);
  s->po = makePlacement(c, c.dtype, c.heads, false, c.dimV(), c.order, c.rowPad);
  s->pdO = makePlacement(c, c.dtype, c.heads, false, c.dimV(), dOOrder, c.dOPad);
  s->pdQ = makePlacement(c, c.dtype, c.heads, false, c.headDim, c.order, c.rowPad);
  s->pdK = makePlacement(c, c.dtype, c.kvHeads, true, c.headDim, c.order, c.rowPad);
  s->pdV = makePlacement(c, c.dtype, c.kvHeads, true, c.dimV(), c.order, c.rowPad);
  fill(s->pq, s->q, c.heads, c.sq, c.headDim);
  fill(s->pk, s->k, c.kvHeads, c.sk, c.headDim);
  fill(s->pv, s->v, c.kvHeads, c.sk, c.dimV());
  fill(s->pdO, s->dO, c.heads, c.sq, c.dimV());
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
  if (c.sinks) {
    s->dsinks = DeviceBuffer(sinks.data(), sinks.size() * 4);
    s->ddSinks = DeviceBuffer(sinks.size() * 4);
    EXPECT_EQ(flashAttnSetAttentionSinks(s->attn, s->dsinks.get<float>()), FLASHATTN_STATUS_SUCCESS);
    EXPECT_EQ(flashAttnSetAttentionSinksGradient(s->attn, s->ddSinks.get<float>()), FLASHATTN_STATUS_SUCCESS);
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

inline flashAttnSeqDescriptor_t seqOf(const Setup &s) { return s.useSeq ? flashAttnSeqDescriptor_t(s.seq) : nullptr; }

// Forward through the library: O and LSE as a user's backward would receive them.
inline void runForward(Handle &h, Setup &s) {
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

// The workspace from the query that sees the gradients' descriptors (exact for any gradient strides); it must never
// be smaller than the query without them, and equal to it when no gradient needs staging more than its tensor.
inline void prepareBackward(Handle &h, Setup &s) {
  size_t plain = 0;
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSize(h, s.attn, seqOf(s), *s.tq, *s.tk, *s.tv, *s.to, *s.tlse, &plain),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  ASSERT_EQ(flashAttnBackwardGetWorkspaceSizeWithGradients(h, s.attn, seqOf(s), *s.tq, *s.tk, *s.tv, *s.to, *s.tdO,
                                                           *s.tlse, *s.tdQ, *s.tdK, *s.tdV, &s.wsBytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  EXPECT_GE(s.wsBytes, plain);
  s.dws = DeviceBuffer(s.wsBytes);
}

inline flashAttnStatus_t enqueueBackward(Handle &h, Setup &s) {
  return flashAttnBackward(h, s.attn, seqOf(s), *s.tq, s.dq.ptr, *s.tk, s.dk.ptr, *s.tv, s.dv.ptr, *s.to, s.dout.ptr,
                           *s.tdO, s.ddO.ptr, *s.tlse, s.dlse.get<float>(), *s.tdQ, s.ddQ.ptr, *s.tdK, s.ddK.ptr,
                           *s.tdV, s.ddV.ptr, s.dws.ptr, s.wsBytes);
}

inline void poisonGradients(Setup &s) {
  s.ddQ.poison();
  s.ddK.poison();
  s.ddV.poison();
  if (s.c.sinks) s.ddSinks.poison();
}

inline std::vector<uint8_t> gradientBytes(const Setup &s) {
  std::vector<uint8_t> all = s.ddQ.raw();
  const auto k = s.ddK.raw(), v = s.ddV.raw();
  all.insert(all.end(), k.begin(), k.end());
  all.insert(all.end(), v.begin(), v.end());
  if (s.c.sinks) {
    const auto ds = s.ddSinks.raw();
    all.insert(all.end(), ds.begin(), ds.end());
  }
  return all;
}

// What CheckSupport says for the case's shape: the kernel description, or "refused: " and the last error.
inline std::string describeBackward(Handle &h, Setup &s) {
  char text[512] = {};
  int32_t deterministic = -1;
  const flashAttnStatus_t st = flashAttnCheckSupport(h, FLASHATTN_OP_BACKWARD, s.attn, seqOf(s), *s.tq, *s.tk, *s.tv,
                                                     *s.to, text, sizeof text, &deterministic);
  return st == FLASHATTN_STATUS_SUCCESS ? std::string(text) : "refused: " + lastError();
}

// Forward, then backward on NaN-poisoned gradients, checked against the float64 oracle with the 3x relative gate
// and the gradient normwise rule; the oracle's two passes run beside the GPU work.
inline void runAndCheckAgainstOracle(Handle &h, const BwdCase &c, Setup &s) {
  auto exact = std::async(std::launch::async, [&] {
    std::vector<double> dq, dk, dv, ds;
    fa_ref::backward(s.ref, s.q, s.k, s.v, s.dO, dq, dk, dv, fa_ref::Rounding::None, &ds);
    return std::vector<std::vector<double>>{dq, dk, dv, ds};
  });
  auto lowp = std::async(std::launch::async, [&] {
    std::vector<double> dq, dk, dv, ds;
    fa_ref::backward(s.ref, s.q, s.k, s.v, s.dO, dq, dk, dv, roundingOf(c.dtype), &ds);
    return std::vector<std::vector<double>>{dq, dk, dv, ds};
  });
  // FP16/BF16: the same arithmetic rounded where the kernels round, for the gradients' normwise floor (the Hopper
  // kernels round dS without the softmax scale).
  const bool lowStorage = c.dtype != FLASHATTN_DATA_FP32;
  const bool dsUnscaled = describeBackward(h, s).find("cuda.bwd.wgmma") != std::string::npos;
  auto kernelRounding = std::async(std::launch::async, [&] {
    std::vector<double> dq, dk, dv;
    if (lowStorage)
      fa_ref::backwardKernelRounding(s.ref, s.q, s.k, s.v, s.dO, dq, dk, dv, roundingOf(c.dtype), dsUnscaled);
    return std::vector<std::vector<double>>{dq, dk, dv};
  });
  runForward(h, s);
  prepareBackward(h, s);
  poisonGradients(s);
  ASSERT_EQ(enqueueBackward(h, s), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  s.ddQ.download(s.pdQ.host);
  s.ddK.download(s.pdK.host);
  s.ddV.download(s.pdV.host);
  const std::vector<double> got[3] = {extract(s.pdQ, c.heads, c.sq, c.headDim),
                                      extract(s.pdK, c.kvHeads, c.sk, c.headDim),
                                      extract(s.pdV, c.kvHeads, c.sk, c.dimV())};
  const auto ref = exact.get();
  const auto lp = lowp.get();
  const auto kr = kernelRounding.get();
  const char *names[3] = {"dQ", "dK", "dV"};
  for (int g = 0; g < 3; ++g) {
    const double tol =
        std::max(storageNormTolerance(c.dtype, lp[size_t(g)], ref[size_t(g)]),
                 lowStorage ? kernelRoundingNormTolerance(kr[size_t(g)], ref[size_t(g)]) : 0.0);
    const fa_ref::Gate gate = fa_ref::checkGates(got[g], ref[size_t(g)], lp[size_t(g)], 3.0, tol);
    worst().note(typeName(c.dtype), c.name + " " + names[g], gate);
    EXPECT_TRUE(gate.pass) << c.name << " " << names[g] << ": " << gate.describe();
  }
  if (c.sinks) {
    // The forward with sinks (every forward family the chooser or the pinned portable set picks) against the oracle.
    std::vector<double> refO, refLse, lpO, lpLse;
    fa_ref::forward(s.ref, s.q, s.k, s.v, refO, refLse);
    fa_ref::forward(s.ref, s.q, s.k, s.v, lpO, lpLse, roundingOf(c.dtype));
    s.dout.download(s.po.host);
    const std::vector<double> gotO = extract(s.po, c.heads, c.sq, c.dimV());
    const fa_ref::Gate gateO = fa_ref::checkGates(gotO, refO, lpO, 2.0, fa_ref::normTolerance(roundingOf(c.dtype)));
    EXPECT_TRUE(gateO.pass) << c.name << " forward O with sinks: " << gateO.describe();
    std::vector<float> lse(s.lseBytes / 4);
    FA_CUDA_CHECK(cudaMemcpy(lse.data(), s.dlse.ptr, s.lseBytes, cudaMemcpyDeviceToHost));
    const double lseTol = lseTolerance(c.dtype, refLse);
    int64_t lseChecked = 0;
    for (int64_t b = 0, token = 0; b < s.ref.batch; ++b)
      for (int64_t i = 0; i < s.ref.seqQ(b); ++i, ++token)
        for (int64_t h = 0; h < c.heads; ++h) {
          const double want = refLse[size_t((b * c.heads + h) * c.sq + i)];
          const double got = c.ragged() ? lse[size_t(token * c.heads + h)] : lse[size_t((b * c.heads + h) * c.sq + i)];
          ASSERT_LE(std::fabs(got - want), lseTol) << c.name << " LSE with sinks (b " << b << ", h " << h << ", i "
                                                   << i << "): " << got << ", oracle " << want;
          ++lseChecked;
        }
    EXPECT_GT(lseChecked, 0);
    std::vector<float> ds(size_t(c.heads));
    FA_CUDA_CHECK(cudaMemcpy(ds.data(), s.ddSinks.ptr, ds.size() * 4, cudaMemcpyDeviceToHost));
    const std::vector<double> gotDs(ds.begin(), ds.end());
    // The normwise gate: dSinks weighs each row by exp(s - LSE) with the LSE the forward stored, whose error (within
    // lseTolerance) the storage-rounded oracle does not model, so its max-error figure is no bound here.
    const double tol = storageNormTolerance(c.dtype, lp[3], ref[3]);
    const fa_ref::Gate gate = fa_ref::checkGates(gotDs, ref[3], lp[3], 3.0, tol);
    worst().note(typeName(c.dtype), c.name + " dSinks", gate);
    EXPECT_TRUE(gate.finite && gate.normwise <= tol) << c.name << " dSinks: " << gate.describe();
  }
}

// gtest parameter names from BwdCase::name (letters, digits and '_').
inline std::string caseName(const ::testing::TestParamInfo<BwdCase> &info) {
  std::string n = info.param.name;
  for (char &ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// The backward captured in a graph on a non-blocking stream and replayed once into NaN-poisoned gradients; the handle
// is back on the default stream afterwards.
inline void runBackwardFromGraph(Handle &h, Setup &s) {
  cudaStream_t stream = nullptr;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_EQ(flashAttnSetStream(h, stream), FLASHATTN_STATUS_SUCCESS);
  poisonGradients(s);
  flashAttnStatus_t captured = FLASHATTN_STATUS_INTERNAL_ERROR;
  captureAndReplay(stream, [&] { captured = enqueueBackward(h, s); });
  EXPECT_EQ(captured, FLASHATTN_STATUS_SUCCESS) << lastError();
  ASSERT_EQ(flashAttnSetStream(h, nullptr), FLASHATTN_STATUS_SUCCESS);
  FA_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The backward captured in a graph on a non-blocking stream and replayed writes dK and dV bitwise equal to eager
// (each CTA owns its keys) and dQ equal up to the order of its unordered FP32 additions. CheckSupport's description
// must contain `kernel`.
inline void expectGraphReplayMatchesEager(const BwdCase &c, const std::string &kernel) {
  Handle h(FLASHATTN_BACKEND_CUDA);
  auto s = build(c);
  EXPECT_NE(describeBackward(h, *s).find(kernel), std::string::npos) << describeBackward(h, *s);
  runForward(h, *s);
  prepareBackward(h, *s);
  poisonGradients(*s);
  ASSERT_EQ(enqueueBackward(h, *s), FLASHATTN_STATUS_SUCCESS) << lastError();
  FA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  const std::vector<uint8_t> eagerK = s->ddK.raw(), eagerV = s->ddV.raw();
  s->ddQ.download(s->pdQ.host);
  const std::vector<double> eagerQ = extract(s->pdQ, c.heads, c.sq, c.headDim);
  // The eager gradients (written into NaN-poisoned buffers) must be finite everywhere, or comparing the replay with
  // them would accept a backward that writes nothing (or NaN) both times.
  s->ddK.download(s->pdK.host);
  s->ddV.download(s->pdV.host);
  const std::vector<double> eagerDK = extract(s->pdK, c.kvHeads, c.sk, c.headDim);
  const std::vector<double> eagerDV = extract(s->pdV, c.kvHeads, c.sk, c.dimV());
  for (size_t i = 0; i < eagerQ.size(); ++i)
    ASSERT_TRUE(std::isfinite(eagerQ[i])) << "eager dQ[" << i << "] is not finite";
  for (size_t i = 0; i < eagerDK.size(); ++i)
    ASSERT_TRUE(std::isfinite(eagerDK[i])) << "eager dK[" << i << "] is not finite";
  for (size_t i = 0; i < eagerDV.size(); ++i)
    ASSERT_TRUE(std::isfinite(eagerDV[i])) << "eager dV[" << i << "] is not finite";

  runBackwardFromGraph(h, *s);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(s->ddK.raw() == eagerK) << "graph replay dK differs from eager";
  EXPECT_TRUE(s->ddV.raw() == eagerV) << "graph replay dV differs from eager";
  s->ddQ.download(s->pdQ.host);
  const std::vector<double> replayQ = extract(s->pdQ, c.heads, c.sq, c.headDim);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < eagerQ.size(); ++i) {
    ASSERT_TRUE(std::isfinite(replayQ[i])) << "graph replay dQ[" << i << "] is not finite";
    diff = std::max(diff, std::fabs(replayQ[i] - eagerQ[i]));
    norm = std::max(norm, std::fabs(eagerQ[i]));
  }
  EXPECT_LE(diff, 1e-2 * norm) << "graph replay dQ differs from eager beyond atomic-order rounding";
}

}  // namespace fa_test::backward_harness
