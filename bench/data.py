"""Benchmark: data at run time (docs/data.md).

In one run, on data made in a temporary directory (removed afterwards):

- the build of a 4-owner least-squares deployment over 100,000 x 100 binary64 (80 MB): its wall
  time, its peak memory, its largest executable (the issue's goal: under 2 s, 200 MB, 64 KiB);
- an owner's start-up with a 100 MB share (125,000 x 100, one owner): from its first event to
  `data checked` (open, size and header, every chunk read, hashed with the runtime's SHA-256,
  copied), beside Python's hashlib hashing the same file (read in 1 MiB pieces), and the peak
  memory the owner reports;
- the runtime's SHA-256 over bytes in memory against hashlib (bench/sha256.py, run from here
  without --quick).

    python bench/data.py [--quick]          # --quick: 10,000 x 100 and a 10 MB share
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCE = """learner big
data x = load("x.npy")
data y = load("y.npy")
param w: f64[100] = 0.0
loss(i) {{
  let r = dot(w, x[i]) - y[i]
  0.5 * r^2
}}
update {{
  w = w - 0.01 * grad(w)
}}
deployment star {{
  roles coordinator, owner[{owners}]
  topology star(coordinator)
}}
"""

BUILD = """import sys, time
from alphac.cli import main
t = time.perf_counter()
code = main(["build", "big.alpha", "--deployment", "star", "-o", "roles"])
# VmHWM: this process's own peak (ru_maxrss also counts the parent's, which a vfork-ed child
# inherits at exec)
hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(code, time.perf_counter() - t, hwm)
"""


def write(d: Path, rows: int, owners: int) -> None:
    import numpy as np
    (d / "big.alpha").write_text(SOURCE.format(owners=owners))
    rng = np.random.default_rng(11)
    for name, cols in (("x", 100), ("y", 0)):
        shape = (rows, cols) if cols else (rows,)
        head = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}"
        head += " " * (-(10 + len(head) + 1) % 64) + "\n"
        block = rng.standard_normal((10000, max(cols, 1)))
        with open(d / f"{name}.npy", "wb") as fh:
            fh.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
            for k in range(0, rows, 10000):
                fh.write(block[:rows - k].tobytes())


def build(d: Path) -> tuple[float, float, int]:
    p = subprocess.run([sys.executable, "-c", BUILD], cwd=d, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    code, seconds, rss = p.stdout.split()
    if code != "0":
        raise SystemExit(p.stderr)
    largest = max(f.stat().st_size for f in (d / "roles").iterdir() if not f.name.endswith(".json"))
    return float(seconds), int(rss) / 1024, largest


def start_up(d: Path) -> tuple[float, int]:
    """The owner's ms from its first event to `data checked`, and its peak KiB."""
    from alphac.tools.launch import launch
    from alphac.tools.record import stream_events, stream_lines
    cwd = os.getcwd()
    os.chdir(d)
    try:
        rec = launch("roles", steps=1, deadline_ms=120000, records="runs")
    finally:
        os.chdir(cwd)
    owner = next(r for r in rec["roles"] if r["role"].startswith("owner"))
    events = stream_events(stream_lines(d / Path(rec["path"]).parent / owner["stream"]["file"]), True)
    t = {what: ns for what, ns in events}
    first = events[0][1]
    return (t["data checked"] - first) / 1e6, owner["peak_rss_kib"]


def hashlib_ms(path: Path) -> float:
    t = time.perf_counter()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 x 100 and a 10 MB share")
    a = ap.parse_args()
    rows_build, rows_share = (10000, 12500) if a.quick else (100000, 125000)
    print("| measure | alphac | reference | goal |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "build"
        d.mkdir()
        write(d, rows_build, 4)
        seconds, mib, largest = build(d)
        print(f"| build {rows_build:,} x 100, 4 owners: time | {seconds:.2f} s | - | under 2 s |")
        print(f"| same: peak memory | {mib:.0f} MiB | - | under 200 MB |")
        print(f"| same: largest executable | {largest / 1024:.1f} KiB | - | under 64 KiB |")
        for f in d.glob("*.npy"):
            f.unlink()
        d = Path(tmp) / "share"
        d.mkdir()
        write(d, rows_share, 1)
        build(d)
        mb = (d / "x.npy").stat().st_size / 1e6 + (d / "y.npy").stat().st_size / 1e6
        ms, kib = start_up(d)
        ref = hashlib_ms(d / "x.npy") + hashlib_ms(d / "y.npy")
        print(f"| owner start-up, {mb:.0f} MB share (read, hash, copy) | {ms:.0f} ms "
              f"({mb / ms * 1e3:.0f} MB/s) | hashlib alone {ref:.0f} ms ({mb / ref * 1e3:.0f} MB/s) | - |")
        print(f"| same: the owner's peak memory | {kib / 1024:.1f} MiB | share {mb / 1.048576:.1f} MiB | "
              f"share + a bounded buffer |")
    sha = ROOT / "bench" / "sha256.py"
    if not a.quick:                        # (its own short run is tests/test_bench.py's)
        r = subprocess.run([sys.executable, str(sha)], capture_output=True, text=True, cwd=ROOT)
        print()
        print(r.stdout.strip() if r.returncode == 0 else f"bench/sha256.py failed: {r.stderr[-500:]}")


if __name__ == "__main__":
    main()
