#!/usr/bin/env bash
# gpu/device-all.sh: every device check in one command, for a lease of a few minutes whose
# results come back as at most eight files (the device tool's limit):
#
#     OUT=/some/dir bash gpu/device-all.sh          (from the repository root)
#
# runs, in the order of what a short lease must not lose:
#   check   gpu/device-check.sh (the qualification: environment, libcuda's trace with a spilling
#           kernel, the vendor control, our owners over QMD variants, dmesg) into WORK/check;
#   choose  gpu/choose.py: which host choices (the defaults, or a fallback to the paths verified
#           on the H200: docs/nvdrv.md "Fallbacks to the verified paths") give the CPU's bits on
#           small owners, into WORK/choose; the first that passed is the benchmark's --choose;
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
# Exit 0 when all four passed. DEVALL_CHECK_DEADLINE, DEVALL_CHOOSE_DEADLINE,
# DEVALL_BENCH_DEADLINE and DEVALL_LOCAL_DEADLINE (seconds, default 150, 90, 240 and 170) bound
# each, and never more than the budget leaves (the stages after a stage keep 20 s each);
# DEVALL_CHOOSE_ARGS and DEVALL_BENCH_ARGS are passed to gpu/choose.py and bench/gpu.py (the
# tests: --quick), DEVCHECK_RUNNER and DEVCHECK_PROC to every stage, as the scripts take them;
# tests/test_device_check_local.py runs this against the mock driver.
set -u
: "${OUT:?set OUT to the directory the results go to}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
WORK="${DEVALL_WORK:-$(mktemp -d /tmp/devall.XXXXXX)}"
mkdir -p "$WORK/check" "$WORK/choose" "$WORK/bench" "$WORK/local"
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
    (cd "$WORK" && find check choose bench local -type f \( -size +4M -o -name '*.npy' \) | sort) >"$WORK/left-out.txt"
    tar -czf "$OUT/results.tgz.part" -C "$WORK" -X "$WORK/left-out.txt" check choose bench local left-out.txt \
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

tool() {              # tool NAME SCRIPT DEADLINE OUTPUT ARGS...: a Python stage, its output in the summary
    local name="$1" script="$2" deadline="$3" output="$4" t0 rc
    shift 4
    local args=(--out "$WORK/$name")
    [ -n "${DEVCHECK_RUNNER:-}" ] && args+=(--runner "$DEVCHECK_RUNNER")
    [ -n "${DEVCHECK_PROC:-}" ] && args+=(--proc "$DEVCHECK_PROC")
    t0=$(date +%s)
    PYTHONUNBUFFERED=1 timeout "$deadline" "${PYTHON:-python3}" "$ROOT/$script" "${args[@]}" "$@" \
        >"$WORK/$name/$output" 2>&1
    rc=$?
    {
        echo "== $script: exit $rc, $(( $(date +%s) - t0 )) s (deadline $deadline s)"
        cat "$WORK/$name/$output"
        echo
    } >>"$SUMMARY"
    publish
    return $rc
}

run check gpu/device-check.sh DEVCHECK_DEADLINE "$(deadline "${DEVALL_CHECK_DEADLINE:-150}" 3)"
rc_check=$?
# shellcheck disable=SC2086  # DEVALL_CHOOSE_ARGS and DEVALL_BENCH_ARGS are words by design
tool choose gpu/choose.py "$(deadline "${DEVALL_CHOOSE_DEADLINE:-90}" 2)" choose-out.txt ${DEVALL_CHOOSE_ARGS:-}
rc_choose=$?
# shellcheck disable=SC2046,SC2086  # choose.args: the chosen --choose KEY=VALUE words
tool bench bench/gpu.py "$(deadline "${DEVALL_BENCH_DEADLINE:-240}" 1)" bench-gpu.txt \
    $(cat "$WORK/choose/choose.args" 2>/dev/null) ${DEVALL_BENCH_ARGS:-}
rc_bench=$?
run local gpu/device-check-local.sh LOCALCHECK_DEADLINE "$(deadline "${DEVALL_LOCAL_DEADLINE:-170}" 0)"
rc_local=$?
echo "device-all: check exit $rc_check, choose exit $rc_choose, bench exit $rc_bench, local exit $rc_local," \
     "$(( $(date +%s) - T0 )) s of $BUDGET" >>"$SUMMARY"
[ $rc_check -eq 0 ] && [ $rc_choose -eq 0 ] && [ $rc_bench -eq 0 ] && [ $rc_local -eq 0 ]
