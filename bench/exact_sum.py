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
long run minus a 0-step run (the median of 3) divided by the steps; the star's bytes on the
loopback wire per step (the `lo` counters of /proc/net/dev, a long run's minus a 0-step run's);
the ratios of time and bytes to the ordered contract's; and whether the star's published bits
equal the single executable's printed state after the same steps (under exact_sum they must;
under the ordered contract the sums are grouped otherwise, so usually they do not).

    python bench/exact_sum.py [--steps N] [--digits-steps N] [--quick]

`--quick` (what CI runs, so that the benchmark cannot silently break) times a 1,000-coordinate
version of the lsq learner only, for 50 steps: its figures are not the ones to quote.
"""
from __future__ import annotations

import argparse
import os
import re
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
GOAL = 2.0          # exact_sum's time per step, at most this many times the ordered contract's
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


def single(src: Path, steps: int, tmp: Path) -> tuple[float, str]:
    """The single-process x86-64 executable: time per step, and its printed state after `steps`."""
    from alphac.build import build_learner
    from alphac.driver import compile_file
    exe = tmp / f"single-{src.stem}"
    exe.write_bytes(build_learner(compile_file(src).learner, "x86_64").elf)
    os.chmod(exe, 0o755)

    def run(n: int) -> tuple[float, str]:
        t = time.perf_counter()
        r = subprocess.run([str(exe), "--steps", str(n)], capture_output=True, text=True, check=True)
        return time.perf_counter() - t, r.stdout

    start = statistics.median(run(0)[0] for _ in range(3))
    long, state = run(steps)
    return max(0.0, long - start) / steps, state


def star(src: Path, dep: str, steps: int, tmp: Path) -> tuple[float, float, str]:
    """The launched star: time per step, loopback bytes per step, published state after `steps`."""
    out = tmp / f"build-{src.stem}"
    build(src, out, [dep])
    start = statistics.median(alphac_run(out, dep, 0, src.parent)[0] for _ in range(3))
    long, wire, published = alphac_run(out, dep, steps, src.parent)
    wire0 = alphac_run(out, dep, 0, src.parent)[1]
    return max(0.0, long - start) / steps, (wire - wire0) / steps, published


def measure(name: str, src: Path, dep: str, steps: int, tmp: Path) -> list[dict]:
    rows = []
    for contract, path in variants(src).items():
        t1, state1 = single(path, steps, tmp)
        t4, wire, published = star(path, dep, steps, tmp)
        same = published == state1
        rows.append({"learner": name, "contract": contract, "owners": 1, "ms": t1 * 1e3,
                     "bytes": None, "same": None})
        rows.append({"learner": name, "contract": contract, "owners": 4, "ms": t4 * 1e3,
                     "bytes": wire, "same": same})
    return rows


def ratio(a, b) -> str:
    if a is None or b is None:
        return "-"
    return f"{a / b:.2f}x" if b > 0 else "- (ordered below resolution)"


def report(rows: list[dict], steps: dict[str, int]) -> None:
    base = {(r["learner"], r["owners"]): r for r in rows if r["contract"] == "ordered"}
    print("| learner | contract | owners | steps | time per step ms | ratio to ordered | "
          "loopback bytes per step | bytes ratio | bits equal to 1 owner |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o = base[(r["learner"], r["owners"])]
        wire = "-" if r["bytes"] is None else f"{r['bytes']:.0f}"
        same = "(itself)" if r["same"] is None else str(r["same"])
        print(f"| {r['learner']} | {r['contract']} | {r['owners']} | {steps[r['learner']]} | "
              f"{r['ms']:.3f} | {ratio(r['ms'], o['ms'])} | {wire} | "
              f"{ratio(r['bytes'], o['bytes'])} | {same} |")
    print(f"\nGoal: exact_sum's time per step at most {GOAL:g}x the ordered contract's "
          "(single process and 4-owner star alike).")
    for name in dict.fromkeys(r["learner"] for r in rows):
        parts, met = [], True
        for r in rows:
            if r["learner"] == name and r["contract"] == "exact_sum":
                o = base[(name, r["owners"])]
                if o["ms"] <= 0:
                    met = None
                    parts.append(f"{r['owners']} owner(s) not measurable")
                    continue
                x = r["ms"] / o["ms"]
                met = met if met is None else met and x <= GOAL
                parts.append(f"{r['owners']} owner{'s' if r['owners'] > 1 else ''} {x:.2f}x")
        verdict = {True: "met", False: "NOT met", None: "not judged (the ordered time is below resolution)"}
        print(f"- {name}: {', '.join(parts)}: goal {verdict[met]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="steps of the lsq 100k runs")
    ap.add_argument("--digits-steps", type=int, default=100, help="steps (epochs) of the digits runs")
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
            rows += measure(name, big_learner(lsq, n=1000, mesh=False), "big_4", steps[name], tmp)
        else:
            name, steps[name] = "lsq 100k", args.steps
            rows += measure(name, big_learner(lsq, mesh=False), "big_4", steps[name], tmp)
            dig = tmp / "digits"
            (dig / "data").mkdir(parents=True)
            for f in DATA.glob("digits_*.npy"):
                shutil.copy(f, dig / "data" / f.name)
            text = (ROOT / "examples" / "digits_mlp.alpha").read_text()
            text = re.split(r"^deployment ", text, maxsplit=1, flags=re.M)[0]   # ours only
            src = dig / "digits_mlp.alpha"
            src.write_text(text + DIGITS_STAR)
            name, steps[name] = "digits MLP", args.digits_steps
            rows += measure(name, src, "bench_star4", steps[name], tmp)
    report(rows, steps)


if __name__ == "__main__":
    main()
