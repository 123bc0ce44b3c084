// SPDX-License-Identifier: BSD-3-Clause
// The Hopper backward family (cuda.bwd.wgmma): its tile per head dim and the instance launcher the generated files
// define. It registers itself with the backward chooser (backward_sm90.cu) ranked before the portable kernels and runs
// the portable family's pipeline (preprocess, convert, workspace) around its own main kernel. A new head dim is an
// entry in src/cuda/generate.py, its tile in sm90BackwardTileFor, its shared-memory size and its dQ accumulator layout
// (BackwardConfig::dqPaneled) in backward_sm90.cu.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/problem.hpp"
#include "cuda/kernels/backward/backward_params.hpp"

namespace flashattn::cuda::backward_sm90 {

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

// The main kernel of one instance (params built by backward::makeParams with this family's block shape); `device`
// is the current device, on which the kernel's shared-memory opt-in is made once. Defined by the generated files.
template <typename Element, int HeadDim>
cudaError_t launchSm90Instance(const backward::BackwardParams &params, int device, cudaStream_t stream);

}  // namespace flashattn::cuda::backward_sm90
