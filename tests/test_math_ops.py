"""The math library's op set is one table (alphac.math.dsl.OPS) and every rendering covers it.

Each backend of the staging language renders an operation through a table keyed by the op's
name: the evaluator (`dsl.EVAL_OPS`), the runtime language (`dsl.RT_OPS`), numpy's lanes
(`vec.LANE_OPS`) and PTX (`ptx.mathfn.PTX_OPS`). Each must name exactly the ops of `OPS`: an op
missing from one rendering (or one that only a rendering knows) fails here, before a function
that uses it fails on one target only. The operators of `Val` and `Backend` must produce
exactly the ops of `OPS`, with the kinds `OPS` gives; and the evaluator and the lanes compute
each op to the same bits on values that reach its corners.
"""
import math
import struct

import numpy as np
import pytest

from alphac.math import dsl, vec
from alphac.math.dsl import OPS, Backend, Val
from alphac.ptx import mathfn

RENDERINGS = {"dsl.EVAL_OPS": dsl.EVAL_OPS, "dsl.RT_OPS": dsl.RT_OPS, "vec.LANE_OPS": vec.LANE_OPS,
              "ptx.mathfn.PTX_OPS": mathfn.PTX_OPS}


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_each_rendering_covers_the_op_table(name):
    table = RENDERINGS[name]
    assert not sorted(set(OPS) - set(table)), f"{name} misses {sorted(set(OPS) - set(table))}"
    assert not sorted(set(table) - set(OPS)), f"{name} has ops OPS lacks: {sorted(set(table) - set(OPS))}"


def test_ptx_forms_are_known():
    assert {form for form, _ in mathfn.PTX_OPS.values()} <= {"op", "shift", "setp"}


class Record(Backend):
    """A backend that only notes which op each operator asks for, with its operands' kinds."""

    def __init__(self):
        self.seen: dict[str, str] = {}

    def f(self, x):
        return Val(self, "f", None)

    def i(self, v):
        return Val(self, "i", None)

    def op(self, name, *a):
        self.seen[name] = "".join(v.kind for v in a)
        return Val(self, OPS[name].result, None)


def test_the_operators_produce_exactly_the_op_table():
    m = Record()
    x, n = m.f(1.0), m.i(1)
    for v in (x + x, x - x, x * x, x / x, -x, m.sqrt(x), x.fgt(x), x.bits(), m.float_(n), m.i2f(n),
              n + n, n - n, n * n, n & n, n | n, n ^ n, n << 3, n >> 3, n.sar(3), n.umulh(n),
              n.ult(n), n.slt(n), n.eq(n)):
        assert isinstance(v, Val)
    assert sorted(m.seen) == sorted(OPS)
    assert m.seen == {k: op.args for k, op in OPS.items()}


F = [0.0, -0.0, 1.5, -0.1, 3.0, 5e-324, 1e308, -1e308, math.inf, -math.inf, math.nan, 2.0 ** -1022]
I = [0, 1, 7, 63, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 0x0123456789ABCDEF, 0xFFFFFFFF00000001]


def _bits(v):
    return struct.unpack("<Q", struct.pack("<d", v))[0] if isinstance(v, float) else int(v)


@pytest.mark.parametrize("name", sorted(OPS))
def test_evaluator_and_lanes_agree_on_every_op(name):
    op = OPS[name]
    pools = [F if k == "f" else I for k in op.args]
    if name in ("shl", "shr", "sar"):
        pools[1] = [0, 1, 13, 63]
    cases = [(a,) for a in pools[0]] if len(pools) == 1 else \
        [(a, b) for a in pools[0] for b in pools[1]]
    e = dsl.Eval()
    want = [e.op(name, *(e.arg(k, x) for k, x in zip(op.args, c))) for c in cases]
    assert all(w.kind == op.result for w in want)
    m = vec.VecEval(len(cases))
    cols = [np.array([c[j] for c in cases], dtype=np.float64 if k == "f" else np.uint64)
            for j, k in enumerate(op.args)]
    with np.errstate(all="ignore"):
        got = m.op(name, *(m.arg(k, col) for k, col in zip(op.args, cols)))
    assert got.kind == op.result
    got_bits = [_bits(g.item()) for g in np.asarray(got.v)]
    want_bits = [_bits(w.v) for w in want]
    if op.result == "f":            # NaN payloads may differ between numpy and Python; not NaN-ness
        got_bits = [b if not math.isnan(g) else "nan" for b, g in zip(got_bits, np.asarray(got.v))]
        want_bits = [b if not math.isnan(w.v) else "nan" for b, w in zip(want_bits, want)]
    assert got_bits == want_bits
