#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installation checks, one CTest test per subcommand (see CMakeLists.txt here):
#   install       cmake --install the build into a fresh prefix and check the installed tree
#   pkgconfig     build and run consumer.c with `cc $(pkg-config --cflags --libs flashattn)`
#   find-package  build and run consumer.c through find_package(FlashAttn) (find_package_consumer/)
#   deb           cpack -G DEB, check package names, contents and dependencies, and build consumer.c against the
#                 unpacked packages
# Exit 77 (skipped) when a tool the check needs is missing. The FA_* variables come from CMakeLists.txt.
set -euo pipefail

step=${1:?usage: install_test.sh install|pkgconfig|find-package|deb}
: "${FA_BUILD_DIR:?}" "${FA_PREFIX:?}" "${FA_WORK_DIR:?}" "${FA_CMAKE:?}" "${FA_CPACK:?}" "${FA_CC:?}"
: "${FA_CONFIG:=}" "${FA_VERSION:?}" "${FA_SOVERSION:?}" "${FA_LIBDIR:?}" "${FA_INCLUDEDIR:?}"
: "${FA_GENERATOR:?}" "${FA_MAKE_PROGRAM:=}" "${FA_HAS_BENCH:?}"
here=$(cd "$(dirname "$0")" && pwd)
config_args=()
[ -n "$FA_CONFIG" ] && config_args=(--config "$FA_CONFIG")

die() { echo "FAILED: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
need_file() { [ -e "$1" ] || [ -L "$1" ] || die "missing $1"; }

# The consumer must load the installed library, not the build tree's or one installed on the system.
check_loads_from() {
  local exe=$1 libdir=$2 resolved
  command -v ldd >/dev/null || return 0
  resolved=$(LD_LIBRARY_PATH="$libdir" ldd "$exe" | awk '/libflashattn\.so/ {print $3}')
  [ -n "$resolved" ] || die "$exe does not link libflashattn"
  [ "$(realpath "$resolved")" = "$(realpath "$libdir/libflashattn.so.$FA_SOVERSION")" ] ||
    die "$exe loads $resolved instead of $libdir/libflashattn.so.$FA_SOVERSION"
}

# Builds consumer.c with the flags pkg-config gives for the tree whose .pc directory is $1, and runs it.
build_with_pkgconfig() {
  local pcdir=$1 root=$2 out=$3 cflags libs includedir
  [ "$(PKG_CONFIG_PATH="$pcdir" pkg-config --modversion flashattn)" = "$FA_VERSION" ] ||
    die "pkg-config --modversion flashattn is not $FA_VERSION"
  cflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags flashattn)
  libs=$(PKG_CONFIG_PATH="$pcdir" pkg-config --libs flashattn)
  echo "pkg-config flags: $cflags $libs"
  includedir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=includedir flashattn)
  [ "$(realpath "$includedir")" = "$(realpath "$root/$FA_INCLUDEDIR")" ] ||
    die "pkg-config includedir $includedir is not $root/$FA_INCLUDEDIR"
  # shellcheck disable=SC2086  # the flags are a word list
  "$FA_CC" -std=c99 -Wall -Wextra -o "$out" "$here/consumer.c" $cflags $libs -lm
  check_loads_from "$out" "$root/$FA_LIBDIR"
  LD_LIBRARY_PATH="$root/$FA_LIBDIR" "$out"
}

case "$step" in
install)
  rm -rf "$FA_PREFIX"
  "$FA_CMAKE" --install "$FA_BUILD_DIR" --prefix "$FA_PREFIX" "${config_args[@]}"
  lib="$FA_PREFIX/$FA_LIBDIR"
  for f in "$lib/libflashattn.so" "$lib/libflashattn.so.$FA_SOVERSION" "$lib/libflashattn.so.$FA_VERSION" \
           "$FA_PREFIX/$FA_INCLUDEDIR/flashattn/flashattn.h" "$FA_PREFIX/$FA_INCLUDEDIR/flashattn/flashattn_version.h" \
           "$lib/pkgconfig/flashattn.pc" "$lib/cmake/FlashAttn/FlashAttnConfig.cmake" \
           "$lib/cmake/FlashAttn/FlashAttnConfigVersion.cmake" "$lib/cmake/FlashAttn/FlashAttnTargets.cmake"; do
    need_file "$f"
  done
  [ "$(readlink "$lib/libflashattn.so")" = "libflashattn.so.$FA_SOVERSION" ] || die "libflashattn.so does not link to .so.$FA_SOVERSION"
  [ "$(readlink "$lib/libflashattn.so.$FA_SOVERSION")" = "libflashattn.so.$FA_VERSION" ] ||
    die "libflashattn.so.$FA_SOVERSION does not link to .so.$FA_VERSION"
  if [ "$FA_HAS_BENCH" = 1 ]; then need_file "$FA_PREFIX/bin/flashattn-bench"; fi
  # The installed files must not point back into the build or source tree.
  if grep -rl -F "$FA_BUILD_DIR" "$FA_PREFIX/$FA_INCLUDEDIR" "$lib/pkgconfig" "$lib/cmake"; then
    die "installed files above mention the build tree $FA_BUILD_DIR"
  fi
  if command -v readelf >/dev/null && readelf -d "$lib/libflashattn.so.$FA_VERSION" | grep -E 'R(UN)?PATH'; then
    die "the installed library keeps a run path"
  fi
  echo "installed into $FA_PREFIX"
  ;;
pkgconfig)
  command -v pkg-config >/dev/null || skip "pkg-config not found (install pkg-config)"
  mkdir -p "$FA_WORK_DIR"
  build_with_pkgconfig "$FA_PREFIX/$FA_LIBDIR/pkgconfig" "$FA_PREFIX" "$FA_WORK_DIR/consumer_pkgconfig"
  ;;
find-package)
  work="$FA_WORK_DIR/find_package"
  rm -rf "$work"
  generator_args=(-G "$FA_GENERATOR")
  [ -n "$FA_MAKE_PROGRAM" ] && generator_args+=("-DCMAKE_MAKE_PROGRAM=$FA_MAKE_PROGRAM")
  "$FA_CMAKE" -S "$here/find_package_consumer" -B "$work" "${generator_args[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$FA_CC" -DCMAKE_PREFIX_PATH="$FA_PREFIX" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
    -DFLASHATTN_EXPECTED_VERSION="$FA_VERSION" -DFLASHATTN_EXPECTED_PREFIX="$FA_PREFIX"
  "$FA_CMAKE" --build "$work" --config Release
  exe="$work/consumer"
  [ -x "$exe" ] || exe="$work/Release/consumer"
  check_loads_from "$exe" "$FA_PREFIX/$FA_LIBDIR"
  # No LD_LIBRARY_PATH: CMake's build run path to the imported library must be enough.
  "$exe"
  ;;
deb)
  command -v dpkg-deb >/dev/null || skip "dpkg-deb not found (install dpkg)"
  [ -f "$FA_BUILD_DIR/CPackConfig.cmake" ] || die "no CPackConfig.cmake in $FA_BUILD_DIR"
  work="$FA_WORK_DIR/deb"
  rm -rf "$work"
  mkdir -p "$work"
  cpack_config=()
  [ -n "$FA_CONFIG" ] && cpack_config=(-C "$FA_CONFIG")
  "$FA_CPACK" --config "$FA_BUILD_DIR/CPackConfig.cmake" -G DEB -B "$work" "${cpack_config[@]}"
  # The Debian revision is a cache setting of cmake/FlashAttnPackaging.cmake; CPack's own configuration has it.
  release=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_RELEASE "\(.*\)")$/\1/p' "$FA_BUILD_DIR/CPackConfig.cmake")
  [ -n "$release" ] || die "CPackConfig.cmake sets no CPACK_DEBIAN_PACKAGE_RELEASE"
  arch=$(dpkg --print-architecture)
  runtime_pkg="libflashattn$FA_SOVERSION"
  full_version="$FA_VERSION-$release"
  runtime_deb="$work/${runtime_pkg}_${full_version}_${arch}.deb"
  dev_deb="$work/libflashattn-dev_${full_version}_${arch}.deb"
  echo "packages:"; (cd "$work" && ls -1 ./*.deb)
  [ -f "$runtime_deb" ] || die "no $runtime_deb"
  [ -f "$dev_deb" ] || die "no $dev_deb"
  [ "$(find "$work" -maxdepth 1 -name '*.deb' | wc -l)" -eq 2 ] || die "expected exactly two .deb files"

  runtime_files=$(dpkg-deb -c "$runtime_deb")
  dev_files=$(dpkg-deb -c "$dev_deb")
  echo "$runtime_pkg:"; echo "$runtime_files"
  echo "libflashattn-dev:"; echo "$dev_files"
  has() { grep -qE "$2" <<<"$1"; }
  has "$runtime_files" "/libflashattn\.so\.$FA_SOVERSION -> libflashattn\.so\.$FA_VERSION\$" ||
    die "$runtime_pkg lacks the libflashattn.so.$FA_SOVERSION link"
  has "$runtime_files" "/libflashattn\.so\.$FA_VERSION\$" || die "$runtime_pkg lacks libflashattn.so.$FA_VERSION"
  ! has "$runtime_files" "/libflashattn\.so( |\$)" || die "$runtime_pkg holds the development link libflashattn.so"
  ! has "$runtime_files" "/include/" || die "$runtime_pkg holds headers"
  if [ "$FA_HAS_BENCH" = 1 ]; then
    has "$runtime_files" "/usr/bin/flashattn-bench\$" || die "$runtime_pkg lacks flashattn-bench"
  fi
  for pattern in "/usr/include/flashattn/flashattn\.h\$" "/usr/include/flashattn/flashattn_version\.h\$" \
                 "/libflashattn\.so -> libflashattn\.so\.$FA_SOVERSION\$" "/pkgconfig/flashattn\.pc\$" \
                 "/cmake/FlashAttn/FlashAttnConfig\.cmake\$" "/cmake/FlashAttn/FlashAttnConfigVersion\.cmake\$" \
                 "/cmake/FlashAttn/FlashAttnTargets\.cmake\$"; do
    has "$dev_files" "$pattern" || die "libflashattn-dev lacks $pattern"
  done
  ! has "$dev_files" "/libflashattn\.so\.$FA_VERSION\$" || die "libflashattn-dev holds the runtime library"

  [ "$(dpkg-deb -f "$runtime_deb" Package)" = "$runtime_pkg" ] || die "runtime package is not named $runtime_pkg"
  depends=$(dpkg-deb -f "$dev_deb" Depends)
  echo "libflashattn-dev Depends: $depends"
  grep -qF "$runtime_pkg (= $full_version)" <<<"$depends" || die "libflashattn-dev does not depend on $runtime_pkg (= $full_version)"
  echo "$runtime_pkg Depends: $(dpkg-deb -f "$runtime_deb" Depends)"

  # The packaged files work as installed: unpack both packages into one root and build the consumer against it.
  if command -v pkg-config >/dev/null; then
    root="$work/root"
    dpkg-deb -x "$runtime_deb" "$root"
    dpkg-deb -x "$dev_deb" "$root"
    pcfile=$(find "$root" -name flashattn.pc)
    [ -n "$pcfile" ] || die "no flashattn.pc in the packages"
    pkg_libdir=$(dirname "$(dirname "$pcfile")")
    FA_LIBDIR=${pkg_libdir#"$root/usr/"} FA_INCLUDEDIR=include \
      build_with_pkgconfig "$(dirname "$pcfile")" "$root/usr" "$work/consumer_deb"
  else
    echo "pkg-config not found: the unpacked packages were not built against"
  fi
  ;;
*)
  die "unknown step $step"
  ;;
esac
