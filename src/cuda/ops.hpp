// SPDX-License-Identifier: BSD-3-Clause
// The seam between the CUDA backend frame (cuda_backend.cpp) and the kernel families.
//
// Each family (forward, backward, decode, merge) provides a plan function (the chooser: kernel choice and workspace
// layout from the device, dtype and head dim) and a launch function that runs exactly that plan. The size query and
// the run both call plan, so they can never disagree. Launch functions only enqueue work on the stream: no
// allocation, no synchronisation, no device-to-host copy (graph capture must work).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashattn::cuda {

// Read once at handle creation.
struct DeviceInfo {
  int device = 0;
  int ccMajor = 0;
  int ccMinor = 0;
  int numSMs = 0;
  std::size_t smemPerBlockOptin = 0;  // bytes a block may use after cudaFuncSetAttribute
  std::size_t l2Bytes = 0;
  int maxThreadsPerSM = 0;
  char name[256] = {};
  int arch() const { return ccMajor * 10 + ccMinor; }
};

// Every plan function returns false and sets *whyNot (a sentence naming the argument and value) when the problem is
// valid but not served. Every launch function returns the first CUDA error it met (cudaSuccess otherwise).
bool planForward(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot);
cudaError_t launchForward(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                          void *workspace, cudaStream_t stream);

bool planBackward(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot);
cudaError_t launchBackward(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan,
                           const AttnBuffers &buf, void *workspace, cudaStream_t stream);

bool planDecode(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot);
cudaError_t launchDecode(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                         void *workspace, cudaStream_t stream);

bool planMerge(const DeviceInfo &dev, const MergeProblem &p, Plan *plan, std::string *whyNot);
cudaError_t launchMerge(const DeviceInfo &dev, const MergeProblem &p, const Plan &plan, const MergeBuffers &buf,
                        void *workspace, cudaStream_t stream);

}  // namespace flashattn::cuda
