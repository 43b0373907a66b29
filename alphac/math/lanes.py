"""The contract's functions over 4 or 8 binary64 lanes (x86_64-v3's f64x4, v4's f64x8), in the
runtime language, from the same fast-path text as the scalar function.

`lane_source(name, lanes)` writes `fn rt_math_<name>_w4(p: i64 writes 32)` (or `_w8`, 64 bytes):
the `lanes` binary64 at p replaced by the function's values. The function's fast path
(`FAST[name]`: the condition under which it applies and the path itself, both from
alphac/math/functions.py) is rendered by `LaneSource`, a backend of the staging language whose
binary64 values are vectors (every `+ - * /` one vector operation, each lane exactly the scalar
operation) and whose integers are one scalar per lane (the exponent and table-index arithmetic);
`bits`, `float`, table loads at a lane's index and `cond` (both branches computed, each lane's
result chosen by its condition) pass through the 128-byte scratch `rt_math_lanes`. Operations on constants are folded (Eval's own table), so the tables' constant
words become vector constants. Then each lane
whose condition holds and whose rounding test passed takes the vector's value; every other lane
(special values, the ranges the fast path does not take, failed rounding tests) calls the scalar
`rt_math_<name>` on its input. So every lane's bits are the scalar function's bits by
construction: the same operations in the same order where the fast path decides, the scalar
function itself elsewhere (tests/test_math_lanes.py checks it lane by lane).

Requires: the scalar `rt_math_<name>` and its tables in the same program (alphac.math.rt_source),
a target with CPU_AVX2 (lanes = 4) or CPU_AVX512 (lanes = 8). Guarantees: the text, nothing run.
"""
from __future__ import annotations

import struct

from alphac.math import functions as F
from alphac.math.dsl import EVAL_OPS, M64, OPS, RT_OPS, Backend, Table, Val

FAST = {"exp": (lambda m, x: (x.bits() & F.ABS).ult(F.FAST_EXP_MAX), F._exp_fast),
        "tanh": (lambda m, x: F._tanh_go(m, x.bits() & F.ABS),
                 lambda m, x: F._tanh_signed(m, x.bits() & F.ABS, x.bits() & F.SIGN))}
VOCAB = {4: ("loadw", "storew"), 8: ("loadz", "storez")}
SCRATCH = "rt_math_lanes"


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _lit(v: int) -> str:
    v &= M64
    return str(v - (1 << 64)) if v >> 63 else str(v)


class LaneSource(Backend):
    """Values: a binary64 is a Python float (a constant) or a vector `let`; an integer is a
    Python int (a constant) or a tuple of one scalar `let` per lane."""

    def __init__(self, lanes: int):
        self.w = lanes
        self.vload, self.vstore = VOCAB[lanes]
        self.lines: list[str] = []
        self.n = 0
        self.consts: dict[str, tuple] = {}        # vector constant table -> (lanes, the bits)
        self.lanes_of: dict[str, tuple] = {}      # a vector's `bits`, lane by lane

    def let(self, expr: str) -> str:
        self.n += 1
        self.lines.append(f"    let u{self.n} = {expr};")
        return f"u{self.n}"

    def f(self, x: float) -> Val:
        return Val(self, "f", float(x))

    def i(self, v: int) -> Val:
        return Val(self, "i", v & M64)

    def vector(self, a: Val) -> str:
        if isinstance(a.v, str):
            return a.v
        name = f"rt_math_k{self.w}_{_bits(a.v):016x}"
        self.consts[name] = (self.w, _bits(a.v))
        return f"{self.vload}({name})"

    def lane(self, a: Val, k: int) -> str:
        return _lit(a.v) if isinstance(a.v, int) else a.v[k]

    def from_lanes(self, exprs: list[str], store: str) -> Val:
        for k, e in enumerate(exprs):
            self.lines.append(f"    {store}({SCRATCH} + {8 * k}, {e});")
        return Val(self, "f", self.let(f"{self.vload}({SCRATCH})"))

    def op(self, name: str, *a: Val) -> Val:
        kind = OPS[name].result
        if all(isinstance(v.v, (int, float)) for v in a):       # folded, as Eval computes it
            r = EVAL_OPS[name](*(v.v for v in a))
            return self.f(r) if kind == "f" else self.i(r)
        if name == "bits":                       # once per vector (its lets are never reassigned)
            if a[0].v not in self.lanes_of:
                self.lines.append(f"    {self.vstore}({SCRATCH}, {self.vector(a[0])});")
                self.lanes_of[a[0].v] = tuple(self.let(f"load64({SCRATCH} + {8 * k})") for k in range(self.w))
            return Val(self, "i", self.lanes_of[a[0].v])
        if name in ("float", "i2f"):
            wrap = "{}" if name == "float" else "i2f({})"
            return self.from_lanes([wrap.format(self.lane(a[0], k)) for k in range(self.w)],
                                   "store64" if name == "float" else "storef")
        if OPS[name].args[0] == "f" and kind == "f":
            text = "sqrt{}({})".format("w" if self.w == 4 else "z", self.vector(a[0])) \
                if name == "fsqrt" else RT_OPS[name].format(*(self.vector(v) for v in a))
            return Val(self, "f", self.let(text))
        if OPS[name].args[0] == "f":
            raise TypeError(f"{name}: no lane form (compare binary64 through `bits`)")
        return Val(self, "i", tuple(self.let("(" + RT_OPS[name].format(*(self.lane(v, k) for v in a)) + ")")
                                    for k in range(self.w)))

    def load(self, table: Table, index) -> Val:
        if isinstance(index, int) or isinstance(index.v, int):
            return self.i(table.words[index if isinstance(index, int) else index.v])
        return Val(self, "i", tuple(self.let(f"load64(rt_math_{table.name} + 8 * ({index.v[k]}))")
                                    for k in range(self.w)))

    def loadf(self, table: Table, index) -> Val:
        if isinstance(index, int) or isinstance(index.v, int):
            return self.f(struct.unpack("<d", struct.pack("<Q", self.load(table, index).v))[0])
        return self.from_lanes([f"loadf(rt_math_{table.name} + 8 * ({index.v[k]}))"
                                for k in range(self.w)], "storef")

    def cond(self, c: Val, then, else_) -> tuple:
        """Both branches on every lane (a fast path's branches only compute: no stores, no
        calls), then each lane's result chosen by its condition."""
        if isinstance(c.v, int):
            return then() if c.v else else_()
        a, b = then(), else_()
        out = []
        for x, y in zip(a, b):
            if x.kind == "f":
                self.lines.append(f"    {self.vstore}({SCRATCH} + {8 * self.w}, {self.vector(y)});")
                self.lines.append(f"    {self.vstore}({SCRATCH}, {self.vector(x)});")
                for k in range(self.w):
                    self.lines.append(f"    if {c.v[k]} == 0 {{ store64({SCRATCH} + {8 * k}, "
                                      f"load64({SCRATCH} + {8 * (self.w + k)})); }}")
                out.append(Val(self, "f", self.let(f"{self.vload}({SCRATCH})")))
            else:
                picked = tuple(self.let(self.lane(y, k)) for k in range(self.w))
                for k in range(self.w):
                    self.lines.append(f"    if {c.v[k]} != 0 {{ {picked[k]} = {self.lane(x, k)}; }}")
                out.append(Val(self, "i", picked))
        return tuple(out)


def lane_name(name: str, lanes: int) -> str:
    return f"rt_math_{name}_w{lanes}"


def _lane_fn(name: str, lanes: int) -> tuple[list[str], dict[str, tuple]]:
    """`fn rt_math_<name>_w<lanes>`'s lines and the vector constants it reads (module doc)."""
    go, fast = FAST[name]
    m = LaneSource(lanes)
    x = Val(m, "f", m.let(f"{m.vload}(p)"))
    take = go(m, x)
    ok, v = fast(m, x)
    take = take & ok
    out = [f"fn {lane_name(name, lanes)}(p: i64 writes {8 * lanes}) {{"] + m.lines
    out.append(f"    {m.vstore}({SCRATCH}, {m.vector(v)});")
    out.append("    wide_end();")
    for k in range(lanes):
        out.append(f"    if {m.lane(take, k)} != 0 {{ storef(p + {8 * k}, loadf({SCRATCH} + {8 * k})); }}"
                   f" else {{ storef(p + {8 * k}, rt_math_{name}(loadf(p + {8 * k}))); }}")
    return out + ["}"], m.consts


def lane_source(names, widest: int) -> str:
    """The vector functions of `names` at 4 lanes, and at 8 too where `widest` is 8, with their
    vector constants, the scratch and `rt_math_arg` (64 bytes: where a caller puts the lanes)."""
    fns, consts = [], {}
    for name in sorted(set(names)):
        for lanes in (4, 8)[:widest // 4]:
            lines, used = _lane_fn(name, lanes)
            fns += lines
            consts.update(used)
    data = [f"data {t}: [i64; {w}] = [{', '.join([_lit(b)] * w)}];" for t, (w, b) in sorted(consts.items())]
    return "\n".join(data + [f"global {SCRATCH}: [i64; 16];", "global rt_math_arg: [f64; 8];"] + fns) + "\n"
