// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_bf16.h>

#include "cuda/kernels/forward_sm90/forward_sm90_launch.cuh"
#include "variants.hpp"

void variants::addD256(std::vector<Variant> &out) {
  FA_VARIANT(out, "d256 128x80 cp.async", 256, 80, 2, 2, false, false, false, false);
  FA_VARIANT(out, "d256 128x80 tma", 256, 80, 2, 2, false, false, false, true);
  FA_VARIANT(out, "d256 128x80 tma pp", 256, 80, 2, 2, true, false, false, true);
  // Short sequences: 64-key blocks leave no partial block at S 512 / 1k (80 leaves 32 of 80 keys in the last).
  FA_VARIANT(out, "d256 128x64 tma", 256, 64, 2, 2, false, false, false, true);
  FA_VARIANT(out, "d256 128x64 tma pp", 256, 64, 2, 2, true, false, false, true);
}
