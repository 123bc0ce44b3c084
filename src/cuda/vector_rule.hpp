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

// False with *whyNot naming the tensor, dimension and stride when one breaks the rule.
inline bool vectorStridesFit(DType dtype, std::initializer_list<WalkedTensor> tensors, const char *kernels,
                             std::string *whyNot) {
  const int64_t perVector = int64_t(16 / dtypeSize(dtype));
  for (const WalkedTensor &t : tensors) {
    const int64_t strides[3] = {t.batchUsed ? t.layout.batch : 0, t.headUsed ? t.layout.head : 0, t.layout.row};
    const char *names[3] = {"batch", "head", "row"};
    for (int i = 0; i < 3; ++i)
      if (strides[i] % perVector != 0) {
        *whyNot = concat(t.name, " ", names[i], " stride is ", strides[i], " elements, not a multiple of ", perVector,
                         ": the ", kernels, " move rows in 16-byte vectors");
        return false;
      }
  }
  return true;
}

}  // namespace flashattn::cuda
