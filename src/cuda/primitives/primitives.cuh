// SPDX-License-Identifier: BSD-3-Clause
// All tensor-core, copy and math primitives of the CUDA kernel families (sm80+).
#pragma once

#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/mma.cuh"
#include "cuda/primitives/swizzle.cuh"
