// SPDX-License-Identifier: BSD-3-Clause
// The seam between the CUDA backend frame (cuda_backend.cpp) and the kernels.
//
// Attention operations (forward, backward, decode) go through the family registry and choosers of
// src/cuda/family.hpp. The merge of partial states has one kernel and its own problem type, so it keeps a plan and a
// launch function here. Launch functions only enqueue work on the stream: no allocation, no synchronisation, no
// device-to-host copy (graph capture must work).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "cuda/family.hpp"

namespace flashattn::cuda {

// Returns false and sets *whyNot (a sentence naming the argument and value) when the merge is valid but not served.
bool planMerge(const DeviceInfo &dev, const MergeProblem &p, Plan *plan, std::string *whyNot);
cudaError_t launchMerge(const DeviceInfo &dev, const MergeProblem &p, const Plan &plan, const MergeBuffers &buf,
                        void *workspace, cudaStream_t stream);

}  // namespace flashattn::cuda
