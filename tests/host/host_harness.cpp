// SPDX-License-Identifier: BSD-3-Clause
#include "host_harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace host_test {
namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

// Where element (b, h, i, e) of a logical [batch, heads, rows, dim] tensor lives in a physical one: dense rank 4, or
// ragged rank 3 [tokens, heads, dim] whose sequence b starts at token cu[b]. Rank-3 dense / rank-2 ragged LSE tensors
// use the same arithmetic with e = 0.
struct Placement {
  HostTensor t;
  std::vector<int64_t> cu;  // empty = dense
  int64_t offset(int64_t b, int64_t h, int64_t i, int64_t e) const {
    if (cu.empty()) return b * t.strides[0] + h * t.strides[1] + i * t.strides[2] + e;
    return (cu[size_t(b)] + i) * t.strides[0] + h * t.strides[1] + e;
  }
};

std::vector<int64_t> prefixSums(const std::vector<int64_t> &lengths) {
  std::vector<int64_t> cu(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); ++b) cu[b + 1] = cu[b] + lengths[b];
  return cu;
}

Order flipped(Order o) { return o == Order::BHSD ? Order::BSHD : Order::BHSD; }

// A rank-4 dense or rank-3 ragged tensor of `heads` logical heads, poisoned with NaN. With broadcast, one physical
// head is read through head stride 0.
Placement placeRows(flashAttnDataType_t t, int64_t batch, int64_t heads, int64_t rows, int64_t dim, Order order,
                    int64_t pad, bool broadcast, const std::vector<int64_t> &raggedLengths) {
  Placement p;
  const int64_t physHeads = broadcast ? 1 : heads;
  const int64_t row = dim + pad;
  if (raggedLengths.empty()) {
    std::vector<int64_t> strides = fa_test::stridesFor(order, batch, physHeads, rows, dim, pad);
    if (broadcast) strides[1] = 0;
    p.t = HostTensor(t, {batch, heads, rows, dim}, strides);
  } else {
    p.cu = prefixSums(raggedLengths);
    const int64_t tokens = p.cu.back();
    std::vector<int64_t> strides = order == Order::BSHD ? std::vector<int64_t>{physHeads * row, row, 1}
                                                        : std::vector<int64_t>{row, tokens * row, 1};
    if (broadcast) strides[1] = 0;
    p.t = HostTensor(t, {tokens, heads, dim}, strides);
  }
  p.t.fillNaN();
  return p;
}

Placement placeLse(int64_t batch, int64_t heads, int64_t rows, const std::vector<int64_t> &raggedLengths) {
  Placement p;
  if (raggedLengths.empty()) {
    p.t = HostTensor(FLASHATTN_DATA_FP32, {batch, heads, rows}, {heads * rows, rows, 1});
  } else {
    p.cu = prefixSums(raggedLengths);
    p.t = HostTensor(FLASHATTN_DATA_FP32, {p.cu.back(), heads}, {heads, 1});
  }
  p.t.fillNaN();
  return p;
}

int64_t lengthOf(const std::vector<int64_t> &lengths, int64_t b, int64_t full) {
  return lengths.empty() ? full : lengths[size_t(b)];
}

// Canonical [b][h][maxRows][dim] -> physical, rows < length of sequence b.
void scatter(const std::vector<double> &canon, Placement &p, int64_t batch, int64_t heads, int64_t maxRows, int64_t dim,
             const std::vector<int64_t> &lengths) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < lengthOf(lengths, b, maxRows); ++i)
        for (int64_t e = 0; e < dim; ++e)
          fa_test::storeElement(p.t.bytes.data(), p.t.dtype, p.offset(b, h, i, e),
                                canon[size_t(((b * heads + h) * maxRows + i) * dim + e)]);
}

// Physical -> canonical; rows past a sequence's length read as `fill` (0 for O, -inf for LSE), as the oracle writes.
std::vector<double> gather(const Placement &p, int64_t batch, int64_t heads, int64_t maxRows, int64_t dim,
                           const std::vector<int64_t> &lengths, double fill = 0.0) {
  std::vector<double> canon(size_t(batch * heads * maxRows * dim), fill);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < lengthOf(lengths, b, maxRows); ++i)
        for (int64_t e = 0; e < dim; ++e)
          canon[size_t(((b * heads + h) * maxRows + i) * dim + e)] =
              fa_test::loadElement(p.t.bytes.data(), p.t.dtype, p.offset(b, h, i, e));
  return canon;
}

std::vector<int32_t> toInt32(const std::vector<int64_t> &v) { return std::vector<int32_t>(v.begin(), v.end()); }

std::vector<float> makeSlopes(int alibi, int64_t batch, int64_t heads) {
  std::vector<float> slopes;
  if (alibi == 0) return slopes;
  const int64_t n = alibi == 2 ? batch * heads : heads;
  for (int64_t x = 0; x < n; ++x) {
    const int64_t h = x % heads, b = x / heads;
    slopes.push_back(float(std::pow(2.0, -8.0 * double(h + 1) / double(heads)) * (1.0 + 0.25 * double(b))));
  }
  return slopes;
}

std::vector<double> toDouble(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

// Canonical KV of `heads` logical heads; with broadcast every head is a copy of one.
std::vector<double> kvValues(std::mt19937_64 &rng, flashAttnDataType_t t, int64_t batch, int64_t heads, int64_t rows,
                             int64_t dim, bool broadcast, double scale) {
  if (!broadcast) return fa_test::randomValues(rng, size_t(batch * heads * rows * dim), t, scale);
  const std::vector<double> one = fa_test::randomValues(rng, size_t(batch * rows * dim), t, scale);
  std::vector<double> all(size_t(batch * heads * rows * dim));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(one.begin() + b * rows * dim, rows * dim, all.begin() + (b * heads + h) * rows * dim);
  return all;
}

std::vector<uint8_t> bytesOf(const std::vector<double> &canon) {
  std::vector<uint8_t> out(canon.size() * sizeof(double));
  if (out.empty()) return out;  // memcpy of NULL pointers is undefined even for 0 bytes
  std::memcpy(out.data(), canon.data(), out.size());
  return out;
}

void setAttention(fa_test::AttnDesc &a, float scale, flashAttnMaskMode_t mask, int64_t left, int64_t right,
                  float softcap, int alibi, const std::vector<float> &slopes) {
  if (scale > 0) flashAttnSetAttentionScale(a, scale);
  flashAttnSetAttentionMask(a, mask);
  flashAttnSetAttentionWindow(a, left, right);
  flashAttnSetAttentionSoftcap(a, softcap);
  if (alibi) flashAttnSetAttentionAlibiSlopes(a, slopes.data(), alibi == 2 ? 1 : 0);
}

// A KV cache: dense [batch, kvHeads, seqK, d], or pages [numPages, pageSize, kvHeads, d] handed out to the sequences in
// the order of a random permutation. Every slot no sequence uses holds NaN.
struct CacheShape {
  flashAttnDataType_t dtype;
  int64_t batch, kvHeads, seqK, headDim, headDimV;
  int64_t pageSize;  // 0 = dense
  bool paddedPages;
};

struct KvCache {
  HostTensor k, v;
  std::vector<int32_t> blockTable;
  int64_t maxPages = 0;
};

KvCache buildCache(const CacheShape &c, const std::vector<int64_t> &lengths, const std::vector<double> &k,
                   const std::vector<double> &v, std::mt19937_64 &rng) {
  const int64_t pageSize = c.pageSize;
  KvCache cache;
  if (pageSize == 0) {
    cache.k = HostTensor(c.dtype, {c.batch, c.kvHeads, c.seqK, c.headDim},
                         fa_test::stridesFor(Order::BHSD, c.batch, c.kvHeads, c.seqK, c.headDim, 1));
    cache.v = HostTensor(c.dtype, {c.batch, c.kvHeads, c.seqK, c.headDimV},
                         fa_test::stridesFor(Order::BSHD, c.batch, c.kvHeads, c.seqK, c.headDimV));
  } else {
    cache.maxPages = (c.seqK + pageSize - 1) / pageSize;
    int64_t used = 0;
    for (int64_t b = 0; b < c.batch; ++b) used += (lengths[size_t(b)] + pageSize - 1) / pageSize;
    const int64_t numPages = used + 3;  // spare pages nobody uses
    std::vector<int64_t> perm(static_cast<size_t>(numPages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    cache.blockTable.assign(size_t(c.batch * cache.maxPages), -1);  // entries past a sequence's pages are never read
    size_t next = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = 0; t < (lengths[size_t(b)] + pageSize - 1) / pageSize; ++t)
        cache.blockTable[size_t(b * cache.maxPages + t)] = int32_t(perm[next++]);
    const int64_t pad = c.paddedPages ? 3 : 0;
    auto pagedStrides = [&](int64_t d) {
      const int64_t row = c.kvHeads * (d + pad);
      return std::vector<int64_t>{pageSize * row + (c.paddedPages ? 7 : 0), row, d + pad, 1};
    };
    cache.k = HostTensor(c.dtype, {numPages, pageSize, c.kvHeads, c.headDim}, pagedStrides(c.headDim));
    cache.v = HostTensor(c.dtype, {numPages, pageSize, c.kvHeads, c.headDimV}, pagedStrides(c.headDimV));
  }
  cache.k.fillNaN();
  cache.v.fillNaN();
  auto offset = [&](const HostTensor &t, int64_t b, int64_t kvh, int64_t j) {
    if (pageSize == 0) return b * t.strides[0] + kvh * t.strides[1] + j * t.strides[2];
    const int64_t page = cache.blockTable[size_t(b * cache.maxPages + j / pageSize)];
    return page * t.strides[0] + (j % pageSize) * t.strides[1] + kvh * t.strides[2];
  };
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t kvh = 0; kvh < c.kvHeads; ++kvh)
      for (int64_t j = 0; j < lengths[size_t(b)]; ++j) {
        const size_t row = size_t((b * c.kvHeads + kvh) * c.seqK + j);
        const int64_t ko = offset(cache.k, b, kvh, j), vo = offset(cache.v, b, kvh, j);
        for (int64_t e = 0; e < c.headDim; ++e)
          fa_test::storeElement(cache.k.bytes.data(), c.dtype, ko + e, k[row * size_t(c.headDim) + size_t(e)]);
        for (int64_t e = 0; e < c.headDimV; ++e)
          fa_test::storeElement(cache.v.bytes.data(), c.dtype, vo + e, v[row * size_t(c.headDimV) + size_t(e)]);
      }
  return cache;
}

const char *maskName(flashAttnMaskMode_t m) {
  switch (m) {
    case FLASHATTN_MASK_NONE: return "none";
    case FLASHATTN_MASK_CAUSAL_TOP_LEFT: return "causalTL";
    case FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT: return "causalBR";
  }
  return "?";
}

std::string lengthsText(const std::vector<int64_t> &v) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "}";
  return s.str();
}

std::string floatsText(const std::vector<float> &v) {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "}";
  return s.str();
}

void apiFailure(GateReport &r, const char *what, flashAttnStatus_t s) {
  r.pass = false;
  r.text += std::string(what) + " returned " + flashAttnGetErrorString(s) + ": " + fa_test::lastError() + "\n";
}

}  // namespace

void GateReport::add(const char *name, const fa_ref::Gate &g) {
  pass = pass && g.pass;
  text += std::string(name) + ": " + g.describe() + "\n";
}

double AttnCase::cost() const {
  return double(batch * heads) * double(seqQ) * double(seqK) * double(headDim + headDimV);
}

std::string AttnCase::describe() const {
  std::ostringstream s;
  s << typeName(dtype) << " b" << batch << " h" << heads << "/" << kvHeads << (broadcastKv ? "(bcast)" : "") << " d"
    << headDim << "/" << headDimV << " sq" << seqQ << " sk" << seqK << " " << (order == Order::BHSD ? "BHSD" : "BSHD")
    << " pad" << rowPad << " mask " << maskName(mask) << " win(" << windowLeft << "," << windowRight << ") softcap "
    << softcap << " alibi " << alibi << " scale " << scale << " x" << valueScale << (withLse ? " lse" : "");
  if (ragged()) s << " ragged q" << lengthsText(raggedQ) << " k" << lengthsText(raggedK);
  if (!kvLengths.empty()) s << " kvLengths" << lengthsText(kvLengths);
  if (pageSize > 0) s << " paged ps" << pageSize;
  if (!sinks.empty()) s << " sinks" << floatsText(sinks);
  s << " seed " << seed;
  return s.str();
}

GateReport runAttnCase(const AttnCase &c, bool withBackward, bool check, AttnOutputs *outputs) {
  GateReport report;
  const bool needLse = c.withLse || withBackward;
  std::mt19937_64 rng(c.seed);
  const std::vector<float> slopes = makeSlopes(c.alibi, c.batch, c.heads);

  fa_ref::Problem rp;
  rp.batch = c.batch;
  rp.heads = c.heads;
  rp.kvHeads = c.broadcastKv ? c.heads : c.kvHeads;
  rp.headDim = c.headDim;
  rp.headDimV = c.headDimV;
  rp.maxSq = c.seqQ;
  rp.maxSk = c.seqK;
  rp.sq = c.raggedQ;
  rp.sk = c.raggedKv() ? c.raggedK : c.kvLengths;
  rp.scale = c.scale;
  rp.softcap = c.softcap;
  rp.mask = fa_ref::Mask(int(c.mask));
  rp.windowLeft = c.windowLeft;
  rp.windowRight = c.windowRight;
  rp.alibi = toDouble(slopes);
  rp.sinks = toDouble(c.sinks);

  const std::vector<double> q = fa_test::randomValues(rng, rp.qSize(), c.dtype, c.valueScale);
  const std::vector<double> k =
      kvValues(rng, c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDim, c.broadcastKv, c.valueScale);
  const std::vector<double> v =
      kvValues(rng, c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDimV, c.broadcastKv, c.valueScale);
  const std::vector<double> dO = fa_test::randomValues(rng, rp.oSize(), c.dtype);

  const std::vector<int64_t> &qLengths = c.raggedQ;
  const std::vector<int64_t> &kLengths = c.raggedKv() ? c.raggedK : c.kvLengths;
  const std::vector<int64_t> &kPlacementLengths = c.raggedK;  // dense caches with kvLengths keep all rows
  Placement Q = placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDim, c.order, c.rowPad, false, qLengths);
  Placement K =
      placeRows(c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDim, c.order, c.rowPad, c.broadcastKv, kPlacementLengths);
  Placement V =
      placeRows(c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDimV, c.order, c.rowPad, c.broadcastKv, kPlacementLengths);
  Placement O = placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDimV, c.order, c.rowPad, false, qLengths);
  Placement L = placeLse(c.batch, c.heads, c.seqQ, qLengths);
  scatter(q, Q, c.batch, c.heads, c.seqQ, c.headDim, qLengths);
  // Unused cache rows stay NaN: reading one would poison the output.
  scatter(k, K, c.batch, rp.kvHeads, c.seqK, c.headDim, kLengths);
  scatter(v, V, c.batch, rp.kvHeads, c.seqK, c.headDimV, kLengths);
  std::vector<int64_t> pagedLengths = c.kvLengths;
  KvCache paged;
  if (c.pageSize > 0) {
    if (pagedLengths.empty()) pagedLengths.assign(size_t(c.batch), c.seqK);
    paged = buildCache({c.dtype, c.batch, c.kvHeads, c.seqK, c.headDim, c.headDimV, c.pageSize, c.rowPad > 0},
                       pagedLengths, k, v, rng);
    K.t = paged.k;
    V.t = paged.v;
  }

  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::AttnDesc attn;
  setAttention(attn, c.scale, c.mask, c.windowLeft, c.windowRight, c.softcap, c.alibi, slopes);
  if (!c.sinks.empty()) flashAttnSetAttentionSinks(attn, c.sinks.data());
  fa_test::SeqDesc seqDesc;
  const std::vector<int32_t> cuQ = toInt32(prefixSums(c.raggedQ)), cuK = toInt32(prefixSums(c.raggedK));
  const std::vector<int32_t> kvLengths = toInt32(c.pageSize > 0 ? pagedLengths : c.kvLengths);
  flashAttnSeqDescriptor_t seq = nullptr;
  if (c.ragged()) {
    flashAttnSetSeqRagged(seqDesc, c.batch, cuQ.data(), c.pageSize > 0 ? nullptr : cuK.data(), c.seqQ, c.seqK);
    seq = seqDesc;
  }
  if (c.pageSize > 0) {
    flashAttnSetSeqKvLengths(seqDesc, c.batch, kvLengths.data());
    flashAttnSetSeqPaged(seqDesc, c.batch, paged.blockTable.data(), paged.maxPages);
    seq = seqDesc;
  } else if (!c.ragged() && !c.kvLengths.empty()) {
    flashAttnSetSeqKvLengths(seqDesc, c.batch, kvLengths.data());
    seq = seqDesc;
  }
  fa_test::TensorDesc qd(Q.t), kd(K.t), vd(V.t), od(O.t), ld(L.t);
  flashAttnTensorDescriptor_t lseDesc = needLse ? flashAttnTensorDescriptor_t(ld) : nullptr;
  float *lsePtr = needLse ? reinterpret_cast<float *>(L.t.bytes.data()) : nullptr;

  size_t bytes = 0;
  flashAttnStatus_t s = flashAttnForwardGetWorkspaceSize(handle, attn, seq, qd, kd, vd, od, lseDesc, &bytes);
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnForwardGetWorkspaceSize", s);
    return report;
  }
  Workspace ws(bytes);
  s = flashAttnForward(handle, attn, seq, qd, Q.t.bytes.data(), kd, K.t.bytes.data(), vd, V.t.bytes.data(), od,
                       O.t.bytes.data(), lseDesc, lsePtr, ws.data(), ws.size());
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnForward", s);
    return report;
  }
  const std::vector<double> out = gather(O, c.batch, c.heads, c.seqQ, c.headDimV, qLengths);
  const std::vector<double> outLse = gather(L, c.batch, c.heads, c.seqQ, 1, qLengths, kNegInf);
  if (outputs) {
    outputs->o = bytesOf(out);
    if (needLse) outputs->lse = bytesOf(outLse);
  }
  if (check) {
    std::vector<double> ref, refLse, lp, lpLse;
    fa_ref::forward(rp, q, k, v, ref, refLse);
    fa_ref::forward(rp, q, k, v, lp, lpLse, roundingOf(c.dtype));
    const double tol = fa_ref::normTolerance(roundingOf(c.dtype));
    report.add("O", fa_ref::checkGates(out, ref, lp, 2.0, tol));
    if (c.withLse) report.add("LSE", fa_ref::checkLse(outLse, refLse));
  }
  if (!withBackward) return report;
  if (c.pageSize > 0) {
    report.pass = false;
    report.text += "the API has no backward on a paged cache\n";
    return report;
  }

  Placement dOut =
      placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDimV, flipped(c.order), c.rowPad + 1, false, qLengths);
  scatter(dO, dOut, c.batch, c.heads, c.seqQ, c.headDimV, qLengths);
  Placement dQ = placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDim, c.order, c.rowPad, false, qLengths);
  Placement dK =
      placeRows(c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDim, c.order, c.rowPad, false, kPlacementLengths);
  Placement dV =
      placeRows(c.dtype, c.batch, rp.kvHeads, c.seqK, c.headDimV, c.order, c.rowPad, false, kPlacementLengths);
  fa_test::TensorDesc dOd(dOut.t), dQd(dQ.t), dKd(dK.t), dVd(dV.t);
  s = flashAttnBackwardGetWorkspaceSize(handle, attn, seq, qd, kd, vd, od, ld, &bytes);
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnBackwardGetWorkspaceSize", s);
    return report;
  }
  Workspace bws(bytes);
  // Poisoned: every head's dSinks must be written.
  std::vector<float> dSinks(c.sinks.size(), std::nanf(""));
  if (!c.sinks.empty()) flashAttnSetAttentionSinksGradient(attn, dSinks.data());
  s = flashAttnBackward(handle, attn, seq, qd, Q.t.bytes.data(), kd, K.t.bytes.data(), vd, V.t.bytes.data(), od,
                        O.t.bytes.data(), dOd, dOut.t.bytes.data(), ld, lsePtr, dQd, dQ.t.bytes.data(), dKd,
                        dK.t.bytes.data(), dVd, dV.t.bytes.data(), bws.data(), bws.size());
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnBackward", s);
    return report;
  }
  // Key rows past a sequence's used length must come back as zero gradient, so read every row of a dense cache.
  const std::vector<double> gotQ = gather(dQ, c.batch, c.heads, c.seqQ, c.headDim, qLengths);
  const std::vector<double> gotK = gather(dK, c.batch, rp.kvHeads, c.seqK, c.headDim, kPlacementLengths);
  const std::vector<double> gotV = gather(dV, c.batch, rp.kvHeads, c.seqK, c.headDimV, kPlacementLengths);
  if (outputs) {
    outputs->dQ = bytesOf(gotQ);
    outputs->dK = bytesOf(gotK);
    outputs->dV = bytesOf(gotV);
    outputs->dSinks = bytesOf(toDouble(dSinks));
  }
  if (check) {
    std::vector<double> rq, rk, rv, lq, lk, lv, rs, ls;
    const bool sinks = !c.sinks.empty();
    fa_ref::backward(rp, q, k, v, dO, rq, rk, rv, fa_ref::Rounding::None, sinks ? &rs : nullptr);
    fa_ref::backward(rp, q, k, v, dO, lq, lk, lv, roundingOf(c.dtype), sinks ? &ls : nullptr);
    const double tol = fa_ref::normTolerance(roundingOf(c.dtype));
    report.add("dQ", fa_ref::checkGates(gotQ, rq, lq, 3.0, tol));
    report.add("dK", fa_ref::checkGates(gotK, rk, lk, 3.0, tol));
    report.add("dV", fa_ref::checkGates(gotV, rv, lv, 3.0, tol));
    if (sinks) report.add("dSinks", fa_ref::checkGates(toDouble(dSinks), rs, ls, 3.0, tol));
  }
  return report;
}

double DecodeCase::cost() const {
  return double(batch * heads) * double(seqQ) * double(seqK) * double(headDim + headDimV);
}

std::string DecodeCase::describe() const {
  std::ostringstream s;
  s << typeName(dtype) << " b" << batch << " h" << heads << "/" << kvHeads << " d" << headDim << "/" << headDimV
    << " sq" << seqQ << " sk" << seqK << " lengths" << lengthsText(kvLengths) << (paddedPages ? " padded pages" : "")
    << " mask " << maskName(mask) << " win(" << windowLeft << "," << windowRight << ") softcap " << softcap << " alibi "
    << alibi << (sinks.empty() ? "" : " sinks" + floatsText(sinks)) << (withLse ? " lse" : "") << " seed " << seed;
  return s.str();
}

std::vector<DecodeRun> runDecodeCase(const DecodeCase &c) {
  std::mt19937_64 rng(c.seed);
  const std::vector<float> slopes = makeSlopes(c.alibi, c.batch, c.heads);
  std::vector<int64_t> lengths = c.kvLengths;
  if (lengths.empty()) lengths.assign(size_t(c.batch), c.seqK);

  fa_ref::Problem rp;
  rp.batch = c.batch;
  rp.heads = c.heads;
  rp.kvHeads = c.kvHeads;
  rp.headDim = c.headDim;
  rp.headDimV = c.headDimV;
  rp.maxSq = c.seqQ;
  rp.maxSk = c.seqK;
  rp.sk = lengths;
  rp.softcap = c.softcap;
  rp.mask = fa_ref::Mask(int(c.mask));
  rp.windowLeft = c.windowLeft;
  rp.windowRight = c.windowRight;
  rp.alibi = toDouble(slopes);
  rp.sinks = toDouble(c.sinks);

  const std::vector<double> q = fa_test::randomValues(rng, rp.qSize(), c.dtype);
  const std::vector<double> k = fa_test::randomValues(rng, rp.kSize(), c.dtype);
  const std::vector<double> v = fa_test::randomValues(rng, rp.vSize(), c.dtype);
  Placement Q = placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDim, Order::BSHD, 0, false, {});
  scatter(q, Q, c.batch, c.heads, c.seqQ, c.headDim, {});

  std::vector<double> ref, refLse, lp, lpLse;
  fa_ref::forward(rp, q, k, v, ref, refLse);
  fa_ref::forward(rp, q, k, v, lp, lpLse, roundingOf(c.dtype));
  const double tol = fa_ref::normTolerance(roundingOf(c.dtype));

  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::AttnDesc attn;
  setAttention(attn, 0.f, c.mask, c.windowLeft, c.windowRight, c.softcap, c.alibi, slopes);
  if (!c.sinks.empty()) flashAttnSetAttentionSinks(attn, c.sinks.data());
  const std::vector<int32_t> lengths32 = toInt32(lengths);
  fa_test::TensorDesc qd(Q.t);

  std::vector<DecodeRun> runs;
  for (size_t pi = 0; pi < c.pageSizes.size(); ++pi) {
    const int64_t pageSize = c.pageSizes[pi];
    const KvCache cache =
        buildCache({c.dtype, c.batch, c.kvHeads, c.seqK, c.headDim, c.headDimV, pageSize, c.paddedPages}, lengths, k, v,
                   rng);
    fa_test::SeqDesc seq;
    flashAttnSetSeqKvLengths(seq, c.batch, lengths32.data());
    if (pageSize) flashAttnSetSeqPaged(seq, c.batch, cache.blockTable.data(), cache.maxPages);
    fa_test::TensorDesc kd(cache.k), vd(cache.v);
    std::vector<int32_t> chunkCounts = c.chunks;
    if (c.chunksPerCache > 0) {
      chunkCounts.clear();
      for (int j = 0; j < c.chunksPerCache; ++j)
        chunkCounts.push_back(
            c.chunks[((pi + size_t(c.chunkRotation)) * size_t(c.chunksPerCache) + size_t(j)) % c.chunks.size()]);
    }
    for (int32_t chunks : chunkCounts) {
      DecodeRun run;
      run.pageSize = pageSize;
      run.chunks = chunks;
      GateReport &report = run.report;
      Placement O = placeRows(c.dtype, c.batch, c.heads, c.seqQ, c.headDimV, Order::BHSD, 0, false, {});
      Placement L = placeLse(c.batch, c.heads, c.seqQ, {});
      fa_test::TensorDesc od(O.t), ld(L.t);
      flashAttnTensorDescriptor_t lseDesc = c.withLse ? flashAttnTensorDescriptor_t(ld) : nullptr;
      float *lsePtr = c.withLse ? reinterpret_cast<float *>(L.t.bytes.data()) : nullptr;
      size_t bytes = 0;
      flashAttnStatus_t s =
          flashAttnDecodeChunkGetWorkspaceSize(handle, attn, seq, qd, kd, vd, od, lseDesc, chunks, &bytes);
      if (s != FLASHATTN_STATUS_SUCCESS) {
        apiFailure(report, "flashAttnDecodeChunkGetWorkspaceSize", s);
        runs.push_back(std::move(run));
        continue;
      }
      Workspace ws(bytes);
      // Poisoned workspace: a partial state that is read without being written shows up as NaN.
      std::fill_n(static_cast<float *>(ws.data()), bytes / sizeof(float), std::nanf(""));
      s = flashAttnDecodeChunk(handle, attn, seq, qd, Q.t.bytes.data(), kd, cache.k.bytes.data(), vd,
                               cache.v.bytes.data(), od, O.t.bytes.data(), lseDesc, lsePtr, chunks, ws.data(),
                               ws.size());
      if (s != FLASHATTN_STATUS_SUCCESS) {
        apiFailure(report, "flashAttnDecodeChunk", s);
        runs.push_back(std::move(run));
        continue;
      }
      const std::vector<double> out = gather(O, c.batch, c.heads, c.seqQ, c.headDimV, {});
      const std::vector<double> outLse = gather(L, c.batch, c.heads, c.seqQ, 1, {}, kNegInf);
      report.add("O", fa_ref::checkGates(out, ref, lp, 2.0, tol));
      if (c.withLse) report.add("LSE", fa_ref::checkLse(outLse, refLse));
      run.outputs.o = bytesOf(out);
      if (c.withLse) run.outputs.lse = bytesOf(outLse);
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

std::string MergeCase::describe() const {
  std::ostringstream s;
  s << typeName(outType) << " states" << states << " b" << batch << " h" << heads << " sq" << seqQ << " dv" << headDimV
    << (stridedPartials ? " strided" : " packed") << " empty " << emptyFraction << " seed " << seed;
  return s.str();
}

GateReport runMergeCase(const MergeCase &c, AttnOutputs *outputs) {
  GateReport report;
  std::mt19937_64 rng(c.seed);
  const int64_t rows = c.batch * c.heads * c.seqQ;
  std::normal_distribution<double> normal(0.0, 1.0), lseDist(0.0, 3.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> partialO(size_t(c.states * rows * c.headDimV)), partialLse(size_t(c.states * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const bool allEmpty = r % 7 == 3;  // every seventh row has no state at all
    for (int64_t st = 0; st < c.states; ++st) {
      const bool empty = allEmpty || unit(rng) < c.emptyFraction;
      partialLse[size_t(st * rows + r)] = empty ? kNegInf : double(float(lseDist(rng)));
      for (int64_t e = 0; e < c.headDimV; ++e)
        partialO[size_t((st * rows + r) * c.headDimV + e)] = empty ? std::nan("") : double(float(normal(rng)));
    }
  }
  // Partials [states, batch, heads, seqQ, dv]; strided: O stored [b][h][i][state][dv + 2] (state inner, padded rows),
  // LSE with padded heads and batches.
  const int64_t pad = c.stridedPartials ? 2 : 0, row = c.headDimV + pad;
  std::vector<int64_t> oStrides, lStrides;
  if (c.stridedPartials) {
    oStrides = {row, c.heads * c.seqQ * c.states * row, c.seqQ * c.states * row, c.states * row, 1};
    // the seqQ stride of a descriptor must be 1, so the LSE is only padded
    const int64_t headStride = c.seqQ + 2, batchStride = c.heads * headStride + 1;
    lStrides = {c.batch * batchStride + 5, batchStride, headStride, 1};
  } else {
    oStrides = {c.batch * c.heads * c.seqQ * row, c.heads * c.seqQ * row, c.seqQ * row, row, 1};
    lStrides = {c.batch * c.heads * c.seqQ, c.heads * c.seqQ, c.seqQ, 1};
  }
  HostTensor PO(FLASHATTN_DATA_FP32, {c.states, c.batch, c.heads, c.seqQ, c.headDimV}, oStrides);
  HostTensor PL(FLASHATTN_DATA_FP32, {c.states, c.batch, c.heads, c.seqQ}, lStrides);
  PO.fillNaN();
  PL.fillNaN();
  for (int64_t st = 0; st < c.states; ++st)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % c.seqQ, h = (r / c.seqQ) % c.heads, b = r / (c.seqQ * c.heads);
      const int64_t lo = st * lStrides[0] + b * lStrides[1] + h * lStrides[2] + i * lStrides[3];
      fa_test::storeElement(PL.bytes.data(), PL.dtype, lo, partialLse[size_t(st * rows + r)]);
      const int64_t oo = st * oStrides[0] + b * oStrides[1] + h * oStrides[2] + i * oStrides[3];
      for (int64_t e = 0; e < c.headDimV; ++e)
        fa_test::storeElement(PO.bytes.data(), PO.dtype, oo + e, partialO[size_t((st * rows + r) * c.headDimV + e)]);
    }
  Placement O = placeRows(c.outType, c.batch, c.heads, c.seqQ, c.headDimV, Order::BSHD, 1, false, {});
  Placement L = placeLse(c.batch, c.heads, c.seqQ, {});

  fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
  fa_test::TensorDesc pod(PO), pld(PL), od(O.t), ld(L.t);
  flashAttnTensorDescriptor_t lseDesc = c.withLse ? flashAttnTensorDescriptor_t(ld) : nullptr;
  float *lsePtr = c.withLse ? reinterpret_cast<float *>(L.t.bytes.data()) : nullptr;
  size_t bytes = 0;
  flashAttnStatus_t s = flashAttnMergeStatesGetWorkspaceSize(handle, pod, pld, od, lseDesc, &bytes);
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnMergeStatesGetWorkspaceSize", s);
    return report;
  }
  Workspace ws(bytes);
  s = flashAttnMergeStates(handle, pod, reinterpret_cast<const float *>(PO.bytes.data()), pld,
                           reinterpret_cast<const float *>(PL.bytes.data()), od, O.t.bytes.data(), lseDesc, lsePtr,
                           ws.data(), ws.size());
  if (s != FLASHATTN_STATUS_SUCCESS) {
    apiFailure(report, "flashAttnMergeStates", s);
    return report;
  }
  std::vector<double> ref, refLse;
  fa_ref::merge(c.states, rows, c.headDimV, partialO, partialLse, ref, refLse);
  std::vector<double> lp(ref);
  for (auto &x : lp) x = fa_ref::roundTo(roundingOf(c.outType), x);
  const std::vector<double> out = gather(O, c.batch, c.heads, c.seqQ, c.headDimV, {});
  report.add("O", fa_ref::checkGates(out, ref, lp, 2.0, fa_ref::normTolerance(roundingOf(c.outType))));
  std::vector<double> outLse;
  if (c.withLse) {
    outLse = gather(L, c.batch, c.heads, c.seqQ, 1, {}, kNegInf);
    report.add("LSE", fa_ref::checkLse(outLse, refLse));
  }
  if (outputs) {
    outputs->o = bytesOf(out);
    outputs->lse = bytesOf(outLse);
  }
  return report;
}

Workspace::Workspace(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  storage_.resize(bytes + 256);
  const auto address = reinterpret_cast<uintptr_t>(storage_.data());
  offset_ = size_t((256 - address % 256) % 256);
}

ScopedThreads::ScopedThreads(int threads) {
  if (const char *old = std::getenv("FLASHATTN_HOST_THREADS")) {
    previous_ = old;
    hadPrevious_ = true;
  }
  setenv("FLASHATTN_HOST_THREADS", std::to_string(threads).c_str(), 1);
}

ScopedThreads::~ScopedThreads() {
  if (hadPrevious_)
    setenv("FLASHATTN_HOST_THREADS", previous_.c_str(), 1);
  else
    unsetenv("FLASHATTN_HOST_THREADS");
}

}  // namespace host_test
