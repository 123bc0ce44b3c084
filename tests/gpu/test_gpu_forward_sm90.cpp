// SPDX-License-Identifier: BSD-3-Clause
// The Hopper forward family (src/cuda/kernels/forward_sm90) through the public API on a CUDA handle: on an sm90 device
// the chooser must pick it (flashAttnCheckSupport's description names "cuda.fwd.wgmma") for FP16/BF16 at every head
// dim up to 256 (64/128/192/256 natively, the others zero-padded to the next), softcap included, and its results must
// pass both gates of docs/testing.md against the float64 oracle (relative to attention
// computed in the storage precision, and normwise), the LSE gate, NaN-poisoned outputs, untouched padding, bitwise
// repeatability and graph-capture replay. Buffers that are not 16-byte aligned must still give the right answer (the
// launch falls back to the portable kernel).
//
// On other GPUs the cases still run (on whatever kernel serves them) but the family assertions are skipped.
// FLASHATTN_TEST_SLICE=edge runs the small edge shapes only, for the sanitizers. A case whose instance this build left
// out (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS; on sm90 the wgmma instance it is meant for) is left out and counted.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace {

using fa_test::DeviceBuffer;
using fa_test::HostTensor;
using fa_test::check;
using fa_test::deviceIsSm90;
using fa_test::edgeSliceOnly;
using fa_test::Family;
using fa_test::roundingOf;

struct Sm90Case {
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t headDim = 128;
  int64_t batch = 1, heads = 1, kvHeads = 1, sq = 1, sk = 1;
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  bool bshd = false;
  bool ragged = false;
  std::vector<int64_t> lenQ, lenK;  // ragged lengths per sequence
  std::vector<int64_t> usedK;       // dense per-sequence KV lengths (seqlensK); empty = off
  bool broadcastKv = false;         // one stored KV head, head stride 0
  bool withLse = true;
  double valueScale = 1.0;
  bool misaligned = false;  // every data pointer 2 bytes past a 16-byte boundary
  float softcap = 0.f;      // the tensor-map kernels' logit transform
  int alibi = 0;            // the same: 0 off, 1 slopes [heads], 2 [batch, heads]

  std::string name() const {
    char text[400];
    std::snprintf(text, sizeof text,
                  "%s d%lld b%lld h%lld/%lld sq%lld sk%lld mask%d window(%lld,%lld) softcap%g alibi%d %s%s%s%s%s%s x%g",
                  fa_test::typeName(dtype), (long long)headDim, (long long)batch, (long long)heads,
                  (long long)kvHeads, (long long)sq, (long long)sk, int(mask),
                  (long long)windowLeft, (long long)windowRight, double(softcap), alibi, bshd ? "BSHD" : "BHSD", ragged ? " ragged" : "",
                  usedK.empty() ? "" : " seqlensK", broadcastKv ? " kv-broadcast" : "", withLse ? "" : " no-LSE",
                  misaligned ? " misaligned" : "", valueScale);
    return text;
  }
  // What the wgmma family serves (the rest of the API runs on the portable kernels): softcap needs tensor-map loads,
  // which a broadcast KV head (head stride 0) does not have.
  bool servedBySm90() const {
    return headDim % 8 == 0 && headDim <= 256 && !((softcap > 0.f || alibi != 0) && broadcastKv);
  }
};

// The wgmma instance a head dim runs on: 64, 128, 192, 256, and those between zero-padded on the next one up.
int64_t wgmmaInstanceFor(int64_t headDim) {
  return headDim <= 64 ? 64 : headDim <= 128 ? 128 : headDim <= 192 ? 192 : 256;
}

// Whether this build has what the case runs on: a portable forward instance as wide as its head dim (for what the
// wgmma family leaves to the portable one, and a misaligned launch's fallback) and, on sm90, the wgmma instance the
// case is meant for.
bool builtFor(const Sm90Case &c, bool sm90) {
  if (!fa_test::builtAtLeast(Family::Forward, c.dtype, c.headDim)) return false;
  return !sm90 || !c.servedBySm90() ||
         fa_test::builtInstance(Family::ForwardSm90, c.dtype, wgmmaInstanceFor(c.headDim));
}

// Element offsets of (sequence b, head h, row r) in a Q- or K-shaped tensor of this case.
struct Geometry {
  bool ragged = false;
  std::vector<int64_t> cu;
  int64_t batch = 0, head = 0, row = 0;
  int64_t at(int64_t b, int64_t h, int64_t r) const {
    return ragged ? (cu[size_t(b)] + r) * row + h * head : b * batch + h * head + r * row;
  }
};

// A Q/O-shaped (storedHeads = heads) or K/V-shaped tensor; `lead` extra elements in front give misaligned data.
HostTensor makeTensor(const Sm90Case &c, int64_t heads, int64_t storedHeads, int64_t rows,
                      const std::vector<int64_t> &cu, Geometry *g) {
  g->ragged = c.ragged;
  g->cu = cu;
  std::vector<int64_t> dims, strides;
  if (c.ragged) {
    g->row = storedHeads * c.headDim;
    g->head = storedHeads == 1 && heads > 1 ? 0 : c.headDim;
    dims = {std::max<int64_t>(cu.back(), 1), heads, c.headDim};
    strides = {g->row, g->head, 1};
  } else {
    if (c.bshd) {
      g->batch = rows * storedHeads * c.headDim;
      g->head = c.headDim;
      g->row = storedHeads * c.headDim;
    } else {
      g->batch = storedHeads * rows * c.headDim;
      g->head = rows * c.headDim;
      g->row = c.headDim;
    }
    if (storedHeads == 1 && heads > 1) g->head = 0;
    dims = {c.batch, heads, rows, c.headDim};
    strides = {g->batch, g->head, g->row, 1};
  }
  return HostTensor(c.dtype, dims, strides);
}

struct Run {
  Sm90Case c;
  fa_ref::Problem problem;
  std::vector<double> q, k, v, out, lse;
  flashAttnStatus_t status = FLASHATTN_STATUS_SUCCESS;
  std::string message;
  std::string description;
  bool repeatBitwiseEqual = true;
  bool paddingUntouched = true;
  bool notBuilt = false;  // left out: no instance for it in this build (not run)
};

constexpr int64_t kMisalignElements = 1;  // 2 bytes: a valid element address that is not 16-byte aligned

Run runOnGpu(const Sm90Case &c, uint64_t seed, flashAttnHandle_t handle) {
  Run run;
  run.c = c;
  std::mt19937_64 rng(seed);
  fa_ref::Problem &p = run.problem;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kvHeads = c.broadcastKv ? c.heads : c.kvHeads;
  p.headDim = p.headDimV = c.headDim;
  p.maxSq = c.sq;
  p.maxSk = c.sk;
  p.softcap = c.softcap;
  p.mask = fa_ref::Mask(int(c.mask));
  p.windowLeft = c.windowLeft;
  p.windowRight = c.windowRight;
  std::vector<int64_t> cuQ{0}, cuK{0};
  if (c.ragged) {
    p.sq = c.lenQ;
    p.sk = c.lenK;
    for (int64_t b = 0; b < c.batch; ++b) {
      cuQ.push_back(cuQ.back() + c.lenQ[size_t(b)]);
      cuK.push_back(cuK.back() + c.lenK[size_t(b)]);
    }
  } else if (!c.usedK.empty()) {
    p.sk = c.usedK;
  }
  const std::vector<float> slopes =
      c.alibi == 0 ? std::vector<float>{} : fa_test::randomAlibiSlopes(rng, c.alibi == 1 ? c.heads : c.batch * c.heads, p);
  const int64_t storedKv = c.broadcastKv ? 1 : c.kvHeads;
  const int64_t kvHeadsDesc = c.broadcastKv ? c.heads : c.kvHeads;
  run.q = fa_test::randomValues(rng, p.qSize(), c.dtype, c.valueScale);
  const std::vector<double> kStored =
      fa_test::randomValues(rng, size_t(c.batch * storedKv * c.sk * c.headDim), c.dtype, c.valueScale);
  const std::vector<double> vStored =
      fa_test::randomValues(rng, size_t(c.batch * storedKv * c.sk * c.headDim), c.dtype, c.valueScale);
  // The oracle sees p.kvHeads heads (the stored one repeated when broadcasting).
  run.k.resize(p.kSize());
  run.v.resize(p.vSize());
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < p.kvHeads; ++h)
      for (int64_t j = 0; j < c.sk * c.headDim; ++j) {
        const size_t from = size_t((b * storedKv + (c.broadcastKv ? 0 : h)) * c.sk * c.headDim + j);
        run.k[size_t((b * p.kvHeads + h) * c.sk * c.headDim + j)] = kStored[from];
        run.v[size_t((b * p.kvHeads + h) * c.sk * c.headDim + j)] = vStored[from];
      }

  Geometry gq, gk;
  HostTensor tq = makeTensor(c, c.heads, c.heads, c.sq, cuQ, &gq);
  HostTensor tk = makeTensor(c, kvHeadsDesc, storedKv, c.sk, cuK, &gk);
  HostTensor tv = tk;
  HostTensor to = tq;
  // Every K/V slot no sequence uses holds NaN: reading one would poison the output.
  tk.fillNaN();
  tv.fillNaN();
  auto rows = [&](int64_t b, bool query) {
    if (c.ragged) return query ? c.lenQ[size_t(b)] : c.lenK[size_t(b)];
    if (!query && !c.usedK.empty()) return c.usedK[size_t(b)];
    return query ? c.sq : c.sk;
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rows(b, true); ++r)
        for (int64_t x = 0; x < c.headDim; ++x)
          fa_test::storeElement(tq.bytes.data(), c.dtype, gq.at(b, h, r) + x,
                                run.q[size_t(((b * c.heads + h) * c.sq + r) * c.headDim + x)]);
    for (int64_t h = 0; h < storedKv; ++h)
      for (int64_t r = 0; r < rows(b, false); ++r)
        for (int64_t x = 0; x < c.headDim; ++x) {
          const size_t from = size_t(((b * storedKv + h) * c.sk + r) * c.headDim + x);
          fa_test::storeElement(tk.bytes.data(), c.dtype, gk.at(b, h, r) + x, kStored[from]);
          fa_test::storeElement(tv.bytes.data(), c.dtype, gk.at(b, h, r) + x, vStored[from]);
        }
  }
  // O: zeros everywhere except NaN on every output element, so unwritten outputs and stray writes both show.
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rows(b, true); ++r)
        for (int64_t x = 0; x < c.headDim; ++x) fa_test::storeElement(to.bytes.data(), c.dtype, gq.at(b, h, r) + x, NAN);

  // Device copies, optionally shifted by kMisalignElements so no data pointer is 16-byte aligned.
  const size_t lead = c.misaligned ? size_t(kMisalignElements) * fa_test::elementSize(c.dtype) : 0;
  auto upload = [&](const HostTensor &t) {
    std::vector<uint8_t> bytes(lead, 0);
    bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
    return DeviceBuffer(bytes.data(), bytes.size());
  };
  DeviceBuffer bq = upload(tq), bk = upload(tk), bv = upload(tv), bo = upload(to);
  auto data = [&](const DeviceBuffer &b) { return static_cast<void *>(static_cast<uint8_t *>(b.ptr) + lead); };

  fa_test::TensorDesc dq(tq), dk(tk), dv(tv), dout(to), dlse;
  const int64_t lseElements = c.ragged ? std::max<int64_t>(cuQ.back(), 1) * c.heads : c.batch * c.heads * c.sq;
  if (c.ragged)
    check(dlse.set(FLASHATTN_DATA_FP32, {std::max<int64_t>(cuQ.back(), 1), c.heads}, {c.heads, 1}), "LSE desc");
  else
    check(dlse.set(FLASHATTN_DATA_FP32, {c.batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}), "LSE desc");
  DeviceBuffer blse(size_t(lseElements) * 4);
  std::vector<int32_t> cuQ32(cuQ.begin(), cuQ.end()), cuK32(cuK.begin(), cuK.end());
  std::vector<int32_t> used32(c.usedK.begin(), c.usedK.end());
  DeviceBuffer bcuQ(cuQ32.data(), cuQ32.size() * 4), bcuK(cuK32.data(), cuK32.size() * 4);
  DeviceBuffer bused(used32.data(), used32.size() * 4), bslopes(slopes.data(), slopes.size() * 4);

  fa_test::AttnDesc attn;
  const float scale = float(1.0 / std::sqrt(double(c.headDim)));
  p.scale = double(scale);
  check(flashAttnSetAttentionScale(attn, scale), "scale");
  check(flashAttnSetAttentionMask(attn, c.mask), "mask");
  check(flashAttnSetAttentionWindow(attn, c.windowLeft, c.windowRight), "window");
  check(flashAttnSetAttentionSoftcap(attn, c.softcap), "softcap");
  if (c.alibi != 0) check(flashAttnSetAttentionAlibiSlopes(attn, bslopes.get<float>(), c.alibi == 2 ? 1 : 0), "alibi");
  fa_test::SeqDesc seq;
  flashAttnSeqDescriptor_t seqDesc = nullptr;
  if (c.ragged) {
    check(flashAttnSetSeqRagged(seq, c.batch, bcuQ.get<int32_t>(), bcuK.get<int32_t>(), c.sq, c.sk), "ragged");
    seqDesc = seq;
  } else if (!c.usedK.empty()) {
    check(flashAttnSetSeqKvLengths(seq, c.batch, bused.get<int32_t>()), "seqlensK");
    seqDesc = seq;
  }
  flashAttnTensorDescriptor_t lseDesc = c.withLse ? static_cast<flashAttnTensorDescriptor_t>(dlse) : nullptr;
  float *lsePtr = c.withLse ? blse.get<float>() : nullptr;

  char description[512] = {};
  run.status = flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, attn, seqDesc, dq, dk, dv, dout, description,
                                     sizeof description, nullptr);
  run.description = description;
  size_t workspaceBytes = 0;
  if (run.status == FLASHATTN_STATUS_SUCCESS)
    run.status = flashAttnForwardGetWorkspaceSize(handle, attn, seqDesc, dq, dk, dv, dout, lseDesc, &workspaceBytes);
  if (run.status != FLASHATTN_STATUS_SUCCESS) {
    run.message = fa_test::lastError();
    return run;
  }
  DeviceBuffer workspace(workspaceBytes);
  std::vector<uint8_t> firstO, firstLse;
  for (int repeat = 0; repeat < 2; ++repeat) {
    blse.poison();
    run.status = flashAttnForward(handle, attn, seqDesc, dq, data(bq), dk, data(bk), dv, data(bv), dout, data(bo),
                                  lseDesc, lsePtr, workspace.ptr, workspaceBytes);
    if (run.status != FLASHATTN_STATUS_SUCCESS) {
      run.message = fa_test::lastError();
      return run;
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    if (repeat == 0) {
      firstO = bo.raw();
      firstLse = blse.raw();
      // Re-poison the outputs so the second run has to write every element again.
      DeviceBuffer fresh = upload(to);
      FA_CUDA_CHECK(cudaMemcpy(bo.ptr, fresh.ptr, bo.bytes, cudaMemcpyDeviceToDevice));
    } else {
      run.repeatBitwiseEqual = bo.raw() == firstO && (!c.withLse || blse.raw() == firstLse);
    }
  }
  // Outside the output elements O keeps its initial bytes (zeros; the lead bytes too).
  const size_t es = fa_test::elementSize(c.dtype);
  for (size_t i = 0; i < firstO.size(); i += es) {
    const bool isOutput = i >= lead && std::isnan(fa_test::loadElement(to.bytes.data(), c.dtype, int64_t((i - lead) / es)));
    if (!isOutput && std::any_of(firstO.begin() + long(i), firstO.begin() + long(i + es), [](uint8_t x) { return x != 0; })) {
      run.paddingUntouched = false;
      break;
    }
  }
  std::memcpy(to.bytes.data(), firstO.data() + lead, to.bytes.size());
  std::vector<float> lseHost(static_cast<size_t>(lseElements));
  std::memcpy(lseHost.data(), firstLse.data(), lseHost.size() * 4);
  run.out.assign(p.oSize(), 0.0);
  run.lse.assign(p.lseSize(), -INFINITY);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rows(b, true); ++r) {
        for (int64_t x = 0; x < c.headDim; ++x)
          run.out[size_t(((b * c.heads + h) * c.sq + r) * c.headDim + x)] =
              fa_test::loadElement(to.bytes.data(), c.dtype, gq.at(b, h, r) + x);
        if (c.withLse)
          run.lse[size_t((b * c.heads + h) * c.sq + r)] =
              lseHost[size_t(c.ragged ? (cuQ[size_t(b)] + r) * c.heads + h : (b * c.heads + h) * c.sq + r)];
      }
  return run;
}

struct Verdict {
  bool pass = true;
  bool skipped = false;
  std::string detail;
  fa_ref::Gate o, lse;
};

Verdict judge(const Run &run, bool sm90) {
  Verdict v;
  if (run.notBuilt) {
    v.skipped = true;
    return v;
  }
  if (run.status != FLASHATTN_STATUS_SUCCESS) {
    v.pass = false;
    v.detail = std::string(flashAttnGetErrorString(run.status)) + ": " + run.message;
    return v;
  }
  const bool wgmma = run.description.find("cuda.fwd.wgmma") != std::string::npos;
  if (sm90 && run.c.servedBySm90() != wgmma) {
    v.pass = false;
    v.detail += "chooser picked \"" + run.description + "\"; ";
  }
  std::vector<double> ref, refLse, lp, lpLse;
  const fa_ref::Rounding r = roundingOf(run.c.dtype);
  fa_ref::forward(run.problem, run.q, run.k, run.v, ref, refLse);
  fa_ref::forward(run.problem, run.q, run.k, run.v, lp, lpLse, r);
  v.o = fa_ref::checkGates(run.out, ref, lp, 2.0, fa_ref::normTolerance(r));
  if (!v.o.pass) v.pass = false, v.detail += "O: " + v.o.describe() + "; ";
  if (run.c.withLse) {
    // Within 1e-4 of the float64 LSE or 8e-6 of its magnitude when larger: Q.K accumulates in FP32 on the tensor
    // cores, so the largest logit (which LSE follows) carries an error proportional to |Q.K| (fa_test::lseTolerance).
    v.lse = fa_ref::checkLse(run.lse, refLse, fa_test::lseTolerance(run.c.dtype, refLse));
    if (!v.lse.pass) v.pass = false, v.detail += "LSE: " + v.lse.describe() + "; ";
  }
  if (!run.repeatBitwiseEqual) v.pass = false, v.detail += "a repeated run differs bitwise; ";
  if (!run.paddingUntouched) v.pass = false, v.detail += "an element outside O's outputs was written; ";
  return v;
}

struct Worst {
  double normwise = 0, relative = 0, lse = 0;
  int cases = 0, skipped = 0;
};
Worst worst[2];  // fp16, bf16

void runCases(const std::vector<Sm90Case> &cases) {
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  const bool sm90 = deviceIsSm90();
  std::vector<Run> runs;
  runs.reserve(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!builtFor(cases[i], sm90)) {
      Run left;
      left.c = cases[i];
      left.notBuilt = true;
      runs.push_back(left);
      continue;
    }
    runs.push_back(runOnGpu(cases[i], 0x90a00000u + i * 104729u, handle));
  }
  std::vector<Verdict> verdicts(runs.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&]() {
      for (size_t i; (i = next++) < runs.size();) verdicts[i] = judge(runs[i], sm90);
    });
  for (auto &t : pool) t.join();
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_TRUE(verdicts[i].pass) << runs[i].c.name() << " [" << runs[i].description << "]: " << verdicts[i].detail;
    Worst &w = worst[runs[i].c.dtype == FLASHATTN_DATA_FP16 ? 0 : 1];
    if (verdicts[i].skipped) {
      ++w.skipped;
      continue;
    }
    if (runs[i].status != FLASHATTN_STATUS_SUCCESS) continue;
    w.normwise = std::max(w.normwise, verdicts[i].o.normwise);
    w.relative = std::max(w.relative, verdicts[i].o.maxErr / (verdicts[i].o.maxErrLp + 1e-5));
    w.lse = std::max(w.lse, verdicts[i].lse.maxErr);
    ++w.cases;
  }
}

const flashAttnDataType_t kTypes[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16};
// The instances (64, 128, 192, 256) and head dims between them (96 on 128, 160 on 192: zero-padded columns; 80 and 96
// on 128 take its kernel whose S product contracts over 96 columns, 80 with 16 zero columns inside them).
const int64_t kHeadDims[] = {64, 80, 96, 128, 160, 192, 256};

std::vector<Sm90Case> edgeCases() {
  std::vector<Sm90Case> cases;
  for (flashAttnDataType_t t : kTypes)
    for (int64_t d : kHeadDims) {
      Sm90Case c;
      c.dtype = t;
      c.headDim = d;
      c.heads = 2;
      c.kvHeads = 1;
      c.sq = 3;
      c.sk = 5;
      cases.push_back(c);  // one partial tile in both directions
      c.sq = 130;
      c.sk = 67;
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;  // sq > sk: the first 63 rows see nothing
      c.bshd = true;
      cases.push_back(c);
      Sm90Case r;
      r.dtype = t;
      r.headDim = d;
      r.ragged = true;
      r.batch = 4;
      r.heads = 2;
      r.kvHeads = 2;
      r.lenQ = {5, 0, 70, 1};
      r.lenK = {0, 9, 130, 3};  // zero-length sequences on both sides
      r.sq = 70;
      r.sk = 130;
      cases.push_back(r);
      Sm90Case w;
      w.dtype = t;
      w.headDim = d;
      w.batch = 2;
      w.heads = 2;
      w.kvHeads = 2;
      w.sq = 65;
      w.sk = 200;
      w.usedK = {170, 0};
      w.windowLeft = 5;
      w.windowRight = 0;
      cases.push_back(w);
      w.windowLeft = -1;  // the same with softcap and ALiBi: the logit-transform kernel, its V tail by cp.async
      w.softcap = 10.f;
      w.alibi = 2;
      cases.push_back(w);
      Sm90Case m;
      m.dtype = t;
      m.headDim = d;
      m.heads = 2;
      m.kvHeads = 2;
      m.sq = 77;
      m.sk = 150;
      m.misaligned = true;
      cases.push_back(m);
    }
  return cases;
}

std::vector<Sm90Case> gridCases() {
  std::vector<Sm90Case> cases;
  std::mt19937_64 rng(90);
  int index = 0;
  for (flashAttnDataType_t t : kTypes)
    for (int64_t d : kHeadDims) {
      auto add = [&](Sm90Case c) {
        c.dtype = t;
        c.headDim = d;
        ++index;
        c.valueScale = index % 5 == 0 ? 5.0 : 1.0;
        c.withLse = index % 7 != 3;
        cases.push_back(c);
      };
      Sm90Case c;
      c.batch = 2, c.heads = 6, c.kvHeads = 6, c.sq = 1, c.sk = 1;
      add(c);
      c = Sm90Case{};
      c.batch = 2, c.heads = 6, c.kvHeads = 2, c.sq = 113, c.sk = 203, c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT;
      c.bshd = true;
      add(c);
      c = Sm90Case{};
      c.batch = 2, c.heads = 6, c.kvHeads = 1, c.sq = 239, c.sk = 1, c.broadcastKv = true;
      add(c);
      c = Sm90Case{};
      std::uniform_int_distribution<int64_t> w(-1, 300);
      c.heads = 6, c.kvHeads = 1, c.sq = 1023, c.sk = 1024, c.windowLeft = w(rng), c.windowRight = w(rng);
      add(c);
      c = Sm90Case{};
      c.heads = 2, c.kvHeads = 2, c.sq = 1024, c.sk = 1023, c.windowLeft = 0, c.windowRight = 0, c.bshd = true;
      add(c);
      for (flashAttnMaskMode_t mask : {FLASHATTN_MASK_CAUSAL_TOP_LEFT, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT}) {
        c = Sm90Case{};
        c.sq = 2048, c.sk = 2048, c.mask = mask;
        add(c);
        c = Sm90Case{};  // seqQ > seqK: bottom-right leaves the first 800 rows empty
        c.heads = 2, c.kvHeads = 1, c.sq = 1500, c.sk = 700, c.mask = mask, c.bshd = true;
        add(c);
        c = Sm90Case{};
        c.heads = 2, c.kvHeads = 2, c.sq = 640, c.sk = 1500, c.mask = mask;
        add(c);
      }
      c = Sm90Case{};
      c.ragged = true, c.batch = 5, c.heads = 4, c.kvHeads = 2;
      c.lenQ = {0, 300, 17, 129, 1};
      c.lenK = {40, 0, 17, 400, 333};
      c.sq = 300, c.sk = 400, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      add(c);
      c = Sm90Case{};
      c.batch = 3, c.heads = 3, c.kvHeads = 1, c.sq = 200, c.sk = 700, c.usedK = {700, 0, 333};
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.bshd = true;
      add(c);
      c = Sm90Case{};
      c.batch = 2, c.heads = 6, c.kvHeads = 2, c.sq = 512, c.sk = 256, c.softcap = 20.f;
      add(c);
      c = Sm90Case{};
      c.batch = 2, c.heads = 4, c.kvHeads = 2, c.sq = 300, c.sk = 777, c.alibi = 1, c.usedK = {777, 500};
      c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, c.bshd = true;
      add(c);
      c = Sm90Case{};
      c.ragged = true, c.batch = 3, c.heads = 4, c.kvHeads = 1, c.softcap = 5.f, c.alibi = 2;
      c.lenQ = {70, 1, 200};
      c.lenK = {300, 5, 129};
      c.sq = 200, c.sk = 300, c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      add(c);
    }
  return cases;
}

TEST(GpuForwardSm90, ChooserPicksWgmmaOnSm90) {
  if (!deviceIsSm90()) GTEST_SKIP() << "not an sm90 device";
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  fa_test::TensorDesc q, k, v, o;
  const int64_t dims[] = {64, 96, 128, 256};
  int checked = 0;
  for (flashAttnDataType_t t : kTypes)
    for (int64_t d : dims) {
      if (!fa_test::partBuilt(Family::ForwardSm90, t, wgmmaInstanceFor(d))) continue;
      ++checked;
      const std::vector<int64_t> shape{2, 4, 300, d}, strides{4 * 300 * d, 300 * d, d, 1};
      ASSERT_EQ(q.set(t, shape, strides), FLASHATTN_STATUS_SUCCESS);
      ASSERT_EQ(k.set(t, shape, strides), FLASHATTN_STATUS_SUCCESS);
      ASSERT_EQ(v.set(t, shape, strides), FLASHATTN_STATUS_SUCCESS);
      ASSERT_EQ(o.set(t, shape, strides), FLASHATTN_STATUS_SUCCESS);
      char text[512] = {};
      int32_t deterministic = 0;
      const flashAttnStatus_t s = flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, nullptr, nullptr, q, k, v, o,
                                                        text, sizeof text, &deterministic);
      ASSERT_EQ(s, FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
      const std::string description = text;
      EXPECT_NE(description.find("cuda.fwd.wgmma sm90a"), std::string::npos) << description;
      EXPECT_NE(description.find("tile"), std::string::npos) << description;
      EXPECT_NE(description.find("tensor-map producer"), std::string::npos) << description;
      EXPECT_NE(description.find("fp32 accumulate"), std::string::npos) << description;
      if (d == 96) {
        EXPECT_NE(description.find("(headDim 96 zero-padded)"), std::string::npos) << description;
        EXPECT_NE(description.find("S = Q K^T over 96 columns"), std::string::npos) << description;
      } else {
        EXPECT_EQ(description.find("S = Q K^T over"), std::string::npos) << description;
      }
      EXPECT_EQ(deterministic, 1);
    }
  // Row strides that are not whole 16-byte vectors stay on the portable kernels.
  if (!fa_test::partBuiltAtLeast(Family::ForwardSm90, FLASHATTN_DATA_BF16, 64)) {
    if (checked == 0) GTEST_SKIP() << "no forward_sm90 instance this test asks for: " << fa_test::kNotInThisBuild;
    return;
  }
  const std::vector<int64_t> shape{1, 2, 64, 64}, padded{2 * 64 * 65, 64 * 65, 65, 1};
  ASSERT_EQ(q.set(FLASHATTN_DATA_BF16, shape, padded), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(k.set(FLASHATTN_DATA_BF16, shape, padded), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(v.set(FLASHATTN_DATA_BF16, shape, padded), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(o.set(FLASHATTN_DATA_BF16, shape, padded), FLASHATTN_STATUS_SUCCESS);
  char text[512] = {};
  ASSERT_EQ(flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, nullptr, nullptr, q, k, v, o, text, sizeof text,
                                  nullptr),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  EXPECT_EQ(std::string(text).find("cuda.fwd.wgmma"), std::string::npos) << text;
  EXPECT_NE(std::string(text).find("wgmma kernel not used: Q row stride"), std::string::npos) << text;
}

// The plan's tile is the kernel's: a d64 causal problem up to 1k and a d256 one up to 512 take the instance's short
// tile, longer or unmasked ones the main tile (the grid runs both through the chooser).
TEST(GpuForwardSm90, ShortSequencesTakeTheShortTile) {
  if (!deviceIsSm90()) GTEST_SKIP() << "not an sm90 device";
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  struct Want {
    int64_t d, s;
    flashAttnMaskMode_t mask;
    const char *tile;
  };
  const Want wants[] = {{64, 1024, FLASHATTN_MASK_CAUSAL_TOP_LEFT, "tile 128x128 "},
                        {64, 1025, FLASHATTN_MASK_CAUSAL_TOP_LEFT, "tile 192x128 "},
                        {64, 512, FLASHATTN_MASK_NONE, "tile 192x128 "},
                        {256, 512, FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, "tile 128x64 "},
                        {256, 512, FLASHATTN_MASK_NONE, "tile 128x80 "},
                        {256, 513, FLASHATTN_MASK_CAUSAL_TOP_LEFT, "tile 128x80 "}};
  int checked = 0;
  for (const Want &w : wants) {
    if (!fa_test::partBuilt(Family::ForwardSm90, FLASHATTN_DATA_BF16, w.d)) continue;
    ++checked;
    fa_test::TensorDesc q, k, v, o;
    const std::vector<int64_t> shape{2, 4, w.s, w.d}, strides{4 * w.s * w.d, w.s * w.d, w.d, 1};
    ASSERT_EQ(q.set(FLASHATTN_DATA_BF16, shape, strides), FLASHATTN_STATUS_SUCCESS);
    ASSERT_EQ(k.set(FLASHATTN_DATA_BF16, shape, strides), FLASHATTN_STATUS_SUCCESS);
    ASSERT_EQ(v.set(FLASHATTN_DATA_BF16, shape, strides), FLASHATTN_STATUS_SUCCESS);
    ASSERT_EQ(o.set(FLASHATTN_DATA_BF16, shape, strides), FLASHATTN_STATUS_SUCCESS);
    fa_test::AttnDesc attn;
    ASSERT_EQ(flashAttnSetAttentionMask(attn, w.mask), FLASHATTN_STATUS_SUCCESS);
    char text[512] = {};
    const flashAttnStatus_t s =
        flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, attn, nullptr, q, k, v, o, text, sizeof text, nullptr);
    ASSERT_EQ(s, FLASHATTN_STATUS_SUCCESS) << fa_test::lastError();
    EXPECT_NE(std::string(text).find(w.tile), std::string::npos) << "d" << w.d << " S" << w.s << ": " << text;
  }
  if (checked == 0) GTEST_SKIP() << "no forward_sm90 bf16 d64 or d256 instance: " << fa_test::kNotInThisBuild;
}

TEST(GpuForwardSm90, EdgeShapes) { runCases(edgeCases()); }

TEST(GpuForwardSm90, Grid) {
  if (edgeSliceOnly()) GTEST_SKIP() << "FLASHATTN_TEST_SLICE=edge";
  runCases(gridCases());
}

TEST(GpuForwardSm90, GraphReplayMatchesEagerBitwise) {
  fa_test::expectForwardGraphReplayBitwise({FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16}, 333, FLASHATTN_MASK_CAUSAL_TOP_LEFT,
                                           7);
}

// Runs last (gtest keeps declaration order): the worst errors per storage type.
TEST(GpuForwardSm90, ZzSummary) {
  for (int t = 0; t < 2; ++t)
    std::printf("forward_sm90 worst %s over %d cases: normwise %.3g, max|out-ref| / max|lp-ref| %.3g, LSE abs %.3g"
                " (%d cases left out: no instance in this build)\n",
                fa_test::typeName(t == 0 ? FLASHATTN_DATA_FP16 : FLASHATTN_DATA_BF16), worst[t].cases,
                worst[t].normwise, worst[t].relative, worst[t].lse, worst[t].skipped);
  // A grid that ran nothing proves nothing: every storage type this build has instances of must have had cases checked.
  const Family family = deviceIsSm90() ? Family::ForwardSm90 : Family::Forward;
  for (int t = 0; t < 2; ++t) {
    if (fa_test::builtDtype(family, t == 0 ? FLASHATTN_DATA_FP16 : FLASHATTN_DATA_BF16)) {
      EXPECT_GT(worst[t].cases, 0) << "storage type " << t;
    }
  }
}

}  // namespace
