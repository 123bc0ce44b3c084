// SPDX-License-Identifier: BSD-3-Clause
// What a generated backward instance file compiles: the main kernel of one (storage type, head dim), tensor-core
// tiles for FP16/BF16 and the FFMA kernel for FP32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/kernels/backward/backward_fp32.cuh"
#include "cuda/kernels/backward/backward_mma.cuh"
#include "cuda/kernels/backward/backward_params.hpp"

namespace flashattn::cuda::backward {

template <typename Element, int D>
cudaError_t launchInstanceFor(const BackwardParams &p, int tileIndex, cudaStream_t stream) {
  if constexpr (std::is_same_v<Element, float>) {
    (void)tileIndex;
    return launchFp32Instance<D>(p, stream);
  } else {
    return launchMmaInstance<Element, D>(p, tileIndex, stream);
  }
}

}  // namespace flashattn::cuda::backward
