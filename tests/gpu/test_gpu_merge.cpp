// SPDX-License-Identifier: BSD-3-Clause
// flashAttnMergeStates on the CUDA backend through the public API, against the float64 fa_ref::merge: states with a
// partial LSE of -inf are empty (their partial O holds NaN here, so reading it would show), rows whose states are all
// empty give O = 0 and LSE = -inf; FP16/BF16/FP32 outputs, vectorized and scalar paths (head dims not a multiple of
// 4), padded partial rows, with and without LSE; outputs poisoned first; repeated runs bitwise equal.
//
// FLASHATTN_TEST_SLICE=edge runs two small cases only (for compute-sanitizer).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_harness.hpp"
#include "reference.hpp"
#include "tensors.hpp"
#include "test_support.hpp"

using namespace fa_test;

namespace {

struct MergeCase {
  std::string name;
  int64_t states = 4, batch = 2, heads = 3, sq = 2, dimV = 128;
  flashAttnDataType_t outType = FLASHATTN_DATA_BF16;
  bool withLse = true;
  int64_t rowPad = 0;  // unused floats after each partial row
  uint64_t seed = 1;
};

void runMerge(const MergeCase &c) {
  std::mt19937_64 rng(c.seed);
  const int64_t rows = c.batch * c.heads * c.sq;
  const int64_t rowStride = c.dimV + c.rowPad;
  const double ninf = -std::numeric_limits<double>::infinity();
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<double> partialO(size_t(c.states * rows * c.dimV)), partialLse(size_t(c.states * rows));
  std::vector<float> oDev(size_t(c.states * rows * rowStride), std::nanf("")), lseDev(size_t(c.states * rows));
  for (int64_t s = 0; s < c.states; ++s)
    for (int64_t r = 0; r < rows; ++r) {
      const bool allEmpty = r % 7 == 3;  // every state of this row is empty
      const bool empty = allEmpty || (c.states > 1 && uniform(rng) < 0.3);
      const double l = empty ? ninf : double(float(3 * normal(rng)));
      partialLse[size_t(s * rows + r)] = l;
      lseDev[size_t(s * rows + r)] = float(l);
      for (int64_t d = 0; d < c.dimV; ++d) {
        const double x = double(float(normal(rng)));
        partialO[size_t((s * rows + r) * c.dimV + d)] = empty ? 0.0 : x;
        oDev[size_t((s * rows + r) * rowStride + d)] = empty ? std::nanf("") : float(x);
      }
    }
  std::vector<double> oRef, lseRef;
  fa_ref::merge(c.states, rows, c.dimV, partialO, partialLse, oRef, lseRef);
  std::vector<double> oLp(oRef.size());
  for (size_t i = 0; i < oRef.size(); ++i) oLp[i] = fa_ref::roundTo(roundingOf(c.outType), oRef[i]);

  Handle handle(FLASHATTN_BACKEND_CUDA);
  TensorDesc poDesc, plDesc, oDesc, lseDesc;
  ASSERT_EQ(poDesc.set(FLASHATTN_DATA_FP32, {c.states, c.batch, c.heads, c.sq, c.dimV},
                       {rows * rowStride, c.heads * c.sq * rowStride, c.sq * rowStride, rowStride, 1}),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(plDesc.set(FLASHATTN_DATA_FP32, {c.states, c.batch, c.heads, c.sq}, {rows, c.heads * c.sq, c.sq, 1}),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(oDesc.set(c.outType, {c.batch, c.heads, c.sq, c.dimV}, {c.heads * c.sq * c.dimV, c.sq * c.dimV, c.dimV, 1}),
            FLASHATTN_STATUS_SUCCESS);
  ASSERT_EQ(lseDesc.set(FLASHATTN_DATA_FP32, {c.batch, c.heads, c.sq}, {c.heads * c.sq, c.sq, 1}),
            FLASHATTN_STATUS_SUCCESS);
  DeviceBuffer po(oDev.data(), oDev.size() * 4), pl(lseDev.data(), lseDev.size() * 4);
  DeviceBuffer o(size_t(rows * c.dimV) * elementSize(c.outType)), lse(size_t(rows) * 4);
  size_t bytes = 0;
  ASSERT_EQ(flashAttnMergeStatesGetWorkspaceSize(handle, poDesc, plDesc, oDesc, c.withLse ? lseDesc.d : nullptr, &bytes),
            FLASHATTN_STATUS_SUCCESS)
      << lastError();
  DeviceBuffer ws(bytes);
  std::vector<uint8_t> firstO, firstLse;
  for (int run = 0; run < 2; ++run) {
    o.poison();
    lse.poison();
    ASSERT_EQ(flashAttnMergeStates(handle, poDesc, po.get<float>(), plDesc, pl.get<float>(), oDesc, o.ptr,
                                   c.withLse ? lseDesc.d : nullptr, c.withLse ? lse.get<float>() : nullptr, ws.ptr,
                                   bytes),
              FLASHATTN_STATUS_SUCCESS)
        << lastError();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    if (run == 1) {
      EXPECT_TRUE(o.raw() == firstO) << "O differs between two runs";
      if (c.withLse) {
        EXPECT_TRUE(lse.raw() == firstLse) << "LSE differs between two runs";
      }
      break;
    }
    firstO = o.raw();
    firstLse = lse.raw();
  }
  std::vector<double> out(oRef.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = loadElement(firstO.data(), c.outType, int64_t(i));
  const fa_ref::Gate g = fa_ref::checkGates(out, oRef, oLp, 2.0, fa_ref::normTolerance(roundingOf(c.outType)));
  EXPECT_TRUE(g.pass) << c.name << " O " << g.describe();
  if (c.withLse) {
    std::vector<double> l(static_cast<size_t>(rows));
    for (size_t i = 0; i < l.size(); ++i) {
      float f;
      std::memcpy(&f, firstLse.data() + 4 * i, 4);
      l[i] = f;
    }
    const fa_ref::Gate gl = fa_ref::checkLse(l, lseRef);
    EXPECT_TRUE(gl.pass) << c.name << " LSE " << gl.describe();
  }
}

std::vector<MergeCase> mergeCases() {
  std::vector<MergeCase> cases;
  uint64_t seed = 1;
  if (edgeSliceOnly()) {
    MergeCase a;
    a.name = "edge_vector", a.states = 5, a.seed = seed++;
    cases.push_back(a);
    MergeCase b;
    b.name = "edge_scalar", b.states = 3, b.dimV = 6, b.outType = FLASHATTN_DATA_FP16, b.seed = seed++;
    cases.push_back(b);
    return cases;
  }
  const char *types[] = {"fp16", "bf16", "fp32"};
  int ti = 0;
  for (flashAttnDataType_t t : {FLASHATTN_DATA_FP16, FLASHATTN_DATA_BF16, FLASHATTN_DATA_FP32}) {
    for (int64_t states : {1, 2, 7, 40}) {
      MergeCase c;
      c.name = std::string(types[ti]) + "_states" + std::to_string(states);
      c.states = states, c.outType = t, c.seed = seed++;
      cases.push_back(c);
    }
    ++ti;
  }
  MergeCase scalar;
  scalar.name = "scalar_dimV6", scalar.dimV = 6, scalar.states = 5, scalar.seed = seed++;
  cases.push_back(scalar);
  MergeCase padded;
  padded.name = "padded_rows_dimV100_fp32", padded.dimV = 100, padded.rowPad = 12, padded.states = 3;
  padded.outType = FLASHATTN_DATA_FP32, padded.seed = seed++;
  cases.push_back(padded);
  MergeCase noLse;
  noLse.name = "no_lse_dimV256", noLse.dimV = 256, noLse.states = 9, noLse.withLse = false, noLse.seed = seed++;
  cases.push_back(noLse);
  MergeCase many;
  many.name = "states133_odd_dimV", many.states = 133, many.dimV = 72, many.batch = 1, many.heads = 5, many.sq = 3;
  many.seed = seed++;
  cases.push_back(many);
  return cases;
}

std::string caseName(const ::testing::TestParamInfo<MergeCase> &info) { return info.param.name; }

class MergeGrid : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeGrid, MatchesFloat64OracleAndIsDeterministic) { runMerge(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cuda, MergeGrid, ::testing::ValuesIn(mergeCases()), caseName);

}  // namespace
