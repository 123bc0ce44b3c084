# Kernel instances: one generated .cu file per (family, dtype, head dim), so that a build compiles them in parallel
# and FLASHATTN_HEAD_DIMS / FLASHATTN_DTYPES shrink the set for development builds.
#
# flashattn_generate_instances(<out-var> FAMILY <name> TEMPLATE <file.cu.in> [DTYPES fp16 bf16 fp32] [HEAD_DIMS ...])
# configures TEMPLATE once per pair with these variables:
#   @FA_DTYPE@      fp16 | bf16 | fp32          (matches flashattn::DType names)
#   @FA_DTYPE_ENUM@ flashattn::DType::FP16 ...
#   @FA_CTYPE@      __half | __nv_bfloat16 | float
#   @FA_HEADDIM@    the head dim
# and appends the generated files to <out-var>. DTYPES/HEAD_DIMS default to the build's sets.
function(flashattn_generate_instances out_var)
  cmake_parse_arguments(ARG "" "FAMILY;TEMPLATE" "DTYPES;HEAD_DIMS" ${ARGN})
  if(NOT ARG_DTYPES)
    set(ARG_DTYPES ${FLASHATTN_DTYPES})
  endif()
  if(NOT ARG_HEAD_DIMS)
    set(ARG_HEAD_DIMS ${FLASHATTN_HEAD_DIMS})
  endif()
  set(generated "")
  foreach(FA_DTYPE IN LISTS ARG_DTYPES)
    if(FA_DTYPE STREQUAL "fp16")
      set(FA_CTYPE "__half")
      set(FA_DTYPE_ENUM "flashattn::DType::FP16")
    elseif(FA_DTYPE STREQUAL "bf16")
      set(FA_CTYPE "__nv_bfloat16")
      set(FA_DTYPE_ENUM "flashattn::DType::BF16")
    elseif(FA_DTYPE STREQUAL "fp32")
      set(FA_CTYPE "float")
      set(FA_DTYPE_ENUM "flashattn::DType::FP32")
    else()
      message(FATAL_ERROR "unknown dtype ${FA_DTYPE}")
    endif()
    foreach(FA_HEADDIM IN LISTS ARG_HEAD_DIMS)
      set(file "${CMAKE_BINARY_DIR}/instances/${ARG_FAMILY}_${FA_DTYPE}_d${FA_HEADDIM}.cu")
      configure_file("${ARG_TEMPLATE}" "${file}" @ONLY)
      list(APPEND generated "${file}")
    endforeach()
  endforeach()
  set(${out_var} ${${out_var}} ${generated} PARENT_SCOPE)
endfunction()
