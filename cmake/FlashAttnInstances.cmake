# SPDX-License-Identifier: BSD-3-Clause
# Kernel instances: src/cuda/generate.py holds the one list of (family, dtype, head dim) instances and writes, at
# configure time, one .cu file per instance of the build's sets, each family's X-macro list (from which its dispatch
# table and head-dim list are compiled) and instances.cmake (the generated sources per family). FLASHATTN_HEAD_DIMS /
# FLASHATTN_DTYPES / FLASHATTN_CUDA_ARCHITECTURES shrink the set for development builds.
find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(FLASHATTN_GENERATED_DIR "${PROJECT_BINARY_DIR}/generated")
set(_fa_generator "${PROJECT_SOURCE_DIR}/src/cuda/generate.py")
execute_process(
  COMMAND "${Python3_EXECUTABLE}" "${_fa_generator}" --source-dir "${PROJECT_SOURCE_DIR}/src/cuda"
          --out "${FLASHATTN_GENERATED_DIR}" --dtypes "${FLASHATTN_DTYPES}" --head-dims "${FLASHATTN_HEAD_DIMS}"
          --archs "${FLASHATTN_CUDA_ARCHITECTURES}"
  RESULT_VARIABLE _fa_generate_result)
if(NOT _fa_generate_result EQUAL 0)
  message(FATAL_ERROR "src/cuda/generate.py failed (${_fa_generate_result})")
endif()
file(GLOB _fa_instance_templates "${PROJECT_SOURCE_DIR}/src/cuda/kernels/*/*.cu.in")
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  "${_fa_generator}" ${_fa_instance_templates})
include("${FLASHATTN_GENERATED_DIR}/instances.cmake")

# flashattn_add_sm90a_family(<target> SOURCES <abs paths>)
# An architecture-specific family (wgmma, setmaxnreg) exists only as sm_90a machine code, which the library target's
# FLASHATTN_CUDA_ARCHITECTURES cannot name; so it builds in its own object library (the generator emits its instances
# only when that list has an sm90 entry), which src/CMakeLists.txt links into flashattn through
# FLASHATTN_EXTRA_OBJECT_LIBS. The family registers itself with its operation's chooser at load time.
function(flashattn_add_sm90a_family target)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(${target} OBJECT ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES OFF
    POSITION_INDEPENDENT_CODE ON
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo
    -Xcompiler=-fvisibility=hidden>)
  target_include_directories(${target} PRIVATE
    "${PROJECT_SOURCE_DIR}/src" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include"
    "${FLASHATTN_GENERATED_DIR}/include")
  target_compile_definitions(${target} PRIVATE FLASHATTN_BUILDING_LIBRARY FLASHATTN_WITH_CUDA=1)
  set(FLASHATTN_EXTRA_OBJECT_LIBS ${FLASHATTN_EXTRA_OBJECT_LIBS} ${target} PARENT_SCOPE)
endfunction()
