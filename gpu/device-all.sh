#!/usr/bin/env bash
# gpu/device-all.sh: every device check in one command, for a lease of a few minutes whose
# results come back as at most eight files (the device tool's limit):
#
#     OUT=/some/dir bash gpu/device-all.sh          (from the repository root)
#
# runs, in the order of what a short lease must not lose:
#   check   gpu/device-check.sh (the qualification: environment, libcuda's trace with a spilling
#           kernel, the vendor control, our owners over QMD variants, dmesg) into WORK/check;
#   bench   bench/gpu.py (the GPU owner beside the CPU executable and PyTorch on the card, with
#           the bits compared; first each owner's start-up by part, alone and with the GPU held
#           by the benchmark's own process, gpu/holder.py, then the same owner mapped by the RM
#           alone, --gpu-map rm, whose failure is said and not fatal: issue 42) into WORK/bench;
#   local   gpu/device-check-local.sh (GPU owners whose kernels spill, against the CPU
#           executable's bits) into WORK/local, with whatever time is left;
# each under its own deadline, the whole within DEVALL_BUDGET seconds (default 540: the device
# tool stops a command at 600, and what is in $OUT then still comes back), and leaves in $OUT,
# each file brought up to date as each stage ends (so a run cut short keeps what it did):
#   summary.txt   the stages' summaries and exit codes, and the seconds each took
#   results.tgz   what they wrote (WORK/check, WORK/bench, WORK/local; files over 4 MiB and the
#                 learners' .npy data left out, each named in WORK/left-out.txt, inside it)
#   qualify.txt, local.txt, cuda-trace.txt, dmesg.txt, bench-gpu.txt   the files read first
# Exit 0 when all three passed. DEVALL_CHECK_DEADLINE, DEVALL_BENCH_DEADLINE and
# DEVALL_LOCAL_DEADLINE (seconds, default 150, 240 and 170) bound each, and never more than the
# budget leaves (the stages after a stage keep 20 s each); DEVALL_BENCH_ARGS is passed to
# bench/gpu.py (the tests: --quick), DEVCHECK_RUNNER and DEVCHECK_PROC too, as the scripts take
# them; tests/test_device_check_local.py runs this against the mock driver.
set -u
: "${OUT:?set OUT to the directory the results go to}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
WORK="${DEVALL_WORK:-$(mktemp -d /tmp/devall.XXXXXX)}"
mkdir -p "$WORK/check" "$WORK/local" "$WORK/bench"
SUMMARY="$OUT/summary.txt"
BUDGET="${DEVALL_BUDGET:-540}"
T0=$(date +%s)
: >"$SUMMARY"

deadline() {          # deadline WANTED LATER: WANTED seconds, or what the budget leaves after
    local left=$(( BUDGET - ($(date +%s) - T0) - 20 * $2 ))    # LATER stages' 20 s each
    [ "$left" -lt "$1" ] && echo $(( left > 1 ? left : 1 )) || echo "$1"
}

publish() {           # the files read first and the archive, as they stand now
    local f
    for f in check/qualify.txt local/local.txt check/cuda-trace.txt bench/bench-gpu.txt; do
        [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
    done
    cat "$WORK/check/dmesg.txt" "$WORK/local/dmesg.txt" >"$OUT/dmesg.txt" 2>/dev/null
    (cd "$WORK" && find check local bench -type f \( -size +4M -o -name '*.npy' \) | sort) >"$WORK/left-out.txt"
    tar -czf "$OUT/results.tgz.part" -C "$WORK" -X "$WORK/left-out.txt" check local bench left-out.txt \
        && mv "$OUT/results.tgz.part" "$OUT/results.tgz"
}

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
    publish
    return $rc
}

run check gpu/device-check.sh DEVCHECK_DEADLINE "$(deadline "${DEVALL_CHECK_DEADLINE:-150}" 2)"
rc_check=$?
t0=$(date +%s)
bench_deadline=$(deadline "${DEVALL_BENCH_DEADLINE:-240}" 1)
bench_args=(--out "$WORK/bench")
[ -n "${DEVCHECK_RUNNER:-}" ] && bench_args+=(--runner "$DEVCHECK_RUNNER")
[ -n "${DEVCHECK_PROC:-}" ] && bench_args+=(--proc "$DEVCHECK_PROC")
# shellcheck disable=SC2086  # DEVALL_BENCH_ARGS is words by design
PYTHONUNBUFFERED=1 timeout "$bench_deadline" "${PYTHON:-python3}" "$ROOT/bench/gpu.py" "${bench_args[@]}" \
    ${DEVALL_BENCH_ARGS:-} >"$WORK/bench/bench-gpu.txt" 2>&1
rc_bench=$?
{
    echo "== bench/gpu.py: exit $rc_bench, $(( $(date +%s) - t0 )) s (deadline $bench_deadline s)"
    cat "$WORK/bench/bench-gpu.txt"
    echo
} >>"$SUMMARY"
publish
run local gpu/device-check-local.sh LOCALCHECK_DEADLINE "$(deadline "${DEVALL_LOCAL_DEADLINE:-170}" 0)"
rc_local=$?
echo "device-all: check exit $rc_check, local exit $rc_local, bench exit $rc_bench, $(( $(date +%s) - T0 )) s of $BUDGET" >>"$SUMMARY"
[ $rc_check -eq 0 ] && [ $rc_local -eq 0 ] && [ $rc_bench -eq 0 ]
