// SPDX-License-Identifier: BSD-3-Clause
// cp.async (sm80+): asynchronous 16-byte global -> shared copies that bypass registers, grouped so a multi-stage
// pipeline can wait for "all but the newest N groups".
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

// Copies 16 bytes when valid; otherwise writes 16 zero bytes to shared memory and reads nothing from global memory
// (src-size 0), so tails and padded head dims arrive as zeros. source must still be a valid generic address form
// (pass the tensor base when the element is out of range); it must be 16-byte aligned when valid.
// .cg caches in L2 only: each tile is read once per CTA, L1 would only evict useful data.
__device__ __forceinline__ void cpAsync16(uint32_t sharedAddress, const void *source, bool valid) {
  const int sourceBytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sharedAddress), "l"(source),
               "r"(sourceBytes)
               : "memory");
}

// 16 bytes into shared memory by an ordinary store: where a row ends inside a 16-byte chunk, the chunk is read
// element by element and stored whole (a cp.async with src-size < 16 still counts as a 16-byte read for
// compute-sanitizer, which flags the bytes past an allocation's end).
__device__ __forceinline__ void storeShared16(uint32_t sharedAddress, uint4 value) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sharedAddress), "r"(value.x), "r"(value.y),
               "r"(value.z), "r"(value.w)
               : "memory");
}

// Two floats into shared memory at a shared-window address (8-byte aligned), for callers that compute addresses with
// bit operations a generic pointer would hide from the compiler's address-space inference.
__device__ __forceinline__ void storeSharedFloat2(uint32_t sharedAddress, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(sharedAddress), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ void storeSharedFloat(uint32_t sharedAddress, float x) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sharedAddress), "f"(x) : "memory");
}

__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most Pending of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void cpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace flashattn::cuda::prim
