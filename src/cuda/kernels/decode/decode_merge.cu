// SPDX-License-Identifier: BSD-3-Clause
// The separate merge of a split-KV decode's partial states (MergeMode kMergeSeparate): decodeMergeKernel of
// decode_kernel.cuh for each output type, launched as a programmatic dependent of the decode kernel on sm90.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/decode/decode_kernel.cuh"

namespace flashattn::cuda::decode {
namespace {

template <typename Element>
cudaError_t launchMergeTyped(const DecodeParams &d, bool dependentLaunch, cudaStream_t stream) {
#if defined(FLASHATTN_DECODE_PHASES)
  detail::gPhaseTag = "merge";
  if (!detail::gPhaseDumpRegistered) detail::gPhaseDumpRegistered = std::atexit(detail::dumpPhases) == 0;
#endif
  const int64_t items = int64_t(d.batch) * d.heads * d.seqQ * (d.headDim / 4);
  if (items <= 0) return cudaSuccess;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(uint32_t((items + 127) / 128));
  config.blockDim = dim3(128);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependentLaunch ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, decodeMergeKernel<Element>, d);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
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
