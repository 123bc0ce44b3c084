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

// Variant with an explicit byte count 0..16 (the rest zero-filled): for rows whose tail is not a whole 16 bytes.
// cp.async.cg accepts only cp-size 16, so partial copies go through .ca with cp-size 16 and src-size < 16.
__device__ __forceinline__ void cpAsync16Partial(uint32_t sharedAddress, const void *source, int sourceBytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(sharedAddress), "l"(source),
               "r"(sourceBytes)
               : "memory");
}

__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most Pending of this thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void cpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace flashattn::cuda::prim
