// SPDX-License-Identifier: BSD-3-Clause
// Writes the shared binding test vectors (bindings/testdata/*.json, format in bindings/testdata/README.md): small
// FP32 problems of every operation with their float64-oracle results and gates, so that every language binding can
// prove it passes shapes, strides, attributes and sequence arrays to the library correctly.
//
//   make_vectors OUTDIR
//
// The values must not depend on the platform: inputs come from mt19937_64 (fully specified by the standard) through
// our own Box-Muller transform (std::normal_distribution differs between standard libraries), and every number is
// printed in its shortest exact form.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "json_lite.hpp"
#include "reference.hpp"

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kNegInf = -std::numeric_limits<double>::infinity();
// The brief for the vectors: each file stays small enough to read in a diff and to load in any test.
const size_t kMaxFileBytes = 50000;

class Normal {
 public:
  explicit Normal(uint64_t seed) : gen_(seed) {}
  // normal(0, 1), rounded to FP32 since the vectors store FP32.
  double next() {
    if (haveSpare_) {
      haveSpare_ = false;
      return double(float(spare_));
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * M_PI * u2;
    spare_ = r * std::sin(t);
    haveSpare_ = true;
    return double(float(r * std::cos(t)));
  }
  std::vector<double> values(size_t n, double scale = 1.0) {
    std::vector<double> v(n);
    for (auto &x : v) x = double(float(next() * scale));
    return v;
  }
  uint64_t raw() { return gen_(); }

 private:
  double uniform() { return (double(gen_() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1): log never sees 0
  std::mt19937_64 gen_;
  bool haveSpare_ = false;
  double spare_ = 0;
};

// A tensor as the vectors hold it: packed strides (a permutation of the dims, no gaps), data in memory order.
struct Tensor {
  std::vector<int64_t> dims, strides;
  std::vector<double> data;
};

int64_t product(const std::vector<int64_t> &v) { return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>()); }

// `order` lists the dims from outermost to innermost in memory: {0, 2, 1, 3} stores [B, H, S, D] as BSHD.
Tensor place(const std::vector<double> &canonical, const std::vector<int64_t> &dims, const std::vector<int> &order) {
  Tensor t{dims, std::vector<int64_t>(dims.size()), std::vector<double>(size_t(product(dims)))};
  int64_t stride = 1;
  for (size_t k = order.size(); k-- > 0;) {
    t.strides[size_t(order[k])] = stride;
    stride *= dims[size_t(order[k])];
  }
  std::vector<int64_t> idx(dims.size(), 0);
  for (size_t c = 0; c < canonical.size(); ++c) {
    int64_t off = 0;
    for (size_t d = 0; d < dims.size(); ++d) off += idx[d] * t.strides[d];
    t.data[size_t(off)] = canonical[c];
    for (size_t d = dims.size(); d-- > 0;) {  // row-major increment
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return t;
}

const std::vector<int> kBHSD{0, 1, 2, 3}, kBSHD{0, 2, 1, 3}, kRowMajor3{0, 1, 2}, kRowMajor2{0, 1};

// Canonical [b][h][maxRows][dim] -> canonical [token][h][dim] of a ragged batch with prefix sums `cu`.
std::vector<double> packRagged(const std::vector<double> &canon, const std::vector<int64_t> &cu, int64_t heads,
                               int64_t maxRows, int64_t dim) {
  std::vector<double> out(size_t(cu.back() * heads * dim));
  for (size_t b = 0; b + 1 < cu.size(); ++b)
    for (int64_t i = 0; i < cu[b + 1] - cu[b]; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d)
          out[size_t(((cu[b] + i) * heads + h) * dim + d)] =
              canon[size_t(((int64_t(b) * heads + h) * maxRows + i) * dim + d)];
  return out;
}

std::vector<double> roundedToFp32(std::vector<double> v) {
  for (auto &x : v) x = double(float(x));
  return v;
}

std::string ints(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Inputs are FP32 values (printed as floats); expected values are the oracle's doubles.
std::string tensorJson(const Tensor &t, bool asFloat, const std::string &indent) {
  std::string s = "{\"dims\": " + ints(t.dims) + ", \"strides\": " + ints(t.strides) + ", \"data\": [";
  for (size_t i = 0; i < t.data.size(); ++i) {
    if (i) s += i % 12 == 0 ? ",\n" + indent + "  " : ", ";
    s += asFloat ? fa_json::number(float(t.data[i])) : fa_json::number(t.data[i]);
  }
  return s + "]}";
}

struct Gate {
  double maxAbs = 0, normwise = -1;  // normwise < 0: not part of the gate (LSE)
};

// The relative gate of docs/testing.md as an absolute bound for this data: factor x max|lp - ref| + 1e-5.
Gate relativeGate(const std::vector<double> &ref, const std::vector<double> &lp, double factor, bool gradient) {
  const fa_ref::Gate g = fa_ref::checkGates(lp, ref, lp, factor, 1e-5);
  Gate out;
  out.maxAbs = factor * g.maxErrLp + 1e-5;
  // A gradient's normwise bound is never tighter than storage-precision arithmetic achieves (docs/testing.md).
  out.normwise = gradient ? std::max(1e-5, g.normwise) : 1e-5;
  return out;
}

const char *maskName(fa_ref::Mask m) {
  switch (m) {
    case fa_ref::Mask::None: return "none";
    case fa_ref::Mask::CausalTopLeft: return "causal_top_left";
    case fa_ref::Mask::CausalBottomRight: return "causal_bottom_right";
  }
  return "?";
}

struct Vector {
  std::string name, op, attention = "null", seq = "null";
  int chunks = 0;
  std::vector<std::pair<std::string, Tensor>> inputs, expected;
  std::vector<std::pair<std::string, Gate>> gates;

  void setAttention(const fa_ref::Problem &p, int deterministic) {
    std::ostringstream s;
    s << "{\"scale\": " << fa_json::number(float(p.effectiveScale())) << ", \"mask\": \"" << maskName(p.mask)
      << "\", \"window\": [" << p.windowLeft << ", " << p.windowRight
      << "], \"softcap\": " << fa_json::number(float(p.softcap)) << ", \"deterministic\": " << deterministic << "}";
    attention = s.str();
  }

  std::string json() const {
    std::string s = "{\n";
    s += "  \"name\": " + fa_json::quote(name) + ",\n";
    s += "  \"op\": " + fa_json::quote(op) + ",\n";
    s += "  \"dtype\": \"fp32\",\n";
    s += "  \"attention\": " + attention + ",\n";
    s += "  \"seq\": " + seq + ",\n";
    if (op == "decode") s += "  \"chunks\": " + std::to_string(chunks) + ",\n";
    auto tensors = [&](const char *key, const std::vector<std::pair<std::string, Tensor>> &list, bool asFloat) {
      s += std::string("  \"") + key + "\": {\n";
      for (size_t i = 0; i < list.size(); ++i)
        s += "    " + fa_json::quote(list[i].first) + ": " + tensorJson(list[i].second, asFloat, "    ") +
             (i + 1 < list.size() ? ",\n" : "\n");
      s += "  },\n";
    };
    tensors("inputs", inputs, true);
    tensors("expected", expected, false);
    s += "  \"gates\": {\n";
    for (size_t i = 0; i < gates.size(); ++i) {
      const Gate &g = gates[i].second;
      s += "    " + fa_json::quote(gates[i].first) + ": {\"max_abs\": " + fa_json::number(g.maxAbs);
      if (g.normwise >= 0) s += ", \"normwise\": " + fa_json::number(g.normwise);
      s += std::string("}") + (i + 1 < gates.size() ? ",\n" : "\n");
    }
    s += "  }\n}\n";
    return s;
  }
};

// The oracle reads the scale and softcap as the library receives them: as floats.
void floatAttributes(fa_ref::Problem &p, double scale, double softcap) {
  p.scale = double(float(scale));
  p.softcap = double(float(softcap));
}

struct ForwardSpec {
  std::string name;
  int64_t batch, heads, kvHeads, seqQ, seqK, headDim;
  fa_ref::Mask mask = fa_ref::Mask::None;
  int64_t windowLeft = -1, windowRight = -1;
  double scale = 0, softcap = 0;
  std::vector<int> qOrder = kBHSD, kOrder = kBHSD, vOrder = kBHSD, oOrder = kBHSD;
  std::vector<int64_t> raggedQ, raggedK;  // per-sequence lengths of a ragged batch
  bool sinks = false;
  uint64_t seed = 1;
};

// Sinks of the order of the logits (unit-variance inputs, scale 1/sqrt(d)), so that they take a visible share of
// each row. Drawn after the tensors, so that a vector without sinks keeps its values.
const double kSinkSpread = 2.0;

Tensor sinksTensor(const std::vector<double> &sinks) { return place(sinks, {int64_t(sinks.size())}, {0}); }

Vector forwardVector(const ForwardSpec &c) {
  fa_ref::Problem p;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kvHeads = c.kvHeads;
  p.headDim = p.headDimV = c.headDim;
  p.maxSq = c.seqQ;
  p.maxSk = c.seqK;
  p.sq = c.raggedQ;
  p.sk = c.raggedK;
  p.mask = c.mask;
  p.windowLeft = c.windowLeft;
  p.windowRight = c.windowRight;
  floatAttributes(p, c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.headDim)), c.softcap);

  Normal rng(c.seed);
  const std::vector<double> q = rng.values(p.qSize()), k = rng.values(p.kSize()), v = rng.values(p.vSize());
  if (c.sinks) p.sinks = rng.values(size_t(c.heads), kSinkSpread);
  std::vector<double> o, lse, oLp, lseLp;
  fa_ref::forward(p, q, k, v, o, lse);
  fa_ref::forward(p, q, k, v, oLp, lseLp, fa_ref::Rounding::FP32);

  Vector out;
  out.name = c.name;
  out.op = "forward";
  out.setAttention(p, 0);
  const int64_t B = c.batch, H = c.heads, KH = c.kvHeads, D = c.headDim;
  if (c.raggedQ.empty()) {
    out.inputs = {{"q", place(q, {B, H, c.seqQ, D}, c.qOrder)},
                  {"k", place(k, {B, KH, c.seqK, D}, c.kOrder)},
                  {"v", place(v, {B, KH, c.seqK, D}, c.vOrder)}};
    out.expected = {{"o", place(o, {B, H, c.seqQ, D}, c.oOrder)}, {"lse", place(lse, {B, H, c.seqQ}, {0, 1, 2})}};
  } else {
    std::vector<int64_t> cuQ(1, 0), cuK(1, 0);
    for (size_t b = 0; b < c.raggedQ.size(); ++b) {
      cuQ.push_back(cuQ.back() + c.raggedQ[b]);
      cuK.push_back(cuK.back() + c.raggedK[b]);
    }
    out.seq = "{\"ragged\": {\"cu_seqlens_q\": " + ints(cuQ) + ", \"cu_seqlens_k\": " + ints(cuK) +
              ", \"max_q\": " + std::to_string(c.seqQ) + ", \"max_k\": " + std::to_string(c.seqK) + "}}";
    const int64_t tq = cuQ.back(), tk = cuK.back();
    out.inputs = {{"q", place(packRagged(q, cuQ, H, c.seqQ, D), {tq, H, D}, kRowMajor3)},
                  {"k", place(packRagged(k, cuK, KH, c.seqK, D), {tk, KH, D}, kRowMajor3)},
                  {"v", place(packRagged(v, cuK, KH, c.seqK, D), {tk, KH, D}, kRowMajor3)}};
    out.expected = {{"o", place(packRagged(o, cuQ, H, c.seqQ, D), {tq, H, D}, kRowMajor3)},
                    {"lse", place(packRagged(lse, cuQ, H, c.seqQ, 1), {tq, H}, kRowMajor2)}};
    // The gates compare only the rows the vector holds (padded rows of the canonical arrays are not in it).
    o = out.expected[0].second.data;
    oLp = place(packRagged(oLp, cuQ, H, c.seqQ, D), {tq, H, D}, kRowMajor3).data;
  }
  if (c.sinks) out.inputs.push_back({"sinks", sinksTensor(p.sinks)});
  out.gates = {{"o", relativeGate(o, oLp, 2.0, false)}, {"lse", {1e-4, -1}}};
  return out;
}

struct BackwardSpec {
  std::string name;
  int64_t batch, heads, kvHeads, seqQ, seqK, headDim;
  fa_ref::Mask mask = fa_ref::Mask::None;
  double scale = 0;
  int deterministic = 0;
  bool sinks = false;  // and dSinks
  uint64_t seed = 1;
};

Vector backwardVector(const BackwardSpec &c) {
  fa_ref::Problem p;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kvHeads = c.kvHeads;
  p.headDim = p.headDimV = c.headDim;
  p.maxSq = c.seqQ;
  p.maxSk = c.seqK;
  p.mask = c.mask;
  floatAttributes(p, c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.headDim)), 0);
  const int64_t B = p.batch, H = p.heads, KH = p.kvHeads, SQ = p.maxSq, SK = p.maxSk, D = p.headDim;

  Normal rng(c.seed);
  const std::vector<double> q = rng.values(p.qSize()), k = rng.values(p.kSize()), v = rng.values(p.vSize());
  const std::vector<double> dO = rng.values(p.oSize());
  if (c.sinks) p.sinks = rng.values(size_t(H), kSinkSpread);
  std::vector<double> o, lse;
  fa_ref::forward(p, q, k, v, o, lse);
  // The backward is given O and LSE as an FP32 forward stored them.
  o = roundedToFp32(o);
  lse = roundedToFp32(lse);
  std::vector<double> dQ, dK, dV, dQLp, dKLp, dVLp, dS, dSLp;
  fa_ref::backward(p, q, k, v, dO, dQ, dK, dV, fa_ref::Rounding::None, c.sinks ? &dS : nullptr);
  fa_ref::backward(p, q, k, v, dO, dQLp, dKLp, dVLp, fa_ref::Rounding::FP32, c.sinks ? &dSLp : nullptr);

  Vector out;
  out.name = c.name;
  out.op = "backward";
  out.setAttention(p, c.deterministic);
  out.inputs = {{"q", place(q, {B, H, SQ, D}, kBSHD)},      {"k", place(k, {B, KH, SK, D}, kBSHD)},
                {"v", place(v, {B, KH, SK, D}, kBSHD)},      {"o", place(o, {B, H, SQ, D}, kBSHD)},
                {"lse", place(lse, {B, H, SQ}, {0, 1, 2})}, {"do", place(dO, {B, H, SQ, D}, kBHSD)}};
  out.expected = {{"dq", place(dQ, {B, H, SQ, D}, kBSHD)},
                  {"dk", place(dK, {B, KH, SK, D}, kBSHD)},
                  {"dv", place(dV, {B, KH, SK, D}, kBSHD)}};
  out.gates = {{"dq", relativeGate(dQ, dQLp, 3.0, true)},
               {"dk", relativeGate(dK, dKLp, 3.0, true)},
               {"dv", relativeGate(dV, dVLp, 3.0, true)}};
  if (c.sinks) {
    out.inputs.push_back({"sinks", sinksTensor(p.sinks)});
    out.expected.push_back({"dsinks", sinksTensor(dS)});
    out.gates.push_back({"dsinks", relativeGate(dS, dSLp, 3.0, true)});
  }
  return out;
}

// Split-KV decode of one token per sequence against a paged cache of page size 4; sequences of 7 and 11 keys, the
// pages handed out in a shuffled order, one spare page, and NaN in every slot no sequence uses (reading one fails).
Vector decodeVector() {
  const int64_t B = 2, H = 4, KH = 2, D = 16, pageSize = 4, maxPages = 3;
  const std::vector<int64_t> lengths{7, 11};
  fa_ref::Problem p;
  p.batch = B;
  p.heads = H;
  p.kvHeads = KH;
  p.headDim = p.headDimV = D;
  p.maxSq = 1;
  p.maxSk = pageSize * maxPages;
  p.sk = lengths;
  p.mask = fa_ref::Mask::CausalBottomRight;
  floatAttributes(p, 0.25, 0);

  Normal rng(5);
  const std::vector<double> q = rng.values(p.qSize()), k = rng.values(p.kSize()), v = rng.values(p.vSize());
  std::vector<double> o, lse, oLp, lseLp;
  fa_ref::forward(p, q, k, v, o, lse);
  fa_ref::forward(p, q, k, v, oLp, lseLp, fa_ref::Rounding::FP32);

  std::vector<int64_t> pagesOf(B);
  int64_t used = 0;
  for (int64_t b = 0; b < B; ++b) used += pagesOf[size_t(b)] = (lengths[size_t(b)] + pageSize - 1) / pageSize;
  const int64_t numPages = used + 1;
  std::vector<int64_t> perm(static_cast<size_t>(numPages));
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[size_t(rng.raw() % (i + 1))]);
  std::vector<std::vector<int64_t>> table(B, std::vector<int64_t>(maxPages, -1));  // -1: past the sequence
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < pagesOf[size_t(b)]; ++t) table[size_t(b)][size_t(t)] = perm[next++];

  // Pages [numPages, pageSize, kvHeads, D], packed.
  const std::vector<int64_t> cacheDims{numPages, pageSize, KH, D};
  Tensor kc = place(std::vector<double>(size_t(product(cacheDims)), kNaN), cacheDims, {0, 1, 2, 3});
  Tensor vc = kc;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < KH; ++h)
      for (int64_t j = 0; j < lengths[size_t(b)]; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t page = table[size_t(b)][size_t(j / pageSize)];
          const size_t dst = size_t(page * kc.strides[0] + (j % pageSize) * kc.strides[1] + h * kc.strides[2] + d);
          const size_t src = size_t(((b * KH + h) * p.maxSk + j) * D + d);
          kc.data[dst] = k[src];
          vc.data[dst] = v[src];
        }

  Vector out;
  out.name = "decode_paged";
  out.op = "decode";
  out.chunks = 3;
  out.setAttention(p, 0);
  std::string tableJson = "[";
  for (size_t b = 0; b < table.size(); ++b) tableJson += (b ? ", " : "") + ints(table[b]);
  out.seq = "{\"kv_lengths\": " + ints(lengths) + ", \"paged\": {\"block_table\": " + tableJson +
            "], \"page_size\": " + std::to_string(pageSize) + "}}";
  out.inputs = {{"q", place(q, {B, H, 1, D}, kBSHD)}, {"k", kc}, {"v", vc}};
  out.expected = {{"o", place(o, {B, H, 1, D}, kBHSD)}, {"lse", place(lse, {B, H, 1}, {0, 1, 2})}};
  out.gates = {{"o", relativeGate(o, oLp, 2.0, false)}, {"lse", {1e-4, -1}}};
  return out;
}

// Split-KV decode with sinks against a dense cache: the sink joins each row once after its chunks are folded, and
// the second sequence has no key at all, so its rows are the sink alone (O = 0, LSE = the sink).
Vector decodeSinksVector() {
  const int64_t B = 2, H = 4, KH = 2, D = 16, SK = 9;
  const std::vector<int64_t> lengths{SK, 0};
  fa_ref::Problem p;
  p.batch = B;
  p.heads = H;
  p.kvHeads = KH;
  p.headDim = p.headDimV = D;
  p.maxSq = 1;
  p.maxSk = SK;
  p.sk = lengths;
  floatAttributes(p, 0.25, 0);

  Normal rng(8);
  const std::vector<double> q = rng.values(p.qSize()), k = rng.values(p.kSize()), v = rng.values(p.vSize());
  p.sinks = rng.values(size_t(H), kSinkSpread);
  std::vector<double> o, lse, oLp, lseLp;
  fa_ref::forward(p, q, k, v, o, lse);
  fa_ref::forward(p, q, k, v, oLp, lseLp, fa_ref::Rounding::FP32);

  Vector out;
  out.name = "decode_sinks";
  out.op = "decode";
  out.chunks = 3;
  out.setAttention(p, 0);
  out.seq = "{\"kv_lengths\": " + ints(lengths) + "}";
  out.inputs = {{"q", place(q, {B, H, 1, D}, kBHSD)},
                {"k", place(k, {B, KH, SK, D}, kBHSD)},
                {"v", place(v, {B, KH, SK, D}, kBHSD)},
                {"sinks", sinksTensor(p.sinks)}};
  out.expected = {{"o", place(o, {B, H, 1, D}, kBHSD)}, {"lse", place(lse, {B, H, 1}, {0, 1, 2})}};
  out.gates = {{"o", relativeGate(o, oLp, 2.0, false)}, {"lse", {1e-4, -1}}};
  return out;
}

// Three partial states per row; row 4 has one empty state (LSE -inf) and row 1 has no state at all, which must give
// O = 0 and LSE = -inf. Empty states' partial O is NaN: the merge must not read it.
Vector mergeVector() {
  const int64_t S = 3, B = 1, H = 2, Q = 3, D = 16, rows = B * H * Q;
  Normal rng(6);
  std::vector<double> partialO(size_t(S * rows * D)), partialLse(size_t(S * rows));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = 0; r < rows; ++r) {
      const bool empty = r == 1 || (r == 4 && s == 1);
      partialLse[size_t(s * rows + r)] = empty ? kNegInf : double(float(3.0 * rng.next()));
      for (int64_t d = 0; d < D; ++d) partialO[size_t((s * rows + r) * D + d)] = empty ? kNaN : rng.next();
    }
  std::vector<double> o, lse;
  fa_ref::merge(S, rows, D, partialO, partialLse, o, lse);

  Vector out;
  out.name = "merge_three_states";
  out.op = "merge";
  out.inputs = {{"partial_o", place(partialO, {S, B, H, Q, D}, {0, 1, 2, 3, 4})},
                {"partial_lse", place(partialLse, {S, B, H, Q}, {0, 1, 2, 3})}};
  out.expected = {{"o", place(o, {B, H, Q, D}, kBSHD)}, {"lse", place(lse, {B, H, Q}, {0, 1, 2})}};
  out.gates = {{"o", relativeGate(o, roundedToFp32(o), 2.0, false)}, {"lse", {1e-4, -1}}};
  return out;
}

std::vector<Vector> allVectors() {
  std::vector<Vector> v;
  ForwardSpec plain{"forward_plain", 2, 2, 2, 7, 9, 16};
  plain.qOrder = plain.kOrder = plain.vOrder = plain.oOrder = kBSHD;
  plain.seed = 1;
  v.push_back(forwardVector(plain));

  ForwardSpec gqa{"forward_causal_gqa", 2, 4, 2, 5, 9, 16};
  gqa.mask = fa_ref::Mask::CausalBottomRight;
  gqa.seed = 2;
  v.push_back(forwardVector(gqa));

  // One KV head for two query heads (MQA), mixed layouts, an explicit scale.
  ForwardSpec window{"forward_window_softcap", 1, 2, 1, 12, 12, 16};
  window.windowLeft = 4;
  window.windowRight = 1;
  window.softcap = 3.0;
  window.scale = 0.3;
  window.qOrder = kBSHD;
  window.vOrder = kBSHD;
  window.seed = 3;
  v.push_back(forwardVector(window));

  // A ragged batch: an empty sequence, and one with fewer keys than queries, whose first rows see no key under the
  // bottom-right mask (O = 0, LSE = -inf).
  ForwardSpec ragged{"forward_ragged", 3, 2, 2, 4, 5, 16};
  ragged.mask = fa_ref::Mask::CausalBottomRight;
  ragged.raggedQ = {3, 0, 4};
  ragged.raggedK = {5, 2, 2};
  ragged.seed = 7;
  v.push_back(forwardVector(ragged));

  // Sinks with a bottom-right causal mask and more queries than keys: the first rows see no key, so the sink takes
  // all their weight (O = 0, LSE = the sink, not -inf).
  ForwardSpec sinks{"forward_sinks", 2, 4, 2, 5, 3, 16};
  sinks.mask = fa_ref::Mask::CausalBottomRight;
  sinks.qOrder = sinks.oOrder = kBSHD;
  sinks.sinks = true;
  sinks.seed = 9;
  v.push_back(forwardVector(sinks));

  BackwardSpec causal{"backward_causal_gqa", 2, 2, 1, 6, 6, 16};
  causal.mask = fa_ref::Mask::CausalTopLeft;
  causal.scale = 0.25;
  causal.deterministic = 1;
  causal.seed = 4;
  v.push_back(backwardVector(causal));

  // dSinks summed over the batch and the rows of each head; rows with no key (LSE = the sink, O = 0) add nothing.
  BackwardSpec withSinks{"backward_sinks", 2, 2, 1, 6, 4, 16};
  withSinks.mask = fa_ref::Mask::CausalBottomRight;
  withSinks.sinks = true;
  withSinks.seed = 10;
  v.push_back(backwardVector(withSinks));

  v.push_back(decodeVector());
  v.push_back(decodeSinksVector());
  v.push_back(mergeVector());
  return v;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  std::filesystem::create_directories(dir);
  int status = 0;
  for (const Vector &v : allVectors()) {
    const std::string text = v.json();
    if (text.size() > kMaxFileBytes) {
      std::fprintf(stderr, "make_vectors: %s is %zu bytes, above the %zu-byte limit: shrink the case\n",
                   v.name.c_str(), text.size(), kMaxFileBytes);
      status = 1;
    }
    std::ofstream f(dir / (v.name + ".json"), std::ios::binary);
    f << text;
    if (!f) {
      std::fprintf(stderr, "make_vectors: cannot write %s\n", (dir / (v.name + ".json")).c_str());
      return 1;
    }
  }
  return status;
}
