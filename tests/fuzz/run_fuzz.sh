#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the libFuzzer target with clang, ASan and UBSan in its own build directory and runs it for a bounded time on
# a copy of the checked-in corpus (tests/fuzz/corpus stays as committed; new inputs go to <build>/corpus-new).
#   run_fuzz.sh <source dir> <build dir> <seconds> [extra libFuzzer flags...]
# Exits 77 (CTest: skipped) when clang or its libFuzzer runtime is missing; .ci/run installs both.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$2
seconds=$3
shift 3

for tool in clang clang++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIPPED: $tool not found (apt-get install clang libclang-rt-dev)"; exit 77; }
done
mkdir -p "$build"
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }\n' > "$probe_dir/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined -shared-libsan "$probe_dir/probe.cpp" -o "$probe_dir/probe" 2>"$probe_dir/err"; then
  echo "SKIPPED: clang++ cannot link -fsanitize=fuzzer (libFuzzer runtime missing?):"
  cat "$probe_dir/err"
  exit 77
fi

# The library, the oracle and the target all instrumented; -shared-libsan because libflashattn.so links with
# --no-undefined and takes the sanitizer runtime from a shared library then.
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer -shared-libsan"
runtime_dir=$(dirname "$(clang++ --print-file-name=libclang_rt.asan-x86_64.so)")
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-shared-libsan -Wl,-rpath,$runtime_dir" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined -shared-libsan" \
  -DFLASHATTN_ENABLE_CUDA=OFF -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_BENCH=OFF -DFLASHATTN_BUILD_DOCS=OFF \
  -DFLASHATTN_BUILD_FUZZER=ON >"$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target fuzz_api -j 2

mkdir -p "$build/corpus-new"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# One worker: the HOST backend's pool already uses the cores; -rss_limit_mb leaves room for ASan's shadow.
# Inputs up to 256 bytes: a problem reads about 90, its input values 64 more.
# libFuzzer's own exit code for a finding is 77, CTest's "skipped": findings exit 1 here.
"$build/tests/fuzz/fuzz_api" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 -timeout=60 -max_len=256 \
  -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$build/" \
  "$@" "$build/corpus-new" "$src/tests/fuzz/corpus"
