"""The gradients of the matrix operations (issue 16) against an oracle written by hand.

For nine small learners (a matrix-vector least squares, `u @ A`, `outer` reduced to a scalar,
`max(v)` with ties, softmax cross-entropy through `logsumexp` and `onehot` with labels out of
range, a two-layer tanh MLP with biases, a scalar param scaling a matrix that `@` reduces: the
sum of a 2-D contribution, sin and cos, pow) each per-sample gradient is derived here by hand, in
plain Python floats, in the order alphac/ir/autodiff.py documents (the reversed post-order of
the loss DAG, each node's adjoint the left fold of its contributions in arrival order, and the
rules for `@`, `outer`, `max`, `onehot`, sin, cos and pow); exp, tanh, sin, cos, log and pow are MPFR's
(gmpy2), correctly rounded as the contract says. Nothing here calls alphac's differentiation or evaluation: alphac is only
compiled and run.

Checked bit for bit (the binary64 patterns): alphac's per-sample gradient
(`alphac.ir.interp.per_sample_gradient`) at every sample, and the state after three SGD steps
of the reference interpreter and of the x86-64 executable. Central finite differences (numpy,
h = 1e-6) check the oracle itself against the calculus, to 1e-6.
"""
import math
import os
import random
import struct
import subprocess

import gmpy2
import numpy as np
import pytest

from alphac.refusals import Refusal

RNG = random.Random(16)
STEPS, LR = 3, 0.1


# -- binary64, as the contract says, written out -----------------------------------------------
def bits(v: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def cr(name: str, x: float) -> float:
    """The correctly rounded exp, tanh, sin or cos of x (MPFR at 53 bits, binary64's range)."""
    with gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True):
        return float(getattr(gmpy2, name)(gmpy2.mpfr(x)))


def lfold(terms) -> float:
    """A left fold of + that starts from its first term."""
    it = iter(terms)
    acc = next(it)
    for t in it:
        acc = acc + t
    return acc


def matvec(A, v):                  # out[r] = fold over c of A[r][c] * v[c]
    return [lfold(A[r][c] * v[c] for c in range(len(v))) for r in range(len(A))]


def vecmat(u, A):                  # out[c] = fold over r of u[r] * A[r][c]
    return [lfold(u[r] * A[r][c] for r in range(len(u))) for c in range(len(A[0]))]


def outer(u, v):
    return [[a * b for b in v] for a in u]


def ieee_max(a: float, b: float) -> float:
    """IEEE 754-2019 maximum: NaN if either is, and -0 < +0."""
    if a != a or b != b:
        return math.nan
    if a == b == 0.0:
        return a if math.copysign(1.0, a) > 0 else b
    return a if a > b else b


def max_fold(v) -> float:
    acc = v[0]
    for x in v[1:]:
        acc = ieee_max(acc, x)
    return acc


def max_winner(v) -> int:
    """max(v)'s gradient goes where the pairwise rule max(a, b) sends it: to b where b > a."""
    m, win = v[0], 0
    for k in range(1, len(v)):
        if v[k] > m:
            win = k
        m = ieee_max(m, v[k])
    return win


def flat(m) -> list[float]:
    if isinstance(m, float):
        return [m]
    return [x for row in m for x in row] if m and isinstance(m[0], list) else list(m)


def values(*shape, lo=-1.0, hi=1.0):
    """Fixed values with six decimals, so that a sum in another order rounds otherwise."""
    if len(shape) == 1:
        return [round(RNG.uniform(lo, hi), 6) for _ in range(shape[0])]
    return [values(shape[1], lo=lo, hi=hi) for _ in range(shape[0])]


def literal(v) -> str:
    return "[" + ", ".join(literal(x) for x in v) + "]" if isinstance(v, list) else repr(v)


# -- the learners, each with its gradient by hand ---------------------------------------------------
class Learner:
    name: str
    loss: str                      # the loss block's body
    data: dict                     # name -> rows
    init: dict                     # param -> nested list

    def source(self, init=None) -> str:
        init = init or self.init
        out = [f"learner {self.name}"]
        out += [f"data {k} = {literal(v)}" for k, v in self.data.items()]
        out += [f"param {k}: f64{list(np.shape(v)) or ''} = {literal(v)}".replace("[]", "")
                for k, v in init.items()]
        out += ["loss(i) {"] + ["  " + line for line in self.loss.strip().splitlines()] + ["}"]
        out += ["update {"] + [f"  {k} = {k} - {LR!r} * grad({k})" for k in init] + ["}"]
        return "\n".join(out) + "\n"

    @property
    def n(self) -> int:
        return len(next(iter(self.data.values())))

    def grad(self, st, i) -> dict:
        raise NotImplementedError

    def np_loss(self, st, i) -> float:
        raise NotImplementedError


class MatVecLsq(Learner):
    """r = W @ x - t; 0.5 * dot(r, r). Dot's adjoint is the constant 0.5; r receives 0.5 * r
    twice (a then b); the MatVec gives W the outer product of r's adjoint and x."""
    name = "mv_lsq"
    loss = "let r = W @ x[i] - t[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(4, 5), "t": values(4, 3)}
        self.init = {"W": values(3, 5)}

    def grad(self, st, i):
        x, t = self.data["x"][i], self.data["t"][i]
        r = [a - b for a, b in zip(matvec(st["W"], x), t)]
        dr = [0.5 * v + 0.5 * v for v in r]
        return {"W": flat(outer(dr, x))}

    def np_loss(self, st, i):
        r = st["W"] @ np.array(self.data["x"][i]) - np.array(self.data["t"][i])
        return 0.5 * float(r @ r)


class ScaledMatVec(Learner):
    """r = (W * s) @ x - t; 0.5 * dot(r, r), s a scalar param: (W * s) gets outer(dr, x), W that
    times s, and s the sum of that times W, a left fold over all of the matrix, row by row (a
    2-D contribution to a scalar, summed)."""
    name = "scaled_mv"
    loss = "let r = (W * s) @ x[i] - t[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(3, 5), "t": values(3, 3)}
        self.init = {"W": values(3, 5), "s": 0.734519}

    def grad(self, st, i):
        x, t, s = self.data["x"][i], self.data["t"][i], st["s"]
        r = [a - b for a, b in zip(matvec([[w * s for w in row] for row in st["W"]], x), t)]
        dA = outer([0.5 * v + 0.5 * v for v in r], x)
        return {"W": [d * s for d in flat(dA)], "s": [lfold(d * w for d, w in zip(flat(dA), flat(st["W"])))]}

    def np_loss(self, st, i):
        r = (st["W"] * st["s"]) @ np.array(self.data["x"][i]) - np.array(self.data["t"][i])
        return 0.5 * float(r @ r)


class VecMatLsq(Learner):
    """r = (u * x) @ A - q; 0.5 * dot(r, r). (u * x) gets A @ dr (a fold over columns), A the
    outer product of (u * x) and dr; u gets that times x."""
    name = "vm_lsq"
    loss = "let r = (u * x[i]) @ A - q[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(3, 4), "q": values(3, 5)}
        self.init = {"u": values(4), "A": values(4, 5)}

    def grad(self, st, i):
        x, q = self.data["x"][i], self.data["q"][i]
        a = [p * v for p, v in zip(st["u"], x)]
        r = [z - v for z, v in zip(vecmat(a, st["A"]), q)]
        dr = [0.5 * v + 0.5 * v for v in r]
        da = matvec(st["A"], dr)
        return {"u": [d * v for d, v in zip(da, x)], "A": flat(outer(a, dr))}

    def np_loss(self, st, i):
        r = (st["u"] * np.array(self.data["x"][i])) @ st["A"] - np.array(self.data["q"][i])
        return 0.5 * float(r @ r)


class OuterSum(Learner):
    """s = sum(outer(a, b) @ x); 0.5 * (s - y)^2. The sum broadcasts e to the MatVec, which
    gives the outer product's node e * x[c] in every row; then a += dO @ b (a fold over c) and
    b += a @ dO (a fold over r)."""
    name = "outer_sum"
    loss = "let s = sum(outer(a, b) @ x[i])\n0.5 * (s - y[i])^2"

    def __init__(self):
        self.data = {"x": values(3, 5), "y": values(3)}
        self.init = {"a": values(4), "b": values(5)}

    def grad(self, st, i):
        x, y = self.data["x"][i], self.data["y"][i]
        a, b = st["a"], st["b"]
        e = lfold(matvec(outer(a, b), x)) - y
        dO = outer([e] * len(a), x)
        return {"a": matvec(dO, b), "b": vecmat(a, dO)}

    def np_loss(self, st, i):
        s = np.sum(np.outer(st["a"], st["b"]) @ np.array(self.data["x"][i]))
        return 0.5 * float(s - self.data["y"][i]) ** 2


class MaxRelu(Learner):
    """0.5 * (max(relu(W @ x)) - y)^2 with rows 1 and 3 of W equal (a tie: the first wins) and
    a sample whose every z is negative (relu's zeros tie; their gradient is +0 times x)."""
    name = "max_relu"
    loss = "0.5 * (max(relu(W @ x[i])) - y[i])^2"

    def __init__(self):
        row = [1.315276, 0.847213, -0.521934]
        self.init = {"W": [[0.731562, -0.216473, 0.402817], row, [0.612849, 0.118372, 0.934712], list(row)]}
        self.data = {"x": [[0.913457, 0.604381, -0.297164],      # rows 1 and 3 win, tied
                           [-1.502913, 0.104627, -0.198342],     # every z < 0: relu's zeros tie
                           [0.204718, -0.731946, 0.859321], [-0.318645, 0.927103, 0.463918]],
                     "y": values(4)}
        self.generic = {"W": values(4, 3)}           # no ties, for finite differences

    def grad(self, st, i):
        x, y = self.data["x"][i], self.data["y"][i]
        z = matvec(st["W"], x)
        h = [v if v > 0 else 0.0 for v in z]
        e = max_fold(h) - y
        dh = [0.0] * len(h)
        dh[max_winner(h)] = e
        dz = [d if v > 0 else 0.0 for d, v in zip(dh, z)]
        return {"W": flat(outer(dz, x))}

    def np_loss(self, st, i):
        z = st["W"] @ np.array(self.data["x"][i])
        return 0.5 * float(np.max(np.maximum(z, 0.0)) - self.data["y"][i]) ** 2


class SoftmaxXent(Learner):
    """z = W @ x + b; softmax cross-entropy logsumexp(z) - dot(onehot(lab, 3), z), plus a
    quarter of max(z) (so that the order of z's contributions shows: logsumexp's own max gets
    1 + sum(-softmax), about 0). logsumexp is m + log(sum(exp(z - m))) with m = max(z), a node
    of its own. Reversed post-order: Loss, 0.25 * max, max, the cross-entropy, Dot, OneHot,
    lab, (m + log), log, sum, exp, (z - m), m, z, b, W @ x. So z receives MaxAdj(0.25), then
    -1 * onehot, then (1/S) * e, then MaxAdj of m's adjoint; labels 3 and -1 are out of range
    (onehot all +0); half the others are max(z)'s coordinate."""
    name = "softmax_xent"
    loss = "let z = W @ x[i] + b\nlogsumexp(z) - dot(onehot(lab[i], 3), z) + 0.25 * max(z)"

    def __init__(self):
        x = values(12, 4, lo=-2, hi=2)
        self.init = {"W": values(3, 4), "b": values(3)}
        zs = [[a + b for a, b in zip(matvec(self.init["W"], r), self.init["b"])] for r in x]
        lab = [float(max_winner(z)) if k % 2 else float(k % 3) for k, z in enumerate(zs)]
        lab[4], lab[6] = 3.0, -1.0                  # out of range: onehot is all +0
        self.data = {"x": x, "lab": lab}         # half the labels are max(z)'s coordinate

    def grad(self, st, i):
        x, lab = self.data["x"][i], self.data["lab"][i]
        z = [a + b for a, b in zip(matvec(st["W"], x), st["b"])]
        m = max_fold(z)
        e = [cr("exp", v - m) for v in z]
        inv = 1.0 / lfold(e)
        oh = [1.0 if lab == j else 0.0 for j in range(3)]
        se = [inv * v for v in e]
        dm = 1.0 + lfold(-v for v in se)
        quarter, ma = [0.0] * 3, [0.0] * 3
        quarter[max_winner(z)], ma[max_winner(z)] = 0.25, dm
        dz = [((q + -1.0 * o) + s) + a for q, o, s, a in zip(quarter, oh, se, ma)]
        return {"W": flat(outer(dz, x)), "b": dz}

    def np_loss(self, st, i):
        z = st["W"] @ np.array(self.data["x"][i]) + st["b"]
        m = np.max(z)
        lab = self.data["lab"][i]
        picked = z[int(lab)] if lab in (0.0, 1.0, 2.0) else 0.0
        return float(m + np.log(np.sum(np.exp(z - m))) - picked + 0.25 * m)


class TanhMLP(Learner):
    """h = tanh(W1 @ x + b1); r = W2 @ h + b2 - t; 0.5 * dot(r, r). Reversed post-order: Loss,
    Dot, r, t, (W2 @ h + b2), b2, W2 @ h, h, (W1 @ x + b1), b1, W1 @ x, ...: W2 gets
    outer(dr, h), h gets dr @ W2 (a fold over rows), the tanh dh * (1 - h * h)."""
    name = "tanh_mlp"
    loss = "let h = tanh(W1 @ x[i] + b1)\nlet r = W2 @ h + b2 - t[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(4, 3, lo=-2, hi=2), "t": values(4, 3)}
        self.init = {"W1": values(5, 3), "b1": values(5), "W2": values(3, 5), "b2": values(3)}

    def grad(self, st, i):
        x, t = self.data["x"][i], self.data["t"][i]
        h = [cr("tanh", a + b) for a, b in zip(matvec(st["W1"], x), st["b1"])]
        r = [(a + b) - c for a, b, c in zip(matvec(st["W2"], h), st["b2"], t)]
        dr = [0.5 * v + 0.5 * v for v in r]
        dh = vecmat(dr, st["W2"])
        da = [d * (1.0 - v * v) for d, v in zip(dh, h)]
        return {"W1": flat(outer(da, x)), "b1": da, "W2": flat(outer(dr, h)), "b2": dr}

    def np_loss(self, st, i):
        h = np.tanh(st["W1"] @ np.array(self.data["x"][i]) + st["b1"])
        r = st["W2"] @ h + st["b2"] - np.array(self.data["t"][i])
        return 0.5 * float(r @ r)


class SinCos(Learner):
    """r = sin(W @ x) + cos(b) - t; 0.5 * dot(r, r) (issue 47): W @ x gets dr * cos(W @ x), cos
    computed anew (correctly rounded, MPFR's here), and b gets -(dr * sin(b)); x spans a few
    periods, so every quadrant is reached."""
    name = "sin_cos"
    loss = "let r = sin(W @ x[i]) + cos(b) - t[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(4, 3, lo=-6, hi=6), "t": values(4, 3)}
        self.init = {"W": values(3, 3, lo=-2, hi=2), "b": values(3, lo=-4, hi=4)}

    def grad(self, st, i):
        x, t = self.data["x"][i], self.data["t"][i]
        z = matvec(st["W"], x)
        r = [(cr("sin", a) + cr("cos", b)) - c for a, b, c in zip(z, st["b"], t)]
        dr = [0.5 * v + 0.5 * v for v in r]
        dz = [d * cr("cos", a) for d, a in zip(dr, z)]
        return {"W": flat(outer(dz, x)), "b": [-(d * cr("sin", b)) for d, b in zip(dr, st["b"])]}

    def np_loss(self, st, i):
        r = np.sin(st["W"] @ np.array(self.data["x"][i])) + np.cos(st["b"]) - np.array(self.data["t"][i])
        return 0.5 * float(r @ r)


def cr_pow(x: float, y: float) -> float:
    """The correctly rounded x^y (MPFR's pow at 53 bits, binary64's range)."""
    with gmpy2.context(precision=53, emin=-1073, emax=1024, subnormalize=True):
        return float(gmpy2.mpfr(x) ** gmpy2.mpfr(y))


class Pow(Learner):
    """r = pow(a, w * x) - t; 0.5 * dot(r, r) (issue 47): with p = pow(a, e), e = w * x, the
    base gets dr * (e * pow(a, e - 1)) and the exponent dr * (p * log(a)) (autodiff's order),
    then w gets de * x; pow and log are MPFR's, the bases stay above 1."""
    name = "pow"
    loss = "let r = pow(a, w * x[i]) - t[i]\n0.5 * dot(r, r)"

    def __init__(self):
        self.data = {"x": values(4, 3), "t": values(4, 3)}
        self.init = {"a": values(3, lo=1.0, hi=2.0), "w": values(3, lo=-0.5, hi=0.5)}

    def grad(self, st, i):
        x, t = self.data["x"][i], self.data["t"][i]
        e = [w * v for w, v in zip(st["w"], x)]
        p = [cr_pow(a, b) for a, b in zip(st["a"], e)]
        dr = [0.5 * v + 0.5 * v for v in [q - c for q, c in zip(p, t)]]
        da = [d * (b * cr_pow(a, b - 1.0)) for d, a, b in zip(dr, st["a"], e)]
        de = [d * (q * cr("log", a)) for d, q, a in zip(dr, p, st["a"])]
        return {"a": da, "w": [d * v for d, v in zip(de, x)]}

    def np_loss(self, st, i):
        r = np.power(st["a"], st["w"] * np.array(self.data["x"][i])) - np.array(self.data["t"][i])
        return 0.5 * float(r @ r)


LEARNERS = [MatVecLsq(), VecMatLsq(), OuterSum(), MaxRelu(), SoftmaxXent(), TanhMLP(), ScaledMatVec(),
            SinCos(), Pow()]
ids = [lr.name for lr in LEARNERS]


def sgd(lr: Learner, steps: int) -> dict:
    """The oracle's state after `steps` steps: per-sample gradients summed from the first
    sample, divided by n, then w - 0.1 * g coordinate by coordinate."""
    st = {k: v if isinstance(v, float) else [list(r) for r in v] if isinstance(v[0], list) else list(v)
          for k, v in lr.init.items()}
    for _ in range(steps):
        grads = [lr.grad(st, i) for i in range(lr.n)]
        for k, v in st.items():
            G = [lfold(g[k][j] for g in grads) for j in range(len(grads[0][k]))]
            new = [w - LR * (s / float(lr.n)) for w, s in zip(flat(v), G)]
            if isinstance(v, float):
                st[k] = new[0]
                continue
            cols = len(v[0]) if isinstance(v[0], list) else 0
            st[k] = [new[r * cols:(r + 1) * cols] for r in range(len(v))] if cols else new
    return st


def printed(st: dict) -> str:
    """The state as the executables print it: NAME[K] or NAME[R,C], then 16 hex digits."""
    lines = []
    for k, v in st.items():
        if isinstance(v, float):
            lines.append(f"{k} {bits(v):016x}")
        elif isinstance(v[0], list):
            lines += [f"{k}[{r},{c}] {bits(x):016x}" for r, row in enumerate(v) for c, x in enumerate(row)]
        else:
            lines += [f"{k}[{j}] {bits(x):016x}" for j, x in enumerate(v)]
    return "\n".join(lines) + "\n"


def compiled(lr: Learner, tmp_path, init=None):
    from alphac.driver import compile_file
    path = tmp_path / f"{lr.name}.alpha"
    path.write_text(lr.source(init))
    return compile_file(path).learner


def as_state(init: dict) -> dict:
    return {k: tuple(flat(v)) for k, v in init.items()}


# -- the checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("lr", LEARNERS, ids=ids)
def test_per_sample_gradient_is_the_oracles_bit_for_bit(lr, tmp_path):
    from alphac.ir.interp import per_sample_gradient
    states = [lr.init] + ([lr.generic] if hasattr(lr, "generic") else [])
    for init in states:
        ir = compiled(lr, tmp_path, init)
        for i in range(lr.n):
            got = per_sample_gradient(ir, as_state(init), i)
            want = lr.grad(init, i)
            for k in want:
                assert [bits(v) for v in got[k]] == [bits(v) for v in want[k]], (k, i, got[k], want[k])


@pytest.mark.parametrize("lr", LEARNERS, ids=ids)
def test_the_oracle_agrees_with_finite_differences(lr):
    base = getattr(lr, "generic", lr.init)
    h = 1e-6
    for i in range(lr.n):
        want = lr.grad(base, i)
        for k in base:
            st = {n: np.array(v, dtype=np.float64) for n, v in base.items()}
            fd = []
            for j in range(st[k].size):
                plus, minus = ({n: v.copy() for n, v in st.items()} for _ in range(2))
                plus[k].flat[j] += h
                minus[k].flat[j] -= h
                fd.append((lr.np_loss(plus, i) - lr.np_loss(minus, i)) / (2 * h))
            assert np.allclose(fd, want[k], rtol=1e-6, atol=1e-6), (k, i, fd, want[k])


def test_the_cases_the_learners_are_for():
    """Ties, relu's zeros, and labels out of range are really there."""
    mx = LEARNERS[3]
    zs = [matvec(mx.init["W"], x) for x in mx.data["x"]]
    hs = [[v if v > 0 else 0.0 for v in z] for z in zs]
    assert any(h[1] == h[3] == max(h) > 0 for h in hs), "a tie between rows 1 and 3"
    assert any(max(h) == 0.0 for h in hs), "a sample whose relu is all zeros"
    assert any(bits(v) == bits(-0.0) for i in range(mx.n) for v in mx.grad(mx.init, i)["W"])
    assert {3.0, -1.0} <= set(LEARNERS[4].data["lab"])


@pytest.mark.parametrize("lr", LEARNERS, ids=ids)
def test_interpreter_and_x86_64_steps_are_the_oracles(lr, tmp_path):
    from alphac.build import build_learner
    from alphac.ir import interp
    ir = compiled(lr, tmp_path)
    exe = tmp_path / lr.name
    exe.write_bytes(build_learner(ir, "x86_64").elf)
    os.chmod(exe, 0o755)
    proc = subprocess.run([str(exe), "--steps", str(STEPS)], capture_output=True, text=True, timeout=60)
    if any(v not in (0.0, 1.0, 2.0) for v in lr.data.get("lab", ())):   # labels 3 and -1: a run
        with pytest.raises(Refusal) as e:                                 # refuses them (issue 46;
            interp.run(ir, STEPS)                                         # their gradients are
        assert (proc.returncode, proc.stderr) == (e.value.exit_code, f"{e.value}\n")  # checked above)
        assert e.value.name == "data-label" and "lab[4]" in e.value.detail
        return
    want = printed(sgd(lr, STEPS))
    assert interp.format_state(ir, interp.run(ir, STEPS)) == want
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == want
