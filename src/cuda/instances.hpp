// SPDX-License-Identifier: BSD-3-Clause
// The compiled instances of a family, as src/cuda/generate.py writes them for the build: a family's plan function
// searches generated::k<Family>Instances (cuda/generated/<family>_instance_list.hpp), and its dispatch switch is made
// from the same entries (cuda/generated/<family>_instances.inc), so a plan never names an instance the switch lacks.
#pragma once

#include <cstdint>
#include <string>

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
};

}  // namespace flashattn::cuda
