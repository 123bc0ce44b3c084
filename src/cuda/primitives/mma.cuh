// SPDX-License-Identifier: BSD-3-Clause
// Tensor-core matrix multiply (mma.sync.m16n8k16, sm80+) with FP32 accumulators, for FP16 and BF16 operands.
//
// Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16"), lane = 4 * group + quad (group = lane / 4):
//   A (16x16, row major), 4 registers of 2 elements: a[0] rows group, cols 2q..2q+1; a[1] rows group+8, same cols;
//     a[2] rows group, cols 8+2q..; a[3] rows group+8, cols 8+2q..
//   B (16x8, "col major" = K contiguous per column n), 2 registers: b[0] k rows 2q..2q+1 of column group;
//     b[1] k rows 8+2q.. of column group.
//   C/D (16x8 FP32), 4 floats: c[0], c[1] row group, cols 2q, 2q+1; c[2], c[3] row group+8, same cols.
// The same C layout, packed two elements per register, is exactly the A layout of the next multiply, which is why the
// softmax probabilities P of attention can stay in registers as the A operand of P*V.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::prim {

// D = A * B + D for one 16x8x16 tile. Element is __half or __nv_bfloat16 (operands), accumulators FP32.
template <typename Element>
__device__ __forceinline__ void mmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mmaM16N8K16<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mmaM16N8K16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                          const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace flashattn::cuda::prim
