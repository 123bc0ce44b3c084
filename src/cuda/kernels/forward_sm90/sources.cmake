# SPDX-License-Identifier: BSD-3-Clause
# The Hopper forward family (cuda.fwd.wgmma): sm_90a machine code only (flashattn_add_sm90a_family in
# cmake/FlashAttnInstances.cmake), built when FLASHATTN_CUDA_ARCHITECTURES has an sm90 entry.
if(FLASHATTN_GENERATED_FORWARD_SM90_BUILT)
  flashattn_add_sm90a_family(flashattn_forward_sm90
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/forward_sm90.cu" ${FLASHATTN_GENERATED_FORWARD_SM90_SOURCES})
endif()
