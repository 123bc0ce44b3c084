// SPDX-License-Identifier: BSD-3-Clause
// flashattn-bench's own float64 attention, the reference its HOST-backend runs are checked against (comparing the
// HOST backend with itself would prove nothing). Written from the formulas of docs/semantics.md, independently of the
// library, and small: dense row-major double arrays in, dense double arrays out; the caller gathers strided slices.
//
// Shapes: Q, dQ [B, H, Sq, D]; O, dO [B, H, Sq, Dv]; K, dK [B, HK, Sk, D]; V, dV [B, HK, Sk, Dv]; LSE [B, H, Sq]. Query
// head h reads KV head h / (H / HK). Scale 1/sqrt(D), of the Q/K head dim. A causal mask is bottom-right aligned: key j
// is visible to row i iff j <= i + sk - Sq, with sk the sequence's key count. A row with no visible key has O = 0 and
// LSE = -inf.
// Softcap (docs/semantics.md): each logit becomes softcap * tanh(logit / softcap).
// ALiBi (docs/semantics.md): each logit minus slope_h * |j - (i + sk - Sq)|, the key's distance to the row's
// bottom-right diagonal.
// Attention sinks (docs/semantics.md): a logit s_h per query head that joins every row's softmax denominator without
// a value, so LSE = log(sum_j exp(logit_ij) + exp(s_h)), and a row with no visible key has O = 0 and LSE = s_h.
#pragma once

#include <cstdint>
#include <vector>

namespace bench_oracle {

struct Shape {
  int64_t B = 0, H = 0, HK = 0, Sq = 0, Sk = 0, D = 0;
  int64_t Dv = 0;  // head dim of V and O (MLA's differs from Q/K's); 0: D
  bool causal = false;
  // Keys used by sequence b: [0, keyLengths[b]) of the Sk stored ones (decode's per-sequence lengths); empty: all.
  std::vector<int64_t> keyLengths;
  // Sink logit of each query head of the shape (H of them); empty: no sinks.
  std::vector<double> sinks;
  double softcap = 0;  // 0: none
  // ALiBi slope of each query head of the shape (H of them); empty: no ALiBi.
  std::vector<double> alibi;
};

// O and LSE of softmax(scale Q K^T) V, the sinks in the denominator when the shape has them.
void forward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
             std::vector<double> &o, std::vector<double> &lse);

// dQ, dK, dV as flashAttnBackward defines them: P recomputed from the given LSE, D_i = dO_i . O_i with the given O,
// dK and dV of a KV head summed over its query heads. Sinks need nothing here: the LSE already holds their term.
void backward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
              const std::vector<double> &o, const std::vector<double> &dO, const std::vector<double> &lse,
              std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv);

// dSinks[h] = sum over the batch and the rows of head h of -exp(s_h - LSE_i) (dO_i . O_i), from the given O and LSE
// as flashAttnBackward computes it; H values, added to what `dsinks` holds (resized to H with zeros if smaller), so
// a caller may sum it over slices of the batch.
void sinksGradient(const Shape &s, const std::vector<double> &o, const std::vector<double> &dO,
                   const std::vector<double> &lse, std::vector<double> &dsinks);

}  // namespace bench_oracle
