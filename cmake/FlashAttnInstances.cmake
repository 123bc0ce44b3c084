# SPDX-License-Identifier: BSD-3-Clause
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

# flashattn_add_sm90a_family(<target> SOURCES <abs paths> HEAD_DIMS <dims served> ROUTE_DEFINITION <name>
#                            [FAMILY <name> INSTANCE_TEMPLATE <file.cu.in>])
# An architecture-specific family (wgmma, setmaxnreg) exists only as sm_90a machine code, which the library target's
# FLASHATTN_CUDA_ARCHITECTURES cannot name; so it builds in its own object library, and only when that list has an
# sm90 entry and the build keeps one of its head dims and FP16/BF16. The object library's INTERFACE definition
# <ROUTE_DEFINITION>=1 tells the portable chooser to route sm90 problems to it, and its name is appended to
# FLASHATTN_EXTRA_OBJECT_LIBS, which src/CMakeLists.txt links into flashattn. With INSTANCE_TEMPLATE, one instance file
# per (dtype, head dim) is generated as flashattn_generate_instances does.
function(flashattn_add_sm90a_family target)
  cmake_parse_arguments(ARG "" "ROUTE_DEFINITION;FAMILY;INSTANCE_TEMPLATE" "SOURCES;HEAD_DIMS" ${ARGN})
  set(wanted OFF)
  foreach(arch IN LISTS FLASHATTN_CUDA_ARCHITECTURES)
    if(arch MATCHES "^90")  # 90, 90-real, 90-virtual, 90a, ...
      set(wanted ON)
    endif()
  endforeach()
  set(dims "")
  foreach(d IN LISTS FLASHATTN_HEAD_DIMS)
    if(d IN_LIST ARG_HEAD_DIMS)
      list(APPEND dims ${d})
    endif()
  endforeach()
  set(dtypes "")
  foreach(t IN LISTS FLASHATTN_DTYPES)
    if(t STREQUAL "fp16" OR t STREQUAL "bf16")
      list(APPEND dtypes ${t})
    endif()
  endforeach()
  if(NOT wanted OR NOT dims OR NOT dtypes)
    return()
  endif()
  set(sources ${ARG_SOURCES})
  if(ARG_INSTANCE_TEMPLATE)
    flashattn_generate_instances(sources FAMILY ${ARG_FAMILY} TEMPLATE "${ARG_INSTANCE_TEMPLATE}"
      DTYPES ${dtypes} HEAD_DIMS ${dims})
  endif()
  add_library(${target} OBJECT ${sources})
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES OFF
    POSITION_INDEPENDENT_CODE ON
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo
    -Xcompiler=-fvisibility=hidden>)
  target_include_directories(${target} PRIVATE
    "${PROJECT_SOURCE_DIR}/src" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include")
  target_compile_definitions(${target}
    PRIVATE FLASHATTN_BUILDING_LIBRARY FLASHATTN_WITH_CUDA=1
    INTERFACE ${ARG_ROUTE_DEFINITION}=1)
  foreach(d IN LISTS dims)
    target_compile_definitions(${target} PRIVATE FLASHATTN_HAS_HEADDIM_${d}=1)
  endforeach()
  foreach(t IN LISTS dtypes)
    string(TOUPPER ${t} T)
    target_compile_definitions(${target} PRIVATE FLASHATTN_HAS_DTYPE_${T}=1)
  endforeach()
  set(FLASHATTN_EXTRA_OBJECT_LIBS ${FLASHATTN_EXTRA_OBJECT_LIBS} ${target} PARENT_SCOPE)
endfunction()
