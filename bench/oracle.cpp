// SPDX-License-Identifier: BSD-3-Clause
#include "oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace bench_oracle {

namespace {

int64_t keysOf(const Shape &s, int64_t b) { return s.keyLengths.empty() ? s.Sk : s.keyLengths[size_t(b)]; }

// One past the last key row i may see.
int64_t visibleEnd(const Shape &s, int64_t b, int64_t i) {
  const int64_t sk = keysOf(s, b);
  if (!s.causal) return sk;
  return std::clamp<int64_t>(i + sk - s.Sq + 1, 0, sk);
}

int64_t dimV(const Shape &s) { return s.Dv ? s.Dv : s.D; }

// Offsets of the row (b, h, i) of a [B, heads, rows, width] array.
int64_t rowAt(int64_t width, int64_t heads, int64_t rows, int64_t b, int64_t h, int64_t i) {
  return ((b * heads + h) * rows + i) * width;
}

double dot(const double *a, const double *b, int64_t n) {
  double sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// The logit of row i and key j of sequence b, head h, from the scaled product x (softcap * tanh(x / softcap) with a
// softcap, minus the ALiBi term with slopes), and its derivative by x.
double logitOf(const Shape &s, double x, int64_t b, int64_t h, int64_t i, int64_t j, double *derivative) {
  double logit = x;
  *derivative = 1.0;
  if (s.softcap > 0) {
    const double t = std::tanh(x / s.softcap);
    *derivative = 1.0 - t * t;
    logit = s.softcap * t;
  }
  if (!s.alibi.empty()) logit -= s.alibi[size_t(h)] * std::fabs(double(j - (i + keysOf(s, b) - s.Sq)));
  return logit;
}

}  // namespace

void forward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
             std::vector<double> &o, std::vector<double> &lse) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  const int64_t group = s.H / s.HK, dv = dimV(s);
  o.assign(size_t(s.B * s.H * s.Sq * dv), 0.0);
  lse.assign(size_t(s.B * s.H * s.Sq), -std::numeric_limits<double>::infinity());
  std::vector<double> logits;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const int64_t end = visibleEnd(s, b, i);
        const bool sink = !s.sinks.empty();
        const double sinkLogit = sink ? s.sinks[size_t(h)] : 0.0;
        if (end == 0) {
          // O stays 0; the sink alone makes the denominator.
          if (sink) lse[size_t((b * s.H + h) * s.Sq + i)] = sinkLogit;
          continue;
        }
        const double *qi = &q[size_t(rowAt(s.D, s.H, s.Sq, b, h, i))];
        logits.resize(size_t(end));
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < end; ++j) {
          double unused;
          const double x = scale * dot(qi, &k[size_t(rowAt(s.D, s.HK, s.Sk, b, h / group, j))], s.D);
          logits[size_t(j)] = logitOf(s, x, b, h, i, j, &unused);
          top = std::max(top, logits[size_t(j)]);
        }
        if (sink) top = std::max(top, sinkLogit);
        double sum = sink ? std::exp(sinkLogit - top) : 0.0;
        for (int64_t j = 0; j < end; ++j) sum += std::exp(logits[size_t(j)] - top);
        const double rowLse = top + std::log(sum);
        lse[size_t((b * s.H + h) * s.Sq + i)] = rowLse;
        double *oi = &o[size_t(rowAt(dv, s.H, s.Sq, b, h, i))];
        for (int64_t j = 0; j < end; ++j) {
          const double p = std::exp(logits[size_t(j)] - rowLse);
          const double *vj = &v[size_t(rowAt(dv, s.HK, s.Sk, b, h / group, j))];
          for (int64_t d = 0; d < dv; ++d) oi[d] += p * vj[d];
        }
      }
}

void backward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
              const std::vector<double> &o, const std::vector<double> &dO, const std::vector<double> &lse,
              std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  const int64_t group = s.H / s.HK, dimv = dimV(s);
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const double rowLse = lse[size_t((b * s.H + h) * s.Sq + i)];
        const int64_t end = visibleEnd(s, b, i);
        if (end == 0 || std::isinf(rowLse)) continue;  // no visible key: zero gradient
        const size_t qo = size_t(rowAt(s.D, s.H, s.Sq, b, h, i)), oo = size_t(rowAt(dimv, s.H, s.Sq, b, h, i));
        const double rowD = dot(&dO[oo], &o[oo], dimv);
        for (int64_t j = 0; j < end; ++j) {
          const size_t ko = size_t(rowAt(s.D, s.HK, s.Sk, b, h / group, j));
          const size_t vo = size_t(rowAt(dimv, s.HK, s.Sk, b, h / group, j));
          double derivative;
          const double p = std::exp(logitOf(s, scale * dot(&q[qo], &k[ko], s.D), b, h, i, j, &derivative) - rowLse);
          const double dS = p * (dot(&dO[oo], &v[vo], dimv) - rowD) * derivative;
          for (int64_t d = 0; d < dimv; ++d) dv[vo + size_t(d)] += p * dO[oo + size_t(d)];
          for (int64_t d = 0; d < s.D; ++d) {
            dq[qo + size_t(d)] += scale * dS * k[ko + size_t(d)];
            dk[ko + size_t(d)] += scale * dS * q[qo + size_t(d)];
          }
        }
      }
}

void sinksGradient(const Shape &s, const std::vector<double> &o, const std::vector<double> &dO,
                   const std::vector<double> &lse, std::vector<double> &dsinks) {
  if (dsinks.size() < size_t(s.H)) dsinks.resize(size_t(s.H), 0.0);
  if (s.sinks.empty()) return;
  const int64_t dv = dimV(s);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const double rowLse = lse[size_t((b * s.H + h) * s.Sq + i)];
        const size_t at = size_t(rowAt(dv, s.H, s.Sq, b, h, i));
        dsinks[size_t(h)] -= std::exp(s.sinks[size_t(h)] - rowLse) * dot(&dO[at], &o[at], dv);
      }
}

}  // namespace bench_oracle
