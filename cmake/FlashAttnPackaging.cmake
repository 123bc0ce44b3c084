# SPDX-License-Identifier: BSD-3-Clause
# Installation of the CMake package, the pkg-config file and the license texts. The Debian packages are built from
# the same install rules by debian/rules (dpkg-buildpackage), not here.
#
# The library target itself, its header and the version header are installed by src/CMakeLists.txt with the
# components `runtime` (the .so.N and .so.N.M.P, flashattn-bench) and `development` (everything a consumer compiles
# and links against); the API reference (docs/CMakeLists.txt) is the component `doc`.
include(CMakePackageConfigHelpers)

set(FLASHATTN_CMAKE_PACKAGE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/FlashAttn")

install(EXPORT FlashAttnTargets
  NAMESPACE FlashAttn::
  FILE FlashAttnTargets.cmake
  DESTINATION "${FLASHATTN_CMAKE_PACKAGE_DIR}"
  COMPONENT development)

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/FlashAttnConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/FlashAttnConfig.cmake"
  INSTALL_DESTINATION "${FLASHATTN_CMAKE_PACKAGE_DIR}")
# The major version moves with the SOVERSION (an ABI break), so any version of the same major serves a consumer.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/FlashAttnConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
    "${PROJECT_BINARY_DIR}/FlashAttnConfig.cmake"
    "${PROJECT_BINARY_DIR}/FlashAttnConfigVersion.cmake"
  DESTINATION "${FLASHATTN_CMAKE_PACKAGE_DIR}"
  COMPONENT development)

# pkg-config: the prefix is derived from where the .pc file lies, so one file serves `cmake --install --prefix`,
# a staged DESTDIR install and the Debian package.
# Absolute install directories cannot be made relative and are written as they are.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FLASHATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(FLASHATTN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(FLASHATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  # One ".." per component of "<libdir>/pkgconfig" (two for lib/pkgconfig, three for lib/x86_64-linux-gnu/pkgconfig).
  set(_fa_pc_up "")
  string(REPLACE "/" ";" _fa_pc_parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  foreach(_fa_part IN LISTS _fa_pc_parts)
    if(NOT _fa_part STREQUAL "" AND NOT _fa_part STREQUAL ".")
      string(APPEND _fa_pc_up "/..")
    endif()
  endforeach()
  set(FLASHATTN_PC_PREFIX "\${pcfiledir}${_fa_pc_up}")
  set(FLASHATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(FLASHATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${PROJECT_SOURCE_DIR}/pkgconfig/flashattn.pc.in" "${PROJECT_BINARY_DIR}/pkgconfig/flashattn.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/flashattn.pc"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
  COMPONENT development)

# The CUDA runtime is linked statically into the library and flashattn-bench: its redistribution terms travel with
# every installed tree (THIRD-PARTY-NOTICES says what is redistributed).
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" "${PROJECT_SOURCE_DIR}/THIRD-PARTY-NOTICES"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}"
  COMPONENT runtime)
