// SPDX-License-Identifier: BSD-3-Clause
// Includes nothing but the public header, compiled as strict C++11: proves the header is self-contained C++ and that
// its functions keep C linkage (a mangled name would not link against libflashattn).
#include <flashattn/flashattn.h>

static_assert(sizeof(flashAttnStatus_t) == sizeof(int), "enums cross the ABI as int");
static_assert(FLASHATTN_STATUS_INTERNAL_ERROR == 9 && FLASHATTN_BACKEND_HOST == 2 && FLASHATTN_DATA_FP32 == 2 &&
                  FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT == 2 && FLASHATTN_OP_MERGE_STATES == 3,
              "enum values are part of the ABI and never renumbered");

int main() {
  if (flashAttnGetVersion() != FLASHATTN_VERSION) return 1;
  flashAttnHandle_t handle = nullptr;
  if (flashAttnCreateWithBackend(&handle, FLASHATTN_BACKEND_HOST) != FLASHATTN_STATUS_SUCCESS) return 2;
  struct CUstream_st *stream = nullptr;
  const bool defaultStream = flashAttnGetStream(handle, &stream) == FLASHATTN_STATUS_SUCCESS && stream == nullptr;
  if (flashAttnDestroy(handle) != FLASHATTN_STATUS_SUCCESS || !defaultStream) return 3;
  return 0;
}
