# SPDX-License-Identifier: BSD-3-Clause
# The Hopper backward family (cuda.bwd.wgmma): sm_90a machine code only (flashattn_add_sm90a_family in
# cmake/FlashAttnInstances.cmake). d64 walks 128-row query blocks, d128 64-row ones (backward_sm90_kernel.cuh); d256
# has its own kernel (64 keys per CTA, dK/dV split by columns: backward_sm90_d256_kernel.cuh). NOTES.md.
if(FLASHATTN_GENERATED_BACKWARD_SM90_BUILT)
  flashattn_add_sm90a_family(flashattn_backward_sm90
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/backward_sm90.cu" ${FLASHATTN_GENERATED_BACKWARD_SM90_SOURCES})
endif()
