// SPDX-License-Identifier: BSD-3-Clause
// A backend serves the four operations for the problems the C entry points have already validated.
#pragma once

#include <memory>

#include "core/plan.hpp"
#include "core/problem.hpp"
#include "flashattn/flashattn.h"

namespace flashattn {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual flashAttnBackend_t kind() const = 0;
  virtual void setStream(CUstream_st *stream) { (void)stream; }
  virtual CUstream_st *stream() const { return nullptr; }

  // Plans throw Error(FLASHATTN_STATUS_NOT_SUPPORTED, why) when the problem is valid but not served here.
  virtual Plan plan(const AttnProblem &p) const = 0;
  virtual Plan planMerge(const MergeProblem &p) const = 0;
  // The text flashAttnCheckSupport() reports, for a backend whose plan() leaves Plan::description empty so that
  // operations do not build it on every call (HOST). A backend whose planners write it needs nothing here.
  virtual void describe(const AttnProblem &p, Plan &plan) const { (void)p, (void)plan; }
  virtual void describeMerge(const MergeProblem &p, Plan &plan) const { (void)p, (void)plan; }

  // Checks that need to read the problem's index arrays (cu_seqlens, KV lengths, block table). Only a backend that
  // can read them without a device synchronisation does (HOST); throws Error(BAD_PARAM) before anything is written.
  virtual void validateIndexData(const AttnProblem &p) const { (void)p; }

  // Run exactly `plan`. The workspace holds at least plan.workspaceBytes bytes. Throw Error on failure.
  virtual void forward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) = 0;
  virtual void backward(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) = 0;
  virtual void decode(const AttnProblem &p, const Plan &plan, const AttnBuffers &buf, void *workspace) = 0;
  virtual void merge(const MergeProblem &p, const Plan &plan, const MergeBuffers &buf, void *workspace) = 0;
};

std::unique_ptr<Backend> makeHostBackend();
// Throws Error with NO_DEVICE, ARCH_MISMATCH, or NOT_SUPPORTED (a build without CUDA).
std::unique_ptr<Backend> makeCudaBackend();
// True when makeCudaBackend() would succeed (AUTO picks CUDA then).
bool cudaBackendAvailable();

}  // namespace flashattn
