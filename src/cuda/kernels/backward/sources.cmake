# SPDX-License-Identifier: BSD-3-Clause
# The backward family: preprocess/convert kernels with the chooser and launcher (backward.cu), and one generated main
# kernel instance per (dtype, native head dim) of the build's sets (other head dims run padded on the next larger one).
set(_fa_backward_native_dims 64 96 128 192 256)
set(_fa_backward_dims "")
foreach(_d IN LISTS FLASHATTN_HEAD_DIMS)
  if(_d IN_LIST _fa_backward_native_dims)
    list(APPEND _fa_backward_dims ${_d})
  endif()
endforeach()
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/backward.cu")
if(_fa_backward_dims AND FLASHATTN_DTYPES)
  set(_fa_backward_instances "")
  flashattn_generate_instances(_fa_backward_instances
    FAMILY backward
    TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/backward_instance.cu.in"
    HEAD_DIMS ${_fa_backward_dims})
  list(APPEND FLASHATTN_CUDA_SOURCES ${_fa_backward_instances})
endif()
