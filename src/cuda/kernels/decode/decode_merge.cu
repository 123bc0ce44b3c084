// SPDX-License-Identifier: BSD-3-Clause
// The separate merge of a split-KV decode's partial states (MergeMode kMergeSeparate), launched as a programmatic
// dependent of the decode kernel on sm90.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/decode/decode_epilogue.cuh"
#include "cuda/primitives/grid_dependency.cuh"

namespace flashattn::cuda::decode {
namespace {

// One thread per (query row, 4 columns); with programmatic dependent launch it waits on the device for the decode
// grid's completion and memory flush.
template <typename Element>
__global__ void __launch_bounds__(128) decodeMergeKernel(const __grid_constant__ DecodeParams p) {
  prim::waitForPrerequisiteGrids();
  const int quads = p.headDim / 4;
  const int64_t item = int64_t(blockIdx.x) * 128 + threadIdx.x;
  if (item >= int64_t(p.batch) * p.heads * p.seqQ * quads) return;
  int64_t rest = item / quads;
  const int d = int(item - rest * quads) * 4;
  const int token = int(rest % p.seqQ);
  rest /= p.seqQ;
  const int64_t head = rest % p.heads;
  const int batch = int(rest / p.heads);
  mergeChunksOfRow<Element, 16>(p, batch, head, token, d);
}

template <typename Element>
cudaError_t launchMergeTyped(const DecodeParams &d, bool dependentLaunch, cudaStream_t stream) {
  const int64_t items = int64_t(d.batch) * d.heads * d.seqQ * (d.headDim / 4);
  if (items <= 0) return cudaSuccess;
  return launchMaybeDependent(decodeMergeKernel<Element>, dim3(uint32_t((items + 127) / 128)), dim3(128),
                              dependentLaunch, stream, d);
}

}  // namespace

cudaError_t launchDecodeMergeKernel(DType dtype, const DecodeParams &d, bool dependentLaunch, cudaStream_t stream) {
  switch (dtype) {
    case DType::FP16: return launchMergeTyped<__half>(d, dependentLaunch, stream);
    case DType::BF16: return launchMergeTyped<__nv_bfloat16>(d, dependentLaunch, stream);
    case DType::FP32: return launchMergeTyped<float>(d, dependentLaunch, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace flashattn::cuda::decode
