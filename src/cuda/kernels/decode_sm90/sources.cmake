# SPDX-License-Identifier: BSD-3-Clause
# The Hopper wgmma decode (cuda.decode.wgmma, absorbed-MLA head dims): sm_90a machine code only
# (flashattn_add_sm90a_family in cmake/FlashAttnInstances.cmake), built when FLASHATTN_CUDA_ARCHITECTURES has an sm90
# entry and FLASHATTN_HEAD_DIMS has both head dims of an instance.
if(FLASHATTN_GENERATED_DECODE_SM90_BUILT)
  flashattn_add_sm90a_family(flashattn_decode_sm90
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/decode_sm90.cu" ${FLASHATTN_GENERATED_DECODE_SM90_SOURCES})
endif()
