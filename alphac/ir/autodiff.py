"""Reverse-mode differentiation of the per-sample loss, giving the LEARNERS.md operation order.

`differentiate(learner)` fills `learner.grads`: for each param, the list of `Contribution`s whose
left-fold sum, coordinate by coordinate, is that param's per-sample gradient. A coordinate that no
contribution covers has gradient +0.0.

The order of operations is part of the numerical contract, so it is fixed here:
- the seed (the loss's own adjoint) is the constant 1;
- nodes are visited parents first (reversed post-order of the loss DAG, children left to right);
  a node's adjoint is the left fold of the contributions it received, in arrival order;
- rules, with `dt` the adjoint of `t`:
    t = a + b    a += dt             b += dt
    t = a - b    a += dt             b += -dt
    t = a * b    a += dt * b         b += dt * a
    t = a / b    a += dt / b         b += -((dt * t) / b)
    t = -a       a += -dt
    t = sqrt(a)  a += (dt * 0.5) / t
    t = exp(a)   a += dt * t                      (the forward value, reused)
    t = expm1(a) a += dt * (t + 1)
    t = log(a)   a += dt / a
    t = log1p(a) a += dt / (1 + a)
    t = tanh(a)  a += dt * (1 - t * t)
    t = sin(a)   a += dt * cos(a)
    t = cos(a)   a += -(dt * sin(a))
    t = abs(a)   a += where(a > 0, dt, where(0 > a, -dt, +0))     (abs'(0) = 0)
    t = relu(a)  a += where(a > 0, dt, +0)                         (relu'(0) = 0)
    t = max(a,b) a += where(b > a, +0, dt)      b += where(b > a, dt, +0)   (ties: to a)
    t = min(a,b) a += where(a > b, +0, dt)      b += where(a > b, dt, +0)   (ties: to a)
    t = pow(a,b) a += dt * (b * pow(a, b - 1))  b += dt * (t * log(a))   (no case at a = 0:
                 log(0) = -inf, so b's is NaN there where torch masks it to 0)
    t = where(c, x, y)  x += where(c, dt, +0)   y += where(c, +0, dt)   (c's operands: nothing)
    t = a^n      a += (dt * n) * a^(n-1)          (a^1 is a itself)
    t = dot(a,b) a += dt * b         b += dt * a
    t = sum(a)   a += dt, at every coordinate
    t = A @ v    A += outer(dt, v)   v += dt @ A      (the transposed product)
    t = u @ A    u += A @ dt         A += outer(u, dt)
    t = outer(u, v)   u += dt @ v        v += u @ dt   (dt the matrix adjoint)
    t = max(a)   a += maxadj(a, dt): dt to the coordinate the pairwise rule picks (MaxAdj)
    t = onehot(k, n)  nothing: a label carries no gradient
    t = E[k]     E += scatter(dt, k): dt at row k, +0 at every other row (a contribution of its
                 own, as a fixed index's is; k, read from data, carries no gradient)
    t = [a, b, ...]   a += dt[0], b += dt[1], ...   (rows, for a matrix of vectors)
    t = a[k]     a's coordinate (row) k += dt, when a is computed (a param's pick is its
                 gradient's contribution at its offset): the adjoint of a value of which some
                 contribution is such a pick is built row by row, row k the left fold of the
                 contributions that reach it in arrival order (a whole contribution gives its
                 row k, a pick its dt), +0 where none does: no addition of a zero
  a vector operand broadcast over a matrix's rows gets its adjoint's column sums (`ones @ dt`);
  and a contribution to a scalar from a vector-shaped expression is its `sum` (a left fold);
- while building the adjoint expressions, constant operands are folded in binary64 and `1 * x`
  becomes `x` (both exact), so `0.5 * r^2` gives exactly `r`, and `r * x[i]` is the gradient of
  `a * x[i]`: no multiplication by 1 ever reaches the learner's arithmetic.

Requires: a checked `Learner`. Guarantees: deterministic; the result references forward nodes
of the loss DAG (so a value the forward pass computed is reused, not recomputed).
"""
from __future__ import annotations

from alphac.ir.evaluate import fold
from alphac.ir.learner import (Bcast, Const, Contribution, DataRow, Dot, Elem, Gather, Grad, Learner,
                               MatVec, Scatter, Max, MaxAdj, Node, OneHot, Outer, Pick, Pow, Read, Stack,
                               Sum, Unary, VecMat, Where, postorder, wide)


def _is_one(n: Node) -> bool:
    return isinstance(n, Const) and not n.shape and n.values[0] == 1.0


def const(v: float) -> Const:
    return Const((), (v,))


def mul(a: Node, b: Node) -> Node:
    if _is_one(a):
        return b
    if _is_one(b):
        return a
    return fold(Elem("mul", a, b, wide(a.shape, b.shape)))


def add(a: Node, b: Node) -> Node:
    return fold(Elem("add", a, b, wide(a.shape, b.shape)))


def div(a: Node, b: Node) -> Node:
    return fold(Elem("div", a, b, wide(a.shape, b.shape)))


def neg(a: Node) -> Node:
    if isinstance(a, Unary) and a.op == "neg":
        return a.a
    return fold(Unary("neg", a, a.shape))


def sub(a: Node, b: Node) -> Node:
    return fold(Elem("sub", a, b, wide(a.shape, b.shape)))


def where(a: Node, b: Node, then: Node, other: Node, cmp: str = "gt") -> Node:
    """`then` where `a cmp b` (a > b by default), else `other`; the shape of all four's broadcast."""
    return fold(Where(a, b, then, other, wide(a.shape, b.shape, then.shape, other.shape), cmp))


def reduce_to(shape: tuple[int, ...], c: Node) -> Node:
    """A contribution for an operand of `shape`: summed if the operand is a broadcast scalar;
    for a vector broadcast over a matrix's rows, its column sums `ones @ c` (left folds over
    the rows; 1 * x is exact, so these are the sums themselves)."""
    if c.shape and not shape:
        return fold(Sum(c))
    if len(c.shape) == 2 and len(shape) == 1:
        return fold(VecMat(Const(c.shape[:1], (1.0,) * c.shape[0]), c, shape))
    return c


def pick(a: Node, k: int) -> Node:
    """Row (coordinate) k of a: an item of a stack itself, else a fixed index."""
    return a.items[k] if isinstance(a, Stack) else fold(Pick(a, k, a.shape[1:]))


def scatter(shape: tuple[int, ...], contribs: list) -> Node:
    """The adjoint of a value of `shape` from whole contributions (nodes) and picks ((k, dt)):
    row k the left fold of those reaching it in arrival order, +0 where none does."""
    rows = []
    for k in range(shape[0]):
        terms = [c[1] if isinstance(c, tuple) else pick(c, k) for c in contribs
                 if not isinstance(c, tuple) or c[0] == k]
        acc = terms[0] if terms else Const(shape[1:], (0.0,) * (shape[1] if shape[1:] else 1))
        for c in terms[1:]:
            acc = add(acc, c)
        rows.append(acc)
    return fold(Stack(tuple(rows), shape))


def differentiate(lr: Learner) -> None:
    lr.grads = {p.name: [] for p in lr.params}
    if lr.loss is None:
        return
    adj: dict[int, list[Node]] = {id(lr.loss): [const(1.0)]}

    def give(n: Node, c: Node) -> None:
        if isinstance(n, (Const, DataRow, Grad, OneHot, MaxAdj)):
            return
        adj.setdefault(id(n), []).append(reduce_to(n.shape, c))

    for t in reversed(postorder([lr.loss])):
        contribs = adj.pop(id(t), None)
        if not contribs:
            continue
        if any(isinstance(c, tuple) for c in contribs):
            dt = scatter(t.shape, contribs)
        else:
            dt = contribs[0]
            for c in contribs[1:]:
                dt = add(dt, c)
        if isinstance(t, Read):
            if t.name in lr.grads:
                lr.grads[t.name].append(Contribution(0, dt))
        elif isinstance(t, Pick):
            offset, root = t.root()
            if isinstance(root, Read) and root.name in lr.grads:
                lr.grads[root.name].append(Contribution(offset, dt))
            elif not isinstance(t.a, (Const, DataRow, Grad, OneHot, MaxAdj, Read)):
                adj.setdefault(id(t.a), []).append((t.k, dt))
        elif isinstance(t, Gather):
            if isinstance(t.a, Read) and t.a.name in lr.grads:
                lr.grads[t.a.name].append(Contribution(0, Scatter(dt, t.k, t.a.shape)))
        elif isinstance(t, Elem):
            a, b = t.a, t.b
            if t.op == "add":
                give(a, dt)
                give(b, dt)
            elif t.op == "sub":
                give(a, dt)
                give(b, neg(dt))
            elif t.op == "mul":
                give(a, mul(dt, b))
                give(b, mul(dt, a))
            elif t.op == "div":
                give(a, div(dt, b))
                give(b, neg(div(mul(dt, t), b)))
            elif t.op == "max":
                give(a, where(b, a, const(0.0), dt))
                give(b, where(b, a, dt, const(0.0)))
            elif t.op == "min":
                give(a, where(a, b, const(0.0), dt))
                give(b, where(a, b, dt, const(0.0)))
            elif t.op == "pow":
                give(a, mul(dt, mul(b, fold(Elem("pow", a, sub(b, const(1.0)), t.shape)))))
                give(b, mul(dt, mul(t, fold(Unary("log", a, a.shape)))))
        elif isinstance(t, Unary):
            a, zero, one = t.a, const(0.0), const(1.0)
            if t.op == "neg":
                give(a, neg(dt))
            elif t.op == "sqrt":
                give(a, div(mul(dt, const(0.5)), t))
            elif t.op == "exp":
                give(a, mul(dt, t))
            elif t.op == "expm1":
                give(a, mul(dt, add(t, one)))
            elif t.op == "log":
                give(a, div(dt, a))
            elif t.op == "log1p":
                give(a, div(dt, add(one, a)))
            elif t.op == "tanh":
                give(a, mul(dt, sub(one, mul(t, t))))
            elif t.op == "sin":
                give(a, mul(dt, fold(Unary("cos", a, a.shape))))
            elif t.op == "cos":
                give(a, neg(mul(dt, fold(Unary("sin", a, a.shape)))))
            elif t.op == "abs":
                give(a, where(a, zero, dt, where(zero, a, neg(dt), zero)))
            elif t.op == "relu":
                give(a, where(a, zero, dt, zero))
        elif isinstance(t, Where):
            give(t.then, where(t.a, t.b, dt, const(0.0), t.cmp))
            give(t.other, where(t.a, t.b, const(0.0), dt, t.cmp))
        elif isinstance(t, Pow):
            rest = t.a if t.n == 2 else Pow(t.a, t.n - 1, t.a.shape)
            give(t.a, mul(mul(dt, const(float(t.n))), rest))
        elif isinstance(t, Dot):
            give(t.a, mul(dt, t.b))
            give(t.b, mul(dt, t.a))
        elif isinstance(t, Sum):
            give(t.a, fold(Bcast(dt, t.a.shape)))
        elif isinstance(t, Bcast):
            give(t.a, dt)
        elif isinstance(t, MatVec):
            give(t.a, fold(Outer(dt, t.b, t.a.shape)))
            give(t.b, fold(VecMat(dt, t.a, t.b.shape)))
        elif isinstance(t, VecMat):
            give(t.a, fold(MatVec(t.b, dt, t.a.shape)))
            give(t.b, fold(Outer(t.a, dt, t.b.shape)))
        elif isinstance(t, Outer):
            give(t.a, fold(MatVec(dt, t.b, t.a.shape)))
            give(t.b, fold(VecMat(t.a, dt, t.b.shape)))
        elif isinstance(t, Max):
            give(t.a, fold(MaxAdj(t.a, dt, t.a.shape)))
        elif isinstance(t, Stack):
            for k, item in enumerate(t.items):
                give(item, pick(dt, k))
