#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds probe.cu (sm_90a) and prints the table of bench/results/decode-history.md ("Paged loaders for short pages",
# item 4): every map mode at pages of 64, 16, 32 and 8, then pages of 16 against 64 with consumers holding each stage
# and with pools of 1 and 4 GB. About 15 s on an H200.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(mktemp -d)/probe"
nvcc -std=c++17 -arch=sm_90a -O2 -Wno-deprecated-declarations -I"$here/../../src" "$here/probe.cu" -o "$bin"
for ps in 64 16 32 8; do for mode in 0 1 2 3 4; do "$bin" "$ps" "$mode" 64; done; done
for spin in 300 600 1000 1500; do for ps in 64 16; do "$bin" "$ps" 0 64 "$spin"; done; done
for mb in 1024 4096; do for ps in 64 16; do "$bin" "$ps" 0 64 300 "$mb"; done; done
