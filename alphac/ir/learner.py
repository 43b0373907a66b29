"""The learner IR: a checked learner, as data.

A `Learner` is what the checker (`alphac.types.check`) produces from a parsed file: folded
constants, per-sample data, the state in declaration order (params first-class, other state
beside them), the per-sample loss as a DAG of shaped `Node`s over the sample's data row, the
update as an ordered list of assignments whose nodes are per-coordinate, the coordinate groups
(the units that a placement partitions), and after `alphac.ir.autodiff` the per-sample gradient
of every param.

Nodes are identity-compared (eq=False): a node referenced twice is one value computed once, and
reverse-mode differentiation accumulates its adjoint. Shapes are tuples: () scalar, (n,) vector,
(n, m) matrix; a node's `values` are flat, row-major.

`Learner.identity` is the SHA-256 of a canonical serialization of everything that determines the
learner's numbers (constants and data by their bits, state declarations, loss, update, and the
numerical contract) and its `predict` when it has one (a learner without one serializes as it
always did), and nothing else: not the source's path, not the owner count, not the sample split.
"""
from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alphac.npy import NpyFile

CONTRACT = "binary64-rne-nofma-leftfold-v1"   # the LEARNERS.md contract, by name
# The contracts a learner may declare (`contract NAME`), by the name their identity carries:
# `ordered` sums in the declared orders (each owner's left fold, the combine tree); `exact_sum`
# computes every sum the split could reorder exactly and rounds it once (docs/language.md).
CONTRACTS = {"ordered": CONTRACT, "exact_sum": "binary64-rne-nofma-exactsum-v1"}


def type_text(shape: tuple[int, ...]) -> str:
    """A value's type as the language writes it: `f64`, or `f64[2, 3]`."""
    return "f64" if not shape else "f64[" + ", ".join(map(str, shape)) + "]"


class Node:
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return prod(self.shape)


@dataclass(eq=False)
class Const(Node):
    shape: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(eq=False)
class Read(Node):
    """A param or state. `version` 0 is its value before the update, 1 after its assignment."""
    name: str
    shape: tuple[int, ...]
    version: int = 0


@dataclass(eq=False)
class DataRow(Node):
    """Row `i` of a data array, for the current sample `i` (only inside the loss)."""
    name: str
    shape: tuple[int, ...]


@dataclass(eq=False)
class Grad(Node):
    """The mean gradient of a param (only inside the update)."""
    param: str
    shape: tuple[int, ...]


@dataclass(eq=False)
class Elem(Node):
    op: str                 # add | sub | mul | div | max | min | pow ; a scalar operand broadcasts
    a: Node
    b: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Unary(Node):
    op: str                 # neg | sqrt | abs | relu | exp | log | log1p | expm1 | tanh | sin | cos
    a: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Where(Node):
    """`then` where `a CMP b` holds, else `other`, elementwise; scalars broadcast. CMP is an
    IEEE comparison (COMPARE): gt (a > b) and ge (a >= b) are false when either is NaN, eq
    (a == b) too, and ne (not eq) true. Written `where(c, x, y)` (`a < b` is gt with the
    operands swapped), and made by differentiation of max, min, abs, relu and where."""
    a: Node
    b: Node
    then: Node
    other: Node
    shape: tuple[int, ...]
    cmp: str = "gt"


# The comparisons of `Where`, on binary64 (IEEE 754: a NaN is unordered, so only `ne` holds).
COMPARE = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
           "ne": lambda a, b: a != b}


@dataclass(eq=False)
class Clock(Node):
    """`step` or `epoch` (only inside the update): step t of the run, counted from 0 over the
    whole run, resumes included, and t div the batches per epoch, as binary64 (exact below
    2^53). Every role computes them alone from the step it is at (`clock`)."""
    kind: str               # "step" | "epoch"
    shape: tuple[int, ...] = ()


@dataclass(eq=False)
class Pow(Node):
    """`a^n`, n >= 2: the left product ((a*a)*a)..., elementwise."""
    a: Node
    n: int
    shape: tuple[int, ...]


@dataclass(eq=False)
class Dot(Node):
    """Left fold of the elementwise products: ((a0*b0 + a1*b1) + a2*b2) + ..."""
    a: Node
    b: Node
    shape: tuple[int, ...] = ()


@dataclass(eq=False)
class Sum(Node):
    """Left fold of the coordinates, starting from the first."""
    a: Node
    shape: tuple[int, ...] = ()


@dataclass(eq=False)
class Pick(Node):
    """Constant index `k` on the first dimension of a declared name's value."""
    a: Node
    k: int
    shape: tuple[int, ...]

    def root(self) -> tuple[int, Node]:
        """(offset, value): where this one starts in the value a chain of picks starts from, and that value."""
        offset, n = 0, self
        while isinstance(n, Pick):
            offset += n.k * max(1, n.a.size // n.a.shape[0])
            n = n.a
        return offset, n


@dataclass(eq=False)
class MatVec(Node):
    """`A @ v`, A of shape (R, C) and v of (C,): out[r] = (A[r,0]*v[0] + A[r,1]*v[1]) + ...,
    one left fold per row r, over c ascending."""
    a: Node
    b: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class VecMat(Node):
    """`u @ A` (the transposed product), u of (R,) and A of (R, C): out[c] = (u[0]*A[0,c] +
    u[1]*A[1,c]) + ..., one left fold per column c, over r ascending."""
    a: Node
    b: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Outer(Node):
    """`outer(u, v)`: out[r, c] = u[r] * v[c] (one product each)."""
    a: Node
    b: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Max(Node):
    """`max(v)`: the left fold of IEEE maximum, ((v0 max v1) max v2) ..."""
    a: Node
    shape: tuple[int, ...] = ()


@dataclass(eq=False)
class MaxAdj(Node):
    """What `max(v)`'s adjoint `dt` sends to v, exactly the composition of the pairwise rule
    (max(a, b): to b where b > a, else to a): with m_0 = v0 and m_k = m_(k-1) max v_k, the
    winner is the last k >= 1 with v_k > m_(k-1) (an ordered comparison), else 0; the winner
    gets dt and every other coordinate +0. Made by differentiation only."""
    a: Node
    dt: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class OneHot(Node):
    """`onehot(k, n)`: out[j] = 1 where k == j, else +0 (a NaN or a k outside 0..n-1 gives all
    +0). No gradient flows through k: it is a label."""
    a: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Gather(Node):
    """`E[tok[i]]`: row k of `a` (a declared param, state or const; a coordinate when `a` is a
    vector), k a scalar read from data that every engine checks, before a first step, to be a
    whole number from 0 to a.shape[0]-1 (`label_columns`, `data-label`)."""
    a: Node
    k: Node
    shape: tuple[int, ...]
    name: str = ""          # the declared name of `a`, for the refusal's detail


@dataclass(eq=False)
class Scatter(Node):
    """Gather's adjoint, made by differentiation only: `dt` at row k, +0 at every other row
    (the dense value; compiled code writes row k alone, alphac.lower.learner)."""
    dt: Node
    k: Node
    shape: tuple[int, ...]


@dataclass(eq=False)
class Stack(Node):
    """`[a, b, ...]` (or a comprehension) of values that are not all constant: scalars make a
    vector of them, vectors of one length a matrix whose rows they are."""
    items: tuple[Node, ...]
    shape: tuple[int, ...]


@dataclass(eq=False)
class Bcast(Node):
    """A scalar repeated to `shape` (made by differentiation of `sum`, and scalar assignment)."""
    a: Node
    shape: tuple[int, ...]


def wide(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of an elementwise operation's result: its widest operand's (a scalar repeats
    everywhere; a vector f64[C] repeats over the rows of an f64[R, C])."""
    return max(shapes, key=len)


def children(n: Node) -> tuple[Node, ...]:
    if isinstance(n, Stack):
        return n.items
    if isinstance(n, Elem):
        return (n.a, n.b)
    if isinstance(n, Where):
        return (n.a, n.b, n.then, n.other)
    if isinstance(n, (Dot, MatVec, VecMat, Outer)):
        return (n.a, n.b)
    if isinstance(n, MaxAdj):
        return (n.a, n.dt)
    if isinstance(n, (Gather, Scatter)):
        return (n.a if isinstance(n, Gather) else n.dt, n.k)
    if isinstance(n, (Unary, Pow, Sum, Pick, Bcast, Max, OneHot)):
        return (n.a,)
    return ()


def postorder(roots: list[Node], stop: frozenset[int] | set[int] = frozenset()) -> list[Node]:
    """Every node reachable from `roots`, children before parents, left to right, once each;
    a node whose id is in `stop` is listed but not entered (the update's reduced scalars)."""
    seen: set[int] = set()
    out: list[Node] = []
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        n, done = stack.pop()
        if done:
            out.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        for c in () if id(n) in stop else reversed(children(n)):
            if id(c) not in seen:
                stack.append((c, False))
    return out


def update_reductions(update: list[Assign]) -> list[Node]:
    """The update's reduced scalars (docs/language.md, "Reductions in the update"): each
    `dot`, `sum` or `max(v)` that reads a coordinate value, in the order every engine computes
    them, before any statement: statement by statement, each statement's in postorder. The
    checker guarantees they read only the step's starting state, gradients and constants, and
    no other reduced scalar."""
    return [n for n in postorder([a.node for a in update]) if isinstance(n, (Dot, Sum, Max))]


def reduction_group(lr: "Learner", n: Node) -> int | None:
    """The coordinate group a reduced scalar folds over (the checker puts its operands' values
    in one), or None when it reads no coordinate value (scalars and constants alone)."""
    for m in postorder([n]):
        name = m.param if isinstance(m, Grad) else m.name if isinstance(m, Read) else None
        if name is not None and lr.state(name).group is not None:
            return lr.state(name).group
    return None


def exact_reduction(lr: "Learner", n: Node) -> bool:
    """Whether reduced scalar n is an exact sum: under `contract exact_sum`, a `dot` or `sum`
    over a coordinate group is the exact sum of its terms (each `dot` product rounded once, as
    in the ordered fold), rounded once, so its terms may be added in any order; `max` is exact
    already, and a reduction of scalars and constants alone stays the left fold."""
    return lr.exact and isinstance(n, (Dot, Sum)) and reduction_group(lr, n) is not None


def term_states(lr: "Learner") -> list["StateDef"]:
    """Under a partitioned update, each reduced scalar's terms (the products of a `dot`, the
    values of a `sum` or `max(v)`) at every coordinate of its group, as a value the plan
    gathers like a state (`0t<k>`: no Alpha name starts with a digit); each owner computes
    its coordinates' and folds them all, in order (docs/distribution.md)."""
    out = []
    for k, n in enumerate(update_reductions(lr.update)):
        g = reduction_group(lr, n)
        if g is not None:
            out.append(StateDef(f"0t{k}", "terms", lr.groups[g].shape, (), g))
    return out


# -- declarations -------------------------------------------------------------------------------
@dataclass(eq=False)
class DataDef:
    """A data array: written in the source (`literal`, compiled into the executables), or
    loaded from a .npy file (`file`, read by each owner at run time; see alphac.npy)."""
    name: str
    shape: tuple[int, ...]          # (samples, ...)
    literal: tuple[float, ...] | None
    file: "NpyFile | None" = None
    integer: bool = False           # declared i64: indices and labels (alphac.types.check)

    @property
    def origin(self) -> str:
        """"literal", or "npy:" and the file's chunk root."""
        return "literal" if self.file is None else "npy:" + self.file.root

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def cols(self) -> int:
        return prod(self.shape[1:])

    @functools.cached_property
    def values(self):
        """The values, row-major: the literal's, or the file's (read-only binary64, read on
        first use)."""
        return self.literal if self.file is None else self.file.values()


@dataclass
class ConstDef:
    name: str
    shape: tuple[int, ...]
    values: tuple[float, ...]


@dataclass
class StateDef:
    name: str
    kind: str                       # "param" | "state"
    shape: tuple[int, ...]
    init: tuple[float, ...]
    group: int | None = None        # coordinate group; None for scalar (replicated) state

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return 8 * self.size

    def coord_name(self, k: int) -> str:
        """How coordinate k prints: `w[3]`, `W[1,2]`, or `p1` for a scalar."""
        if not self.shape:
            return self.name
        if len(self.shape) == 1:
            return f"{self.name}[{k}]"
        return f"{self.name}[{k // self.shape[1]},{k % self.shape[1]}]"


@dataclass
class Assign:
    target: str
    node: Node
    line: int = 0                   # source line, for annotated listings


@dataclass
class Group:
    """States updated coordinate by coordinate together: a placement partitions them alike."""
    index: int
    shape: tuple[int, ...]
    members: list[str]

    @property
    def size(self) -> int:
        return prod(self.shape)


@dataclass
class Contribution:
    """Part of a param's per-sample gradient: `node` covers coordinates [offset, offset+len)."""
    offset: int
    node: Node

    @property
    def length(self) -> int:
        return max(1, prod(self.node.shape))


@dataclass
class Learner:
    name: str
    consts: list[ConstDef]
    data: list[DataDef]
    states: list[StateDef]
    nsamples: int | None
    loss: Node | None
    update: list[Assign]
    groups: list[Group]
    grads: dict[str, list[Contribution]] = field(default_factory=dict)
    loss_line: int = 0              # source line of the loss (for annotated listings)
    batch: int | None = None        # minibatch size (alphac.ir.order); None: every sample
    shuffle: int | None = None      # the shuffle's seed; None: in sequence
    contract: str = "ordered"       # a key of CONTRACTS

    @property
    def batches(self) -> int:
        """Batches per epoch (1 for the full batch)."""
        from alphac.ir.order import batches
        return batches(self.nsamples or 0, self.batch)
    predict: Node | None = None     # `predict(i)`: a scalar or a vector over the sample's rows

    def state(self, name: str) -> StateDef:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def datum(self, name: str) -> DataDef:
        for d in self.data:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def params(self) -> list[StateDef]:
        return [s for s in self.states if s.kind == "param"]

    @property
    def scalar_states(self) -> list[StateDef]:
        return [s for s in self.states if s.group is None]

    @property
    def exact(self) -> bool:
        """Under `contract exact_sum`: sums over samples and owners are exact, rounded once."""
        return self.contract == "exact_sum"

    @property
    def exact_sums(self) -> bool:
        """Under exact_sum, with a loss: there are gradient and loss sums to keep exact."""
        return self.exact and self.loss is not None

    @property
    def exact_reduced(self) -> bool:
        """Whether the update has a reduced scalar that is an exact sum (exact_reduction)."""
        return any(exact_reduction(self, n) for n in update_reductions(self.update))

    @property
    def clocked(self) -> bool:
        """Whether the update reads `step` or `epoch`."""
        return any(isinstance(n, Clock) for n in postorder([a.node for a in self.update]))

    def clock(self, t: int) -> dict[str, float]:
        """`step` and `epoch` at step t, as binary64 (Python's float() and the runtime's i2f
        both round to nearest: exact below 2^53)."""
        return {"step": float(t), "epoch": float(t // self.batches)}

    @property
    def identity(self) -> str:
        return hashlib.sha256(canonical(self).encode()).hexdigest()


# -- labels ------------------------------------------------------------------------------------------
def _label_uses(lr: "Learner") -> dict[tuple[str, int], tuple[int, str | None]]:
    """(data name, column) -> (K, None) for each `onehot(NAME[i], K)` (column 0) or
    `onehot(NAME[i, c], K)`, (K, "E") for each index `E[NAME[i]]` (`E[NAME[i, c]]`) of an E of K
    rows, of the loss and predict; the smallest K where one column feeds several."""
    out: dict[tuple[str, int], tuple[int, str | None]] = {}
    for n in postorder([x for x in (lr.loss, lr.predict) if x is not None]):
        if isinstance(n, (OneHot, Gather)):
            lab = n.k if isinstance(n, Gather) else n.a
            a, col = (lab.a, lab.k) if isinstance(lab, Pick) else (lab, 0)
            k, of = (n.a.shape[0], n.name) if isinstance(n, Gather) \
                else (n.shape[0], None)
            if isinstance(a, DataRow) and len(a.shape) <= 1 and k < out.get((a.name, col), (k + 1,))[0]:
                out[a.name, col] = (k, of)
    return out


def label_columns(lr: "Learner") -> dict[tuple[str, int], int]:
    """(data name, column) -> K for each label or index that every engine requires to be a whole
    number from 0 to K-1 when it reads the rows (`data-label`; _label_uses)."""
    return {key: k for key, (k, _) in _label_uses(lr).items()}


def label_where(d: "DataDef", col: int, k: int, of: str | None = None) -> tuple[str, str]:
    """The text around the row number in a `data-label` refusal's detail: (`NAME[`, `]: ...`);
    `of`: the array the column indexes (None: a class of onehot)."""
    at = "]" if len(d.shape) == 1 else f", {col}]"
    what = f"a row of {of}" if of is not None else f"a class of onehot(..., {k})"
    return f"{d.name}[", f"{at}: not {what}, a whole number from 0 to {k - 1}"


def label_of(lr: "Learner", name: str, col: int) -> str | None:
    """What column `col` of data `name` indexes (label_where's `of`), or None for a label."""
    return _label_uses(lr)[name, col][1]


def bad_label(lr: "Learner", lo: int = 0, hi: int | None = None, only: str | None = None,
              indices: bool = False) -> str | None:
    """The `data-label` detail for the first label of rows lo..hi-1 (all, by default) that is not a
    whole number from 0 to K-1 (label_columns; in the data's order, then by column, then by row:
    the order the executables read them), or None; `only`: of that data array alone; `indices`:
    of the columns that index an array (`E[NAME[i]]`) alone."""
    import numpy as np
    columns = label_columns(lr)
    for d, (name, col) in ((d, key) for d in lr.data for key in sorted(columns) if key[0] == d.name):
        if only is not None and name != only or indices and label_of(lr, name, col) is None:
            continue
        k = columns[name, col]
        v = np.asarray(d.values, dtype=np.float64).reshape(d.shape[0], -1)[lo:hi, col]
        bad = ~((v > -1) & (v < k) & (v == np.rint(v)))
        if bad.any():
            head, tail = label_where(d, col, k, label_of(lr, name, col))
            return f"{head}{lo + int(np.argmax(bad))}{tail}"
    return None


# -- canonical serialization (the learner's identity) -------------------------------------------
def _vals(values) -> str:
    raw = struct.pack(f"<{len(values)}d", *values)
    return _hexes(raw) if len(values) > 256 else _hexes.__wrapped__(raw)


@functools.lru_cache(maxsize=16)         # a learner's data is serialized once, not once per role
def _hexes(raw: bytes) -> str:
    return ",".join(f"{b:x}" for b in struct.unpack(f"<{len(raw) // 8}Q", raw))


def canonical(lr: Learner) -> str:
    names: dict[int, str] = {}
    lines = [f"contract {CONTRACTS[lr.contract]}", f"learner {lr.name}", f"samples {lr.nsamples}"]
    if lr.batch:
        lines.append(f"batch {lr.batch} order " + ("sequence" if lr.shuffle is None
                                                    else f"shuffle {lr.shuffle}"))
    for c in lr.consts:
        lines.append(f"const {c.name} {c.shape} {_vals(c.values)}")
    for d in lr.data:
        lines.append(f"data {d.name} {d.shape} " +
                     (f"npy {d.file.root}" if d.file is not None else _vals(d.values)))
    for s in lr.states:
        lines.append(f"{s.kind} {s.name} {s.shape} {_vals(s.init)} group={s.group}")

    def ser(roots: list[Node]) -> None:
        for n in postorder(roots):
            if id(n) in names:
                continue
            k = f"%{len(names)}"
            names[id(n)] = k
            args = " ".join(names[id(c)] for c in children(n))
            extra = ""
            if isinstance(n, Const):
                extra = _vals(n.values)
            elif isinstance(n, (Read, DataRow)):
                extra = f"{n.name}@{getattr(n, 'version', 0)}"
            elif isinstance(n, Grad):
                extra = n.param
            elif isinstance(n, (Elem, Unary)):
                extra = n.op
            elif isinstance(n, Clock):
                extra = n.kind
            elif isinstance(n, Where) and n.cmp != "gt":     # gt: as before the comparisons
                extra = n.cmp
            elif isinstance(n, Pow):
                extra = str(n.n)
            elif isinstance(n, Pick):
                extra = str(n.k)
            lines.append(f"{k} = {type(n).__name__} {n.shape} {extra} {args}".rstrip())

    if lr.loss is not None:
        ser([lr.loss])
        lines.append(f"loss {names[id(lr.loss)]}")
    for a in lr.update:
        ser([a.node])
        lines.append(f"assign {a.target} {names[id(a.node)]}")
    if lr.predict is not None:
        ser([lr.predict])
        lines.append(f"predict {names[id(lr.predict)]}")
    return "\n".join(lines) + "\n"
