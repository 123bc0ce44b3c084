// SPDX-License-Identifier: BSD-3-Clause
// The seam between the portable forward chooser (src/cuda/kernels/forward/forward.cu) and the Hopper forward family.
//
// planForward plans the portable kernel first; on an sm90 device routeToSm90 then takes over the problems this family
// serves (FP16/BF16, head dims 64/128/256 of this build, no softcap/ALiBi, rows and strides in 16-byte units): it
// rewrites Plan.description and tags Plan.config, keeping the portable instance key in the low bits. launchForward
// hands tagged plans to launchSm90 when every buffer is 16-byte aligned (only known at launch) and runs the portable
// kernel of the low bits otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/kernels/forward/forward_params.hpp"
#include "cuda/ops.hpp"

namespace flashattn::cuda::forward_sm90 {

constexpr int32_t kConfigTag = int32_t(1) << 20;
constexpr bool isSm90Config(int32_t config) { return (config & kConfigTag) != 0; }
constexpr int32_t portableConfig(int32_t config) { return config & 0xffff; }

// Whether this build and device run the problem on the sm90 kernels; otherwise *whyNot names the argument and value.
bool sm90Supports(const DeviceInfo &dev, const AttnProblem &p, std::string *whyNot);

// When sm90Supports: replaces the plan's description and tags its config; returns whether it did. Otherwise, on an
// sm90 device, appends the reason to the portable plan's description.
bool routeToSm90(const DeviceInfo &dev, const AttnProblem &p, Plan *plan);

// The sm90 kernels move whole 16-byte vectors: every base pointer must be 16-byte aligned.
bool buffersAligned(const AttnBuffers &buf);

cudaError_t launchSm90(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                       cudaStream_t stream);

// The kernel parameters of a problem (what launchSm90 passes; benchmark drivers reuse it).
forward::ForwardParams sm90Params(const AttnProblem &p, const AttnBuffers &buf);

}  // namespace flashattn::cuda::forward_sm90
