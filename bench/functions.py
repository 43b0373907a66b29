"""Benchmark: nanoseconds per call of the contract's functions in our executables, against
glibc's libm (not correctly rounded) and, when a CORE-MATH checkout is given, CORE-MATH
(correctly rounded), side by side in one run.

Every contender is the same filter program: read 8192 binary64 inputs, call the function on
each R times, write the results. Ours is alphac.tools.mathexe (the code a learner's executable
gets); the C ones are built here with gcc -O2 (libm: -lm; CORE-MATH: its src/binary64/<f>/<f>.c,
with -march=native so that it has its FMA). ns/call = (time(R = 1 + K) - time(R = 1)) / (K n),
the best of 5 runs each, so start-up and I/O cancel. The last columns are the ratio to glibc and
how many of the n results differ from ours in their bits (ours are correctly rounded: a
difference is the other library's misrounding). For the functions alphac.math.lanes renders,
the vector ones too (x86_64-v3's 4 lanes, v4's 8, where this CPU runs them): ns per element,
and their results must be the scalar's, bit for bit.

    python bench/functions.py [--core-math PATH] [--repeat K] [FUNCTION ...]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
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


def best_time(cmd, data, repeat):
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        r = subprocess.run(cmd + [str(repeat)], input=data, capture_output=True)
        best = min(best, time.perf_counter() - t)
        assert r.returncode == 0, r.stderr
    return best, r.stdout


def ns_per_call(cmd, data, k):
    t1, out = best_time(cmd, data, 1)
    tk, _ = best_time(cmd, data, 1 + k)
    return (tk - t1) / (k * N) * 1e9, np.frombuffer(out, dtype="<u8")


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
    ap.add_argument("--quick", action="store_true", help="one pass: a smoke run (CI)")
    ap.add_argument("functions", nargs="*", help="default: every correctly rounded function, pow too")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
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
            ours = tmp / f"alphac_{name}"
            ours.write_bytes(build(name, "x86_64"))
            os.chmod(ours, 0o755)
            t_ours, r_ours = ns_per_call([str(ours)], data, args.repeat)
            libm = c_program(tmp, name, name, [], [])
            t_libm, r_libm = ns_per_call(libm, data, args.repeat)
            span = " ".join(f"{lo:g}..{hi:g}" for lo, hi in PAIRS.get(name, (RANGES.get(name),)))
            row = [name, span, f"{t_ours:.1f}",
                   f"{t_libm:.1f}", f"{t_ours / t_libm:.2f}x", str(int((r_ours != r_libm).sum()))]
            for level, lanes in (("x86_64-v3", 4), ("x86_64-v4", 8)):     # alphac.math.lanes
                if name not in LANE_FAST or not host_runs(level):
                    row.append("-")
                    continue
                vec = tmp / f"alphac_{name}_w{lanes}"
                vec.write_bytes(build(name, level, lanes))
                os.chmod(vec, 0o755)
                t_vec, r_vec = ns_per_call([str(vec)], data, args.repeat)
                assert (r_vec == r_ours).all(), f"{name}: the {lanes}-lane results differ from the scalar's"
                row.append(f"{t_vec:.1f} ({t_vec / t_libm:.2f}x)")
            cm = Path(args.core_math or "") / "src/binary64" / name / f"{name}.c"
            if args.core_math and cm.exists():
                exe = c_program(tmp, name, f"cr_{name}", [str(cm)], ["-march=native", f"-I{cm.parent}"])
                if exe:
                    t_cm, r_cm = ns_per_call(exe, data, args.repeat)
                    row += [f"{t_cm:.1f}", str(int((r_ours != r_cm).sum()))]
            rows.append(row)
            print(f"  {name} done", file=sys.stderr)
    head = ["function", "inputs", "alphac ns", "glibc ns", "ours/glibc", "differ (glibc)",
            "v3 4 lanes ns (/glibc)", "v4 8 lanes ns (/glibc)"]
    if any(len(r) > 8 for r in rows):
        head += ["CORE-MATH ns", "differ (CORE-MATH)"]
    rows = [r + [""] * (len(head) - len(r)) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print(f"ns per call, n = {N} inputs uniform over the range, K = {args.repeat} passes")
    for r in [head] + rows:
        print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
