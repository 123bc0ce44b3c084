// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target over the public API on the HOST backend. Each input is read as a small, coherent attention
// problem (dense, ragged or paged; GQA, layouts, masks, windows, softcap, ALiBi, extreme scales) that a few of the
// input's bytes then perturb (a dimension, stride, rank, type or index-array entry set to a boundary value such as
// 0, 2^23 + 1, 2^31 - 1, 2^40 or 2^62). The problem goes through the size query, CheckSupport and the operation on
// real host buffers, and these must hold (a violation aborts, which libFuzzer reports with the input):
//   - no crash, out-of-bounds access, leak or undefined behaviour (the build adds ASan and UBSan);
//   - a failed call leaves every output and the workspace bitwise as they were (canary bytes);
//   - the size query and the operation agree: the operation fails with the query's status (the backward, which
//     also takes gradient descriptors, fails at all), or, where the query succeeded, uses no byte of the workspace
//     past the size it returned;
//   - CheckSupport accepts what the size query accepts (forward and decode, whose descriptors it sees in full);
//   - a successful forward, decode or merge passes the float64 oracle's gates (tests/common/reference.hpp); a
//     successful backward writes finite gradients.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

namespace {

[[noreturn]] void violated(const char *what, const std::string &detail) {
  std::fprintf(stderr, "fuzz_api: %s: %s\n", what, detail.c_str());
  std::abort();
}

// What the inputs exercised, printed when the fuzzer exits (FLASHATTN_FUZZ_STATS=1): a corpus that never reaches a
// successful run or the oracle would pass every check without testing much.
struct Stats {
  long inputs = 0, refusedByQuery = 0, ran = 0, ranAndRefused = 0, oracleChecks[4] = {0, 0, 0, 0};
  ~Stats() {
    if (!std::getenv("FLASHATTN_FUZZ_STATS")) return;
    std::fprintf(stderr,
                 "fuzz_api: %ld inputs, %ld refused by the size query, %ld operations run (%ld refused there), "
                 "float64 checks: forward %ld, backward (finite) %ld, decode %ld, merge %ld\n",
                 inputs, refusedByQuery, ran, ranAndRefused, oracleChecks[0], oracleChecks[1], oracleChecks[2],
                 oracleChecks[3]);
  }
} g_stats;

class Reader {
 public:
  Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  int below(int n) { return n <= 1 ? 0 : byte() % n; }
  bool chance(int percent) { return below(100) < percent; }
  template <typename T, size_t N>
  T pick(const T (&values)[N]) { return values[size_t(below(int(N)))]; }

 private:
  const uint8_t *data_;
  size_t size_;
  size_t at_ = 0;
};

// Values at the edges of what the validation must catch: products of two of them pass 2^63.
const int64_t kBoundary[] = {0, 1, 2, 3, 7, 16, (int64_t(1) << 23) + 1, (int64_t(1) << 31) - 1, int64_t(1) << 31,
                             int64_t(1) << 40, (int64_t(1) << 40) + 1, int64_t(1) << 62, -1,
                             std::numeric_limits<int64_t>::max()};

struct Tensor {
  const char *name;
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  std::vector<int64_t> dims, strides;
  bool output = false;
  fa_test::TensorDesc *desc = nullptr;  // set by the run
  std::vector<uint8_t> host;           // the buffer (plus canary slack)
  size_t spanBytes = 0;
};

constexpr size_t kSlack = 64;
constexpr uint8_t kCanary = 0xA5;
constexpr size_t kMaxTensorBytes = size_t(1) << 22;

// The byte span of a tensor, computed independently of the library (in 128 bits), or 0 when it is not addressable.
size_t spanOf(const Tensor &t) {
  __int128 last = 0;
  for (size_t i = 0; i < t.dims.size(); ++i) {
    // Beyond 2^40 the descriptor setter refuses the value (and the sum below could pass 128 bits).
    if (t.dims[i] < 1 || t.strides[i] < 0 || t.dims[i] > (int64_t(1) << 40) || t.strides[i] > (int64_t(1) << 40))
      return 0;
    last += __int128(t.dims[i] - 1) * t.strides[i];
  }
  const __int128 bytes = (last + 1) * __int128(fa_test::elementSize(t.dtype));
  return bytes > __int128(kMaxTensorBytes) ? 0 : size_t(bytes);
}

std::vector<int64_t> packed(const std::vector<int64_t> &dims) {
  std::vector<int64_t> s(dims.size());
  int64_t n = 1;
  for (size_t i = dims.size(); i-- > 0;) s[i] = n, n *= dims[i];
  return s;
}

// A [a, b, c, d] tensor in one of the layouts the API takes: packed, the second and third axes swapped (BSHD), rows
// padded, or (inputs only) the second axis broadcast with stride 0.
std::vector<int64_t> layoutFor(const std::vector<int64_t> &dims, int layout) {
  std::vector<int64_t> s = packed(dims);
  if (dims.size() == 4 && layout == 1) s = {dims[1] * dims[2] * dims[3], dims[3], dims[1] * dims[3], 1};
  if (dims.size() >= 2 && layout == 2) {
    const int64_t pad = dims.back() + 3;
    int64_t n = pad;
    for (size_t i = dims.size() - 1; i-- > 0;) s[i] = n, n *= dims[i];
  }
  return s;
}

struct Problem {
  int op = 0;  // 0 forward, 1 backward, 2 decode, 3 merge
  flashAttnDataType_t dtype = FLASHATTN_DATA_FP32;
  int64_t batch = 1, heads = 1, kvHeads = 1, seqQ = 1, seqK = 1, dim = 1, dimV = 1;
  int seqMode = 0;  // 0 dense, 1 KV lengths, 2 ragged, 3 paged
  std::vector<int32_t> lenQ, lenK, cuQ, cuK, kvLengths, table;
  int64_t maxSeqlenQ = 0, maxSeqlenK = 0, pageSize = 1, pagesPerSeq = 1, numPages = 1;
  float scale = 0, softcap = 0;
  int mask = 0;
  int64_t windowLeft = -1, windowRight = -1;
  std::vector<float> slopes;
  bool slopesPerBatch = false;
  int32_t numChunks = 0;
  int64_t states = 1;
  std::vector<Tensor> tensors;  // forward/decode: Q K V O [LSE]; backward: + dO dQ dK dV; merge: pO pLSE O [LSE]
  std::vector<double> values;   // input values by element (cycled)
};

Tensor *find(Problem &p, const char *name) {
  for (Tensor &t : p.tensors)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

Problem generate(Reader &in) {
  Problem p;
  p.op = in.below(4);
  p.dtype = flashAttnDataType_t(in.below(3));
  p.batch = 1 + in.below(3);
  p.kvHeads = 1 + in.below(2);
  p.heads = p.kvHeads * (1 + in.below(3));
  p.seqQ = p.op == 2 ? 1 + in.below(4) : 1 + in.below(12);
  p.seqK = 1 + in.below(20);
  p.dim = 1 + in.below(16);
  p.dimV = in.chance(80) ? p.dim : 1 + in.below(16);
  const int layout = in.below(3);
  const bool broadcastKv = in.chance(15);
  if (broadcastKv) p.kvHeads = p.heads;
  p.seqMode = in.below(4);
  if (p.op == 3) p.seqMode = 0;
  if (p.seqMode == 2 && p.op == 2) p.seqMode = 1;  // decode takes no ragged Q
  if (p.seqMode == 3 && p.op != 2) p.seqMode = 1;  // only decode takes a paged cache
  const float scales[] = {0.f, 0.f, 0.125f, 0.5f, 1.f, 3.f, 1e6f, std::numeric_limits<float>::max(), 1e-30f};
  p.scale = in.pick(scales);
  p.mask = in.below(3);
  const int64_t windows[] = {-1, -1, 0, 1, 2, 5};
  if (in.chance(30)) p.windowLeft = in.pick(windows), p.windowRight = in.pick(windows);
  const float softcaps[] = {0.f, 0.f, 0.f, 1.5f, 30.f};
  p.softcap = in.pick(softcaps);
  if (in.chance(20)) {
    // Sized for any head count a perturbation may make valid: the slopes' length is the caller's promise, not checked.
    p.slopesPerBatch = in.chance(50);
    p.slopes.resize(64);
    for (float &s : p.slopes) s = 0.125f * float(in.below(9));
  }
  const int32_t chunkCounts[] = {0, 1, 2, 3, 5, 16, 1 << 23, std::numeric_limits<int32_t>::max()};
  p.numChunks = in.pick(chunkCounts);

  const auto qShape = [&](int64_t dimLast) -> std::vector<int64_t> {
    if (p.seqMode == 2) return {p.cuQ.back(), p.heads, dimLast};
    return {p.batch, p.heads, p.seqQ, dimLast};
  };
  if (p.seqMode == 2) {
    p.cuQ = {0};
    p.cuK = {0};
    for (int64_t b = 0; b < p.batch; ++b) {
      p.lenQ.push_back(int32_t(in.below(int(p.seqQ) + 1)));
      p.lenK.push_back(int32_t(in.below(int(p.seqK) + 1)));
      p.cuQ.push_back(p.cuQ.back() + p.lenQ.back());
      p.cuK.push_back(p.cuK.back() + p.lenK.back());
    }
    p.maxSeqlenQ = in.chance(10) ? std::numeric_limits<int32_t>::max() : p.seqQ;
    p.maxSeqlenK = in.chance(10) ? std::numeric_limits<int32_t>::max() : p.seqK;
  }
  if (p.seqMode == 1 || p.seqMode == 3)
    for (int64_t b = 0; b < p.batch; ++b) p.kvLengths.push_back(int32_t(in.below(int(p.seqK) + 1)));
  if (p.seqMode == 3) {
    p.pageSize = 1 + in.below(8);
    p.pagesPerSeq = (p.seqK + p.pageSize - 1) / p.pageSize;
    p.numPages = p.batch * p.pagesPerSeq + in.below(3);
    for (int64_t i = 0; i < p.batch * p.pagesPerSeq; ++i) p.table.push_back(int32_t(i));
    for (size_t i = p.table.size(); i > 1; --i) std::swap(p.table[i - 1], p.table[size_t(in.below(int(i)))]);
  }
  // Tensors with at least one token per dimension: a ragged batch of empty sequences still has a 1-token tensor.
  const int64_t tokensQ = p.seqMode == 2 ? std::max<int64_t>(p.cuQ.back(), 1) : 0;
  const int64_t tokensK = p.seqMode == 2 ? std::max<int64_t>(p.cuK.back(), 1) : 0;
  const auto make = [&](const char *name, flashAttnDataType_t t, std::vector<int64_t> dims, bool output, bool bcast) {
    Tensor x;
    x.name = name;
    x.dtype = t;
    x.dims = dims;
    x.strides = layoutFor(dims, output ? std::min(layout, 2) : layout);
    if (bcast) x.strides[1] = 0;  // the KV-head axis of dense and ragged K/V
    x.output = output;
    p.tensors.push_back(x);
  };
  if (p.op == 3) {
    p.states = 1 + in.below(4);
    make("partialO", FLASHATTN_DATA_FP32, {p.states, p.batch, p.heads, p.seqQ, p.dimV}, false, false);
    make("partialLse", FLASHATTN_DATA_FP32, {p.states, p.batch, p.heads, p.seqQ}, false, false);
    make("O", p.dtype, {p.batch, p.heads, p.seqQ, p.dimV}, true, false);
    if (in.chance(70)) make("LSE", FLASHATTN_DATA_FP32, {p.batch, p.heads, p.seqQ}, true, false);
  } else {
    std::vector<int64_t> q = qShape(p.dim), o = qShape(p.dimV), k, v;
    if (p.seqMode == 2) q[0] = o[0] = tokensQ;
    if (p.seqMode == 2) {
      k = {tokensK, p.kvHeads, p.dim};
      v = {tokensK, p.kvHeads, p.dimV};
    } else if (p.seqMode == 3) {
      k = {p.numPages, p.pageSize, p.kvHeads, p.dim};
      v = {p.numPages, p.pageSize, p.kvHeads, p.dimV};
    } else {
      k = {p.batch, p.kvHeads, p.seqK, p.dim};
      v = {p.batch, p.kvHeads, p.seqK, p.dimV};
    }
    make("Q", p.dtype, q, false, false);
    make("K", p.dtype, k, false, broadcastKv && p.seqMode != 3);
    make("V", p.dtype, v, false, broadcastKv && p.seqMode != 3);
    make("O", p.dtype, o, p.op != 1, false);
    std::vector<int64_t> lse = p.seqMode == 2 ? std::vector<int64_t>{q[0], p.heads}
                                              : std::vector<int64_t>{p.batch, p.heads, p.seqQ};
    if (p.op == 1 || in.chance(70)) make("LSE", FLASHATTN_DATA_FP32, lse, p.op != 1, false);
    if (p.op == 1) {
      make("dO", p.dtype, o, false, false);
      make("dQ", p.dtype, q, true, false);
      make("dK", p.dtype, k, true, false);
      make("dV", p.dtype, v, true, false);
    }
  }
  // Perturbations: each sets one field of one descriptor or index array to a boundary value.
  for (int m = in.below(4); m > 0; --m) {
    const int what = in.below(8);
    Tensor &t = p.tensors[size_t(in.below(int(p.tensors.size())))];
    const size_t axis = size_t(in.below(int(t.dims.size())));
    const int64_t value = in.pick(kBoundary);
    if (what <= 2) t.dims[axis] = value;
    else if (what <= 4) t.strides[axis] = value;
    else if (what == 5 && !p.table.empty()) p.table[size_t(in.below(int(p.table.size())))] = int32_t(value);
    else if (what == 6 && !p.kvLengths.empty()) p.kvLengths[size_t(in.below(int(p.kvLengths.size())))] = int32_t(value);
    else if (what == 7 && !p.cuQ.empty()) p.cuQ[size_t(in.below(int(p.cuQ.size())))] = int32_t(value);
  }
  for (int i = 0; i < 64; ++i) p.values.push_back((in.below(33) - 16) / 8.0);
  return p;
}

// Canonical [b][h][i][d] rows of a Q-like tensor (ragged: token cuQ[b] + i).
double element(const Tensor &t, const std::vector<int64_t> &index) {
  int64_t offset = 0;
  for (size_t i = 0; i < index.size(); ++i) offset += index[i] * t.strides[i];
  return fa_test::loadElement(t.host.data(), t.dtype, offset);
}

// Sequence lengths as the index arrays give them now (a perturbation may have changed an entry and left it valid).
int64_t lengthOf(const std::vector<int32_t> &cu, int64_t b) { return int64_t(cu[size_t(b + 1)]) - cu[size_t(b)]; }

void checkAgainstOracle(const Problem &p) {
  const Tensor &q = p.tensors[0], &k = p.tensors[1], &v = p.tensors[2], &o = p.tensors[3];
  const Tensor *lse = p.tensors.size() > 4 && std::strcmp(p.tensors[4].name, "LSE") == 0 ? &p.tensors[4] : nullptr;
  // Sizes from the descriptors the library accepted, which perturbations may have changed consistently.
  const bool ragged = p.seqMode == 2, paged = p.seqMode == 3;
  const int64_t batch = ragged || paged ? p.batch : q.dims[0];
  fa_ref::Problem r;
  r.batch = batch, r.heads = q.dims[1], r.kvHeads = k.dims[paged ? 2 : 1];
  r.headDim = q.dims.back(), r.headDimV = v.dims.back();
  r.scale = p.scale, r.softcap = p.softcap, r.mask = fa_ref::Mask(p.mask);
  r.windowLeft = p.windowLeft, r.windowRight = p.windowRight;
  if (!p.slopes.empty())
    for (int64_t i = 0; i < r.heads * (p.slopesPerBatch ? batch : 1); ++i) r.alibi.push_back(p.slopes[size_t(i)]);
  const int64_t seqQ = ragged ? 0 : q.dims[2], cacheK = ragged ? 0 : paged ? p.pagesPerSeq * k.dims[1] : k.dims[2];
  for (int64_t b = 0; b < batch; ++b) {
    r.sq.push_back(ragged ? lengthOf(p.cuQ, b) : seqQ);
    r.sk.push_back(ragged ? lengthOf(p.cuK, b) : p.kvLengths.empty() ? cacheK : p.kvLengths[size_t(b)]);
  }
  r.maxSq = std::max<int64_t>(1, *std::max_element(r.sq.begin(), r.sq.end()));
  r.maxSk = std::max<int64_t>(1, *std::max_element(r.sk.begin(), r.sk.end()));
  const int64_t pageSize = paged ? k.dims[1] : 1;
  std::vector<double> cq(r.qSize()), ck(r.kSize()), cv(r.vSize());
  const auto qIndex = [&](int64_t b, int64_t h, int64_t i, int64_t d) -> std::vector<int64_t> {
    if (ragged) return {p.cuQ[size_t(b)] + i, h, d};
    return {b, h, i, d};
  };
  const auto kIndex = [&](int64_t b, int64_t h, int64_t j, int64_t d) -> std::vector<int64_t> {
    if (ragged) return {p.cuK[size_t(b)] + j, h, d};
    if (p.seqMode == 3) return {p.table[size_t(b * p.pagesPerSeq + j / pageSize)], j % pageSize, h, d};
    return {b, h, j, d};
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < r.heads; ++h)
      for (int64_t i = 0; i < r.seqQ(b); ++i)
        for (int64_t d = 0; d < r.headDim; ++d)
          cq[size_t(((b * r.heads + h) * r.maxSq + i) * r.headDim + d)] = element(q, qIndex(b, h, i, d));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < r.kvHeads; ++h)
      for (int64_t j = 0; j < r.seqK(b); ++j) {
        for (int64_t d = 0; d < r.headDim; ++d)
          ck[size_t(((b * r.kvHeads + h) * r.maxSk + j) * r.headDim + d)] = element(k, kIndex(b, h, j, d));
        for (int64_t d = 0; d < r.headDimV; ++d)
          cv[size_t(((b * r.kvHeads + h) * r.maxSk + j) * r.headDimV + d)] = element(v, kIndex(b, h, j, d));
      }
  std::vector<double> ref, refLse, lp, lpLse;
  fa_ref::forward(r, cq, ck, cv, ref, refLse);
  fa_ref::forward(r, cq, ck, cv, lp, lpLse, fa_test::roundingOf(p.dtype));
  std::vector<double> out(ref.size(), 0.0), outLse(refLse.size(), -INFINITY);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < r.heads; ++h)
      for (int64_t i = 0; i < r.seqQ(b); ++i) {
        const size_t row = size_t((b * r.heads + h) * r.maxSq + i);
        for (int64_t d = 0; d < r.headDimV; ++d)
          out[row * size_t(r.headDimV) + size_t(d)] = element(o, qIndex(b, h, i, d));
        if (lse) {
          std::vector<int64_t> at = qIndex(b, h, i, 0);
          at.pop_back();
          outLse[row] = element(*lse, at);
        }
      }
  // Fuzzed problems reach outputs a few units in the last place wide: twice the storage arithmetic's own error there.
  const fa_ref::Gate g = fa_ref::checkGates(out, ref, lp, 2.0, fa_test::storageNormTolerance(p.dtype, lp, ref, 2.0));
  if (!g.pass) violated("O fails the float64 gates", g.describe());
  if (!lse) return;
  for (size_t i = 0; i < refLse.size(); ++i) {
    const double want = refLse[i], got = outLse[i];
    if (std::isinf(double(float(want)))) {
      if (got != double(float(want))) violated("LSE", "row " + std::to_string(i) + ": " + std::to_string(got));
      continue;
    }
    const double allowed = std::max(fa_test::lseTolerance(p.dtype, refLse), std::fabs(want) * 0x1p-23);
    if (!(std::fabs(got - want) <= allowed))
      violated("LSE fails the float64 gate", "row " + std::to_string(i) + ": " + std::to_string(got) + " vs " +
                                                  std::to_string(want));
  }
}

void checkMergeRows(const Problem &p, const Tensor &po, const Tensor &pl, const Tensor &o, const Tensor *lse);

void checkMergeAgainstOracle(const Problem &p) {
  const Tensor &po = p.tensors[0], &pl = p.tensors[1], &o = p.tensors[2];
  const Tensor *lse = p.tensors.size() > 3 ? &p.tensors[3] : nullptr;
  Problem m = p;  // sizes from the accepted descriptors
  m.states = po.dims[0], m.batch = po.dims[1], m.heads = po.dims[2], m.seqQ = po.dims[3], m.dimV = po.dims[4];
  checkMergeRows(m, po, pl, o, lse);
}

void checkMergeRows(const Problem &p, const Tensor &po, const Tensor &pl, const Tensor &o, const Tensor *lse) {
  const int64_t rows = p.batch * p.heads * p.seqQ;
  std::vector<double> cpo(size_t(p.states * rows * p.dimV)), cpl(size_t(p.states * rows)), ref, refLse;
  for (int64_t s = 0; s < p.states; ++s)
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.seqQ; ++i) {
          const size_t row = size_t(s * rows + (b * p.heads + h) * p.seqQ + i);
          cpl[row] = element(pl, {s, b, h, i});
          for (int64_t d = 0; d < p.dimV; ++d) cpo[row * size_t(p.dimV) + size_t(d)] = element(po, {s, b, h, i, d});
        }
  fa_ref::merge(p.states, rows, p.dimV, cpo, cpl, ref, refLse);
  std::vector<double> out(ref.size()), lp(ref.size());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seqQ; ++i) {
        const size_t row = size_t((b * p.heads + h) * p.seqQ + i);
        for (int64_t d = 0; d < p.dimV; ++d) {
          out[row * size_t(p.dimV) + size_t(d)] = element(o, {b, h, i, d});
          lp[row * size_t(p.dimV) + size_t(d)] = fa_ref::roundTo(fa_test::roundingOf(p.dtype), ref[row * size_t(p.dimV) + size_t(d)]);
        }
        if (lse) {
          const double got = element(*lse, {b, h, i}), want = refLse[row];
          if (std::isinf(want) ? got != want : !(std::fabs(got - want) <= std::max(1e-4, std::fabs(want) * 0x1p-23)))
            violated("merge LSE fails the float64 gate", std::to_string(got) + " vs " + std::to_string(want));
        }
      }
  const fa_ref::Gate g = fa_ref::checkGates(out, ref, lp, 2.0, fa_test::storageNormTolerance(p.dtype, lp, ref, 2.0));
  if (!g.pass) violated("merge O fails the float64 gates", g.describe());
}

struct Run {
  flashAttnStatus_t status;
  std::string message;
};

std::string lastError() {
  char buf[512];
  flashAttnGetLastErrorMessage(buf, sizeof buf);
  return buf;
}

void runOne(Reader &in, flashAttnHandle_t handle) {
  Problem p = generate(in);
  // Descriptors; one the setter refuses stays unset, and the call then fails with NOT_INITIALIZED.
  std::vector<fa_test::TensorDesc> descs(p.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    Tensor &t = p.tensors[i];
    t.desc = &descs[i];
    descs[i].set(t.dtype, t.dims, t.strides);
  }
  // Buffers: each tensor's span (its canary slack after it) when it is small enough, else a canary-only stand-in
  // that a call may not touch.
  bool allReal = true;
  for (Tensor &t : p.tensors) {
    t.spanBytes = spanOf(t);
    if (t.spanBytes == 0) allReal = false;
    t.host.assign(t.spanBytes + kSlack, kCanary);
    if (!t.output) {
      const size_t n = t.spanBytes / fa_test::elementSize(t.dtype);
      for (size_t e = 0; e < n; ++e)
        fa_test::storeElement(t.host.data(), t.dtype, int64_t(e), p.values[e % p.values.size()]);
    }
  }
  // Merge partial LSEs: some states empty (-inf), as decode's empty chunks are.
  if (p.op == 3 && p.tensors[1].spanBytes)
    for (size_t e = 0; e < p.tensors[1].spanBytes / 4; e += 3) reinterpret_cast<float *>(p.tensors[1].host.data())[e] = -INFINITY;

  fa_test::AttnDesc attn;
  if (p.scale > 0) flashAttnSetAttentionScale(attn, p.scale);
  flashAttnSetAttentionMask(attn, flashAttnMaskMode_t(p.mask));
  flashAttnSetAttentionWindow(attn, p.windowLeft, p.windowRight);
  flashAttnSetAttentionSoftcap(attn, p.softcap);
  if (!p.slopes.empty()) flashAttnSetAttentionAlibiSlopes(attn, p.slopes.data(), p.slopesPerBatch ? 1 : 0);
  fa_test::SeqDesc seq;
  if (p.seqMode == 2)
    flashAttnSetSeqRagged(seq, p.batch, p.cuQ.data(), p.cuK.data(), p.maxSeqlenQ, p.maxSeqlenK);
  if (p.seqMode == 1 || p.seqMode == 3) flashAttnSetSeqKvLengths(seq, p.batch, p.kvLengths.data());
  if (p.seqMode == 3) flashAttnSetSeqPaged(seq, p.batch, p.table.data(), p.pagesPerSeq);
  flashAttnSeqDescriptor_t seqArg = p.seqMode ? flashAttnSeqDescriptor_t(seq) : nullptr;

  Tensor *Q = find(p, "Q"), *K = find(p, "K"), *V = find(p, "V"), *O = find(p, "O"), *L = find(p, "LSE");
  const auto d = [](Tensor *t) { return t ? flashAttnTensorDescriptor_t(*t->desc) : nullptr; };
  const auto ptr = [](Tensor *t) { return t ? static_cast<void *>(t->host.data()) : nullptr; };

  size_t bytes = 0;
  flashAttnStatus_t sized = FLASHATTN_STATUS_SUCCESS, support = FLASHATTN_STATUS_SUCCESS;
  if (p.op == 0) {
    sized = flashAttnForwardGetWorkspaceSize(handle, attn, seqArg, d(Q), d(K), d(V), d(O), d(L), &bytes);
    support = flashAttnCheckSupport(handle, FLASHATTN_OP_FORWARD, attn, seqArg, d(Q), d(K), d(V), d(O), nullptr, 0,
                                    nullptr);
  } else if (p.op == 1) {
    sized = flashAttnBackwardGetWorkspaceSize(handle, attn, seqArg, d(Q), d(K), d(V), d(O), d(L), &bytes);
    support = flashAttnCheckSupport(handle, FLASHATTN_OP_BACKWARD, attn, seqArg, d(Q), d(K), d(V), d(O), nullptr, 0,
                                    nullptr);
  } else if (p.op == 2) {
    sized = flashAttnDecodeChunkGetWorkspaceSize(handle, attn, seqArg, d(Q), d(K), d(V), d(O), d(L), p.numChunks,
                                                 &bytes);
    support = flashAttnCheckSupport(handle, FLASHATTN_OP_DECODE_CHUNK, attn, seqArg, d(Q), d(K), d(V), d(O), nullptr,
                                    0, nullptr);
  } else {
    Tensor *po = find(p, "partialO"), *pl = find(p, "partialLse");
    sized = flashAttnMergeStatesGetWorkspaceSize(handle, d(po), d(pl), d(O), d(L), &bytes);
    support = flashAttnCheckSupport(handle, FLASHATTN_OP_MERGE_STATES, nullptr, nullptr, d(po), nullptr, nullptr, d(O),
                                    nullptr, 0, nullptr);
  }
  ++g_stats.inputs;
  if (sized != FLASHATTN_STATUS_SUCCESS) ++g_stats.refusedByQuery;
  if ((p.op == 0 || p.op == 2) && sized == FLASHATTN_STATUS_SUCCESS && support != FLASHATTN_STATUS_SUCCESS)
    violated("CheckSupport refuses what the size query accepts", lastError());
  // A run needs real buffers, or a query that failed (the run must then fail the same way, touching nothing).
  if (sized == FLASHATTN_STATUS_SUCCESS && (!allReal || bytes > (size_t(1) << 26))) return;
  // The backward reads O and LSE as a forward writes them: make them so where the forward runs (otherwise they
  // keep their arbitrary values, and only the refusal and canary checks apply).
  bool consistent = false;
  if (p.op == 1 && allReal) {
    size_t forwardBytes = 0;
    if (flashAttnForwardGetWorkspaceSize(handle, attn, seqArg, d(Q), d(K), d(V), d(O), d(L), &forwardBytes) ==
            FLASHATTN_STATUS_SUCCESS &&
        forwardBytes == 0)
      consistent = flashAttnForward(handle, attn, seqArg, d(Q), ptr(Q), d(K), ptr(K), d(V), ptr(V), d(O), ptr(O),
                                    d(L), static_cast<float *>(ptr(L)), nullptr, 0) == FLASHATTN_STATUS_SUCCESS;
  }
  std::vector<uint8_t> workspace((sized == FLASHATTN_STATUS_SUCCESS ? bytes : 0) + 256 + kSlack, kCanary);
  uint8_t *ws = workspace.data() + (256 - reinterpret_cast<uintptr_t>(workspace.data()) % 256) % 256;
  const size_t wsBytes = sized == FLASHATTN_STATUS_SUCCESS ? bytes : 0;
  const std::vector<std::vector<uint8_t>> before = [&] {
    std::vector<std::vector<uint8_t>> b;
    for (const Tensor &t : p.tensors) b.push_back(t.host);
    return b;
  }();
  flashAttnStatus_t ran;
  if (p.op == 0) {
    ran = flashAttnForward(handle, attn, seqArg, d(Q), ptr(Q), d(K), ptr(K), d(V), ptr(V), d(O), ptr(O), d(L),
                           static_cast<float *>(ptr(L)), ws, wsBytes);
  } else if (p.op == 1) {
    ran = flashAttnBackward(handle, attn, seqArg, d(Q), ptr(Q), d(K), ptr(K), d(V), ptr(V), d(O), ptr(O),
                            d(find(p, "dO")), ptr(find(p, "dO")), d(L), static_cast<float *>(ptr(L)),
                            d(find(p, "dQ")), ptr(find(p, "dQ")), d(find(p, "dK")), ptr(find(p, "dK")),
                            d(find(p, "dV")), ptr(find(p, "dV")), ws, wsBytes);
  } else if (p.op == 2) {
    ran = flashAttnDecodeChunk(handle, attn, seqArg, d(Q), ptr(Q), d(K), ptr(K), d(V), ptr(V), d(O), ptr(O), d(L),
                               static_cast<float *>(ptr(L)), p.numChunks, ws, wsBytes);
  } else {
    Tensor *po = find(p, "partialO"), *pl = find(p, "partialLse");
    ran = flashAttnMergeStates(handle, d(po), static_cast<float *>(ptr(po)), d(pl), static_cast<float *>(ptr(pl)),
                               d(O), ptr(O), d(L), static_cast<float *>(ptr(L)), ws, wsBytes);
  }
  const std::string message = ran == FLASHATTN_STATUS_SUCCESS ? "" : lastError();
  ++g_stats.ran;
  if (ran != FLASHATTN_STATUS_SUCCESS) ++g_stats.ranAndRefused;
  // The backward's query sees no gradient descriptors; the operation checks them too, first their presence (an
  // unset one is NOT_INITIALIZED) and with the other descriptors before planning, so it may fail otherwise.
  if (sized != FLASHATTN_STATUS_SUCCESS && (p.op == 1 ? ran == FLASHATTN_STATUS_SUCCESS : ran != sized))
    violated("the operation and its size query disagree",
             "query " + std::to_string(sized) + ", operation " + std::to_string(ran) + ": " + message);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const Tensor &t = p.tensors[i];
    // Every byte past the span, and on failure every byte, is as it was.
    const bool changed = ran == FLASHATTN_STATUS_SUCCESS
                             ? std::memcmp(t.host.data() + t.spanBytes, before[i].data() + t.spanBytes, kSlack) != 0
                             : t.host != before[i];
    if (changed)
      violated(ran == FLASHATTN_STATUS_SUCCESS ? "a write past a tensor's span" : "a failed call wrote a buffer", t.name);
  }
  for (size_t b = wsBytes; b < wsBytes + kSlack; ++b)
    if (ws[b] != kCanary) violated("the operation used workspace bytes past its size query", std::to_string(b));
  if (ran != FLASHATTN_STATUS_SUCCESS) {
    if (wsBytes == 0 || std::any_of(ws, ws + wsBytes, [](uint8_t x) { return x != kCanary; }))
      if (wsBytes != 0) violated("a failed call wrote its workspace", message);
    return;
  }
  if (p.op == 0 || p.op == 2) checkAgainstOracle(p);
  if (p.op == 3) checkMergeAgainstOracle(p);
  if (p.op != 1 || consistent) ++g_stats.oracleChecks[p.op];
  if (p.op == 1)
    for (const char *g : {"dQ", "dK", "dV"}) {
      const Tensor &t = *find(p, g);
      for (size_t e = 0; e < t.spanBytes / fa_test::elementSize(t.dtype); ++e)
        if (consistent && p.scale < 1e5f && !std::isfinite(fa_test::loadElement(t.host.data(), t.dtype, int64_t(e))))
          violated("a non-finite gradient", g);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static flashAttnHandle_t handle = [] {
    flashAttnHandle_t h = nullptr;
    if (flashAttnCreateWithBackend(&h, FLASHATTN_BACKEND_HOST) != FLASHATTN_STATUS_SUCCESS) std::abort();
    return h;
  }();
  Reader in(data, size);
  runOne(in, handle);
  return 0;
}
