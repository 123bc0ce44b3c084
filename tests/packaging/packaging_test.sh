#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages, one CTest test per step (tests/packaging/CMakeLists.txt):
#   build     copy the tracked sources into the build tree and run dpkg-buildpackage -us -uc -b there (the .deb
#             files land beside the copy, never outside the build tree) with the reduced CUDA instance set
#   contents  the files, control fields, symbols, triggers and Installed-Size of the four packages
#   lintian   lintian --pedantic over the build: no error and no warning (its whole output is printed)
#   install   dpkg -i the packages (root only), build a C consumer through pkg-config and a CMake project through
#             find_package(FlashAttn) against them, run the installed flashattn-bench, then remove the packages
# Exit 77 (skipped) when a tool a step needs is missing. The FA_* variables come from CMakeLists.txt.
set -euo pipefail

step=${1:?usage: packaging_test.sh build|contents|lintian|install}
: "${FA_SOURCE_DIR:?}" "${FA_WORK_DIR:?}" "${FA_VERSION:?}" "${FA_SOVERSION:?}" "${FA_CC:?}" "${FA_CMAKE:?}"

die() { echo "FAILED: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
need() { command -v "$1" >/dev/null || skip "$1 not found (install $2)"; }

packages=(libflashattn"$FA_SOVERSION" libflashattn-dev libflashattn-doc flashattn-bench)
version="$FA_VERSION-1"
# The revision is the one of debian/changelog; a package build of another revision would leave other file names.
changelog_version=$(sed -n '1s/^libflashattn (\([^)]*\)).*/\1/p' "$FA_SOURCE_DIR/debian/changelog")
[ "$changelog_version" = "$version" ] || version=$changelog_version
arch=$(dpkg --print-architecture 2>/dev/null || echo unknown)
deb_of() {
  local package=$1 a=$arch
  [ "$package" = libflashattn-doc ] && a=all
  echo "$FA_WORK_DIR/${package}_${version}_${a}.deb"
}
skip_marker="$FA_WORK_DIR/build-skipped"

# The later steps have nothing to look at when the build was skipped, and say why.
need_debs() {
  [ ! -f "$skip_marker" ] || skip "no packages: $(cat "$skip_marker")"
  for package in "${packages[@]}"; do
    [ -f "$(deb_of "$package")" ] || die "$(deb_of "$package") is missing (did packaging_build pass?)"
  done
}

case "$step" in
build)
  rm -rf "$FA_WORK_DIR"
  mkdir -p "$FA_WORK_DIR"
  for tool in dpkg-buildpackage:dpkg-dev dh:debhelper git:git; do
    if ! command -v "${tool%%:*}" >/dev/null; then
      echo "${tool%%:*} not found (install ${tool#*:})" >"$skip_marker"
      skip "$(cat "$skip_marker")"
    fi
  done
  # A copy of the tree inside another checkout is no checkout of its own (git would answer for the enclosing one).
  toplevel=$(git -C "$FA_SOURCE_DIR" rev-parse --show-toplevel 2>/dev/null || true)
  if [ -z "$toplevel" ] || [ "$(realpath "$toplevel")" != "$(realpath "$FA_SOURCE_DIR")" ]; then
    echo "$FA_SOURCE_DIR is not a git checkout: the tracked sources cannot be told from build output" >"$skip_marker"
    skip "$(cat "$skip_marker")"
  fi
  # The working tree's sources, uncommitted edits and new files included (everything git does not ignore), so the
  # packages are those of what is tested; build directories and other ignored output stay behind.
  src="$FA_WORK_DIR/libflashattn-$FA_VERSION"
  mkdir -p "$src"
  (cd "$FA_SOURCE_DIR" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' file; do [ -e "$file" ] && printf '%s\0' "$file"; done |
    xargs -0 cp -P --parents -t "$src")
  jobs=$(nproc 2>/dev/null || echo 2)
  # nocheck: the HOST tests the package build would run (dh_auto_test) already run in this ctest run, from the same
  # sources; building them twice would double their share of CI time. The default package build runs them.
  echo "dpkg-buildpackage -us -uc -b in $src (DEB_BUILD_OPTIONS: nocheck flashattn-dev-instances parallel=$jobs)"
  start=$(date +%s)
  (cd "$src" && DEB_BUILD_OPTIONS="nocheck flashattn-dev-instances parallel=$jobs" DEB_BUILD_PROFILES=nocheck \
    dpkg-buildpackage -us -uc -b) >"$FA_WORK_DIR/build.log" 2>&1 || {
    tail -n 80 "$FA_WORK_DIR/build.log"
    die "dpkg-buildpackage failed (whole log: $FA_WORK_DIR/build.log)"
  }
  grep -E '^(dpkg-buildpackage|dpkg-gensymbols|dpkg-shlibdeps): (warning|error)' "$FA_WORK_DIR/build.log" || true
  if grep -q 'no CUDA compiler found' "$FA_WORK_DIR/build.log"; then
    echo "note: nvcc not found: the packages carry the HOST backend only"
  fi
  echo "package build: $(($(date +%s) - start)) s"
  (cd "$FA_WORK_DIR" && ls -l ./*.deb ./*.changes)
  need_debs
  ;;

contents)
  need dpkg-deb dpkg
  need_debs
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
  listing() { dpkg-deb --fsys-tarfile "$(deb_of "$1")" | tar -tvf - ; }
  has() { grep -qE "$2" <<<"$1" || die "$3"; }
  field() { dpkg-deb -f "$(deb_of "$1")" "$2"; }
  for package in "${packages[@]}"; do
    echo "== $package: $(field "$package" Architecture), Multi-Arch: $(field "$package" Multi-Arch), Section: $(field "$package" Section), Installed-Size: $(field "$package" Installed-Size)"
    echo "   Depends: $(field "$package" Depends)"
    files=$(listing "$package")
    awk '$1 !~ /^d/ {print "   " $6, $7, $8}' <<<"$files"
    # Installed-Size is the sum of the file sizes in KiB (dpkg-gencontrol); CPack's was twice the truth.
    bytes=$(awk '$1 !~ /^d/ {s += $3} END {print s + 0}' <<<"$files")
    size=$(field "$package" Installed-Size)
    [ "$size" -ge $((bytes / 1024)) ] && [ "$size" -le $((bytes / 1024 + bytes / 10240 + 64)) ] ||
      die "$package: Installed-Size $size KiB for $bytes bytes of files"
    has "$files" "\./usr/share/doc/$package/copyright\$" "$package has no copyright file"
  done

  lib="libflashattn$FA_SOVERSION"
  files=$(listing "$lib")
  has "$files" "\./usr/lib/$multiarch/libflashattn\.so\.$FA_VERSION\$" "$lib lacks libflashattn.so.$FA_VERSION"
  has "$files" "\./usr/lib/$multiarch/libflashattn\.so\.$FA_SOVERSION -> libflashattn\.so\.$FA_VERSION\$" \
    "$lib lacks the SONAME link"
  ! grep -qE 'libflashattn\.so -> |/include/|/bin/' <<<"$files" || die "$lib holds development files or programs"
  has "$files" "/usr/share/doc/$lib/THIRD-PARTY-NOTICES\$" "$lib lacks THIRD-PARTY-NOTICES"
  [ "$(field "$lib" Multi-Arch)" = same ] || die "$lib is not Multi-Arch: same"
  control=$(dpkg-deb --ctrl-tarfile "$(deb_of "$lib")" | tar -tf -)
  # ldconfig runs through dpkg's trigger, never from a maintainer script.
  grep -qx './triggers' <<<"$control" || die "$lib has no triggers file"
  dpkg-deb --ctrl-tarfile "$(deb_of "$lib")" | tar -xOf - ./triggers | grep -qx 'activate-noawait ldconfig' ||
    die "$lib does not activate the ldconfig trigger"
  ! grep -qE '^\./(postinst|postrm|preinst|prerm)$' <<<"$control" || die "$lib has maintainer scripts"
  grep -qx './symbols' <<<"$control" || die "$lib has no symbols file"
  dpkg-deb --ctrl-tarfile "$(deb_of "$lib")" | tar -xOf - ./symbols >"$FA_WORK_DIR/symbols"
  diff -u <(grep -v '^#' "$FA_SOURCE_DIR/debian/$lib.symbols") "$FA_WORK_DIR/symbols" ||
    die "the shipped symbols file differs from debian/$lib.symbols"

  files=$(listing libflashattn-dev)
  for pattern in "/usr/include/flashattn/flashattn\.h\$" "/usr/include/flashattn/flashattn_version\.h\$" \
                 "/usr/lib/$multiarch/libflashattn\.so -> libflashattn\.so\.$FA_SOVERSION\$" \
                 "/usr/lib/$multiarch/pkgconfig/flashattn\.pc\$" "/usr/lib/$multiarch/cmake/FlashAttn/FlashAttnConfig\.cmake\$"; do
    has "$files" "$pattern" "libflashattn-dev lacks $pattern"
  done
  [ "$(field libflashattn-dev Multi-Arch)" = same ] || die "libflashattn-dev is not Multi-Arch: same"
  grep -qF "$lib (= $version)" <<<"$(field libflashattn-dev Depends)" || die "libflashattn-dev does not depend on $lib (= $version)"

  files=$(listing libflashattn-doc)
  has "$files" "/usr/share/doc/libflashattn-doc/html/index\.html\$" "libflashattn-doc lacks the HTML reference"
  [ "$(field libflashattn-doc Multi-Arch)" = foreign ] || die "libflashattn-doc is not Multi-Arch: foreign"
  [ "$(field libflashattn-doc Section)" = doc ] || die "libflashattn-doc is not in section doc"

  files=$(listing flashattn-bench)
  has "$files" "\./usr/bin/flashattn-bench\$" "flashattn-bench lacks /usr/bin/flashattn-bench"
  has "$files" "/usr/share/man/man1/flashattn-bench\.1\.gz\$" "flashattn-bench lacks its manual page"
  has "$files" "/usr/share/doc/flashattn-bench/THIRD-PARTY-NOTICES\$" "flashattn-bench lacks THIRD-PARTY-NOTICES"
  grep -qF "$lib (>= $FA_VERSION)" <<<"$(field flashattn-bench Depends)" ||
    die "flashattn-bench does not depend on $lib (>= $FA_VERSION) (from the symbols file)"
  if command -v readelf >/dev/null; then
    root="$FA_WORK_DIR/unpacked"
    rm -rf "$root"
    dpkg-deb -x "$(deb_of flashattn-bench)" "$root"
    dpkg-deb -x "$(deb_of "$lib")" "$root"
    for elf in "$root/usr/bin/flashattn-bench" "$root/usr/lib/$multiarch/libflashattn.so.$FA_VERSION"; do
      dynamic=$(readelf -d "$elf")
      ! grep -qE '\((RUNPATH|RPATH)\)' <<<"$dynamic" || die "$elf has a run path (the system path finds the library)"
      ! grep -q 'libcudart\.so' <<<"$dynamic" || die "$elf needs libcudart.so: the CUDA runtime must be static"
      grep -q 'BIND_NOW' <<<"$dynamic" || die "$elf is not linked with -z now (hardening=+all)"
    done
    rm -rf "$root"
  fi
  echo "package contents as expected"
  ;;

lintian)
  need lintian lintian
  need_debs
  changes=$(ls "$FA_WORK_DIR"/libflashattn_"$version"_*.changes)
  # Overridden tags are printed too (O:, with the justification as N: lines) so the log shows every exception.
  echo "lintian --pedantic --display-info --show-overrides $changes"
  set +e
  report=$(lintian --pedantic --display-info --show-overrides --fail-on none "$changes" 2>&1)
  rc=$?
  set -e
  echo "$report"
  [ "$rc" -eq 0 ] || die "lintian did not run through (status $rc)"
  errors=$(grep -c '^E: ' <<<"$report" || true)
  warnings=$(grep -c '^W: ' <<<"$report" || true)
  echo "lintian: $errors errors, $warnings warnings, $(grep -c '^[IP]: ' <<<"$report" || true) info/pedantic tags," \
    "$(grep -c '^O: ' <<<"$report" || true) overridden (debian/*.lintian-overrides)"
  [ "$errors" -eq 0 ] && [ "$warnings" -eq 0 ] || die "lintian reports errors or warnings"
  ;;

install)
  need dpkg dpkg
  need_debs
  [ "$(id -u)" -eq 0 ] || skip "installing packages needs root"
  for package in "${packages[@]}"; do
    # Someone else's installation is left alone rather than replaced and then removed.
    if dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
      skip "$package is already installed on this machine"
    fi
  done
  cleanup() { dpkg --purge "${packages[@]}" >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  debs=()
  for package in "${packages[@]}"; do debs+=("$(deb_of "$package")"); done
  dpkg -i "${debs[@]}"
  work="$FA_WORK_DIR/consumers"
  rm -rf "$work"
  mkdir -p "$work"

  need_tool() { command -v "$1" >/dev/null || die "$1 not found: the installed packages cannot be checked"; }
  need_tool pkg-config
  [ "$(pkg-config --modversion flashattn)" = "$FA_VERSION" ] || die "pkg-config flashattn is not $FA_VERSION"
  # shellcheck disable=SC2046  # the flags are a word list
  "$FA_CC" -std=c99 -Wall -Wextra -Werror -o "$work/consumer_pkgconfig" "$FA_SOURCE_DIR/tests/install/consumer.c" \
    $(pkg-config --cflags --libs flashattn) -lm
  # Through /lib or /usr/lib (merged /usr), the file must be the packaged one.
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
  resolved=$(env -u LD_LIBRARY_PATH ldd "$work/consumer_pkgconfig" | awk '/libflashattn\.so/ {print $3}')
  [ -n "$resolved" ] && [ "$(realpath "$resolved")" = "$(realpath "/usr/lib/$multiarch/libflashattn.so.$FA_SOVERSION")" ] ||
    die "the consumer loads '$resolved', not the packaged library"
  env -u LD_LIBRARY_PATH "$work/consumer_pkgconfig"

  "$FA_CMAKE" -S "$FA_SOURCE_DIR/tests/install/find_package_consumer" -B "$work/find_package" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$FA_CC" \
    -DFLASHATTN_EXPECTED_VERSION="$FA_VERSION" -DFLASHATTN_EXPECTED_PREFIX=/usr
  "$FA_CMAKE" --build "$work/find_package"
  env -u LD_LIBRARY_PATH "$work/find_package/consumer"

  help=$(env -u LD_LIBRARY_PATH flashattn-bench --help)
  echo "$help"
  grep -q '^usage: flashattn-bench' <<<"$help" || die "flashattn-bench --help printed no usage"
  env -u LD_LIBRARY_PATH flashattn-bench --backend host | tee "$work/bench.txt"
  grep -q 'checked against the bench.s float64 oracle' "$work/bench.txt" || die "the HOST demo did not say what it checked"
  [ -f /usr/share/doc/libflashattn-doc/html/index.html ] || die "the HTML reference is not installed"
  man -w flashattn-bench >/dev/null 2>&1 || [ -f /usr/share/man/man1/flashattn-bench.1.gz ] ||
    die "the manual page is not installed"

  dpkg --purge "${packages[@]}"
  trap - EXIT
  for package in "${packages[@]}"; do
    ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'installed' || die "$package is still installed"
  done
  [ ! -e "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libflashattn.so.$FA_SOVERSION" ] ||
    die "the library is still there after removal"
  echo "installed, used and removed the packages"
  ;;

*)
  die "unknown step $step"
  ;;
esac
