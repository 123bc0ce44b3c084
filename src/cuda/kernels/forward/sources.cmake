# SPDX-License-Identifier: BSD-3-Clause
# The forward family: the chooser/launcher and one generated instance per (dtype, head dim) of the build's sets that
# is a native forward instance (other head dims run padded on the next larger one).
set(_fa_forward_native_dims 64 96 128 192 256)
set(_fa_forward_dims "")
foreach(_d IN LISTS FLASHATTN_HEAD_DIMS)
  if(_d IN_LIST _fa_forward_native_dims)
    list(APPEND _fa_forward_dims ${_d})
  endif()
endforeach()
list(APPEND FLASHATTN_CUDA_SOURCES "${CMAKE_CURRENT_LIST_DIR}/forward.cu")
if(_fa_forward_dims AND FLASHATTN_DTYPES)
  set(_fa_forward_instances "")
  flashattn_generate_instances(_fa_forward_instances
    FAMILY forward
    TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/forward_instance.cu.in"
    HEAD_DIMS ${_fa_forward_dims})
  list(APPEND FLASHATTN_CUDA_SOURCES ${_fa_forward_instances})
endif()
