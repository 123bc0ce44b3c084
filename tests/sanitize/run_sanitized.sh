#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Configures the `asan` or `tsan` preset (its build tree, build-asan/ or build-tsan/, beside the others), builds only
# what the HOST suites need (the library, the HOST, bad-input and C99 tests, the HOST example) and runs those suites
# there (the test preset: label `host`), every FLASHATTN_TEST_STRIDE-th grid case (each case whole) so that the run fits CI's time.
#   run_sanitized.sh <asan|tsan> <source dir> <grid stride>
# Exits 77 (CTest: skipped) when the compiler cannot link the sanitizer runtime.
set -euo pipefail
kind=$1
src=$(cd "$2" && pwd)
stride=$3
case "$kind" in
  asan) flag=address,undefined ;;
  tsan) flag=thread ;;
  *) echo "unknown sanitizer $kind" >&2; exit 2 ;;
esac
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'int main() { return 0; }\n' > "$probe_dir/probe.cpp"
if ! c++ -fsanitize="$flag" "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2>"$probe_dir/err" || ! "$probe_dir/probe"; then
  echo "SKIPPED: the C++ compiler cannot build and run -fsanitize=$flag:"
  cat "$probe_dir/err"
  exit 77
fi
start=$(date +%s)
cd "$src"
cmake --preset "$kind" >"$probe_dir/configure.log" || { cat "$probe_dir/configure.log"; exit 1; }
cmake --build --preset "$kind" -j 2 --target bad_input_host test_host_forward test_host_backward test_host_decode test_host_checks \
  flashattn_c99_consumer flashattn_header_cxx example_host_forward
built=$(date +%s)
export FLASHATTN_TEST_STRIDE=$stride
ctest --preset "$kind"
echo "$kind: build $((built - start)) s, tests $(($(date +%s) - built)) s"
