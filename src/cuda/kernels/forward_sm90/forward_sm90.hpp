// SPDX-License-Identifier: BSD-3-Clause
// The Hopper forward family (cuda.fwd.wgmma). It registers itself with the forward chooser (src/cuda/family.hpp)
// ranked before the portable kernels: on an sm90 device it serves FP16/BF16 at its instances' head dims without
// softcap or ALiBi, with rows and strides in 16-byte units and 16-byte aligned pointers; everything else falls through
// to the portable family, whose plan description then says why this one was not used.
#pragma once

#include "core/problem.hpp"
#include "cuda/kernels/forward/forward_params.hpp"

namespace flashattn::cuda::forward_sm90 {

// The kernel parameters of a problem (what the launch passes; benchmark drivers reuse it).
forward::ForwardParams sm90Params(const AttnProblem &p, const AttnBuffers &buf);

}  // namespace flashattn::cuda::forward_sm90
