"""A random learner generator, in the spirit of Csmith and YARPGen: well-typed random Alpha
programs, with random deployments, for differential testing (tests/differential.py).

A program is data (`Program`): data arrays, constants, params and states, a loss and an update
as lists of statements over expression trees, and deployments. `render` turns it into Alpha
source; the reducer (tests/reduce.py) edits the data and renders again.

What the generator reaches for, because that is where compiled code and the interpreter can
part ways:
- loss DAGs: `let`s read several times, dot/sum over params, data rows and 2-D rows (`W[r]`),
  fixed coordinates (`w[k]`, `x[i, k]`), powers, guarded division and square roots, and states
  read by the loss (a proximal term's reference point, a scalar weight);
- updates whose `let`s read state before it is assigned and use it after (`let old = m`,
  then `m = ...`, then `w = ... old ...`), state read both before and after its assignment,
  gradients read several times, scalar state (old and new values) read by vector statements;
- scalar, vector and 2-D shapes; several coordinate groups; groups merged by a statement that
  reads two params of one shape; now and then a statement that breaks the per-coordinate rule
  (the checker must refuse it by name);
- deployments: stars and hierarchies, random sample splits with empty owners, random combine
  trees, every library strategy and strategies of the file's own, random partitions (even, or
  explicit ranges for one group, empty slices included), delivery to one owner, mixed targets.

Expressions are tuples: ('num', v) ('name', n) ('pick', n, (k, ...)) ('row', d) ('elt', d, k)
('bin', op, a, b) ('neg', a) ('pow', a, n) ('call', f, (args...)) ('grad', p).
Everything is drawn from one `random.Random(seed)`: a seed is a program.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


# -- the program --------------------------------------------------------------------------------
@dataclass
class Decl:
    kind: str                        # data | const | param | state
    name: str
    shape: tuple[int, ...]
    value: object                    # data/const: nested lists or a float; param/state: a float


@dataclass
class Stmt:
    kind: str                        # let | assign
    name: str
    expr: tuple


@dataclass
class Deployment:
    name: str
    items: list[str]                 # one deployment item per line, as source text


@dataclass
class Strategy:
    name: str
    partition: list[str]
    replicate: list[str]


@dataclass
class Program:
    name: str
    decls: list[Decl]
    loss: list[Stmt] = field(default_factory=list)
    loss_result: tuple | None = None
    update: list[Stmt] = field(default_factory=list)
    strategies: list[Strategy] = field(default_factory=list)
    deployments: list[Deployment] = field(default_factory=list)


# -- rendering ---------------------------------------------------------------------------------
def num(v: float) -> str:
    if v != v or math.isinf(v):
        raise ValueError("the generator makes finite numbers only")
    text = repr(abs(v))
    return f"(-{text})" if math.copysign(1.0, v) < 0 else text


def expr_text(e: tuple) -> str:
    k = e[0]
    if k == "num":
        return num(e[1])
    if k == "name":
        return e[1]
    if k == "pick":
        return f"{e[1]}[{', '.join(map(str, e[2]))}]"
    if k == "row":
        return f"{e[1]}[i]"
    if k == "elt":
        return f"{e[1]}[i, {e[2]}]"
    if k == "bin":
        return f"({expr_text(e[2])} {e[1]} {expr_text(e[3])})"
    if k == "neg":
        return f"(-{expr_text(e[1])})"
    if k == "pow":
        return f"({expr_text(e[1])})^{e[2]}"
    if k == "call":
        return f"{e[1]}({', '.join(expr_text(a) for a in e[2])})"
    if k == "grad":
        return f"grad({e[1]})"
    raise ValueError(k)


def value_text(v) -> str:
    if isinstance(v, tuple) and v[0] == "expr":        # a const written as an expression
        return expr_text(v[1])
    if isinstance(v, list):
        return "[" + ", ".join(value_text(x) for x in v) + "]"
    return num(v)


def type_text(shape) -> str:
    return "f64" if not shape else "f64[" + ", ".join(map(str, shape)) + "]"


def render(p: Program) -> str:
    out = [f"learner {p.name}", ""]
    for d in p.decls:
        if d.kind in ("data", "const"):
            out.append(f"{d.kind} {d.name} = {value_text(d.value)}")
        else:
            out.append(f"{d.kind} {d.name}: {type_text(d.shape)} = {value_text(d.value)}")
    if p.loss_result is not None:
        out += ["", "loss(i) {"]
        out += [f"  let {s.name} = {expr_text(s.expr)}" for s in p.loss]
        out += [f"  {expr_text(p.loss_result)}", "}"]
    out += ["", "update {"]
    for s in p.update:
        out.append(f"  {'let ' if s.kind == 'let' else ''}{s.name} = {expr_text(s.expr)}")
    out.append("}")
    for s in p.strategies:
        out += ["", f"strategy {s.name} {{"]
        if s.partition:
            out.append("  partition " + ", ".join(s.partition))
        if s.replicate:
            out.append("  replicate " + ", ".join(s.replicate))
        out.append("}")
    for d in p.deployments:
        out += ["", f"deployment {d.name} {{"] + [f"  {it}" for it in d.items] + ["}"]
    return "\n".join(out) + "\n"


# -- shapes of expressions -----------------------------------------------------------------------
class Gen:
    """One program's generation: the random source and what is in scope."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.fr = random.Random(seed ^ 0x5EED)       # the functions: a stream of its own, so
        self.seed = seed                             # the rest of a seed's program is unchanged
        self.names = 0

    def wrap(self, e: tuple, other: tuple | None = None, rate: float = 0.15) -> tuple:
        """Sometimes e inside one of the contract's functions (alphac.math), in forms that
        stay finite: the bounded ones, the exact ones, exp and log of safe arguments."""
        r = self.fr
        if r.random() >= rate:
            return e
        k = r.randrange(13)
        if k < 6:
            return ("call", ("tanh", "sigmoid", "relu", "abs", "softplus", "tanh")[k], (e,))
        if k < 8 and other is not None:
            return ("call", ("max", "min")[k - 6], (e, other) if r.random() < 0.5 else (other, e))
        if k < 9:
            return ("call", "exp", (("neg", ("pow", e, 2)),))
        if k < 10:
            return ("call", "log1p", (("pow", e, 2),))
        if k < 11:
            return ("call", "log", (("bin", "+", ("num", r.choice([1.0, 0.5])), ("pow", e, 2)),))
        if k < 12:
            return ("call", "expm1", (("call", "tanh", (e,)),))
        return ("call", "relu", (e,))

    def fresh(self, base: str) -> str:
        self.names += 1
        return f"{base}{self.names}"

    def small(self, lo=-1.5, hi=1.5) -> float:
        r = self.r
        v = round(r.uniform(lo, hi), r.choice([1, 2, 3]))
        if r.random() < 0.05:
            v = r.choice([0.0, -0.0, 1.0, 0.5, 0.1, 1e-3, 3.0])
        return v

    def rate(self) -> float:
        return self.r.choice([0.01, 0.02, 0.05, 0.1, 0.003, 0.2])

    def values(self, shape) -> object:
        if not shape:
            return self.small()
        if len(shape) == 1:
            return [self.small() for _ in range(shape[0])]
        return [[self.small() for _ in range(shape[1])] for _ in range(shape[0])]


# -- the learner -------------------------------------------------------------------------------
@dataclass
class Var:
    name: str
    kind: str                        # param | state | scalar (replicated scalar state) | const
    shape: tuple[int, ...]
    group: str = ""                  # which param's group a coordinate state belongs to


def generate(seed: int) -> Program:
    g = Gen(seed)
    r = g.r
    n = r.randint(1, 7)                              # samples
    f = r.randint(1, 4)                              # features
    decls = [Decl("data", "x", (n, f), [[g.small(-2, 2) for _ in range(f)] for _ in range(n)]),
             Decl("data", "y", (n,), [g.small(-3, 3) for _ in range(n)])]
    if r.random() < 0.3:
        decls.append(Decl("data", "z", (n,), [g.small(0, 2) for _ in range(n)]))
    consts: list[Var] = []
    for _ in range(r.randint(0, 2)):
        c = g.fresh("c")
        shape = r.choice([(), (), (f,)])
        val = g.values(shape) if shape else r.choice([0.9, 0.999, 0.5, g.small(0, 1)])
        decls.append(Decl("const", c, shape, val))
        consts.append(Var(c, "const", shape))
    if r.random() < 0.3:                              # a folded constant expression
        c = g.fresh("k")
        decls.append(Decl("const", c, (), ("expr", ("bin", "-", ("num", 1.0),
                                                      ("num", r.choice([0.9, 0.99, 0.999]))))))
        consts.append(Var(c, "const", ()))
    params: list[Var] = []
    shapes = [(), (f,), (f,), (r.randint(1, 3), f), (r.randint(2, 4),)]
    for _ in range(r.choice([1, 1, 2, 2, 3])):
        shape = r.choice(shapes)
        params.append(Var(g.fresh("w"), "param", shape, ""))
    for p in params:
        p.group = p.name
    states: list[Var] = []
    for p in params:
        for _ in range(r.choice([0, 1, 1, 2])):
            states.append(Var(g.fresh("m"), "state", p.shape, p.name))
    loss_states: list[Var] = []
    if r.random() < 0.45:                            # a reference point the loss reads
        p = r.choice(params)
        s = Var(g.fresh("ref"), "state", p.shape, p.name)
        states.append(s)
        loss_states.append(s)
    scalars = [Var(g.fresh("p"), "scalar", ()) for _ in range(r.choice([0, 0, 1, 2]))]
    if scalars and r.random() < 0.35:
        loss_states.append(r.choice(scalars))
    for v in params + states + scalars:
        init = 0.0 if r.random() < 0.4 else g.small(-0.5, 0.5)
        if v.kind == "scalar":
            init = r.choice([1.0, 0.5, g.small(0.1, 1.0)])
        decls.append(Decl(v.kind if v.kind != "scalar" else "state", v.name, v.shape, init))
    prog = Program(f"fuzz{seed}", decls)
    if r.random() < 0.9:
        LossGen(g, n, f, params, loss_states, consts, decls).build(prog)
    UpdateGen(g, params, states, scalars, consts, prog.loss_result is not None).build(prog)
    return prog


class LossGen:
    def __init__(self, g: Gen, n, f, params, loss_states, consts, decls):
        self.g, self.f = g, f
        self.params, self.loss_states, self.consts = params, loss_states, consts
        self.data = [d for d in decls if d.kind == "data"]
        self.lets: list[tuple[str, tuple[int, ...]]] = []

    def scalar_leaf(self) -> tuple:
        g, r = self.g, self.g.r
        choice = r.random()
        vec = [p for p in self.params + self.loss_states if len(p.shape) == 1]
        if choice < 0.25:
            d = r.choice(self.data)
            return ("elt", d.name, r.randrange(self.f)) if d.name == "x" else ("row", d.name)
        if choice < 0.4 and vec:
            v = r.choice(vec)
            return ("pick", v.name, (r.randrange(v.shape[0]),))
        if choice < 0.5 and self.consts:
            c = r.choice(self.consts)
            return ("name", c.name) if not c.shape else ("pick", c.name, (r.randrange(c.shape[0]),))
        if choice < 0.6:
            sc = [v for v in self.params + self.loss_states if not v.shape]
            if sc:
                return ("name", r.choice(sc).name)
        if choice < 0.7:
            mats = [v for v in self.params + self.loss_states if len(v.shape) == 2]
            if mats:
                m = r.choice(mats)
                return ("pick", m.name, (r.randrange(m.shape[0]), r.randrange(m.shape[1])))
        if choice < 0.8 and self.lets:
            sl = [name for name, shape in self.lets if not shape]
            if sl:
                return ("name", r.choice(sl))
        return ("num", g.small())

    def vector(self, length: int, depth: int) -> tuple:
        """A vector expression of `length` coordinates."""
        r = self.r
        opts = []
        for v in self.params + self.loss_states:
            if v.shape == (length,):
                opts.append(("name", v.name))
            if len(v.shape) == 2 and v.shape[1] == length:
                opts.append(("pick", v.name, (r.randrange(v.shape[0]),)))
        if length == self.f:
            opts.append(("row", "x"))
        opts += [("name", name) for name, shape in self.lets if shape == (length,)]
        opts += [("name", c.name) for c in self.consts if c.shape == (length,)]
        if not opts:
            return None
        base = r.choice(opts)
        if depth <= 0 or r.random() < 0.4:
            return base
        other = self.vector(length, depth - 1)
        op = r.choice(["+", "-", "*"])
        if other is None or r.random() < 0.3:
            other = self.scalar(depth - 1)
            op = r.choice(["*", "+", "-", "/"]) if r.random() < 0.8 else "*"
            if op == "/":
                other = ("bin", "+", ("num", 1.0), ("pow", other, 2))
        return self.g.wrap(("bin", op, base, other), ("num", round(self.g.fr.uniform(-1, 1), 2)))

    @property
    def r(self):
        return self.g.r

    def scalar(self, depth: int) -> tuple:
        e = self.scalar_plain(depth)
        return e if e[0] in ("num", "name") else self.g.wrap(e, self.scalar_leaf_other())

    def scalar_leaf_other(self) -> tuple:
        """A second operand for max/min, from the functions' own stream."""
        sc = [v for v in self.params + self.loss_states if not v.shape]
        r = self.g.fr
        return ("name", r.choice(sc).name) if sc and r.random() < 0.5 else ("num", round(r.uniform(-1, 1), 2))

    def scalar_plain(self, depth: int) -> tuple:
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return self.scalar_leaf()
        choice = r.random()
        if choice < 0.3:
            lengths = sorted({v.shape[0] for v in self.params + self.loss_states if len(v.shape) == 1}
                             | {v.shape[1] for v in self.params + self.loss_states if len(v.shape) == 2}
                             | {self.f})
            length = r.choice(lengths)
            a, b = self.vector(length, depth - 1), self.vector(length, depth - 1)
            if a is None:
                return self.scalar_leaf()
            if b is None or r.random() < 0.3:
                return ("call", "sum", (a,))
            return ("call", "dot", (a, b))
        if choice < 0.7:
            op = r.choice(["+", "-", "*", "*"])
            return ("bin", op, self.scalar(depth - 1), self.scalar(depth - 1))
        if choice < 0.78:
            return ("bin", "/", self.scalar(depth - 1),
                    ("bin", "+", ("num", r.choice([1.0, 2.0, 0.5])), ("pow", self.scalar(depth - 1), 2)))
        if choice < 0.84:
            return ("call", "sqrt", (("bin", "+", ("num", r.choice([1.0, 0.25])),
                                      ("pow", self.scalar(depth - 1), 2)),))
        if choice < 0.9:
            return ("pow", self.scalar(depth - 1), r.choice([2, 2, 3]))
        return ("neg", self.scalar(depth - 1))

    def prediction(self) -> tuple:
        """A sum of every param's contribution, so that every param reaches the loss."""
        r = self.r
        terms = []
        for p in self.params:
            if not p.shape:
                terms.append(("bin", "*", ("name", p.name), ("elt", "x", r.randrange(self.f))
                              if r.random() < 0.7 else ("num", 1.0)))
            elif len(p.shape) == 1:
                if p.shape[0] == self.f:
                    terms.append(("call", "dot", (("name", p.name), ("row", "x"))) if r.random() < 0.7
                                 else ("call", "sum", (("bin", "*", ("row", "x"), ("name", p.name)),)))
                else:
                    terms.append(("call", "sum", (("name", p.name),)))
            else:
                rows = list(range(p.shape[0]))
                r.shuffle(rows)
                for k in rows[:r.randint(1, len(rows))]:
                    terms.append(("call", "dot", (("pick", p.name, (k,)), ("row", "x"))))
        pred = terms[0]
        for t in terms[1:]:
            pred = ("bin", r.choice(["+", "+", "-"]), pred, t)
        return pred

    def build(self, prog: Program) -> None:
        r = self.r
        pred = self.prediction()
        if r.random() < 0.5:
            name = self.g.fresh("r")
            prog.loss.append(Stmt("let", name, ("bin", "-", pred, ("row", "y"))))
            self.lets.append((name, ()))
            resid = ("name", name)
        else:
            resid = ("bin", "-", pred, ("row", "y"))
        for _ in range(r.randint(0, 2)):
            name = self.g.fresh("t")
            if r.random() < 0.4:
                length = r.choice(sorted({v.shape[0] for v in self.params if len(v.shape) == 1} | {self.f}))
                e = self.vector(length, 2)
                if e is not None:
                    prog.loss.append(Stmt("let", name, e))
                    self.lets.append((name, (length,)))
                    continue
            prog.loss.append(Stmt("let", name, self.scalar(2)))
            self.lets.append((name, ()))
        loss = ("bin", "*", ("num", r.choice([0.5, 1.0, 0.25])), ("pow", resid, 2))
        if r.random() < 0.3:
            loss = ("bin", "*", ("pow", resid, 2), ("bin", "+", ("num", 0.5), ("bin", "*", ("num", 0.1), ("pow", ("row", "z" if any(d.name == "z" for d in self.data) else "y"), 2))))
        for s in self.loss_states:
            if s.shape:
                p = next(v for v in self.params if v.name == s.group)
                if len(s.shape) == 1:
                    diff = ("bin", "-", ("name", p.name), ("name", s.name))
                    loss = ("bin", "+", loss, ("bin", "*", ("num", 0.05), ("call", "dot", (diff, diff))))
                else:
                    k = r.randrange(s.shape[0])
                    diff = ("bin", "-", ("pick", p.name, (k,)), ("pick", s.name, (k,)))
                    loss = ("bin", "+", loss, ("bin", "*", ("num", 0.05), ("call", "dot", (diff, diff))))
            else:
                loss = ("bin", "*", ("name", s.name), loss)
        for _ in range(r.randint(0, 2)):
            extra = self.scalar(3)
            loss = ("bin", "+", loss, ("bin", "*", ("num", r.choice([0.01, 0.05, 0.1])),
                                       ("bin", "/", ("pow", extra, 2), ("bin", "+", ("num", 1.0), ("pow", extra, 2)))))
        prog.loss_result = loss


class UpdateGen:
    def __init__(self, g: Gen, params, states, scalars, consts, has_loss: bool):
        self.g, self.r = g, g.r
        self.params, self.states, self.scalars, self.consts = params, states, scalars, consts
        self.has_loss = has_loss
        self.assigned: set[str] = set()
        self.lets: list[tuple[str, tuple[int, ...], str]] = []   # name, shape, group ("" scalar)

    def members(self, group: str) -> list[Var]:
        return [v for v in self.params + self.states if v.group == group]

    def leaf(self, group: str, shape) -> tuple:
        r = self.r
        pool: list[tuple] = []
        for v in self.members(group):
            pool.append(("name", v.name))
        if self.has_loss:
            for p in self.params:
                if p.group == group:
                    pool += [("grad", p.name)] * 2
        pool += [("name", name) for name, s, gr in self.lets if gr == group or (not s and gr == "")]
        pool += [("name", v.name) for v in self.scalars]
        pool += [("name", c.name) for c in self.consts if c.shape in ((), shape)]
        pool.append(("num", self.g.small()))
        return r.choice(pool)

    def scalar_leaf(self) -> tuple:
        r = self.r
        pool = [("name", v.name) for v in self.scalars]
        pool += [("name", name) for name, s, gr in self.lets if gr == "" and not s]
        pool += [("name", c.name) for c in self.consts if not c.shape]
        pool.append(("num", self.g.small(0, 1)))
        return r.choice(pool)

    def bounded(self, group: str, shape, depth: int, scalar_only=False) -> tuple:
        """An expression that stays small: sums and products of leaves, guarded / and sqrt, and
        sometimes one of the contract's functions around them."""
        e = self.bounded_plain(group, shape, depth, scalar_only)
        if e[0] in ("num", "name", "grad"):
            return e
        return self.g.wrap(e, self.scalar_leaf_other(), rate=0.12)

    def scalar_leaf_other(self) -> tuple:
        r = self.g.fr
        return ("name", r.choice(self.scalars).name) if self.scalars and r.random() < 0.5 \
            else ("num", round(r.uniform(-1, 1), 2))

    def bounded_plain(self, group: str, shape, depth: int, scalar_only=False) -> tuple:
        r = self.r
        leaf = (lambda: self.scalar_leaf()) if scalar_only else (lambda: self.leaf(group, shape))
        if depth <= 0 or r.random() < 0.3:
            return leaf()
        c = r.random()
        if c < 0.45:
            return ("bin", r.choice(["+", "-", "*"]), self.bounded(group, shape, depth - 1, scalar_only),
                    self.bounded(group, shape, depth - 1, scalar_only))
        if c < 0.6:
            return ("bin", "/", self.bounded(group, shape, depth - 1, scalar_only),
                    ("bin", "+", ("num", r.choice([1.0, 1.5])), ("pow", self.bounded(group, shape, depth - 1, scalar_only), 2)))
        if c < 0.7:
            return ("call", "sqrt", (("bin", "+", ("num", r.choice([1e-8, 1.0, 0.5])),
                                      ("pow", self.bounded(group, shape, depth - 1, scalar_only), 2)),))
        if c < 0.8:
            return ("bin", "*", ("num", r.choice([0.5, 0.9, 0.1, -0.25])), self.bounded(group, shape, depth - 1, scalar_only))
        if c < 0.9:
            return ("neg", self.bounded(group, shape, depth - 1, scalar_only))
        return ("pow", leaf(), 2)

    def step_for(self, v: Var) -> tuple:
        r = self.r
        me = ("name", v.name)
        if v.kind == "scalar":
            return ("bin", r.choice(["*", "+"]), ("bin", "*", me, ("num", r.choice([0.9, 0.999, 0.5]))),
                    ("bin", "*", ("num", 0.01), self.bounded("", (), 2, scalar_only=True)))
        upd = self.bounded(v.group, v.shape, 3)
        if v.kind == "param":
            if self.has_loss and r.random() < 0.7:
                upd = ("bin", "+", ("grad", v.name), ("bin", "*", ("num", 0.1), upd))
            return ("bin", "-", me, ("bin", "*", ("num", self.g.rate()), upd))
        decay = ("num", r.choice([0.9, 0.99, 0.5, 0.0]))
        return ("bin", "+", ("bin", "*", decay, me), ("bin", "*", ("num", r.choice([0.1, 1.0, 0.5])), upd))

    def build(self, prog: Program) -> None:
        r = self.r
        targets = self.params + self.states + self.scalars
        order = [v for v in targets if r.random() < 0.92]
        r.shuffle(order)
        stmts: list[Stmt] = []
        for v in order:
            # lets before the assignment: old values, gradients, scalar combinations
            for _ in range(r.choice([0, 0, 1, 2])):
                kind = r.random()
                if kind < 0.5 and v.kind != "scalar":
                    name = self.g.fresh("old")
                    src = r.choice(self.members(v.group) or [v])
                    stmts.append(Stmt("let", name, ("name", src.name)))
                    self.lets.append((name, src.shape, src.group))
                elif kind < 0.7 and self.has_loss and v.kind != "scalar":
                    ps = [p for p in self.params if p.group == v.group]
                    if ps:
                        name = self.g.fresh("g")
                        stmts.append(Stmt("let", name, ("grad", ps[0].name)))
                        self.lets.append((name, ps[0].shape, v.group))
                else:
                    name = self.g.fresh("s")
                    stmts.append(Stmt("let", name, self.bounded("", (), 2, scalar_only=True)))
                    self.lets.append((name, (), ""))
            stmts.append(Stmt("assign", v.name, self.step_for(v)))
            self.assigned.add(v.name)
        if r.random() < 0.15:
            self.merge_groups(stmts)
        if r.random() < 0.08:
            self.break_rule(stmts)
        prog.update = stmts

    def merge_groups(self, stmts: list[Stmt]) -> None:
        """A statement that reads a param of another group of the same shape (one group)."""
        r = self.r
        for s in stmts:
            if s.kind != "assign":
                continue
            v = next((x for x in self.params + self.states if x.name == s.name), None)
            if v is None:
                continue
            other = [p for p in self.params if p.shape == v.shape and p.group != v.group]
            if other:
                s.expr = ("bin", "+", s.expr, ("bin", "*", ("num", 0.01), ("name", r.choice(other).name)))
                return

    def break_rule(self, stmts: list[Stmt]) -> None:
        """A vector statement that reads a scalar param: every coordinate would depend on
        another coordinate (the checker refuses, E0051)."""
        for s in stmts:
            v = next((x for x in self.params + self.states if x.name == s.name), None)
            if v is None or not v.shape:
                continue
            other = [p for p in self.params if not p.shape]
            if other and s.kind == "assign":
                s.expr = ("bin", "+", s.expr, ("bin", "*", ("num", 0.01), ("name", other[0].name)))
                return


# -- deployments --------------------------------------------------------------------------------
def ranges_text(owner: str, cuts: list[tuple[int, int]], r: random.Random, skip_empty: bool) -> str:
    parts = []
    for k, (lo, hi) in enumerate(cuts):
        if hi == lo and skip_empty and r.random() < 0.5:
            continue                                # an owner left out holds nothing
        parts.append(f"{owner}[{k}] = {lo}..{hi}")
    return ", ".join(parts)


def split(total: int, owners: int, r: random.Random) -> list[tuple[int, int]]:
    cuts = sorted(r.randint(0, total) for _ in range(owners - 1))
    bounds = [0] + cuts + [total]
    return [(bounds[k], bounds[k + 1]) for k in range(owners)]


def random_tree(leaves: list[str], r: random.Random) -> str:
    if len(leaves) == 1:
        return leaves[0]
    parts: list[str] = []
    i = 0
    while i < len(leaves):
        take = r.randint(1, len(leaves) - i)
        if take == len(leaves) and i == 0:
            take = r.randint(1, len(leaves) - 1)
        chunk = leaves[i:i + take]
        parts.append(random_tree(chunk, r) if len(chunk) > 1 else chunk[0])
        i += take
    return "(" + ", ".join(parts) + ")"


def add_deployments(prog: Program, lr, seed: int, count: int | None = None, aarch64: bool = True) -> None:
    """Random deployments for a checked learner `lr` (its groups and sample count)."""
    r = random.Random(seed * 7919 + 1)
    count = r.choice([1, 1, 2, 2, 3]) if count is None else count
    custom = Strategy("mine", sorted(r.sample(["params", "state", "gradients"], r.randint(1, 2))), [])
    used_custom = False
    for d in range(count):
        items = []
        owners = r.randint(1, 4)
        star = r.random() < 0.65 or owners == 1
        if star:
            items += [f"roles coordinator, owner[{owners}]", "topology star(coordinator)"]
        else:
            owners = max(owners, 2)
            items += [f"roles owner[{owners}]", f"topology hierarchy(fanout {r.choice([2, 2, 3])})"]
        n = lr.nsamples or 0
        if n and r.random() < 0.75:
            items.append("samples " + (ranges_text("owner", split(n, owners, r), r, True) or "even"))
        elif n:
            items.append("samples even")
        if star and r.random() < 0.6:
            items.append("combine " + random_tree([f"owner[{k}]" for k in range(owners)], r))
        strategies = ["replicated", "zero1", "zero2", "zero3", "custom"]
        strat = r.choice(strategies)
        if strat == "custom":
            strat = custom.name
            used_custom = True
        partitions = strat != "replicated"
        if strat == "replicated" and lr.loss is not None and r.random() < 0.3:
            items.append(f"deliver owner[{r.randrange(owners)}]")
        if strat != "replicated" or r.random() < 0.5:
            items.append(f"strategy {strat}")
        if partitions and lr.groups and r.random() < 0.6:
            grp = r.choice(lr.groups)
            cuts = split(grp.size, owners, r)
            items.append(f"partition {r.choice(grp.members)}: " + ranges_text("owner", cuts, r, False))
        elif partitions and r.random() < 0.5:
            items.append("partition even")
        if aarch64 and r.random() < 0.35:
            picks = sorted(r.sample(range(owners), r.randint(1, owners)))
            roles = [f"owner[{k}]" for k in picks]
            if star and r.random() < 0.3:
                roles.append("coordinator")
            items.append("target " + ", ".join(roles) + " = aarch64")
        prog.deployments.append(Deployment(f"d{d}", items))
    if used_custom:
        prog.strategies.append(custom)
