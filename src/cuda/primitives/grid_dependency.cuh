// SPDX-License-Identifier: BSD-3-Clause
// Programmatic dependent launch (sm90): a grid launched with cudaLaunchAttributeProgrammaticStreamSerialization may
// be scheduled while the grid before it on the stream still runs. On older targets both are no-ops, which is what a
// launch without the attribute sees anyway.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace flashattn::cuda::prim {

// In the earlier grid: lets the dependent grid's CTAs be scheduled now (they still wait below before reading).
__device__ __forceinline__ void launchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// In the dependent grid: waits until the grids it depends on have completed and their memory is visible.
__device__ __forceinline__ void waitForPrerequisiteGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashattn::cuda::prim

namespace flashattn::cuda {

// Host side: launches kernel<<<grid, block>>>(args...) on `stream`, as a programmatic dependent of the grid before it
// when `dependent` (whose code must then call prim::waitForPrerequisiteGrids before reading that grid's results).
template <typename... Params, typename... Args>
cudaError_t launchMaybeDependent(void (*kernel)(Params...), dim3 grid, dim3 block, bool dependent,
                                 cudaStream_t stream, Args &&...args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace flashattn::cuda
