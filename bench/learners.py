"""Benchmark: the reference learners as executables, against the reference interpreter and numpy.

For each learner: compile time (front end + x86-64 back end), executable size, and the time per
training step of (a) the executable, (b) the reference interpreter, (c) numpy doing the same
arithmetic (vectorized over samples and coordinates; its sums are numpy's, so its bits may differ
— the last column says whether they do). Times are medians of repeated runs; the executable's
per-step time excludes its start-up (a run with --steps 0 is subtracted).

    python bench/learners.py [--steps N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alphac.build import build_learner                     # noqa: E402
from alphac.driver import compile_file                      # noqa: E402
from alphac.ir.interp import format_state, initial_state, step  # noqa: E402

NAMES = ["scalar_regression", "two_coordinate", "independent_state", "lsq_momentum", "lsq_adam"]


def numpy_step(name, lr):
    """One step of `name` in numpy, state as float64 arrays."""
    data = {d.name: np.array(d.values).reshape(d.shape) for d in lr.data}
    if name == "scalar_regression":
        x, y = data["x"], data["y"]
        def f(s):
            g = ((s["a"] * x - y) * x).sum() / len(x)
            s["a"] = s["a"] - 0.02 * g
        return f
    if name == "two_coordinate":
        x, y = data["x"], data["y"]
        def f(s):
            r = (s["w"][0] * x + s["w"][1]) - y
            g = np.array([(r * x).sum(), r.sum()]) / len(x)
            s["w"] = s["w"] - 0.05 * g
        return f
    if name == "independent_state":
        a = np.array(lr.consts[0].values)
        def f(s):
            s["s"] = 0.5 * (s["s"] + a / s["s"])
        return f
    x, y = data["x"], data["y"]
    if name == "lsq_momentum":
        def f(s):
            r = x @ s["w"] - y
            g = (r[:, None] * x).sum(axis=0) / len(y)
            s["v"] = 0.9 * s["v"] + g
            s["w"] = s["w"] - 0.05 * s["v"]
        return f
    b1, b2 = 0.9, 0.999
    def f(s):
        r = x @ s["w"] - y
        g = (r[:, None] * x).sum(axis=0) / len(y)
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * (g * g)
        s["p1"] = s["p1"] * b1
        s["p2"] = s["p2"] * b2
        s["w"] = s["w"] - (0.05 * (s["m"] / (1 - s["p1"]))) / (np.sqrt(s["v"] / (1 - s["p2"])) + 1e-8)
    return f


def timed(fn, repeat=5):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200000, help="steps for the executable timing")
    ap.add_argument("--quick", action="store_true", help="a few steps of each: a smoke run (CI)")
    args = ap.parse_args()
    if args.quick:
        args.steps = 100
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES:
            path = ROOT / "examples" / f"{name}.alpha"
            t0 = time.perf_counter()
            lr = compile_file(path).learner
            img = build_learner(lr, "x86_64")
            compile_s = time.perf_counter() - t0
            exe = Path(tmp) / name
            exe.write_bytes(img.elf)
            os.chmod(exe, 0o755)
            run = lambda n: subprocess.run([str(exe), "--steps", str(n)], capture_output=True, check=True)
            base = timed(lambda: run(0))
            exe_step = max(0.0, timed(lambda: run(args.steps)) - base) / args.steps
            isteps = 5 if args.quick else 200
            st = initial_state(lr)
            interp_step = timed(lambda: [step(lr, st) for _ in range(isteps)], 3) / isteps
            f = numpy_step(name, lr)
            s = {k: np.array(v) if len(v) > 1 else np.float64(v[0]) for k, v in initial_state(lr).items()}
            npsteps = 20 if args.quick else 2000
            np_step = timed(lambda: [f(s) for _ in range(npsteps)], 3) / npsteps
            # do numpy's bits agree with the contract after 5 steps?
            s5 = {k: np.array(v) if len(v) > 1 else np.float64(v[0]) for k, v in initial_state(lr).items()}
            for _ in range(5):
                f(s5)
            st5 = initial_state(lr)
            for _ in range(5):
                st5 = step(lr, st5)
            want = format_state(lr, st5)
            got_state = {k: tuple(np.atleast_1d(v).tolist()) for k, v in s5.items()}
            same = format_state(lr, got_state) == want
            rows.append((name, compile_s * 1e3, len(img.elf), exe_step * 1e9, interp_step * 1e9,
                         np_step * 1e9, "yes" if same else "no"))
    head = ("learner", "compile ms", "exe bytes", "exe ns/step", "interp ns/step",
            "numpy ns/step", "numpy bits equal")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r[0]} | {r[1]:.0f} | {r[2]} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.0f} | {r[6]} |")


if __name__ == "__main__":
    main()
