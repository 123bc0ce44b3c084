# The Hopper backward family: the wgmma main kernel exists only as sm_90a machine code, so it builds in its own object
# library (as forward_sm90 does) and only when FLASHATTN_CUDA_ARCHITECTURES has an sm90 entry. Its INTERFACE
# definition FLASHATTN_HAS_SM90A_BACKWARD tells the portable backward chooser (backward.cu) to route sm90 problems here.
set(_fa_bwd90_wanted OFF)
foreach(_a IN LISTS FLASHATTN_CUDA_ARCHITECTURES)
  if(_a MATCHES "^90")
    set(_fa_bwd90_wanted ON)
  endif()
endforeach()
set(_fa_bwd90_dims "")
foreach(_d IN LISTS FLASHATTN_HEAD_DIMS)
  # d64 stays on the portable kernel: this tile measured 0.84-1.02x FLASH there (portable 0.84-1.10x).
  if(_d MATCHES "^128$")
    list(APPEND _fa_bwd90_dims ${_d})
  endif()
endforeach()
set(_fa_bwd90_dtypes "")
foreach(_t IN LISTS FLASHATTN_DTYPES)
  if(_t STREQUAL "fp16" OR _t STREQUAL "bf16")
    list(APPEND _fa_bwd90_dtypes ${_t})
  endif()
endforeach()

if(_fa_bwd90_wanted AND _fa_bwd90_dims AND _fa_bwd90_dtypes)
  add_library(flashattn_backward_sm90 OBJECT "${CMAKE_CURRENT_LIST_DIR}/backward_sm90.cu")
  set_target_properties(flashattn_backward_sm90 PROPERTIES
    CUDA_ARCHITECTURES OFF
    POSITION_INDEPENDENT_CODE ON
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(flashattn_backward_sm90 PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo
    -Xcompiler=-fvisibility=hidden>)
  target_include_directories(flashattn_backward_sm90 PRIVATE
    "${CMAKE_CURRENT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/include")
  target_compile_definitions(flashattn_backward_sm90
    PRIVATE FLASHATTN_BUILDING_LIBRARY FLASHATTN_WITH_CUDA=1
    INTERFACE FLASHATTN_HAS_SM90A_BACKWARD=1)
  foreach(_d IN LISTS _fa_bwd90_dims)
    target_compile_definitions(flashattn_backward_sm90 PRIVATE FLASHATTN_HAS_HEADDIM_${_d}=1)
  endforeach()
  foreach(_t IN LISTS _fa_bwd90_dtypes)
    string(TOUPPER ${_t} _T)
    target_compile_definitions(flashattn_backward_sm90 PRIVATE FLASHATTN_HAS_DTYPE_${_T}=1)
  endforeach()
  list(APPEND FLASHATTN_EXTRA_OBJECT_LIBS flashattn_backward_sm90)
endif()
