// SPDX-License-Identifier: BSD-3-Clause
// ldmatrix: a warp loads 8x8 matrices of 16-bit elements from shared memory straight into mma fragment layout.
//
// Lanes 8*m .. 8*m+7 supply the row addresses (16 contiguous bytes each) of matrix m (m < number of matrices); every
// lane receives, for each matrix m, register r[m] holding row (lane / 4), columns 2*(lane % 4) .. +1. The .trans
// variants transpose each 8x8 matrix on the way, which turns a row-major V tile [key][dim] into the B operand of P*V.
// Addresses are shared-state-space byte addresses (smemAddress below).
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

__device__ __forceinline__ uint32_t smemAddress(const void *pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Only lanes 0..15 supply addresses; the others' addresses are ignored (pass any valid one).
__device__ __forceinline__ void ldmatrixX2(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}

__device__ __forceinline__ void ldmatrixX2Trans(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(address));
}

}  // namespace flashattn::cuda::prim
