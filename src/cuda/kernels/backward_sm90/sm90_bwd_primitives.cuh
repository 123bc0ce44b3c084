// SPDX-License-Identifier: BSD-3-Clause
// Instructions the backward family needs beyond src/cuda/primitives (whose wgmma.cuh has the transposed
// shared-memory forms dQ = dS K uses): the transposing 8x8 matrix store (sm_90) that writes dS^T accumulator fragments
// as dS rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::backward_sm90 {

// Four 8x8 16-bit matrices, each held as one register per lane in the mma accumulator layout (row lane / 4, columns
// 2 * (lane % 4) + 0..1), stored transposed: lane l supplies the address of row l % 8 of matrix l / 8, and that row
// receives column l % 8 of the matrix (16 contiguous bytes).
__device__ __forceinline__ void stmatrixX4Trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace flashattn::cuda::backward_sm90
