// sm_90a instructions the backward family needs beyond src/cuda/primitives: wgmma with both operands in shared
// memory and B MN-major (dQ = dS K reads K [keys][d] as B[k = key][n = d]), the transposing 8x8 matrix store that
// writes dS^T accumulator fragments as dS rows, and a 4-byte cp.async for the per-row FP32 statistics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::backward_sm90 {

#define FLASHATTN_SM90_BWD_D32                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define FLASHATTN_SM90_BWD_OUT32(d)                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),       \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// D[64 x 64] (+)= A * B; A K-major, B MN-major, both shared-memory descriptors (SW128); accumulate == 0 overwrites.
template <typename Element>
struct WgmmaSsTransB64;

template <>
struct WgmmaSsTransB64<__half> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t descA, uint64_t descB, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred scaleD;\nsetp.ne.b32 scaleD, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " FLASHATTN_SM90_BWD_D32 ", %32, %33, scaleD, 1, 1, 0, 1;\n}\n"
        : FLASHATTN_SM90_BWD_OUT32(d)
        : "l"(descA), "l"(descB), "r"(accumulate));
  }
};

template <>
struct WgmmaSsTransB64<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[32], uint64_t descA, uint64_t descB, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred scaleD;\nsetp.ne.b32 scaleD, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLASHATTN_SM90_BWD_D32 ", %32, %33, scaleD, 1, 1, 0, 1;\n}\n"
        : FLASHATTN_SM90_BWD_OUT32(d)
        : "l"(descA), "l"(descB), "r"(accumulate));
  }
};

#undef FLASHATTN_SM90_BWD_D32
#undef FLASHATTN_SM90_BWD_OUT32

// Four 8x8 16-bit matrices, each held as one register per lane in the mma accumulator layout (row lane / 4, columns
// 2 * (lane % 4) + 0..1), stored transposed: lane l supplies the address of row l % 8 of matrix l / 8, and that row
// receives column l % 8 of the matrix (16 contiguous bytes).
__device__ __forceinline__ void stmatrixX4Trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// 4 bytes global -> shared, or 4 zero bytes when !valid (source then only needs to be a valid address form).
__device__ __forceinline__ void cpAsync4(uint32_t sharedAddress, const void *source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sharedAddress), "l"(source),
               "r"(valid ? 4 : 0)
               : "memory");
}

}  // namespace flashattn::cuda::backward_sm90
