#!/usr/bin/env bash
# gpu/device-all.sh: every device check in one command, for a lease of a few minutes whose
# results come back as at most eight files (the device tool's limit):
#
#     OUT=/some/dir bash gpu/device-all.sh          (from the repository root)
#
# runs gpu/device-check.sh (the qualification: environment, libcuda's trace with a spilling
# kernel, the vendor control, our owners over QMD variants, dmesg) into WORK/check and then
# gpu/device-check-local.sh (GPU owners whose kernels spill, against the CPU executable's bits)
# into WORK/local, each under its own deadline, then leaves in $OUT:
#   summary.txt   both scripts' summaries and exit codes, and the seconds each took
#   results.tgz   everything both wrote (WORK/check, WORK/local; the executables too)
#   qualify.txt, local.txt, cuda-trace.txt, dmesg.txt   the four files read first
# Exit 0 when both passed. DEVALL_CHECK_DEADLINE and DEVALL_LOCAL_DEADLINE (seconds, default
# 300 and 170) bound the two; tests/test_device_check.py runs this against the mock driver.
set -u
: "${OUT:?set OUT to the directory the results go to}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
WORK="${DEVALL_WORK:-$(mktemp -d /tmp/devall.XXXXXX)}"
mkdir -p "$WORK/check" "$WORK/local"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

run() {               # run NAME SCRIPT DEADLINE_VAR DEADLINE
    local name="$1" script="$2" var="$3" deadline="$4" t0 rc
    t0=$(date +%s)
    env "$var=$deadline" OUT="$WORK/$name" bash "$ROOT/$script" >"$WORK/$name/stdout.txt" 2>&1
    rc=$?
    {
        echo "== $script: exit $rc, $(( $(date +%s) - t0 )) s (deadline $deadline s)"
        cat "$WORK/$name/summary.txt" 2>/dev/null || echo "(no summary.txt)"
        echo
    } >>"$SUMMARY"
    return $rc
}

run check gpu/device-check.sh DEVCHECK_DEADLINE "${DEVALL_CHECK_DEADLINE:-300}"
rc_check=$?
run local gpu/device-check-local.sh LOCALCHECK_DEADLINE "${DEVALL_LOCAL_DEADLINE:-170}"
rc_local=$?
for f in check/qualify.txt local/local.txt check/cuda-trace.txt; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
done
cat "$WORK/check/dmesg.txt" "$WORK/local/dmesg.txt" >"$OUT/dmesg.txt" 2>/dev/null
tar -czf "$OUT/results.tgz" -C "$WORK" check local
echo "device-all: check exit $rc_check, local exit $rc_local" >>"$SUMMARY"
[ $rc_check -eq 0 ] && [ $rc_local -eq 0 ]
