#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs Doxygen over the public header and docs/*.md; any warning fails. Usage: check_doxygen.sh <doxygen or "">
# <Doxyfile> <warning log named by the Doxyfile's WARN_LOGFILE>
set -uo pipefail
doxygen=${1:-} doxyfile=$2 log=$3
# Configured without doxygen, it may have been installed since: look again before skipping.
[ -n "$doxygen" ] && [ -x "$doxygen" ] || doxygen=$(command -v doxygen || true)
if [ -z "$doxygen" ]; then
  echo "SKIPPED: doxygen not found (install doxygen)"
  exit 77
fi
rm -f "$log"
"$doxygen" "$doxyfile"
rc=$?
if [ -s "$log" ]; then
  echo "FAILED: Doxygen warnings ($("$doxygen" --version)):"
  cat "$log"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "FAILED: doxygen exited with $rc"
  exit 1
fi
echo "doxygen $("$doxygen" --version): no warnings"
