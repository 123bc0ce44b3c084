# SPDX-License-Identifier: BSD-3-Clause
# Split-KV decode (cuda.decode): the planner/launcher, the separate merge kernel and the generated instances (a
# problem's head dim, any multiple of 8, runs on the narrowest instance at least as wide, with zero-filled columns).
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/decode.cu" "${CMAKE_CURRENT_LIST_DIR}/decode_merge.cu"
  ${FLASHATTN_GENERATED_DECODE_SOURCES})
