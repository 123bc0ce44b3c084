// SPDX-License-Identifier: BSD-3-Clause
/* Includes nothing but the public header, compiled as strict C99: proves the header is self-contained C. */
#include <flashattn/flashattn.h>

#if defined(CUDART_VERSION) || defined(CUDA_VERSION) || defined(__CUDA_RUNTIME_H__) || defined(__cuda_cuda_h__)
#error "flashattn.h pulled in a CUDA header"
#endif

int32_t headerOnlyTranslationUnitVersion(void);

int32_t headerOnlyTranslationUnitVersion(void) { return flashAttnGetVersion(); }
