// The seam between the portable backward chooser (src/cuda/kernels/backward/backward.cu) and the Hopper backward
// family. planBackward asks sm90BackwardSupports on an sm90 device; when it says yes the plan carries
// kSm90BackwardTile as its tile index, the workspace is laid out for kSm90BackwardBlockM query rows per block, and
// launchBackward runs the same memset, preprocess and convert kernels around launchBackwardSm90 instead of the
// portable main kernel.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/problem.hpp"
#include "cuda/kernels/backward/backward_params.hpp"
#include "cuda/ops.hpp"

namespace flashattn::cuda::backward_sm90 {

constexpr int kSm90BackwardTile = 7;     // the tile index planBackward packs into Plan.config for this family
constexpr int kSm90BackwardBlockM = 64;  // query rows per step
constexpr int kSm90BackwardBlockN = 128; // keys per CTA (two consumer warpgroups of 64)
constexpr int kSm90BackwardWarps = 8;

// Whether this build and device run the problem's main kernel here; otherwise *whyNot names the argument and value.
bool sm90BackwardSupports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot);

// The main kernel for a problem sm90BackwardSupports accepted (params built by backward::makeParams with this
// family's block shape).
cudaError_t launchBackwardSm90(DType dtype, int headDim, const backward::BackwardParams &params, cudaStream_t stream);

}  // namespace flashattn::cuda::backward_sm90
