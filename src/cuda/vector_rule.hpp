// SPDX-License-Identifier: BSD-3-Clause
// The rule of the kernels that move rows in 16-byte vectors (cp.async, tensor maps): every stride of a walked
// dimension is a whole number of vectors. Families that load element by element (the forward, the merge) skip it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.hpp"
#include "core/problem.hpp"

namespace flashattn::cuda {

struct WalkedTensor {
  const char *name;
  const Layout &layout;
  bool batchUsed, headUsed;  // the row is always walked
};

// The first walked dimension (row, then head, then batch) whose stride is not a whole number of 16-byte vectors;
// dimension is nullptr when there is none. The one statement of the rule: the families' refusals and the staging
// planner (which copies such tensors through the workspace instead) both ask it.
struct StrideBreak {
  const char *dimension = nullptr;
  int64_t stride = 0;
};

inline StrideBreak firstStrideBreak(const Layout &l, int64_t elementBytes, bool batchWalked, bool headWalked) {
  const int64_t perVector = 16 / elementBytes;
  if (l.row % perVector != 0) return StrideBreak{"row", l.row};
  if (headWalked && l.head % perVector != 0) return StrideBreak{"head", l.head};
  if (batchWalked && l.batch % perVector != 0) return StrideBreak{"batch", l.batch};
  return StrideBreak{};
}

// False with *whyNot naming the tensor, dimension and stride when one breaks the rule.
inline bool vectorStridesFit(DType dtype, std::initializer_list<WalkedTensor> tensors, const char *kernels,
                             std::string *whyNot) {
  const int64_t elementBytes = int64_t(dtypeSize(dtype));
  for (const WalkedTensor &t : tensors) {
    const StrideBreak b = firstStrideBreak(t.layout, elementBytes, t.batchUsed, t.headUsed);
    if (b.dimension != nullptr) {
      *whyNot = concat(t.name, " ", b.dimension, " stride is ", b.stride, " elements, not a multiple of ",
                       16 / elementBytes, ": the ", kernels, " move rows in 16-byte vectors");
      return false;
    }
  }
  return true;
}

}  // namespace flashattn::cuda
