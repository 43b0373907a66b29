"""Benchmark: checking and building the 200,000-role fleet deployment (examples/fleet_lsq.alpha).

Reports the wall time and the peak memory of compiling the learner and checking its
deployment (membership, topology, samples, placement, memory admission, protocol projection),
and of the same description with one overlap (which must be refused); the bound is 10 s and
1 GiB on a 2-core machine. Then `alphac build --deployment fleet_200k` in a process of its own:
one executable per index node (alphac/lower/fleet.py), its wall time and maximum RSS, beside the
cost of one executable per role, measured on the first 8 roles' builds and multiplied out; the
bound is 60 s and 1 GiB.

    python bench/fleet.py [--quick]

(`--quick`, for CI's smoke run of every benchmark: the check only, not the build.)
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
    args = ap.parse_args()
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
    if not args.quick:
        build_table(good)


def build_table(src: Path) -> None:
    import json
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "alphac", "build", str(src.relative_to(ROOT)),
                            "--deployment", "fleet_200k", "-o", f"{tmp}/f"], cwd=ROOT,
                           capture_output=True, text=True)
        dt = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if p.returncode:
            print(f"the build failed: {p.stderr.strip()}")
            return
        table = json.loads(Path(f"{tmp}/f/roles.json").read_text())
        size = sum(f.stat().st_size for f in Path(f"{tmp}/f").iterdir() if f.name != "roles.json")
        per_role = per_role_seconds(src)
    print()
    print("| build of fleet_200k | executables | roles | wall s | max RSS MiB | bytes |")
    print("|---|---|---|---|---|---|")
    print(f"| one per index node | {len(table['nodes'])} | {table['role_count']} | {dt:.1f} | "
          f"{rss:.0f} | {size} |")
    print(f"| one per role (8 built, multiplied out) | {table['role_count']} | {table['role_count']} | "
          f"{per_role * table['role_count']:.0f} | - | - |")


def per_role_seconds(src: Path) -> float:
    """Seconds per role of building roles one executable each (the first 8 owners)."""
    from alphac.build import build_role
    from alphac.dist.structure import Role
    _, plans = compile_deployments(src)
    plan = plans["fleet_200k"]
    build_role(plan, Role("owner", 0))                   # the shared functions selected once
    t = time.perf_counter()
    for k in range(1, 9):
        build_role(plan, Role("owner", k))
    return (time.perf_counter() - t) / 8


if __name__ == "__main__":
    main()
