# SPDX-License-Identifier: BSD-3-Clause
# Staging copies (staging.hpp): an object library so that the GPU test can call the component directly; its objects
# are linked into flashattn through FLASHATTN_EXTRA_OBJECT_LIBS, with the portable kernels' architectures.
add_library(flashattn_staging OBJECT
  "${CMAKE_CURRENT_LIST_DIR}/staging.cu"
  "${CMAKE_CURRENT_LIST_DIR}/staging_plan.cpp")
set_target_properties(flashattn_staging PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CUDA_VISIBILITY_PRESET hidden
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_include_directories(flashattn_staging PUBLIC "${PROJECT_SOURCE_DIR}/src" "${PROJECT_SOURCE_DIR}/include"
  "${PROJECT_BINARY_DIR}/include")
target_compile_options(flashattn_staging PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xcompiler=-fvisibility=hidden>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang>>:-Wall -Wextra>)
list(APPEND FLASHATTN_EXTRA_OBJECT_LIBS flashattn_staging)
