"""The interpreter's batched path (alphac.ir.batch, alphac.math.vec) gives the bits of its scalar
path (alphac.ir.evaluate, alphac.math.dsl.Eval) exactly, NaNs' bits included: the functions on
special, boundary, worst-case and random inputs (with and without lanes left to Eval, and with
the accurate paths alone), and owner contributions of the examples and tests/regress, an MLP, a learner using
every node kind and random learners (tests/learngen.py), over several steps and sample splits
(empty owners included), in one chunk and in many."""
import random
from functools import lru_cache

import numpy as np
import pytest

import learngen
from conftest import EXAMPLES, ROOT
from test_math import BOUNDS, NANS, SPECIAL, b64, near, worst_inputs

from alphac import math as M
from alphac.driver import compile_file
from alphac.ir import batch, interp
from alphac.math import dd, vec

REGRESS = ROOT / "tests" / "regress"


def bits(a) -> list[int]:
    return np.asarray(a, dtype=np.float64).view(np.uint64).tolist()


# -- the functions ------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def inputs(name: str) -> np.ndarray:
    """Specials, NaNs, each boundary and its neighbours (both signs), 16 worst cases (enough that
    their accurate path runs on arrays, not lane by lane), and random values of every scale."""
    pats = [b64(x) for x in SPECIAL] + NANS
    for x in BOUNDS.get(name, [1.0]):
        pats += near(x, 1) + near(-x, 1)
    rng = np.random.default_rng(16)
    if name in M.ELEMENTARY:
        worst = worst_inputs(name)
        pats += worst[rng.choice(len(worst), 16, replace=False)].tolist()
    rand = np.concatenate([rng.standard_normal(30), rng.standard_normal(20) * 40,
                           np.exp2(rng.uniform(-1074, 1023, 20)) * rng.choice([-1, 1], 20)])
    pats += rand.view(np.uint64).tolist() + rng.integers(0, 1 << 64, 20, dtype=np.uint64).tolist()
    return np.array(pats, dtype=np.uint64).view(np.float64)


@pytest.fixture(params=["default", "no lanes to Eval", "accurate paths alone"])
def mode(request, monkeypatch):
    if request.param != "default":
        monkeypatch.setattr(vec, "DEFER", 1)
    if request.param == "accurate paths alone":
        monkeypatch.setattr(dd, "MODE", "accurate")
    return request.param


@pytest.mark.parametrize("name", sorted(n for n, k in M.FUNCTIONS.items() if k == 1))
def test_function_on_arrays_is_eval_lane_by_lane(name, mode):
    x = inputs(name)
    saved, dd.MODE = dd.MODE, "test"
    want = [M.evaluate(name, v) for v in x.tolist()]      # the scalar definition (memoized)
    dd.MODE = saved
    got = M.evaluate_array(name, x)
    assert bits(got) == bits(want)
    assert bits(M.evaluate_array(name, x.reshape(-1, 1))[:, 0]) == bits(want)   # any shape
    assert M.evaluate_array(name, x[:0]).shape == (0,)


@pytest.mark.parametrize("name", ["max", "min", "pow"])
def test_binary_function_on_arrays(name, mode):
    x = inputs("exp")
    a, b = np.repeat(x[:24], 24), np.tile(x[:24], 24)           # every pair of the first 24
    a, b = np.concatenate([a, x]), np.concatenate([b, np.random.default_rng(1).permutation(x)])
    want = [M.evaluate(name, p, q) for p, q in zip(a.tolist(), b.tolist())]
    assert bits(M.evaluate_array(name, a, b)) == bits(want)
    assert bits(M.evaluate_array(name, a[:5, None], b[None, :7])) == \
        bits([[M.evaluate(name, p, q) for q in b[:7].tolist()] for p in a[:5].tolist()])


def test_vec_checks_what_eval_checks():
    m = vec.VecEval(3)
    x = m.arg("i", np.array([1, 2, 70], dtype=np.uint64))
    with pytest.raises(ValueError, match="shift amounts"):
        m.i(1) << x


# -- owner contributions ------------------------------------------------------------------------
def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a[1] == b[1] and a[0].keys() == b[0].keys() and \
        all(numbers(a[0][p]) == numbers(b[0][p]) for p in a[0])


def numbers(a) -> list:
    """The bits of every value that is a number; a NaN as "NaN": its bits (sign, payload) are not
    part of the contract (docs/language.md), and numpy and the scalar path may set its sign
    differently (inf - inf, say). Every other value is compared bit for bit."""
    return ["NaN" if x != x else b for x, b in zip(np.asarray(a, dtype=np.float64).tolist(), bits(a))]


def splits(n: int, r: random.Random) -> list[range]:
    cuts = sorted(r.randint(0, n) for _ in range(3))
    return [range(0, n), range(0, 0), range(n, n)] + \
        [range(lo, hi) for lo, hi in zip([0] + cuts, cuts + [n])]


def agree(lr, steps: int = 3, seed: int = 0) -> None:
    """Batched and scalar contributions agree for every split, step after step (the scalar
    ones folded from each sample's `per_sample_gradient`, as owner_contribution_scalar does)."""
    r = random.Random(seed)
    state = interp.initial_state(lr)
    n = lr.nsamples or 0
    if lr.exact:              # exact_sum: the terms, rounded once (alphac.ir.exact), on both paths
        for _ in range(steps):
            for samples in splits(n, r) + [range(n)]:
                assert same(interp.rounded(interp.owner_contribution(lr, state, samples)),
                            interp.rounded(interp.owner_contribution_scalar(lr, state, samples)))
            state = interp.apply_update(lr, state, interp.mean_gradient(
                interp.owner_contribution(lr, state, range(n))))
        return
    for _ in range(steps):
        whole = interp.owner_contribution_scalar(lr, state, range(n))
        per = [interp.per_sample_gradient(lr, state, i) for i in range(n)]
        for samples in splits(n, r):
            want = None
            for i in samples:
                want = per[i] if want is None else {p: tuple(a + b for a, b in zip(want[p], per[i][p]))
                                                    for p in want}
            want = None if want is None else (want, len(samples))
            assert same(interp.owner_contribution(lr, state, samples), want), (lr.name, samples)
        assert same(interp.owner_contribution(lr, state, range(n)), whole)
        state = interp.apply_update(lr, state, interp.mean_gradient(whole))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.alpha")) + sorted(
    p for p in REGRESS.glob("*.alpha") if not p.read_text().startswith("# refused:")),
    ids=lambda p: p.stem)                   # (a refused file is the checker's: test_learner_fuzz)
def test_examples_and_regression_files(path):
    lr = compile_file(path).learner
    if (lr.nsamples or 0) > 48:           # the real data sets: their first 48 samples (the scalar
        lr = first_samples(lr, 48)        # definition takes a minute over digits' 1500)
    if lr.exact and (lr.nsamples or 0) > 16:     # exact_sum folds each split's samples anew:
        lr = first_samples(lr, 16)               # 16 (the CNN's 48 took 41 s here)
    agree(lr)


def first_samples(lr, n: int):
    from dataclasses import replace
    data = [replace(d, shape=(n,) + d.shape[1:], file=None,
                    literal=tuple(float(v) for v in d.values[:n * d.cols]))
            for d in lr.data]
    return replace(lr, data=data, nsamples=n)


MLP = """learner mlp
data x = load("x.npy")
data y = load("y.npy")
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
  W1 = W1 - 0.5 * grad(W1)
  b1 = b1 - 0.5 * grad(b1)
  W2 = W2 - 0.5 * grad(W2)
  b2 = b2 - 0.5 * grad(b2)
}}
"""


def literal(a) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in a) + "]"


def test_mlp(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    s, d, h, k = 16, 6, 5, 4
    np.save(tmp_path / "x.npy", rng.standard_normal((s, d)) * 3)
    np.save(tmp_path / "y.npy", rng.integers(0, k, s).astype(np.float64))
    (tmp_path / "mlp.alpha").write_text(MLP.format(h=h, d=d, k=k, w1=literal(rng.standard_normal((h, d))),
                                                   w2=literal(rng.standard_normal((k, h)))))
    lr = compile_file(tmp_path / "mlp.alpha").learner
    agree(lr, steps=3)
    monkeypatch.setattr(batch, "BUDGET", 1)                 # one sample per chunk
    agree(lr, steps=1, seed=1)


ZOO = """learner zoo
data x = [[1.0, -2.0, 0.0], [0.5, 3.0, -0.0], [700.0, 1.0, 2.0], [-1.0, -1.0, -1.0], [2.0, 2.0, 0.25]]
data y = [0.0, 2.0, 1.0, 1.0, 7.0]
param A: f64[2, 3] = [[0.5, -1.0, 0.25], [1.0, 1.0, -0.0]]
param u: f64[2] = [0.0, -0.0]
param w: f64[3] = 0.1
param s: f64 = 2.0
loss(i) {
  let v = A @ x[i]
  let q = u @ A
  let t = max(v) + max(x[i]) + logsumexp(q * x[i]) - dot(onehot(y[i], 3), q)
  let m = sum(outer(v, w) @ x[i])
  (t + relu(m) + abs(w[1] - x[i, 2]) + min(s, x[i, 0]) + max(s * x[i, 1], w[0])
    + sqrt(s * s + x[i, 0]^2) + x[i, 1] / (s + 3) + softplus(sum(w * x[i]))
    + sigmoid(A[1, 2] * x[i, 2]) + log1p(w[2]^2) + expm1(0.01 * s) + exp(x[i, 0] * w[2])
    + log(1 + x[i, 2]^2) + tanh(dot(A[0], x[i])))
}
update {
  A = A - 0.1 * grad(A)
  u = u - 0.1 * grad(u)
  w = w - 0.1 * grad(w)
  s = s - 0.1 * grad(s)
}
"""


def test_every_node_kind(tmp_path, monkeypatch):
    from alphac.ir.learner import postorder
    (tmp_path / "zoo.alpha").write_text(ZOO)
    lr = compile_file(tmp_path / "zoo.alpha").learner
    kinds = {type(n).__name__ for c in sum(lr.grads.values(), []) for n in postorder([c.node])}
    assert kinds >= {"MatVec", "VecMat", "Outer", "Max", "MaxAdj", "OneHot", "Pick", "Where",
                     "Pow", "Dot", "Sum", "Bcast", "Unary", "Elem", "Const", "Read", "DataRow"}
    agree(lr, steps=3)                                      # exp(700 * w) overflows: inf, NaN
    monkeypatch.setattr(vec, "DEFER", 1)                    # 5 lanes: on arrays, not by Eval
    agree(lr, steps=2, seed=1)
    monkeypatch.setattr(batch, "BUDGET", 1)
    agree(lr, steps=1, seed=2)


def test_random_learners():
    from alphac.diag import CompileError
    checked = 0
    for seed in range(30):
        try:
            lr = compile_program(learngen.generate(seed))
        except CompileError:
            continue
        if lr.loss is not None:
            agree(lr, steps=3, seed=seed)
            checked += 1
    assert checked >= 20


def compile_program(prog):
    """A generated program's learner, compiled from a file beside the .npy files it loads."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        return compile_file(learngen.write(prog, Path(d) / "l.alpha")).learner
