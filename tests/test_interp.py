"""The reference interpreter equals the tests' oracle, bit for bit, for all five learners."""
import pytest
from hypothesis import given, settings, strategies as st

import oracle
from conftest import LEARNER_NAMES, alphac, example


@pytest.mark.parametrize("name", LEARNER_NAMES)
@pytest.mark.parametrize("steps", [0, 1, 5, 50])
def test_run_equals_oracle(name, steps):
    code, out, err = alphac("run", example(name), "--steps", steps)
    assert code == 0, err
    assert out == oracle.run(name, steps=steps)


def test_default_is_five_steps():
    assert alphac("run", example("lsq_adam"))[1] == oracle.run("lsq_adam", steps=5)


def test_learners_md_sample_lines():
    out = alphac("run", example("lsq_adam"))[1]
    assert "w[0] 3fcf8a1f4e1dc7ea\n" in out and "p1 3fe2e54b48d3ae6a\n" in out


def test_bad_steps_is_usage_error():
    for bad in ["-1", "x", "1.5"]:
        code, _, err = alphac("run", example("lsq_adam"), "--steps", bad)
        assert code == 2 and "--steps" in err


def test_non_finite_state_is_refused(tmp_path):
    p = tmp_path / "blowup.alpha"
    p.write_text("learner blowup\nstate s: f64 = 1e300\nupdate {\n  s = s * 1e10\n}\n")
    code, out, err = alphac("run", p, "--steps", 1)
    assert (code, out, err) == (65, "", "refused: non-finite-state\n")


# -- derivatives: the derived per-sample gradient equals the hand-written one, bit for bit -----
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
HAND = {"scalar_regression": oracle.g_scalar, "two_coordinate": oracle.g_two,
        "lsq_momentum": oracle.g_lsq, "lsq_adam": oracle.g_lsq}


@pytest.mark.parametrize("name", sorted(HAND))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_derivative_equals_hand_written(name, data):
    from alphac.driver import compile_file
    from alphac.ir.interp import per_sample_gradient
    lr = compile_file(example(name)).learner
    (p,) = lr.params
    state = {s.name: s.init for s in lr.states}
    state[p.name] = tuple(data.draw(finite) for _ in range(p.size))
    i = data.draw(st.integers(0, lr.nsamples - 1))
    got = per_sample_gradient(lr, state, i)[p.name]
    want = HAND[name]({p.name: list(state[p.name])}, i)
    assert [oracle.hexbits(v) for v in got] == [oracle.hexbits(v) for v in want]


def test_gradient_has_no_multiplication_by_one():
    from alphac.driver import compile_file
    from alphac.ir.learner import Const, Elem, postorder
    for name in HAND:
        lr = compile_file(example(name)).learner
        for contribs in lr.grads.values():
            for c in contribs:
                for n in postorder([c.node]):
                    if isinstance(n, Elem) and n.op == "mul":
                        for side in (n.a, n.b):
                            assert not (isinstance(side, Const) and side.values == (1.0,))
