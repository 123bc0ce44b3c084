#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installation checks, one CTest test per subcommand (see CMakeLists.txt here):
#   install       cmake --install the build into a fresh prefix and check the installed tree
#   pkgconfig     build and run consumer.c with `cc $(pkg-config --cflags --libs flashattn)`
#   find-package  build and run consumer.c through find_package(FlashAttn) (find_package_consumer/)
#   bench         run the installed flashattn-bench (--help and the HOST demo) from a moved copy of the prefix
# Exit 77 (skipped) when a tool the check needs is missing. The FA_* variables come from CMakeLists.txt.
set -euo pipefail

step=${1:?usage: install_test.sh install|pkgconfig|find-package|bench}
: "${FA_BUILD_DIR:?}" "${FA_PREFIX:?}" "${FA_WORK_DIR:?}" "${FA_CMAKE:?}" "${FA_CC:?}"
: "${FA_CONFIG:=}" "${FA_VERSION:?}" "${FA_SOVERSION:?}" "${FA_LIBDIR:?}" "${FA_INCLUDEDIR:?}"
: "${FA_GENERATOR:?}" "${FA_MAKE_PROGRAM:=}" "${FA_HAS_BENCH:?}" "${FA_BENCH_RUNPATH:=1}"
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
  need_file "$FA_PREFIX/share/doc/flashattn/LICENSE"
  need_file "$FA_PREFIX/share/doc/flashattn/THIRD-PARTY-NOTICES"
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
bench)
  # The installed bench starts from wherever the tree lies (RUNPATH $ORIGIN/<bin-to-lib>), so it is run from a copy
  # of the prefix in another place, with no LD_LIBRARY_PATH, and must load the library of that copy. A build for a
  # distribution package (FLASHATTN_BENCH_RUNPATH=OFF) must have no run path at all; it is run with LD_LIBRARY_PATH.
  [ "$FA_HAS_BENCH" = 1 ] || skip "flashattn-bench is not built (FLASHATTN_BUILD_BENCH=OFF)"
  moved="$FA_WORK_DIR/moved-prefix"
  rm -rf "$moved"
  mkdir -p "$FA_WORK_DIR"
  cp -a "$FA_PREFIX" "$moved"
  exe="$moved/bin/flashattn-bench"
  run_env=(env -u LD_LIBRARY_PATH)
  [ "$FA_BENCH_RUNPATH" = 1 ] || run_env=(env "LD_LIBRARY_PATH=$moved/$FA_LIBDIR")
  if command -v readelf >/dev/null; then
    dynamic=$(readelf -d "$exe")
    if [ "$FA_BENCH_RUNPATH" = 1 ]; then
      grep -q '(RUNPATH).*\$ORIGIN/' <<<"$dynamic" || die "flashattn-bench has no RUNPATH relative to \$ORIGIN"
    else
      ! grep -q '(RUNPATH)' <<<"$dynamic" || die "flashattn-bench has a RUNPATH although FLASHATTN_BENCH_RUNPATH=OFF"
    fi
    ! grep -q '(RPATH)' <<<"$dynamic" || die "flashattn-bench has a DT_RPATH (LD_LIBRARY_PATH could not override it)"
    ! grep -q 'libcudart\.so' <<<"$dynamic" || die "flashattn-bench needs libcudart.so (the runtime must be static)"
  fi
  if command -v ldd >/dev/null; then
    resolved=$("${run_env[@]}" ldd "$exe" | awk '/libflashattn\.so/ {print $3}')
    [ "$(realpath "$resolved")" = "$(realpath "$moved/$FA_LIBDIR/libflashattn.so.$FA_SOVERSION")" ] ||
      die "the moved flashattn-bench loads '$resolved', not the library beside it"
  fi
  help=$("${run_env[@]}" "$exe" --help)
  grep -q '^usage: flashattn-bench' <<<"$help" || die "flashattn-bench --help printed no usage"
  "${run_env[@]}" "$exe" --backend host
  rm -rf "$moved"
  ;;
*)
  die "unknown step $step"
  ;;
esac
