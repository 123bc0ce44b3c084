#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ABI of libflashattn against the checked-in baseline (libabigail). Usage:
#   abi_check.sh check|update <debug libflashattn.so> <public header dir> <baseline.abi> <suppressions> <current.abi>
# check:  describe the library (abidw), compare with the baseline (abidiff); fail on any change a program built
#         against the baseline could notice (removed or changed functions, changed types or enum values). Added
#         functions and enumerators are compatible (a minor version) and only reported.
# update: write the description of the library as the new baseline.
set -euo pipefail
mode=$1 lib=$2 headers=$3 baseline=$4 suppressions=$5 current=$6

for tool in abidw abidiff; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not found (install abigail-tools)"; exit 77; }
done
[ -f "$lib" ] || { echo "FAILED: $lib is not built"; exit 1; }

# Only what a consumer sees: exported symbols and the types of the public headers, without the source paths of this
# checkout (the baseline must not depend on where the tree was built).
abidw --no-corpus-path --no-comp-dir-path --no-show-locs --drop-undefined-syms --exported-interfaces-only \
  --headers-dir "$headers" --drop-private-types --out-file "$current.tmp" "$lib"
# Translation units are named by absolute path: keep the part below the source tree.
source_root=$(cd "$headers/../.." && pwd)
sed "s|path='$source_root/|path='|" "$current.tmp" >"$current"
rm -f "$current.tmp"

if [ "$mode" = update ]; then
  cp "$current" "$baseline"
  echo "wrote $baseline ($(grep -c '<function-decl' "$baseline") functions)"
  exit 0
fi

echo "abidiff $baseline $current"
set +e
report=$(abidiff --suppressions "$suppressions" "$baseline" "$current")
rc=$?
set -e
echo "$report"
# abidiff's status is a bit set: 1 error, 2 usage error, 4 ABI change, 8 incompatible change.
if (( rc & 3 )); then
  echo "FAILED: abidiff could not compare (status $rc)"
  exit 1
fi
if (( rc & 8 )); then
  echo "FAILED: incompatible ABI change (a removed function or a changed type); see docs/abi.md"
  exit 1
fi
if (( rc & 4 )); then
  # A change abidiff does not call incompatible may still break callers (an enumerator's value, a parameter's type):
  # only pure additions pass.
  changed=$(grep -E '^Functions changes summary|^Variables changes summary' <<<"$report" |
    sed -nE 's/.*: ([0-9]+) Removed, ([0-9]+) Changed.*/\1 \2/p' | awk '{s += $1 + $2} END {print s + 0}')
  if [ "$changed" -ne 0 ] || grep -qE 'enumerator .* value changed|type of .* changed|parameter [0-9]+ of type' <<<"$report"; then
    echo "FAILED: the ABI changed incompatibly; see docs/abi.md"
    exit 1
  fi
  echo "compatible additions only: update the baseline in the commit that adds them (docs/abi.md)"
fi
echo "ABI compatible with $baseline"
