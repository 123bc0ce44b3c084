// SPDX-License-Identifier: BSD-3-Clause
// cp.async of a single 4-byte word (sm80+): per-row FP32 statistics (LSE, row sums) arrive in shared memory in the
// same asynchronous group as the tiles they belong to, without a register round trip that would stall the warp.
#pragma once

#include <cstdint>

namespace flashattn::cuda::prim {

// Copies 4 bytes when valid, otherwise writes 4 zero bytes and reads nothing (source must still be a valid address
// form; 4-byte aligned when valid). Completes with the caller's next cpAsyncCommit group.
__device__ __forceinline__ void cpAsync4(uint32_t sharedAddress, const void *source, bool valid) {
  const int sourceBytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sharedAddress), "l"(source), "r"(sourceBytes)
               : "memory");
}

}  // namespace flashattn::cuda::prim
