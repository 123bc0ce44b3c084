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

// "d128", or "d192v128" for an instance compiled for Q/K and V/O head dims apart.
inline std::string instanceName(const InstanceKey &k) {
  return "d" + std::to_string(k.headDim) + (k.headDimV > 0 ? "v" + std::to_string(k.headDimV) : "");
}

// Which head dims a family takes: anyWidth, every width from 1 (else multiples of 8, the 16-byte copies' unit);
// distinctV, a V/O head dim other than Q/K's (both padded to one instance: the narrower's extra columns are zeros).
struct HeadDimRule {
  bool anyWidth = false;
  bool distinctV = false;
};

struct InstanceList {
  const InstanceKey *keys;
  int count;

  bool hasDtype(DType t) const {
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t) return true;
    return false;
  }
  // The narrowest compiled head dim >= headDim for this dtype (columns in between run zero-filled), 0 when none.
  // Instances of one head dim for Q/K and V/O only; pairFor finds the others.
  int32_t headDimFor(DType t, int64_t headDim) const {
    int32_t best = 0;
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t && keys[i].headDimV == 0 && keys[i].headDim >= headDim &&
          (best == 0 || keys[i].headDim < best))
        best = keys[i].headDim;
    return best;
  }
  bool has(DType t, int64_t headDim) const {
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t && keys[i].headDimV == 0 && keys[i].headDim == headDim) return true;
    return false;
  }
  // The instance compiled for exactly these head dims (one of equal dims, or a pair), or nullptr: for families that
  // pad no columns.
  const InstanceKey *exactFor(DType t, int64_t headDim, int64_t headDimV) const {
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t && keys[i].headDim == headDim && keys[i].widthV() == headDimV) return &keys[i];
    return nullptr;
  }
  // The narrowest instance compiled for Q/K and V/O head dims apart that holds (headDim, headDimV), or nullptr.
  const InstanceKey *pairFor(DType t, int64_t headDim, int64_t headDimV) const {
    const InstanceKey *best = nullptr;
    for (int i = 0; i < count; ++i) {
      const InstanceKey &k = keys[i];
      if (k.dtype == t && k.headDimV > 0 && k.headDim >= headDim && k.headDimV >= headDimV &&
          (best == nullptr || k.headDim + k.headDimV < best->headDim + best->headDimV))
        best = &k;
    }
    return best;
  }
  std::string headDims(DType t) const {
    std::string list;
    for (int i = 0; i < count; ++i)
      if (keys[i].dtype == t)
        list += (list.empty() ? "" : ", ") + std::to_string(keys[i].headDim) +
                (keys[i].headDimV > 0 ? "/" + std::to_string(keys[i].headDimV) : "");
    return list.empty() ? "none" : list;
  }

  // The instance head dim that serves the problem (the narrowest compiled one at least as wide as both head dims, the
  // columns in between zero-filled), or 0 with *whyNot naming the argument. `kernels` names the family in the
  // message ("forward kernels").
  int32_t paddedInstanceFor(const AttnProblem &p, const char *kernels, std::string *whyNot,
                            HeadDimRule rule = {}) const {
    auto widthRefused = [&](const char *name, int64_t width) {
      if (width >= 1 && width <= 256 && (rule.anyWidth || width % 8 == 0)) return false;
      *whyNot = concat(name, " ", width, " is not supported by the ", kernels, ": it must be ",
                       rule.anyWidth ? "in [1, 256]" : "a multiple of 8 in [8, 256]");
      return true;
    };
    if (p.headDimV != p.headDim && !rule.distinctV)
      *whyNot = concat("headDimV ", p.headDimV, " differs from headDim ", p.headDim, ": the ", kernels,
                       " need equal head dims for Q/K and V/O");
    else if (widthRefused("headDim", p.headDim) || widthRefused("headDimV", p.headDimV))
      return 0;
    else if (!hasDtype(p.dtype))
      *whyNot = concat("data type ", dtypeName(p.dtype), " has no ", kernels, " in this build (FLASHATTN_DTYPES)");
    else if (const int32_t instance = headDimFor(p.dtype, p.headDim > p.headDimV ? p.headDim : p.headDimV))
      return instance;
    else
      *whyNot = concat("headDim ", p.headDim, p.headDimV != p.headDim ? concat(" / headDimV ", p.headDimV) : "",
                       ": this build does not have ", kernels, " at least as wide (", dtypeName(p.dtype),
                       " head dims: ", headDims(p.dtype), "; FLASHATTN_HEAD_DIMS)");
    return 0;
  }
};

}  // namespace flashattn::cuda
