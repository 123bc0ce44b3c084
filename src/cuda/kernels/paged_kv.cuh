// SPDX-License-Identifier: BSD-3-Clause
// The paged KV cache's address rule (flashattn.h, flashAttnSetSeqPaged): key t of sequence b is row t % pageSize of
// page blockTable[b * maxPagesPerSeq + t / pageSize] of K/V [numPages, pageSize, kvHeads, headDim]. Every kernel
// family that reads a paged cache (forward, forward_sm90, decode) finds its rows here and nowhere else, so the rule and
// its guards (a table entry outside the pool names no row) are stated once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/paged_kv.hpp"

namespace flashattn::cuda::paged {

// Where a key lives: its page id (-1: none) and its row in that page.
struct PagedRow {
  int32_t page;
  int32_t row;
};

// Whether a sequence's table row has an entry for page `index` (index >= 0).
__device__ __forceinline__ bool hasEntry(const PagedCache &c, int32_t index) {
  return int64_t(index) < c.maxPagesPerSeq;
}

// The table entry of page `index` of a sequence's row, nullptr where the row has no such entry: for callers that read
// entries ahead by asynchronous copies and, where hasEntry, check them with checkedPage once they land.
__device__ __forceinline__ const int32_t *entryAddress(const PagedCache &c, int32_t sequence, int32_t index) {
  return hasEntry(c, index) ? c.blockTable + int64_t(sequence) * c.maxPagesPerSeq + index : nullptr;
}

// A table entry as a page id: -1 where it lies outside the pool.
__device__ __forceinline__ int32_t checkedPage(const PagedCache &c, int32_t id) {
  return id >= 0 && int64_t(id) < c.numPages ? id : -1;
}

// The id of page `index` of a sequence's table row, -1 where the row has no such entry or it lies outside the pool.
__device__ __forceinline__ int32_t pageAt(const PagedCache &c, int32_t sequence, int32_t index) {
  const int32_t *entry = entryAddress(c, sequence, index);
  return entry == nullptr ? -1 : checkedPage(c, __ldg(entry));
}

// Key `key` (0 <= key < 2^31) of sequence `sequence`. The table entry is read only when the key's page lies inside the
// sequence's table row; an entry outside the pool gives page -1, whose key the caller must not read (it arrives as
// zeros: wrong values give wrong results, never an access outside the tensors, as flashattn.h promises). Callers ask
// only for keys below the sequence's length, so no entry past its last page is ever read.
__device__ __forceinline__ PagedRow pagedRow(const PagedCache &c, int32_t sequence, int32_t key) {
  const int32_t index = c.pageSize.divide(key);
  return PagedRow{pageAt(c, sequence, index), c.pageSize.remainder(key, index)};
}

// Element offset of a present row (page >= 0) in a cache with page stride `pageStride` and in-page row stride
// `rowStride`; the KV head's offset is the caller's.
__device__ __forceinline__ int64_t rowOffset(PagedRow r, int64_t pageStride, int64_t rowStride) {
  return int64_t(r.page) * pageStride + int64_t(r.row) * rowStride;
}

}  // namespace flashattn::cuda::paged
