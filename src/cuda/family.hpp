// SPDX-License-Identifier: BSD-3-Clause
// Kernel families and the one chooser per operation.
//
// A family is a kernel (or a small set of kernels sharing a scheme) that serves one operation: the portable mma.sync
// forward, the sm_90a wgmma forward, ... Each registers itself (FLASHATTN_REGISTER_FAMILY in its .cu file, so an
// arch-specific family compiled into its own object library joins the registry just by being linked) with a rank, a
// plan function and a launch function. choose() tries an operation's families in rank order; the first whose plan
// function accepts the problem makes the plan. CheckSupport, the workspace query and the run all call choose() on the
// same problem, and the run launches exactly the family the plan names.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashattn::cuda {

// Read once at handle creation; the choosers' tests build fake ones (A100, L4, H100) on machines without a GPU.
struct DeviceInfo {
  int device = 0;
  int ccMajor = 0;
  int ccMinor = 0;
  int numSMs = 0;
  std::size_t smemPerBlockOptin = 0;  // bytes a block may use after cudaFuncSetAttribute
  std::size_t l2Bytes = 0;
  int maxThreadsPerSM = 0;
  // The architecture the portable kernels' code was compiled for, as this device runs it (the PTX version of the
  // loaded image: 90 for sm_90 machine code, 80 for compute_80 PTX compiled by the driver). Features above it
  // (tensor maps, clusters) are compiled out of that code and must never be planned. 0 = not known (not probed).
  int portableCodeArch = 0;
  char name[256] = {};
  int arch() const { return ccMajor * 10 + ccMinor; }
  // Whether the portable kernels' code may use sm90 instructions on this device.
  bool portableHasSm90() const { return arch() >= 90 && portableCodeArch >= 90; }
};

// The architecture the portable kernels' code was compiled for on the current device (code_arch.cu); 0 when unknown.
int portableCodeArch();

// What a family's plan function says about a problem.
enum class Verdict {
  Served,      // *plan is filled
  Refused,     // valid for this device, not served by this family: *whyNot names the argument and value
  NotForThis,  // the family does not run on this device or build at all (arch-specific); not worth a word
};

struct Family {
  KernelId id;
  Op op;
  int rank;        // lower is tried first; arch-specific families rank before the portable ones they replace
  bool portable;   // runs from the portable code (FLASHATTN_KERNEL_FAMILIES=portable keeps only these)
  const char *label;  // for descriptions: "wgmma kernel"
  Verdict (*plan)(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot);
  cudaError_t (*launch)(const DeviceInfo &dev, const AttnProblem &p, const Plan &plan, const AttnBuffers &buf,
                        void *workspace, cudaStream_t stream);
};

void registerFamily(const Family &family);

// The family a plan names (nullptr when none is registered).
const Family *findFamily(KernelId id);

// Plans the problem on the first family of its operation that serves it. On success the description ends with why
// the families ranked before it were not used ("; wgmma kernel not used: ..."); otherwise *whyNot gathers every
// family's reason. Families for other devices (Verdict::NotForThis) and, under FLASHATTN_KERNEL_FAMILIES=portable,
// the arch-specific ones are skipped without a word.
bool choose(const DeviceInfo &dev, const AttnProblem &p, Plan *plan, std::string *whyNot);

// Whether the choosers only consider portable families (FLASHATTN_KERNEL_FAMILIES=portable).
bool portableOnly();

struct FamilyRegistrar {
  explicit FamilyRegistrar(const Family &family) { registerFamily(family); }
};

#define FLASHATTN_REGISTER_FAMILY_CONCAT2(a, b) a##b
#define FLASHATTN_REGISTER_FAMILY_CONCAT(a, b) FLASHATTN_REGISTER_FAMILY_CONCAT2(a, b)
#define FLASHATTN_REGISTER_FAMILY(...)                                                                    \
  static const ::flashattn::cuda::FamilyRegistrar FLASHATTN_REGISTER_FAMILY_CONCAT(familyRegistrar_, \
                                                                                   __LINE__)(::flashattn::cuda::Family{__VA_ARGS__})

}  // namespace flashattn::cuda
