#!/usr/bin/env bash
# gpu/device-check.sh: the whole qualification on a machine with an NVIDIA GPU, in one try.
#
#     OUT=/some/dir bash gpu/device-check.sh          (from the repository root)
#
# Stages, in order, each under `timeout` with its own budget, the whole within DEVCHECK_DEADLINE
# seconds (default 560: inside the device tool's 600 s per command and a 15-minute lease with
# the machine's start):
#   env         environment facts                                       -> $OUT/env.txt
#   cuda-trace  libcuda's conversation for one launch (first GPU stage,
#               always run): gpu/cuda_ioctl_trace.py                    -> $OUT/cuda-trace.txt
#   vendor      our cubins through libcuda: gpu/vendor_check.py         -> $OUT/vendor.txt
#   qualify     our owners: gpu/qualify.py, once per QMD variant (the
#               default first, then libcuda's fields when the trace has
#               a QMD, then gpu/qualify.py's QMD_VARIANTS), stopping at
#               the first that passes                                   -> $OUT/qualify.txt
#               (and the ordering probe's verdicts, per variant,        -> summary.txt)
#   dmesg       NVRM / Xid lines, new ones after every GPU stage        -> $OUT/dmesg.txt
#   records     the run records and the raw trace, after every stage   -> $OUT/records.tgz
# and $OUT/summary.txt: one line per stage (passed, failed, timed out, could not run and why,
# not run), its seconds and budget, written as each stage ends. Every file is written as its
# stage goes, so a stage that hangs or crashes leaves the others and what it had printed.
#
# Exit 0 when the owners' stage passed, 1 otherwise.
#
# Settings (environment; the tests use them to run the script against the mock driver):
#   PYTHON                  the interpreter (default .venv/bin/python, else python3)
#   DEVCHECK_PROC           the driver's /proc tree (default /proc/driver/nvidia)
#   DEVCHECK_RUNNER         FILE.py:FUNCTION that runs each owner (gpu/qualify.py --runner)
#   DEVCHECK_LIBCUDA        libcuda to load (default libcuda.so.1)
#   DEVCHECK_VARIANTS       the QMD variants to try, in order (default: qualify.py --list-variants)
#   DEVCHECK_STEPS          steps per owner and vendor run (default 5)
#   DEVCHECK_DEADLINE       seconds for the whole (default 560)
#   DEVCHECK_BUDGET_ENV, _TRACE, _VENDOR, _QUALIFY, _VARIANT, _DMESG   per-stage seconds
#   DEVCHECK_CMD_TIMEOUT    seconds per command of the env stage (default 20)
#   DEVCHECK_OWNER_TIMEOUT  seconds one owner may run (default 40)
#   DEVCHECK_ORDER_SPINS    the ordering probe's spins (gpu/qualify.py --order-spins)
#   DEVCHECK_WORK           scratch directory (default: a new one under /tmp)
set -u

if [ "${1:-}" = "--env-facts" ] || [ "${1:-}" = "--dmesg" ]; then :; else
    : "${OUT:?set OUT to the directory the results go to}"
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROC="${DEVCHECK_PROC:-/proc/driver/nvidia}"
CMD_TIMEOUT="${DEVCHECK_CMD_TIMEOUT:-20}"

# -- the two stages that are shell, run as `bash gpu/device-check.sh --STAGE` under timeout ----
fact() {              # fact TITLE COMMAND...: one command's output, under its own timeout
    local title="$1"; shift
    echo "== $title"
    # --foreground: stays in the stage's process group, which the stage's own timeout kills whole
    timeout --foreground -k 2 "$CMD_TIMEOUT" "$@" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || echo "(exit $rc$([ $rc -eq 124 ] && echo ": cut after ${CMD_TIMEOUT} s"))"
    echo
}

if [ "${1:-}" = "--env-facts" ]; then
    fact "date" date -u +%Y-%m-%dT%H:%M:%SZ
    fact "uname -a" uname -a
    fact "$PROC/version" cat "$PROC/version"
    for f in "$PROC"/gpus/*/information; do
        [ -e "$f" ] && fact "$f" cat "$f"
    done
    fact "ls -l /dev/nvidia*" bash -c 'ls -l /dev/nvidia* /dev/nvidia-caps 2>&1'
    fact "python" "$2" -c 'import sys, numpy; print(sys.version); print("numpy", numpy.__version__)'
    fact "ptxas --version" "${ALPHAC_PTXAS:-ptxas}" --version
    fact "gcc --version" bash -c 'gcc --version | head -n 1'
    fact "libcuda" bash -c 'ldconfig -p | grep -E "libcuda\.so" || echo "no libcuda in the ldconfig cache"'
    fact "git" git -C "$ROOT" log -1 --format='%H %s'
    fact "nvidia-smi -q" nvidia-smi -q
    fact "nvidia-smi -q -d MEMORY (BAR1)" nvidia-smi -q -d MEMORY
    exit 0
fi

if [ "${1:-}" = "--dmesg" ]; then           # --dmesg LABEL SEEN_FILE: the new matching lines
    label="$2" seen="$3"
    now="$(mktemp)"
    if ! dmesg >"$now.all" 2>"$now.err"; then
        echo "== after $label: dmesg failed: $(head -c 300 "$now.err")"
        rm -f "$now" "$now.all" "$now.err"
        exit 1
    fi
    grep -E 'NVRM|Xid|nvidia|nvrm' "$now.all" >"$now"
    old=$(cat "$seen" 2>/dev/null || echo 0)
    total=$(wc -l <"$now")
    [ "$total" -lt "$old" ] && old=0           # the ring buffer wrapped or was cleared
    echo "== after $label: $((total - old)) new NVRM/Xid lines ($total in all)"
    tail -n +"$((old + 1))" "$now"
    echo "$total" >"$seen"
    rm -f "$now" "$now.all" "$now.err"
    exit 0
fi

# -- the driver ------------------------------------------------------------------------------
. "$ROOT/gpu/device-env.sh" || exit 1                       # root, $OUT, PYTHON, ptxas
WORK="${DEVCHECK_WORK:-$(mktemp -d /tmp/devcheck.XXXXXX)}"
mkdir -p "$WORK"
LIBCUDA="${DEVCHECK_LIBCUDA:-libcuda.so.1}"
STEPS="${DEVCHECK_STEPS:-5}"
DEADLINE="${DEVCHECK_DEADLINE:-560}"
RESERVE=15                     # kept back for the last dmesg and records
OWNER_TIMEOUT="${DEVCHECK_OWNER_TIMEOUT:-40}"
SUMMARY="$OUT/summary.txt"
START_MS=$(($(date +%s%N) / 1000000))
STAGE="(starting)"

for f in env.txt cuda-trace.txt vendor.txt qualify.txt dmesg.txt; do : >"$OUT/$f"; done
{
    echo "# gpu/device-check.sh  $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -n)  deadline ${DEADLINE} s"
    echo "# commit $(git log -1 --format=%h 2>/dev/null || echo '?')  python $PYTHON  work $WORK"
    printf '%-26s %-14s %8s %7s  %s\n' stage result seconds budget note
} >"$SUMMARY"

elapsed_ms() { echo $(($(date +%s%N) / 1000000 - START_MS)); }
secs() { printf '%d.%01d' $(($1 / 1000)) $((($1 % 1000) / 100)); }

budget_for() {        # budget_for WANTED: the seconds a stage may have, the deadline considered
    local left=$((DEADLINE - RESERVE - $(elapsed_ms) / 1000))
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

line() {              # line STAGE RESULT MS BUDGET NOTE (MS "-": not timed)
    printf '%-26s %-14s %8s %7s  %s\n' "$1" "$2" "$([ "$3" = - ] && echo - || secs "$3")" "$4" "$5" >>"$SUMMARY"
}

pack_records() {      # the run records and the raw trace, as they are now
    local have=()
    for d in runs cuda-trace; do [ -d "$WORK/$d" ] && have+=("$d"); done
    if [ ${#have[@]} -gt 0 ]; then
        tar -czf "$OUT/.records.tgz" -C "$WORK" --exclude=sniffer.so "${have[@]}" 2>/dev/null &&
            mv -f "$OUT/.records.tgz" "$OUT/records.tgz"
    else
        tar -czf "$OUT/records.tgz" -T /dev/null
    fi
}

# run_stage NAME WANTED FILE COMMAND...: the command under timeout, its output appended to FILE;
# sets RC, RESULT and NOTE, writes the summary line, then the records.
run_stage() {
    local name="$1" want="$2" file="$3"; shift 3
    STAGE="$name"
    local budget; budget=$(budget_for "$want")
    if [ "$budget" -lt 2 ]; then
        RC=-1 RESULT="not-run" NOTE="no time left before the ${DEADLINE} s deadline"
        line "$name" "$RESULT" 0 0 "$NOTE"
        return
    fi
    local from; from=$(stat -c %s "$file")
    echo "#### $name: $* (budget ${budget} s)" >>"$file"
    local t0; t0=$(elapsed_ms)
    # in the background, so that a signal to this script is handled at once (see `stop`)
    timeout -k 5 "$budget" "$@" >>"$file" 2>&1 </dev/null &
    CHILD=$!
    wait "$CHILD"
    RC=$?
    CHILD=
    local ms=$(($(elapsed_ms) - t0))
    echo "#### $name: exit $RC after $(secs $ms) s" >>"$file"
    local last; last=$(tail -c +"$((from + 1))" "$file" | grep -v '^####' | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c 1-200)
    case $RC in
        0) RESULT="passed" NOTE="" ;;
        2) RESULT="could-not-run" NOTE="$last" ;;
        124|137) RESULT="timed-out" NOTE="cut after ${budget} s; last: $last" ;;
        *) RESULT="failed" NOTE="exit $RC: $last" ;;
    esac
    line "$name" "$RESULT" "$ms" "$budget" "$NOTE"
    pack_records
}

dmesg_after() {
    run_stage "dmesg:$1" "${DEVCHECK_BUDGET_DMESG:-10}" "$OUT/dmesg.txt" \
        bash "$ROOT/gpu/device-check.sh" --dmesg "$1" "$WORK/dmesg.seen"
}

finish() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$STAGE" != "(done)" ]; then
        line "(interrupted)" "killed" "$(elapsed_ms)" "-" "in stage $STAGE"
    fi
    pack_records
    exit $rc
}
stop() {              # a signal: the running stage's timeout passes it to the stage's processes
    [ -n "${CHILD:-}" ] && kill -TERM "$CHILD" 2>/dev/null
    exit 143
}
CHILD=
trap finish EXIT
trap stop INT TERM

# 1. the environment
run_stage env "${DEVCHECK_BUDGET_ENV:-45}" "$OUT/env.txt" bash "$ROOT/gpu/device-check.sh" --env-facts "$PYTHON"

# 2. libcuda's conversation, first and always
run_stage cuda-trace "${DEVCHECK_BUDGET_TRACE:-120}" "$OUT/cuda-trace.txt" \
    "$PYTHON" gpu/cuda_ioctl_trace.py --out "$WORK/cuda-trace" --libcuda "$LIBCUDA"
if [ -f "$WORK/cuda-trace/report.txt" ]; then
    { echo "#### report.txt"; cat "$WORK/cuda-trace/report.txt"; } >>"$OUT/cuda-trace.txt"
fi
dmesg_after cuda-trace

# 3. the vendor control: our cubins through libcuda
run_stage vendor "${DEVCHECK_BUDGET_VENDOR:-90}" "$OUT/vendor.txt" \
    "$PYTHON" gpu/vendor_check.py --libcuda "$LIBCUDA" --steps "$STEPS"
dmesg_after vendor

# 4. our owners, one QMD variant after another until one passes
QUALIFY=("$PYTHON" gpu/qualify.py --proc "$PROC" --steps "$STEPS" --qmd-from-trace "$WORK/cuda-trace")
[ -n "${DEVCHECK_RUNNER:-}" ] && QUALIFY+=(--runner "$DEVCHECK_RUNNER")
[ -n "${DEVCHECK_ORDER_SPINS:-}" ] && QUALIFY+=(--order-spins "$DEVCHECK_ORDER_SPINS")
qualify_start=$(elapsed_ms)
qualify_end=$((qualify_start / 1000 + ${DEVCHECK_BUDGET_QUALIFY:-280}))
if [ -n "${DEVCHECK_VARIANTS:-}" ]; then
    read -r -a VARIANTS <<<"$DEVCHECK_VARIANTS"
else
    {
        echo "#### variants: ${QUALIFY[*]} --list-variants"
        timeout -k 5 60 "${QUALIFY[@]}" --list-variants 2>&1 | tee "$WORK/variants.txt"
    } >>"$OUT/qualify.txt"
    mapfile -t VARIANTS < <(grep -v '^qualify:' "$WORK/variants.txt" | cut -f 1)
    [ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(default)
fi
verdict="failed" why="no variant passed (${#VARIANTS[@]} tried in turn)"
for i in "${!VARIANTS[@]}"; do
    v="${VARIANTS[$i]}"
    left=$((qualify_end - $(elapsed_ms) / 1000))
    want=${DEVCHECK_BUDGET_VARIANT:-60}
    [ "$left" -lt "$want" ] && want=$left
    vfrom=$(stat -c %s "$OUT/qualify.txt")
    run_stage "qualify:$v" "$want" "$OUT/qualify.txt" \
        "${QUALIFY[@]}" --records "$WORK/runs" --qmd-variant "$v" --owner-timeout "$OWNER_TIMEOUT"
    vrc=$RC vnote=$NOTE
    # the ordering probe's verdicts (qualify.py's `order CASE RESULT NOTE` lines), one line each
    while read -r _ case result note; do
        line "order:$v:$case" "$result" - - "$note"
    done < <(tail -c +"$((vfrom + 1))" "$OUT/qualify.txt" | grep '^order ')
    [ "$vrc" -eq -1 ] || dmesg_after "qualify:$v"
    if [ "$vrc" -eq 0 ]; then verdict="passed" why="variant $v"; break; fi
    if [ "$vrc" -eq 2 ]; then verdict="could-not-run" why="$vnote"; break; fi
    if [ "$vrc" -eq -1 ]; then why="no time left after $i of ${#VARIANTS[@]} variants"; break; fi
done
for v in "${VARIANTS[@]:$((i + 1))}"; do
    line "qualify:$v" "not-run" 0 - "$([ "$verdict" = passed ] && echo "an earlier variant passed" || echo "$why")"
done
line qualify "$verdict" $(($(elapsed_ms) - qualify_start)) "${DEVCHECK_BUDGET_QUALIFY:-280}" "$why"

STAGE="(done)"
line total "$([ "$verdict" = passed ] && echo passed || echo failed)" "$(elapsed_ms)" "$DEADLINE" \
    "files: $(cd "$OUT" && ls | tr '\n' ' ')"
[ "$verdict" = passed ]
