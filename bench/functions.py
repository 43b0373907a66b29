"""Benchmark: nanoseconds per call of the contract's functions in our executables, against
glibc's libm (not correctly rounded) and, when a CORE-MATH checkout is given, CORE-MATH
(correctly rounded), side by side in one run.

Every contender is the same filter program: read 8192 binary64 inputs, call the function on
each R times, write the results. Ours is alphac.tools.mathexe (the code a learner's executable
gets); the C ones are built here with gcc -O2 (libm: -lm; CORE-MATH: its src/binary64/<f>/<f>.c,
with -march=native so that it has its FMA). ns/call = (time(R = 1 + K) - time(R = 1)) / (K n),
time being the child's CPU time (user + system, from getrusage), so start-up and I/O cancel and
a loaded machine's waits do not count; the contenders of a function run interleaved, one pass
each a round, `--rounds` rounds, and each figure is the median over the rounds with its spread
(min-max) after it; a ratio is the median of the rounds' ratios. The last columns are the ratio to glibc and
how many of the n results differ from ours in their bits (ours are correctly rounded: a
difference is the other library's misrounding). For the functions alphac.math.lanes renders,
the vector ones too (x86_64-v3's 4 lanes, v4's 8, where this CPU runs them): ns per element,
and their results must be the scalar's, bit for bit; with --levels, the scalar function built
at v3 and v4 too (its code at those levels: VEX's three-operand forms), the same bits.

    python bench/functions.py [--core-math PATH] [--repeat K] [--levels] [FUNCTION ...]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alphac.math import ELEMENTARY                          # noqa: E402
from alphac.tools.mathexe import build                      # noqa: E402
from alphac.math.lanes import FAST as LANE_FAST              # noqa: E402
from alphac.targets import host_runs                         # noqa: E402

N = 8192
RANGES = {"exp": (-700.0, 700.0), "log": (1e-3, 1e3), "log1p": (-0.9, 100.0),
          "expm1": (-30.0, 30.0), "tanh": (-10.0, 10.0), "sin": (-10.0, 10.0), "cos": (-10.0, 10.0)}
PAIRS = {"pow": ((1e-2, 1e2), (-10.0, 10.0))}             # two arguments: x's range, y's range

C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
double %(fn)s(%(params)s);
static double in[%(arity)d * %(n)d], out[%(n)d];
int main(int argc, char **argv) {
    long repeat = argc > 1 ? atol(argv[1]) : 1;
    size_t got = 0;
    while (got < sizeof in) {
        ssize_t k = read(0, (char *)in + got, sizeof in - got);
        if (k <= 0) break;
        got += k;
    }
    size_t n = got / (8 * %(arity)d);
    for (long r = 0; r < repeat; r++)
        for (size_t i = 0; i < n; i++) out[i] = %(call)s;
    fwrite(out, 8, n, stdout);
    return 0;
}
"""


def cpu_time(cmd, data, repeat):
    """The child's user + system seconds, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd + [str(repeat)], input=data, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, r.stdout


def interleaved(cmds: dict, data, k, rounds):
    """{name: (ns per call in each round, the outputs)}: one pass of each command a round."""
    got = {name: ([], None) for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            t1, out = cpu_time(cmd, data, 1)
            tk, _ = cpu_time(cmd, data, 1 + k)
            got[name] = (got[name][0] + [(tk - t1) / (k * N) * 1e9], np.frombuffer(out, dtype="<u8"))
    return got


def figure(xs) -> str:
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def ratio(xs, ys) -> str:
    return f"{statistics.median([x / y for x, y in zip(xs, ys)]):.2f}x"


def c_program(tmp: Path, name: str, fn: str, extra: list[str], flags: list[str]) -> list[str] | None:
    src = tmp / f"{fn}_main.c"
    two = name in PAIRS
    src.write_text(C_MAIN % {"fn": fn, "n": N, "arity": 2 if two else 1,
                             "params": "double, double" if two else "double",
                             "call": f"{fn}(in[2 * i], in[2 * i + 1])" if two else f"{fn}(in[i])"})
    exe = tmp / f"{fn}.exe"
    r = subprocess.run(["gcc", "-O2", *flags, str(src), *extra, "-o", str(exe), "-lm"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  ({fn}: gcc failed: {r.stderr.strip().splitlines()[-1:]})")
        return None
    return [str(exe)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core-math", help="a CORE-MATH checkout (its src/binary64 is compiled)")
    ap.add_argument("--repeat", type=int, default=200, help="K, the extra passes timed")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median, spread)")
    ap.add_argument("--quick", action="store_true", help="one pass: a smoke run (CI)")
    ap.add_argument("--levels", action="store_true",
                    help="the scalar function built at x86_64-v3 and v4 too (VEX's three-operand forms)")
    ap.add_argument("functions", nargs="*", help="default: every correctly rounded function, pow too")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.rounds = 1, 1
    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        sys.exit("bench/functions.py needs an x86-64 host with gcc")
    rng = np.random.default_rng(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in args.functions or ELEMENTARY + tuple(PAIRS):
            if name in PAIRS:
                (xl, xh), (yl, yh) = PAIRS[name]
                data = np.stack([rng.uniform(xl, xh, N), rng.uniform(yl, yh, N)], 1).astype("<f8").tobytes()
            else:
                data = rng.uniform(*RANGES[name], N).astype("<f8").tobytes()
            cmds = {"ours": [str(tmp / f"alphac_{name}")], "libm": c_program(tmp, name, name, [], [])}
            (tmp / f"alphac_{name}").write_bytes(build(name, "x86_64"))
            lanes = [(level, w) for level, w in (("x86_64-v3", 4), ("x86_64-v4", 8))     # alphac.math.lanes
                     if name in LANE_FAST and host_runs(level)]
            for level, w in lanes:
                cmds[level] = [str(tmp / f"alphac_{name}_w{w}")]
                (tmp / f"alphac_{name}_w{w}").write_bytes(build(name, level, w))
            for level in [lv for lv in ("x86_64-v3", "x86_64-v4") if args.levels and host_runs(lv)]:
                cmds[f"{level} scalar"] = [str(tmp / f"alphac_{name}_{level}")]
                (tmp / f"alphac_{name}_{level}").write_bytes(build(name, level))
            cm = Path(args.core_math or "") / "src/binary64" / name / f"{name}.c"
            if args.core_math and cm.exists():
                exe = c_program(tmp, name, f"cr_{name}", [str(cm)], ["-march=native", f"-I{cm.parent}"])
                if exe:
                    cmds["core-math"] = exe
            for c in cmds.values():
                os.chmod(c[0], 0o755)
            t = interleaved(cmds, data, args.repeat, args.rounds)
            span = " ".join(f"{lo:g}..{hi:g}" for lo, hi in PAIRS.get(name, (RANGES.get(name),)))
            (ours, r_ours), (libm, r_libm) = t["ours"], t["libm"]
            row = [name, span, figure(ours), figure(libm), ratio(ours, libm), str(int((r_ours != r_libm).sum()))]
            for level, w in (("x86_64-v3", 4), ("x86_64-v4", 8)):
                if level not in t:
                    row.append("-")
                    continue
                assert (t[level][1] == r_ours).all(), f"{name}: the {w}-lane results differ from the scalar's"
                row.append(f"{figure(t[level][0])} ({ratio(t[level][0], libm)})")
            for level in ("x86_64-v3", "x86_64-v4") if args.levels else ():
                got = t.get(f"{level} scalar")
                assert got is None or (got[1] == r_ours).all(), f"{name}: {level}'s scalar results differ"
                row.append(f"{figure(got[0])} ({ratio(got[0], libm)})" if got else "-")
            if "core-math" in t:
                row += [figure(t["core-math"][0]), str(int((r_ours != t["core-math"][1]).sum()))]
            rows.append(row)
            print(f"  {name} done", file=sys.stderr)
    head = ["function", "inputs", "alphac ns", "glibc ns", "ours/glibc", "differ (glibc)",
            "v3 4 lanes ns (/glibc)", "v4 8 lanes ns (/glibc)"]
    if args.levels:
        head += ["v3 scalar ns (/glibc)", "v4 scalar ns (/glibc)"]
    if args.core_math:
        head += ["CORE-MATH ns", "differ (CORE-MATH)"]
    rows = [r + [""] * (len(head) - len(r)) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print(f"ns per call (CPU time), n = {N} inputs uniform over the range, K = {args.repeat} passes, "
          f"median [min-max] of {args.rounds} interleaved rounds")
    for r in [head] + rows:
        print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
