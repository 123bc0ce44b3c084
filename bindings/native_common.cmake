# SPDX-License-Identifier: BSD-3-Clause
# What the Rust, Go and Julia binding tests share (each of their CMakeLists.txt includes this file):
#
# - a pkg-config file for the build tree (bindings/pkgconfig/flashattn.pc in the build directory), so that cargo's
#   build script and cgo's `#cgo pkg-config: flashattn` link the library just built, with its header and version
#   header, exactly as they would an installed one;
# - FLASHATTN_NATIVE_SPEC: the API spec generated from the header being built, by the fixture test
#   bindings_native_spec. The binding checks compare against it rather than the checked-in JSON, so a header edit
#   that a binding misses fails the binding's own check, not only the spec's staleness test;
# - FLASHATTN_NATIVE_TEST_ENV: the environment of every binding test (library path, pkg-config path, spec, vectors).
#
# The variables are set in every including directory (each binding folder has its own scope); the file and the
# fixture test are made once.
set(FLASHATTN_NATIVE_PC_DIR "${PROJECT_BINARY_DIR}/bindings/pkgconfig")
set(FLASHATTN_NATIVE_SPEC "${PROJECT_BINARY_DIR}/bindings/flashattn_api.json")
set(FLASHATTN_NATIVE_TEST_ENV
  "LD_LIBRARY_PATH=$<TARGET_FILE_DIR:flashattn>"
  "PKG_CONFIG_PATH=${FLASHATTN_NATIVE_PC_DIR}"
  "FLASHATTN_SPEC_JSON=${FLASHATTN_NATIVE_SPEC}"
  "FLASHATTN_TESTDATA=${CMAKE_CURRENT_LIST_DIR}/testdata")

get_property(flashattn_native_common_done GLOBAL PROPERTY FLASHATTN_NATIVE_COMMON_DONE)
if(flashattn_native_common_done)
  return()
endif()
set_property(GLOBAL PROPERTY FLASHATTN_NATIVE_COMMON_DONE TRUE)

file(GENERATE OUTPUT "${FLASHATTN_NATIVE_PC_DIR}/flashattn.pc" CONTENT "\
libdir=$<TARGET_FILE_DIR:flashattn>
includedir=${PROJECT_SOURCE_DIR}/include
generated_includedir=${PROJECT_BINARY_DIR}/include

Name: flashattn
Description: ${PROJECT_DESCRIPTION} (build tree, for the binding tests)
Version: ${PROJECT_VERSION}
Libs: -L\${libdir} -lflashattn
Cflags: -I\${includedir} -I\${generated_includedir}
")

if(FLASHATTN_PYTHON3)
  add_test(NAME bindings_native_spec
    COMMAND "${FLASHATTN_PYTHON3}" "${CMAKE_CURRENT_LIST_DIR}/spec/gen_api.py"
      --header "${PROJECT_SOURCE_DIR}/include/flashattn/flashattn.h"
      --cmake "${PROJECT_SOURCE_DIR}/CMakeLists.txt"
      --output "${FLASHATTN_NATIVE_SPEC}")
else()
  add_test(NAME bindings_native_spec COMMAND sh -c "echo 'python3 not found'; exit 77")
endif()
set_tests_properties(bindings_native_spec PROPERTIES
  LABELS bindings FIXTURES_SETUP flashattn_native_spec SKIP_RETURN_CODE 77 TIMEOUT 60)

# flashattn_native_skip(NAME REASON): a test that reports skipped (77) when a binding's tool is missing, so that its
# absence shows in ctest's summary instead of the test silently not existing.
function(flashattn_native_skip name reason)
  add_test(NAME ${name} COMMAND sh -c "echo 'SKIPPED: ${reason}'; exit 77")
  set_tests_properties(${name} PROPERTIES LABELS bindings SKIP_RETURN_CODE 77)
endfunction()

# flashattn_native_readme_test(NAME README EXAMPLE): the README shows the example file verbatim, as one fenced block.
function(flashattn_native_readme_test name readme example)
  if(FLASHATTN_PYTHON3)
    add_test(NAME ${name} COMMAND "${FLASHATTN_PYTHON3}" "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/check_readme_example.py"
      "${readme}" "${example}")
    set_tests_properties(${name} PROPERTIES LABELS bindings TIMEOUT 60)
  else()
    flashattn_native_skip(${name} "python3 not found")
  endif()
endfunction()
