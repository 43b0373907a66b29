"""Benchmark: checking the 200,000-role fleet deployment (examples/fleet_lsq.alpha).

Reports the wall time and the peak memory of compiling the learner and checking its
deployment (membership, topology, samples, placement, memory admission, protocol projection),
and of the same description with one overlap (which must be refused). The issue's bound is 10 s
and 1 GiB on a 2-core machine.

    python bench/fleet.py [--quick]

(`--quick` is accepted for CI's smoke run of every benchmark; this one is quick already.)
"""
from __future__ import annotations

import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alphac.diag import CompileError                 # noqa: E402
from alphac.driver import compile_deployments        # noqa: E402


def measure(path: Path) -> tuple[float, float, str]:
    tracemalloc.start()
    t = time.perf_counter()
    try:
        _, plans = compile_deployments(path)
        outcome = f"accepted ({plans['fleet_200k'].role_count()} roles)"
    except CompileError as e:
        outcome = "refused: " + ", ".join(sorted({d.code for d in e.diagnostics}))
    dt = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return dt, peak / 2**20, outcome


def main() -> None:
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="accepted for CI's smoke run")
    ap.parse_args()
    good = ROOT / "examples" / "fleet_lsq.alpha"
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "fleet_overlap.alpha"
        bad.write_text(good.read_text().replace("owner[100000..200000]", "owner[99999..200000]"))
        rows = [("fleet_200k", *measure(good)), ("fleet_200k with one overlap", *measure(bad))]
    print("| deployment | check time s | peak traced MiB | outcome |")
    print("|---|---|---|---|")
    for name, dt, mib, outcome in rows:
        print(f"| {name} | {dt:.3f} | {mib:.1f} | {outcome} |")
    print(f"process max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
