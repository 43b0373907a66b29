"""Benchmark: the generated code against numpy on one thread, where work is large (issue 18).

Two workloads, each run by the x86-64 executables (the baseline x86_64, SSE2; the x86_64-v3
level, AVX2; the x86_64-v4 level, AVX-512; never FMA: the same bits) and by numpy (OPENBLAS_NUM_THREADS=1; numpy's
own sums, so its bits may differ; the executable's are the contract's, checked here against the
reference interpreter):

- `lsq 100k`: one owner's step of the least-squares learner with momentum, 100,000 coordinates,
  8 samples (bench/distributed.py's big learner): 8 dots of 100,000, the gradient, the update.
  Bound by memory bandwidth, as numpy's is.
- `matvec`: a learner whose loss is ||W x_i||^2 / 2 over 256 samples, W 64 x 256, so its step is
  matrix products (W x_i for every sample, then outer products for the gradient). numpy does the
  same flops as two dgemm calls (W @ X^T, then (W X^T) X); its rate is the BLAS's.

Each row: time per step (a run of N steps minus a run of 0 steps; numpy's N steps in process),
the least over `--rounds` rounds, each round timing numpy and then every executable, so that
both sides see the host as it is then (this VM's neighbours make single runs up to 1.7x
slower); the rate in GFLOP/s of the arithmetic the step does (multiplies and adds of the
products, counted the same way for both); the executable's throughput as a fraction of numpy's
(least time to least time), and the same ratio within each round (its least, median, most).

    python bench/codegen.py [--steps N] [--rounds R] [--targets x86_64,x86_64-v3,x86_64-v4] [--large] [--quick]
    python bench/codegen.py --instructions [--tree DIR]

`--instructions` counts instead of timing: the guest instructions one step executes (a run of 2
steps minus a run of 1, under qemu-x86_64 and qemu-aarch64 with -singlestep -d exec, each
instruction one log line), on smaller sizes (lsq 4,000 coordinates, matvec 16 x 64 over 16
samples), for both ISAs: AArch64 is measurable here only so. `--tree DIR` builds with the alphac
in DIR (a checkout of an earlier commit, say) for a before/after table.

`--large` adds a third workload, `matvec 512x1024, 64 samples`: W is 4 MiB, more than a core's L2
on most servers, and the generated code reads all of W once per block of samples (it is not
blocked for the caches), so this row shows what that costs against the BLAS's blocked dgemm.

`--quick` (what the tests run, so that the benchmark cannot silently break) uses small sizes and
one run each: its figures are not the ones to quote.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np                                     # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from alphac.build import build_learner                 # noqa: E402
from alphac.driver import compile_file                 # noqa: E402


def lsq_source(tmp: Path, n: int = 100_000, samples: int = 8) -> tuple[Path, dict]:
    """bench/distributed.py's big learner (its deployments unused here), and numpy's step."""
    from distributed import big_learner
    src = big_learner(tmp, n, samples)
    x, y = np.load(tmp / "x.npy"), np.load(tmp / "y.npy")
    w, v = np.zeros(n), np.zeros(n)

    def step():
        nonlocal w, v
        r = x @ w - y                       # the 8 dots
        g = (r @ x) / samples               # the gradient's sum over samples, then the mean
        v = 0.9 * v + g
        w = w - 0.001 * v

    def reset():
        nonlocal w, v
        w, v = np.zeros(n), np.zeros(n)
    return src, {"step": step, "reset": reset, "flops": 4 * samples * n + 4 * n}


def matvec_source(tmp: Path, rows: int = 64, cols: int = 256, samples: int = 256) -> tuple[Path, dict]:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((samples, cols))
    w0 = rng.standard_normal((rows, cols)) / np.sqrt(cols)
    np.save(tmp / "mx.npy", x)
    np.save(tmp / "mw.npy", w0)
    src = tmp / "matvec.alpha"
    src.write_text(f"""learner matvec
data x = load("mx.npy")
const W0 = load("mw.npy")
param W: f64[{rows}, {cols}] = W0
loss(i) {{
  let z = W @ x[i]
  0.5 * dot(z, z)
}}
update {{
  W = W - 0.0001 * grad(W)
}}
""")
    w = w0.copy()

    def step():
        nonlocal w
        z = w @ x.T                          # rows x samples
        g = (z @ x) / samples                # sum over samples of outer(z_i, x_i)
        w = w - 0.0001 * g

    def reset():
        nonlocal w
        w = w0.copy()
    return src, {"step": step, "reset": reset, "flops": 4 * rows * cols * samples}


ROUNDS = 9


def exe_run(exe: Path, steps: int, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run([str(exe), "--steps", str(steps)], cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - t


def numpy_run(ref: dict, steps: int) -> float:
    """numpy's time per step over `steps` steps from the initial state (as the executable's)."""
    ref["reset"]()
    step, t = ref["step"], time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps


def interleaved(exes: dict[str, Path], ref: dict, steps: int, cwd: Path) -> dict:
    """Per step, numpy's and each executable's, measured in ROUNDS rounds: each round times
    numpy's N steps, then each executable's run of 0 steps and of N, so that every side sees the
    host as it is then (this VM's neighbours move a single run up to 1.7x). Returns, per
    target, (the least time per step over the rounds, numpy's least, the per-round ratios)."""
    numpy_run(ref, 1)
    per_round = []
    for _ in range(ROUNDS):
        b = numpy_run(ref, steps)
        a = {t: max(0.0, exe_run(e, steps, cwd) - exe_run(e, 0, cwd)) / steps for t, e in exes.items()}
        per_round.append((b, a))
    nb = min(b for b, _ in per_round)
    return {t: (min(a[t] for _, a in per_round), nb,
                sorted(b / a[t] for b, a in per_round if a[t] > 0)) for t in exes}


def bits_agree(src: Path, exe: Path, cwd: Path, steps: int = 2) -> bool:
    from alphac.ir.interp import format_state, initial_state, step
    lr = compile_file(src).learner
    s = initial_state(lr)
    for _ in range(steps):
        s = step(lr, s)
    out = subprocess.run([str(exe), "--steps", str(steps)], cwd=cwd, capture_output=True,
                         text=True, check=True).stdout
    return out == format_state(lr, s)


BUILD = """
import sys
from alphac.build import build_learner
from alphac.driver import compile_file
open(sys.argv[3], "wb").write(build_learner(compile_file(sys.argv[1]).learner, sys.argv[2]).elf)
"""


def guest_instructions(exe: Path, isa: str, steps: int, cwd: Path) -> int:
    qemu = subprocess.Popen([f"qemu-{isa}", "-singlestep", "-d", "exec,nochain", "-D", "/dev/stderr",
                             str(exe), "--steps", str(steps)], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    n = sum(1 for line in qemu.stderr if line.startswith(b"Trace"))
    if qemu.wait() != 0:
        raise SystemExit(f"{exe} --steps {steps} failed under qemu-{isa}")
    return n


def instructions(tree: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name, make, size in (("lsq 4k", lsq_source, {"n": 4000}),
                                 ("matvec 16x64, 16 samples", matvec_source,
                                  {"rows": 16, "cols": 64, "samples": 16})):
            src, ref = make(tmp, **size)
            for isa in ("x86_64", "aarch64"):
                exe = tmp / f"exe.{isa}"
                subprocess.run([sys.executable, "-c", BUILD, str(src), isa, str(exe)], check=True,
                               cwd=tmp, env=dict(os.environ, PYTHONPATH=str(tree)))
                exe.chmod(0o755)
                per_step = guest_instructions(exe, isa, 2, tmp) - guest_instructions(exe, isa, 1, tmp)
                rows.append((name, isa, per_step, ref["flops"]))
    print(f"guest instructions per step, alphac from {tree}\n")
    print("| workload | ISA | instructions per step | per flop |")
    print("|---|---|---|---|")
    for name, isa, n, flops in rows:
        print(f"| {name} | {isa} | {n} | {n / flops:.2f} |")


def main() -> None:
    global ROUNDS
    from alphac.targets import host_runs
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--targets", default="x86_64,x86_64-v3,x86_64-v4",
                    help="the executables' targets, comma-separated (default x86_64,x86_64-v3,x86_64-v4: "
                         "a level this CPU lacks is left out, and said so)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"timing rounds (default {ROUNDS})")
    ap.add_argument("--large", action="store_true",
                    help="also time matvec 512x1024 over 64 samples (W of 4 MiB, beyond L2)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 steps, one run: a smoke run")
    ap.add_argument("--instructions", action="store_true",
                    help="count each ISA's guest instructions per step under qemu instead of timing")
    ap.add_argument("--tree", type=Path, default=ROOT, help="build with the alphac in this checkout")
    args = ap.parse_args()
    if args.instructions:
        instructions(args.tree.resolve())
        return
    ROUNDS = max(1, args.rounds)
    targets = args.targets.split(",")
    for level, what in (("x86_64-v3", "AVX2"), ("x86_64-v4", "AVX-512")):
        if level in targets and not host_runs(level):
            print(f"{level} not timed: this CPU has no {what} (its executables would refuse cpu-level)\n")
            targets.remove(level)
    workloads = [("lsq 100k", lsq_source, {}), ("matvec 64x256, 256 samples", matvec_source, {})]
    if args.large:
        workloads.append(("matvec 512x1024, 64 samples", matvec_source,
                          {"rows": 512, "cols": 1024, "samples": 64}))
    if args.quick:
        args.steps, ROUNDS = 3, 1
        workloads = [("lsq 1k", lsq_source, {"n": 1000}),
                     ("matvec 8x16, 8 samples", matvec_source, {"rows": 8, "cols": 16, "samples": 8})]
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name, make, size in workloads:
            src, ref = make(tmp, **size)
            lr = compile_file(src).learner
            exes = {}
            for target in targets:
                exe = exes[target] = tmp / f"exe.{target}"
                exe.write_bytes(build_learner(lr, target).elf)
                os.chmod(exe, 0o755)
            same = {t: bits_agree(src, e, tmp) for t, e in exes.items()}
            for target, (a, b, ratios) in interleaved(exes, ref, args.steps, tmp).items():
                rows.append((name, target, a, b, ref["flops"], ratios, same[target]))
    print(f"generated code against numpy {np.__version__}, one thread, in one run: {ROUNDS} rounds "
          f"of {args.steps} steps, each round timing numpy then every executable\n")
    print("| workload | target | alphac ms/step | alphac GFLOP/s | numpy ms/step | numpy GFLOP/s | "
          "throughput, alphac to numpy | per round: least, median, most | alphac bits = interpreter |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, target, a, b, flops, ratios, same in rows:
        spread = f"{ratios[0]:.2f}x, {ratios[len(ratios) // 2]:.2f}x, {ratios[-1]:.2f}x" if ratios else "-"
        print(f"| {name} | {target} | {a * 1e3:.3f} | {flops / a / 1e9 if a else 0:.2f} | "
              f"{b * 1e3:.3f} | {flops / b / 1e9:.2f} | {b / a if a else 0:.2f}x | {spread} | {same} |")

if __name__ == "__main__":
    main()
