// SPDX-License-Identifier: BSD-3-Clause
// The oracle: naive attention in float64 (and the same arithmetic rounded to the storage precision, for the
// relative gate of docs/testing.md), written independently of the library's code paths.
//
// Canonical layout, whatever layout the library was given: q[b][h][i][d] with i < maxSq, k/v[b][kvh][j][d] with
// j < maxSk, o[b][h][i][dv], lse[b][h][i]. Sequence b uses sq[b] query rows and sk[b] key rows; padded rows are
// ignored on input and written as 0 (O) / -inf (LSE) on output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa_ref {

enum class Mask { None = 0, CausalTopLeft = 1, CausalBottomRight = 2 };

struct Problem {
  int64_t batch = 1, heads = 1, kvHeads = 1, headDim = 64, headDimV = 64;
  int64_t maxSq = 1, maxSk = 1;
  std::vector<int64_t> sq, sk;  // per sequence; empty = maxSq / maxSk for all
  double scale = 0;             // 0 = 1/sqrt(headDim)
  double softcap = 0;
  Mask mask = Mask::None;
  int64_t windowLeft = -1, windowRight = -1;
  std::vector<double> alibi;  // empty, [heads] or [batch*heads]
  std::vector<double> sinks;  // empty or [heads]: a logit per query head in every row's denominator, without a value

  int64_t seqQ(int64_t b) const { return sq.empty() ? maxSq : sq[b]; }
  int64_t seqK(int64_t b) const { return sk.empty() ? maxSk : sk[b]; }
  double effectiveScale() const;
  double alibiSlope(int64_t b, int64_t h) const;
  size_t qSize() const { return size_t(batch * heads * maxSq * headDim); }
  size_t kSize() const { return size_t(batch * kvHeads * maxSk * headDim); }
  size_t vSize() const { return size_t(batch * kvHeads * maxSk * headDimV); }
  size_t oSize() const { return size_t(batch * heads * maxSq * headDimV); }
  size_t lseSize() const { return size_t(batch * heads * maxSq); }
};

// Rounding applied at the points where a low-precision kernel rounds: the logits, P before P*V, the output (and in
// backward dP, dS and the gradients). Identity gives the float64 reference.
enum class Rounding { None, FP16, BF16, FP32 };
double roundTo(Rounding r, double x);

void forward(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
             const std::vector<double> &v, std::vector<double> &o, std::vector<double> &lse,
             Rounding r = Rounding::None);

// Gradients of sum(O * dO); rows with no visible key contribute nothing. dSinks (with sinks): [heads], the sinks'. With a Rounding, D = dO . O uses O rounded
// to the storage type, as a backward that reads the stored O computes it.
void backward(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
              const std::vector<double> &v, const std::vector<double> &dO, std::vector<double> &dQ,
              std::vector<double> &dK, std::vector<double> &dV, Rounding r = Rounding::None,
              std::vector<double> *dSinks = nullptr);

// Merge of S partial states (canonical [s][b][h][i][dv] and [s][b][h][i]).
// Gradients in FP16/BF16 arithmetic rounded where FlashAttention's kernels round, a second low-precision variant for
// the normwise floor of the gradients: logits and dP from unrounded products; the forward's unnormalised P rounded
// for P V, O rounded once; the backward's P = exp(logit - LSE) rounded for dV = P^T dO only; dS = P (dP - D)
// d(logit)/d(dot) rounded for dQ = dS K and dK = dS^T Q; D = dO . O with that O; a row that sees one key (and has no
// sink) gets dS = 0; gradients rounded once. The oracle's variant above rounds at other points (logits, P, dP), so
// on a problem with few nonzero gradient rows either can land above the other (test_support.hpp). dsUnscaled: dS is
// rounded without the softmax scale, which dQ and dK take after their sums (the Hopper kernels' arrangement).
void backwardKernelRounding(const Problem &p, const std::vector<double> &q, const std::vector<double> &k,
                            const std::vector<double> &v, const std::vector<double> &dO, std::vector<double> &dQ,
                            std::vector<double> &dK, std::vector<double> &dV, Rounding r, bool dsUnscaled = false);

void merge(int64_t states, int64_t rows, int64_t headDimV, const std::vector<double> &partialO,
           const std::vector<double> &partialLse, std::vector<double> &o, std::vector<double> &lse);

// The two gates of docs/testing.md plus finiteness.
struct Gate {
  double maxErr = 0;       // max |out - ref|
  double maxErrLp = 0;     // max |lp - ref|
  double normwise = 0;     // ||out - ref|| / ||ref||
  bool finite = true;
  bool pass = false;
  std::string describe() const;
};
// factor 2 for outputs, 3 for gradients; normTol by storage type (bf16 5e-3, fp16 6e-4, fp32 1e-5).
Gate checkGates(const std::vector<double> &out, const std::vector<double> &ref, const std::vector<double> &lp,
                double factor, double normTol);
// LSE gate: |out - ref| <= tol where ref is finite, out == -inf exactly where ref is -inf.
Gate checkLse(const std::vector<double> &out, const std::vector<double> &ref, double tol = 1e-4);

double normTolerance(Rounding storage);

}  // namespace fa_ref
