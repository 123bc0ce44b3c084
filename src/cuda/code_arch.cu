// SPDX-License-Identifier: BSD-3-Clause
// Which architecture the portable kernels' code was compiled for, as the current device runs it. The choosers need it
// besides the device's arch: a build whose only code for this GPU is older PTX (compute_80 on an H100, or any build
// on a GPU newer than it knows) has its sm90-only paths (tensor maps, clusters, griddepcontrol) compiled out.
#include <cuda_runtime.h>

#include "cuda/family.hpp"

namespace flashattn::cuda {
namespace {

// Compiled with the portable kernels' architectures (FLASHATTN_CUDA_ARCHITECTURES), so the image the driver picks for
// it is the one it picks for them.
__global__ void portableProbeKernel() {}

}  // namespace

int portableCodeArch() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, portableProbeKernel) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // unknown: choosers then keep to the features every supported arch has
  }
  return attributes.ptxVersion;
}

}  // namespace flashattn::cuda
