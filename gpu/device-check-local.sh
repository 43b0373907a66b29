#!/usr/bin/env bash
# gpu/device-check-local.sh: GPU owners whose kernels use local memory, and wide ones, on a machine
# with an NVIDIA GPU (driver 580), against the CPU executable's bits. One command:
#
#     OUT=/some/dir bash gpu/device-check-local.sh          (from the repository root)
#
# Stages, in order, each under `timeout` with its own budget, the whole within LOCALCHECK_DEADLINE
# seconds (default 170):
#   env        environment facts (gpu/device-check.sh --env-facts)          -> $OUT/env.txt
#   local      gpu/local_check.py: the identity probe (with the card's
#              topology from GR_GET_INFO), then least squares of widths
#              LOCALCHECK_WIDTHS (a vector kept in local memory) and the
#              learners LOCALCHECK_LEARNERS as GPU owners and x86-64
#              executables, compared bit for bit (and with the
#              interpreter where it is quick)                             -> $OUT/local.txt,
#                                                                             $OUT/local.json,
#                                                                             $OUT/host.gpuhost
#   dmesg      NVRM / Xid lines after the local stage                      -> $OUT/dmesg.txt
# and $OUT/summary.txt: one line per stage (passed, failed, timed out, could not run and why),
# its seconds and budget, written as each stage ends; the executables and learners in
# $OUT/bin/ (kept: a failed run can be rerun by hand). Exit 0 when the local stage passed.
#
# Settings (environment; tests/test_device_check_local.py runs the script against the mock):
#   PYTHON                 the interpreter (default .venv/bin/python, else python3)
#   DEVCHECK_PROC          the driver's /proc tree (default /proc/driver/nvidia)
#   DEVCHECK_RUNNER        FILE.py:FUNCTION that runs each executable (gpu/local_check.py --runner)
#   LOCALCHECK_WIDTHS      the widths of w (default 128,512,2048)
#   LOCALCHECK_LEARNERS    more learners, gpu/local_check.py --learners (default lsq:65536,digits,
#                          mlp:784-256-10: a 65,536-wide least squares, examples/digits_mlp.alpha,
#                          a 784-256-10 tanh MLP; empty: none)
#   LOCALCHECK_STEPS       steps per run (default 3)
#   LOCALCHECK_DEADLINE    seconds for the whole (default 170)
#   LOCALCHECK_BUDGET_ENV, _LOCAL, _DMESG   per-stage seconds (default 30, 130, 10)
#   DEVCHECK_OWNER_TIMEOUT seconds one executable may run (default 30)
set -u

: "${OUT:?set OUT to the directory the results go to}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROC="${DEVCHECK_PROC:-/proc/driver/nvidia}"
. "$ROOT/gpu/device-env.sh" || exit 1                       # root, $OUT, PYTHON, ptxas
DEADLINE="${LOCALCHECK_DEADLINE:-170}"
RESERVE=5
SUMMARY="$OUT/summary.txt"
START_MS=$(($(date +%s%N) / 1000000))
WORK="$(mktemp -d /tmp/localcheck.XXXXXX)"

for f in env.txt local.txt dmesg.txt; do : >"$OUT/$f"; done
{
    echo "# gpu/device-check-local.sh  $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -n)  deadline ${DEADLINE} s"
    echo "# commit $(git log -1 --format=%h 2>/dev/null || echo '?')  python $PYTHON"
    printf '%-14s %-14s %8s %7s  %s\n' stage result seconds budget note
} >"$SUMMARY"

elapsed_ms() { echo $(($(date +%s%N) / 1000000 - START_MS)); }
secs() { printf '%d.%01d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
line() { printf '%-14s %-14s %8s %7s  %s\n' "$1" "$2" "$(secs "$3")" "$4" "$5" >>"$SUMMARY"; }

# run_stage NAME WANTED FILE COMMAND...: the command under timeout, its output appended to FILE;
# sets RC, then writes the summary line.
run_stage() {
    local name="$1" want="$2" file="$3"; shift 3
    local left=$((DEADLINE - RESERVE - $(elapsed_ms) / 1000))
    local budget=$want
    [ "$left" -lt "$budget" ] && budget=$left
    if [ "$budget" -lt 2 ]; then
        RC=-1
        line "$name" not-run 0 0 "no time left before the ${DEADLINE} s deadline"
        return
    fi
    echo "#### $name: $* (budget ${budget} s)" >>"$file"
    local t0; t0=$(elapsed_ms)
    timeout -k 5 "$budget" "$@" >>"$file" 2>&1 </dev/null &
    CHILD=$!
    wait "$CHILD"
    RC=$?
    CHILD=
    local ms=$(($(elapsed_ms) - t0))
    echo "#### $name: exit $RC after $(secs $ms) s" >>"$file"
    local last; last=$(grep -v '^####' "$file" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c 1-200)
    case $RC in
        0) line "$name" passed "$ms" "$budget" "" ;;
        2) line "$name" could-not-run "$ms" "$budget" "$last" ;;
        124|137) line "$name" timed-out "$ms" "$budget" "cut after ${budget} s; last: $last" ;;
        *) line "$name" failed "$ms" "$budget" "exit $RC: $last" ;;
    esac
}

STAGE_DONE=
finish() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$STAGE_DONE" ] || line "(interrupted)" killed "$(elapsed_ms)" - "before the end"
    rm -rf "$WORK"
    exit $rc
}
stop() { [ -n "${CHILD:-}" ] && kill -TERM "$CHILD" 2>/dev/null; exit 143; }
CHILD=
trap finish EXIT
trap stop INT TERM

run_stage env "${LOCALCHECK_BUDGET_ENV:-30}" "$OUT/env.txt" \
    env DEVCHECK_PROC="$PROC" DEVCHECK_CMD_TIMEOUT=10 bash "$ROOT/gpu/device-check.sh" --env-facts "$PYTHON"

LOCAL=("$PYTHON" gpu/local_check.py --out "$OUT" --proc "$PROC"
       --widths "${LOCALCHECK_WIDTHS:-128,512,2048}" --steps "${LOCALCHECK_STEPS:-3}"
       --learners "${LOCALCHECK_LEARNERS-lsq:65536,digits,mlp:784-256-10}"
       --owner-timeout "${DEVCHECK_OWNER_TIMEOUT:-30}")
[ -n "${DEVCHECK_RUNNER:-}" ] && LOCAL+=(--runner "$DEVCHECK_RUNNER")
run_stage local "${LOCALCHECK_BUDGET_LOCAL:-130}" "$OUT/local.txt" "${LOCAL[@]}"
verdict=$RC

run_stage dmesg "${LOCALCHECK_BUDGET_DMESG:-10}" "$OUT/dmesg.txt" \
    bash "$ROOT/gpu/device-check.sh" --dmesg local "$WORK/dmesg.seen"

STAGE_DONE=1
line total "$([ "$verdict" -eq 0 ] && echo passed || echo failed)" "$(elapsed_ms)" "$DEADLINE" \
    "files: $(cd "$OUT" && ls | tr '\n' ' ')"
[ "$verdict" -eq 0 ]
