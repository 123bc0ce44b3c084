// SPDX-License-Identifier: BSD-3-Clause
#include <cuda_bf16.h>

#include "cuda/kernels/forward_sm90/forward_sm90_launch.cuh"
#include "variants.hpp"

void variants::addD128(std::vector<Variant> &out) {
  FA_VARIANT(out, "d128 128x128 cp.async", 128, 128, 2, 2, true, true, false, false);
  FA_VARIANT(out, "d128 128x128 tma", 128, 128, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d128 128x176 tma", 128, 176, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d128 128x160 tma", 128, 160, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d128 128x144 tma", 128, 144, 2, 2, true, true, false, true);
  FA_VARIANT(out, "d128 128x192 tma", 128, 192, 2, 2, true, true, false, true);
  FA_VARIANT_FOR(out, "d96 on d128 128x128 tma", 96, 128, 128, 2, 2, true, true, false, true);
}
