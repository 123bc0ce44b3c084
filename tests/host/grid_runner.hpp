// SPDX-License-Identifier: BSD-3-Clause
// Runs a list of grid cases, one gtest failure per failing case (naming it), and prints how many ran.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "grid.hpp"
#include "test_support.hpp"

namespace host_test {

inline void runAttnGrid(const std::string &name, const std::vector<AttnCase> &cases, bool withBackward) {
  EXPECT_FALSE(cases.empty()) << name << ": the grid has no case (a grid that runs nothing proves nothing)";
  int failed = 0;
  const size_t stride = fa_test::caseStride();
  for (size_t i = 0; i < cases.size(); i += stride) {
    const GateReport r = runAttnCase(cases[i], withBackward);
    if (!r.pass) ++failed;
    EXPECT_TRUE(r.pass) << name << " case " << i << ": " << cases[i].describe() << "\n" << r.text;
  }
  std::printf("[grid] %s: %zu cases (%s), %d failed\n", name.c_str(), (cases.size() + stride - 1) / stride,
              withBackward ? "forward + backward" : "forward", failed);
}

}  // namespace host_test
