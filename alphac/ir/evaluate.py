"""Evaluating learner-IR nodes on binary64 values: constant folding and the reference interpreter.

A value is a flat tuple of floats with the node's shape. `evaluate(node, env)` computes one node
under an `Env` that supplies what the leaves read (state, the current sample's data rows, mean
gradients) and memoizes shared nodes. Every arithmetic step goes through `binary64`, one
rounding each, in exactly the order the LEARNERS.md contract states: elementwise operations
coordinate by coordinate, `dot` and `sum` as left folds starting from the first term, `a^n` as the
left product.

Requires: a node tree built by the checker (shapes consistent). Guarantees: no Python exception
for any float input (IEEE infinities and NaN flow through).
"""
from __future__ import annotations

from typing import Callable

from alphac import math as elementary
from alphac.math import binary64 as f
from alphac.ir.learner import (COMPARE, Bcast, Clock, Const, DataRow, Dot, Elem, Gather, Grad, MatVec, Max,
                               MaxAdj, Node, OneHot, Outer, Pick, Pow, Read, Scatter, Stack, Sum, Unary,
                               VecMat, Where,
                               children, postorder)

Value = tuple[float, ...]

# Every operation an Elem or Unary node names: binary64's + - * / sqrt, and the functions whose
# one definition is alphac.math (exact max, min, abs, relu; correctly rounded exp, log, ...).
BINARY = {**f.BINARY, **{n: (lambda n: lambda a, b: elementary.evaluate(n, a, b))(n)
                         for n, k in elementary.FUNCTIONS.items() if k == 2}}
UNARY = {**f.UNARY, **{n: (lambda n: lambda a: elementary.evaluate(n, a))(n)
                       for n, k in elementary.FUNCTIONS.items() if k == 1}}


class Env:
    """What leaves read. Subclass or fill the dicts; `memo` caches shared nodes."""

    def __init__(self, state: dict[tuple[str, int], Value] | None = None,
                 rows: dict[str, Value] | None = None, grads: dict[str, Value] | None = None,
                 clock: dict[str, float] | None = None):
        self.state = state or {}
        self.clock = clock or {}          # `step` and `epoch` (Learner.clock), in the update
        self.rows = rows or {}
        self.grads = grads or {}
        self.memo: dict[int, Value] = {}


def _broadcast(op: Callable[[float, float], float], a: Value, b: Value) -> Value:
    if len(a) == len(b):
        return tuple(op(x, y) for x, y in zip(a, b))
    if len(a) == 1:
        x = a[0]
        return tuple(op(x, y) for y in b)
    y = b[0]
    return tuple(op(x, y) for x in a)


def _spread(v: Value, size: int) -> Value:
    """v repeated to `size` values: a scalar everywhere, a row vector over a matrix's rows."""
    return v if len(v) == size else v * (size // len(v))


def left_fold_add(values) -> float:
    it = iter(values)
    acc = next(it)
    for v in it:
        acc = f.add(acc, v)
    return acc


def max_winner(v) -> int:
    """The coordinate that max(v)'s gradient goes to (alphac.ir.learner.MaxAdj)."""
    m, win = v[0], 0
    for k in range(1, len(v)):
        if v[k] > m:
            win = k
        m = BINARY["max"](m, v[k])
    return win


def _step(n: Node, env: Env, val: Callable[[Node], Value]) -> Value:
    if isinstance(n, Const):
        return n.values
    if isinstance(n, Read):
        return env.state[(n.name, n.version)]
    if isinstance(n, DataRow):
        return env.rows[n.name]
    if isinstance(n, Grad):
        return env.grads[n.param]
    if isinstance(n, Clock):
        return (env.clock[n.kind],)
    if isinstance(n, Elem):
        a, b = val(n.a), val(n.b)
        if len(a) > 1 and len(b) > 1:
            a, b = _spread(a, n.size), _spread(b, n.size)
        return _broadcast(BINARY[n.op], a, b)
    if isinstance(n, Stack):
        return tuple(v for x in n.items for v in val(x))
    if isinstance(n, Unary):
        op = UNARY[n.op]
        return tuple(op(x) for x in val(n.a))
    if isinstance(n, Where):
        size = n.size
        a, b, t, o = (_spread(val(c), size) for c in (n.a, n.b, n.then, n.other))
        holds = COMPARE[n.cmp]
        return tuple(t[k] if holds(a[k], b[k]) else o[k] for k in range(size))
    if isinstance(n, Pow):
        base = val(n.a)
        out = base
        for _ in range(n.n - 1):
            out = tuple(f.mul(p, x) for p, x in zip(out, base))
        return out
    if isinstance(n, Dot):
        a, b = val(n.a), val(n.b)
        return (left_fold_add(f.mul(x, y) for x, y in zip(a, b)),)
    if isinstance(n, Sum):
        return (left_fold_add(val(n.a)),)
    if isinstance(n, MatVec):
        a, v = val(n.a), val(n.b)
        cols = len(v)
        return tuple(left_fold_add(f.mul(a[r * cols + c], v[c]) for c in range(cols))
                     for r in range(n.a.shape[0]))
    if isinstance(n, VecMat):
        u, a = val(n.a), val(n.b)
        cols = n.b.shape[1]
        return tuple(left_fold_add(f.mul(u[r], a[r * cols + c]) for r in range(len(u)))
                     for c in range(cols))
    if isinstance(n, Outer):
        u, v = val(n.a), val(n.b)
        return tuple(f.mul(x, y) for x in u for y in v)
    if isinstance(n, Max):
        v = val(n.a)
        acc = v[0]
        for x in v[1:]:
            acc = BINARY["max"](acc, x)
        return (acc,)
    if isinstance(n, MaxAdj):
        v, (dt,) = val(n.a), val(n.dt)
        out = [0.0] * len(v)
        out[max_winner(v)] = dt
        return tuple(out)
    if isinstance(n, OneHot):
        (k,) = val(n.a)
        return tuple(1.0 if k == j else 0.0 for j in range(n.shape[0]))
    if isinstance(n, Pick):
        a = val(n.a)
        row = max(1, len(a) // n.a.shape[0])
        return a[n.k * row:(n.k + 1) * row]
    if isinstance(n, Gather):               # k checked before a first step (data-label)
        k, row = int(val(n.k)[0]), max(1, n.size)
        return val(n.a)[k * row:(k + 1) * row]
    if isinstance(n, Scatter):              # dt at row k, +0 elsewhere
        k, dt = int(val(n.k)[0]), val(n.dt)
        return (0.0,) * (k * len(dt)) + dt + (0.0,) * (n.size - (k + 1) * len(dt))
    if isinstance(n, Bcast):
        (x,) = val(n.a)
        return (x,) * n.size
    raise TypeError(f"cannot evaluate {type(n).__name__}")


def evaluate(node: Node, env: Env) -> Value:
    """The value of `node`, evaluating each shared node once (iteratively: deep DAGs are fine)."""
    memo = env.memo
    if id(node) in memo:
        return memo[id(node)]
    for n in postorder([node], memo.keys()):      # a value known is not entered
        if id(n) not in memo:
            memo[id(n)] = _step(n, env, lambda c: memo[id(c)])
    return memo[id(node)]


def is_constant(n: Node) -> bool:
    return all(isinstance(c, Const) for c in children(n)) and not isinstance(
        n, (Read, DataRow, Grad, Clock))


def fold(n: Node) -> Node:
    """`n` as a `Const` when all its operands are constants, else `n` itself."""
    if isinstance(n, Const) or not is_constant(n):
        return n
    return Const(n.shape, evaluate(n, Env()))


def evaluate_at(node: Node, j: int, leaf, memo: dict[int, float]) -> float:
    """The value of an elementwise node at coordinate j (the update is per-coordinate, so this
    is all a partitioned owner computes). `leaf(n)` reads a Read/Grad node at j. Operands come
    first, left to right, from an explicit stack: deep chains are fine."""
    todo = [(node, j)]
    while todo:
        n, k = todo[-1]
        if id(n) in memo:
            todo.pop()
            continue
        pending = [(c, 0 if isinstance(n, Bcast) else k) for c in children(n) if id(c) not in memo]
        if pending:
            todo.extend(reversed(pending))
            continue
        todo.pop()
        memo[id(n)] = _at(n, k, leaf, memo)
    return memo[id(node)]


def term_at(n: Node, j: int, leaf) -> float:
    """Reduced scalar n's term at coordinate j: a `dot`'s product, a `sum`'s or `max(v)`'s
    value (fold_terms folds them)."""
    if isinstance(n, Dot):
        return f.mul(evaluate_at(n.a, j, leaf, {}), evaluate_at(n.b, j, leaf, {}))
    return evaluate_at(n.a, j, leaf, {})


def fold_terms(n: Node, terms) -> float:
    """The left fold of reduced scalar n's terms, in coordinate order: n's value, bit for bit."""
    if isinstance(n, Max):
        acc = terms[0]
        for x in terms[1:]:
            acc = BINARY["max"](acc, x)
        return acc
    return left_fold_add(terms)


def _at(n: Node, j: int, leaf, memo: dict[int, float]) -> float:
    """One node's value at j, its operands' values in `memo`."""
    v = [memo[id(c)] for c in children(n)]
    if isinstance(n, Const):
        return n.values[j] if n.shape else n.values[0]
    if isinstance(n, (Read, Grad, Clock)):
        return leaf(n)
    if isinstance(n, Elem):
        return BINARY[n.op](v[0], v[1])
    if isinstance(n, Unary):
        return UNARY[n.op](v[0])
    if isinstance(n, Where):
        return v[2] if COMPARE[n.cmp](v[0], v[1]) else v[3]
    if isinstance(n, Pow):
        acc = v[0]
        for _ in range(n.n - 1):
            acc = f.mul(acc, v[0])
        return acc
    if isinstance(n, Bcast):
        return v[0]
    raise TypeError(f"{type(n).__name__} is not per-coordinate")
