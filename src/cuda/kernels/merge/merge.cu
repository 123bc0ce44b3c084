// SPDX-License-Identifier: BSD-3-Clause
// Merge of S partial attention states: O = sum_s exp(lse_s - LSE) O_s with LSE = log sum_s exp(lse_s).
//
// One warp per output row, each lane 4 columns (1 where rows are not 16-byte vectors). Every lane streams the S
// states in a fixed order, kBatch at a time (all of a batch's loads in flight, the LSEs broadcast across the warp),
// and folds them into its running state with prim's merge of softmax states (merge_state.cuh), the same as the
// split-KV decode's; every lane computes the same LSE. A partial LSE of -inf is an empty state: its O may hold
// anything and is replaced by zeros before the merge; a row whose states are all empty gets O = 0 and LSE = -inf.
// Nothing depends on timing, so the result is deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "cuda/kernels/merge/merge_launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/primitives/grid_dependency.cuh"
#include "cuda/primitives/math.cuh"
#include "cuda/primitives/merge_state.cuh"

namespace flashattn::cuda {

namespace merge {
namespace {

// Vectorized needs dimV % 4 == 0, 16-byte aligned partial rows and 4-element aligned output rows.
template <typename Out, bool Vectorized>
__global__ void __launch_bounds__(kMergeWarps * 32) mergeKernel(const MergeParams p) {
  // Launched as a programmatic dependent of a kernel writing the partial states: wait until they are complete and
  // visible. Without such a launch this returns at once.
  prim::waitForPrerequisiteGrids();
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * kMergeWarps + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const int64_t token = row % p.seqQ;
  const int64_t bh = row / p.seqQ;
  const int64_t head = bh % p.heads;
  const int64_t batch = bh / p.heads;

  const float *lseRow = p.partialLse + batch * p.partialLseStride[1] + head * p.partialLseStride[2] +
                        token * p.partialLseStride[3];
  const float *oRow = p.partialO + batch * p.partialOStride[1] + head * p.partialOStride[2] +
                      token * p.partialOStride[3];
  Out *out = static_cast<Out *>(p.o) + batch * p.oBatch + head * p.oHead + token * p.oRow;
  constexpr int kWidth = Vectorized ? 4 : 1;  // elements per lane and load
  constexpr int kBatch = 8;                   // states loaded before the first is merged
  float ones[kBatch];                         // a normalized partial state (LSE, O) is the state (LSE, 1, O)
#pragma unroll
  for (int u = 0; u < kBatch; ++u) ones[u] = 1.f;
  float lse = prim::negInf();
  for (int d0 = 0; d0 < p.headDimV; d0 += 32 * kWidth) {
    const int d = d0 + lane * kWidth;
    const bool active = d < p.headDimV;
    prim::MergeState state;
    for (int s0 = 0; s0 < p.states; s0 += kBatch) {
      float l[kBatch];
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const bool inRange = s0 + u < p.states;
        l[u] = inRange ? __ldg(lseRow + int64_t(s0 + u) * p.partialLseStride[0]) : prim::negInf();
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active && inRange) {
          const float *src = oRow + int64_t(s0 + u) * p.partialOStride[0] + d;
          if constexpr (Vectorized) {
            v[u] = __ldg(reinterpret_cast<const float4 *>(src));
          } else {
            v[u].x = __ldg(src);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (l[u] == prim::negInf()) v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      prim::mergeStates<prim::ExpNatural>(state, l, ones, v);
    }
    float4 o;
    state.finish<prim::ExpNatural>(o, lse);
    if (!active) continue;
    if constexpr (Vectorized) {
      prim::storeFloat4<Out>(out + d, o);
    } else {
      out[d] = prim::fromFloat<Out>(o.x);
    }
  }
  if (p.lse && lane == 0) {  // headDimV >= 1: the column loop ran, and its LSE is the row's
    p.lse[batch * p.lseBatch + head * p.lseHead + token * p.lseRow] = lse;
  }
}

template <typename Out, bool Vectorized>
cudaError_t launchTyped(const MergeParams &params, bool dependentLaunch, cudaStream_t stream) {
  const int64_t blocks = (params.rows + kMergeWarps - 1) / kMergeWarps;
  return launchMaybeDependent(mergeKernel<Out, Vectorized>, dim3(uint32_t(blocks)), dim3(kMergeWarps * 32),
                              dependentLaunch, stream, params);
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
  plan->kernel = KernelId::MergeStates;
  plan->config = MergeConfig{};
  plan->description = concat(kernelIdName(KernelId::MergeStates), " one warp per row, ", p.states, " states, ", dtypeName(p.outType),
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
