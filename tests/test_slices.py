"""Slices, comprehensions and functions (issue 47): `x[i, 2:5]`, `W[:, 3]`, `a[0]` of a `let`,
`[e for j in 0..n]`, matrices of computed vectors, `def`, and the layers library written with
them (alphac/types/nn.alpha: conv1d, conv2d, pooling).

Golden bits of a program using every form, on the interpreter and both ISAs; gradients against
oracles derived here by hand in the order docs/language.md states (a pick of a computed vector,
a conv1d's weight gradient: its windows' contributions arrive last window first), and central
differences of the oracle; a small conv on a few digits rows on the interpreter, x86-64 (every
level), AArch64, a star of role executables and the PTX interpreter; bad slices refused by code
and position.
"""
import os
import subprocess

import numpy as np
import pytest

from conftest import ROOT, alphac
from test_grad_oracle import as_state, bits, cr, lfold

from alphac.driver import compile_file


def learner(tmp_path, src, name="s"):
    path = tmp_path / f"{name}.alpha"
    path.write_text(src)
    return compile_file(path).learner


def run_exe(lr, target, tmp_path, steps):
    """The state an executable of `lr` for `target` prints after `steps` (None: no emulator)."""
    from alphac.build import build_learner
    exe = tmp_path / f"exe_{target}"
    exe.write_bytes(build_learner(lr, target).elf)
    os.chmod(exe, 0o755)
    cmd = [str(exe), "--steps", str(steps)]
    if target == "aarch64":
        if not os.path.exists("/usr/bin/qemu-aarch64"):
            return None
        cmd = ["qemu-aarch64"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


EVERY_FORM = """learner every_form
data x = [[1.0, -2.0, 0.5, 3.0, -0.25, 2.0], [0.5, 1.5, -1.0, 0.75, 2.5, -0.5], [-1.0, 0.25, 2.0, 1.0, -1.5, 0.5]]
data y = [0.5, -1.0, 2.0]
const C = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
const c = C[1, 0:2]
param W: f64[3, 4] = [[0.1, -0.2, 0.3, 0.05], [0.4, 0.05, -0.1, 0.2], [-0.3, 0.25, 0.15, -0.05]]
param u: f64[3] = [0.3, -0.7, 0.11]
loss(i) {
  let h = tanh(W @ x[i, 1:5])
  let M = [h * u, exp(u), x[i, 3:6]]
  let s = [dot(u[0:2], x[i, j:j+2]) for j in 0..5]
  let A = [[M[a, b] * s[a + b] for b in 0..2] for a in 0..3]
  (h[0] * s[4] + sum(W[:, 3]) * dot(c, A[1]) + sum(flatten(W[1:3, 0:2] * A[0:2, 0:2])) - y[i])^2
}
update {
  W = W - 0.001 * grad(W)
  u = u - 0.001 * grad(u)
}
"""
GOLDEN = """W[0,0] 3fba8fbb6432a353
W[0,1] bfca808eaa062057
W[0,2] 3fd22f236634481f
W[0,3] bf9e32a724ce1505
W[1,0] 3fd9b2d7d0335586
W[1,1] 3fa92ac1c804f0e7
W[1,2] bfb9821af605c2cb
W[1,3] 3fbe61bbf5db9967
W[2,0] bfd44306d1b7122b
W[2,1] 3fcf9f09d954b76f
W[2,2] 3fc3333333333333
W[2,3] bfc0c9d21bddc8fc
u[0] 3fd31426b8a27ae3
u[1] bfe60f9b7e436df4
u[2] 3fbc28f5c28f5c29
"""


def test_every_form_has_its_golden_bits_on_every_engine(tmp_path):
    lr = learner(tmp_path, EVERY_FORM)
    rc, out, err = alphac("run", tmp_path / "s.alpha", "--steps", 3)
    assert rc == 0, err
    assert out == GOLDEN
    for target in ("x86_64", "x86_64-v3", "aarch64"):
        got = run_exe(lr, target, tmp_path, 3)
        assert got in (None, GOLDEN), target


# -- gradients, derived by hand --------------------------------------------------------------------
PICKS = """learner picks
data x = [[0.5, -1.5, 2.0, -0.25], [1.25, 0.75, -3.0, 0.5]]
param u: f64[4] = [0.3, -0.7, 0.11, 0.9]
loss(i) {
  let h = u * x[i]
  h[0] * h[1]
}
update {
  u = u - 0.1 * grad(u)
}
"""


def test_a_pick_of_a_computed_vector_scatters_its_adjoint(tmp_path):
    """loss = h[0] * h[1], h = u * x: h's adjoint is [h1, h0, +0, +0] (row by row, +0 where no
    pick reaches: no addition of a zero), and u's gradient that times x, coordinate by
    coordinate: 0 * x gives -0 where x < 0, as the oracle computes it."""
    from alphac.ir.interp import per_sample_gradient
    lr = learner(tmp_path, PICKS)
    u = [0.3, -0.7, 0.11, 0.9]
    for i, x in enumerate(([0.5, -1.5, 2.0, -0.25], [1.25, 0.75, -3.0, 0.5])):
        h = [a * b for a, b in zip(u, x)]
        want = [h[1] * x[0], h[0] * x[1], 0.0 * x[2], 0.0 * x[3]]
        got = per_sample_gradient(lr, as_state({"u": u}), i)["u"]
        assert [bits(v) for v in got] == [bits(v) for v in want], (i, got, want)
    assert bits(per_sample_gradient(lr, as_state({"u": u}), 1)["u"][2]) == bits(-0.0)


CONV1D_X = [[0.5, -1.0, 2.0, 0.25, 1.5, -0.75], [1.25, 0.5, -2.5, 1.0, 0.125, 2.0],
            [-0.5, 1.75, 0.25, -1.25, 3.0, 0.5]]
CONV1D_T = [0.3, -0.8, 1.1]
CONV1D_K, CONV1D_V = [0.2, -0.35, 0.15], [0.5, -0.25, 0.75, 0.1]
CONV1D = f"""learner conv1d_lsq
data x = {CONV1D_X}
data t = {CONV1D_T}
param k: f64[3] = {CONV1D_K}
param v: f64[4] = {CONV1D_V}
loss(i) {{
  let h = tanh(conv1d(x[i], k, 1, 0))
  0.5 * (dot(v, h) - t[i])^2
}}
update {{
  k = k - 0.1 * grad(k)
  v = v - 0.1 * grad(v)
}}
"""


def conv1d_oracle(k, v, x, t):
    """(loss, dk, dv) by hand. h_j = tanh(lfold_a k[a] * x[j+a]); r = dot(v, h) - t; dr = r
    (0.5 * r^2's (dt * 2) * r with dt = 0.5 folded to 1); dh_j = dr * v_j; the tanh gives
    dh_j * (1 - h_j * h_j); window j's Dot gives k that times x[j:j+3]; k's adjoint is the left
    fold of the windows' contributions in arrival order: the reversed post-order visits the
    last window first, so ((c3 + c2) + c1) + c0."""
    z = [lfold(k[a] * x[j + a] for a in range(3)) for j in range(4)]
    h = [cr("tanh", zj) for zj in z]
    r = lfold(vj * hj for vj, hj in zip(v, h)) - t
    dz = [(r * v[j]) * (1.0 - h[j] * h[j]) for j in range(4)]
    c = [[dz[j] * x[j + a] for a in range(3)] for j in range(4)]
    dk = [lfold(c[j][a] for j in (3, 2, 1, 0)) for a in range(3)]
    return 0.5 * r * r, dk, [r * hj for hj in h]


def test_conv1d_weight_gradient_is_the_oracles(tmp_path):
    from alphac.ir.interp import per_sample_gradient
    lr = learner(tmp_path, CONV1D)
    for i in range(3):
        _, dk, dv = conv1d_oracle(CONV1D_K, CONV1D_V, CONV1D_X[i], CONV1D_T[i])
        got = per_sample_gradient(lr, as_state({"k": CONV1D_K, "v": CONV1D_V}), i)
        assert [bits(g) for g in got["k"]] == [bits(g) for g in dk], (i, got["k"], dk)
        assert [bits(g) for g in got["v"]] == [bits(g) for g in dv]
    x86 = run_exe(lr, "x86_64", tmp_path, 3)
    assert x86 == alphac("run", tmp_path / "s.alpha", "--steps", 3)[1]


def test_the_conv1d_oracle_agrees_with_central_differences():
    h = 1e-6
    for x, t in zip(CONV1D_X, CONV1D_T):
        _, dk, _ = conv1d_oracle(CONV1D_K, CONV1D_V, x, t)

        def loss(k):
            z = np.convolve(x, k[::-1], mode="valid")
            return 0.5 * (float(np.dot(CONV1D_V, np.tanh(z))) - t) ** 2
        k0 = np.array(CONV1D_K)
        fd = [(loss(k0 + h * e) - loss(k0 - h * e)) / (2 * h) for e in np.eye(3)]
        assert np.allclose(fd, dk, rtol=1e-6, atol=1e-8), (fd, dk)


# -- a small CNN on digits rows, on every engine ----------------------------------------------------
def conv_digits_source() -> str:
    x = np.load(ROOT / "examples" / "data" / "digits_x_train.npy")[:6]
    y = np.load(ROOT / "examples" / "data" / "digits_y_train.npy")[:6]
    rows = lambda m: "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in m) + "]"
    rng = np.random.default_rng(47)
    K, W = np.round(rng.uniform(-0.5, 0.5, (3, 3)), 4), np.round(rng.uniform(-0.3, 0.3, (10, 4)), 4)
    return f"""learner conv_digits
data x = {rows(x)}
data y = [{", ".join(repr(float(v)) for v in y)}]
param K: f64[3, 3] = {rows(K)}
param W: f64[10, 4] = {rows(W)}
param b: f64[10] = 0.0
loss(i) {{
  let X = reshape(x[i], 8, 8) * 0.0625
  let C = tanh(conv2d(X, K, 2, 1))
  let h = flatten(maxpool2d(C, 2, 2))
  let z = W @ h + b
  logsumexp(z) - dot(onehot(y[i], 10), z)
}}
update {{
  K = K - 0.5 * grad(K)
  W = W - 0.5 * grad(W)
  b = b - 0.5 * grad(b)
}}
deployment conv_star {{
  roles coordinator, owner[2]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..6
  combine (owner[0], owner[1])
}}
"""


def test_a_small_conv_on_digits_on_every_engine(tmp_path):
    """conv2d (stride 2, padding 1), a 2x2 max pool, an MLP head: the interpreter's bits on
    x86-64 (scalar and AVX2), AArch64 and the PTX interpreter; the star's role executables print the
    plan's bits."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from test_ptx import four_owners, state_bits
    from alphac.ir import interp
    src = tmp_path / "s.alpha"
    lr = learner(tmp_path, conv_digits_source())
    want = alphac("run", src, "--steps", 3)[1]
    assert want != alphac("run", src, "--steps", 0)[1]
    for target in ("x86_64", "x86_64-v3", "aarch64"):
        assert run_exe(lr, target, tmp_path, 3) in (None, want), target
    got = four_owners(lr, [(0, 1), (1, 3), (3, 4), (4, 6)], 2)
    assert state_bits(got) != state_bits(interp.initial_state(lr))
    from alphac.tools.launch import launch
    cwd = os.getcwd()
    os.chdir(tmp_path)                  # the manifest names its inputs from here
    try:
        rc, _, err = alphac("build", "s.alpha", "--deployment", "conv_star", "-o", "star")
        assert rc == 0, err
        rec = launch(tmp_path / "star", steps=3, records=tmp_path / "runs")
    finally:
        os.chdir(cwd)
    assert rec["passed"], rec["roles"]
    assert rec["published"] == alphac("run", src, "--deployment", "conv_star", "--steps", 3)[1]


def grad_text(lr, lanes: int = 2) -> str:
    """learner_grad in the runtime-language source of `lr` for a target of `lanes`."""
    from alphac.lower.learner import learner_source
    text = learner_source(lr, lanes=lanes)[0]
    start = text.index("fn learner_grad(")
    return text[start:text.index("\nfn ", start)]


def grad_lines(lr, lanes: int) -> int:
    return grad_text(lr, lanes).count("\n")


STRIDE1 = (("conv2d(X, K, 2, 1)", "conv2d(X, K, 1, 0)"), ("W @ h + b", "W @ h[0:4] + b"))


def stride1_source() -> str:
    """The small conv at stride 1, no padding: 36 windows of the 8x8 image."""
    src = conv_digits_source()
    for old, new in STRIDE1:
        src = src.replace(old, new)
    return src


def test_a_windowed_learners_sample_blocks_do_not_copy_its_windows(tmp_path):
    """A stride-1 conv (36 windows unrolled) under `ordered`: its learner_grad is one copy of the
    per-sample body, as under exact_sum, not one a lane of each block (nine copies, seventeen
    with f64x8: 6x exact_sum's lines and more before issue 47 item 4); and its executable prints the
    interpreter's bits."""
    src = stride1_source()
    ordered = learner(tmp_path, src, "ordered")
    exact = learner(tmp_path, src.replace("\nparam K", "\ncontract exact_sum\nparam K", 1), "exact")
    assert len(ordered.loss.shape) == 0 and exact.exact and not ordered.exact
    for lanes in (2, 8):               # (ints: pytest's message would print the learners)
        lines = grad_lines(ordered, lanes), grad_lines(exact, lanes)
        assert lines[0] < 1.2 * lines[1], (lanes, lines)
    want = alphac("run", tmp_path / "ordered.alpha", "--steps", 2)[1]
    assert run_exe(ordered, "x86_64", tmp_path, 2) == want


def test_a_windows_copies_of_the_kernel_are_computed_once(tmp_path):
    """Each window of conv2d builds its own node for the kernel's taps (and each channel its own
    window of the image); the code computes such twins once a sample: K[0, 0] is loaded once, not
    once a window (36 before issue 47 item 4). The bits are the interpreter's (above, and every
    test of the examples)."""
    lr = learner(tmp_path, stride1_source())
    for lanes in (2, 8):
        loads = grad_text(lr, lanes).count("loadf(st_K + 0)")
        assert loads == 1, (lanes, loads)


# -- refusals ----------------------------------------------------------------------------------------
BAD = [  # (the loss's expression, code, where the caret points, a piece of the message)
    ("sum(x[i, 2:7])", "E0032", "2:7", "slice 2:7 is out of range"),
    ("sum(x[i, 3:3])", "E0032", "3:3", "slice 3:3 is empty"),
    ("sum(x[i, 4:2])", "E0032", "4:2", "slice 4:2 is empty"),
    ("sum(w[1:k])", "E0033", "k", "must be constant integers"),
    ("sum(x[i, 0:w[0]])", "E0033", "w[0]", "must be constant integers"),
    ("h[4]", "E0032", "4", "index 4 is out of range"),
    ("sum([h[j] for j in 2..2])", "E0032", "2..2", "the range 2..2 is empty"),
    ("sum([h[j] for j in 0..5])", "E0032", "j]", "index 3 is out of range"),
    ("sum(W[:, 1:0])", "E0032", "1:0", "slice 1:0 is empty"),
    ("h[0, 1]", "E0033", "h[0, 1]", "indexed with 2"),
    ("sum(h[0:2.5])", "E0033", "2.5", "must be constant integers"),
    ("sum([w for w in 0..2])", "E0021", "w in", "`w` is declared twice"),
    ("sum(conv1d(h, w, 1, 3))", "E0032", None, "is empty"),
]


@pytest.mark.parametrize("expr, code, at, text", BAD, ids=[b[0] for b in BAD])
def test_bad_slices_are_refused_by_name_and_position(expr, code, at, text, tmp_path):
    src = f"""learner bad
data x = [[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 1.5, 2.5, 3.5, 4.5]]
param w: f64[3] = 0.1
param W: f64[2, 3] = 0.1
param k: f64 = 1.0
loss(i) {{
  let h = w * x[i, 0:3] + [k, k, k]
  {expr}
}}
update {{
  w = w - grad(w)
  W = W - grad(W)
  k = k - grad(k)
}}
"""
    (tmp_path / "bad.alpha").write_text(src)
    rc, _, err = alphac("check", tmp_path / "bad.alpha")
    assert rc != 0 and "Traceback" not in err
    first = err.splitlines()[0]
    assert f"error[{code}]" in first and text in first, err
    where = f"bad.alpha:8:{3 + expr.index(at)}:" if at is not None else "nn.alpha:"
    assert where in first, first


FUNCTIONS = """learner functions
data x = [[1.0, -2.0, 0.5], [0.5, 1.5, -1.0]]
param w: f64[3] = [0.3, -0.7, 0.11]
{defs}
loss(i) = {loss}
update {{
  w = w - 0.1 * grad(w)
}}
"""


def test_a_function_is_its_body_with_its_arguments_computed_once(tmp_path):
    """`def` expands where it is called: the same bits as the body written out; an argument
    read twice is one value (one tanh in the IR); a wrong count, a recursion and a clash are
    refused by name."""
    from alphac.ir.learner import Unary, postorder
    (tmp_path / "f.alpha").write_text(FUNCTIONS.format(
        defs="def sq(v, c) = dot(v, v) * c", loss="sq(tanh(w * x[i]), 2)"))
    (tmp_path / "g.alpha").write_text(FUNCTIONS.format(
        defs="", loss="dot(tanh(w * x[i]), tanh(w * x[i])) * 2"))
    assert alphac("run", tmp_path / "f.alpha", "--steps", 3)[1] == alphac("run", tmp_path / "g.alpha", "--steps", 3)[1]
    lr = compile_file(tmp_path / "f.alpha").learner
    assert sum(isinstance(n, Unary) and n.op == "tanh" for n in postorder([lr.loss])) == 1
    for defs, loss, code in [("def sq(v) = dot(v, v)", "sq(w, w)", "E0042"),
                             ("def sq(v) = sq(v)", "sq(w)", "E0040"),
                             ("def w(v) = v", "sum(w)", "E0021"),
                             ("def sq(v) = v\ndef sq(u) = u", "sum(sq(w))", "E0021")]:
        (tmp_path / "bad.alpha").write_text(FUNCTIONS.format(defs=defs, loss=loss))
        rc, _, err = alphac("check", tmp_path / "bad.alpha")
        assert rc != 0 and f"error[{code}]" in err and "Traceback" not in err, (defs, err)
