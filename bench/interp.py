"""Benchmark: the reference interpreter on a real model, batched against one sample at a time.

The learner is a 64-32-10 tanh MLP with softmax cross-entropy (`logsumexp(z) - dot(onehot(y[i],
10), z)`) on 1,500 samples (numpy random, fixed seed). For each step: the seconds of a full-batch
step of `alphac.ir.interp.step` (the batched per-sample gradients, alphac.ir.batch), the seconds
of the same step with `owner_contribution_scalar` (the definition: one sample, one operation at a
time), and whether the two give the same bits. The scalar step takes about a minute; --scalar-steps
0 leaves it out.

    python bench/interp.py [--steps N] [--scalar-steps N] [--samples S] [--quick]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alphac.driver import compile_file          # noqa: E402
from alphac.ir import interp                    # noqa: E402

SOURCE = """learner mlp
data x = load("x.npy")
data y = load("y.npy")
const lr = 0.01
param W1: f64[{h}, {d}] = {w1}
param b1: f64[{h}] = 0.0
param W2: f64[{k}, {h}] = {w2}
param b2: f64[{k}] = 0.0
loss(i) {{
  let h = tanh(W1 @ x[i] + b1)
  let z = W2 @ h + b2
  logsumexp(z) - dot(onehot(y[i], {k}), z)
}}
update {{
  W1 = W1 - lr * grad(W1)
  b1 = b1 - lr * grad(b1)
  W2 = W2 - lr * grad(W2)
  b2 = b2 - lr * grad(b2)
}}
"""


def mlp(folder: Path, s: int, d: int, h: int, k: int):
    rng = np.random.default_rng(12345)
    np.save(folder / "x.npy", rng.standard_normal((s, d)))
    np.save(folder / "y.npy", rng.integers(0, k, s).astype(np.float64))
    lit = lambda a: "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in a) + "]"
    (folder / "mlp.alpha").write_text(SOURCE.format(
        d=d, h=h, k=k, w1=lit(rng.standard_normal((h, d)) * 0.125), w2=lit(rng.standard_normal((k, h)) * 0.18)))
    return compile_file(folder / "mlp.alpha").learner


def scalar_step(lr, state):
    c = interp.owner_contribution_scalar(lr, state, range(lr.nsamples))
    return interp.apply_update(lr, state, interp.mean_gradient(c))


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--scalar-steps", type=int, default=1)
    ap.add_argument("--samples", type=int, default=1500)
    ap.add_argument("--quick", action="store_true", help="a small MLP, for the tests")
    a = ap.parse_args()
    s, d, h, k = (a.samples, 64, 32, 10) if not a.quick else (20, 8, 6, 4)
    tmp = tempfile.TemporaryDirectory()          # the data is read when first evaluated
    lr = mlp(Path(tmp.name), s, d, h, k)
    print(f"| learner | samples | step | batched s | scalar s | same bits |")
    print("| --- | --- | --- | --- | --- | --- |")
    state = interp.initial_state(lr)
    for n in range(a.steps):
        tb, new = timed(interp.step, lr, state)
        ts, same = "-", "-"
        if n < a.scalar_steps:
            ts, want = timed(scalar_step, lr, state)
            same = "yes" if interp.format_state(lr, want) == interp.format_state(lr, new) else "NO"
            ts = f"{ts:.3f}"
        print(f"| mlp {d}-{h}-{k} | {s} | {n + 1} | {tb:.3f} | {ts} | {same} |")
        state = new


if __name__ == "__main__":
    main()
