// SPDX-License-Identifier: BSD-3-Clause
// Merge of S partial attention states: O = sum_s exp(lse_s - LSE) O_s with LSE = log sum_s exp(lse_s).
//
// One warp per output row. The warp first reduces the S partial LSEs (max, then sum of exp) with xor butterflies,
// whose results are bitwise equal in every lane, then streams the S partial rows in a fixed order with 16-byte loads
// (4 FP32 per lane). A partial LSE of -inf is an empty state and its O is never read (it may hold anything); a row
// whose states are all empty gets O = 0 and LSE = -inf. Nothing depends on timing, so the result is deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "cuda/kernels/merge/merge_launch.hpp"
#include "cuda/ops.hpp"

namespace flashattn::cuda {

namespace merge {
namespace {

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

template <typename Out>
__device__ __forceinline__ void store4(Out *dst, float4 v);

template <>
__device__ __forceinline__ void store4<float>(float *dst, float4 v) {
  *reinterpret_cast<float4 *>(dst) = v;
}

template <>
__device__ __forceinline__ void store4<__half>(__half *dst, float4 v) {
  __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t *>(&lo);
  packed.y = *reinterpret_cast<uint32_t *>(&hi);
  *reinterpret_cast<uint2 *>(dst) = packed;
}

template <>
__device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16 *dst, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t *>(&lo);
  packed.y = *reinterpret_cast<uint32_t *>(&hi);
  *reinterpret_cast<uint2 *>(dst) = packed;
}

template <typename Out>
__device__ __forceinline__ Out fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Vectorized needs dimV % 4 == 0, 16-byte aligned partial rows and 4-element aligned output rows.
template <typename Out, bool Vectorized>
__global__ void __launch_bounds__(kMergeWarps * 32) mergeKernel(const MergeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of the decode kernel: wait until its partial states are complete and
  // visible. Without such a launch this returns at once.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * kMergeWarps + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int64_t token = row % p.seqQ;
  const int64_t bh = row / p.seqQ;
  const int64_t head = bh % p.heads;
  const int64_t batch = bh / p.heads;

  const float *lseRow = p.partialLse + batch * p.partialLseStride[1] + head * p.partialLseStride[2] +
                        token * p.partialLseStride[3];
  float maxLse = negInf();
  for (int s = lane; s < p.states; s += 32) maxLse = fmaxf(maxLse, __ldg(lseRow + s * p.partialLseStride[0]));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) maxLse = fmaxf(maxLse, __shfl_xor_sync(0xffffffffu, maxLse, offset));

  float total = negInf();
  if (maxLse != negInf()) {
    float sum = 0.f;
    for (int s = lane; s < p.states; s += 32) {
      const float l = __ldg(lseRow + s * p.partialLseStride[0]);
      if (l != negInf()) sum += expf(l - maxLse);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    total = maxLse + logf(sum);
  }

  const float *oRow = p.partialO + batch * p.partialOStride[1] + head * p.partialOStride[2] +
                      token * p.partialOStride[3];
  Out *out = static_cast<Out *>(p.o) + batch * p.oBatch + head * p.oHead + token * p.oRow;
  constexpr int kWidth = Vectorized ? 4 : 1;  // elements per lane and load
  constexpr int kBatch = 8;                   // partial rows loaded before the first is used
  // Every lane runs the same trip counts (the shuffles below need the whole warp); lanes past headDimV idle.
  for (int d0 = 0; d0 < p.headDimV; d0 += 32 * kWidth) {
    const int d = d0 + lane * kWidth;
    const bool active = d < p.headDimV;
    float4 accum = make_float4(0.f, 0.f, 0.f, 0.f);
    // Blocks of 32 states: lane j holds the weight of state base + j (0 for an empty state), broadcast by shuffles.
    for (int base = 0; base < p.states; base += 32) {
      const int count = min(32, p.states - base);
      float weight = 0.f;
      if (lane < count && total != negInf()) {
        const float l = __ldg(lseRow + (base + lane) * p.partialLseStride[0]);
        if (l != negInf()) weight = expf(l - total);
      }
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        // The loads of a batch do not depend on the weights, so they are all in flight before the first use; an
        // empty state's row is still loaded (it is inside the tensor) but selected away, never multiplied.
        float4 v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (active && j0 + u < count) {
            const float *src = oRow + int64_t(base + j0 + u) * p.partialOStride[0] + d;
            if constexpr (Vectorized) {
              v[u] = __ldg(reinterpret_cast<const float4 *>(src));
            } else {
              v[u].x = __ldg(src);
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const float w = __shfl_sync(0xffffffffu, weight, (j0 + u) & 31);
          if (j0 + u < count && w != 0.f) {
            accum.x += w * v[u].x;
            accum.y += w * v[u].y;
            accum.z += w * v[u].z;
            accum.w += w * v[u].w;
          }
        }
      }
    }
    if (!active) continue;
    if constexpr (Vectorized) {
      store4<Out>(out + d, accum);
    } else {
      out[d] = fromFloat<Out>(accum.x);
    }
  }
  if (p.lse && lane == 0) p.lse[batch * p.lseBatch + head * p.lseHead + token * p.lseRow] = total;
}

template <typename Out, bool Vectorized>
cudaError_t launchTyped(const MergeParams &params, bool dependentLaunch, cudaStream_t stream) {
  const int64_t blocks = (params.rows + kMergeWarps - 1) / kMergeWarps;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(uint32_t(blocks));
  config.blockDim = dim3(kMergeWarps * 32);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependentLaunch ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, mergeKernel<Out, Vectorized>, params);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

bool vectorizable(const MergeParams &p, DType outType) {
  const std::size_t outVector = 4;  // elements per store
  if (p.headDimV % 4 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.partialO) % 16 != 0) return false;
  for (int i = 0; i < 4; ++i)
    if (p.partialOStride[i] % 4 != 0) return false;
  const std::size_t bytes = outVector * (outType == DType::FP32 ? 4 : 2);
  if (reinterpret_cast<uintptr_t>(p.o) % bytes != 0) return false;
  return p.oBatch % 4 == 0 && p.oHead % 4 == 0 && p.oRow % 4 == 0;
}

}  // namespace

cudaError_t launchMergeKernel(const MergeParams &params, DType outType, bool dependentLaunch, cudaStream_t stream) {
  if (params.rows <= 0) return cudaSuccess;
  const bool vec = vectorizable(params, outType);
  switch (outType) {
    case DType::FP16:
      return vec ? launchTyped<__half, true>(params, dependentLaunch, stream)
                 : launchTyped<__half, false>(params, dependentLaunch, stream);
    case DType::BF16:
      return vec ? launchTyped<__nv_bfloat16, true>(params, dependentLaunch, stream)
                 : launchTyped<__nv_bfloat16, false>(params, dependentLaunch, stream);
    case DType::FP32:
      return vec ? launchTyped<float, true>(params, dependentLaunch, stream)
                 : launchTyped<float, false>(params, dependentLaunch, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace merge

bool planMerge(const DeviceInfo &dev, const MergeProblem &p, Plan *plan, std::string *whyNot) {
  (void)dev;
  const int64_t rows = p.batch * p.heads * p.seqQ;
  if (p.states > 0x7fffffff) {
    *whyNot = concat("partialO has ", p.states, " states: the CUDA merge counts states in 32 bits");
    return false;
  }
  if (p.headDimV > 0x7fffffff) {
    *whyNot = concat("partialO has headDimV ", p.headDimV, ": the CUDA merge counts it in 32 bits");
    return false;
  }
  if (rows > merge::kMaxMergeRows) {
    *whyNot = concat("the merge has ", rows, " rows (batch * heads * seqQ), more than the ", merge::kMaxMergeRows,
                     " one launch addresses");
    return false;
  }
  *plan = Plan{};
  plan->description = concat("cuda.merge one warp per row, ", p.states, " states, ", dtypeName(p.outType),
                             " out; fp32 accumulate; deterministic");
  plan->deterministic = true;
  plan->workspaceBytes = 0;
  return true;
}

cudaError_t launchMerge(const DeviceInfo &dev, const MergeProblem &p, const Plan &plan, const MergeBuffers &buf,
                        void *workspace, cudaStream_t stream) {
  (void)dev;
  (void)plan;
  (void)workspace;
  merge::MergeParams params;
  params.partialO = buf.partialO;
  params.partialLse = buf.partialLse;
  params.o = buf.o;
  params.lse = p.hasLse ? buf.lse : nullptr;
  for (int i = 0; i < 4; ++i) {
    params.partialOStride[i] = p.partialOStride[i];
    params.partialLseStride[i] = p.partialLseStride[i];
  }
  params.oBatch = p.o.batch;
  params.oHead = p.o.head;
  params.oRow = p.o.row;
  params.lseBatch = p.lse.batch;
  params.lseHead = p.lse.head;
  params.lseRow = p.lse.row;
  params.rows = p.batch * p.heads * p.seqQ;
  params.heads = p.heads;
  params.seqQ = p.seqQ;
  params.states = int32_t(p.states);
  params.headDimV = int32_t(p.headDimV);
  return merge::launchMergeKernel(params, p.outType, false, stream);
}

}  // namespace flashattn::cuda
