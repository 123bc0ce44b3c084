// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_bf16.h>

#include "cuda/kernels/forward_sm90/forward_sm90_launch.cuh"
#include "variants.hpp"

void variants::addD64(std::vector<Variant> &out) {
  FA_VARIANT(out, "d64 192x128 cp.async", 64, 128, 3, 2, true, true, false, false);
  FA_VARIANT(out, "d64 192x128 tma", 64, 128, 3, 2, true, true, false, true);
  // Short causal sequences (the d64 rows furthest behind cuDNN): smaller tiles, more of them, less diagonal waste.
  FA_VARIANT(out, "d64 128x128 tma", 64, 128, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d64 192x64 tma", 64, 64, 3, 2, true, true, false, true);
  FA_VARIANT(out, "d64 128x128 tma s3", 64, 128, 2, 3, true, true, false, true);
  FA_VARIANT(out, "d64 128x128 tma no-pp", 64, 128, 2, 2, false, true, false, true);
}
