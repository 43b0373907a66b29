"""The contract's functions on numpy arrays: the staging language's Eval, lane by lane.

`evaluate_array(name, *arrays)` runs the function's one definition (alphac/math/functions.py)
under `VecEval`, a backend whose values are arrays with one entry (a lane) per input element.
Each operation is, in every lane, the operation Eval performs: binary64 + - * / and sqrt are
numpy's float64 ufuncs (one IEEE operation per element, round to nearest even, no fused
multiply-add; division and square root take binary64.py's special values), integers are uint64
with numpy's wrap-around (modulo 2^64, as Eval's `& M64`), shifts check Eval's 0..63, and the
high half of a product is computed exactly from 32-bit halves. `m.cond(c, then, else_)` runs
each branch only on the lanes that take it, as Eval would for each lane alone, and merges the
results; a branch that fewer than `DEFER` lanes take (special values, the accurate paths: one
input in 2^10 or fewer) is not run on arrays: those lanes are computed afterwards by
`alphac.math.evaluate`, the scalar Eval itself. So every lane's bits are Eval's bits, with no
approximation anywhere; tests/test_interp_fast.py checks it on special and random inputs.
"""
from __future__ import annotations

import numpy as np

from alphac.math import binary64
from alphac.math.dsl import M64, OPS, Backend, Table, Val

U64, I64, F64 = np.uint64, np.int64, np.float64
DEFER = 8                                  # a branch fewer lanes take runs under Eval instead


def _view(x, t):
    return np.asarray(x).view(t)


def _umulh(a, b):
    m32, s = U64(0xFFFFFFFF), U64(32)
    a0, a1, b0, b1 = a & m32, a >> s, b & m32, b >> s
    p01, p10 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> s) + (p01 & m32) + (p10 & m32)
    return a1 * b1 + (p01 >> s) + (p10 >> s) + (mid >> s)


def _shift(op):
    def run(x, n):
        if np.any(np.asarray(n) >= 64):
            raise ValueError(f"{op.__name__} by {np.max(n)}: shift amounts are 0..63")
        return op(x, n)
    return run


def _b(c):
    return np.asarray(c).astype(U64)


# Each operation of dsl.OPS on the lanes' arrays (binary64 as float64, integers as uint64).
LANE_OPS = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply, "fdiv": binary64.div_array,
       "fneg": np.negative, "fsqrt": binary64.sqrt_array,
       "add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
       "or": np.bitwise_or, "xor": np.bitwise_xor, "umulh": _umulh,
       "shl": _shift(np.left_shift), "shr": _shift(np.right_shift),
       "sar": _shift(lambda x, n: _view(_view(x, I64) >> _view(n, I64), U64)),
       "ult": lambda p, q: _b(p < q), "eq": lambda p, q: _b(p == q), "fgt": lambda p, q: _b(p > q),
       "slt": lambda p, q: _b(_view(p, I64) < _view(q, I64)),
       "bits": lambda p: _view(p, U64), "float": lambda p: _view(p, F64),
       "i2f": lambda p: _view(p, I64).astype(F64)}


class Lanes:
    """The lanes (input positions, ascending) a value has entries for; `pos` and `memo` cache
    where they sit in a larger set's values, and the values of outer `Val`s restricted here."""
    __slots__ = ("idx", "pos", "memo")

    def __init__(self, idx):
        self.idx, self.pos, self.memo = idx, {}, {}


class _Val(Val):
    __slots__ = ("lanes",)                 # None: a constant, the same in every lane


class VecEval(Backend):
    """Runs an algorithm on arrays, every lane as Eval runs it alone (the module doc)."""

    def __init__(self, n: int):
        self.lanes = Lanes(np.arange(n))
        self.deferred: list = []           # lanes left to Eval

    def _val(self, kind, v, lanes) -> _Val:
        out = _Val(self, kind, v)
        out.lanes = lanes
        return out

    def f(self, x) -> Val:
        return self._val("f", F64(x), None)

    def i(self, v: int) -> Val:
        return self._val("i", U64(v & M64), None)

    def arg(self, kind: str, values) -> Val:
        return self._val(kind, values, self.lanes)

    def get(self, a: _Val):
        """a's values on the current lanes (a subset of a's own)."""
        have, cur = a.lanes, self.lanes
        if have is None or have is cur:
            return a.v
        hit = cur.memo.get(id(a))
        if hit is None or hit[0] is not a:
            pos = cur.pos.get(id(have))
            if pos is None or pos[0] is not have:
                pos = cur.pos[id(have)] = (have, np.searchsorted(have.idx, cur.idx))
            hit = cur.memo[id(a)] = (a, a.v[pos[1]])
        return hit[1]

    def op(self, name: str, *a: Val) -> Val:
        lanes = None if all(v.lanes is None for v in a) else self.lanes
        return self._val(OPS[name].result, LANE_OPS[name](*(self.get(v) for v in a)), lanes)

    def load(self, table: Table, index) -> Val:
        words = _TABLES.get(table.name)
        if words is None or words[0] is not table:
            words = _TABLES[table.name] = (table, np.array(table.words, dtype=U64))
        if not isinstance(index, Val):
            return self.i(table.words[index])
        return self._val("i", words[1][self.get(index)], None if index.lanes is None else self.lanes)

    def loadf(self, table: Table, index) -> Val:
        w = self.load(table, index)
        return self._val("f", _view(w.v, F64), w.lanes)

    def cond(self, c: Val, then, else_) -> tuple:
        if c.lanes is None:
            return then() if self.get(c) else else_()
        mask = self.get(c) != 0
        cur, n = self.lanes, len(self.lanes.idx)
        nt = int(np.count_nonzero(mask))
        if nt == n or nt == 0:
            return then() if nt else else_()
        if min(nt, n - nt) < DEFER:        # the few lanes of the rare side go to Eval
            few = mask if nt < n - nt else ~mask
            self.deferred.append(cur.idx[few])
            self.lanes = Lanes(cur.idx[~few])
            return then() if nt >= n - nt else else_()
        out, ends = [], []
        for side, body in ((mask, then), (~mask, else_)):
            self.lanes = Lanes(cur.idx[side])
            vals = body()
            out.append((vals, [self.get(v) for v in vals]))
            ends.append(self.lanes)
        (a, av), (b, bv) = out
        if [v.kind for v in a] != [v.kind for v in b]:
            raise TypeError("the branches of a cond return values of different kinds")
        if all(len(e.idx) == k for e, k in zip(ends, (nt, n - nt))):
            self.lanes, rows = cur, (mask, ~mask)          # nothing was deferred inside
        else:
            idx = np.concatenate([e.idx for e in ends])
            order = np.argsort(idx, kind="stable")
            self.lanes = Lanes(idx[order])
            rows = tuple(np.searchsorted(self.lanes.idx, e.idx) for e in ends)
        merged = []
        for v, x, y in zip(a, av, bv):
            m = np.empty(len(self.lanes.idx), dtype=F64 if v.kind == "f" else U64)
            m[rows[0]], m[rows[1]] = x, y
            merged.append(self._val(v.kind, m, self.lanes))
        return tuple(merged)


_TABLES: dict[str, tuple] = {}


def evaluate_array(name: str, impl, scalar, *args):
    """`impl` (a function of alphac/math/functions.py) elementwise over float64 arrays of one
    shape; `scalar(name, *floats)` computes the lanes left to Eval."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    flat = [np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=F64), shape)).reshape(-1)
            for a in args]
    m = VecEval(flat[0].size)
    out = np.empty(flat[0].size, dtype=F64)
    if flat[0].size < DEFER:                         # as few lanes as a deferred branch
        m.deferred.append(m.lanes.idx)
    else:
        with np.errstate(all="ignore"):
            r = impl(m, *(m.arg("f", a) for a in flat))
            out[m.lanes.idx] = m.get(r)
    for lanes in m.deferred:
        for k in lanes.tolist():
            out[k] = scalar(name, *(float(a[k]) for a in flat))
    return out.reshape(shape)
