"""The per-sample gradients of many samples at once, with exactly the bits of `evaluate`.

The reference interpreter's owner contribution (alphac.ir.interp) needs the per-sample gradient
of every one of an owner's samples. Each sample's gradient is an independent chain of binary64
operations, so they are computed together: every node of the gradient DAG is evaluated once for a
batch of samples, as a numpy float64 array of shape (S, node size) (or (1, size) for a node that
no data reaches: every sample has the same value). Vectorizing only ACROSS samples (and across
the independent rows or columns of a product) leaves each sample's operations, and their order,
what `alphac.ir.evaluate._step` does for that sample alone:

- + - * / and sqrt are numpy's float64 ufuncs: one IEEE operation per element, round to nearest
  even, no fused multiply-add (`binary64.div_array`, `sqrt_array` for the special values);
- the contract's functions run their one definition lane by lane (`alphac.math.evaluate_array`);
- every fold (dot, sum, A @ v, u @ A, max, the contributions to a coordinate) is a Python loop
  over the folded axis, left to right from the first term, with an accumulator array: never
  numpy's reductions (np.sum, np.dot, matmul, einsum reorder or sum pairwise);
- where, max's winner, onehot, picks, gathers and scatters are comparisons and copies, as in `_step`.

`gradient_rows` yields the per-sample gradients (all params, in declaration order, flattened) of
consecutive chunks of samples, at most `BUDGET` array entries of node values at a time; the
owner's sum over samples stays a left fold in sample order (interp.owner_contribution).
`loss_rows` yields the samples' losses the same way (interp.step_loss).
tests/test_interp_fast.py checks the bits against the scalar path.
"""
from __future__ import annotations

import numpy as np

from alphac import math as elementary
from alphac.math import binary64 as f
from alphac.ir.learner import (Bcast, Const, DataRow, Dot, Elem, Gather, MatVec, Max, MaxAdj, Node,
                               OneHot, Outer, Scatter, Pick, Pow, Read, Stack, Sum, Unary, VecMat, Where,
                               postorder)

BUDGET = 1 << 22                 # node-value entries held at once (8 bytes each)
ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": f.div_array,
         "neg": np.negative, "sqrt": f.sqrt_array}
CMP = {"gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}   # IEEE
_DATA: dict[int, tuple] = {}     # id(values) -> (values, array): data converted once


def data_array(d) -> np.ndarray:
    hit = _DATA.get(id(d.values))
    if hit is None or hit[0] is not d.values:
        if len(_DATA) >= 16:             # a long fuzz run compiles thousands of learners
            _DATA.clear()
        rows = np.asarray(d.values, dtype=np.float64).reshape(d.shape[0], -1)
        hit = _DATA[id(d.values)] = (d.values, rows)
    return hit[1]


def _col(a: np.ndarray, k: int) -> np.ndarray:
    return a[:, k:k + 1]


def _rows(x: np.ndarray, n: Node) -> np.ndarray:
    """An operand of elementwise n: a vector over a matrix's rows repeated once per row."""
    if 1 < x.shape[1] < n.size:
        return np.tile(x, (1, n.size // x.shape[1]))
    return x


def _fold(terms):
    """The left fold of + over `terms` (arrays), from the first."""
    it = iter(terms)
    acc = next(it)
    for t in it:
        acc = acc + t
    return acc


def _fmax(a, b):
    return elementary.evaluate_array("max", a, b)


def _step(n: Node, val, state, rows) -> np.ndarray:
    """n's values for the batch: (S or 1, n.size), its operands' from `val`."""
    if isinstance(n, Const):
        return np.array(n.values, dtype=np.float64).reshape(1, -1)
    if isinstance(n, Read):
        return np.array(state[n.name], dtype=np.float64).reshape(1, -1)
    if isinstance(n, DataRow):
        return rows[n.name]
    if isinstance(n, Elem):
        a, b = _rows(val(n.a), n), _rows(val(n.b), n)
        op = ARITH.get(n.op)
        return op(a, b) if op else elementary.evaluate_array(n.op, a, b)
    if isinstance(n, Unary):
        op = ARITH.get(n.op)
        return op(val(n.a)) if op else elementary.evaluate_array(n.op, val(n.a))
    if isinstance(n, Where):
        a, b, t, o = (_rows(val(c), n) for c in (n.a, n.b, n.then, n.other))
        return np.where(CMP[n.cmp](a, b), t, o)
    if isinstance(n, Stack):
        items = [val(c) for c in n.items]
        s = max(len(x) for x in items)
        return np.hstack([np.broadcast_to(x, (s, x.shape[1])) for x in items])
    if isinstance(n, Pow):
        base = out = val(n.a)
        for _ in range(n.n - 1):
            out = out * base
        return out
    if isinstance(n, Dot):
        a, b = val(n.a), val(n.b)
        return _fold(_col(a, k) * _col(b, k) for k in range(a.shape[1]))
    if isinstance(n, Sum):
        a = val(n.a)
        return _fold(_col(a, k) for k in range(a.shape[1]))
    if isinstance(n, MatVec):                    # out[:, r]: a fold over c, all rows together
        rows_, cols = n.a.shape
        a = val(n.a).reshape(-1, rows_, cols).transpose(0, 2, 1).copy()    # (S, C, R)
        v = val(n.b)
        return _fold(a[:, c, :] * _col(v, c) for c in range(cols))
    if isinstance(n, VecMat):                    # out[:, c]: a fold over r, all columns together
        rows_, cols = n.b.shape
        u, a = val(n.a), val(n.b).reshape(-1, rows_, cols)
        return _fold(_col(u, r) * a[:, r, :] for r in range(rows_))
    if isinstance(n, Outer):
        u, v = val(n.a), val(n.b)
        return (u[:, :, None] * v[:, None, :]).reshape(max(len(u), len(v)), -1)
    if isinstance(n, Max):
        v = val(n.a)
        acc = _col(v, 0)
        for k in range(1, v.shape[1]):
            acc = _fmax(acc, _col(v, k))
        return acc
    if isinstance(n, MaxAdj):
        v, dt = val(n.a), val(n.dt)
        s = max(len(v), len(dt))
        m, win = _col(v, 0), np.zeros((len(v), 1), dtype=np.intp)
        for k in range(1, v.shape[1]):
            win = np.where(_col(v, k) > m, k, win)
            m = _fmax(m, _col(v, k))
        out = np.zeros((s, v.shape[1]))
        out[np.arange(s), np.broadcast_to(win[:, 0], (s,))] = np.broadcast_to(dt[:, 0], (s,))
        return out
    if isinstance(n, OneHot):
        return np.where(val(n.a) == np.arange(n.shape[0]), 1.0, 0.0)
    if isinstance(n, Pick):
        a = val(n.a)
        row = max(1, a.shape[1] // n.a.shape[0])
        return a[:, n.k * row:(n.k + 1) * row]
    if isinstance(n, (Gather, Scatter)):     # k checked before a first step (data-label)
        k, row = val(n.k)[:, 0].astype(np.intp), max(1, n.size // n.shape[0] if isinstance(n, Scatter) else n.size)
        at = k[:, None] * row + np.arange(row)
        if isinstance(n, Gather):
            return val(n.a)[0][at]
        dt = val(n.dt)
        out = np.zeros((max(len(k), len(dt)), n.size))
        np.put_along_axis(out, np.broadcast_to(at, (len(out), row)), np.broadcast_to(dt, (len(out), row)), 1)
        return out
    if isinstance(n, Bcast):
        x = val(n.a)
        return np.broadcast_to(x, (len(x), n.size))
    raise TypeError(f"cannot evaluate {type(n).__name__} for a batch")


def _chunks(lr, roots, state, samples, per_sample: int):
    """For consecutive chunks of `samples`: (every node's value, by id, the chunk's size)."""
    nodes = postorder(roots)
    step = max(1, BUDGET // max(1, per_sample + sum(n.size for n in nodes)))
    data = {d.name: data_array(d) for d in lr.data}
    for lo in range(0, len(samples), step):
        idx = np.asarray(samples[lo:lo + step], dtype=np.intp)
        rows = {name: a[idx] for name, a in data.items()}
        memo: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for n in nodes:
                memo[id(n)] = _step(n, lambda c: memo[id(c)], state, rows)
        yield memo, len(idx)


def gradient_rows(lr, state, samples):
    """For consecutive chunks of `samples` (a sequence of indices, in order): an array (chunk,
    P) whose row s is sample s's per-sample gradient, every param's in declaration order."""
    width = sum(p.size for p in lr.params)
    for memo, s in _chunks(lr, [c.node for p in lr.params for c in lr.grads[p.name]], state, samples, width):
        yield _gather(lr, memo, s, width)


def loss_rows(lr, state, samples):
    """For consecutive chunks of `samples`: each sample's loss (1-d), with `evaluate`'s bits."""
    for memo, s in _chunks(lr, [lr.loss], state, samples, 1):
        yield np.broadcast_to(memo[id(lr.loss)][:, 0], (s,))


def _gather(lr, memo, s: int, width: int) -> np.ndarray:
    """Each coordinate's left fold of the contributions covering it, +0.0 where none does."""
    g = np.zeros((s, width))
    base = 0
    for p in lr.params:
        covered = np.zeros(p.size, dtype=bool)
        for c in lr.grads[p.name]:
            v = np.broadcast_to(memo[id(c.node)].reshape(-1, c.length), (s, c.length))
            lo, hi = base + c.offset, base + c.offset + c.length
            seen = covered[c.offset:c.offset + c.length]
            if seen.all():
                g[:, lo:hi] = g[:, lo:hi] + v
            elif not seen.any():
                g[:, lo:hi] = v
            else:
                g[:, lo:hi] = np.where(seen, g[:, lo:hi] + v, v)
            covered[c.offset:c.offset + c.length] = True
        base += p.size
    return g
