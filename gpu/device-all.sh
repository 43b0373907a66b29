#!/usr/bin/env bash
# gpu/device-all.sh: every device check in one command, for a lease of a few minutes whose
# results come back as at most eight files (the device tool's limit):
#
#     OUT=/some/dir bash gpu/device-all.sh          (from the repository root)
#
# runs gpu/device-check.sh (the qualification: environment, libcuda's trace with a spilling
# kernel, the vendor control, our owners over QMD variants, dmesg) into WORK/check and then
# gpu/device-check-local.sh (GPU owners whose kernels spill, against the CPU executable's bits)
# into WORK/local, then bench/gpu.py (the GPU owner beside the CPU executable and PyTorch on the
# card, with the bits compared; first each owner's start-up by part, alone and with the GPU held
# by the benchmark's own process, gpu/holder.py, then the same owner mapped by the RM alone,
# --gpu-map rm, whose failure is said and not fatal: issue 42) into WORK/bench, each under its own
# deadline, then leaves in $OUT:
#   summary.txt   the three stages' summaries and exit codes, and the seconds each took
#   results.tgz   everything they wrote (WORK/check, WORK/local, WORK/bench; the executables too)
#   qualify.txt, local.txt, cuda-trace.txt, dmesg.txt, bench-gpu.txt   the files read first
# Exit 0 when all three passed. DEVALL_CHECK_DEADLINE, DEVALL_LOCAL_DEADLINE and
# DEVALL_BENCH_DEADLINE (seconds, default 300, 170 and 240) bound them; DEVALL_BENCH_ARGS is
# passed to bench/gpu.py (the tests: --quick), DEVCHECK_RUNNER and DEVCHECK_PROC too, as the
# scripts take them; tests/test_device_check_local.py runs this against the mock driver.
set -u
: "${OUT:?set OUT to the directory the results go to}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
WORK="${DEVALL_WORK:-$(mktemp -d /tmp/devall.XXXXXX)}"
mkdir -p "$WORK/check" "$WORK/local" "$WORK/bench"
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
t0=$(date +%s)
bench_args=(--out "$WORK/bench")
[ -n "${DEVCHECK_RUNNER:-}" ] && bench_args+=(--runner "$DEVCHECK_RUNNER")
[ -n "${DEVCHECK_PROC:-}" ] && bench_args+=(--proc "$DEVCHECK_PROC")
# shellcheck disable=SC2086  # DEVALL_BENCH_ARGS is words by design
timeout "${DEVALL_BENCH_DEADLINE:-240}" "${PYTHON:-python3}" "$ROOT/bench/gpu.py" "${bench_args[@]}" \
    ${DEVALL_BENCH_ARGS:-} >"$WORK/bench/bench-gpu.txt" 2>&1
rc_bench=$?
{
    echo "== bench/gpu.py: exit $rc_bench, $(( $(date +%s) - t0 )) s (deadline ${DEVALL_BENCH_DEADLINE:-240} s)"
    cat "$WORK/bench/bench-gpu.txt"
    echo
} >>"$SUMMARY"
for f in check/qualify.txt local/local.txt check/cuda-trace.txt bench/bench-gpu.txt; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
done
cat "$WORK/check/dmesg.txt" "$WORK/local/dmesg.txt" >"$OUT/dmesg.txt" 2>/dev/null
tar -czf "$OUT/results.tgz" -C "$WORK" check local bench
echo "device-all: check exit $rc_check, local exit $rc_local, bench exit $rc_bench" >>"$SUMMARY"
[ $rc_check -eq 0 ] && [ $rc_local -eq 0 ] && [ $rc_bench -eq 0 ]
