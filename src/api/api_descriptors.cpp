// SPDX-License-Identifier: BSD-3-Clause
// Tensor, attention and sequence descriptors: plain values, validated field by field at set time so that the
// operations only have to check how the fields combine.
#include <cmath>

#include "api/guard.hpp"
#include "core/descriptors.hpp"
#include "core/error.hpp"

using namespace flashattn;

namespace {

// Dimensions and strides beyond this could overflow the 64-bit span arithmetic before the span check runs.
constexpr int64_t kMaxDimOrStride = int64_t(1) << 40;

template <typename T>
T &liveRef(T *object, const char *argName) {
  if (!object) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " is NULL");
  if (!isLive(object)) fail(FLASHATTN_STATUS_NOT_INITIALIZED, argName, " is not a live descriptor (destroyed or never created)");
  return *object;
}

template <typename T>
flashAttnStatus_t createDescriptor(const char *function, T **out) {
  return guarded(function, [&] {
    require(out != nullptr, "desc (output pointer) is NULL");
    *out = createObject<T>();
  });
}

template <typename T>
flashAttnStatus_t destroyDescriptor(const char *function, T *desc) {
  return guarded(function, [&] {
    if (desc && !destroyObject(desc))
      fail(FLASHATTN_STATUS_NOT_INITIALIZED, "desc is not a live descriptor (destroyed twice, or never created)");
  });
}

}  // namespace

extern "C" {

FLASHATTN_API flashAttnStatus_t flashAttnCreateTensorDescriptor(flashAttnTensorDescriptor_t *desc) {
  return createDescriptor("flashAttnCreateTensorDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnDestroyTensorDescriptor(flashAttnTensorDescriptor_t desc) {
  return destroyDescriptor("flashAttnDestroyTensorDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnSetTensorDescriptor(flashAttnTensorDescriptor_t desc,
                                                             flashAttnDataType_t dataType, int32_t rank,
                                                             const int64_t *dims, const int64_t *strides) {
  return guarded("flashAttnSetTensorDescriptor", [&] {
    flashAttnTensorStruct &t = liveRef(desc, "desc");
    const int32_t type = rawEnum(dataType);
    if (type != FLASHATTN_DATA_FP16 && type != FLASHATTN_DATA_BF16 && type != FLASHATTN_DATA_FP32)
      fail(FLASHATTN_STATUS_BAD_PARAM, "dataType is ", type, ": expected FP16 (0), BF16 (1) or FP32 (2)");
    if (rank < 1 || rank > FLASHATTN_MAX_TENSOR_RANK)
      fail(FLASHATTN_STATUS_BAD_PARAM, "rank is ", rank, ": expected 1..", FLASHATTN_MAX_TENSOR_RANK);
    require(dims != nullptr, "dims is NULL");
    require(strides != nullptr, "strides is NULL");
    for (int i = 0; i < rank; ++i) {
      if (dims[i] <= 0) fail(FLASHATTN_STATUS_BAD_PARAM, "dims[", i, "] is ", dims[i], ": every dimension must be >= 1");
      if (dims[i] > kMaxDimOrStride)
        fail(FLASHATTN_STATUS_BAD_PARAM, "dims[", i, "] is ", dims[i], ": larger than 2^40, not addressable");
      if (strides[i] < 0)
        fail(FLASHATTN_STATUS_BAD_PARAM, "strides[", i, "] is ", strides[i], ": negative strides are not accepted");
      if (strides[i] > kMaxDimOrStride)
        fail(FLASHATTN_STATUS_BAD_PARAM, "strides[", i, "] is ", strides[i], ": larger than 2^40, not addressable");
    }
    if (strides[rank - 1] != 1)
      fail(FLASHATTN_STATUS_BAD_PARAM, "strides[", rank - 1, "] (the head-dim stride) is ", strides[rank - 1],
           ": it must be 1");
    t.dtype = static_cast<DType>(type);
    t.rank = rank;
    for (int i = 0; i < FLASHATTN_MAX_TENSOR_RANK; ++i) {
      t.dims[i] = i < rank ? dims[i] : 0;
      t.strides[i] = i < rank ? strides[i] : 0;
    }
    t.isSet = true;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetTensorDescriptor(flashAttnTensorDescriptor_t desc, int32_t maxRank,
                                                             flashAttnDataType_t *dataType, int32_t *rank,
                                                             int64_t *dims, int64_t *strides) {
  return guarded("flashAttnGetTensorDescriptor", [&] {
    const flashAttnTensorStruct &t = tensorRef(desc, "desc");
    if (maxRank < 0) fail(FLASHATTN_STATUS_BAD_PARAM, "maxRank is ", maxRank, ": must be >= 0");
    if (dataType) *dataType = static_cast<flashAttnDataType_t>(t.dtype);
    if (rank) *rank = t.rank;
    for (int i = 0; i < t.rank && i < maxRank; ++i) {
      if (dims) dims[i] = t.dims[i];
      if (strides) strides[i] = t.strides[i];
    }
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnCreateAttentionDescriptor(flashAttnAttentionDescriptor_t *desc) {
  return createDescriptor("flashAttnCreateAttentionDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnDestroyAttentionDescriptor(flashAttnAttentionDescriptor_t desc) {
  return destroyDescriptor("flashAttnDestroyAttentionDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionScale(flashAttnAttentionDescriptor_t desc, float scale) {
  return guarded("flashAttnSetAttentionScale", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (!std::isfinite(scale) || scale <= 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, "scale is ", scale, ": it must be finite and > 0");
    a.scale = scale;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionScale(flashAttnAttentionDescriptor_t desc, float *scale) {
  return guarded("flashAttnGetAttentionScale", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(scale != nullptr, "scale (output pointer) is NULL");
    *scale = a.scale;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionMask(flashAttnAttentionDescriptor_t desc,
                                                          flashAttnMaskMode_t mask) {
  return guarded("flashAttnSetAttentionMask", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    const int32_t mode = rawEnum(mask);
    if (mode != FLASHATTN_MASK_NONE && mode != FLASHATTN_MASK_CAUSAL_TOP_LEFT &&
        mode != FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT)
      fail(FLASHATTN_STATUS_BAD_PARAM, "mask is ", mode,
           ": expected NONE (0), CAUSAL_TOP_LEFT (1) or CAUSAL_BOTTOM_RIGHT (2)");
    a.mask = static_cast<Mask>(mode);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionMask(flashAttnAttentionDescriptor_t desc,
                                                          flashAttnMaskMode_t *mask) {
  return guarded("flashAttnGetAttentionMask", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(mask != nullptr, "mask (output pointer) is NULL");
    *mask = static_cast<flashAttnMaskMode_t>(a.mask);
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionWindow(flashAttnAttentionDescriptor_t desc, int64_t left,
                                                            int64_t right) {
  return guarded("flashAttnSetAttentionWindow", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (left < -1) fail(FLASHATTN_STATUS_BAD_PARAM, "window left is ", left, ": expected >= 0, or -1 for unbounded");
    if (right < -1) fail(FLASHATTN_STATUS_BAD_PARAM, "window right is ", right, ": expected >= 0, or -1 for unbounded");
    // Windows wider than any addressable sequence mean "unbounded"; clamping keeps i + seqK - seqQ - left from
    // overflowing in the kernels' 64-bit index arithmetic.
    if (left > kMaxDimOrStride) left = -1;
    if (right > kMaxDimOrStride) right = -1;
    a.windowLeft = left;
    a.windowRight = right;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionWindow(flashAttnAttentionDescriptor_t desc, int64_t *left,
                                                            int64_t *right) {
  return guarded("flashAttnGetAttentionWindow", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(left != nullptr && right != nullptr, "left or right (output pointer) is NULL");
    *left = a.windowLeft;
    *right = a.windowRight;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSoftcap(flashAttnAttentionDescriptor_t desc, float softcap) {
  return guarded("flashAttnSetAttentionSoftcap", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (!std::isfinite(softcap) || softcap < 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, "softcap is ", softcap, ": it must be finite and >= 0 (0 = off)");
    a.softcap = softcap;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSoftcap(flashAttnAttentionDescriptor_t desc, float *softcap) {
  return guarded("flashAttnGetAttentionSoftcap", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(softcap != nullptr, "softcap (output pointer) is NULL");
    *softcap = a.softcap;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionAlibiSlopes(flashAttnAttentionDescriptor_t desc,
                                                                 const float *slopes, int32_t perBatch) {
  return guarded("flashAttnSetAttentionAlibiSlopes", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (perBatch != 0 && perBatch != 1) fail(FLASHATTN_STATUS_BAD_PARAM, "perBatch is ", perBatch, ": expected 0 or 1");
    if (reinterpret_cast<uintptr_t>(slopes) % alignof(float) != 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, "slopes pointer ", static_cast<const void *>(slopes), " is not 4-byte aligned");
    a.alibiSlopes = slopes;
    a.alibiPerBatch = perBatch;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionAlibiSlopes(flashAttnAttentionDescriptor_t desc,
                                                                 const float **slopes, int32_t *perBatch) {
  return guarded("flashAttnGetAttentionAlibiSlopes", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(slopes != nullptr, "slopes (output pointer) is NULL");
    *slopes = a.alibiSlopes;
    if (perBatch) *perBatch = a.alibiPerBatch;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSinks(flashAttnAttentionDescriptor_t desc, const float *sinks) {
  return guarded("flashAttnSetAttentionSinks", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (reinterpret_cast<uintptr_t>(sinks) % alignof(float) != 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, "sinks pointer ", static_cast<const void *>(sinks), " is not 4-byte aligned");
    a.sinks = sinks;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSinks(flashAttnAttentionDescriptor_t desc, const float **sinks) {
  return guarded("flashAttnGetAttentionSinks", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(sinks != nullptr, "sinks (output pointer) is NULL");
    *sinks = a.sinks;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionSinksGradient(flashAttnAttentionDescriptor_t desc, float *dSinks) {
  return guarded("flashAttnSetAttentionSinksGradient", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (reinterpret_cast<uintptr_t>(dSinks) % alignof(float) != 0)
      fail(FLASHATTN_STATUS_BAD_PARAM, "dSinks pointer ", static_cast<const void *>(dSinks), " is not 4-byte aligned");
    a.dSinks = dSinks;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionSinksGradient(flashAttnAttentionDescriptor_t desc,
                                                                   float **dSinks) {
  return guarded("flashAttnGetAttentionSinksGradient", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(dSinks != nullptr, "dSinks (output pointer) is NULL");
    *dSinks = a.dSinks;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetAttentionDeterministic(flashAttnAttentionDescriptor_t desc,
                                                                   int32_t deterministic) {
  return guarded("flashAttnSetAttentionDeterministic", [&] {
    flashAttnAttentionStruct &a = liveRef(desc, "desc");
    if (deterministic != 0 && deterministic != 1)
      fail(FLASHATTN_STATUS_BAD_PARAM, "deterministic is ", deterministic, ": expected 0 or 1");
    a.deterministic = deterministic;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetAttentionDeterministic(flashAttnAttentionDescriptor_t desc,
                                                                   int32_t *deterministic) {
  return guarded("flashAttnGetAttentionDeterministic", [&] {
    const flashAttnAttentionStruct &a = liveRef(desc, "desc");
    require(deterministic != nullptr, "deterministic (output pointer) is NULL");
    *deterministic = a.deterministic;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnCreateSeqDescriptor(flashAttnSeqDescriptor_t *desc) {
  return createDescriptor("flashAttnCreateSeqDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnDestroySeqDescriptor(flashAttnSeqDescriptor_t desc) {
  return destroyDescriptor("flashAttnDestroySeqDescriptor", desc);
}

FLASHATTN_API flashAttnStatus_t flashAttnSetSeqRagged(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                      const int32_t *cuSeqlensQ, const int32_t *cuSeqlensK,
                                                      int64_t maxSeqlenQ, int64_t maxSeqlenK) {
  return guarded("flashAttnSetSeqRagged", [&] {
    flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (!cuSeqlensQ && !cuSeqlensK) {
      s.raggedBatch = 0;
      s.cuSeqlensQ = s.cuSeqlensK = nullptr;
      s.maxSeqlenQ = s.maxSeqlenK = 0;
      return;
    }
    // cuSeqlensK may be NULL here: whether that is valid depends on a paged cache, which may be set after this, so
    // the operation decides (a ragged Q over a paged cache takes none; ragged K and V need it).
    require(cuSeqlensQ != nullptr, "cuSeqlensQ is NULL but cuSeqlensK is not: give cuSeqlensQ (cuSeqlensK alone ",
            "may be NULL, for a paged KV cache), or both NULL to leave ragged mode");
    if (batch < 1 || batch > INT32_MAX) fail(FLASHATTN_STATUS_BAD_PARAM, "batch is ", batch, ": expected 1..2^31-1");
    if (maxSeqlenQ < 1 || maxSeqlenQ > INT32_MAX)
      fail(FLASHATTN_STATUS_BAD_PARAM, "maxSeqlenQ is ", maxSeqlenQ, ": expected 1..2^31-1");
    if (maxSeqlenK < 1 || maxSeqlenK > INT32_MAX)
      fail(FLASHATTN_STATUS_BAD_PARAM, "maxSeqlenK is ", maxSeqlenK, ": expected 1..2^31-1");
    s.raggedBatch = batch;
    s.cuSeqlensQ = cuSeqlensQ;
    s.cuSeqlensK = cuSeqlensK;
    s.maxSeqlenQ = maxSeqlenQ;
    s.maxSeqlenK = maxSeqlenK;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetSeqRagged(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                      const int32_t **cuSeqlensQ, const int32_t **cuSeqlensK,
                                                      int64_t *maxSeqlenQ, int64_t *maxSeqlenK) {
  return guarded("flashAttnGetSeqRagged", [&] {
    const flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (batch) *batch = s.raggedBatch;
    if (cuSeqlensQ) *cuSeqlensQ = s.cuSeqlensQ;
    if (cuSeqlensK) *cuSeqlensK = s.cuSeqlensK;
    if (maxSeqlenQ) *maxSeqlenQ = s.maxSeqlenQ;
    if (maxSeqlenK) *maxSeqlenK = s.maxSeqlenK;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetSeqKvLengths(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                         const int32_t *seqlensK) {
  return guarded("flashAttnSetSeqKvLengths", [&] {
    flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (seqlensK && (batch < 1 || batch > INT32_MAX))
      fail(FLASHATTN_STATUS_BAD_PARAM, "batch is ", batch, ": expected 1..2^31-1");
    s.kvLengthsBatch = seqlensK ? batch : 0;
    s.seqlensK = seqlensK;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetSeqKvLengths(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                         const int32_t **seqlensK) {
  return guarded("flashAttnGetSeqKvLengths", [&] {
    const flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (batch) *batch = s.kvLengthsBatch;
    if (seqlensK) *seqlensK = s.seqlensK;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnSetSeqPaged(flashAttnSeqDescriptor_t desc, int64_t batch,
                                                     const int32_t *blockTable, int64_t maxPagesPerSeq) {
  return guarded("flashAttnSetSeqPaged", [&] {
    flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (blockTable) {
      if (batch < 1 || batch > INT32_MAX) fail(FLASHATTN_STATUS_BAD_PARAM, "batch is ", batch, ": expected 1..2^31-1");
      if (maxPagesPerSeq < 1 || maxPagesPerSeq > INT32_MAX)
        fail(FLASHATTN_STATUS_BAD_PARAM, "maxPagesPerSeq is ", maxPagesPerSeq, ": expected 1..2^31-1");
    }
    s.pagedBatch = blockTable ? batch : 0;
    s.blockTable = blockTable;
    s.maxPagesPerSeq = blockTable ? maxPagesPerSeq : 0;
  });
}

FLASHATTN_API flashAttnStatus_t flashAttnGetSeqPaged(flashAttnSeqDescriptor_t desc, int64_t *batch,
                                                     const int32_t **blockTable, int64_t *maxPagesPerSeq) {
  return guarded("flashAttnGetSeqPaged", [&] {
    const flashAttnSeqStruct &s = liveRef(desc, "desc");
    if (batch) *batch = s.pagedBatch;
    if (blockTable) *blockTable = s.blockTable;
    if (maxPagesPerSeq) *maxPagesPerSeq = s.maxPagesPerSeq;
  });
}

}  // extern "C"
