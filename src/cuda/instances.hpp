// SPDX-License-Identifier: BSD-3-Clause
// The compiled instances of a family, as src/cuda/generate.py writes them for the build: a family's plan function
// searches generated::k<Family>Instances (cuda/generated/<family>_instance_list.hpp), and its dispatch switch is made
// from the same entries (cuda/generated/<family>_instances.inc), so a plan never names an instance the switch lacks.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/plan.hpp"
#include "core/problem.hpp"

namespace flashattn::cuda {

struct InstanceList {
  const InstanceKey *keys;
  int count;

  bool hasDtype(DType t) const {
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t) return true;
    return false;
  }
  // The narrowest compiled head dim >= headDim for this dtype (columns in between run zero-filled), 0 when none.
  int32_t headDimFor(DType t, int64_t headDim) const {
    int32_t best = 0;
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t && keys[i].headDim >= headDim && (best == 0 || keys[i].headDim < best))
        best = keys[i].headDim;
    return best;
  }
  bool has(DType t, int64_t headDim) const {
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t && keys[i].headDim == headDim) return true;
    return false;
  }
  std::string headDims(DType t) const {
    std::string list;
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t) list += (list.empty() ? "" : ", ") + std::to_string(keys[i].headDim);
    return list.empty() ? "none" : list;
  }

  // The instance head dim that serves the problem under the portable families' rule (equal head dims for Q/K and
  // V/O, a multiple of 8 up to 256, padded to the next compiled instance), or 0 with *whyNot naming the argument.
  // `kernels` names the family in the message ("forward kernels").
  int32_t paddedInstanceFor(const AttnProblem &p, const char *kernels, std::string *whyNot) const {
    if (p.headDimV != p.headDim)
      *whyNot = concat("headDimV ", p.headDimV, " differs from headDim ", p.headDim, ": the ", kernels,
                       " need equal head dims for Q/K and V/O");
    else if (p.headDim < 8 || p.headDim > 256 || p.headDim % 8 != 0)
      *whyNot = concat("headDim ", p.headDim, " is not supported by the ", kernels,
                       ": it must be a multiple of 8 in [8, 256]");
    else if (!hasDtype(p.dtype))
      *whyNot = concat("data type ", dtypeName(p.dtype), " has no ", kernels, " in this build (FLASHATTN_DTYPES)");
    else if (const int32_t instance = headDimFor(p.dtype, p.headDim))
      return instance;
    else
      *whyNot = concat("headDim ", p.headDim, ": this build does not have ", kernels, " at least as wide (",
                       dtypeName(p.dtype), " head dims: ", headDims(p.dtype), "; FLASHATTN_HEAD_DIMS)");
    return 0;
  }
};

}  // namespace flashattn::cuda
