// SPDX-License-Identifier: BSD-3-Clause
// Instructions the backward family needs beyond src/cuda/primitives (whose wgmma.cuh has the transposed
// shared-memory forms dQ = dS K uses): the transposing 8x8 matrix store (sm_90) that writes dS^T accumulator fragments
// as dS rows; and the one element of P^T and dS^T both kernels' softcap/ALiBi forms compute.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/primitives/math.cuh"

namespace flashattn::cuda::backward_sm90 {

// Four 8x8 16-bit matrices, each held as one register per lane in the mma accumulator layout (row lane / 4, columns
// 2 * (lane % 4) + 0..1), stored transposed: lane l supplies the address of row l % 8 of matrix l / 8, and that row
// receives column l % 8 of the matrix (16 contiguous bytes).
__device__ __forceinline__ void stmatrixX4Trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// One element of P^T and dS^T with softcap and ALiBi (the kernels' Transform form), from its S^T and dP^T values (s,
// dp; replaced by P and dS): P from the forward's own logit (prim::LogitTransform, so that it is the forward's
// probability) and the row's LSE * log2 e, dS = P (dP - D) times softcap's derivative (the softmax scale left out, as
// in every dS of these kernels: BackwardConfig::dsUnscaled). Zeros where the key is not visible, and dS zero where the
// row sees one key (P = 1 whatever its logit; dP - D would leave the difference of two dot products accumulated
// apart).
__device__ __forceinline__ void transformedGradient(const prim::LogitTransform &transform, float &s, float &dp,
                                                    float distance, float lseLog2, float rowDot, bool visible,
                                                    bool oneKey) {
  float derivative;
  const float logit = transform.logitLog2(s, distance, &derivative);
  const float pv = visible ? prim::exp2Fast(logit - lseLog2) : 0.f;
  s = pv;
  dp = visible && !oneKey ? pv * (dp - rowDot) * derivative : 0.f;
}

}  // namespace flashattn::cuda::backward_sm90
