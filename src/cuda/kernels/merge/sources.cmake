# SPDX-License-Identifier: BSD-3-Clause
# Merge of partial attention states (flashAttnMergeStates, and the last step of a split-KV decode).
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/merge.cu")
