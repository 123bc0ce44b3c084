// SPDX-License-Identifier: BSD-3-Clause
// The kernel configurations driver.cu times side by side: each a forward_sm90 kernel instantiated outside the
// library's tile choice (forward_sm90_params.hpp tileFor), so that candidates can be compared in one device call.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "cuda/kernels/forward_sm90/forward_sm90_params.hpp"

namespace variants {

using flashattn::cuda::forward_sm90::ForwardParams;
using flashattn::cuda::forward_sm90::LaunchOptions;

using LaunchFn = cudaError_t (*)(const ForwardParams &, const LaunchOptions &, int, cudaStream_t);

struct Variant {
  const char *name;
  int headDim;  // of the problems it is timed on (the kernel's D may be wider: zero-filled columns)
  int blockM;
  bool tma;
  LaunchFn launch;
};

// Filled by the variants_d*.cu files (one per head dim, so they compile in parallel).
void addD64(std::vector<Variant> &out);
void addD128(std::vector<Variant> &out);
void addD192(std::vector<Variant> &out);
void addD256(std::vector<Variant> &out);

}  // namespace variants

// One configuration: the template arguments of forward_sm90::launchKernel after Element and D, timed on problems of
// head dim PROBLEM_D.
#define FA_VARIANT_FOR(out, NAME, PROBLEM_D, D, BLOCKN, GROUPS, STAGES, PINGPONG, ASYNC, QREG, TMA)               \
  (out).push_back(variants::Variant{                                                                              \
      NAME, PROBLEM_D, 64 * (GROUPS), TMA,                                                                        \
      &flashattn::cuda::forward_sm90::launchKernel<__nv_bfloat16, D, BLOCKN, GROUPS, STAGES, PINGPONG, ASYNC, QREG, \
                                                   false, TMA>})
#define FA_VARIANT(out, NAME, D, BLOCKN, GROUPS, STAGES, PINGPONG, ASYNC, QREG, TMA) \
  FA_VARIANT_FOR(out, NAME, D, D, BLOCKN, GROUPS, STAGES, PINGPONG, ASYNC, QREG, TMA)
