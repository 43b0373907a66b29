"""An owner's compute as PTX kernels: per-sample gradients, the owner sum, the per-group update.

The builders of what alphac/ptx/abi.py describes (parameters, buffers, what each kernel reads and
writes). `grad_samples` is written as loops over coordinates and rows (`_Loops`; docs/gpu.md,
"grad_samples: loops"): scalars in registers, a vector inline where a loop reads it or kept (in
registers up to IN_REGISTERS coordinates, REGISTERS_MAX in all, else in a .local array up to
STORE_MAX), every fold a loop over its terms ascending from the first term, so its code and
registers do not grow with the widths; every loop is marked for ptxas not to unroll. The update
kernels (one thread a coordinate) and the math functions' kernels lower each node to registers
(`_Lower`).

Requires: a checked, differentiated `Learner`. Guarantees: every binary64 operation is the one
`alphac.ir.interp` performs, in its order (tests/test_ptx.py runs the PTX to prove it); the same
learner and target give the same text, byte for byte.
"""
from __future__ import annotations

from typing import Callable

from alphac.formats import XS_WORDS
from alphac.math import ELEMENTARY, binary64
from alphac.ir.learner import (Bcast, Clock, Const, DataRow, Dot, Elem, Gather, Grad, Group, Learner,
                               MatVec, Max, MaxAdj, Node, OneHot, Outer, Pick, Pow, Read, Scatter, Stack,
                               Sum, Unary, VecMat, Where, children, exact_reduction, postorder,
                               reduction_group, update_reductions)
from alphac.ptx.abi import (Kernel, Param, batch_kernels, batch_nodes, batch_widths, card_reductions,
                            card_scalars, exact_positions, fused, param_count, param_layout, products, row_layout, sum_kernels)
from alphac.ptx import xsum
from alphac.ptx.mathfn import PtxSource, table_words_as_floats
from alphac.ptx.render import PTX_VERSION, Emitter, f64imm

ARITH = {"add", "sub", "mul", "div", "neg", "sqrt"}       # one PTX instruction each
SETP = {"gt": "gtf64", "ge": "gef64", "eq": "eqf64", "ne": "neuf64"}    # Where's comparisons


def math_tables(nodes: list[Node]) -> list:
    """The constant tables the alphac.math functions among `nodes` read, by name."""
    from alphac.math import _function_source
    used = {n.op for n in nodes if isinstance(n, (Unary, Elem)) and n.op not in ARITH}
    tables = {}
    for name in sorted(used):
        tables.update(_function_source(name)[1])
    return [t for _, t in sorted(tables.items())]


def table_params(nodes: list[Node]) -> list[Param]:
    return [Param(f"tbl_{t.name}", "u64", "const", values=table_words_as_floats(t))
            for t in math_tables(nodes)]


class _Lower:
    """Node -> this thread's registers: one per coordinate (loss), or one for coordinate k.
    The functions of alphac.math are written inline by their PTX backend; `base` maps each
    table parameter (`tbl_<name>`) to the register holding its address."""

    def __init__(self, em: Emitter, leaf: Callable[[Node], list[str]], per_coordinate: bool,
                 base: dict[str, str] | None = None):
        self.em, self.leaf, self.per_coordinate = em, leaf, per_coordinate
        self.memo: dict[int, list[str]] = {}
        self.math = PtxSource(em, lambda t: (base or {})[f"tbl_{t.name}"])

    def call(self, name: str, *regs: str) -> str:
        from alphac.math import _IMPL
        return _IMPL[name](self.math, *(self.math.arg("f", r) for r in regs)).v

    def __call__(self, root: Node) -> list[str]:
        for n in postorder([root], self.memo.keys()):     # a value known is not entered
            if id(n) not in self.memo:
                self.memo[id(n)] = self.step(n)
        return self.memo[id(root)]

    def value(self, n: Node) -> list[str]:
        return self.memo[id(n)]

    def fold(self, regs: list[str]) -> str:
        acc = regs[0]
        for r in regs[1:]:
            acc = self.em.op("add", acc, r)
        return acc

    def step(self, n: Node) -> list[str]:
        em, vals = self.em, {id(c): self.value(c) for c in children(n)}
        v = lambda c: vals[id(c)]                                           # noqa: E731
        if isinstance(n, (Const, Read, DataRow, Grad, Clock)):
            return self.leaf(n)
        if isinstance(n, Elem):         # a scalar repeats everywhere, a vector over the rows
            size = max(len(v(n.a)), len(v(n.b)))
            a, b = (v(c) * (size // len(v(c))) for c in (n.a, n.b))
            if n.op in ARITH:
                return [em.op(n.op, x, y) for x, y in zip(a, b)]
            return [self.call(n.op, x, y) for x, y in zip(a, b)]
        if isinstance(n, Unary):
            if n.op in ARITH:
                return [em.op(n.op, x) for x in v(n.a)]
            return [self.call(n.op, x) for x in v(n.a)]
        if isinstance(n, Where):
            size = max(len(v(c)) for c in (n.a, n.b, n.then, n.other))
            a, b, t, o = (v(c) * (size // len(v(c))) for c in (n.a, n.b, n.then, n.other))
            return [em.op("selpf", t[k], o[k], em.op(SETP[n.cmp], a[k], b[k])) for k in range(size)]
        if isinstance(n, Pow):
            out = base = v(n.a)
            for _ in range(n.n - 1):
                out = [em.op("mul", p, x) for p, x in zip(out, base)]
            return out
        if isinstance(n, Dot):
            return [self.fold([em.op("mul", x, y) for x, y in zip(v(n.a), v(n.b))])]
        if isinstance(n, Sum):
            return [self.fold(v(n.a))]
        if isinstance(n, MatVec):       # one left fold per row r, over c ascending
            a, x = v(n.a), v(n.b)
            return [self.fold([em.op("mul", a[r * len(x) + c], y) for c, y in enumerate(x)])
                    for r in range(n.shape[0])]
        if isinstance(n, VecMat):       # one left fold per column c, over r ascending
            u, a = v(n.a), v(n.b)
            return [self.fold([em.op("mul", x, a[r * n.size + c]) for r, x in enumerate(u)])
                    for c in range(n.size)]
        if isinstance(n, Outer):
            return [em.op("mul", x, y) for x in v(n.a) for y in v(n.b)]
        if isinstance(n, Max):          # the left fold of alphac.math's max
            acc = v(n.a)[0]
            for x in v(n.a)[1:]:
                acc = self.call("max", acc, x)
            return [acc]
        if isinstance(n, MaxAdj):       # dt to the last k >= 1 with a[k] > max(a[:k]), else to 0
            a, (z,), zero, m, gt = v(n.a), v(n.dt), em.op("movf", f64imm(0.0)), v(n.a)[0], []
            for k in range(1, len(a)):
                gt.append(em.op("gtf64", a[k], m))
                m = self.call("max", m, a[k]) if k + 1 < len(a) else m
            out = [zero] * len(a)
            for k in range(len(a) - 1, 0, -1):  # z: dt while no later coordinate has won
                out[k], z = em.op("selpf", z, zero, gt[k - 1]), em.op("selpf", zero, z, gt[k - 1])
            return [z] + out[1:]
        if isinstance(n, OneHot):       # 1 where k == j (ordered: never with a NaN), else +0
            one, zero = em.op("movf", f64imm(1.0)), em.op("movf", f64imm(0.0))
            return [em.op("selpf", one, zero, em.op("eqf64", v(n.a)[0], f64imm(float(j))))
                    for j in range(n.size)]
        if isinstance(n, Stack):
            return [r for x in n.items for r in v(x)]
        if isinstance(n, Pick):
            a = v(n.a)
            row = max(1, len(a) // n.a.shape[0])
            return a[n.k * row:(n.k + 1) * row]
        if isinstance(n, Bcast):
            return v(n.a) * (1 if self.per_coordinate else n.size)
        raise TypeError(f"no PTX for {type(n).__name__}")


def _pointers(em: Emitter, params: list[Param]) -> dict[str, str]:
    return {p.name: em.op("global", em.op("ldp64", p.name)) for p in params if p.type == "u64"}


def _module(em: Emitter, lr: Learner, name: str, params: list[Param], sm: int,
            group: int | None = None) -> Kernel:
    em.label("$done")
    em.op("ret")
    text = em.module(name, [(p.name, p.type) for p in params], sm, f"{lr.name}: {name}")
    return Kernel(name, sm, tuple(params), text, group)


STORE_MAX = 8192  # a vector read more than once is kept in a .local array up to this many coordinates
IN_REGISTERS = 16  # ... and in registers up to this many (no local memory for small learners)
REGISTERS_MAX = 64  # the coordinates a thread keeps in registers in all; beyond, in .local arrays
LOCAL_MAX = 8192   # the .local coordinates a thread keeps in all (64 KiB: the area's size is this
#                    times every resident thread of the card, 17 GB on an H200); beyond, recomputed


class _Loops:
    """grad_samples' lowering: a node's value at coordinate k (a u32 register) as code at the
    current position. Scalars are computed once, at the top, in registers; a vector is either
    inline (evaluated where a loop reads coordinate k: leaves load from global memory) or kept in
    a .local array (`stored`: computed by its own loop before its first reader). Every fold (dot,
    sum, max, each row of `A @ v`, each column of `u @ A`) is a loop over its terms ascending, the
    first term the accumulator's start (never added to a zero). The code grows with the graph,
    not with the widths: the registers a loop uses do not depend on its trip count."""

    def __init__(self, em: Emitter, base: dict[str, str], i: str, roots: list[Node],
                 loaded: dict[int, str] | None = None):
        self.em, self.base, self.i = em, base, i
        self.loaded = loaded or {}              # node -> its row's address (a batched product)
        self.math = PtxSource(em, lambda t: base[f"tbl_{t.name}"])
        self.scalar: dict[int, str] = {}
        self.stored: dict[int, str] = {}        # node -> the register holding its array's address
        self.regvec: dict[int, list[str]] = {}  # node -> its coordinates' registers (small vectors)
        self.known: dict[str, int] = {}         # u32 registers holding a constant index
        self.winner: dict[int, tuple[str, str]] = {}    # MaxAdj -> (winner index, dt)
        self.rows: dict[str, str] = {}          # data name -> this sample's row address
        self.zero = em.op("movf", f64imm(0.0))
        self.kept: dict[int, bool] = {}          # node -> keep()'s decision
        self.local = 0                          # the .local coordinates kept so far
        self.registers, self.inregs = 0, {}     # ... and those in registers; node -> in registers?
        uses: dict[int, int] = {}
        many: set[int] = set()                  # read several times per coordinate of a reader
        nodes, live = postorder(roots), {id(r) for r in roots}
        for n in reversed(nodes):               # what is read from a batch buffer is not entered
            if id(n) in live and id(n) not in self.loaded:
                live.update(id(c) for c in children(n))
        nodes = [n for n in nodes if id(n) in live]
        for n in nodes:
            for c in children(n):
                uses[id(c)] = uses.get(id(c), 0) + 1
                if isinstance(n, (MatVec, VecMat, Outer)):
                    many.add(id(c))
        self.uses, self.many = uses, many
        for n in nodes:                         # each data row's address, before any loop
            if isinstance(n, DataRow) and "data_" + n.name not in self.rows:
                self.rows["data_" + n.name] = em.op("add64", base["data_" + n.name], em.op("wide", i, 8 * n.size))
        for n in nodes:
            self.prepare(n)

    def call(self, name: str, *regs: str) -> str:
        from alphac.math import _IMPL
        return _IMPL[name](self.math, *(self.math.arg("f", r) for r in regs)).v

    def keep(self, n: Node) -> bool:
        """Is vector `n` computed once (into registers or a .local array)? `wants`, decided once
        per node in the order prepare meets them: in registers when it has at most IN_REGISTERS
        coordinates and those kept in registers stay within REGISTERS_MAX (a small constant or
        stack always), else in a .local array within LOCAL_MAX coordinates a thread (what must be
        kept, a constant or a stack, always is)."""
        if id(n) not in self.kept:
            must = isinstance(n, (Const, Stack))        # these two in registers when small, as before
            regs = must or self.registers + n.size <= REGISTERS_MAX
            want = self.wants(n) and (must or n.size <= IN_REGISTERS and regs or self.local + n.size <= LOCAL_MAX)
            self.inregs[id(n)] = want and n.size <= IN_REGISTERS and regs
            self.registers += n.size if self.inregs[id(n)] else 0
            self.local += n.size if want and not self.inregs[id(n)] else 0
            self.kept[id(n)] = want
        return self.kept[id(n)]

    def wants(self, n: Node) -> bool:
        """Would vector `n` be kept? A constant that is not uniform and a stack (their
        coordinates are not a function of k), a product's result, and a vector read more than
        once (by two readers, or per coordinate of a product), if not too large."""
        if isinstance(n, Const):
            return len({binary64.bits(x) for x in n.values}) > 1
        if isinstance(n, Stack):
            return True
        if isinstance(n, (Read, DataRow, Bcast, Pick, OneHot)) or n.size > STORE_MAX:
            return False
        return isinstance(n, (MatVec, VecMat)) or self.uses.get(id(n), 0) > 1 or id(n) in self.many

    def const(self, j: int) -> str:
        """A u32 register holding index j (known to `value`: a small vector's register j)."""
        r = self.em.op("mov32", j)
        self.known[r] = j
        return r

    def iop(self, op: str, k: str, c: int) -> str:
        """Index arithmetic (add32 mul32 div32 rem32 with a constant), done here on a known index."""
        if k in self.known:
            j = self.known[k]
            return self.const({"add32": j + c, "mul32": j * c, "div32": j // c, "rem32": j % c}[op])
        return self.em.op(op, k, c)

    def loop(self, count: int, body: Callable[[str], None], start: int = 0) -> None:
        """body(k) for k = start .. count-1, ascending (emitted once, as a loop)."""
        em = self.em
        k = self.const(start) if count - start == 1 else em.op("mov32", start)
        if count - start == 1:
            body(k)
            return
        top, end = em.fresh_label(), em.fresh_label()
        em.label(top)
        em.op("nounroll")               # unrolled, a long body spills and takes ptxas minutes
        em.op("braif", em.op("ge", k, count), end)
        body(k)
        em.op("add32", k, 1, d=k)
        em.op("bra", top)
        em.label(end)

    def fold(self, count: int, term: Callable[[str], str], op: str = "add") -> str:
        """The left fold of term(0), term(1), ... term(count-1): `op` is add or max."""
        em = self.em
        acc = em.op("movf", term(self.const(0)))

        def more(k: str) -> None:
            if op == "add":
                em.op("add", acc, term(k), d=acc)
            else:
                em.op("movf", self.call(op, acc, term(k)), d=acc)
        if count > 1:
            self.loop(count, more, 1)
        return acc

    def index(self, n: Node, of: Node, k: str | None) -> str | None:
        """Coordinate k of `of` (size n.size) read from child `n`: a scalar repeats everywhere, a
        vector over the rows (as _Lower's lists repeat)."""
        if n.size == 1:
            return None
        return k if n.size == of.size else self.iop("rem32", k, n.size)

    def value(self, n: Node, k: str | None) -> str:
        if id(n) in self.loaded:
            at = self.loaded[id(n)]
            return self.em.op("ld", at if k is None else self.em.op("add64", at, self.em.op("wide", k, 8)), 0)
        if id(n) in self.scalar:
            return self.scalar[id(n)]
        if id(n) in self.regvec:       # a small vector: register k, or selected by k
            regs = self.regvec[id(n)]
            if k in self.known:
                return regs[self.known[k]]
            out = regs[0]
            for j in range(1, len(regs)):
                out = self.em.op("selpf", regs[j], out, self.em.op("eq32", k, j))
            return out
        if id(n) in self.stored:
            return self.em.op("ldl", self.em.op("add64", self.stored[id(n)], self.em.op("wide", k, 8)), 0)
        return self.compute(n, k)

    def prepare(self, n: Node) -> None:
        em = self.em
        if any(id(n) in d for d in (self.loaded, self.scalar, self.stored, self.winner, self.regvec)):
            return
        if n.size == 1:
            self.scalar[id(n)] = self.compute(n, None)
        elif isinstance(n, MaxAdj):     # the winner: the last k >= 1 with a[k] > max(a[:k]), else 0
            m, win = em.op("movf", self.value(n.a, self.const(0))), em.op("mov32", 0)

            def step(k: str) -> None:
                x = self.value(n.a, k)
                em.op("selp32", k, win, em.op("gtf64", x, m), d=win)
                em.op("movf", self.call("max", m, x), d=m)
            self.loop(n.a.size, step, 1)
            self.winner[id(n)] = (win, self.value(n.dt, None))
        elif self.keep(n) and self.inregs[id(n)]:
            if isinstance(n, Const):
                self.regvec[id(n)] = [em.op("movf", f64imm(x)) for x in n.values]
            elif isinstance(n, Stack):
                self.regvec[id(n)] = self.stacked(n)
            elif self.costly(n):        # a function's code once, in a loop, each value to its register
                regs = self.regvec[id(n)] = [em.op("movf", self.zero) for _ in range(n.size)]

                def move(k: str) -> None:
                    x = self.compute(n, k)
                    for j, r in enumerate(regs):
                        em.op("selpf", x, r, em.op("eq32", k, j), d=r)
                self.loop(n.size, move)
            else:
                self.regvec[id(n)] = [self.compute(n, self.const(j)) for j in range(n.size)]
        elif self.keep(n):
            buf = em.op("addrl", em.local(n.size))
            if isinstance(n, Const):
                for k, x in enumerate(n.values):
                    em.op("stl", buf, 8 * k, em.op("movf", f64imm(x)))
            elif isinstance(n, Stack):
                for k, x in enumerate(self.stacked(n)):
                    em.op("stl", buf, 8 * k, x)
            else:
                self.loop(n.size, lambda k: em.op(
                    "stl", em.op("add64", buf, em.op("wide", k, 8)), 0, self.compute(n, k)))
            self.stored[id(n)] = buf

    def costly(self, n: Node) -> bool:
        """Does computing `n` inline write one of alphac.math's elementary functions?"""
        if any(id(n) in d for d in (self.loaded, self.scalar, self.stored, self.regvec)):
            return False
        return isinstance(n, (Unary, Elem)) and n.op in ELEMENTARY or \
            isinstance(n, (Unary, Elem, Where, Bcast)) and any(self.costly(c) for c in children(n))

    def stacked(self, n: Stack) -> list[str]:
        """A stack's coordinates: its scalars, or its rows' coordinates, row after row."""
        return [self.value(x, None if x.size == 1 else self.const(c))
                for x in n.items for c in range(x.size)]

    def load(self, key: str, k: str | None) -> str:
        em = self.em
        addr = self.base[key]
        if key.startswith("data_"):
            addr = self.rows[key]
        return em.op("ld", addr if k is None else em.op("add64", addr, em.op("wide", k, 8)), 0)

    def compute(self, n: Node, k: str | None) -> str:
        em, v = self.em, self.value
        if isinstance(n, Const):        # uniform (a stored constant never gets here)
            return em.op("movf", f64imm(n.values[0]))
        if isinstance(n, Read):
            return self.load("state_" + n.name, k)
        if isinstance(n, DataRow):
            return self.load("data_" + n.name, k)
        if isinstance(n, Elem):
            a, b = v(n.a, self.index(n.a, n, k)), v(n.b, self.index(n.b, n, k))
            return em.op(n.op, a, b) if n.op in ARITH else self.call(n.op, a, b)
        if isinstance(n, Unary):
            a = v(n.a, self.index(n.a, n, k))
            return em.op(n.op, a) if n.op in ARITH else self.call(n.op, a)
        if isinstance(n, Where):
            a, b, t, o = (v(c, self.index(c, n, k)) for c in (n.a, n.b, n.then, n.other))
            return em.op("selpf", t, o, em.op(SETP[n.cmp], a, b))
        if isinstance(n, Pow):
            x = out = v(n.a, self.index(n.a, n, k))
            for _ in range(n.n - 1):
                out = em.op("mul", out, x)
            return out
        if isinstance(n, Dot):
            return self.fold(n.a.size, lambda j: em.op("mul", v(n.a, self.index(n.a, n.a, j)),
                                                       v(n.b, self.index(n.b, n.a, j))))
        if isinstance(n, Sum):
            return self.fold(n.a.size, lambda j: v(n.a, j if n.a.size > 1 else None))
        if isinstance(n, Max):
            return self.fold(n.a.size, lambda j: v(n.a, j if n.a.size > 1 else None), "max")
        if isinstance(n, MatVec):       # row k: one left fold over c ascending
            cols = n.b.size
            row = self.iop("mul32", k if k is not None else self.const(0), cols)
            return self.fold(cols, lambda c: em.op("mul", v(n.a, em.op("add32", row, c)),
                                                   v(n.b, c if cols > 1 else None)))
        if isinstance(n, VecMat):       # column k: one left fold over r ascending
            k = k if k is not None else self.const(0)
            return self.fold(n.a.size, lambda r: em.op("mul", v(n.a, r if n.a.size > 1 else None),
                                                       v(n.b, em.op("add32", em.op("mul32", r, n.size), k))))
        if isinstance(n, Outer):
            nb = n.b.size
            r = None if n.a.size == 1 else self.iop("div32", k, nb) if nb > 1 else k
            c = None if nb == 1 else self.iop("rem32", k, nb) if n.a.size > 1 else k
            return em.op("mul", v(n.a, r), v(n.b, c))
        if isinstance(n, MaxAdj):
            if n.size == 1:             # max of one coordinate: it wins
                return v(n.dt, None)
            win, dt = self.winner[id(n)]
            return em.op("selpf", dt, self.zero, em.op("eq32", k, win))
        if isinstance(n, OneHot):
            one, k = em.op("movf", f64imm(1.0)), self.const(0) if k is None else k
            return em.op("selpf", one, self.zero, em.op("eqf64", v(n.a, None), em.op("cvtf", k)))
        if isinstance(n, Stack):        # of one item (a longer one is kept)
            return v(n.items[0], None)
        if isinstance(n, Pick):
            row = max(1, n.a.size // n.a.shape[0])
            at = self.const(n.k * row) if k is None else self.iop("add32", k, n.k * row) if n.k else k
            return v(n.a, at)
        if isinstance(n, Bcast):
            return v(n.a, self.index(n.a, n, k))
        if isinstance(n, Gather):       # row idx of a declared name, read where it is
            row, at = max(1, n.size), em.op("cvtu", v(n.k, None))
            at = em.op("mul32", at, row) if row > 1 else at
            return v(n.a, at if k is None else em.op("add32", at, k))
        if isinstance(n, Scatter):      # dt where coordinate k's row is idx, else +0
            row = n.size // n.shape[0]
            r = self.iop("div32", k, row) if row > 1 else k
            dt = v(n.dt, self.iop("rem32", k, row) if row > 1 else None)
            return em.op("selpf", dt, self.zero, em.op("eq32", r, em.op("cvtu", v(n.k, None))))
        raise TypeError(f"no PTX for {type(n).__name__}")


def _per_sample(lr: Learner, em: Emitter, roots: list[Node], out: list[Param],
                before: int | None) -> tuple[list, dict, str, Callable[[], _Loops]]:
    """A per-sample kernel's parameters (then `out`), their registers, this thread's row t and
    the lowering of `roots` (made when called), the batch buffers of the phases below `before`
    (None: all) read, not computed."""
    read = {n.name for n in postorder([lr.loss]) if isinstance(n, Read)}
    params = [Param(f"state_{s.name}", "u64", "state", s.name) for s in lr.states if s.name in read]
    params += [Param(f"data_{d.name}", "u64", "data", d.name) for d in lr.data]
    params += table_params(postorder(roots))
    params += [Param(f"mv{k}", "u64", "mv", str(k)) for k in range(len(batch_widths(lr)))]
    if lr.batch:        # a minibatch: the step's samples, listed by the host (u64 each)
        params += out + [Param("idx", "u64", "idx"), Param("count", "u32", "count")]
        base = _pointers(em, params)
        t = em.thread_index()
        em.op("braif", em.op("ge", t, em.op("ldp32", "count")), "$done")
        i = em.op("cvt32", em.op("ldu64", em.op("add64", base["idx"], em.op("wide", t, 8)), 0))
    else:
        params += out + [Param("lo", "u32", "lo"), Param("hi", "u32", "hi")]
        base = _pointers(em, params)
        lo, hi = em.op("ldp32", "lo"), em.op("ldp32", "hi")
        t = em.thread_index()
        i = em.op("add32", lo, t)
        em.op("braif", em.op("ge", i, hi), "$done")
    loaded = {n: em.op("add64", base[f"mv{k}"], em.op("wide", t, 8 * w)) for n, (k, w) in batch_nodes(lr, before).items()}
    return params, base, t, lambda: _Loops(em, base, i, roots, loaded)


def vectors(lr: Learner, phase: int, sm: int = 90) -> Kernel:
    """vectors<phase>: one thread a sample, row t of mv<vin> for each product of the phase with
    a computed vector (abi.products), from the earlier phases' buffers."""
    em = Emitter()
    vecs = {p.vin: p.vec for p in products(lr) if p.phase == phase and p.vin >= 0}
    params, _, t, lowering = _per_sample(lr, em, [vecs[k] for k in sorted(vecs)], [], phase)
    lower = lowering()
    for k in sorted(vecs):
        v = vecs[k]
        em.comment(f"the vector of mv{k}")
        dst = em.op("add64", lower.base[f"mv{k}"], em.op("wide", t, 8 * v.size))
        lower.loop(v.size, lambda c, v=v, dst=dst: em.op(
            "st", em.op("add64", dst, em.op("wide", c, 8)), 0, lower.value(v, c if v.size > 1 else None)))
    k = _module(em, lr, f"vectors{phase}", params, sm)
    return Kernel(k.name, sm, k.params, k.ptx, tile=(1, 1))


def grad_samples(lr: Learner, sm: int = 90) -> Kernel:
    assert lr.loss is not None, "grad_samples needs a loss"
    em = Emitter()
    outer = fused(lr)
    roots = [x for p in lr.params for c in lr.grads[p.name]
             for x in ((c.node.a, c.node.b) if p.name in outer else (c.node,))]
    params, base, t, lowering = _per_sample(lr, em, roots, [Param("gs", "u64", "gs")], None)
    lay = row_layout(lr)
    out = em.op("add64", base["gs"], em.op("wide", t, 8 * lay.width))
    lower = lowering()
    for p, col, _, _ in lay.plain:  # coordinates cut where the set of contributions covering them changes
        em.comment(f"per-sample gradient of {p}")
        cs = lr.grads[p]
        size = lr.state(p).size
        cuts = sorted({0, size} | {min(size, x) for c in cs for x in (c.offset, c.offset + c.node.size)})
        for s, e in zip(cuts, cuts[1:]):
            cover = [c for c in cs if c.offset <= s < c.offset + c.node.size]
            dst = em.op("add64", out, 8 * (col + s))

            def coordinate(t: str, cover=cover, s=s, dst=dst) -> None:
                g = None            # the left fold of the contributions covering it, +0 if none
                for c in cover:
                    at = None if c.node.size == 1 else t if s == c.offset else lower.iop("add32", t, s - c.offset)
                    r = lower.value(c.node, at)
                    g = r if g is None else em.op("add", g, r)
                em.op("st", em.op("add64", dst, em.op("wide", t, 8)), 0, g or lower.zero)
            lower.loop(e - s, coordinate)
    for p, (ucol, _, vcol, _) in lay.factors.items():    # a fused param: its factors u, v
        for col, x in ((ucol, outer[p].a), (vcol, outer[p].b)):
            em.comment(f"per-sample factor of {p}'s outer product")
            dst = em.op("add64", out, 8 * col)
            lower.loop(x.size, lambda t, x=x, dst=dst: em.op(
                "st", em.op("add64", dst, em.op("wide", t, 8)), 0, lower.value(x, t if x.size > 1 else None)))
    return _module(em, lr, "grad_samples", params, sm)


SUM_COLS = 32       # owner_sum: the plain columns a block folds, one lane of its folding warp each
SUM_LOADERS = 4     # ... the warps of a block that stage the terms in shared memory for it
SUM_STAGE = 96      # ... the samples a stage holds (two stages: 2 x 96 x 32 x 8 B = 48 KiB, the
#                     most a block declares: a stage's adds, 96 x 8 cycles, cover a load's latency)
SUM_GROUP = 16      # ... the terms the folder reads from a stage ahead of their adds


def owner_sum(lr: Learner, sm: int = 90) -> Kernel:
    """A block a SUM_COLS columns c0 .. c0 + 31: lane l of warp 0 folds column c = c0 + l,
    acc = gs[c], then acc += gs[i*W + c] for i = 1 .. n-1, one add.rn each, in that order (the
    ordered contract's fold); its SUM_LOADERS other warps only load. The adds are the only
    serial part, so the terms reach them through shared memory: samples 1 .. n-1 in stages of
    S = SUM_STAGE, loader warp w lane l loading column c of the stage's samples w, w + 4, ...
    (a warp's load is one sample's 32 consecutive words: coalesced), all of a thread's loads
    issued before its stores, each load and store behind a branch on the count (a stage past
    the last sample stops there). Two stages, in turn: while the folding warp adds one (reading
    its words SUM_GROUP at a time into two banks of registers, a group's reads issued before
    the adds of the group before), the loaders fill the other, and a `bar.sync` ends each
    round; every thread of a block reaches every barrier (the rounds are the block's, a spare
    block leaves before the first). So a fold waits for the memory once a stage (the S adds of
    one cover the loads of the next), not once a term; lanes past the plain columns load and
    fold nothing. The adds are the old ones in the old order: the bits do not change."""
    em = Emitter()
    params = [Param("gs", "u64", "gs"), Param("G", "u64", "G"), Param("n", "u32", "n")]
    base = _pointers(em, params)
    lay = row_layout(lr)
    stride, S, L = 8 * lay.width, SUM_STAGE, SUM_LOADERS
    n, tid, blk = em.op("ldp32", "n"), em.op("sreg", "tid.x"), em.op("sreg", "ctaid.x")
    c0 = em.op("mul32", blk, SUM_COLS)
    em.op("braif", em.op("ge", c0, lay.plain_width), "$done")       # a spare block
    em.op("braif", em.op("ge", em.op("mov32", 0), n), "$done")       # n = 0 writes nothing
    lane, warp = em.op("rem32", tid, SUM_COLS), em.op("div32", tid, SUM_COLS)
    c = em.op("add32", c0, lane)
    idle = em.op("ge", c, lay.plain_width)                           # a lane past the columns
    folder = em.op("eq32", warp, 0)
    col = em.op("add64", base["gs"], em.op("wide", c, 8))
    m, t0 = em.op("sub32", n, 1), em.op("mov32", 0)                 # the terms after the first
    stages = [em.op("addrs", em.shared(S * SUM_COLS)) for _ in (0, 1)]
    slot = em.op("wide", em.op("selp32", lane, em.op("sub32", tid, SUM_COLS), folder), 8)
    me = em.op("add64", stages[0], slot)                # the folder's stage read, a loader's write
    flip = em.op("xor64", me, em.op("add64", stages[1], slot))       # me ^ flip: the other stage
    acc, X = em.reg("fd"), [em.reg("fd") for _ in range(max(S // L, 2 * SUM_GROUP))]
    first = em.fresh_label()
    em.op("braifnot", folder, first)
    em.op("braif", idle, first)
    em.op("ld", col, 0, d=acc)                          # the first term starts the fold
    em.label(first)

    def stage(t: str) -> None:
        """A loader: terms t .. t + S - 1 (samples 1 + t ..) of column c into stage `me`: its
        S / L loads, then their stores; in the last stage, each behind a branch on the count."""
        loaded, stored, guarded = em.fresh_label(), em.fresh_label(), em.fresh_label()
        em.op("braif", idle, stored)
        s = em.op("add32", em.op("add32", t, 1), em.op("sub32", warp, 1))
        at = em.op("add64", col, em.op("wide", s, stride))
        em.op("braif", em.op("ge", em.op("add32", s, S - L), n), guarded)
        for last in (False, True):
            past = []
            for q in range(S // L):
                if last:
                    past.append(em.op("ge", em.op("add32", s, L * q) if q else s, n))
                    em.op("braif", past[q], loaded)
                em.op("ld", em.op("add64", at, q * L * stride) if q else at, 0, d=X[q])
            if last:
                em.label(loaded)
            for q in range(S // L):
                if last:
                    em.op("braif", past[q], stored)
                em.op("sts", me, 8 * q * L * SUM_COLS, X[q])
            if not last:
                em.op("bra", stored)
                em.label(guarded)
        em.label(stored)

    def fold(left: str | None) -> None:
        """The folder: the stage's terms added in order, each group's reads issued among the
        adds of the group before (a read after each add); with `left`, only the first `left`
        (each read and add behind a branch, a group's reads before the adds before)."""
        banks, more, G = (X[:SUM_GROUP], X[SUM_GROUP:2 * SUM_GROUP]), [], SUM_GROUP
        read = [em.fresh_label() for _ in range(S // G)]

        def reads(g: int, e: int | None = None) -> None:
            for e in range(G) if e is None else (e,):
                j = g * G + e
                if left is not None:
                    more.append(em.op("ge", left, j + 1))
                    em.op("braifnot", more[j], read[g])
                em.op("lds", me, 8 * j * SUM_COLS, d=banks[g % 2][e])
            if left is not None:
                em.label(read[g])
        reads(0)
        for g in range(S // G):
            if left is not None and g + 1 < S // G:
                reads(g + 1)
            for e, x in enumerate(banks[g % 2]):
                if left is not None:
                    em.op("braifnot", more[g * G + e], "$swap")
                em.op("add", acc, x, d=acc)
                if left is None and g + 1 < S // G:
                    reads(g + 1, e)
    em.op("braif", em.op("eq32", m, 0), "$store")
    em.comment("the loaders stage the first terms")
    em.op("braif", folder, "$staged")
    stage(t0)
    em.label("$staged")
    em.op("bar")
    em.label("$round")
    em.op("nounroll")
    t1 = em.op("add32", t0, S)
    em.op("braif", folder, "$fold")
    em.comment("a loader: the next terms into the other stage")
    em.op("braif", em.op("ge", t1, m), "$sync")
    em.op("xor64", me, flip, d=me)
    stage(t1)
    em.op("bra", "$sync")
    em.label("$fold")
    em.comment("the folder: this stage's terms, in order")
    left = em.op("sub32", m, t0)
    em.op("braif", idle, "$swap")
    em.op("braifnot", em.op("ge", left, S), "$last")
    fold(None)
    em.op("bra", "$swap")
    em.label("$last")                                   # fewer than S terms left
    fold(left)
    em.label("$swap")
    em.op("xor64", me, flip, d=me)
    em.label("$sync")
    em.op("bar")
    em.op("mov32", t1, d=t0)
    em.op("braifnot", em.op("ge", t0, m), "$round")
    em.label("$store")
    em.op("braifnot", folder, "$done")
    em.op("braif", idle, "$done")
    off = em.op("wide", c, 8)
    shifts = [(cc, at - cc) for _, cc, at, _ in lay.plain if at != cc]
    if shifts:          # G's coordinate is the column plus the shift of the last plain param
        shift = em.op("mov32", 0)       # starting at or before it (fused params leave gaps)
        for at_col, d in shifts:
            em.op("selp32", d, shift, em.op("ge", c, at_col), d=shift)
        off = em.op("wide", em.op("add32", c, shift), 8)
    em.op("st", em.op("add64", base["G"], off), 0, acc)
    k = _module(em, lr, "owner_sum", params, sm)
    blocks = -(-lay.plain_width // SUM_COLS)
    block = SUM_COLS * (1 + L)
    return Kernel(k.name, sm, k.params, k.ptx, threads=block * blocks, block=block)


def _value_params(lr: Learner, everything: list[Node], nodes: list[Node],
                  reduced: list[Param]) -> tuple[list[Param], dict[tuple[int, ...], str]]:
    """What a coordinate's values of `nodes` read besides the group's states, in this order: G
    and n (a gradient anywhere in `everything`), each scalar state version read, `reduced`, the
    clocks, each vector constant (and its name by its values' bits), the math tables."""
    params = [Param("G", "u64", "G"), Param("n", "u32", "n")] if any(isinstance(n, Grad) for n in everything) else []
    order = {s.name: i for i, s in enumerate(lr.states)}
    scalars = sorted({(n.name, n.version) for n in everything if isinstance(n, Read) and lr.state(n.name).group is None},
                     key=lambda sv: (order[sv[0]], sv[1]))
    params += ([Param("sc", "u64", "sc")] * bool(scalars) if card_scalars(lr) else
               [Param(f"scalar_{s}_{('old', 'new')[v]}", "f64", "scalar", s, v) for s, v in scalars]) + reduced
    clocks = sorted({n.kind for n in nodes if isinstance(n, Clock)}, reverse=True)     # step, epoch
    params += [Param(f"clock_{c}", "f64", "scalar", f"clock.{c}") for c in clocks]
    consts: dict[tuple[int, ...], str] = {}
    for n in nodes:
        if isinstance(n, Const) and n.size > 1:
            key = tuple(binary64.bits(x) for x in n.values)
            if key not in consts:
                consts[key] = f"const_{len(consts)}"
                params.append(Param(consts[key], "u64", "const", values=n.values))
    return params + table_params(nodes), consts


class _Coordinate:
    """The leaves of a coordinate's values (update_g<N>, reduce): coordinate k's word of a
    buffer (`kb` its byte offset), each loaded once; `new`: members already assigned; a scalar
    state from its bank parameter, or from `sc` where the card runs the scalar statements
    (`before`: in `reduce`, launched before `scalars`, the value before the step is sc[2i + 1])."""

    def __init__(self, lr: Learner, em: Emitter, base: dict[str, str], kb: str,
                 consts: dict[tuple[int, ...], str], new: dict[str, str], before: bool = False):
        self.lr, self.em, self.base, self.kb, self.consts, self.new = lr, em, base, kb, consts, new
        self.cache: dict[str, str] = {}
        self.offsets = param_layout(lr)
        self.slots, self.before = card_scalars(lr), before

    def once(self, key: str, make: Callable[[], str]) -> str:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def at(self, name: str) -> str:                 # the address of coordinate k of a buffer
        return self.once("&" + name, lambda: self.em.op("add64", self.base[name], self.kb))

    def leaf(self, n: Node) -> list[str]:
        em, once, at = self.em, self.once, self.at
        if isinstance(n, Const):
            if n.size == 1:
                return [em.op("movf", f64imm(n.values[0]))]
            name = self.consts[tuple(binary64.bits(x) for x in n.values)]
            return [once(name, lambda: em.op("ld", at(name), 0))]
        if isinstance(n, Grad):
            nf = once("n", lambda: em.op("cvtf", em.op("ldp32", "n")))
            g = once("G" + n.param, lambda: em.op("ld", at("G"), 8 * self.offsets[n.param]))
            return [em.op("div", g, nf)]
        if isinstance(n, Clock):                    # the host writes step t's (abi.host_scalars)
            return [once(f"clock_{n.kind}", lambda: em.op("ldpf", f"clock_{n.kind}"))]
        if self.lr.state(n.name).group is None:
            if self.slots:
                w = 2 * self.slots[n.name] + (n.version or self.before)
                return [once(f"sc{w}", lambda: em.op("ld", self.base["sc"], 8 * w))]
            name = f"scalar_{n.name}_{('old', 'new')[n.version]}"
            return [once(name, lambda: em.op("ldpf", name))]
        if n.version == 1:
            return [self.new[n.name]]
        name = f"state_{n.name}"
        return [once(name, lambda: em.op("ld", at(name), 0))]


def _statement_reductions(lr: Learner, stmts: list) -> tuple[list[tuple[int, Node]], list[Param]]:
    """The update's reduced scalars `stmts` read, (k, node), and their parameters: the host's
    rd<k> (`reduced_<k>`), or the card's (`rd`, card_reductions)."""
    card = card_reductions(lr)
    reduced = [(k, r) for k, r in enumerate(update_reductions(lr.update))
               if any(r is n for n in postorder([a.node for a in stmts]))]
    host = [Param(f"reduced_{k}", "f64", "scalar", f"rd{k}", 2) for k, _ in reduced if k not in card]
    return reduced, host + ([Param("rd", "u64", "rd")] if any(k in card for k, _ in reduced) else [])


def _reduced_values(lr: Learner, em: Emitter, base: dict[str, str], reduced) -> dict[int, list[str]]:
    card = card_reductions(lr)
    return {id(r): [em.op("ld", base["rd"], 8 * card[k]) if k in card else em.op("ldpf", f"reduced_{k}")]
            for k, r in reduced}


def scalars(lr: Learner, sm: int = 90) -> Kernel:
    """`scalars` (abi.card_scalars): one thread; each scalar state's value before the step,
    sc[2i + 1], kept in sc[2i], then the scalar statements in source order, each value into
    sc[2i + 1]: the interpreter's scalar update (`interp.apply_update_coords`), its reduced scalars
    read from rd (the card's `reduce`) or the host's bank parameters."""
    em, slots = Emitter(), card_scalars(lr)
    stmts = [a for a in lr.update if lr.state(a.target).group is None]
    reduced, host = _statement_reductions(lr, stmts)
    stopped = postorder([a.node for a in stmts], {id(r) for _, r in reduced})
    more, _ = _value_params(lr, stopped, stopped, host)
    params = [Param("sc", "u64", "sc")] + [p for p in more if p.name != "sc"]
    base = _pointers(em, params)
    em.op("braifnot", em.op("eq32", em.thread_index(), 0), "$done")
    old, new = {}, {}
    for name, i in slots.items():
        old[name] = em.op("ld", base["sc"], 8 * (2 * i + 1))
        em.op("st", base["sc"], 8 * 2 * i, old[name])

    def leaf(n: Node) -> list[str]:
        if isinstance(n, Const):
            return [em.op("movf", f64imm(x)) for x in n.values]
        if isinstance(n, Clock):
            return [em.op("ldpf", f"clock_{n.kind}")]
        return [new[n.name] if n.version and n.name in new else old[n.name]]
    lower = _Lower(em, leaf, per_coordinate=False, base=base)
    lower.memo.update(_reduced_values(lr, em, base, reduced))
    for a in stmts:
        em.comment(f"line {a.line}: {a.target}")
        (new[a.target],) = lower(a.node)
        em.op("st", base["sc"], 8 * (2 * slots[a.target] + 1), new[a.target])
    k = _module(em, lr, "scalars", params, sm)
    return Kernel(k.name, sm, k.params, k.ptx, threads=1)


def update(lr: Learner, group: Group, sm: int = 90) -> Kernel:
    em = Emitter()
    stmts = [a for a in lr.update if lr.state(a.target).group == group.index]
    nodes = postorder([a.node for a in stmts])
    reads = [n for n in nodes if isinstance(n, Read)]
    touched = {a.target for a in stmts} | {n.name for n in reads}
    params = [Param(f"state_{s.name}", "u64", "state", s.name)
              for s in lr.states if s.group == group.index and s.name in touched]
    reduced, host = _statement_reductions(lr, stmts)
    stopped = postorder([a.node for a in stmts], {id(r) for _, r in reduced})
    more, consts = _value_params(lr, nodes, stopped, host)
    params += more + [Param("klo", "u32", "klo"), Param("khi", "u32", "khi")]
    base = _pointers(em, params)
    klo, khi = em.op("ldp32", "klo"), em.op("ldp32", "khi")
    k = em.op("add32", klo, em.thread_index())
    em.op("braif", em.op("ge", k, khi), "$done")
    new: dict[str, str] = {}
    co = _Coordinate(lr, em, base, em.op("wide", k, 8), consts, new)
    lower = _Lower(em, co.leaf, per_coordinate=True, base=base)
    lower.memo.update(_reduced_values(lr, em, base, reduced))
    for a in stmts:
        em.comment(f"line {a.line}: {a.target}")
        (new[a.target],) = lower(a.node)
    for s in lr.states:
        if s.name in new:
            em.op("st", co.at(f"state_{s.name}"), 0, new[s.name])
    return _module(em, lr, f"update_g{group.index}", params, sm, group.index)


REDUCE_AHEAD = 8    # reduce: the terms a round computes (their loads issued) before it folds them


def _reduce_params(lr: Learner, todo: list[Node]) -> tuple[list[Param], dict[tuple[int, ...], str]]:
    """What the terms of the reductions `todo` read: the group members, then as update_g<N>'s."""
    nodes = postorder(todo)
    read = {n.name for n in nodes if isinstance(n, Read)}
    params = [Param(f"state_{s.name}", "u64", "state", s.name) for s in lr.states
              if s.group is not None and s.name in read]
    more, consts = _value_params(lr, nodes, nodes, [])
    return params + more, consts


def _term(lr: Learner, em: Emitter, base: dict[str, str], consts, r: Node, j: str) -> tuple[str, _Lower]:
    """Reduction r's term at coordinate j (a dot's product, a sum's or max's value), lowered as
    update_g<N> lowers coordinate j (the step's starting state, G / n; a scalar state before the
    step: `reduce` runs before `scalars`)."""
    lower = _Lower(em, _Coordinate(lr, em, base, em.op("wide", j, 8), consts, {}, True).leaf, True, base)
    return (em.op("mul", *(lower(c)[0] for c in (r.a, r.b))) if isinstance(r, Dot) else lower(r.a)[0]), lower


def reduce(lr: Learner, sm: int = 90) -> Kernel:
    """`reduce`: thread t computes the card's reduced scalar t (abi.card_reductions, in their
    order) into rd[t]: the left fold over the group's coordinates j ascending of its terms (a
    dot's products, a sum's values, max(v)'s values folded by max), the first term the start. A
    round computes the terms of j .. j + REDUCE_AHEAD - 1 first (past the group: the last
    coordinate's, read, never folded), then folds those in the group in order, so a round waits
    for its loads once. An exact reduction (exact_sum's dot or sum) has its accumulator in xr
    zeroed here; `reduce_add` adds its terms, `reduce_round` rounds it into rd[t]."""
    em = Emitter()
    todo = [update_reductions(lr.update)[k] for k in card_reductions(lr)]
    params, consts = _reduce_params(lr, todo)
    exact = [exact_reduction(lr, r) for r in todo]
    params += [Param("rd", "u64", "rd")] + [Param("xr", "u64", "xr")] * any(exact)
    base = _pointers(em, params)
    t = em.thread_index()
    for pos, r in enumerate(todo):
        em.comment(f"rd[{pos}]")
        skip = em.fresh_label()
        em.op("braifnot", em.op("eq32", t, pos), skip)
        if exact[pos]:
            xsum.clear(em, base["xr"], pos)
            em.label(skip)
            continue
        size, acc, j = lr.groups[reduction_group(lr, r)].size, em.op("movf", f64imm(0.0)), em.op("mov32", 0)
        top, end = em.fresh_label(), em.fresh_label()
        em.label(top)
        em.op("nounroll")
        em.op("braif", em.op("ge", j, size), end)
        terms = []
        for u in range(min(REDUCE_AHEAD, size)):
            at = em.op("add32", j, u) if u else j
            at = em.op("selp32", size - 1, at, em.op("ge", at, size)) if u else at
            term, lower = _term(lr, em, base, consts, r, at)
            terms.append(term)
        for u, term in enumerate(terms):
            if u:
                em.op("braif", em.op("ge", em.op("add32", j, u), size), end)
            if u == 0:                  # the first term starts the fold
                fold = lower.call("max", acc, term) if isinstance(r, Max) else em.op("add", acc, term)
                em.op("selpf", term, fold, em.op("eq32", j, 0), d=acc)
            elif isinstance(r, Max):
                em.op("movf", lower.call("max", acc, term), d=acc)
            else:
                em.op("add", acc, term, d=acc)
        em.op("add32", j, len(terms), d=j)
        em.op("bra", top)
        em.label(end)
        em.op("st", base["rd"], 8 * pos, acc)
        em.label(skip)
    k = _module(em, lr, "reduce", params, sm)
    return Kernel(k.name, sm, k.params, k.ptx, threads=len(todo))


def reduce_add(lr: Learner, sm: int = 90) -> Kernel:
    """`reduce_add`: one thread a term of the exact reductions, every term at once: the threads
    of reduction t (exact_positions, in order) are its group's coordinates j, each adding its term
    exactly to xr's accumulator t (xsum.py's add_term: integer red, so any order gives the same
    words, which `reduce` zeroed)."""
    em = Emitter()
    todo = [update_reductions(lr.update)[k] for k in card_reductions(lr)]
    mine = exact_positions(lr)
    params, consts = _reduce_params(lr, [todo[pos] for pos in mine])
    params += [Param("xr", "u64", "xr")]
    base = _pointers(em, params)
    t, start = em.thread_index(), 0
    for pos in mine:
        size, after = lr.groups[reduction_group(lr, todo[pos])].size, em.fresh_label()
        em.comment(f"the terms of xr[{pos}]: threads {start} .. {start + size - 1}")
        em.op("braif", em.op("ge", t, start + size), after)
        term, _ = _term(lr, em, base, consts, todo[pos], em.op("sub32", t, start) if start else t)
        xsum.add_term(em, em.op("add64", base["xr"], 8 * XS_WORDS * pos), em.op("f2b", term), "$done")
        em.op("bra", "$done")
        em.label(after)
        start += size
    k = _module(em, lr, "reduce_add", params, sm)
    return Kernel(k.name, sm, k.params, k.ptx, threads=start)


def reduce_round(lr: Learner, sm: int = 90) -> Kernel:
    """`reduce_round`: thread t, an exact reduction's word in rd, rounds xr's accumulator t once
    into rd[t] (xsum.py's round_to, xsum_round's bits)."""
    em = Emitter()
    params = [Param("xr", "u64", "xr"), Param("rd", "u64", "rd")]
    base = _pointers(em, params)
    t = em.thread_index()
    for pos in exact_positions(lr):
        skip = em.fresh_label()
        em.op("braifnot", em.op("eq32", t, pos), skip)
        xsum.round_to(em, em.op("add64", base["xr"], 8 * XS_WORDS * pos), em.op("add64", base["rd"], 8 * pos), skip)
        em.label(skip)
    k = _module(em, lr, "reduce_round", params, sm)
    return Kernel(k.name, sm, k.params, k.ptx, threads=len(card_reductions(lr)))


GPU_NODES = (Const, Read, DataRow, Grad, Clock, Elem, Unary, Where, Pow, Dot, Sum, Pick, Bcast, MatVec,
             VecMat, Outer, Max, MaxAdj, OneHot, Stack, Gather, Scatter)


def kernels(lr: Learner, sm: int = 90) -> list[Kernel]:
    """The owner's kernels: grad_samples, the batched products' matvec<k> (launched before it),
    owner_sum and the fused params' outer_sum_<p> (with a loss; under `contract exact_sum`
    neither the products nor these sums but the exact sums' kernels of alphac/ptx/xsum.py), then
    `reduce` (the update's reduced scalars the card computes, if any; reduce_add and
    reduce_round, where any is an exact sum), `scalars` (the scalar
    statements, where they read those: abi.card_scalars), then one update per group. A
    learner with an operation these kernels do not have is refused with BuildError before
    anything is generated."""
    from alphac.diag import BuildError
    roots = ([lr.loss] if lr.loss is not None else []) + [a.node for a in lr.update] + \
        [c.node for cs in lr.grads.values() for c in cs]
    missing = sorted({type(n).__name__ for n in postorder(roots) if not isinstance(n, GPU_NODES)})
    if missing:
        raise BuildError(f"learner `{lr.name}` uses operations the GPU owner kernels do not "
                         f"have yet ({', '.join(missing)}); build it for x86_64 or aarch64")
    from alphac.ptx.tiled import outer_sum, product
    sums = xsum.kernels(lr, sm) if lr.exact else \
        [owner_sum(lr, sm) if k == "owner_sum" else outer_sum(lr, k[len("outer_sum_"):], sm) for k in sum_kernels(lr)]
    batched = [vectors(lr, int(name[7:]), sm) if name.startswith("vectors") else
               product(lr, int(name[6:]), sm) for name in batch_kernels(lr)]
    out = [grad_samples(lr, sm)] + batched + sums if lr.loss is not None else []
    out += [reduce(lr, sm)] if card_reductions(lr) else []
    out += [reduce_add(lr, sm), reduce_round(lr, sm)] if exact_positions(lr) else []
    return out + ([scalars(lr, sm)] if card_scalars(lr) else []) + [update(lr, g, sm) for g in lr.groups]


def module(lr: Learner, sm: int = 90) -> str:
    """Every owner kernel of `lr` in one PTX module, what `alphac build --emit ptx` writes: the
    header once, then each kernel's entry exactly as the build assembles it alone."""
    ks = kernels(lr, sm)
    head = [f"// {lr.name}: {', '.join(k.name for k in ks) or 'no kernels'}",
            "// generated by alphac (alphac/ptx/kernels.py)", "", f".version {PTX_VERSION}",
            f".target sm_{sm}", ".address_size 64", ""]
    return "\n".join(head + [k.ptx[k.ptx.index(".visible .entry"):] for k in ks])


def function_kernel(name: str, sm: int = 90) -> Kernel:
    """`y[i] = name(x[i], ...)` for i in [0, n): one of the functions of alphac.math alone, for
    checking its PTX against the oracle (tests/test_math.py) and timing it on a device.
    Parameters: x u64 (FUNCTIONS[name] binary64 arguments per i, consecutive), y u64 (out),
    n u32, then tbl_<t> for each table the function reads."""
    from alphac.math import FUNCTIONS, _function_source
    arity = FUNCTIONS[name]
    em = Emitter()
    tables = [t for _, t in _function_source(name)[1]]
    params = [Param("x", "u64", "data", "x"), Param("y", "u64", "gs"), Param("n", "u32", "n")]
    params += [Param(f"tbl_{t.name}", "u64", "const", values=table_words_as_floats(t))
               for t in tables]
    base = _pointers(em, params)
    i = em.thread_index()
    em.op("braif", em.op("ge", i, em.op("ldp32", "n")), "$done")
    src = em.op("add64", base["x"], em.op("wide", i, 8 * arity))
    args = [em.op("ld", src, 8 * k) for k in range(arity)]
    out = _Lower(em, lambda n: [], False, base).call(name, *args)
    em.op("st", em.op("add64", base["y"], em.op("wide", i, 8)), 0, out)
    em.label("$done")
    em.op("ret")
    text = em.module(f"fn_{name}", [(p.name, p.type) for p in params], sm, f"alphac.math: {name}")
    return Kernel(f"fn_{name}", sm, tuple(params), text)
