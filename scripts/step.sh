#!/usr/bin/env bash
# scripts/step.sh LOG "what this step does (how long it takes)" COMMAND [ARG...]
# Runs one `make` step quietly: prints one line saying what is happening, appends the
# command's output to LOG, and ends the line with the time it took. On failure it prints
# the tail of LOG and exits with the command's status. Used by the Makefile.
set -uo pipefail
log=$1
what=$2
shift 2
mkdir -p "$(dirname "$log")"
printf '%s ... ' "$what"
start=$(date +%s)
printf '\n=== %s %s\n$ %s\n' "$(date '+%F %T')" "$what" "$*" >>"$log"
"$@" >>"$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  echo "done ($(( $(date +%s) - start )) s)"
  exit 0
fi
echo "failed"
echo "--- the last lines of $log:" >&2
tail -n 40 "$log" >&2
exit $rc
