// SPDX-License-Identifier: BSD-3-Clause
#include "raw_enum_calls.h"

flashAttnStatus_t rawCreateWithBackend(flashAttnHandle_t *handle, int32_t backend) {
  return flashAttnCreateWithBackend(handle, (flashAttnBackend_t)backend);
}

flashAttnStatus_t rawSetTensorDescriptor(flashAttnTensorDescriptor_t desc, int32_t dataType, int32_t rank,
                                         const int64_t *dims, const int64_t *strides) {
  return flashAttnSetTensorDescriptor(desc, (flashAttnDataType_t)dataType, rank, dims, strides);
}

flashAttnStatus_t rawSetAttentionMask(flashAttnAttentionDescriptor_t desc, int32_t mask) {
  return flashAttnSetAttentionMask(desc, (flashAttnMaskMode_t)mask);
}

flashAttnStatus_t rawCheckSupport(flashAttnHandle_t handle, int32_t operation, flashAttnAttentionDescriptor_t attnDesc,
                                  flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc,
                                  flashAttnTensorDescriptor_t vDesc, flashAttnTensorDescriptor_t oDesc,
                                  char *description, size_t descriptionLen) {
  return flashAttnCheckSupport(handle, (flashAttnOperation_t)operation, attnDesc, NULL, qDesc, kDesc, vDesc, oDesc,
                               description, descriptionLen, NULL);
}
