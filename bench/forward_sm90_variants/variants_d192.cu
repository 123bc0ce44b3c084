// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_bf16.h>

#include "cuda/kernels/forward_sm90/forward_sm90_launch.cuh"
#include "variants.hpp"

void variants::addD192(std::vector<Variant> &out) {
  FA_VARIANT(out, "d192 128x112 tma", 192, 112, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d192 128x96 tma", 192, 96, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d192 128x112 tma no-pp", 192, 112, 2, 2, false, true, false, true);
  FA_VARIANT(out, "d192 128x112 cp.async", 192, 112, 2, 2, true, true, false, false);
  // Short sequences: 64-key blocks leave no partial block at S 512 / 1k (112 leaves 64 of 112 keys in the last).
  FA_VARIANT(out, "d192 128x64 tma", 192, 64, 2, 2, true, true, false, true);
}
