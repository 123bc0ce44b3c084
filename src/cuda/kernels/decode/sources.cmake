# SPDX-License-Identifier: BSD-3-Clause
# Split-KV decode: the chooser/launcher plus one generated kernel instance per (dtype, head dim) of the build's sets
# that is a decode candidate (a multiple of 16, the mma k-step, listed in decode.cu's instance table). A problem's
# head dim (any multiple of 8) runs on the narrowest instance at least as wide, with zero-filled columns.
set(_fa_decode_candidates 32 64 80 96 128 160 192 224 256)
set(_fa_decode_dims "")
foreach(_d IN LISTS FLASHATTN_HEAD_DIMS)
  if(_d IN_LIST _fa_decode_candidates)
    list(APPEND _fa_decode_dims ${_d})
  endif()
endforeach()
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/decode.cu" "${CMAKE_CURRENT_LIST_DIR}/decode_merge.cu")
if(_fa_decode_dims AND FLASHATTN_DTYPES)
  set(_fa_decode_instances "")
  flashattn_generate_instances(_fa_decode_instances
    FAMILY decode
    TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/decode_instance.cu.in"
    HEAD_DIMS ${_fa_decode_dims})
  list(APPEND FLASHATTN_CUDA_SOURCES ${_fa_decode_instances})
endif()
