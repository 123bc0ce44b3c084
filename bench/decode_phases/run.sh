#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Where the time of a decode call goes, on a GPU machine (bench/results/decode-history.md, seventh and eighth passes):
# copies the tree, applies instrument.patch to the copy (per-CTA stamps of phases.cuh at the kernel's component
# boundaries, host steps of host_phases.hpp), builds that library (bf16, head dim 128 only) and the driver against it,
# then runs the driver once per line of $RUNS_FILE ("tag ENV=VALUE[,ENV=VALUE] B L chunks lengths what"; X=0 for no
# environment) and prints, per run, the per-call / back-to-back / graph timings and the median / latest phase of the
# CTAs. The shipped source carries no stamps; a patch that no longer applies means the kernel changed: refresh it.
#   RUNS_FILE=bench/decode_phases/runs.txt OUT=/tmp/out bash bench/decode_phases/run.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/phases_out}; mkdir -p $OUT
S=$OUT/summary.txt; : > $S
B=$(realpath -m ${BUILD:-build-phases})  # a folder of its own: the instrumented build is not the library you ship
SRC=$B-src  # the patched copy of the tree
t0=$(date +%s)
rm -rf $SRC && mkdir -p $SRC
(git ls-files; git ls-files --others --exclude-standard) | tar -cf - -T - | tar -xf - -C $SRC
(cd $SRC && git apply bench/decode_phases/instrument.patch) || { echo "instrument.patch no longer applies"; exit 1; }
FLAGS="-DFLASHATTN_DECODE_PHASES -I$SRC/bench/decode_phases ${PHASE_FLAGS:-}"
{
cmake -S $SRC -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHITECTURES=90-real -DFLASHATTN_HEAD_DIMS=128 \
  -DFLASHATTN_DTYPES=bf16 -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_BENCH=OFF -DFLASHATTN_BUILD_DOCS=OFF \
  "-DCMAKE_CUDA_FLAGS=$FLAGS" "-DCMAKE_CXX_FLAGS=$FLAGS" && cmake --build $B -j16
} > $OUT/build.log 2>&1 || { echo "build failed"; tail -30 $OUT/build.log; exit 1; }
SO=$(find $B -name 'libflashattn.so' | head -1); INC=$(dirname $(find $B -name flashattn_version.h | head -1))/..
nvcc -std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -I include -I $INC bench/decode_phases/driver.cu -o $B/driver \
  -L $(dirname $SO) -lflashattn -Xlinker -rpath -Xlinker $(realpath $(dirname $SO)) >> $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s" | tee -a $S
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a $S
run() { # tag "ENV=.. ENV=.." args...
  local tag=$1 envs=$2; shift 2
  rm -f $OUT/ph_$tag.txt
  env ${envs//,/ } FLASHATTN_DECODE_PHASES=$OUT/ph_$tag.txt timeout 120 $B/driver "$@" > $OUT/drv_$tag.log 2>&1
  echo "== $B $tag: $envs driver $* rc=$?" >> $S
  grep -E "^(LIB|HOST|EMPTY|EVENTS|STREAM|STAMPS|MAXCLUSTERS)|error|rror" $OUT/drv_$tag.log | cut -c1-150 >> $S
  grep -oE "[0-9]+ KV chunks[^,]*" $OUT/drv_$tag.log >> $S
  [ -f $OUT/ph_$tag.txt ] && python3 bench/decode_phases/analyze.py $OUT/ph_$tag.txt $OUT/drv_$tag.log 2>&1 >> $S
  rm -f $OUT/ph_$tag.txt $OUT/drv_$tag.log
}
if [ -n "${RUNS_FILE:-}" ]; then
  while read -r tag envs rest; do [ -n "$tag" ] && run $tag "$envs" $rest; done < $RUNS_FILE
fi
echo; cat $S; rm -f $OUT/build.log
