// SPDX-License-Identifier: BSD-3-Clause
// GPU forward through the public API on a FLASHATTN_BACKEND_CUDA handle, against the float64 oracle of
// tests/common/reference.hpp with both gates of docs/testing.md (relative to plain attention in the storage precision,
// and normwise), the LSE gate, NaN-poisoned outputs, untouched padding, bitwise repeatability and graph-capture replay.
//
// The test grid (docs/testing.md) is sampled so the file runs in a few minutes on an H100 (the float64 reference is the
// slow part; it runs on several threads after the GPU runs). FLASHATTN_TEST_SLICE=edge runs a few small edge shapes
// only (tails, empty rows, ragged zero-length sequences), for the sanitizers. A case whose storage type has no forward
// instance as wide as its head dims in this build (FLASHATTN_DTYPES, FLASHATTN_HEAD_DIMS) is left out and counted.
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
using fa_test::edgeSliceOnly;
using fa_test::roundingOf;

struct FwdCase {
  flashAttnDataType_t dtype = FLASHATTN_DATA_BF16;
  int64_t headDim = 64;
  int64_t headDimV = 0;  // of V and O; 0: the same as headDim
  int64_t batch = 1, heads = 1, kvHeads = 1, sq = 1, sk = 1;
  flashAttnMaskMode_t mask = FLASHATTN_MASK_NONE;
  int64_t windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 [heads], 2 [batch, heads]
  fa_test::Order order = fa_test::Order::BHSD;
  int64_t rowPad = 0;
  bool ragged = false;
  std::vector<int64_t> lenQ, lenK;  // ragged: per-sequence lengths
  std::vector<int64_t> usedK;       // dense: per-sequence KV lengths (seqlensK), empty = off
  bool broadcastKv = false;         // one stored KV head with head stride 0 (kvHeads == heads)
  bool withLse = true;
  double valueScale = 1.0;

  int64_t dimV() const { return headDimV > 0 ? headDimV : headDim; }
  std::string name() const {
    char text[512];
    std::snprintf(text, sizeof text,
                  "%s d%lld/%lld b%lld h%lld/%lld sq%lld sk%lld mask%d window(%lld,%lld) softcap%g alibi%d %s pad%lld%s%s%s "
                  "x%g",
                  fa_test::typeName(dtype), (long long)headDim, (long long)dimV(), (long long)batch, (long long)heads, (long long)kvHeads,
                  (long long)sq, (long long)sk, int(mask), (long long)windowLeft, (long long)windowRight, softcap, alibi,
                  order == fa_test::Order::BSHD ? "BSHD" : "BHSD", (long long)rowPad, ragged ? " ragged" : "",
                  usedK.empty() ? "" : " seqlensK", broadcastKv ? " kv-broadcast" : "", valueScale);
    return text;
  }
};

// What one GPU run produced, kept until the reference (on the host, in parallel) has been computed.
struct Run {
  FwdCase c;
  fa_ref::Problem problem;
  std::vector<double> q, k, v;  // canonical inputs (k/v expanded to `heads` KV heads when broadcasting)
  std::vector<double> out, lse; // canonical outputs read back
  flashAttnStatus_t status = FLASHATTN_STATUS_SUCCESS;
  std::string message;
  bool repeatBitwiseEqual = true;
  bool paddingUntouched = true;
  bool notBuilt = false;  // left out: no instance for it in this build (not run)
};

// Offset of element (b, h, r, x) of a Q-shaped (or K-shaped with `heads` heads) tensor in the strided layout.
struct Geometry {
  bool ragged;
  std::vector<int64_t> cu;  // ragged token offsets
  int64_t batchStride, headStride, rowStride;
  int64_t offset(int64_t b, int64_t h, int64_t r) const {
    return ragged ? (cu[size_t(b)] + r) * rowStride + h * headStride : b * batchStride + h * headStride + r * rowStride;
  }
};

// A tensor of `width` columns (headDim for Q and K, dimV() for V and O).
HostTensor makeTensor(const FwdCase &c, int64_t heads, int64_t rows, const std::vector<int64_t> &cu, bool broadcast,
                      int64_t width, Geometry *geometry) {
  const int64_t rowLen = width + c.rowPad;
  const int64_t storedHeads = broadcast ? 1 : heads;
  Geometry g{c.ragged, cu, 0, 0, 0};
  std::vector<int64_t> dims, strides;
  if (c.ragged) {
    g.rowStride = storedHeads * rowLen;
    g.headStride = broadcast ? 0 : rowLen;
    dims = {cu.back() > 0 ? cu.back() : 1, heads, width};
    strides = {g.rowStride, g.headStride, 1};
  } else {
    if (c.order == fa_test::Order::BHSD) {
      g.batchStride = storedHeads * rows * rowLen;
      g.headStride = rows * rowLen;
      g.rowStride = rowLen;
    } else {
      g.batchStride = rows * storedHeads * rowLen;
      g.headStride = rowLen;
      g.rowStride = storedHeads * rowLen;
    }
    if (broadcast) g.headStride = 0;
    dims = {c.batch, heads, rows, width};
    strides = {g.batchStride, g.headStride, g.rowStride, 1};
  }
  *geometry = g;
  return HostTensor(c.dtype, dims, strides);
}

int64_t rowsOf(const FwdCase &c, const std::vector<int64_t> &cu, int64_t b, int64_t dense) {
  return c.ragged ? cu[size_t(b) + 1] - cu[size_t(b)] : dense;
}

void fill(HostTensor &t, const Geometry &g, const FwdCase &c, const std::vector<double> &canon, int64_t heads,
          int64_t storedHeads, int64_t maxRows, const std::vector<int64_t> &cu, int64_t width) {
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < storedHeads; ++h)
      for (int64_t r = 0; r < rowsOf(c, cu, b, maxRows); ++r)
        for (int64_t x = 0; x < width; ++x)
          fa_test::storeElement(t.bytes.data(), c.dtype, g.offset(b, h, r) + x,
                                canon[size_t(((b * heads + h) * maxRows + r) * width + x)]);
}

// Runs one case on the GPU (eager twice, compared bitwise). Inputs are drawn from `seed`.
Run runOnGpu(const FwdCase &c, uint64_t seed, flashAttnHandle_t handle) {
  Run run;
  run.c = c;
  std::mt19937_64 rng(seed);
  fa_ref::Problem &p = run.problem;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kvHeads = c.kvHeads;
  p.headDim = c.headDim;
  p.headDimV = c.dimV();
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
  run.q = fa_test::randomValues(rng, p.qSize(), c.dtype, c.valueScale);
  run.k = fa_test::randomValues(rng, p.kSize(), c.dtype, c.valueScale);
  run.v = fa_test::randomValues(rng, p.vSize(), c.dtype, c.valueScale);
  if (c.broadcastKv) {  // the reference sees the one stored KV head as `heads` identical heads
    const size_t perHead = size_t(c.sk * c.headDim), perHeadV = size_t(c.sk * c.dimV());
    std::vector<double> k(size_t(c.batch * c.heads) * perHead), v(size_t(c.batch * c.heads) * perHeadV);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads; ++h) {
        for (size_t i = 0; i < perHead; ++i) k[size_t(b * c.heads + h) * perHead + i] = run.k[size_t(b) * perHead + i];
        for (size_t i = 0; i < perHeadV; ++i)
          v[size_t(b * c.heads + h) * perHeadV + i] = run.v[size_t(b) * perHeadV + i];
      }
    run.k.swap(k);
    run.v.swap(v);
    p.kvHeads = c.heads;
  }
  const int64_t kvHeadsDesc = c.broadcastKv ? c.heads : c.kvHeads;

  Geometry gq, gk, gv, go;
  const int64_t dimV = c.dimV();
  HostTensor tq = makeTensor(c, c.heads, c.sq, cuQ, false, c.headDim, &gq);
  HostTensor tk = makeTensor(c, kvHeadsDesc, c.sk, cuK, c.broadcastKv, c.headDim, &gk);
  HostTensor tv = makeTensor(c, kvHeadsDesc, c.sk, cuK, c.broadcastKv, dimV, &gv);
  HostTensor to = makeTensor(c, c.heads, c.sq, cuQ, false, dimV, &go);
  // Unused K/V slots (padding, rows past seqlensK) hold NaN: reading them would poison the output.
  tk.fillNaN();
  tv.fillNaN();
  fill(tq, gq, c, run.q, c.heads, c.heads, c.sq, cuQ, c.headDim);
  fill(tk, gk, c, run.k, kvHeadsDesc, c.broadcastKv ? 1 : kvHeadsDesc, c.sk, cuK, c.headDim);
  fill(tv, gv, c, run.v, kvHeadsDesc, c.broadcastKv ? 1 : kvHeadsDesc, c.sk, cuK, dimV);

  fa_test::TensorDesc dq(tq), dk(tk), dv(tv), dout(to);
  const int64_t lseElements = c.ragged ? std::max<int64_t>(cuQ.back(), 1) * c.heads : c.batch * c.heads * c.sq;
  fa_test::TensorDesc dlse;
  if (c.ragged)
    check(dlse.set(FLASHATTN_DATA_FP32, {std::max<int64_t>(cuQ.back(), 1), c.heads}, {c.heads, 1}), "LSE desc");
  else
    check(dlse.set(FLASHATTN_DATA_FP32, {c.batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}), "LSE desc");

  DeviceBuffer bq(tq), bk(tk), bv(tv);
  // O starts as a pattern (zeros) outside the outputs and NaN on every output element.
  HostTensor oInit = to;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rowsOf(c, cuQ, b, c.sq); ++r)
        for (int64_t x = 0; x < dimV; ++x) fa_test::storeElement(oInit.bytes.data(), c.dtype, go.offset(b, h, r) + x, NAN);
  DeviceBuffer bo(oInit);
  DeviceBuffer blse(size_t(lseElements) * 4);
  blse.poison();
  std::vector<int32_t> cuQ32(cuQ.begin(), cuQ.end()), cuK32(cuK.begin(), cuK.end()), used32(c.usedK.begin(), c.usedK.end());
  DeviceBuffer bcuQ(cuQ32.data(), cuQ32.size() * 4), bcuK(cuK32.data(), cuK32.size() * 4);
  DeviceBuffer bused(used32.data(), used32.size() * 4), bslopes(slopes.data(), slopes.size() * 4);

  fa_test::AttnDesc attn;
  // The scale the library would default to, rounded to float once and given to both sides: with x5 inputs (logits
  // ~100) the float-vs-double scale alone would differ by more than the FP32 gate.
  const float scale = float(1.0 / std::sqrt(double(c.headDim)));
  p.scale = double(scale);
  check(flashAttnSetAttentionScale(attn, scale), "scale");
  check(flashAttnSetAttentionMask(attn, c.mask), "mask");
  check(flashAttnSetAttentionWindow(attn, c.windowLeft, c.windowRight), "window");
  check(flashAttnSetAttentionSoftcap(attn, c.softcap), "softcap");
  if (c.alibi != 0) check(flashAttnSetAttentionAlibiSlopes(attn, bslopes.get<float>(), c.alibi == 2 ? 1 : 0), "alibi");
  fa_test::SeqDesc seq;
  bool useSeq = false;
  if (c.ragged) {
    check(flashAttnSetSeqRagged(seq, c.batch, bcuQ.get<int32_t>(), bcuK.get<int32_t>(), c.sq, c.sk), "ragged");
    useSeq = true;
  } else if (!c.usedK.empty()) {
    check(flashAttnSetSeqKvLengths(seq, c.batch, bused.get<int32_t>()), "seqlensK");
    useSeq = true;
  }
  flashAttnSeqDescriptor_t seqDesc = useSeq ? static_cast<flashAttnSeqDescriptor_t>(seq) : nullptr;
  flashAttnTensorDescriptor_t lseDesc = c.withLse ? static_cast<flashAttnTensorDescriptor_t>(dlse) : nullptr;
  float *lsePtr = c.withLse ? blse.get<float>() : nullptr;

  size_t workspaceBytes = 0;
  run.status = flashAttnForwardGetWorkspaceSize(handle, attn, seqDesc, dq, dk, dv, dout, lseDesc, &workspaceBytes);
  if (run.status != FLASHATTN_STATUS_SUCCESS) {
    run.message = fa_test::lastError();
    return run;
  }
  DeviceBuffer workspace(workspaceBytes);
  auto forward = [&]() {
    return flashAttnForward(handle, attn, seqDesc, dq, bq.ptr, dk, bk.ptr, dv, bv.ptr, dout, bo.ptr, lseDesc, lsePtr,
                            workspace.ptr, workspaceBytes);
  };
  run.status = forward();
  if (run.status != FLASHATTN_STATUS_SUCCESS) {
    run.message = fa_test::lastError();
    return run;
  }
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> firstO = bo.raw(), firstLse = blse.raw();
  // Re-poison O and LSE as before the first run, so the second run has to write every element again.
  FA_CUDA_CHECK(cudaMemcpy(bo.ptr, oInit.bytes.data(), oInit.bytes.size(), cudaMemcpyHostToDevice));
  blse.poison();
  check(forward(), "second forward");
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  run.repeatBitwiseEqual = bo.raw() == firstO && blse.raw() == firstLse;

  // Everything of O that is not an output element keeps its initial bytes.
  for (size_t i = 0; i < firstO.size(); i += fa_test::elementSize(c.dtype)) {
    const int64_t index = int64_t(i / fa_test::elementSize(c.dtype));
    const double before = fa_test::loadElement(oInit.bytes.data(), c.dtype, index);
    if (!std::isnan(before) && std::memcmp(&firstO[i], &oInit.bytes[i], fa_test::elementSize(c.dtype)) != 0) {
      run.paddingUntouched = false;
      break;
    }
  }

  std::memcpy(to.bytes.data(), firstO.data(), firstO.size());
  std::vector<float> lseHost(static_cast<size_t>(lseElements));
  std::memcpy(lseHost.data(), firstLse.data(), lseHost.size() * 4);
  run.out.assign(p.oSize(), 0.0);
  run.lse.assign(p.lseSize(), -INFINITY);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t r = 0; r < rowsOf(c, cuQ, b, c.sq); ++r) {
        for (int64_t x = 0; x < dimV; ++x)
          run.out[size_t(((b * c.heads + h) * c.sq + r) * dimV + x)] =
              fa_test::loadElement(to.bytes.data(), c.dtype, go.offset(b, h, r) + x);
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

Verdict judge(const Run &run) {
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
  std::vector<double> ref, refLse, lp, lpLse;
  const fa_ref::Rounding r = roundingOf(run.c.dtype);
  fa_ref::forward(run.problem, run.q, run.k, run.v, ref, refLse);
  fa_ref::forward(run.problem, run.q, run.k, run.v, lp, lpLse, r);
  v.o = fa_ref::checkGates(run.out, ref, lp, 2.0, fa_ref::normTolerance(r));
  v.pass = v.o.pass;
  if (!v.o.pass) v.detail += "O: " + v.o.describe() + "; ";
  if (run.c.withLse) {
    // LSE within 1e-4 of the float64 value, or 8e-6 of its magnitude for FP16/BF16 (fa_test::lseTolerance says why).
    v.lse = fa_ref::checkLse(run.lse, refLse, fa_test::lseTolerance(run.c.dtype, refLse));
    v.pass = v.pass && v.lse.pass;
    if (!v.lse.pass) v.detail += "LSE: " + v.lse.describe() + "; ";
  }
  if (!run.repeatBitwiseEqual) {
    v.pass = false;
    v.detail += "a repeated run differs bitwise; ";
  }
  if (!run.paddingUntouched) {
    v.pass = false;
    v.detail += "an element outside O's outputs was written; ";
  }
  return v;
}

// The worst errors seen per storage type, printed at the end of the suite.
struct Worst {
  double normwise = 0, relative = 0, lse = 0;
  int cases = 0;
  int skipped = 0;  // left out: no instance in this build
};
Worst worst[3];

void runCases(const std::vector<FwdCase> &cases) {
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  std::vector<Run> runs;
  runs.reserve(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!fa_test::builtAtLeast(fa_test::Family::Forward, cases[i].dtype, cases[i].headDim, cases[i].dimV())) {
      Run left;
      left.c = cases[i];
      left.notBuilt = true;
      runs.push_back(left);
      continue;
    }
    runs.push_back(runOnGpu(cases[i], 0x5eed0000 + i * 7919, handle));
  }
  std::vector<Verdict> verdicts(runs.size());
  std::atomic<size_t> next{0};
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&]() {
      for (size_t i; (i = next++) < runs.size();) verdicts[i] = judge(runs[i]);
    });
  for (auto &t : pool) t.join();
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_TRUE(verdicts[i].pass) << runs[i].c.name() << ": " << verdicts[i].detail;
    Worst &w = worst[int(runs[i].c.dtype)];
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

const flashAttnDataType_t kTypes[] = {FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP16, FLASHATTN_DATA_FP32};

std::vector<FwdCase> edgeCases() {
  std::vector<FwdCase> cases;
  for (flashAttnDataType_t t : kTypes) {
    FwdCase c;
    c.dtype = t;
    c.headDim = 64;
    c.heads = 2;
    c.kvHeads = 1;
    c.sq = 3;
    c.sk = 5;
    cases.push_back(c);  // tails in both directions
    c.headDim = 40;      // padded onto the next instance
    c.sq = 130;
    c.sk = 67;
    c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;  // sq > sk: fully masked rows
    c.order = fa_test::Order::BSHD;
    c.rowPad = 3;  // rows not 16-byte multiples: the element-wise load path
    cases.push_back(c);
    FwdCase r;
    r.dtype = t;
    r.headDim = 128;
    r.ragged = true;
    r.batch = 4;
    r.heads = 2;
    r.kvHeads = 2;
    r.lenQ = {5, 0, 70, 1};
    r.lenK = {0, 9, 130, 3};  // zero-length sequences on both sides
    r.sq = 70;
    r.sk = 130;
    cases.push_back(r);
    FwdCase m;  // MLA-style head dims (Q/K 192, V/O 128) with tails and fully masked rows
    m.dtype = t;
    m.headDim = 192;
    m.headDimV = 128;
    m.heads = 4;
    m.kvHeads = 2;
    m.sq = 77;
    m.sk = 45;
    m.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    cases.push_back(m);
    m.headDim = 59;  // neither a multiple of 8 nor equal: element loads, a partial last column pair
    m.headDimV = 37;
    m.mask = FLASHATTN_MASK_NONE;
    m.sq = 33;
    m.sk = 130;
    cases.push_back(m);
    FwdCase w;
    w.dtype = t;
    w.headDim = 256;
    w.batch = 2;
    w.heads = 2;
    w.kvHeads = 2;
    w.sq = 65;
    w.sk = 64;
    w.usedK = {17, 0};
    w.windowLeft = 5;
    w.windowRight = 0;
    w.softcap = 10.f;
    w.alibi = 2;
    cases.push_back(w);
  }
  return cases;
}

// The test grid, sampled: every (seqQ, seqK) pair and every head dim appears for every type, the features rotate.
std::vector<FwdCase> gridCases() {
  std::vector<FwdCase> cases;
  std::mt19937_64 rng(2026);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},     {1, 3},     {2, 1},     {239, 1},   {799, 3},    {3, 513},    {113, 203},  {128, 217}, {113, 211},
      {108, 256}, {256, 512}, {512, 256}, {640, 128}, {1023, 1024}, {1024, 1023}, {2048, 2048}, {4224, 4224}};
  const std::vector<int64_t> headDims = {32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256};
  const std::vector<std::pair<int64_t, int64_t>> headPairs = {{6, 6}, {6, 2}, {6, 1}};
  int index = 0;
  for (flashAttnDataType_t t : kTypes)
    for (size_t di = 0; di < headDims.size(); ++di)
      for (size_t si = 0; si < shapes.size(); ++si) {
        ++index;
        const int64_t sq = shapes[si].first, sk = shapes[si].second;
        const bool tiny = sq * sk <= 4096;
        const bool large = sq * sk >= 2048 * 2048;
        // Every tiny shape; a third of the rest; the two largest shapes once per type (d128 and d64).
        if (large) {
          if (headDims[di] != (sq == 2048 ? 128 : 64)) continue;
        } else if (!tiny && (index * 7 + int(si)) % 3 != 0) {
          continue;
        }
        FwdCase c;
        c.dtype = t;
        c.headDim = headDims[di];
        c.sq = sq;
        c.sk = sk;
        const auto hp = headPairs[size_t(index) % headPairs.size()];
        c.heads = hp.first;
        c.kvHeads = hp.second;
        c.batch = sq * sk > 100000 ? 1 : 2;
        if (sq * sk > 300000) {  // keep the float64 reference affordable
          c.heads = 2;
          c.kvHeads = hp.second == 6 ? 2 : 1;
        }
        if (large) c.heads = 1, c.kvHeads = 1;
        switch (index % 5) {
          case 1: c.mask = FLASHATTN_MASK_CAUSAL_TOP_LEFT; break;
          case 2: c.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
          case 3: {
            std::uniform_int_distribution<int64_t> w(-1, 300);
            c.windowLeft = w(rng);
            c.windowRight = w(rng);
            break;
          }
          case 4: c.windowLeft = 0, c.windowRight = 0; break;
          default: break;
        }
        c.order = index % 2 == 0 ? fa_test::Order::BSHD : fa_test::Order::BHSD;
        c.softcap = index % 7 == 0 ? 15.f : 0.f;
        c.alibi = index % 11 == 0 ? 1 : index % 13 == 0 ? 2 : 0;
        c.broadcastKv = index % 4 == 0 && c.kvHeads == 1;
        c.valueScale = index % 9 == 0 ? 5.0 : 1.0;
        c.rowPad = index % 19 == 0 ? 8 : index % 23 == 0 ? 1 : 0;
        c.withLse = index % 5 != 4;
        cases.push_back(c);
      }
  return cases;
}

std::vector<FwdCase> raggedCases() {
  std::vector<FwdCase> cases;
  for (flashAttnDataType_t t : kTypes)
    for (int64_t d : {64, 128, 256}) {
      FwdCase r;
      r.dtype = t;
      r.headDim = d;
      r.ragged = true;
      r.batch = 5;
      r.heads = 4;
      r.kvHeads = 2;
      r.lenQ = {0, 300, 17, 129, 1};
      r.lenK = {40, 0, 17, 400, 333};
      r.sq = 300;
      r.sk = 400;
      r.mask = d == 128 ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : d == 64 ? FLASHATTN_MASK_NONE : FLASHATTN_MASK_CAUSAL_TOP_LEFT;
      cases.push_back(r);
      FwdCase p;
      p.dtype = t;
      p.headDim = d;
      p.batch = 3;
      p.heads = 3;
      p.kvHeads = 1;
      p.sq = 200;
      p.sk = 700;
      p.usedK = {700, 0, 333};
      p.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      p.order = fa_test::Order::BSHD;
      cases.push_back(p);
    }
  return cases;
}

// Q/K and V/O head dims apart: DeepSeek-style 192/128, a narrower and a wider V, widths that are not multiples of 8,
// through masks, windows, GQA, ragged batches and per-sequence KV lengths.
std::vector<FwdCase> distinctHeadDimCases() {
  std::vector<FwdCase> cases;
  const std::vector<std::pair<int64_t, int64_t>> dims = {{192, 128}, {128, 192}, {64, 128}, {40, 24}, {59, 72}, {256, 8}};
  int index = 0;
  for (flashAttnDataType_t t : kTypes)
    for (const auto &d : dims) {
      ++index;
      FwdCase c;
      c.dtype = t;
      c.headDim = d.first;
      c.headDimV = d.second;
      c.batch = 2;
      c.heads = 4;
      c.kvHeads = index % 2 == 0 ? 1 : 4;
      c.sq = index % 3 == 0 ? 1 : 300;
      c.sk = 517;
      c.mask = index % 3 == 1 ? FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT : FLASHATTN_MASK_NONE;
      if (index % 5 == 2) c.windowLeft = 100, c.windowRight = 3;
      c.order = index % 2 == 0 ? fa_test::Order::BSHD : fa_test::Order::BHSD;
      c.softcap = index % 4 == 3 ? 20.f : 0.f;
      c.alibi = index % 7 == 4 ? 1 : 0;
      if (index % 4 == 1) c.usedK = {517, 200};
      cases.push_back(c);
      FwdCase r = c;  // ragged, one empty sequence
      r.usedK.clear();
      r.ragged = true;
      r.batch = 3;
      r.lenQ = {129, 0, 64};
      r.lenK = {300, 17, 1000};
      r.sq = 129;
      r.sk = 1000;
      r.mask = FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
      cases.push_back(r);
    }
  return cases;
}

TEST(GpuForward, EdgeShapes) { runCases(edgeCases()); }

TEST(GpuForward, DistinctHeadDims) {
  if (edgeSliceOnly()) GTEST_SKIP() << "FLASHATTN_TEST_SLICE=edge";
  runCases(distinctHeadDimCases());
}

TEST(GpuForward, Grid) {
  if (edgeSliceOnly()) GTEST_SKIP() << "FLASHATTN_TEST_SLICE=edge";
  runCases(gridCases());
}

TEST(GpuForward, RaggedAndPerSequenceKvLengths) {
  if (edgeSliceOnly()) GTEST_SKIP() << "FLASHATTN_TEST_SLICE=edge";
  runCases(raggedCases());
}

TEST(GpuForward, UnsupportedConfigurationsSayWhy) {
  fa_test::Handle handle(FLASHATTN_BACKEND_CUDA);
  // A V/O head dim above 256: valid for the API, wider than every forward kernel.
  fa_test::TensorDesc q, k, v, o;
  ASSERT_EQ(q.set(FLASHATTN_DATA_BF16, {1, 2, 16, 64}, {2048, 1024, 64, 1}), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(k.set(FLASHATTN_DATA_BF16, {1, 2, 16, 64}, {2048, 1024, 64, 1}), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(v.set(FLASHATTN_DATA_BF16, {1, 2, 16, 512}, {16384, 8192, 512, 1}), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(o.set(FLASHATTN_DATA_BF16, {1, 2, 16, 512}, {16384, 8192, 512, 1}), FLASHATTN_STATUS_SUCCESS);
  char text[512] = {};
  const flashAttnStatus_t s =
      flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, nullptr, nullptr, q, k, v, o, text, sizeof text, nullptr);
  EXPECT_EQ(s, FLASHATTN_STATUS_NOT_SUPPORTED) << "headDimV 512 with headDim 64: " << text;
  EXPECT_NE(fa_test::lastError().find("headDimV 512"), std::string::npos) << fa_test::lastError();
  // The description of a served configuration names the family, tile, accumulator and determinism.
  if (!fa_test::partBuiltAtLeast(fa_test::Family::Forward, FLASHATTN_DATA_BF16, 64)) return;
  ASSERT_EQ(v.set(FLASHATTN_DATA_BF16, {1, 2, 16, 64}, {2048, 1024, 64, 1}), FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(o.set(FLASHATTN_DATA_BF16, {1, 2, 16, 64}, {2048, 1024, 64, 1}), FLASHATTN_STATUS_SUCCESS);
  int32_t deterministic = 0;
  ASSERT_EQ(flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, nullptr, nullptr, q, k, v, o, text, sizeof text,
                                  &deterministic),
            FLASHATTN_STATUS_SUCCESS)
      << fa_test::lastError();
  const std::string description = text;
  EXPECT_NE(description.find("fwd"), std::string::npos) << description;
  EXPECT_NE(description.find("tile"), std::string::npos) << description;
  EXPECT_NE(description.find("fp32 accumulate"), std::string::npos) << description;
  EXPECT_EQ(deterministic, 1);
}

TEST(GpuForward, GraphReplayMatchesEagerBitwise) {
  fa_test::expectForwardGraphReplayBitwise({FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP32}, 300,
                                           FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT, 99);
}

// Runs last (gtest runs tests in declaration order): the summary line per storage type.
TEST(GpuForward, ZzSummary) {
  for (int t = 0; t < 3; ++t) {
    const char *name = fa_test::typeName(flashAttnDataType_t(t));  // worst[] is indexed by the enum value
    std::printf("forward worst %s over %d cases: normwise %.3g, max|out-ref| / max|lp-ref| %.3g, LSE abs %.3g"
                " (%d cases left out: no instance in this build)\n",
                name, worst[t].cases, worst[t].normwise, worst[t].relative, worst[t].lse, worst[t].skipped);
  }
  // A grid that ran nothing proves nothing: every storage type this build has forward instances of must have had
  // cases checked.
  for (int t = 0; t < 3; ++t) {
    if (fa_test::builtDtype(fa_test::Family::Forward, flashAttnDataType_t(t))) {
      EXPECT_GT(worst[t].cases, 0) << fa_test::typeName(flashAttnDataType_t(t));
    }
  }
}

}  // namespace
