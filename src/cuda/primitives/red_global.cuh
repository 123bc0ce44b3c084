// SPDX-License-Identifier: BSD-3-Clause
// Fire-and-forget FP32 additions into global memory (red: no value comes back, so nothing waits for the round trip
// and no registers stay reserved for it). sm90 adds two consecutive floats per instruction.
#pragma once

namespace flashattn::cuda::prim {

// address must be 8-byte aligned.
__device__ __forceinline__ void redAddFloat2(float *address, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address), "f"(x) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address + 1), "f"(y) : "memory");
#endif
}

__device__ __forceinline__ void redAddFloat(float *address, float x) {
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(address), "f"(x) : "memory");
}

}  // namespace flashattn::cuda::prim
