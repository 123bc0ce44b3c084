// SPDX-License-Identifier: BSD-3-Clause
// What the opaque public handles point at, and the registry that tells live objects from NULL, destroyed or foreign
// pointers without ever dereferencing them.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.hpp"
#include "core/problem.hpp"
#include "flashattn/flashattn.h"

struct flashAttnContext {
  std::unique_ptr<flashattn::Backend> backend;
};

struct flashAttnTensorStruct {
  bool isSet = false;
  flashattn::DType dtype = flashattn::DType::FP32;
  int32_t rank = 0;
  int64_t dims[FLASHATTN_MAX_TENSOR_RANK] = {};
  int64_t strides[FLASHATTN_MAX_TENSOR_RANK] = {};
};

struct flashAttnAttentionStruct {
  float scale = 0.f;  // 0 = 1/sqrt(headDim), resolved by the problem builder
  flashattn::Mask mask = flashattn::Mask::None;
  int64_t windowLeft = -1;
  int64_t windowRight = -1;
  float softcap = 0.f;
  const float *alibiSlopes = nullptr;
  int32_t alibiPerBatch = 0;
  int32_t deterministic = 0;
  const float *sinks = nullptr;
  float *dSinks = nullptr;
};

struct flashAttnSeqStruct {
  int64_t raggedBatch = 0;  // 0 = not ragged
  const int32_t *cuSeqlensQ = nullptr;
  const int32_t *cuSeqlensK = nullptr;
  int64_t maxSeqlenQ = 0;
  int64_t maxSeqlenK = 0;
  int64_t kvLengthsBatch = 0;  // 0 = unset
  const int32_t *seqlensK = nullptr;
  int64_t pagedBatch = 0;  // 0 = not paged
  const int32_t *blockTable = nullptr;
  int64_t maxPagesPerSeq = 0;
};

namespace flashattn {

// Objects are registered at creation and removed at destruction; every entry point looks its arguments up here, so a
// destroyed or never-created pointer gives NOT_INITIALIZED instead of a crash. (A new object may reuse the address of
// a destroyed one; then the stale pointer names the new object, as with any allocator.)
template <typename T>
T *createObject();
template <typename T>
bool destroyObject(T *object);  // false when not live
template <typename T>
bool isLive(const T *object);

// Look-ups that throw Error(NOT_INITIALIZED) naming the argument when the object is NULL, not live or (tensors) unset.
flashAttnContext &handleRef(flashAttnHandle_t h, const char *argName = "handle");
const flashAttnTensorStruct &tensorRef(flashAttnTensorDescriptor_t d, const char *argName);
// NULL is allowed for optional descriptors: these return nullptr then.
const flashAttnTensorStruct *optionalTensor(flashAttnTensorDescriptor_t d, const char *argName);
const flashAttnAttentionStruct *optionalAttention(flashAttnAttentionDescriptor_t d);
const flashAttnSeqStruct *optionalSeq(flashAttnSeqDescriptor_t d);

}  // namespace flashattn
