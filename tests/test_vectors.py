"""Vectors over a matrix's rows and vectors of computed scalars (docs/language.md): the
interpreter and both ISAs agree bit for bit, the gradients agree with central differences, and
the misuses are refused by name."""
import os

import numpy as np
import pytest

from alphac.build import build_learner
from alphac.driver import compile_file
from alphac.ir import interp
from backend import run_exe
from conftest import alphac

SRC = """learner bc
data x = [[0.5, -1.0, 0.25], [1.5, 0.3, -0.7], [-0.2, 0.8, 1.1], [0.9, -0.4, 0.6]]
data y = [1.0, -0.5, 0.25, 2.0]
param M: f64[2, 3] = [[0.1, -0.2, 0.3], [0.05, 0.4, -0.1]]
param v: f64[3] = [0.2, -0.1, 0.3]
param a: f64 = 0.5
loss(i) {
  let P = M * x[i] + v
  let q = max(P, v * a)
  let s = [sum(q @ v) * a, dot(v, x[i]), a * a, M[1, 2]]
  (sum(s) + sum(P @ v) - y[i])^2
}
update {
  M = M - 0.05 * grad(M)
  v = v - 0.05 * grad(v)
  a = a - 0.05 * grad(a)
}
"""
X = np.array([[0.5, -1.0, 0.25], [1.5, 0.3, -0.7], [-0.2, 0.8, 1.1], [0.9, -0.4, 0.6]])
Y = [1.0, -0.5, 0.25, 2.0]


def numpy_loss(M, v, a, i):
    P = M * X[i] + v
    q = np.maximum(P, v * a)
    s = [(q @ v).sum() * a, v @ X[i], a * a, M[1, 2]]
    return (sum(s) + (P @ v).sum() - Y[i]) ** 2


@pytest.fixture
def learner(tmp_path):
    src = tmp_path / "bc.alpha"
    src.write_text(SRC)
    return compile_file(src).learner


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_both_isas_equal_the_interpreter(learner, target, tmp_path):
    exe = tmp_path / f"bc.{target}"
    exe.write_bytes(build_learner(learner, target).elf)
    os.chmod(exe, 0o755)
    p = run_exe(exe, "--steps", "4", target=target)
    assert p.returncode == 0 and p.stdout == interp.format_state(learner, interp.run(learner, 4))


def test_the_gradients_agree_with_central_differences(learner):
    st = interp.initial_state(learner)
    M, v, a = np.array(st["M"]).reshape(2, 3), np.array(st["v"]), st["a"][0]
    for i in range(4):
        g = interp.per_sample_gradient(learner, st, i)
        for name, base in (("M", M), ("v", v), ("a", np.array([a]))):
            for k in range(base.size):
                def f(d):
                    args = {"M": M.copy(), "v": v.copy(), "a": np.array([a])}
                    args[name].flat[k] += d
                    return numpy_loss(args["M"], args["v"], args["a"][0], i)
                fd = (f(1e-6) - f(-1e-6)) / 2e-6
                assert abs(fd - g[name][k]) <= 1e-6 * max(1.0, abs(fd)), (i, name, k)


@pytest.mark.parametrize("change,code,msg", [
    ("let P = M * x[i] + v", "E0030", None),                     # replaced below: bad shapes
    ("M = M - 0.05 * grad(M)", "E0050", "a vector over a matrix's rows in the update"),
    ("a = a - 0.05 * grad(a)", "E0050", "a vector built from values in the update"),
])
def test_misuses_are_refused_by_name(change, code, msg, tmp_path):
    bad = {"let P = M * x[i] + v": "let P = M * [1.0, 2.0] + v",
           "M = M - 0.05 * grad(M)": "M = M - 0.05 * grad(M) * v",
           "a = a - 0.05 * grad(a)": "a = a - 0.05 * sum([a, a])"}[change]
    src = tmp_path / "bad.alpha"
    src.write_text(SRC.replace(change, bad))
    rc, _, err = alphac("check", src)
    assert rc == 1 and f"error[{code}]" in err and (msg is None or msg in err), err


def test_the_batched_interpreter_equals_the_scalar_one(learner):
    st = interp.initial_state(learner)
    for samples in (range(4), range(1, 3), [0, 3], range(0)):
        assert interp.owner_contribution(learner, st, samples) == \
            interp.owner_contribution_scalar(learner, st, samples)
