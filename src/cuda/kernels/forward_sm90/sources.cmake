# The Hopper forward family: wgmma/setmaxnreg kernels that exist only as sm_90a machine code. They build in their own
# object library (the library target compiles its CUDA sources for FLASHATTN_CUDA_ARCHITECTURES, which cannot name
# sm_90a) and only when that list has an sm90 entry. The object library's INTERFACE definition FLASHATTN_HAS_SM90A
# tells the portable chooser (forward.cu) to route sm90 problems here; src/CMakeLists.txt links every library named
# in FLASHATTN_EXTRA_OBJECT_LIBS into flashattn.
set(_fa_sm90_wanted OFF)
foreach(_a IN LISTS FLASHATTN_CUDA_ARCHITECTURES)
  if(_a MATCHES "^90")  # 90, 90-real, 90-virtual, 90a, ...
    set(_fa_sm90_wanted ON)
  endif()
endforeach()
set(_fa_sm90_dims "")
foreach(_d IN LISTS FLASHATTN_HEAD_DIMS)
  if(_d MATCHES "^(64|128|256)$")
    list(APPEND _fa_sm90_dims ${_d})
  endif()
endforeach()
set(_fa_sm90_dtypes "")
foreach(_t IN LISTS FLASHATTN_DTYPES)
  if(_t STREQUAL "fp16" OR _t STREQUAL "bf16")
    list(APPEND _fa_sm90_dtypes ${_t})
  endif()
endforeach()

if(_fa_sm90_wanted AND _fa_sm90_dims AND _fa_sm90_dtypes)
  set(_fa_sm90_instances "")
  flashattn_generate_instances(_fa_sm90_instances
    FAMILY forward_sm90
    TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/forward_sm90_instance.cu.in"
    DTYPES ${_fa_sm90_dtypes}
    HEAD_DIMS ${_fa_sm90_dims})
  add_library(flashattn_forward_sm90 OBJECT "${CMAKE_CURRENT_LIST_DIR}/forward_sm90.cu" ${_fa_sm90_instances})
  set_target_properties(flashattn_forward_sm90 PROPERTIES
    CUDA_ARCHITECTURES OFF
    POSITION_INDEPENDENT_CODE ON
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(flashattn_forward_sm90 PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo
    -Xcompiler=-fvisibility=hidden>)
  target_include_directories(flashattn_forward_sm90 PRIVATE
    "${CMAKE_CURRENT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include")
  target_compile_definitions(flashattn_forward_sm90
    PRIVATE FLASHATTN_BUILDING_LIBRARY FLASHATTN_WITH_CUDA=1
    INTERFACE FLASHATTN_HAS_SM90A=1)
  foreach(_d IN LISTS _fa_sm90_dims)
    target_compile_definitions(flashattn_forward_sm90 PRIVATE FLASHATTN_HAS_HEADDIM_${_d}=1)
  endforeach()
  foreach(_t IN LISTS _fa_sm90_dtypes)
    string(TOUPPER ${_t} _T)
    target_compile_definitions(flashattn_forward_sm90 PRIVATE FLASHATTN_HAS_DTYPE_${_T}=1)
  endforeach()
  list(APPEND FLASHATTN_EXTRA_OBJECT_LIBS flashattn_forward_sm90)
endif()
