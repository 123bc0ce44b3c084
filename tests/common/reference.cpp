// SPDX-License-Identifier: BSD-3-Clause
#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/half.hpp"

namespace fa_ref {

namespace {
const double kNegInf = -std::numeric_limits<double>::infinity();

bool visible(const Problem &p, int64_t i, int64_t j, int64_t sq, int64_t sk) {
  const int64_t aligned = i + sk - sq;
  if (p.mask == Mask::CausalTopLeft && j > i) return false;
  if (p.mask == Mask::CausalBottomRight && j > aligned) return false;
  if (p.windowLeft >= 0 && j < aligned - p.windowLeft) return false;
  if (p.windowRight >= 0 && j > aligned + p.windowRight) return false;
  return true;
}

// Logit after scale, softcap and ALiBi; also d(logit)/d(raw dot) for the backward.
double logit(const Problem &p, double dot, int64_t b, int64_t h, int64_t i, int64_t j, int64_t sq, int64_t sk,
             double *dLogitDDot) {
  double s = dot * p.effectiveScale();
  double deriv = p.effectiveScale();
  if (p.softcap > 0) {
    const double t = std::tanh(s / p.softcap);
    s = p.softcap * t;
    deriv *= 1 - t * t;
  }
  const double slope = p.alibiSlope(b, h);
  if (slope != 0) s -= slope * std::fabs(double(j - (i + sk - sq)));
  if (dLogitDDot) *dLogitDDot = deriv;
  return s;
}

struct Index {
  const Problem &p;
  size_t q(int64_t b, int64_t h, int64_t i) const { return size_t(((b * p.heads + h) * p.maxSq + i) * p.headDim); }
  size_t k(int64_t b, int64_t h, int64_t j) const {
    return size_t(((b * p.kvHeads + h / (p.heads / p.kvHeads)) * p.maxSk + j) * p.headDim);
  }
  size_t v(int64_t b, int64_t h, int64_t j) const {
    return size_t(((b * p.kvHeads + h / (p.heads / p.kvHeads)) * p.maxSk + j) * p.headDimV);
  }
  size_t o(int64_t b, int64_t h, int64_t i) const { return size_t(((b * p.heads + h) * p.maxSq + i) * p.headDimV); }
  size_t row(int64_t b, int64_t h, int64_t i) const { return size_t((b * p.heads + h) * p.maxSq + i); }
};

// Q_i . K_j of query head h (its KV head's K row).
double qkDot(const Problem &p, const Index &ix, const std::vector<double> &q, const std::vector<double> &k, int64_t b,
             int64_t h, int64_t i, int64_t j) {
  double dot = 0;
  for (int64_t d = 0; d < p.headDim; ++d) dot += q[ix.q(b, h, i) + size_t(d)] * k[ix.k(b, h, j) + size_t(d)];
  return dot;
}

// dQ_i += dS K_j and dK_j += dS Q_i.
void addDs(const Problem &p, const Index &ix, const std::vector<double> &q, const std::vector<double> &k,
           std::vector<double> &dQ, std::vector<double> &dK, int64_t b, int64_t h, int64_t i, int64_t j, double ds) {
  for (int64_t d = 0; d < p.headDim; ++d) {
    dQ[ix.q(b, h, i) + size_t(d)] += ds * k[ix.k(b, h, j) + size_t(d)];
    dK[ix.k(b, h, j) + size_t(d)] += ds * q[ix.q(b, h, i) + size_t(d)];
  }
}

// Probabilities of one query row (rounded like a kernel rounds P), and the row's LSE.
double rowSoftmax(const Problem &p, const std::vector<double> &q, const std::vector<double> &k, int64_t b, int64_t h,
                  int64_t i, Rounding r, std::vector<double> &prob) {
  const Index ix{p};
  const int64_t sq = p.seqQ(b), sk = p.seqK(b);
  prob.assign(size_t(sk), 0.0);
  double mx = kNegInf;
  for (int64_t j = 0; j < sk; ++j) {
    if (!visible(p, i, j, sq, sk)) {
      prob[size_t(j)] = kNegInf;
      continue;
    }
    const double s = logit(p, roundTo(r, qkDot(p, ix, q, k, b, h, i, j)), b, h, i, j, sq, sk, nullptr);
    prob[size_t(j)] = s;
    mx = std::max(mx, s);
  }
  const bool sink = !p.sinks.empty();
  if (sink) mx = std::max(mx, p.sinks[size_t(h)]);
  if (mx == kNegInf) {
    std::fill(prob.begin(), prob.end(), 0.0);
    return kNegInf;
  }
  double sum = sink ? std::exp(p.sinks[size_t(h)] - mx) : 0.0;
  for (auto &x : prob) {
    x = x == kNegInf ? 0.0 : std::exp(x - mx);
    sum += x;
  }
  for (auto &x : prob) x = roundTo(r, x / sum);
  return mx + std::log(sum);
}
}  // namespace

double Problem::effectiveScale() const { return scale > 0 ? scale : 1.0 / std::sqrt(double(headDim)); }

double Problem::alibiSlope(int64_t b, int64_t h) const {
  if (alibi.empty()) return 0;
  return alibi.size() == size_t(heads) ? alibi[size_t(h)] : alibi[size_t(b * heads + h)];
}

double roundTo(Rounding r, double x) {
  switch (r) {
    case Rounding::None: return x;
    case Rounding::FP32: return double(float(x));
    case Rounding::FP16: return double(flashattn::fp16ToFloat(flashattn::floatToFp16(float(x))));
    case Rounding::BF16: return double(flashattn::bf16ToFloat(flashattn::floatToBf16(float(x))));
  }
  return x;
}

double normTolerance(Rounding storage) {
  switch (storage) {
    case Rounding::BF16: return 5e-3;
    case Rounding::FP16: return 6e-4;
    default: return 1e-5;
  }
}

void forward(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
             const std::vector<double> &v, std::vector<double> &o, std::vector<double> &lse, Rounding r) {
  const Index ix{p};
  o.assign(p.oSize(), 0.0);
  lse.assign(p.lseSize(), kNegInf);
  std::vector<double> prob;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seqQ(b); ++i) {
        lse[ix.row(b, h, i)] = rowSoftmax(p, q, k, b, h, i, r, prob);
        double *orow = &o[ix.o(b, h, i)];
        // Key-outer order walks V row by row (contiguous), the slow part of every test otherwise.
        for (int64_t j = 0; j < p.seqK(b); ++j) {
          const double pj = prob[size_t(j)];
          if (pj == 0) continue;
          const double *vrow = &v[ix.v(b, h, j)];
          for (int64_t d = 0; d < p.headDimV; ++d) orow[d] += pj * vrow[d];
        }
        for (int64_t d = 0; d < p.headDimV; ++d) orow[d] = roundTo(r, orow[d]);
      }
}

void backward(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
              const std::vector<double> &v, const std::vector<double> &dO, std::vector<double> &dQ,
              std::vector<double> &dK, std::vector<double> &dV, Rounding r, std::vector<double> *dSinks) {
  const Index ix{p};
  if (dSinks) dSinks->assign(size_t(p.heads), 0.0);
  dQ.assign(p.qSize(), 0.0);
  dK.assign(p.kSize(), 0.0);
  dV.assign(p.vSize(), 0.0);
  std::vector<double> prob, dp;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seqQ(b); ++i) {
        const int64_t sq = p.seqQ(b), sk = p.seqK(b);
        const double rowLse = rowSoftmax(p, q, k, b, h, i, r, prob);
        if (rowLse == kNegInf) continue;
        dp.assign(size_t(sk), 0.0);
        double rowDot = 0;  // sum_j P_ij dP_ij == dO_i . O_i
        for (int64_t j = 0; j < sk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < p.headDimV; ++d) acc += dO[ix.o(b, h, i) + size_t(d)] * v[ix.v(b, h, j) + size_t(d)];
          dp[size_t(j)] = roundTo(r, acc);
          rowDot += prob[size_t(j)] * dp[size_t(j)];
        }
        if (r != Rounding::None) {
          // A backward in the storage precision reads O as the forward stored it (rounded), so its D is dO . O
          // with that O, as the API's Backward computes it.
          rowDot = 0;
          for (int64_t d = 0; d < p.headDimV; ++d) {
            double o = 0;
            for (int64_t j = 0; j < sk; ++j) o += prob[size_t(j)] * v[ix.v(b, h, j) + size_t(d)];
            rowDot += dO[ix.o(b, h, i) + size_t(d)] * roundTo(r, o);
          }
        }
        // The sink's column: logit s, no value, so dP = 0 and dS = P_sink (0 - D).
        if (dSinks && !p.sinks.empty()) (*dSinks)[size_t(h)] -= std::exp(p.sinks[size_t(h)] - rowLse) * rowDot;
        for (int64_t j = 0; j < sk; ++j) {
          const double pij = prob[size_t(j)];
          if (pij == 0 && !visible(p, i, j, sq, sk)) continue;
          for (int64_t d = 0; d < p.headDimV; ++d) dV[ix.v(b, h, j) + size_t(d)] += pij * dO[ix.o(b, h, i) + size_t(d)];
          double dLogitDDot = 0;
          logit(p, roundTo(r, qkDot(p, ix, q, k, b, h, i, j)), b, h, i, j, sq, sk, &dLogitDDot);
          addDs(p, ix, q, k, dQ, dK, b, h, i, j, roundTo(r, pij * (dp[size_t(j)] - rowDot) * dLogitDDot));
        }
      }
  for (auto *g : {&dQ, &dK, &dV})
    for (auto &x : *g) x = roundTo(r, x);
}

void backwardKernelRounding(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
                            const std::vector<double> &v, const std::vector<double> &dO, std::vector<double> &dQ,
                            std::vector<double> &dK, std::vector<double> &dV, Rounding r, bool dsUnscaled) {
  const Index ix{p};
  const double dsScale = dsUnscaled ? p.effectiveScale() : 1.0;  // what multiplies dS after its rounding
  dQ.assign(p.qSize(), 0.0);
  dK.assign(p.kSize(), 0.0);
  dV.assign(p.vSize(), 0.0);
  std::vector<double> s, o(size_t(p.headDimV));
  std::vector<char> seen;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.seqQ(b); ++i) {
        const int64_t sq = p.seqQ(b), sk = p.seqK(b);
        const bool sink = !p.sinks.empty();
        s.assign(size_t(sk), 0.0);
        seen.assign(size_t(sk), 0);
        double mx = sink ? p.sinks[size_t(h)] : kNegInf;
        int64_t visibleKeys = 0;
        for (int64_t j = 0; j < sk; ++j) {
          if (!visible(p, i, j, sq, sk)) continue;
          s[size_t(j)] = logit(p, qkDot(p, ix, q, k, b, h, i, j), b, h, i, j, sq, sk, nullptr);
          seen[size_t(j)] = 1;
          mx = std::max(mx, s[size_t(j)]);
          ++visibleKeys;
        }
        if (visibleKeys == 0) continue;  // O = 0 and no gradient, with or without a sink
        double sum = sink ? std::exp(p.sinks[size_t(h)] - mx) : 0.0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < sk; ++j) {
          if (!seen[size_t(j)]) continue;
          const double e = std::exp(s[size_t(j)] - mx);
          sum += e;
          const double pr = roundTo(r, e);
          for (int64_t d = 0; d < p.headDimV; ++d) o[size_t(d)] += pr * v[ix.v(b, h, j) + size_t(d)];
        }
        const double rowLse = mx + std::log(sum);
        double rowDot = 0;
        for (int64_t d = 0; d < p.headDimV; ++d) rowDot += dO[ix.o(b, h, i) + size_t(d)] * roundTo(r, o[size_t(d)] / sum);
        const bool oneKey = visibleKeys == 1 && !sink;
        for (int64_t j = 0; j < sk; ++j) {
          if (!seen[size_t(j)]) continue;
          const double pij = std::exp(s[size_t(j)] - rowLse);
          const double pr = roundTo(r, pij);
          double dp = 0;
          for (int64_t d = 0; d < p.headDimV; ++d) {
            dV[ix.v(b, h, j) + size_t(d)] += pr * dO[ix.o(b, h, i) + size_t(d)];
            dp += dO[ix.o(b, h, i) + size_t(d)] * v[ix.v(b, h, j) + size_t(d)];
          }
          if (oneKey) continue;
          double dLogitDDot = 0;
          logit(p, qkDot(p, ix, q, k, b, h, i, j), b, h, i, j, sq, sk, &dLogitDDot);
          addDs(p, ix, q, k, dQ, dK, b, h, i, j, roundTo(r, pij * (dp - rowDot) * dLogitDDot / dsScale) * dsScale);
        }
      }
  for (auto *g : {&dQ, &dK, &dV})
    for (auto &x : *g) x = roundTo(r, x);
}

void merge(int64_t states, int64_t rows, int64_t headDimV, const std::vector<double> &partialO,
           const std::vector<double> &partialLse, std::vector<double> &o, std::vector<double> &lse) {
  o.assign(size_t(rows * headDimV), 0.0);
  lse.assign(size_t(rows), kNegInf);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = kNegInf;
    for (int64_t s = 0; s < states; ++s) mx = std::max(mx, partialLse[size_t(s * rows + r)]);
    if (mx == kNegInf) continue;
    double sum = 0;
    for (int64_t s = 0; s < states; ++s) {
      const double l = partialLse[size_t(s * rows + r)];
      if (l != kNegInf) sum += std::exp(l - mx);
    }
    for (int64_t s = 0; s < states; ++s) {
      const double l = partialLse[size_t(s * rows + r)];
      if (l == kNegInf) continue;
      const double w = std::exp(l - mx) / sum;
      for (int64_t d = 0; d < headDimV; ++d)
        o[size_t(r * headDimV + d)] += w * partialO[size_t((s * rows + r) * headDimV + d)];
    }
    lse[size_t(r)] = mx + std::log(sum);
  }
}

std::string Gate::describe() const {
  std::ostringstream s;
  s << "maxErr " << maxErr << " (lowp " << maxErrLp << "), normwise " << normwise << (finite ? "" : ", NON-FINITE")
    << (pass ? " PASS" : " FAIL");
  return s.str();
}

Gate checkGates(const std::vector<double> &out, const std::vector<double> &ref, const std::vector<double> &lp,
                double factor, double normTol) {
  Gate g;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) g.finite = false;
    const double e = std::fabs(out[i] - ref[i]);
    g.maxErr = std::isfinite(e) ? std::max(g.maxErr, e) : std::numeric_limits<double>::infinity();
    g.maxErrLp = std::max(g.maxErrLp, std::fabs(lp[i] - ref[i]));
    num += e * e;
    den += ref[i] * ref[i];
  }
  g.normwise = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  g.pass = g.finite && g.maxErr <= factor * g.maxErrLp + 1e-5 && g.normwise <= normTol;
  return g;
}

Gate checkLse(const std::vector<double> &out, const std::vector<double> &ref, double tol) {
  Gate g;
  bool ok = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(out[i])) g.finite = false;
    if (ref[i] == kNegInf) {
      if (out[i] != kNegInf) ok = false;
      continue;
    }
    const double e = std::fabs(out[i] - ref[i]);
    g.maxErr = std::isfinite(e) ? std::max(g.maxErr, e) : std::numeric_limits<double>::infinity();
  }
  g.normwise = g.maxErr;
  g.pass = ok && g.finite && g.maxErr <= tol;
  return g;
}

}  // namespace fa_ref
