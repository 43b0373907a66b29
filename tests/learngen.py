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
- the matrix operations (issue 16, `MatGen`, in about half the programs): `A @ v` and `u @ A`
  over params, constants, 2-D states and data rows, `outer` reduced to a scalar, `max(v)`,
  `logsumexp`, `onehot(lab[i], K)` over integer labels (some out of range, negative or
  fractional), classification losses, embeddings (`E[tok[i, t]]`, `w[tok[i]]`: rows and
  coordinates named by token ids read from data, some out of range or fractional; now and then
  the ids declared i64 when they are whole and read only as ids, `integers`, a stream of its own), layers
  chained through vector nonlinearities, 2-D params with optimizer states of their own (written
  out, or now and then a line of the optimizer library: `optimizer adam(...) for W3`,
  `library_optimizer`, whose rate is now and then scheduled by `step` or `epoch` and whose
  gradient is scaled by `grad_scale`, issue 47), and uses the checker must refuse by name
  (`Program.expect`: wrong shapes E0030, a product or reduction in the update E0050, ...);
- reductions in the update (`reductions`, about 1 program in 4): a global norm over gradients,
  params and states, and a clip factor that scales some statements, as global-norm clipping
  is written; and reductions the checker must refuse (E0050);
- `contract exact_sum` in about 3 in 10 programs with a loss (a stream of its own), whose
  deployments may have up to 12 owners: every one must print the single process's bits;
- wide learners (`generate(wide=None)`, about one in 20 of `make fuzz`'s, `WIDTHS`): the
  features 24 to 2,048 wide, so the GPU kernels keep vectors in local memory (the differential
  fuzzer's gpu engine runs those over its PTX budget through ptxas only); half of those
  `make fuzz` draws (not those `wide=True` forces) with 12 to 24 samples, so that a block has a block 4 KiB on, whose rows, loaded from a file, a
  full-batch executable prefetches;
- schedules and piecewise functions (issue 47, a stream of their own, `Gen.sr`): now and then
  a scalar of the loss or the update made piecewise, `where(e OP c, e, alt)` with every
  comparison (`==` and `!=` included, against +0, -0 and other values), and a param's rate or a
  scalar state's step times a schedule of `step` or `epoch` (a warm-up by `min`, a decay by `exp`
  or `tanh`, a step change by `where`), so every engine, resume included, runs the clock;
- slices and comprehensions (issue 47, `LossGen.window`, in about 3 in 10 programs, from a
  stream of their own): windows of the data row (`x[i, 1:3]`), of vectors, lets and matrix
  rows, columns (`W[:, 2]`), rows of computed matrices, `[tanh(x[i, j + 1] * w[j]) for j in
  0..3]`, and coordinates of computed vectors (`h[1]`);
- names as users write them: now and then up to the language's 128 characters (`fresh`), which
  every checkpoint must record and restore whole;
- deployments: stars, meshes (a star whose owners reduce-scatter directly; now and then one with
  a strategy E0118 refuses) and hierarchies, random sample splits with empty owners, random combine
  trees, every library strategy and strategies of the file's own, random partitions (even, or
  explicit ranges for one group, empty slices included; in matrix programs mostly a 2-D group,
  cut inside rows, and one set of ranges for every group when all are of one size), delivery to
  one owner, mixed targets (AArch64 owners; owners at x86_64-v3, or x86_64-v4 where this CPU has
  AVX-512: the one host-dependent choice, so that every generated deployment can run here).

Expressions are tuples: ('num', v) ('name', n) ('pick', n, (k, ...)) ('row', d) ('elt', d, k)
('bin', op, a, b) (op includes '@') ('neg', a) ('pow', a, n) ('call', f, (args...)) ('grad', p)
('int', k) (an integer literal: onehot's length) ('cmp', op, a, b) (only as where's condition:
('call', 'where', (cond, x, y))).
Everything is drawn from `random.Random(seed)` and streams of its own seeded from it (the
functions, the matrix operations, minibatches, data in files): a seed is a program, and a seed
without the matrix operations is the program it was before they existed.

Data in files: about a third of the programs declare some data as `load("NAME.npy")`
(`Decl.file`, `Decl.dtype`: '<f8', '<i8' or '|u1'). The values stay in `Decl.value`; the file
bytes are `npy_files(prog)` ({name: bytes}, relative to the source), and `write(prog, path)`
writes the source and its files beside it. A consumer that writes a program's source must write
its files too (or `inline(prog)`, the same values as literals).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from alphac.targets import host_runs


# -- the program --------------------------------------------------------------------------------
@dataclass
class Decl:
    kind: str                        # data | const | param | state
    name: str
    shape: tuple[int, ...]
    value: object                    # data/const: nested lists or a float; param/state: a float
    file: str = ""                   # data: `load("file")`, a .npy file beside the source holding
    dtype: str = "<f8"               # `value` as this dtype (npy_files); "": a literal
    typed: bool = False              # data: declared with its type (`data x: f64[3, 2] = ...`)
    integer: bool = False            # data: declared i64 (`data tok_e: i64[4, 2] = ...`): ids


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
    matrices: bool = False           # uses the matrix operations (MatGen)
    batch: tuple | None = None       # (size, seed or None): `batch N` and `order ...`
    contract: str = ""               # "exact_sum": `contract exact_sum`; "": the default
    expect: tuple | None = None      # (code, text): the checker must refuse `text` with `code`
    optimizers: list[str] = field(default_factory=list)   # `optimizer adam(...) for W3` lines


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
    if k == "at":
        return f"{e[1]}[{expr_text(e[2])}]"
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
    if k == "int":
        return str(e[1])
    if k == "stack":
        return "[" + ", ".join(expr_text(a) for a in e[1]) + "]"
    if k == "cmp":                                   # only where's condition
        return f"{expr_text(e[2])} {e[1]} {expr_text(e[3])}"
    if k == "comp":
        return f"[{expr_text(e[1])} for {e[2]} in {e[3]}..{e[4]}]"
    raise ValueError(k)


def value_text(v) -> str:
    if isinstance(v, tuple) and v[0] == "expr":        # a const written as an expression
        return expr_text(v[1])
    if isinstance(v, list):
        return "[" + ", ".join(value_text(x) for x in v) + "]"
    return num(v)


def type_text(shape, elem: str = "f64") -> str:
    return elem if not shape else elem + "[" + ", ".join(map(str, shape)) + "]"


def render(p: Program) -> str:
    out = [f"learner {p.name}"] + ([f"contract {p.contract}"] if p.contract else []) + [""]
    for d in p.decls:
        if d.kind == "data" and d.file:
            typed = f": {type_text(d.shape, 'i64' if d.integer else 'f64')}" if d.typed or d.integer else ""
            out.append(f'data {d.name}{typed} = load("{d.file}")')
        elif d.integer:
            out.append(f"data {d.name}: {type_text(d.shape, 'i64')} = {value_text(d.value)}")
        elif d.kind in ("data", "const"):
            out.append(f"{d.kind} {d.name} = {value_text(d.value)}")
        else:
            out.append(f"{d.kind} {d.name}: {type_text(d.shape)} = {value_text(d.value)}")
    if p.batch is not None:
        out += ["", f"batch {p.batch[0]}",
                "order " + ("sequence" if p.batch[1] is None else f"shuffle({p.batch[1]})")]
    if p.loss_result is not None:
        out += ["", "loss(i) {"]
        out += [f"  let {s.name} = {expr_text(s.expr)}" for s in p.loss]
        out += [f"  {expr_text(p.loss_result)}", "}"]
    out += ["", "update {"]
    for s in p.update:
        out.append(f"  {'let ' if s.kind == 'let' else ''}{s.name} = {expr_text(s.expr)}")
    out.append("}")
    out += [""] + p.optimizers if p.optimizers else []
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


# -- data in .npy files ---------------------------------------------------------------------------
NPY_DTYPES = ("<f8", "<i8", "|u1")     # what the executables' run-time reader takes, exactly


def npy_array(d: Decl):
    """A loaded data declaration's values as the array its file holds: C order, `d.dtype`, each
    value the binary64 the literal would be (ValueError if the dtype cannot hold one exactly)."""
    import numpy as np
    if d.dtype not in NPY_DTYPES:
        raise ValueError(f"{d.name}: dtype {d.dtype!r} is not one the run-time reader takes")
    f64 = np.ascontiguousarray(np.array(d.value, dtype="<f8"))
    arr = np.ascontiguousarray(f64.astype(d.dtype))
    if f64.shape != tuple(d.shape) or \
            not np.array_equal(arr.astype("<f8").view("<u8"), f64.view("<u8")):
        raise ValueError(f"{d.name}: {d.dtype} does not hold its values exactly")
    return arr


def npy_files(p: Program) -> dict[str, bytes]:
    """The .npy files `p` loads, by the name `load` gives (relative to the source file): the
    bytes np.save writes (format 1.0), the same for the same program."""
    import io
    import numpy as np
    out = {}
    for d in p.decls:
        if d.kind == "data" and d.file:
            buf = io.BytesIO()
            np.save(buf, npy_array(d), allow_pickle=False)
            out[d.file] = buf.getvalue()
    return out


def write(p: Program, path) -> "Path":
    """Write `p` as the learner file `path` and its .npy files beside it; returns the path."""
    from pathlib import Path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for name, raw in npy_files(p).items():
        (path.parent / name).write_bytes(raw)
    path.write_text(render(p))
    return path


def inline(p: Program) -> Program:
    """`p` with every loaded data declaration written back as a literal (the same values)."""
    import copy
    q = copy.deepcopy(p)
    for d in q.decls:
        d.file, d.typed = "", False
    return q


def integral(values) -> bool:
    """Whether every value is an integer an int64 holds, none of them -0 (which no integer is)."""
    flat = [v for row in values for v in (row if isinstance(row, list) else [row])]
    return all(v == int(v) and abs(v) < 2 ** 53 and not (v == 0 and math.copysign(1.0, v) < 0)
               for v in flat)


def load_from_files(p: Program, seed: int, npy: bool | None = None) -> None:
    """In about a third of the programs, data declared as `load("NAME.npy")` instead of a literal
    (each array with probability 0.7, at least one): mostly '<f8'; labels and other integral
    data as '<i8' or, when small and non-negative, '|u1'; now and then an array rounded to
    integers first to be saved so. Drawn from a stream of its own, after the rest: the program
    is otherwise what it was, and a literal's values are what they were."""
    nr = random.Random(seed ^ 0x2E4E59)
    if not (nr.random() < 1 / 3 if npy is None else npy):
        return
    data = [d for d in p.decls if d.kind == "data"]
    picked = [d for d in data if nr.random() < 0.7] or [nr.choice(data)]
    for d in picked:
        d.file, d.typed = f"{d.name}.npy", nr.random() < 0.25
        if d.name != "lab" and nr.random() < 0.2:         # integer-valued data
            d.value = [[float(round(v)) for v in row] if isinstance(row, list) else float(round(row))
                       for row in d.value]
        flat = [v for row in d.value for v in (row if isinstance(row, list) else [row])]
        if integral(d.value) and nr.random() < 0.85:
            small = all(0 <= v <= 255 for v in flat)
            d.dtype = "|u1" if small and nr.random() < 0.6 else "<i8"
        else:
            d.dtype = "<f8"


# -- shapes of expressions -----------------------------------------------------------------------
class Gen:
    """One program's generation: the random source and what is in scope."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.fr = random.Random(seed ^ 0x5EED)       # the functions: a stream of its own, so
        self.seed = seed                             # the rest of a seed's program is unchanged
        self.mr = random.Random(seed ^ 0xA1FA16)     # the matrix operations: another one
        self.mat: MatGen | None = None
        self.names = 0
        self.nr = random.Random(seed ^ 0x4A3E)       # name lengths: a stream of its own
        self.tr = random.Random(seed ^ 0x51C05)      # sin and cos: one too (issue 47)
        self.pw = random.Random(seed ^ 0x90E7)       # pow: one too (issue 47)
        self.sr = random.Random(seed ^ 0x5C3ED)      # where and the clock: a stream of their own

        self.sl = random.Random(seed ^ 0x511CE5)     # slices and comprehensions: another one
        self.slices = self.sl.random() < 0.3

    def piecewise(self, e: tuple, other: tuple, rate: float = 0.05) -> tuple:
        """Sometimes e made piecewise: `where(e OP c, e, alt)` with c a number or `other` and
        alt a bounded change of e (every comparison, == and != included)."""
        r = self.sr
        if r.random() >= rate:
            return e
        c = other if r.random() < 0.4 else ("num", r.choice([0.0, -0.0, 0.5, -0.25, 1.0]))
        alt = r.choice([("bin", "*", ("num", 0.5), e), ("call", "tanh", (e,)), other, ("neg", e)])
        cond = ("cmp", r.choice(["<", "<=", ">", ">=", "==", "!="]), e, c)
        return ("call", "where", (cond, e, alt) if r.random() < 0.5 else (cond, alt, e))

    def scheduled(self, e: tuple, rate: float = 0.25) -> tuple:
        """Sometimes e times a schedule of the update's clock (`step`, `epoch`): a warm-up, a
        decay, a step change by `where`, in forms that stay in (0, 1]."""
        r = self.sr
        if r.random() >= rate:
            return e
        clock = ("name", r.choice(["step", "epoch"]))
        k = r.choice([2.0, 3.0, 5.0])
        f = r.choice([
            ("call", "min", (("num", 1.0), ("bin", "/", ("bin", "+", clock, ("num", 1.0)), ("num", k)))),
            ("call", "exp", (("bin", "*", ("num", -0.125), clock),)),
            ("call", "where", (("cmp", r.choice(["<", "<=", ">", ">=", "==", "!="]), clock, ("num", k)),
                               ("num", 1.0), ("num", r.choice([0.5, 0.25])))),
            ("call", "max", (("num", 0.25), ("bin", "-", ("num", 1.0), ("call", "tanh", (
                ("bin", "/", clock, ("num", 4.0 * k)),))))),
        ])
        return ("bin", "*", e, f)

    def wrap(self, e: tuple, other: tuple | None = None, rate: float = 0.15) -> tuple:
        """wrap_plain's e, now and then the exponent or the base of a `pow` on a positive base
        (`c + b^2`, c >= 0.5) and a bounded exponent (issue 47): its own stream, drawn after the
        rest, so a program that draws no pow is the one it was before."""
        out = self.wrap_plain(e, other, rate)
        r = self.pw
        if r.random() >= 0.01:
            return out
        base = ("bin", "+", ("num", r.choice([0.5, 1.0, 2.0])), ("pow", other or out, 2))
        expo = r.choice([("num", r.choice([0.5, -1.5, 2.5, 1.0 / 3, 3.0])), ("call", "tanh", (out,))])
        if expo[0] == "num":
            base = ("bin", "+", ("num", r.choice([0.5, 1.0, 2.0])), ("pow", out, 2))
        return ("call", "pow", (base, expo))

    def wrap_plain(self, e: tuple, other: tuple | None = None, rate: float = 0.15) -> tuple:
        """Sometimes e inside one of the contract's functions (alphac.math), in forms that
        stay finite: the bounded ones, the exact ones, exp and log of safe arguments."""
        if self.tr.random() < 0.02:                  # sin, cos around what the rest draws
            return ("call", self.tr.choice(("sin", "cos")), (self.wrap(e, other, rate),))
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
        """A new name; now and then as long as users write them, up to the language's limit
        (128 characters: checkpoint records and shard paths must hold it whole)."""
        self.names += 1
        name = f"{base}{self.names}"
        if self.nr.random() < 0.1:
            width = self.nr.choice([31, 32, 33, 72, 100, 128])
            name = (name + "_" + "velocity_of_the_weights_" * 6)[:width]
        return name

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


WIDE_RATE = 0.05                    # wide learners: their share of the seeds, and their widths
WIDTHS = (24, 100, 1000, 2048)     # (over 16 a kept vector is a .local array)


def generate(seed: int, matrices: bool | None = None, npy: bool | None = None,
             wide: bool | None = False) -> Program:
    """Seed `seed`'s program. About half the seeds also use the matrix operations (MatGen,
    drawn from a stream of their own: the other half are the programs they were before);
    `matrices` forces the choice. About a third load data from .npy files (load_from_files);
    `npy` forces that choice. `wide=None` draws wide learners (`make fuzz` does), about one in
    20: their features (every vector and matrix row they shape) WIDTHS wide, from a stream of
    their own (the others are the programs they were); True forces one, and False, the default,
    none (the bounded shares in tests/test_learner_fuzz.py keep their programs and their time)."""
    g = Gen(seed)
    r = g.r
    matrices = g.mr.random() < 0.5 if matrices is None else matrices
    n = r.randint(1, 7)                              # samples
    f = r.randint(1, 4)                              # features
    wr = random.Random(seed ^ 0x3D1DE)
    drawn = wr.random() < WIDE_RATE
    if drawn if wide is None else wide:
        f = wr.choice(WIDTHS)
        g.slices = False                             # windows of 1,000: not what wide ones test
        if wide is None and wr.random() < 0.5:       # blocks with a block 4 KiB on: run-time
            n = wr.randint(12, 24)                   # rows prefetched (docs/codegen.md)
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
    for _ in range(min(r.choice([1, 1, 2, 2, 3]), 2 if matrices else 3)):
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
    if matrices:
        g.mat = MatGen(g, n, f, decls, params, loss_states, consts)
        g.mat.declare()
        prog.matrices = True
    if r.random() < 0.9 or g.mat:
        LossGen(g, n, f, params, loss_states, consts, decls).build(prog)
    mat = g.mat
    UpdateGen(g, params + (mat.free if mat else []), states + (mat.free_states if mat else []),
              scalars, consts, prog.loss_result is not None).build(prog)
    if mat:
        mat.update(prog)
    reductions(prog, seed, prog.loss_result is not None)
    if mat:
        mat.embed(prog)                              # drawn last: every other draw as it was
    br = random.Random(seed ^ 0xBA7C4)              # minibatches: a stream of their own
    if prog.loss_result is not None and n > 1 and br.random() < 0.35:
        prog.batch = (br.randint(1, n - 1), br.choice([None, br.randrange(1 << 63)]))
    cr = random.Random(seed ^ 0xE5AC7)              # the contract: a stream of its own
    if prog.loss_result is not None and cr.random() < 0.3:
        prog.contract = "exact_sum"
    load_from_files(prog, seed, npy)
    integers(prog, seed)
    return prog


def integers(p: Program, seed: int) -> None:
    """Now and then (a stream of its own, after the rest) the ids, labels `lab` and token ids
    `tok_e`, declared i64 (issue 47) when they are whole numbers within 2^53 (out of range ones
    stay: data-label); where a leaf reads `lab[i]` as a number, it reads `f64(lab[i])` (unless a
    mutant's text, `Program.expect`, would change). A file of them is then saved as '<i8' or
    '|u1' (npy_array), never '<f8'."""
    import re
    ir, text = random.Random(seed ^ 0x164D), render(p)
    for d in (d for d in p.decls if d.kind == "data" and d.name in ("lab", "tok_e")):
        whole = all(v == math.floor(v) and abs(v) <= 2 ** 53 for row in d.value
                    for v in (row if isinstance(row, list) else [row]))
        ids = len(re.findall(rf"(?:onehot\(|\[){d.name}\[i", text)) == text.count(f"{d.name}[i")
        if ir.random() < 0.4 and whole and (ids or not p.expect):
            d.integer = True
            p.loss = [Stmt(s.kind, s.name, converted(s.expr, d.name)) for s in p.loss]
            p.loss_result = converted(p.loss_result, d.name)
            if d.file and d.dtype == "<f8" and integral(d.value):
                d.dtype = "<i8"
            elif d.file and d.dtype == "<f8":        # -0.0: no integer file holds it, a literal
                d.file, d.typed = "", False


def converted(e, name: str):
    """`e` with each read of data `name` as a number (not an index, not onehot's label) written
    `f64(name[i])`, the conversion of i64 data."""
    if not isinstance(e, tuple) or e[:1] == ("at",):
        return e
    if e[:2] in (("row", name), ("elt", name)):
        return ("call", "f64", (e,))
    if e[:2] == ("call", "onehot"):
        return ("call", "onehot", (e[2][0], *(converted(a, name) for a in e[2][1:])))
    return tuple(converted(a, name) for a in e)


def reductions(prog: Program, seed: int, has_loss: bool) -> None:
    """Reductions in the update (issue 47), in about 1 program in 4, from a stream of their
    own: first, a global norm `sqrt(t1 + t2 ...)` over terms dot(x, x), sum(x * x) and
    max(abs(x)) of gradients and (read before any assignment: the step's starting) params and
    states, a clip factor `min(1, C / (norm + 1e-6))` that scales one or two statements, and
    now and then a scalar state that reads the norm (refused E0119 by a deployment that
    delivers to one owner). Now and then a reduction the checker must refuse (E0050): one over
    a value after its assignment, or one inside another's operand."""
    rr = random.Random(seed ^ 0x6E0A2)
    coords = [d for d in prog.decls if d.kind in ("param", "state") and d.shape]
    if not prog.update or not coords or rr.random() >= 0.25:
        return
    pool = [("name", d.name) for d in coords]
    pool += [("grad", d.name) for d in coords if d.kind == "param" and has_loss] * 2
    terms = []
    for x in rr.sample(pool, min(len(pool), rr.choice([1, 2, 3]))):
        k = rr.random()
        terms.append(("call", "dot", (x, x)) if k < 0.5 else ("call", "sum", (("bin", "*", x, x),))
                     if k < 0.8 else ("call", "max", (("call", "abs", (x,)),)))
    total = terms[0]
    for t in terms[1:]:
        total = ("bin", "+", total, t)
    norm, clip = f"norm{seed % 97}", f"clip{seed % 89}"
    room = ("bin", "+", ("name", norm), ("num", 1e-6))
    scale = ("bin", "/", ("num", rr.choice([0.05, 0.5, 2.0])), room)
    first = [Stmt("let", norm, ("call", "sqrt", (total,))),
             Stmt("let", clip, ("call", "min", (("num", 1.0), scale)))]
    assigns = [s for s in prog.update if s.kind == "assign"]
    for s in rr.sample(assigns, min(len(assigns), rr.choice([1, 2]))):
        s.expr = ("bin", "*", ("name", clip), s.expr)
    scalars = [d.name for d in prog.decls if d.kind == "state" and not d.shape
               and any(s.kind == "assign" and s.name == d.name for s in assigns)]
    if scalars and rr.random() < 0.3:
        s = next(s for s in assigns if s.name == scalars[0])
        s.expr = ("bin", "+", s.expr, ("bin", "*", ("num", 0.01), ("name", norm)))
    prog.update[:0] = first
    if prog.expect is None and rr.random() < 0.04:
        x = rr.choice(pool)
        bad = ("call", "sum", (("bin", "*", x, ("call", "dot", (x, x))),))
        if x[0] == "name" and x[1] in {s.name for s in assigns} and rr.random() < 0.5:
            bad = ("call", "dot", (x, x))              # after its assignment: the new value
        prog.update.append(Stmt("let", f"late{seed % 83}", bad))
        prog.expect = ("E0050", expr_text(bad))


class LossGen:
    def __init__(self, g: Gen, n, f, params, loss_states, consts, decls):
        self.g, self.f = g, f
        self.params, self.loss_states, self.consts = params, loss_states, consts
        self.data = [d for d in decls if d.kind == "data" and (d.name == "x" or len(d.shape) == 1)]
        self.lets: list[tuple[str, tuple[int, ...]]] = []
        self.mat = g.mat                             # the matrix operations, or None
        if self.mat:
            self.lets += self.mat.lets

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

    def window(self, length: int) -> tuple | None:
        """A vector of `length` from slices (issue 47): a window of the data row, of a longer
        vector param or let, a column or a row's window of a matrix, a row of a computed matrix,
        or a comprehension over the data row's coordinates; drawn from the slices' stream."""
        sl, f, opts = self.g.sl, self.f, []

        def cut(n: int) -> str:
            a = sl.randrange(n - length + 1)
            return f"{a}:{a + length}"
        if f > length:
            opts.append(("pick", "x", ("i", cut(f))))
        for v in [(p.name, p.shape) for p in self.params + self.loss_states] + self.lets:
            name, shape = v
            if len(shape) == 1 and shape[0] > length:
                opts.append(("pick", name, (cut(shape[0]),)))
            if len(shape) == 2 and shape[0] == length:
                opts.append(("pick", name, (":", sl.randrange(shape[1]))))
            if len(shape) == 2 and shape[1] >= length:
                opts.append(("pick", name, (sl.randrange(shape[0]),) + ((cut(shape[1]),) if shape[1] > length else ())))
        if f >= length:
            a = sl.randrange(f - length + 1)
            vec = [p.name for p in self.params + self.loss_states if p.shape == (length,)]
            other = ("pick", sl.choice(vec), ("j",)) if vec and sl.random() < 0.6 else \
                ("num", round(sl.uniform(-1, 1), 2))
            opts.append(("comp", ("call", "tanh", (("bin", "*", ("pick", "x", ("i", f"j + {a}")), other),)),
                         "j", 0, length))
        return sl.choice(opts) if opts else None

    def slice_terms(self, loss: tuple) -> tuple:
        """loss plus, from the slices' stream alone (the rest of the program is the one the seed
        drew before), a coordinate of a computed vector (`0.05 * t3[1]^2`), a window's dot, as
        in a convolution (`0.05 * dot(w[0:2], x[i, 1:3])^2`), and the sum of a `window`."""
        sl, f = self.g.sl, self.f
        lengths = sorted({s[0] for _, s in [(p.name, p.shape) for p in self.params] + self.lets
                          if len(s) == 1} | {f})
        for _ in range(sl.choice([1, 1, 2])):
            w = self.window(sl.choice(lengths))
            if w is not None:
                loss = ("bin", "+", loss, ("bin", "*", ("num", 0.05), ("pow", ("call", "sum", (w,)), 2)))
        vl = [(name, shape) for name, shape in self.lets if len(shape) == 1]
        if vl and sl.random() < 0.7:
            name, shape = sl.choice(vl)
            term = ("pow", ("pick", name, (sl.randrange(shape[0]),)), 2)
            loss = ("bin", "+", loss, ("bin", "*", ("num", 0.05), term))
        vec = [p for p in self.params if len(p.shape) == 1]
        if vec and sl.random() < 0.8:
            v = sl.choice(vec)
            k = sl.randint(1, min(v.shape[0], f))
            a, b = sl.randrange(v.shape[0] - k + 1), sl.randrange(f - k + 1)
            term = ("call", "dot", (("pick", v.name, (f"{a}:{a + k}",)), ("pick", "x", ("i", f"{b}:{b + k}"))))
            loss = ("bin", "+", loss, ("bin", "*", ("num", 0.05), ("pow", term, 2)))
        return loss

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
        if self.mat:
            opts += self.mat.leaves(length)
            if depth > 0 and self.g.mr.random() < 0.3:
                prod = self.mat.product(self, length, depth)
                if prod is not None:
                    opts = [prod]
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
        return e if e[0] in ("num", "name") else self.g.piecewise(
            self.g.wrap(e, self.scalar_leaf_other()), ("num", 0.25))

    def scalar_leaf_other(self) -> tuple:
        """A second operand for max/min, from the functions' own stream."""
        sc = [v for v in self.params + self.loss_states if not v.shape]
        r = self.g.fr
        return ("name", r.choice(sc).name) if sc and r.random() < 0.5 else ("num", round(r.uniform(-1, 1), 2))

    def scalar_plain(self, depth: int) -> tuple:
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return self.scalar_leaf()
        if self.mat and self.g.mr.random() < 0.2:
            return self.mat.reduction(self, depth)
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
        if self.g.slices:
            loss = self.slice_terms(loss)
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
        if self.mat:
            prog.loss[:0] = self.mat.stmts
            loss = self.mat.finish(loss, prog)
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
        return self.g.piecewise(self.g.wrap(e, self.scalar_leaf_other(), rate=0.12), ("num", 0.5))

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
                    ("bin", "*", self.g.scheduled(("num", 0.01)), self.bounded("", (), 2, scalar_only=True)))
        upd = self.bounded(v.group, v.shape, 3)
        if v.kind == "param":
            if self.has_loss and r.random() < 0.7:
                upd = ("bin", "+", ("grad", v.name), ("bin", "*", ("num", 0.1), upd))
            return ("bin", "-", me, ("bin", "*", self.g.scheduled(("num", self.g.rate())), upd))
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


# -- the matrix operations (issue 16) ------------------------------------------------------------
ACTS = ("tanh", "tanh", "sigmoid", "relu", "softplus", "gauss", "logsq", "none")


def act(kind: str, e: tuple) -> tuple:
    """A nonlinearity on a vector, in a form that stays finite."""
    if kind == "none":
        return e
    if kind == "gauss":
        return ("call", "exp", (("neg", ("pow", e, 2)),))
    if kind == "logsq":
        return ("call", "log", (("bin", "+", ("num", 1.0), ("pow", e, 2)),))
    return ("call", kind, (e,))


def call(f: str, *args) -> tuple:
    return ("call", f, tuple(args))


def matmul(a: tuple, b: tuple) -> tuple:
    return ("bin", "@", a, b)


class MatGen:
    """A program's matrix operations, drawn from the stream `g.mr`: `A @ v` and `u @ A` on
    params, constants, states and data rows, `outer` reduced to a scalar, `max(v)`,
    `logsumexp`, `onehot(lab[i], K)` over integer labels (now and then -0.0, and in a few programs
    one out of range, negative or fractional: every engine refuses `data-label`), classification heads (`logsumexp(z) - dot(onehot(lab[i], K), z)`, a hinge
    on `max(z)`), multi-layer chains (`h = tanh(W1 @ x[i] + b1)`, `z = W2 @ h + b2`), vector
    nonlinearities, 2-D params with optimizer states of their own (momentum, Nesterov, Adam
    with bias-correction powers, RMSProp) and 2-D states the loss reads; now and then a use the
    checker must refuse by name (`Program.expect`). It also feeds LossGen's random DAG
    (`leaves`, `product`, `reduction`)."""

    def __init__(self, g: Gen, n, f, decls, params, loss_states, consts):
        self.g, self.m, self.n, self.f, self.decls = g, g.mr, n, f, decls
        self.old = [v for v in params + loss_states if len(v.shape) == 2]   # 2-D, LossGen's
        self.old_vecs = [v for v in params + loss_states + consts if len(v.shape) == 1]
        self.old_scalars = [v for v in params if not v.shape]
        self.params: list[Var] = []          # this block's params
        self.mats: list[Var] = []            # 2-D values the loss reads: params, consts, states
        self.vecs: list[tuple[tuple, int]] = []   # vector leaves: (expression, length)
        self.consts: list[Var] = []
        self.free: list[Var] = []            # params UpdateGen updates (the others: templates)
        self.free_states: list[Var] = []
        self.refs: list[Var] = []            # 2-D states the loss reads, updated as averages
        self.stmts: list[Stmt] = []          # loss lets, before LossGen's
        self.lets: list[tuple[str, tuple[int, ...]]] = []
        self.terms: list[tuple] = []
        self.mlets: list[Var] = []           # 2-D lets of the loss (read like matrices, not indexed)
        self.powers: list[str] = []          # Adam's bias-correction powers, once per program
        self.inputs = [(("row", "x"), f)]
        self.K = 0
        self.x = random.Random(g.seed ^ 0xB0AD)   # rows broadcast, vectors of scalars: their own

    # -- values ------------------------------------------------------------------------------
    def small(self, lo=-1.0, hi=1.0) -> float:
        m = self.m
        if m.random() < 0.04:
            return m.choice([0.0, -0.0, 0.5, 1.0, -1.0])
        return round(m.uniform(lo, hi), m.choice([1, 2, 3]))

    def values(self, shape, lo=-1.0, hi=1.0):
        if len(shape) == 1:
            return [self.small(lo, hi) for _ in range(shape[0])]
        return [[self.small(lo, hi) for _ in range(shape[1])] for _ in range(shape[0])]

    def dim(self) -> int:
        """A dimension; now and then one past the emitter's unrolling (8): a real loop, and
        past a matrix product's widest block (8 rows of `A @ v`, 16 columns of `u @ A` with one
        lane): a loop over blocks with a remainder."""
        m = self.m
        return m.choice([1, 2, 2, 3, 3, 4, 5]) if m.random() < 0.93 else m.choice([9, 10, 12, 17, 19])

    def insert(self, d: Decl) -> None:
        """Data after data, constants after constants, the rest at the end."""
        before = {"data": ("data",), "const": ("data", "const")}.get(d.kind)
        if before is None:
            self.decls.append(d)
            return
        k = max(i for i, x in enumerate(self.decls) if x.kind in before) + 1
        self.decls.insert(k, d)

    def param(self, base: str, shape, free_rate=0.3) -> tuple:
        m = self.m
        name = self.g.fresh(base)
        init = self.values(shape, -0.6, 0.6) if m.random() < 0.85 else m.choice([0.0, 0.1])
        self.insert(Decl("param", name, shape, init))
        v = Var(name, "param", shape, name)
        self.params.append(v)
        if m.random() < free_rate:                      # updated by UpdateGen, at random
            self.free.append(v)
            for _ in range(m.choice([0, 1, 1, 2])):
                s = Var(self.g.fresh("m"), "state", shape, name)
                self.insert(Decl("state", s.name, shape, 0.0 if m.random() < 0.5 else self.small(-0.3, 0.3)))
                self.free_states.append(s)
        if len(shape) == 2:
            self.mats.append(v)
        else:
            self.vecs.append((("name", name), shape[0]))
        return ("name", name)

    def const(self, shape, lo=-1.0, hi=1.0) -> tuple:
        name = self.g.fresh("C")
        self.insert(Decl("const", name, shape, self.values(shape, lo, hi)))
        v = Var(name, "const", shape)
        self.consts.append(v)
        (self.mats if len(shape) == 2 else []).append(v)
        if len(shape) == 1:
            self.vecs.append((("name", name), shape[0]))
        return ("name", name)

    def let(self, base: str, e: tuple, shape) -> tuple:
        name = self.g.fresh(base)
        self.stmts.append(Stmt("let", name, e))
        self.lets.append((name, shape))
        if len(shape) == 1:
            self.vecs.append((("name", name), shape[0]))
        return ("name", name)

    def matrices(self) -> list[Var]:
        return self.mats + self.old + self.mlets

    def leaves(self, length: int) -> list[tuple]:
        """Vector leaves of `length` LossGen does not know: this block's params, constants,
        lets and data rows."""
        lets = {name for name, _ in self.lets}
        return [e for e, k in self.vecs if k == length and e != ("row", "x")
                and not (e[0] == "name" and e[1] in lets)]

    def leaf(self, length: int) -> tuple | None:
        opts = [e for e, k in self.vecs if k == length] + \
               [("name", v.name) for v in self.old_vecs if v.shape == (length,)] + \
               [("pick", v.name, (self.m.randrange(v.shape[0]),)) for v in self.matrices()
                if v.shape[1] == length and v.kind != "let"]
        return self.m.choice(opts) if opts else None

    def label(self) -> tuple:
        m = self.m
        if self.old_scalars and m.random() < 0.08:       # a param as a label: no gradient
            return ("name", m.choice(self.old_scalars).name)
        return ("row", "lab")

    def onehot(self) -> tuple:
        return call("onehot", self.label(), ("int", self.K))

    def matrix(self, M: Var, lg, depth: int) -> tuple:
        """A matrix expression of M's shape: M itself, M plus a rank-one term, M scaled or
        through a function, M minus a state of its shape."""
        m = self.m
        e = ("name", M.name)
        k = m.random()
        R, C = M.shape
        row = self.leaf(C) if depth > 0 and self.x.random() < 0.2 else None
        if row is not None:                              # a vector f64[C] over M's rows
            e = ("bin", self.x.choice(["+", "*", "-"]), e, row) if self.x.random() < 0.7 else \
                call("max", e, row)
        if k < 0.65 or depth <= 0:
            return e
        if k < 0.8:
            a, b = self.leaf(R), self.leaf(C)
            if a is None or b is None:
                return e
            e = ("bin", m.choice(["+", "-"]), e, call("outer", a, b))
            if m.random() < 0.5:                         # a 2-D let others may read too
                e = self.let("M", e, M.shape)
                self.mlets.append(Var(e[1], "let", M.shape))
            return e
        if k < 0.9:
            return ("bin", "*", e, lg.scalar(0) if lg else ("num", self.small()))
        refs = [s for s in self.refs if s.shape == M.shape and s.name != M.name]
        if refs:
            return ("bin", "-", e, ("name", m.choice(refs).name))
        return call(m.choice(["tanh", "sigmoid", "abs"]), e)

    # -- LossGen's hooks -----------------------------------------------------------------------
    def product(self, lg, length: int, depth: int) -> tuple | None:
        """A vector of `length` made by a matrix operation, or None if none fits."""
        m = self.m
        opts = [("mv", M) for M in self.matrices() if M.shape[0] == length] + \
               [("vm", M) for M in self.matrices() if M.shape[1] == length]
        if length == self.K:
            opts.append(("onehot", None))
        if not opts:
            return None
        kind, M = m.choice(opts)
        if length <= 4 and self.x.random() < 0.1:           # a vector of computed scalars
            return ("stack", tuple(lg.scalar(0) for _ in range(length)))
        if kind == "onehot":
            return self.onehot()
        R, C = M.shape
        v = lg.vector(C if kind == "mv" else R, depth - 1) or self.leaf(C if kind == "mv" else R)
        if v is None:
            return None
        mx = self.matrix(M, lg, depth - 1)
        e = matmul(mx, v) if kind == "mv" else matmul(v, mx)
        return act(m.choice(ACTS), e) if m.random() < 0.4 else e

    def reduction(self, lg, depth: int) -> tuple:
        """A scalar through max(v), logsumexp(v), or an outer product reduced."""
        m = self.m
        lengths = sorted({k for _, k in self.vecs} | {self.f})
        L = m.choice(lengths)
        v = lg.vector(L, depth - 1) or self.leaf(L)
        k = m.random()
        if k < 0.35:
            return call("max", v)
        if k < 0.6:
            return call("logsumexp", v)
        R = m.choice(lengths)
        a = self.leaf(R) or lg.vector(R, 0)
        c = lg.vector(L, 0) or self.leaf(L)
        if a is None or c is None:
            return call("max", v)
        if k < 0.8:
            return call("sum", matmul(call("outer", a, v), c))
        if k < 0.9:
            return call("dot", matmul(call("outer", v, a), self.leaf(R) or a), c)
        return call("dot", matmul(a, call("outer", a, v)), c)

    # -- declarations and the loss's heads --------------------------------------------------------
    def declare(self) -> None:
        m, n = self.m, self.n
        K = self.K = m.choice([2, 3, 3, 4, 5]) if m.random() < 0.9 else m.choice([9, 10])
        labels = []
        for _ in range(n):
            y = float(m.randrange(K))
            if m.random() < 0.05:                        # -0.0 is class 0
                y = -0.0
            labels.append(y)
        if m.random() < 0.12:          # one out of range, negative or fractional: refused data-label
            labels[m.randrange(n)] = m.choice([float(K), -1.0, 1.5, float(K + 3), 0.5])
        self.insert(Decl("data", "lab", (n,), labels))
        if m.random() < 0.4:
            f2 = m.choice([2, 3, 5, 9])
            self.insert(Decl("data", "u", (n, f2), [self.values((f2,), -2, 2) for _ in range(n)]))
            self.inputs.append((("row", "u"), f2))
        for e, k in self.inputs:
            self.vecs.append((e, k))
        if m.random() < 0.35:
            self.const((self.dim(), self.f))
        if m.random() < 0.3:
            self.const((self.dim(),), 0.1, 1.0)
        heads = [self.head_mlp, self.head_classify, self.head_vecmat, self.head_outer,
                 self.head_max, self.head_mlp]
        for h in m.sample(heads, m.choice([1, 1, 1, 1, 2])):
            self.terms.append(h())
        if m.random() < 0.3:
            self.regularizer()

    def embed(self, prog: Program) -> None:
        """Now and then (a stream of its own, drawn last: every other draw of the seed is as it
        was) an embedding: rows of a param E named by token ids read from data (`E[tok[i, t]]`,
        issue 47), summed or multiplied, through tanh, reduced by a dot with a constant or a sum;
        now and then a constant's row and a vector param's coordinate (`w[tok[i]]`) beside them,
        added to the loss, and E and w trained by SGD with momentum. Ids repeat within a sample
        and some rows are never named; now and then one is out of range or fractional (every
        engine refuses data-label). E and w are read in the loss through these indices alone
        (types/check.py's gathered_only)."""
        e = random.Random(self.g.seed ^ 0xE3BED)
        if prog.loss_result is None or e.random() >= 0.3:
            return
        V, D, T = e.choice([2, 3, 5, 9]), e.choice([1, 2, 3, 4, 10]), e.choice([1, 2, 3])
        toks = [[float(e.randrange(V)) for _ in range(T)] for _ in range(self.n)]
        if e.random() < 0.1:
            toks[e.randrange(self.n)][e.randrange(T)] = e.choice([float(V), -1.0, 0.5])
        values = lambda *shape: [[round(e.uniform(-0.6, 0.6), 2) for _ in range(shape[-1])]
                                 for _ in range(shape[0])] if len(shape) == 2 else \
            [round(e.uniform(-0.6, 0.6), 2) for _ in range(shape[0])]
        self.insert(Decl("data", "tok_e", (self.n, T), toks) if T > 1 else
                    Decl("data", "tok_e", (self.n,), [t[0] for t in toks]))
        at = lambda name, t: ("at", name, ("elt", "tok_e", t) if T > 1 else ("row", "tok_e"))
        self.insert(Decl("param", "E_e", (V, D), values(V, D)))
        h = at("E_e", 0)
        for t in range(1, T):
            h = ("bin", e.choice(["+", "*"]), h, at("E_e", t))
        if e.random() < 0.3:
            self.insert(Decl("const", "C_e", (V, D), values(V, D)))
            h = ("bin", "-", h, at("C_e", e.randrange(T)))
        h = call("tanh", h) if e.random() < 0.6 else h
        if e.random() < 0.5:
            self.insert(Decl("const", "v_e", (D,), values(D)))
            out = call("dot", h, ("name", "v_e"))
        else:
            out = call("sum", h)
        trained = ["E_e"]
        if e.random() < 0.5:
            self.insert(Decl("param", "w_e", (V,), values(V)))
            out = ("bin", "+", out, ("bin", "*", at("w_e", e.randrange(T)), ("row", "y")))
            trained.append("w_e")
        loss = ("bin", "*", ("num", 0.5), ("pow", ("bin", "-", out, ("row", "y")), 2))
        prog.loss_result = ("bin", "+", prog.loss_result, loss)
        for p in trained:
            shape = next(d.shape for d in self.decls if d.name == p)
            self.insert(Decl("state", f"m_{p}", shape, 0.0))
            prog.update += [Stmt("assign", f"m_{p}", ("bin", "+", ("bin", "*", ("num", 0.5), ("name", f"m_{p}")),
                                                       ("grad", p))),
                            Stmt("assign", p, ("bin", "-", ("name", p), ("bin", "*", ("num", 0.1), ("name", f"m_{p}"))))]

    def head_mlp(self) -> tuple:
        """h = act(W1 @ x[i] + b1), ... then an output layer."""
        m = self.m
        h, width = m.choice(self.inputs)
        for _ in range(m.choice([1, 1, 1, 2, 2, 3])):
            out = self.dim()
            if m.random() < 0.8:
                pre = matmul(self.param("W", (out, width)), h)
            else:
                pre = matmul(h, self.param("V", (width, out)))
            if m.random() < 0.75:
                pre = ("bin", "+", pre, self.param("b", (out,)))
            h, width = self.let("h", act(m.choice(ACTS), pre), (out,)), out
        return self.output(h, width)

    def output(self, h: tuple, width: int) -> tuple:
        m = self.m
        k = m.random()
        if k < 0.6:
            z = matmul(self.param("W", (self.K, width)), h) if m.random() < 0.8 else \
                matmul(h, self.param("V", (width, self.K)))
            if m.random() < 0.6:
                z = ("bin", "+", z, self.param("b", (self.K,)))
            return self.xent(self.let("z", z, (self.K,)))
        if k < 0.85:
            pred = call("dot", self.param("v", (width,)), h)
        else:
            pred = call(m.choice(["max", "logsumexp", "sum"]), h)
        return ("bin", "*", ("num", 0.5), ("pow", ("bin", "-", pred, ("row", "y")), 2))

    def xent(self, z: tuple) -> tuple:
        """A classification loss over logits z of length K."""
        m = self.m
        y1 = self.onehot()
        k = m.random()
        if k < 0.6:                                      # softmax cross-entropy
            return ("bin", "-", call("logsumexp", z), call("dot", y1, z))
        if k < 0.8:                                      # a multiclass hinge
            return call("relu", ("bin", "-", ("bin", "+", ("num", 1.0), call("max", z)), call("dot", y1, z)))
        d = ("bin", "-", call("sigmoid", z), y1)
        return call("dot", d, d)

    def head_classify(self) -> tuple:
        m = self.m
        x, F = m.choice(self.inputs)
        self.param("W", (self.K, F))
        z = matmul(self.matrix(self.mats[-1], None, 1), x)
        if m.random() < 0.5:
            z = ("bin", "+", z, self.param("b", (self.K,)))
        return self.xent(self.let("z", z, (self.K,)) if m.random() < 0.7 else z)

    def head_vecmat(self) -> tuple:
        """x[i] @ V, or u @ A with u a param."""
        m = self.m
        x, F = m.choice(self.inputs)
        H = self.dim()
        if m.random() < 0.6:
            p = matmul(x, self.param("V", (F, H)))
            out = H
        else:
            u = self.param("a", (H,))
            A = self.param("A", (H, F)) if m.random() < 0.6 else self.const((H, F))
            p = matmul(u, A)
            out = F
            if m.random() < 0.5:
                return ("bin", "*", ("num", 0.5), ("pow", ("bin", "-", call("dot", p, x), ("row", "y")), 2))
        p = act(m.choice(ACTS), p)
        c = self.param("c", (out,)) if m.random() < 0.6 else self.const((out,))
        return ("bin", "*", ("num", 0.5), ("pow", ("bin", "-", call("dot", p, c), ("row", "y")), 2))

    def head_outer(self) -> tuple:
        """outer(...) inside the loss, reduced to a scalar; or a low-rank term W + outer(a, b)."""
        m = self.m
        x, F = m.choice(self.inputs)
        R = self.dim()
        a = self.param("a", (R,))
        k = m.random()
        if k < 0.25:
            s = call("sum", matmul(call("outer", a, self.param("b", (F,))), x))
        elif k < 0.45:
            s = call("dot", matmul(call("outer", a, x), self.param("c", (F,))), self.leaf(R))
        elif k < 0.65:
            s = call("dot", matmul(self.param("c", (R,)), call("outer", a, x)), x)
        elif k < 0.85:                                   # a low-rank adapter
            W = self.param("W", (R, F)) if m.random() < 0.5 else self.const((R, F))
            b = self.param("b", (F,))
            M = ("bin", "+", W, call("outer", a, b))
            if m.random() < 0.5:                         # a 2-D let, read twice
                M = self.let("M", M, (R, F))
                self.mlets.append(Var(M[1], "let", (R, F)))
            h = self.let("h", act(m.choice(ACTS), matmul(M, x)), (R,))
            s = call("sum", h) if m.random() < 0.5 else call("max", h)
            if M[0] == "name":
                s = ("bin", "+", s, ("bin", "*", ("num", 0.1), call("dot", matmul(h, M), x)))
        else:                                            # elementwise with a matrix, then @
            M = self.param("M", (R, F))
            s = call("sum", matmul(("bin", "*", call("outer", a, x), M), x))
        return ("bin", "*", ("num", 0.5), ("pow", ("bin", "-", s, ("row", "y")), 2))

    def head_max(self) -> tuple:
        """max(v) of a product: ties (relu's zeros, equal rows), the first one wins."""
        m = self.m
        x, F = m.choice(self.inputs)
        R = self.dim()
        z = matmul(self.param("W", (R, F)), x)
        z = act(m.choice(["relu", "none", "tanh", "abs"]), z)
        k = m.random()
        if k < 0.5:
            return ("pow", ("bin", "-", call("max", z), ("row", "y")), 2)
        if k < 0.75:
            return ("bin", "-", call("logsumexp", z), call("max", z))
        return ("bin", "*", call("max", ("bin", "*", z, self.param("v", (R,)))), call("tanh", ("row", "y")))

    def regularizer(self) -> None:
        """A 2-D state the loss reads (a reference point, moved as an average), or a plain
        squared norm, reduced through `@` with a positive constant."""
        m = self.m
        mats = [v for v in self.params if len(v.shape) == 2]
        if not mats:
            return
        P = m.choice(mats)
        ones = self.const((P.shape[1],), 0.1, 1.0)
        d = ("name", P.name)
        if m.random() < 0.6:
            s = Var(self.g.fresh("S"), "state", P.shape, P.name)
            self.insert(Decl("state", s.name, P.shape, self.values(P.shape, -0.3, 0.3)))
            self.refs.append(s)
            d = ("bin", "-", d, ("name", s.name))
        self.terms.append(("bin", "*", ("num", 0.05), call("sum", matmul(("bin", "*", d, d), ones))))

    def finish(self, loss: tuple, prog: Program) -> tuple:
        """LossGen's loss plus this block's terms, and now and then a use to refuse."""
        m = self.m
        for t in self.terms:
            w = m.choice([1.0, 0.5, 0.1])
            loss = ("bin", "+", loss, t if w == 1.0 else ("bin", "*", ("num", w), t))
        if m.random() < 0.06:
            bad = self.bad_loss()
            if bad is not None:
                code, e = bad
                prog.expect = (code, expr_text(e))
                loss = ("bin", "+", loss, ("bin", "*", ("num", 0.01), e))
        return loss

    def bad_loss(self) -> tuple[str, tuple] | None:
        """A scalar the checker must refuse: (its code, it)."""
        m = self.m
        M = m.choice(self.matrices()) if self.matrices() else None
        k = m.randrange(6)
        if M is not None and k == 0:
            R, C = M.shape
            wrong = [e for e, L in self.vecs if L != C]
            if wrong:
                return "E0030", call("sum", matmul(("name", M.name), m.choice(wrong)))
        if M is not None and k == 1:
            return "E0030", call(m.choice(["logsumexp", "max", "sum"]), ("name", M.name))
        if M is not None and k == 2:
            return "E0030", call("sum", call("outer", ("name", M.name), ("row", "x")))
        if M is not None and k == 3:
            return "E0030", call("sum", matmul(("name", M.name), ("name", M.name)))
        if k == 4:
            return "E0041", call("sum", call("onehot", ("row", "lab"), ("int", 0)))
        return "E0030", call("sum", call("onehot", ("row", "x"), ("int", self.K)))

    # -- the update ------------------------------------------------------------------------------
    def state(self, p: Var, base: str) -> tuple:
        s = self.g.fresh(base)
        self.insert(Decl("state", s, p.shape, 0.0))
        return ("name", s)

    def power(self, k: int) -> tuple:
        while len(self.powers) <= k:
            name = self.g.fresh("q")
            self.insert(Decl("state", name, (), 1.0))
            self.powers.append(name)
        return ("name", self.powers[k])

    def optimizer(self, p: Var) -> list[Stmt]:
        """One param's optimizer, with states of its own: SGD, momentum, Nesterov, Adam
        (bias-corrected by the program's powers q), RMSProp."""
        m = self.m
        P, g = ("name", p.name), ("grad", p.name)
        out: list[Stmt] = []
        if m.random() < 0.4:
            name = self.g.fresh("g")
            out.append(Stmt("let", name, g))
            g = ("name", name)
        lr = ("num", m.choice([0.01, 0.05, 0.1, 0.003, 0.2]))
        kind = m.choice(["sgd", "momentum", "nesterov", "adam", "adam", "rmsprop"])
        if kind == "sgd":
            out.append(Stmt("assign", p.name, ("bin", "-", P, ("bin", "*", lr, g))))
        elif kind == "momentum":
            M = self.state(p, "mo")
            mu = ("num", m.choice([0.9, 0.5, 0.99]))
            out += [Stmt("assign", M[1], ("bin", "+", ("bin", "*", mu, M), g)),
                    Stmt("assign", p.name, ("bin", "-", P, ("bin", "*", lr, M)))]
        elif kind == "nesterov":
            M, old = self.state(p, "mo"), self.g.fresh("old")
            mu = m.choice([0.9, 0.5])
            out += [Stmt("let", old, M),
                    Stmt("assign", M[1], ("bin", "-", ("bin", "*", ("num", mu), M), ("bin", "*", lr, g))),
                    Stmt("assign", p.name, ("bin", "+", ("bin", "-", P, ("bin", "*", ("num", mu), ("name", old))),
                                            ("bin", "*", ("num", 1 + mu), M)))]
        elif kind == "adam":
            M, V = self.state(p, "mo"), self.state(p, "ve")
            q1, q2 = self.power(0), self.power(1)
            out += [Stmt("assign", M[1], ("bin", "+", ("bin", "*", ("num", 0.9), M), ("bin", "*", ("num", 0.1), g))),
                    Stmt("assign", V[1], ("bin", "+", ("bin", "*", ("num", 0.999), V),
                                          ("bin", "*", ("num", 0.001), ("bin", "*", g, g)))),
                    Stmt("assign", p.name, ("bin", "-", P, ("bin", "*", lr, ("bin", "/", ("bin", "/", M, ("bin", "-", ("num", 1.0), q1)),
                                                                                    ("bin", "+", call("sqrt", ("bin", "/", V, ("bin", "-", ("num", 1.0), q2))), ("num", 1e-8))))))]
        else:
            V = self.state(p, "ve")
            out += [Stmt("assign", V[1], ("bin", "+", ("bin", "*", ("num", 0.9), V), ("bin", "*", ("num", 0.1), ("bin", "*", g, g)))),
                    Stmt("assign", p.name, ("bin", "-", P, ("bin", "*", lr, ("bin", "/", g, call("sqrt", ("bin", "+", V, ("num", 1e-8)))))))]
        return out

    def update(self, prog: Program) -> None:
        """Each template param's optimizer, a block at a random place in UpdateGen's update;
        the powers and the reference states' averages, each at a random place (before or after
        what reads them); now and then a constant reduction (allowed) or a use to refuse."""
        m = self.m
        o = random.Random(self.g.seed ^ 0x0971)     # the library's optimizers: a stream of their own
        sched = random.Random(self.g.seed ^ 0x4747)  # and their hyperparameters of the update
        blocks = []
        for p in self.params:
            if p in self.free:
                continue
            if len(p.name) < 100 and o.random() < 0.3:
                prog.optimizers.append(library_optimizer(o, p.name, sched))
            else:
                blocks.append(self.optimizer(p))
        for k, name in enumerate(self.powers):
            beta = (0.9, 0.999)[k]
            blocks.append([Stmt("assign", name, ("bin", "*", ("name", name), ("num", beta)))])
        for s in self.refs:
            blocks.append([Stmt("assign", s.name, ("bin", "+", ("bin", "*", ("num", 0.9), ("name", s.name)),
                                                  ("bin", "*", ("num", 0.1), ("name", s.group))))])
        for b in blocks:
            at = m.randint(0, len(prog.update))
            prog.update[at:at] = b
        targets = [s for s in prog.update if s.kind == "assign" and s.name in {p.name for p in self.params}]
        if targets and m.random() < 0.15:
            self.constant_reduction(m.choice(targets))
        if targets and prog.expect is None and m.random() < 0.08:
            s = m.choice(targets)
            bad = self.bad_update(s)
            if bad is not None:
                prog.expect = ("E0050", expr_text(bad))
                s.expr = ("bin", "-", s.expr, ("bin", "*", ("num", 0.01), bad))

    def shape(self, name: str):
        return next(d.shape for d in self.decls if d.name == name)

    def constant_reduction(self, s: Stmt) -> None:
        """Reductions of constants are constants: allowed in the update."""
        m = self.m
        shape = self.shape(s.name)
        cv = [c for c in self.consts if len(c.shape) == 1]
        k = m.random()
        if cv and k < 0.5:
            e = call(m.choice(["max", "sum", "logsumexp"]), ("name", m.choice(cv).name))
        elif len(shape) == 1 and k < 0.8:
            e = call("onehot", ("num", float(m.randrange(shape[0] + 1))), ("int", shape[0]))
        elif len(shape) == 1:
            e = matmul(self.const((shape[0], 2)), self.const((2,)))
        else:
            e = call("outer", self.const((shape[0],)), self.const((shape[1],)))
        s.expr = ("bin", "+", s.expr, ("bin", "*", ("num", 0.001), e))

    def bad_update(self, s: Stmt) -> tuple | None:
        """A term of s's shape that reads every coordinate of a coordinate value (E0050): a
        product, logsumexp, onehot, or (since the update's own reductions are allowed, issue
        47) a reduction inside another's operand."""
        m = self.m
        shape = self.shape(s.name)
        g = ("grad", s.name)
        nested = lambda f, x: call(f, ("bin", "*", x, call("sum", x)))     # noqa: E731
        if len(shape) == 1:
            L = shape[0]
            k = m.randrange(5)
            if k == 0:
                f = m.choice(["max", "sum", "logsumexp"])
                return call(f, g) if f == "logsumexp" else nested(f, g)
            if k == 1:
                return call("onehot", ("name", self.powers[0]), ("int", L)) if self.powers \
                    else nested("max", ("name", s.name))
            C = self.const((L, L))
            return matmul(g, C) if k == 2 else matmul(C, ("name", s.name) if k == 3 else g)
        R, C = shape
        vecs = [p for p in self.params if p.shape == (C,)]
        if vecs:
            return call("outer", ("name", self.const((R,))[1]), ("grad", m.choice(vecs).name))
        return nested("sum", ("name", s.name))


SCHEDULES = ["min(1, (step + 1) / 3)", "exp(-0.1 * step)", "where(epoch < 2, 1, 0.5)",
             "0.5 * (1 + cos(0.3 * step))"]


def library_optimizer(o: random.Random, param: str, sched: random.Random | None = None) -> str:
    """`optimizer KIND(...) for PARAM`: one of the library's (alphac/types/optimizers.alpha),
    with hyperparameters that reach its branches (momentum, Nesterov, dampening, weight decay,
    lerp's weight at 0.5 and above, Adagrad's decay and initial accumulator); from `sched` (a
    stream of its own, issue 47) now and then a rate scheduled by `step` or `epoch` and a
    gradient scale, PARAM's clip factor by its gradient's norm."""
    kind = o.choice(["sgd", "adam", "adamw", "rmsprop", "adagrad"])
    h = [f"lr = {o.choice([0.01, 0.05, 0.1, 0.003])}"]
    if sched is not None and sched.random() < 0.3:
        h[0] += f" * {sched.choice(SCHEDULES)}"
    if sched is not None and sched.random() < 0.3:
        h.append(f"grad_scale = min(1, {sched.choice([0.1, 1.0])} / "
                 f"(sqrt(dot(grad({param}), grad({param}))) + 1e-6))")
    if kind == "sgd":
        mu = o.choice([0, 0.9, 0.5])
        h.append(f"momentum = {mu}")
        if mu and o.random() < 0.4:
            h.append("nesterov = true")
        elif mu and o.random() < 0.4:
            h.append("dampening = 0.1")
    elif kind in ("adam", "adamw"):
        h.append(f"betas = {o.choice(['(0.9, 0.999)', '(0.3, 0.99)', '(0.75, 0.875)'])}")
    elif kind == "rmsprop":
        h += [f"alpha = {o.choice([0.99, 0.9])}", f"momentum = {o.choice([0, 0.9])}"]
    else:
        h += [f"lr_decay = {o.choice([0, 0.01])}",
              f"initial_accumulator_value = {o.choice([0, 0.1])}"]
    if o.random() < 0.3:
        h.append(f"weight_decay = {o.choice([0, 0.01, 0.1])}")
    return f"optimizer {kind}({', '.join(h)}) for {param}"


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
    mr = random.Random(seed * 7919 + 2)             # the matrix programs' choices
    fr = random.Random(seed * 7919 + 3)             # wider hierarchies
    xr = random.Random(seed * 7919 + 4)             # meshes
    count = r.choice([1, 1, 2, 2, 3]) if count is None else count
    custom = Strategy("mine", sorted(r.sample(["params", "state", "gradients"], r.randint(1, 2))), [])
    used_custom = False
    for d in range(count):
        items = []
        owners = r.randint(1, 4)
        if prog.contract == "exact_sum" and mr.random() < 0.5:
            owners = mr.randint(1, 12)              # any owner count gives the same bits
        star = r.random() < 0.65 or owners == 1
        if star:
            items += [f"roles coordinator, owner[{owners}]", "topology star(coordinator)"]
        else:
            owners = max(owners, 2)
            if fr.random() < 0.2:                   # wider: uneven index nodes for fleet builds
                owners = fr.randint(5, 9)
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
            flat = [g for g in lr.groups if len(g.shape) == 2]
            if prog.matrices and flat and mr.random() < 0.6:
                grp = mr.choice(flat)                # a 2-D group, cut by flat ranges
            cuts = split(grp.size, owners, r)
            name = f"{r.choice(grp.members)}: "
            if prog.matrices and len({g.size for g in lr.groups}) == 1 and mr.random() < 0.4:
                name = ""                           # one set of ranges for every group
            items.append(f"partition {name}" + ranges_text("owner", cuts, r, False))
        elif partitions and r.random() < 0.5:
            items.append("partition even")
        if aarch64 and r.random() < 0.35:
            picks = sorted(r.sample(range(owners), r.randint(1, owners)))
            roles = [f"owner[{k}]" for k in picks]
            if star and r.random() < 0.3:
                roles.append("coordinator")
            items.append("target " + ", ".join(roles) + " = aarch64")
        else:
            picks = []
        rest = [k for k in range(owners) if k not in picks]
        if rest and xr.random() < 0.3:                      # owners at the AVX2 or AVX-512 level
            level = "x86_64-v4" if xr.random() < 0.5 and host_runs("x86_64-v4") else "x86_64-v3"
            items.append("target " + ", ".join(f"owner[{k}]" for k in
                                               sorted(xr.sample(rest, xr.randint(1, len(rest))))) + f" = {level}")
        scatter = "gradients" in (custom.partition if strat == custom.name else
                                  {"zero2": ["gradients"], "zero3": ["gradients"]}.get(strat, []))
        if star and owners > 1 and prog.contract != "exact_sum" and xr.random() < 0.35 and (
                scatter or xr.random() < 0.1):             # now and then one E0118 refuses
            items[1] = "topology mesh(coordinator)"
        prog.deployments.append(Deployment(f"d{d}", items))
    if used_custom:
        prog.strategies.append(custom)
