// SPDX-License-Identifier: BSD-3-Clause
// What the paged KV cache's address rule (paged_kv.cuh) needs of one call: plain data that every family's kernel
// parameters carry, built on the host from the problem.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/fast_divisor.hpp"

namespace flashattn::cuda::paged {

struct PagedCache {
  const int32_t *blockTable = nullptr;  // [batch, maxPagesPerSeq]
  int64_t maxPagesPerSeq = 0;
  int64_t numPages = 0;  // ids outside [0, numPages) address no page
  FastDivisor pageSize;  // keys are < 2^31 (the planners cap the capacity), as FastDivisor needs
};

// The problem's paged cache (a default PagedCache, never read, for a dense one). The planners refuse capacities of
// 2^31 keys or more, so the page size fits 32 bits wherever a kernel runs.
inline PagedCache pagedCacheOf(const AttnProblem &p) {
  PagedCache c;
  if (!p.paged) return c;
  c.blockTable = p.blockTable;
  c.maxPagesPerSeq = p.maxPagesPerSeq;
  c.numPages = p.numPages;
  c.pageSize = FastDivisor(int32_t(p.pageSize));
  return c;
}

}  // namespace flashattn::cuda::paged
