# SPDX-License-Identifier: BSD-3-Clause
# The portable backward families (cuda.bwd.mma_sync, cuda.bwd.ffma) and the pipeline every backward family shares.
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/backward.cu" ${FLASHATTN_GENERATED_BACKWARD_SOURCES})
