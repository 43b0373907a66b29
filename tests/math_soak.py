"""`make math-soak`: random inputs through the x86-64 executables of the contract's functions,
against MPFR, until COUNT per function (default a billion), printing the count checked and the
count misrounded as it goes. The inputs are tests/test_math.py's random mix (a quarter uniform
bit patterns, half uniform over the function's interesting range, a quarter log-uniform near
zero; pow's pairs: test_math.pow_random_pairs), in blocks of a million from consecutive seeds;
blocks run in parallel on every core. A misrounded input is printed with its result and MPFR's, and the exit status is 1.

    python tests/math_soak.py [--count N] [--seed S] [--jobs J] [FUNCTION ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
BLOCK = 1_000_000


def block(args):
    name, seed = args
    import test_math as T
    if name == "pow":                                      # pairs: test_math's pow mix
        xs = T.pow_random_pairs(BLOCK, seed=seed)
        wrong, count = T.pow_report(xs, T.run(name, "x86_64", xs), T.pow_oracle(xs), limit=20)
        return name, seed, count, wrong
    xs = T.random_inputs(name, BLOCK, seed=seed)
    want = T.oracle(name, xs)
    got = T.run(name, "x86_64", xs)
    wrong, count = T.report(name, xs, got, want, limit=20)
    return name, seed, count, wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("functions", nargs="*", help="default: exp log log1p expm1 tanh sin cos pow")
    ap.add_argument("--count", type=float, default=1e9, help="inputs per function")
    ap.add_argument("--seed", type=int, default=1000, help="the first block's seed")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    from alphac.math import ELEMENTARY
    names = a.functions or list(ELEMENTARY) + ["pow"]
    blocks = max(int(a.count) // BLOCK, 1)
    work = [(n, a.seed + b) for n in names for b in range(blocks)]
    checked = {n: 0 for n in names}
    bad = {n: 0 for n in names}
    start = time.time()
    with ProcessPoolExecutor(a.jobs) as pool:
        for name, seed, count, wrong in pool.map(block, work):
            checked[name] += BLOCK
            bad[name] += count
            for w in wrong:
                print(f"  MISROUNDED (seed {seed}): {w}", flush=True)
            done = sum(checked.values())
            print(f"{name}: {checked[name]:,} checked, {bad[name]} misrounded "
                  f"({done / (time.time() - start):,.0f} inputs/s)", flush=True)
    print("\nfunction  checked  misrounded")
    for n in names:
        print(f"{n:8} {checked[n]:,} {bad[n]}")
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
