#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds driver.cu with the variants_d*.cu configurations (sm_90a, in parallel) and runs it; arguments go to the
# driver. On the GPU machine, from the repository root: bash bench/forward_sm90_variants/run.sh --dims 128
set -eu
cd "$(dirname "$0")/../.."
B=${BUILD:-build-variants}
mkdir -p "$B"
FLAGS=(-std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I src -I bench/forward_sm90_variants)
pids=()
for f in bench/forward_sm90_variants/variants_d64.cu bench/forward_sm90_variants/variants_d128.cu \
         bench/forward_sm90_variants/variants_d192.cu bench/forward_sm90_variants/variants_d256.cu bench/forward_sm90_variants/driver.cu; do
  nvcc "${FLAGS[@]}" -c "$f" -o "$B/$(basename "$f" .cu).o" &
  pids+=($!)
done
g++ -std=c++17 -O2 -I src -I /usr/local/cuda/include -c src/cuda/tensor_map.cpp -o "$B/tensor_map.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
nvcc -o "$B/driver" "$B"/*.o -lcudart
"$B/driver" "$@"
