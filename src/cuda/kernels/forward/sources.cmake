# SPDX-License-Identifier: BSD-3-Clause
# The portable forward families (cuda.fwd.mma_sync, cuda.fwd.ffma): the plan/launch file and the generated instances.
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/forward.cu" ${FLASHATTN_GENERATED_FORWARD_SOURCES})
