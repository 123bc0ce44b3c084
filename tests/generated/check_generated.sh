#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# check_generated.sh GENERATOR COMMITTED OUTPUT: runs the Python generator into OUTPUT and fails, showing the start of
# the difference, when OUTPUT differs from the COMMITTED file in any byte.
set -euo pipefail
generator=$1
committed=$2
output=$3

if ! python=$(command -v python3); then
  echo "python3 not found: cannot regenerate ${committed##*/}"
  exit 77
fi
mkdir -p "$(dirname "$output")"
rm -f "$output"
"$python" "$generator" "$output"
if ! cmp -s "$committed" "$output"; then
  diff -u "$committed" "$output" | head -n 60 || true
  echo "FAIL: $committed is not what ${generator##*/} writes; run: python3 $generator"
  exit 1
fi
echo "OK: $committed matches its generator"
