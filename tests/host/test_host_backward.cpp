// SPDX-License-Identifier: BSD-3-Clause
// Backward on the HOST backend through the public API: against the float64 oracle's backward (both gates, factor 3),
// and against central finite differences of the float64 forward, which checks oracle and backend independently.
#include <cmath>
#include <random>

#include "grid_runner.hpp"

using namespace host_test;

namespace {

std::vector<AttnCase> slice(const std::vector<AttnCase> &all, size_t part, size_t parts) {
  std::vector<AttnCase> out;
  for (size_t i = part; i < all.size(); i += parts) out.push_back(all[i]);
  return out;
}

}  // namespace

// Split in three so ctest can run the parts side by side.
TEST(HostBackward, GridPart1) { runAttnGrid("backward part 1/3", slice(backwardCases(), 0, 3), true); }
TEST(HostBackward, GridPart2) { runAttnGrid("backward part 2/3", slice(backwardCases(), 1, 3), true); }
TEST(HostBackward, GridPart3) { runAttnGrid("backward part 3/3", slice(backwardCases(), 2, 3), true); }

namespace {

// d/dx of sum(O * dO) by central differences of the float64 forward, for every element of x.
std::vector<double> numericGradient(const fa_ref::Problem &p, std::vector<double> q, std::vector<double> k,
                                    std::vector<double> v, const std::vector<double> &dO, int which) {
  std::vector<double> &x = which == 0 ? q : which == 1 ? k : v;
  std::vector<double> grad(x.size());
  auto loss = [&] {
    std::vector<double> o, lse;
    fa_ref::forward(p, q, k, v, o, lse);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * dO[i];
    return s;
  };
  const double h = 1e-4;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

struct TinyCase {
  int64_t heads, kvHeads, sq, sk, d, dv;
  fa_ref::Mask mask;
  int64_t left, right;
  double softcap;
  bool alibi;
};

}  // namespace

TEST(HostBackward, MatchesFiniteDifferences) {
  const TinyCase tiny[] = {
      {2, 1, 5, 7, 4, 3, fa_ref::Mask::None, -1, -1, 0, false},
      {2, 2, 6, 4, 3, 5, fa_ref::Mask::CausalBottomRight, -1, -1, 0, false},  // rows 0, 1 fully masked
      {3, 1, 4, 9, 8, 8, fa_ref::Mask::CausalTopLeft, -1, -1, 2.5, false},
      {2, 1, 7, 7, 5, 2, fa_ref::Mask::None, 2, 1, 0, true},
      {4, 2, 3, 11, 6, 6, fa_ref::Mask::CausalBottomRight, 4, -1, 3.0, true},
  };
  int index = 0;
  for (const TinyCase &t : tiny) {
    SCOPED_TRACE("finite-difference case " + std::to_string(index));
    std::mt19937_64 rng(11000 + uint64_t(index++));
    fa_ref::Problem p;
    p.batch = 2;
    p.heads = t.heads;
    p.kvHeads = t.kvHeads;
    p.maxSq = t.sq;
    p.maxSk = t.sk;
    p.headDim = t.d;
    p.headDimV = t.dv;
    p.mask = t.mask;
    p.windowLeft = t.left;
    p.windowRight = t.right;
    p.softcap = t.softcap;
    std::vector<float> slopes;
    if (t.alibi)
      for (int64_t h = 0; h < t.heads; ++h) slopes.push_back(0.25f * float(h + 1));
    p.alibi.assign(slopes.begin(), slopes.end());
    const auto q = fa_test::randomValues(rng, p.qSize(), FLASHATTN_DATA_FP32);
    const auto k = fa_test::randomValues(rng, p.kSize(), FLASHATTN_DATA_FP32);
    const auto v = fa_test::randomValues(rng, p.vSize(), FLASHATTN_DATA_FP32);
    const auto dO = fa_test::randomValues(rng, p.oSize(), FLASHATTN_DATA_FP32);

    // Run forward then backward through the API on packed BHSD tensors.
    const int64_t b = p.batch;
    auto Q = fa_test::pack4(q, FLASHATTN_DATA_FP32, b, t.heads, t.sq, t.d, fa_test::Order::BHSD);
    auto K = fa_test::pack4(k, FLASHATTN_DATA_FP32, b, t.kvHeads, t.sk, t.d, fa_test::Order::BHSD);
    auto V = fa_test::pack4(v, FLASHATTN_DATA_FP32, b, t.kvHeads, t.sk, t.dv, fa_test::Order::BHSD);
    auto DO = fa_test::pack4(dO, FLASHATTN_DATA_FP32, b, t.heads, t.sq, t.dv, fa_test::Order::BSHD);
    fa_test::HostTensor O(FLASHATTN_DATA_FP32, {b, t.heads, t.sq, t.dv},
                          fa_test::stridesFor(fa_test::Order::BHSD, b, t.heads, t.sq, t.dv));
    fa_test::HostTensor DQ(FLASHATTN_DATA_FP32, Q.dims, Q.strides), DK(FLASHATTN_DATA_FP32, K.dims, K.strides),
        DV(FLASHATTN_DATA_FP32, V.dims, V.strides);
    for (auto *x : {&O, &DQ, &DK, &DV}) x->fillNaN();
    std::vector<float> lse(size_t(b * t.heads * t.sq), std::nanf(""));
    const int64_t lseDims[] = {b, t.heads, t.sq}, lseStrides[] = {t.heads * t.sq, t.sq, 1};

    fa_test::Handle handle(FLASHATTN_BACKEND_HOST);
    fa_test::AttnDesc attn;
    flashAttnSetAttentionMask(attn, flashAttnMaskMode_t(int(t.mask)));
    flashAttnSetAttentionWindow(attn, t.left, t.right);
    flashAttnSetAttentionSoftcap(attn, float(t.softcap));
    if (t.alibi) flashAttnSetAttentionAlibiSlopes(attn, slopes.data(), 0);
    fa_test::TensorDesc qd(Q), kd(K), vd(V), od(O), dod(DO), dqd(DQ), dkd(DK), dvd(DV), ld;
    ASSERT_EQ(ld.set(FLASHATTN_DATA_FP32, std::vector<int64_t>(lseDims, lseDims + 3),
                     std::vector<int64_t>(lseStrides, lseStrides + 3)),
              FLASHATTN_STATUS_SUCCESS);
    ASSERT_EQ(flashAttnForward(handle, attn, nullptr, qd, Q.bytes.data(), kd, K.bytes.data(), vd, V.bytes.data(), od,
                               O.bytes.data(), ld, lse.data(), nullptr, 0),
              FLASHATTN_STATUS_SUCCESS)
        << fa_test::lastError();
    size_t bytes = 1;
    ASSERT_EQ(flashAttnBackwardGetWorkspaceSize(handle, attn, nullptr, qd, kd, vd, od, ld, &bytes),
              FLASHATTN_STATUS_SUCCESS);
    Workspace ws(bytes);
    ASSERT_EQ(flashAttnBackward(handle, attn, nullptr, qd, Q.bytes.data(), kd, K.bytes.data(), vd, V.bytes.data(), od,
                                O.bytes.data(), dod, DO.bytes.data(), ld, lse.data(), dqd, DQ.bytes.data(), dkd,
                                DK.bytes.data(), dvd, DV.bytes.data(), ws.data(), ws.size()),
              FLASHATTN_STATUS_SUCCESS)
        << fa_test::lastError();

    const fa_test::HostTensor *got[] = {&DQ, &DK, &DV};
    const char *names[] = {"dQ", "dK", "dV"};
    std::vector<double> refQ, refK, refV;
    fa_ref::backward(p, q, k, v, dO, refQ, refK, refV);
    const std::vector<double> *oracle[] = {&refQ, &refK, &refV};
    for (int which = 0; which < 3; ++which) {
      const std::vector<double> numeric = numericGradient(p, q, k, v, dO, which);
      const std::vector<double> host = fa_test::unpack4(*got[which]);
      // The float64 difference quotient is exact to ~1e-8 here, so both are held to the FP32 normwise gate.
      const fa_ref::Gate vsHost = fa_ref::checkGates(host, numeric, numeric, 0.0, 1e-5);
      const fa_ref::Gate vsOracle = fa_ref::checkGates(*oracle[which], numeric, numeric, 0.0, 1e-5);
      EXPECT_TRUE(vsHost.finite && vsHost.normwise <= 1e-5 && vsHost.maxErr <= 1e-5)
          << names[which] << " host vs finite differences: " << vsHost.describe();
      EXPECT_TRUE(vsOracle.normwise <= 1e-6 && vsOracle.maxErr <= 1e-6)
          << names[which] << " oracle vs finite differences: " << vsOracle.describe();
    }
  }
  std::printf("[grid] backward vs finite differences: %d cases\n", index);
}
