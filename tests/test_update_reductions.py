"""Reductions in the update (issue 47): `dot`, `sum` and `max(v)` of gradients and of the state
a step starts from, computed before the update's statements (docs/language.md), so that
global-norm clipping is written as in PyTorch:

    let n = sqrt(dot(gW, gW) + dot(gb, gb)); let s = min(1, c / (n + 1e-6)); W = W - lr * (s * gW)

- a clipped SGD step against an oracle written here in plain Python floats (its own left folds,
  not the compiler's), in the interpreter;
- a clipped Adam learner through every engine (tests/differential.py): the interpreter, the plan
  executor, the GPU kernels in the PTX interpreter, x86-64 at every level, AArch64 under qemu,
  3 steps + checkpoint + 2 resumed, and the role executables of a star (an AArch64 owner), ZeRO-3
  on a star with uneven slices (owner 0 holding no coordinate at all, yet publishing the scalar
  state `gnorm`, which reads the norm: it folds the gathered terms too), ZeRO-3 on a hierarchy, ZeRO-2
  on a mesh, fleets, checkpoints moved between them, and GPU owners under the mock driver;
  and the same under `contract exact_sum`;
- a gradient whose coordinates cancel (1e16, 1, -1e16): under exact_sum the update's `sum` and
  `dot` are the exact sums rounded once on every engine, split and GPU owner, under ordered the
  left fold (the two differ);
- mutants the checker or the deployment check refuses by name.
"""
import math
import struct

import pytest

import differential
from conftest import alphac, exact_sum_variant, require_tool

SGD = """learner clip_sgd
data x = [[1.0, 0.5, -1.0], [0.3, 2.0, 0.7], [-1.2, 0.4, 1.5], [2.0, -0.3, 0.2], [0.8, 1.1, -0.6]]
data y = [0.7, 3.1, 0.2, 1.9, 1.4]
const lr = 0.5
const c = 0.75
param w: f64[3] = [0.1, -0.2, 0.3]
param b: f64 = 0.05
loss(i) = 0.5 * (dot(w, x[i]) + b - y[i])^2
update {
  let gw = grad(w)
  let gb = grad(b)
  let n = sqrt(dot(gw, gw) + dot(gb, gb))
  let s = min(1, c / (n + 1e-6))
  w = w - lr * (s * gw)
  b = b - lr * (s * gb)
}
"""

ADAM = """learner clip_adam
data x = [[1.0, 0.5, -1.0], [0.25, 2.0, 1.5], [-0.7, 0.3, 0.9], [1.1, -0.4, 0.2], [0.3, 0.3, -0.2]]
data y = [0.7, 3.1, 0.2, 1.9, -1.0]
const lr = 0.1
const c = 0.5
param W: f64[2, 3] = [[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]]
param b: f64[2] = 0.0
state mW: f64[2, 3] = 0.0
state vW: f64[2, 3] = 0.0
state mb: f64[2] = 0.0
state vb: f64[2] = 0.0
state p1: f64 = 1.0
state p2: f64 = 1.0
state gnorm: f64 = 0.0
loss(i) {
  let h = tanh(W @ x[i] + b)
  0.5 * (sum(h) - y[i])^2
}
update {
  let gW = grad(W)
  let gb = grad(b)
  let n = sqrt(dot(gW, gW) + dot(gb, gb))
  let s = min(1, c / (n + 1e-6))
  let decay = 0.01 / (1 + sum(W * W) + max(abs(vW)))
  gnorm = n
  p1 = p1 * 0.9
  p2 = p2 * 0.999
  mW = 0.9 * mW + 0.1 * (s * gW)
  vW = 0.999 * vW + 0.001 * (s * gW)^2
  W = W - lr * ((mW / (1 - p1)) / (sqrt(vW / (1 - p2)) + 1e-8)) - decay * W
  mb = 0.9 * mb + 0.1 * (s * gb)
  vb = 0.999 * vb + 0.001 * (s * gb)^2
  b = b - lr * ((mb / (1 - p1)) / (sqrt(vb / (1 - p2)) + 1e-8))
}

deployment star {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..2, owner[1] = 2..2, owner[2] = 2..5
  combine (owner[2], (owner[0], owner[1]))
  target owner[0] = aarch64
}

deployment zero3 {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples even
  strategy zero3
  partition W: owner[0] = 0..0, owner[1] = 0..4, owner[2] = 4..6
}

deployment zero3_tree {
  roles owner[5]
  topology hierarchy(fanout 2)
  samples even
  strategy zero3
  partition even
}

deployment zero2_mesh {
  roles coordinator, owner[3]
  topology mesh(coordinator)
  samples even
  strategy zero2
  partition even
}
"""

GPU = """
deployment zero3_gpu {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples even
  strategy zero3
  partition even
  target owner[0] = x86_64+sm_90, owner[2] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[2] = "c.gpuhost"
}
"""


def clipped_sgd_oracle(steps: int) -> list[float]:
    """clip_sgd's state after `steps`, in Python's binary64: each sample's gradient (r * x_ij,
    r for b), summed over the samples from the first, divided by n; the norm's dot a left fold
    from the first product; IEEE minimum (no NaN or zero here)."""
    x = [[1.0, 0.5, -1.0], [0.3, 2.0, 0.7], [-1.2, 0.4, 1.5], [2.0, -0.3, 0.2], [0.8, 1.1, -0.6]]
    y = [0.7, 3.1, 0.2, 1.9, 1.4]
    w, b = [0.1, -0.2, 0.3], 0.05
    for _ in range(steps):
        G, Gb = None, None
        for xi, yi in zip(x, y):
            r = ((w[0] * xi[0] + w[1] * xi[1]) + w[2] * xi[2]) + b - yi
            gi = [r * v for v in xi]
            G = gi if G is None else [a + g for a, g in zip(G, gi)]
            Gb = r if Gb is None else Gb + r
        gw, gb = [v / 5.0 for v in G], Gb / 5.0
        n = math.sqrt(((gw[0] * gw[0] + gw[1] * gw[1]) + gw[2] * gw[2]) + gb * gb)
        s = min(1.0, 0.75 / (n + 1e-6))
        w = [wi - 0.5 * (s * g) for wi, g in zip(w, gw)]
        b = b - 0.5 * (s * gb)
    return w + [b]


def test_clipped_sgd_is_the_oracle(tmp_path):
    """The interpreter's clipped SGD is the plain-Python oracle's, bit for bit, and the clip
    bites (s < 1 in the first step), so the reduction's value reaches the state."""
    from alphac.ir import interp
    from alphac.driver import compile_file
    src = tmp_path / "clip_sgd.alpha"
    src.write_text(SGD)
    lr = compile_file(src).learner
    state = interp.run(lr, 4)
    got = list(state["w"]) + list(state["b"])
    assert [v.hex() for v in got] == [v.hex() for v in clipped_sgd_oracle(4)]
    unclipped = SGD.replace("const c = 0.75", "const c = 1e300")
    src.write_text(unclipped)
    assert interp.run(compile_file(src).learner, 4)["w"] != state["w"]


@pytest.mark.parametrize("contract", ["ordered", "exact_sum"])
def test_clipped_adam_agrees_everywhere(contract, tmp_path):
    """Every engine and deployment prints the contract's bits (ZeRO: the reduction terms
    gathered and folded in coordinate order; under exact_sum every split the single
    process's), with GPU owners under the mock driver in a ZeRO-3 star."""
    require_tool("qemu-aarch64")
    text = ADAM if contract == "ordered" else exact_sum_variant(ADAM)
    files = {}
    if contract == "ordered" and differential.gpu_here():
        text += GPU
        files = {name: differential.gpu_host_text(name).encode() for name in differential.GPU_CARDS}
    rep = differential.check_text(text, tmp_path, files=files)
    assert rep.status == "agreed", rep.summary()
    for engine in ("ptx", "x86_64-v3", "aarch64 resumed 2 steps", "roles:zero3", "roles:zero3_tree",
                   "roles:zero3 resumed 2 steps", "moved:zero3 (single's checkpoint, 2 steps)"):
        assert engine in rep.outcomes, engine
    if contract == "ordered":
        assert "roles:zero2_mesh" in rep.outcomes
        assert not files or "roles:zero3_gpu" in rep.outcomes


def test_plan_gathers_the_terms(tmp_path):
    """`alphac plan` says how ZeRO computes the reduced scalars: the terms, gathered, folded."""
    src = tmp_path / "clip_adam.alpha"
    src.write_text(ADAM)
    code, out, err = alphac("plan", str(src), "--deployment", "zero3")
    assert code == 0, err
    assert "terms of the update's reductions" in out
    assert "folded left, coordinates ascending" in out
    assert "send reduce -> coordinator (term slices)" in out
    code, out, err = alphac("plan", str(src), "--deployment", "star")
    assert code == 0 and "terms" not in out and " reduce " not in out   # held whole by every owner
    src.write_text(CANCEL)                               # exact_sum: the terms summed exactly
    out = alphac("plan", str(src), "--deployment", "zero3")[1]
    assert "(under exact_sum a dot's or sum's exactly, rounded once)" in out, out


# a gradient whose coordinates cancel: sum(g) and dot(g, v) fold left to (1e16 + 1) - 1e16 = 0
# under `contract ordered` (1e16 + 1 rounds to 1e16), and are exactly 1 (then 2, 4, ...: v
# doubles) under exact_sum; a split that puts each coordinate at another owner must not matter
CANCEL = """learner cancel
contract exact_sum
data x = [[1e16, 1.0, -1e16], [1e16, 1.0, -1e16], [1e16, 1.0, -1e16]]
param w: f64[3] = 0.0
state v: f64[3] = 1.0
loss(i) = dot(w, x[i])
update {
  let g = grad(w)
  w = w - 0.5 * sum(g)
  v = v + dot(g, v)
}

deployment zero3 {
  roles coordinator, owner[3]
  topology star(coordinator)
  samples even
  strategy zero3
  partition even
  target owner[1] = aarch64
}

deployment zero1_tree {
  roles owner[3]
  topology hierarchy(fanout 2)
  samples even
  strategy zero1
  partition even
}
"""
CANCEL_GPU = GPU.replace("zero3", "zero2")            # deployment zero2_gpu, strategy zero2


@pytest.mark.parametrize("contract", ["ordered", "exact_sum"])
def test_exact_sum_reductions_are_exact_on_every_engine(contract, tmp_path):
    """Under exact_sum the update's `sum` and `dot` are the exact sums of their terms rounded
    once, on every engine and split (ZeRO-3's terms from three owners, an AArch64 one among
    them; a hierarchy; GPU owners, whose host computes them); under ordered the left fold."""
    require_tool("qemu-aarch64")
    text, files = CANCEL, {}
    if contract == "ordered":
        text, engines = text.replace("contract exact_sum\n", ""), ("interp", "plan", "x86_64")
    else:
        engines = ("interp", "plan", "ptx", "x86_64", "aarch64", "roles", "gpu")
        if differential.gpu_here():
            text += CANCEL_GPU
            files = {name: differential.gpu_host_text(name).encode() for name in differential.GPU_CARDS}
    rep = differential.check_text(text, tmp_path, engines, files=files)
    assert rep.status == "agreed", rep.summary()
    w, v = (-2.5, 32.0) if contract == "exact_sum" else (0.0, 1.0)    # after 5 steps
    want = "".join(f"{s}[{k}] {struct.pack('>d', x).hex()}\n" for s, x in (("w", w), ("v", v))
                   for k in range(3))
    assert rep.outcomes["interp"] == want, rep.outcomes["interp"]
    runs = {e.split()[0] for e in rep.outcomes}
    assert {"plan:zero3", "plan:zero1_tree"} <= runs, runs
    if contract == "exact_sum":
        assert {"ptx", "aarch64", "roles:zero3", "roles:zero1_tree"} <= runs, runs
        assert not files or "roles:zero2_gpu" in runs, runs


MUTANTS = [
    ("let q = dot(x, x)", "E0050", "the update reads data `x`"),
    ("let q = sum(gW * dot(gW, gW))", "E0050", "a reduction inside `sum`'s operand"),
    ("let q = logsumexp(gb)", "E0050", "`logsumexp` in the update reads every coordinate"),
    ("let q = outer(gb, gb)", "E0050", "`outer` in the update reads every coordinate"),
    ("b = b - 0.1 * gb\n  let q = sum(b)", "E0050", "`sum` in the update reads `b` after its assignment"),
]


@pytest.mark.parametrize("line,code,message", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_mutants_refused_by_name(line, code, message, tmp_path):
    src = tmp_path / "m.alpha"
    src.write_text(ADAM.replace("  gnorm = n\n", f"  gnorm = n\n  {line}\n", 1))
    rc, _, err = alphac("check", str(src))
    assert rc != 0 and f"error[{code}]" in err and message in err, err


def test_mixed_shapes_and_scalar_state_under_one_owner(tmp_path):
    """A reduction over coordinate values of two shapes (E0051: no one partition covers it);
    a scalar state that reads a reduction where only the delivered owner holds the gradients
    (E0119); a matrix's sum stays a vector's only in the loss (E0030)."""
    src = tmp_path / "m.alpha"
    src.write_text(ADAM.replace("param b: f64[2] = 0.0", "param b: f64[2] = 0.0\nparam c0: f64 = 0.5")
                   .replace("0.5 * (sum(h) - y[i])^2", "0.5 * (sum(h) - y[i] * c0)^2")
                   .replace("  gnorm = n\n", "  gnorm = n\n  let q = sum(gW * grad(c0))\n"
                            "  c0 = c0 - 0.1 * (q * grad(c0))\n"))
    err = alphac("check", str(src))[2]
    assert "error[E0051]" in err and "of different shapes" in err, err
    one = ADAM + "\ndeployment one {\n  roles coordinator, owner[2]\n  topology star(coordinator)\n" \
                 "  samples even\n  deliver owner[1]\n}\n"
    src.write_text(one)
    err = alphac("check", str(src))[2]
    assert "error[E0119]" in err and "scalar state `gnorm`" in err, err
    src.write_text(one.replace("  gnorm = n\n", ""))
    assert alphac("check", str(src))[0] == 0
    src.write_text(ADAM.replace("0.5 * (sum(h) - y[i])^2", "0.5 * (sum(h) - y[i])^2 + sum(W)"))
    err = alphac("check", str(src))[2]
    assert "error[E0030]" in err, err
