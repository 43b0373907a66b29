"""Benchmark: the cost of `contract exact_sum` (every gradient and loss sum over samples and owners
exact, in xsum.rt's fixed-point accumulators, rounded once)
against the default ordered contract, for the same learner, side by side in one run.

Two learners, each built twice (its source as written, and with `contract exact_sum` inserted
after its `learner NAME` line):
  - `lsq 100k`: bench/distributed.py's generated least-squares learner with momentum, 100,000
    coordinates, 8 samples (4 owners of 2 samples each in the star);
  - `digits MLP`: examples/digits_mlp.alpha (64-32-10, full batch of 1,500 images, Adam; data
    from `make data`), its source copied into a temporary directory with the data beside it and
    a plain 4-owner star appended (the example's shares: 200, 400, 300, 600 images).
For each learner and contract: the single-process x86-64 executable's time per step, and the
4-owner star's (coordinator and owners launched on loopback by alphac.tools.launch), each as a
long run minus a 0-step run divided by the steps, in wall time and in CPU time (user + system,
getrusage of this process's children: the roles too; the machine's other load disturbs it less);
the star's bytes on the loopback wire per step (the `lo` counters of /proc/net/dev, a long run's
minus a 0-step run's); the ratios of time and bytes to the ordered contract's; and whether the
star's published bits equal the single executable's printed state after the same steps (under
exact_sum they must; under the ordered contract the sums are grouped otherwise, so usually they
do not). The two contracts' runs are interleaved, R rounds (the order alternating), and each
figure is the median over the rounds with its spread [min-max] (a ratio: the median of the
rounds' ratios).

    python bench/exact_sum.py [--steps N] [--digits-steps N] [--rounds R] [--quick]

`--quick` (what CI runs, so that the benchmark cannot silently break) times a 1,000-coordinate
version of the lsq learner only, for 50 steps, one round: its figures are not the ones to quote.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed import ROOT, alphac_run, big_learner, build  # noqa: E402  (also puts ROOT on sys.path)
from digits import DATA                                       # noqa: E402

CONTRACTS = ("ordered", "exact_sum")
GOAL = 1.5          # exact_sum's time and bytes per step, at most this many times the ordered contract's
DIGITS_STAR = """
deployment bench_star4 {
  roles coordinator, owner[4]
  topology star(coordinator)
  samples owner[0] = 0..200, owner[1] = 200..600, owner[2] = 600..900, owner[3] = 900..1500
}
"""


def exact_text(text: str) -> str:
    text, n = re.subn(r"^(learner \w+)$", r"\1\ncontract exact_sum", text, count=1, flags=re.M)
    assert n == 1, "no `learner NAME` line"
    return text


def variants(src: Path) -> dict[str, Path]:
    """The source as written (ordered) and its exact_sum twin, beside it (same data paths)."""
    exact = src.with_name(src.stem + "_exact.alpha")
    exact.write_text(exact_text(src.read_text()))
    return {"ordered": src, "exact_sum": exact}


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(fn):
    """fn()'s result, with its wall and its children's CPU seconds."""
    c, t = children_cpu(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, children_cpu() - c


def single_exe(src: Path, tmp: Path) -> Path:
    from alphac.build import build_learner
    from alphac.driver import compile_file
    exe = tmp / f"single-{src.stem}"
    exe.write_bytes(build_learner(compile_file(src).learner, "x86_64").elf)
    os.chmod(exe, 0o755)
    return exe


def single(exe: Path, steps: int) -> tuple[float, float, str]:
    """The single-process executable: wall and CPU seconds per step, its state after `steps`."""
    def run(n: int):
        return subprocess.run([str(exe), "--steps", str(n)], capture_output=True, text=True,
                              check=True).stdout
    _, w0, c0 = timed(lambda: run(0))
    state, w1, c1 = timed(lambda: run(steps))
    return max(0.0, w1 - w0) / steps, max(0.0, c1 - c0) / steps, state


def star(out: Path, src: Path, dep: str, steps: int) -> tuple[float, float, float, str]:
    """The launched star: wall and CPU seconds, loopback bytes per step, published state."""
    (_, wire0, _), w0, c0 = timed(lambda: alphac_run(out, dep, 0, src.parent))
    (_, wire, published), w1, c1 = timed(lambda: alphac_run(out, dep, steps, src.parent))
    return max(0.0, w1 - w0) / steps, max(0.0, c1 - c0) / steps, (wire - wire0) / steps, published


def measure(name: str, src: Path, dep: str, steps: int, tmp: Path, rounds: int) -> list[dict]:
    built = {}
    for contract, path in variants(src).items():
        out = tmp / f"build-{path.stem}"
        build(path, out, [dep])
        built[contract] = (path, single_exe(path, tmp), out)
    runs = {(c, k): [] for c in CONTRACTS for k in (1, 4)}
    for r in range(rounds):
        for contract in (CONTRACTS if r % 2 == 0 else CONTRACTS[::-1]):
            path, exe, out = built[contract]
            w1, c1, state1 = single(exe, steps)
            w4, c4, wire, published = star(out, path, dep, steps)
            runs[(contract, 1)].append({"ms": w1 * 1e3, "cpu": c1 * 1e3, "bytes": None, "same": None})
            runs[(contract, 4)].append({"ms": w4 * 1e3, "cpu": c4 * 1e3, "bytes": wire,
                                        "same": published == state1})
    return [{"learner": name, "contract": c, "owners": k, "runs": runs[(c, k)]}
            for c in CONTRACTS for k in (1, 4)]


def spread(xs: list[float], f: str = "{:.3f}") -> str:
    return f"{f.format(statistics.median(xs))} [{f.format(min(xs))}-{f.format(max(xs))}]"


def ratios(r: dict, o: dict, key: str) -> list[float]:
    return [a[key] / b[key] for a, b in zip(r["runs"], o["runs"]) if b[key]]


def report(rows: list[dict], steps: dict[str, int], rounds: int) -> None:
    base = {(r["learner"], r["owners"]): r for r in rows if r["contract"] == "ordered"}
    print(f"{rounds} interleaved round(s); median [min-max]; a ratio: the median of the rounds' ratios")
    print("| learner | contract | owners | steps | wall ms a step | CPU ms a step | CPU ratio | "
          "wall ratio | loopback bytes a step | bytes ratio | bits equal to 1 owner |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for r in rows:
        o = base[(r["learner"], r["owners"])]
        ms, cpu = [x["ms"] for x in r["runs"]], [x["cpu"] for x in r["runs"]]
        rc, rw = ratios(r, o, "cpu"), ratios(r, o, "ms")
        wire = "-" if r["owners"] == 1 else spread([x["bytes"] for x in r["runs"]], "{:.0f}")
        rb = [] if r["owners"] == 1 else ratios(r, o, "bytes")
        same = "(itself)" if r["owners"] == 1 else str(all(x["same"] for x in r["runs"]))
        print(f"| {r['learner']} | {r['contract']} | {r['owners']} | {steps[r['learner']]} | "
              f"{spread(ms)} | {spread(cpu)} | {spread(rc, '{:.2f}x') if rc else '-'} | "
              f"{spread(rw, '{:.2f}x') if rw else '-'} | {wire} | "
              f"{spread(rb, '{:.2f}x') if rb else '-'} | {same} |")
        if r["contract"] == "exact_sum":
            for what, xs in (("CPU time", rc), ("bytes", rb)):
                if xs:
                    x = statistics.median(xs)
                    verdicts.append(f"- {r['learner']}, {r['owners']} owner(s), {what}: {x:.2f}x: "
                                    f"goal {'met' if x <= GOAL else 'NOT met'}")
    print(f"\nGoal: exact_sum's CPU time and bytes per step at most {GOAL:g}x the ordered contract's.")
    print("\n".join(verdicts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps of the lsq 100k runs")
    ap.add_argument("--digits-steps", type=int, default=100, help="steps (epochs) of the digits runs")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians and spread)")
    ap.add_argument("--quick", action="store_true", help="a 1,000-coordinate lsq learner, 50 steps")
    args = ap.parse_args()
    if not args.quick and not (DATA / "digits_x_train.npy").exists():
        sys.exit("bench/exact_sum.py: no data; run `make data` (examples/data/make_data.py)")
    rows, steps = [], {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lsq = tmp / "lsq"
        lsq.mkdir()
        if args.quick:
            name, steps[name] = "lsq 1k", 50
            rows += measure(name, big_learner(lsq, n=1000, mesh=False), "big_4", steps[name], tmp, 1)
        else:
            name, steps[name] = "lsq 100k", args.steps
            rows += measure(name, big_learner(lsq, mesh=False), "big_4", steps[name], tmp, args.rounds)
            dig = tmp / "digits"
            (dig / "data").mkdir(parents=True)
            for f in DATA.glob("digits_*.npy"):
                shutil.copy(f, dig / "data" / f.name)
            text = (ROOT / "examples" / "digits_mlp.alpha").read_text()
            text = re.split(r"^deployment ", text, maxsplit=1, flags=re.M)[0]   # ours only
            src = dig / "digits_mlp.alpha"
            src.write_text(text + DIGITS_STAR)
            name, steps[name] = "digits MLP", args.digits_steps
            rows += measure(name, src, "bench_star4", steps[name], tmp, args.rounds)
    report(rows, steps, 1 if args.quick else args.rounds)


if __name__ == "__main__":
    main()
