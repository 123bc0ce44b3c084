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

// Q/K head dims from 192 run the column-split kernel (backward_sm90_split_kernel.cuh: 64 keys per CTA, every product
// split between the two warpgroups, dQ added by bulk reduce where its staging fits, else by red.global), the others
// the d64/d128 kernel (backward_sm90_kernel.cuh: 128 keys per CTA, dQ added by bulk reduce into the paneled
// accumulator).
constexpr bool runsSplitKernel(int headDim) { return headDim >= 192; }

// The CTA shape of the wgmma main kernel for one Q/K head dim (V/O's, where narrower, runs the same shape): the
// workspace layout and grid follow from it.
struct Sm90BackwardTile {
  int blockM;  // query rows per step
  int blockN;  // keys per CTA
  int warps;
};

constexpr Sm90BackwardTile sm90BackwardTileFor(int headDim) {
  if (runsSplitKernel(headDim)) return Sm90BackwardTile{64, 64, 8};
  // d64: 128-row query blocks (at 64 rows the d64 products are too short for the per-step fixed costs); d128: two
  // consumer warpgroups of 64 keys each walk 64-row query blocks.
  return headDim == 64 ? Sm90BackwardTile{128, 128, 8} : Sm90BackwardTile{64, 128, 8};
}

// The main kernel of one instance (params built by backward::makeParams with this family's block shape); `device`
// is the current device, on which the kernel's shared-memory opt-in is made once. Defined by the generated files.
// HeadDimV: V/O's head dim, HeadDim's where the instance is of one head dim.
template <typename Element, int HeadDim, int HeadDimV>
cudaError_t launchSm90Instance(const backward::BackwardParams &params, int device, cudaStream_t stream);

}  // namespace flashattn::cuda::backward_sm90
