"""Benchmark: the generated code against numpy on one thread, where work is large (issue 18).

Two workloads, each run by the x86-64 executables (the baseline x86_64, SSE2; the x86_64-v3
level, AVX2; the x86_64-v4 level, AVX-512; never FMA: the same bits) and by numpy (OPENBLAS_NUM_THREADS=1; numpy's
own sums, so its bits may differ; the executable's are the contract's, checked here against the
reference interpreter):

- `lsq 100k`: one owner's step of the least-squares learner with momentum, 100,000 coordinates,
  8 samples (bench/distributed.py's big learner): 8 dots of 100,000, the gradient, the update.
  Bound by memory bandwidth, as numpy's is.
- `data 100k x 100`: bench/data.py's learner (`w: f64[100]`, loss (dot(w, x[i]) - y[i])^2 / 2,
  a plain step) over 100,000 samples of 100 coordinates loaded at run time (`load("x.npy")`,
  80 MB: beyond the caches), one owner: every step reads all the rows (issue 43: "data beyond
  the cache"). numpy does the step as two matrix-vector products (x @ w, then r @ x), so it reads
  the 80 MB twice; the executable once, a block of samples at a time.
- `matvec`: a learner whose loss is ||W x_i||^2 / 2 over 256 samples, W 64 x 256, so its step is
  matrix products (W x_i for every sample, then outer products for the gradient). numpy does the
  same flops as two dgemm calls (W @ X^T, then (W X^T) X); its rate is the BLAS's.

Each row: time per step (a run of W + N steps minus a run of W steps, W = 2 warm-up steps, so
that start-up, loading and warm-up cancel; numpy's N steps in process after a warm-up step), in
`--rounds` interleaved rounds, each timing numpy, the same-bits C and then every executable, so
that every side sees the host as it is then (this VM's neighbours make single runs up to 1.7x
slower). Printed: the median wall time a step and its spread (least..most over the rounds); the
median CPU time a step (user + system, from getrusage of the child processes: on a loaded host it
counts only the cycles the process got, so it is steadier than the wall time, and it is what the
ratios use beside the wall ones); the rate in GFLOP/s of the arithmetic the step does (multiplies
and adds of the products, counted the same way for every side); the throughput ratios, alphac to
numpy and alphac to the C: the median of the per-round ratios of wall times, and for the C also
the ratio of the median CPU times. numpy's CPU time is this process's (user + system, from
getrusage) over its steps, and its ratio the ratio of the median CPU times; the header names
numpy's BLAS, its kernels and its threads (threadpoolctl; without it, it says so).

The same-bits C anchor (lsq rows; issue 43): the step written in C with exactly alphac's
operations in alphac's order (each dot a left fold over the coordinates, the gradient sum a left
fold over the samples from the first, the mean a division by the count, then the update's two
statements), compiled at run time by the machine's gcc with `-O3 -march=native -fno-fast-math
-ffp-contract=off` (no reassociation, no FMA: the same bits) and the sizes as constants (so the
dots' sums stay in registers), one thread, timed as the executables are. Its printed state must equal the executable's, bit for bit (the `C bits = alphac` column):
else it is no anchor. Without gcc its cells say so.

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
import resource
import shutil
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
    return src, {"step": step, "reset": reset, "flops": 4 * samples * n + 4 * n, "c": (samples, n)}


def data_source(tmp: Path, rows: int = 100_000) -> tuple[Path, dict]:
    """bench/data.py's learner and files (100 coordinates a sample), in a folder of their own."""
    from data import SOURCE, write
    d = tmp / "data"
    d.mkdir(exist_ok=True)
    write(d, rows, 1)
    src = d / "big.alpha"
    src.write_text(SOURCE.format(owners=1))
    x, y = np.load(d / "x.npy"), np.load(d / "y.npy")
    w = np.zeros(100)

    def step():
        nonlocal w
        r = x @ w - y
        w = w - 0.01 * ((r @ x) / rows)

    def reset():
        nonlocal w
        w = np.zeros(100)
    return src, {"step": step, "reset": reset, "flops": 4 * rows * 100}


def blas() -> str:
    """numpy's BLAS and its threads, as threadpoolctl reports them (or that it cannot)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "numpy's BLAS unknown (threadpoolctl is not installed; OPENBLAS_NUM_THREADS=1 set)"
    pools = [f"{p.get('internal_api')} {p.get('version')} ({p.get('architecture', '?')} kernels), "
             f"{p.get('num_threads')} thread(s)" for p in threadpool_info() if p.get("user_api") == "blas"]
    return "numpy's BLAS: " + ("; ".join(pools) or "none loaded")


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
WARMUP = 2                                             # untimed steps in both runs of a difference

LSQ_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
/* The least-squares step with alphac's operations in alphac's order (bench/codegen.py). */
static double *npy(const char *path, long count) {
    FILE *f = fopen(path, "rb");
    double *d = malloc(count * sizeof(double));
    if (!f || !d || fseek(f, -(long)(count * sizeof(double)), SEEK_END) != 0
        || fread(d, sizeof(double), count, f) != (size_t)count) { fprintf(stderr, "%s\n", path); exit(2); }
    fclose(f);
    return d;
}
int main(int argc, char **argv) {     /* S samples, N coordinates: compile-time constants */
    long n = N, steps = argc > 1 ? atol(argv[1]) : 0;
    double *x = npy("x.npy", S * n), *y = npy("y.npy", S);
    double *w = calloc(n, sizeof(double)), *v = calloc(n, sizeof(double)), r[S];
    for (long t = 0; t < steps; t++) {
        for (long i = 0; i < S; i++) r[i] = -0.0;
        for (long j = 0; j < n; j++)                    /* the S dots, each a left fold over j */
            for (long i = 0; i < S; i++) r[i] += w[j] * x[i * n + j];
        for (long i = 0; i < S; i++) r[i] -= y[i];
        for (long j = 0; j < n; j++) {                  /* the sum over samples, the mean, the update */
            double g = r[0] * x[j];
            for (long i = 1; i < S; i++) g += r[i] * x[i * n + j];
            v[j] = 0.9 * v[j] + g / (double)S;
            w[j] = w[j] - 0.001 * v[j];
        }
    }
    for (long j = 0; j < n; j++) { uint64_t b; memcpy(&b, &w[j], 8); printf("w[%ld] %016llx\n", j, (unsigned long long)b); }
    for (long j = 0; j < n; j++) { uint64_t b; memcpy(&b, &v[j], 8); printf("v[%ld] %016llx\n", j, (unsigned long long)b); }
    return 0;
}
"""
CFLAGS = ["-O3", "-march=native", "-fno-fast-math", "-ffp-contract=off"]


def c_anchor(tmp: Path, samples: int, n: int) -> list[str] | str:
    """The same-bits C's command line (`steps` appended), or why there is none."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return "no gcc on this machine"
    (tmp / "lsq.c").write_text(LSQ_C)
    r = subprocess.run([gcc, *CFLAGS, f"-DS={samples}", f"-DN={n}", "-o", str(tmp / "lsq_c"), str(tmp / "lsq.c")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "gcc failed: " + r.stderr.strip().splitlines()[-1]
    return [str(tmp / "lsq_c")]


def exe_run(cmd: list[str], steps: int, cwd: Path) -> tuple[float, float]:
    """The wall time and the CPU time (user + system of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([*cmd, str(steps)], cwd=cwd, capture_output=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def per_step(cmd: list[str], steps: int, cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds a step: a run of WARMUP + steps minus a run of WARMUP."""
    (w1, c1), (w0, c0) = exe_run(cmd, WARMUP + steps, cwd), exe_run(cmd, WARMUP, cwd)
    return max(0.0, w1 - w0) / steps, max(0.0, c1 - c0) / steps


def median_spread(xs: list[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    mid = len(s) // 2
    return (s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2), s[0], s[-1]


def numpy_run(ref: dict, steps: int) -> tuple[float, float]:
    """numpy's wall and CPU time (user + system of this process) per step over `steps` steps
    from the initial state (as the executable's)."""
    ref["reset"]()
    step, before, t = ref["step"], resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(steps):
        step()
    wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
    return wall / steps, ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / steps


def interleaved(sides: dict[str, list[str]], ref: dict, steps: int, cwd: Path) -> dict:
    """Per round (ROUNDS of them), numpy's N steps, then each side's (the C anchor's, the
    executables') wall and CPU time a step, so that every side sees the host as it is then (this
    VM's neighbours move a single run up to 1.7x). Returns {"numpy": [(wall, cpu)...], side:
    [(wall, cpu)...]}, a list entry per round."""
    numpy_run(ref, 1)
    out: dict = {"numpy": [], **{k: [] for k in sides}}
    for _ in range(ROUNDS):
        out["numpy"].append(numpy_run(ref, steps))
        for k, cmd in sides.items():
            out[k].append(per_step(cmd, steps, cwd))
    return out


def printed(cmd: list[str], cwd: Path, steps: int = 2) -> str:
    return subprocess.run([*cmd, str(steps)], cwd=cwd, capture_output=True, text=True, check=True).stdout


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
    workloads = [("lsq 100k", lsq_source, {}), ("data 100k x 100 (80 MB)", data_source, {}),
                 ("matvec 64x256, 256 samples", matvec_source, {})]
    if args.large:
        workloads.append(("matvec 512x1024, 64 samples", matvec_source,
                          {"rows": 512, "cols": 1024, "samples": 64}))
    if args.quick:
        args.steps, ROUNDS = 3, 1
        workloads = [("lsq 1k", lsq_source, {"n": 1000}), ("data 2k x 100", data_source, {"rows": 2000}),
                     ("matvec 8x16, 8 samples", matvec_source, {"rows": 8, "cols": 16, "samples": 8})]
    rows, built_c = [], ""
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name, make, size in workloads:
            src, ref = make(tmp, **size)
            here = src.parent                        # where its data files are
            lr = compile_file(src).learner
            sides = {}
            for target in targets:
                exe = tmp / f"exe.{target}"
                exe.write_bytes(build_learner(lr, target).elf)
                os.chmod(exe, 0o755)
                sides[target] = [str(exe), "--steps"]
            same = {t: bits_agree(src, Path(cmd[0]), here) for t, cmd in sides.items()}
            anchor = c_anchor(tmp, *ref["c"]) if "c" in ref else "-"
            c_same = {}
            if isinstance(anchor, list):
                built_c = f"C: {subprocess.run(['gcc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]} {' '.join(CFLAGS)}"
                c_same = {t: printed(anchor, tmp) == printed(cmd, tmp) for t, cmd in sides.items()}
                sides["C"] = anchor
            m = interleaved(sides, ref, args.steps, here)
            for target in targets:
                rows.append((name, target, m, ref["flops"], anchor, c_same.get(target, "-"), same[target]))
    print(f"generated code against numpy {np.__version__} and the same-bits C, one thread, in one run: "
          f"{ROUNDS} rounds of {args.steps} steps after {WARMUP} warm-up ones, each round timing numpy, "
          f"the C, then every executable; {built_c or 'no C built'}; {blas()}\n")
    print("| workload | target | alphac ms/step | wall spread | alphac CPU ms/step | alphac GFLOP/s | "
          "numpy ms/step (wall; CPU) | C ms/step (wall; CPU) | alphac to C (wall; CPU) | alphac to numpy (wall; CPU) | "
          "C bits = alphac | alphac bits = interpreter |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ms = lambda x: f"{x * 1e3:.3f}"                                     # noqa: E731
    for name, target, m, flops, anchor, c_same, same in rows:
        wall, lo, hi = median_spread([w for w, _ in m[target]])
        cpu = median_spread([c for _, c in m[target]])[0]
        npy, npc = (median_spread([x[k] for x in m["numpy"]])[0] for k in (0, 1))
        to_np = median_spread([b / a for (b, _), (a, _) in zip(m["numpy"], m[target]) if a > 0] or [0])[0]
        if isinstance(anchor, list):
            cw, cc = median_spread([w for w, _ in m["C"]])[0], median_spread([c for _, c in m["C"]])[0]
            to_c = median_spread([b / a for (b, _), (a, _) in zip(m["C"], m[target]) if a > 0] or [0])[0]
            c_cells = f"{ms(cw)}; {ms(cc)} | {to_c:.2f}x; {cc / cpu if cpu else 0:.2f}x"
        else:
            c_cells = f"{anchor} | -"
        print(f"| {name} | {target} | {ms(wall)} | {ms(lo)}..{ms(hi)} | {ms(cpu)} | "
              f"{flops / wall / 1e9 if wall else 0:.2f} | {ms(npy)}; {ms(npc)} | {c_cells} | {to_np:.2f}x; "
              f"{npc / cpu if cpu else 0:.2f}x | "
              f"{c_same} | {same} |")


if __name__ == "__main__":
    main()
