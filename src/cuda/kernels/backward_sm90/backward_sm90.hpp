// SPDX-License-Identifier: BSD-3-Clause
// The seam between the portable backward chooser (src/cuda/kernels/backward/backward.cu) and the Hopper backward
// family. planBackward asks sm90BackwardSupports on an sm90 device; when it says yes the plan carries
// kSm90BackwardTile as its tile index, the workspace is laid out for sm90BackwardTileFor(headDim).blockM query rows
// per block, and launchBackward runs the same memset, preprocess and convert kernels around launchBackwardSm90
// instead of the portable main kernel. A new head dim gets its own entry in sm90BackwardTileFor, and its launcher case
// and shared-memory size in backward_sm90.cu.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/problem.hpp"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/ops.hpp"

namespace flashattn::cuda::backward_sm90 {

constexpr int kSm90BackwardTile = 7;  // the tile index planBackward packs into Plan.config for this family

// The CTA shape of the wgmma main kernel for one head dim: the workspace layout and grid follow from it.
struct Sm90BackwardTile {
  int blockM;  // query rows per step
  int blockN;  // keys per CTA
  int warps;
};

constexpr Sm90BackwardTile sm90BackwardTileFor(int headDim) {
  switch (headDim) {
    case 64:  // 128-row query blocks: at 64 rows the d64 products are too short for the per-step fixed costs
      return Sm90BackwardTile{128, 128, 8};
    case 256:  // 64 keys per CTA: dK and dV split by columns between the two warpgroups (backward_sm90_d256_kernel.cuh)
      return Sm90BackwardTile{64, 64, 8};
    default:  // d128: two consumer warpgroups of 64 keys each walk 64-row query blocks
      return Sm90BackwardTile{64, 128, 8};
  }
}

// Whether this build and device run the problem's main kernel here; otherwise *whyNot names the argument and value.
bool sm90BackwardSupports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot);

// The main kernel for a problem sm90BackwardSupports accepted (params built by backward::makeParams with this
// family's block shape); `device` is the current device, on which the kernel's shared-memory opt-in is made once.
cudaError_t launchBackwardSm90(DType dtype, int headDim, const backward::BackwardParams &params, int device,
                               cudaStream_t stream);

}  // namespace flashattn::cuda::backward_sm90
