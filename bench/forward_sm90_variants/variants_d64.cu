// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_bf16.h>

#include "cuda/kernels/forward_sm90/forward_sm90_launch.cuh"
#include "variants.hpp"

void variants::addD64(std::vector<Variant> &out) {
  FA_VARIANT(out, "d64 192x128 cp.async", 64, 128, 3, 2, true, true, false, false);
  FA_VARIANT(out, "d64 192x128 tma", 64, 128, 3, 2, true, true, false, true);
}
