#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The ABI surface of libflashattn: the functions the shared library exports must be exactly the global list of the
# version script, which must name exactly the functions the public header declares; the SONAME must carry the
# SOVERSION. Usage: check_symbols.sh <libflashattn.so.N.M.P> <flashattn.map> <flashattn.h> <SOVERSION>
set -euo pipefail
lib=$1 map=$2 header=$3 soversion=$4

command -v readelf >/dev/null || { echo "SKIPPED: readelf not found (install binutils)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

# Version script: node names ("FLASHATTN_0 {") and the names between "global:" and "local:".
sed 's@/\*.*\*/@@g; s@#.*@@' "$map" | awk '
  /^[[:space:]]*[A-Za-z_][A-Za-z0-9_.]*[[:space:]]*\{/ { sub(/[[:space:]]*\{.*/, ""); gsub(/[[:space:]]/, ""); print > "/dev/stderr"; next }
  /global:/ { inglobal = 1; next }
  /local:/ { inglobal = 0; next }
  inglobal { gsub(/[[:space:];]/, ""); if ($0 != "") print }' 2>"$work/nodes" | sort >"$work/map"
[ -s "$work/map" ] || { echo "FAILED: no global symbols read from $map"; exit 1; }

# Dynamic symbols defined by the library (section index not UND), without their @VERSION suffix.
readelf --dyn-syms --wide "$lib" | awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $5 != "LOCAL" && NF >= 8 {
    name = $8; sub(/@.*/, "", name); print $4, name }' >"$work/defined"
awk '$1 == "FUNC" || $1 == "IFUNC" { print $2 }' "$work/defined" | sort -u >"$work/exported"
# Anything else exported (data, TLS) is a leak, except the version nodes the linker records as symbols.
awk '$1 != "FUNC" && $1 != "IFUNC" { print $2 }' "$work/defined" | sort -u | comm -23 - <(sort -u "$work/nodes") \
  >"$work/other"

echo "exported functions: $(wc -l <"$work/exported"), version script: $(wc -l <"$work/map")"
if ! diff -u --label "version script ($map)" --label "exported by $lib" "$work/map" "$work/exported"; then
  echo "FAILED: the exported functions differ from the version script (lines with - are missing, + are extra)"
  status=1
fi
if [ -s "$work/other" ]; then
  echo "FAILED: non-function symbols exported:"; cat "$work/other"
  status=1
fi

# Every function the header declares is in the version script and the other way round.
grep -E '^FLASHATTN_API' "$header" | grep -oE '\bflashAttn[A-Za-z0-9_]*\(' | tr -d '(' | sort -u >"$work/declared"
if ! diff -u --label "version script ($map)" --label "declared in $header" "$work/map" "$work/declared"; then
  echo "FAILED: the public header and the version script disagree"
  status=1
fi

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
echo "SONAME: ${soname:-none}"
if [ "$soname" != "libflashattn.so.$soversion" ]; then
  echo "FAILED: SONAME is '${soname}', expected libflashattn.so.$soversion"
  status=1
fi
[ "$status" -eq 0 ] && echo "symbols and SONAME match"
exit "$status"
