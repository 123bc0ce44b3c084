# SPDX-License-Identifier: BSD-3-Clause
# Installation of the CMake package and the pkg-config file, and the Debian packages (CPack).
#
# The library target itself, its header and the version header are installed by src/CMakeLists.txt with the
# components `runtime` (the .so.N and .so.N.M.P, flashattn-bench) and `development` (everything a consumer compiles
# and links against).
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
# a staged DESTDIR install and the Debian package (which CPack installs under /usr whatever prefix was configured).
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

# ---------------------------------------------------------------------------------------------------------------------
# CPack. `cpack -G DEB` in the build directory gives two packages:
#   libflashattn<SOVERSION>  the shared library (.so.N, .so.N.M.P) and flashattn-bench
#   libflashattn-dev         header, .so link, pkg-config and CMake files; depends on the runtime package of the
#                            same version
# Debian packages install under /usr; configure with -DCMAKE_INSTALL_PREFIX=/usr so that GNUInstallDirs picks the
# multiarch library directory (lib/x86_64-linux-gnu).
set(FLASHATTN_PACKAGE_MAINTAINER "libflashattn maintainers <maintainers@users.noreply.a-seed-4292e389.example>"
  CACHE STRING "Maintainer field of the Debian packages")
set(FLASHATTN_PACKAGE_RELEASE 1 CACHE STRING "Debian revision of the packages (the part after the '-')")

set(FLASHATTN_RUNTIME_PACKAGE "libflashattn${FLASHATTN_SOVERSION}")
set(FLASHATTN_DEV_PACKAGE "libflashattn-dev")

set(CPACK_PACKAGE_NAME "libflashattn")
set(CPACK_PACKAGE_VENDOR "libflashattn")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "${FLASHATTN_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_FILE_NAME "libflashattn-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_STRIP_FILES ON)

find_program(FLASHATTN_DPKG_DEB dpkg-deb)
mark_as_advanced(FLASHATTN_DPKG_DEB)
if(FLASHATTN_DPKG_DEB)
  set(CPACK_GENERATOR "DEB;TGZ")
else()
  set(CPACK_GENERATOR "TGZ")
endif()
set(CPACK_ARCHIVE_COMPONENT_INSTALL ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Only the two declared components are packaged, so an install rule that forgot its COMPONENT is left out rather
# than landing in a third "Unspecified" package.
set(CPACK_COMPONENTS_ALL runtime development)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE "${FLASHATTN_PACKAGE_RELEASE}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FLASHATTN_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME "${FLASHATTN_RUNTIME_PACKAGE}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION "libs")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME "${FLASHATTN_DEV_PACKAGE}")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION "libdevel")
# Headers and the .so link of one version only fit the library of that exact version.
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
  "${FLASHATTN_RUNTIME_PACKAGE} (= ${PROJECT_VERSION}-${FLASHATTN_PACKAGE_RELEASE})")
# The shlibs control file and dependencies on libc/libstdc++ need `file` and dpkg-shlibdeps (package dpkg-dev);
# CPack stops with an error when asked for them without these tools, so they are asked for only when present.
find_program(FLASHATTN_FILE_UTILITY file)
find_program(FLASHATTN_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(FLASHATTN_FILE_UTILITY FLASHATTN_DPKG_SHLIBDEPS)
if(FLASHATTN_FILE_UTILITY)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
  set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
  if(FLASHATTN_DPKG_SHLIBDEPS)
    set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
  endif()
endif()
if(FLASHATTN_DPKG_DEB AND NOT (FLASHATTN_FILE_UTILITY AND FLASHATTN_DPKG_SHLIBDEPS))
  message(STATUS "flashattn: `file` or dpkg-shlibdeps missing: the runtime .deb will not list its shared-library "
                 "dependencies")
endif()

include(CPack)

cpack_add_component(runtime
  DISPLAY_NAME "Runtime library"
  DESCRIPTION "libflashattn shared library (C ABI FlashAttention for NVIDIA GPUs) and flashattn-bench")
cpack_add_component(development
  DISPLAY_NAME "Development files"
  DESCRIPTION "libflashattn header, pkg-config file and CMake package (FlashAttn::flashattn)"
  DEPENDS runtime)
