// Programmatic dependent launch (sm90): a grid launched with cudaLaunchAttributeProgrammaticStreamSerialization may
// be scheduled while the grid before it on the stream still runs. On older targets both are no-ops, which is what a
// launch without the attribute sees anyway.
#pragma once

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
