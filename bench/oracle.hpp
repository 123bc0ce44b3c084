// SPDX-License-Identifier: BSD-3-Clause
// flashattn-bench's own float64 attention, the reference its HOST-backend runs are checked against (comparing the
// HOST backend with itself would prove nothing). Written from the formulas of docs/semantics.md, independently of the
// library, and small: dense row-major double arrays in, dense double arrays out; the caller gathers strided slices.
//
// Shapes: Q, O, dO, dQ [B, H, Sq, D]; K, V, dK, dV [B, HK, Sk, D]; LSE [B, H, Sq]. Query head h reads KV head
// h / (H / HK). Scale 1/sqrt(D). A causal mask is bottom-right aligned: key j is visible to row i iff
// j <= i + sk - Sq, with sk the sequence's key count. A row with no visible key has O = 0 and LSE = -inf.
#pragma once

#include <cstdint>
#include <vector>

namespace bench_oracle {

struct Shape {
  int64_t B = 0, H = 0, HK = 0, Sq = 0, Sk = 0, D = 0;
  bool causal = false;
  // Keys used by sequence b: [0, keyLengths[b]) of the Sk stored ones (decode's per-sequence lengths); empty: all.
  std::vector<int64_t> keyLengths;
};

// O and LSE of softmax(scale Q K^T) V.
void forward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
             std::vector<double> &o, std::vector<double> &lse);

// dQ, dK, dV as flashAttnBackward defines them: P recomputed from the given LSE, D_i = dO_i . O_i with the given O,
// dK and dV of a KV head summed over its query heads.
void backward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k, const std::vector<double> &v,
              const std::vector<double> &o, const std::vector<double> &dO, const std::vector<double> &lse,
              std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv);

}  // namespace bench_oracle
