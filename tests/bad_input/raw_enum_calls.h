// SPDX-License-Identifier: BSD-3-Clause
/* Calls that pass enum arguments outside their enumerators, as a C or FFI caller can. The conversion from int to the
 * enum happens in C (raw_enum_calls.c), where it is defined; in C++ an enum object holding a value outside its
 * enumerators' range is undefined behaviour, so the C++ catalogue must not build one itself. */
#ifndef FLASHATTN_TESTS_RAW_ENUM_CALLS_H
#define FLASHATTN_TESTS_RAW_ENUM_CALLS_H

#include <flashattn/flashattn.h>

#ifdef __cplusplus
extern "C" {
#endif

flashAttnStatus_t rawCreateWithBackend(flashAttnHandle_t *handle, int32_t backend);
flashAttnStatus_t rawSetTensorDescriptor(flashAttnTensorDescriptor_t desc, int32_t dataType, int32_t rank,
                                         const int64_t *dims, const int64_t *strides);
flashAttnStatus_t rawSetAttentionMask(flashAttnAttentionDescriptor_t desc, int32_t mask);
flashAttnStatus_t rawCheckSupport(flashAttnHandle_t handle, int32_t operation, flashAttnAttentionDescriptor_t attnDesc,
                                  flashAttnTensorDescriptor_t qDesc, flashAttnTensorDescriptor_t kDesc,
                                  flashAttnTensorDescriptor_t vDesc, flashAttnTensorDescriptor_t oDesc,
                                  char *description, size_t descriptionLen);

#ifdef __cplusplus
}
#endif

#endif
