"""The contract's functions over 2, 4 or 8 binary64 lanes (AArch64's f64x2, x86_64-v3's f64x4,
v4's f64x8), in the runtime language, from the same fast-path text as the scalar function.

`lane_source(name, lanes)` writes `fn rt_math_<name>_w4(p: i64 writes 32)` (or `_w2`, 16 bytes,
`_w8`, 64 bytes):
the `lanes` binary64 at p replaced by the function's values. The function's fast path
(`FAST[name]`: the condition under which it applies and the path itself, both from
alphac/math/functions.py) is rendered by `LaneSource`, a backend of the staging language whose
values, binary64 and integer alike, are vectors (f64x2, f64x4, f64x8): every `+ - * /` one vector
operation, each lane exactly the scalar operation; the integer operations on the lanes' 64 bits
in vector registers (qadd ... qshr: alphac.lower.rt), with sar, multiplication by a constant,
eq, ult and slt made of them (`bits` and `float` are the vector itself; i2f is 2^52 1.5 + i
minus 2^52 1.5, kept only in lanes where |i| < 2^51); a table word at each lane's index by
NEON's two lane loads at 2 lanes, AVX2's gather at 4, AVX-512F's at 8; `cond` computes both
branches and picks each lane's bits. Operations on constants are folded (Eval's own table);
a vector constant is read once, where first used. Then each lane whose condition holds and
whose rounding test passed takes the vector's value; every other lane (special values, the
ranges the fast path does not take, failed rounding tests) calls the scalar `rt_math_<name>`
on its input. So every lane's bits are the scalar function's bits by construction: the same
operations in the same order where the fast path decides, the scalar function itself elsewhere
(tests/test_math_lanes.py checks it lane by lane); tanh's lanes take expm1's 2^-79 path where
the scalar takes exp's lean one (|x| >= 1/8), and a rounding test that passes leaves only the
correct rounding to either.

Requires: the scalar `rt_math_<name>` and its tables in the same program (alphac.math.rt_source),
a target with CPU_NEON (lanes = 2), CPU_AVX2 (lanes = 4) or CPU_AVX512 (lanes = 8). Guarantees: the text, nothing run.
"""
from __future__ import annotations

import re
import struct

from alphac.math import functions as F
from alphac.math.dsl import EVAL_OPS, M64, OPS, RT_OPS, Backend, Table, Val
from alphac.math.functions import MAGIC, SIGN

FAST = {"exp": (lambda m, x: (x.bits() & F.ABS).ult(F.FAST_EXP_MAX), F._exp_fast),
        "tanh": (lambda m, x: F._tanh_go(m, x.bits() & F.ABS),
                 lambda m, x: F._tanh_signed(m, x.bits() & F.ABS, x.bits() & F.SIGN, lean=False)),
        "log": (lambda m, x: F._log_go_lanes(m, x.bits()), lambda m, x: F._log_lean(m, x.bits())),
        "log1p": (lambda m, x: F._log1p_go_lanes(m, x.bits(), x.bits() & F.ABS),
                  lambda m, x: F._log1p_fast(m, x, x.bits() & F.ABS)),
        "expm1": (lambda m, x: F._expm1_go(m, x.bits(), x.bits() & F.ABS),
                  lambda m, x: F.rounded(m, *F._expm1_fast(m, x)))}
VOCAB = {2: ("loadv", "storev"), 4: ("loadw", "storew"), 8: ("loadz", "storez")}
SCRATCH = "rt_math_lanes"
BRANCH = 40          # a cond whose branches are this long runs each only where a lane takes it


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _lit(v: int) -> str:
    v &= M64
    return str(v - (1 << 64)) if v >> 63 else str(v)


class LaneSource(Backend):
    """Values: a constant is a Python float or int; any other value, binary64 or integer, is a
    vector `let` (f64x4 or f64x8: the integer ops read and write the lanes' 64 bits, so `bits`
    and `float` are the same vector). `guards`: 0/1 vectors that must hold in a lane for its
    value to stand (i2f's range)."""
    free_bits = True

    def __init__(self, lanes: int):
        self.w = lanes
        self.vload, self.vstore = VOCAB[lanes]
        self.lines: list[str] = []
        self.named: dict[str, str] = {}           # the constants' `let`s
        self.n = 0
        self.consts: dict[str, tuple] = {}        # vector constant table -> (lanes, the bits)
        self.offset: dict[str, tuple] = {}        # a vector -> (the vector, c) it is c plus
        self.guards: list[Val] = []

    def let(self, expr: str, once: bool = False) -> str:
        """A new `let` of expr; with `once`, the first one's (a constant read where first used)."""
        if once and expr in self.named:
            return self.named[expr]
        self.n += 1
        self.lines.append(f"    let u{self.n} = {expr};")
        if once:
            self.named[expr] = f"u{self.n}"
        return f"u{self.n}"

    def f(self, x: float) -> Val:
        return Val(self, "f", float(x))

    def i(self, v: int) -> Val:
        return Val(self, "i", v & M64)

    def vector(self, a: Val) -> str:
        if isinstance(a.v, str):
            return a.v
        bits = _bits(a.v) if isinstance(a.v, float) else a.v & M64
        name = f"rt_math_k{self.w}_{bits:016x}"
        self.consts[name] = (self.w, bits)
        return self.let(f"{self.vload}({name})", once=True)

    def q(self, name: str, *a) -> Val:
        """One integer operation on the lanes (qadd ... qshr: alphac.lower.rt)."""
        if name in ("qadd", "qand", "qor", "qxor") and not isinstance(a[0].v, str):
            a = a[::-1]                          # the constant second: read from its slot
        args = [self.vector(v) if isinstance(v, Val) else str(v) for v in a]
        return Val(self, "i", self.let(f"{name}({', '.join(args)})"))

    def op(self, name: str, *a: Val) -> Val:
        kind = OPS[name].result
        if all(isinstance(v.v, (int, float)) for v in a):       # folded, as Eval computes it
            r = EVAL_OPS[name](*(v.v for v in a))
            return self.f(r) if kind == "f" else self.i(r)
        if name in ("bits", "float"):                           # the same 64 bits
            return Val(self, kind, a[0].v)
        if name == "i2f":             # 2^52 1.5 + i, exact for |i| < 2^51 (a guard); minus 2^52 1.5
            self.guards.append((a[0] + (1 << 51)).ult(1 << 52))
            return self.float_(a[0] + _bits(MAGIC)) - self.f(MAGIC)
        if name in ("fadd", "fmul") and not isinstance(a[0].v, str):
            a = a[::-1]                          # (exact either way: the same IEEE operation)
        if OPS[name].args[0] == "f" and kind == "f":
            text = "sqrt{}({})".format(self.vload[-1], self.vector(a[0])) \
                if name == "fsqrt" else RT_OPS[name].format(*(self.vector(v) for v in a))
            return Val(self, "f", self.let(text))
        if OPS[name].args[0] == "f":
            raise TypeError(f"{name}: no lane form (compare binary64 through `bits`)")
        x, y = a
        if name in ("add", "sub", "and", "or", "xor"):
            if name == "and" and 0 in (x.v, y.v):
                return self.i(0)
            if name in ("add", "sub", "or", "xor") and y.v == 0:
                return x
            r = self.q("q" + name, x, y)
            if name == "add" and isinstance(y.v, int):
                self.offset[r.v] = (x.v, y.v)
            return r
        if name in ("shl", "shr", "sar", "mul") and not isinstance(y.v, int):
            raise TypeError(f"{name}: no lane form by a lane-varying amount")
        if name in ("shl", "shr"):
            return self.q("q" + name, x, y.v) if y.v else x
        if name == "sar":                        # ((x ^ 2^63) >> n) - 2^(63 - n)
            return self.q("qshr", x ^ SIGN, y.v) - (SIGN >> y.v) if y.v else x
        if name == "mul":                        # a constant: the sum of x's shifts by its bits
            terms = [x << k for k in range(64) if y.v >> k & 1]
            return sum(terms[1:], terms[0]) if terms else self.i(0)
        if name == "eq":                         # d = x ^ y: 1 - (d | -d) >> 63
            d = x ^ y
            return ((d | (self.i(0) - d)) >> 63) ^ 1
        if name == "ult":                        # the borrow of x - y (Hacker's Delight 2-12)
            return (((x ^ M64) & y) | ((x ^ y ^ M64) & (x - y))) >> 63
        if name == "slt":
            return (x ^ SIGN).ult(y ^ SIGN)
        raise TypeError(f"{name}: no lane form")

    def gather(self, table: Table, index, kind: str) -> Val:
        """Each lane's table word: gatherv, gatherw or gatherz (NEON's lane loads, AVX2's and
        AVX-512F's gathers); i + c read as i's, the table's address c words on."""
        at, off = self.offset.get(index.v, (index.v, 0))
        return Val(self, kind, self.let(f"gather{self.vload[-1]}(rt_math_{table.name} + {8 * off}, {at})"))

    def load(self, table: Table, index) -> Val:
        if isinstance(index, int) or isinstance(index.v, int):
            return self.i(table.words[index if isinstance(index, int) else index.v])
        return self.gather(table, index, "i")

    def loadf(self, table: Table, index) -> Val:
        if isinstance(index, int) or isinstance(index.v, int):
            return self.f(struct.unpack("<d", struct.pack("<Q", self.load(table, index).v))[0])
        return self.gather(table, index, "f")

    def branch(self, body) -> tuple[list[str], tuple]:
        """body()'s lines apart and its values (the constants it reads first are its own)."""
        saved, guards = (self.lines, dict(self.named), dict(self.offset)), len(self.guards)
        self.lines = []
        out = body()
        ok = self.i(1)                           # its guards, a value of its own (see cond)
        for g in self.guards[guards:]:
            ok = ok & g
        del self.guards[guards:]
        out = tuple(out) + (ok,)
        lines, self.lines = self.lines, saved[0]
        self.named, self.offset = saved[1], saved[2]
        return lines, out

    def cond(self, c: Val, then, else_) -> tuple:
        """Both branches (a fast path's branches only compute: no stores, no calls), then each
        lane's result chosen by its condition: y ^ ((x ^ y) & -c). Where both branches are long
        (BRANCH lines), each runs only if some lane takes it (the lanes of c read through the
        scratch), its values in variables declared before. A branch's guards (i2f's) are a value
        it returns, chosen like the others."""
        if isinstance(c.v, int):
            return then() if c.v else else_()
        (la, a), (lb, b) = self.branch(then), self.branch(else_)
        if min(len(la), len(lb)) < BRANCH:
            self.lines += la + lb
        else:
            a, b = self.guarded(c, la, a, lb, b)
        mask = self.i(0) - c
        out = tuple(Val(self, x.kind, self.q("qxor", y, self.q("qand", self.q("qxor", x, y), mask)).v)
                    if (x.v, x.kind) != (y.v, y.kind) else x for x, y in zip(a, b))
        if out[-1].v != 1:
            self.guards.append(out[-1])          # the taken branch's guards
        return out[:-1]

    def guarded(self, c: Val, la, a, lb, b) -> tuple[tuple, tuple]:
        s = self.let(SCRATCH)
        self.lines.append(f"    {self.vstore}({s} + {8 * self.w}, {c.v});")
        lanes = [f"load64({s} + {8 * (self.w + k)})" for k in range(self.w)]
        out = []
        for test, lines, vals in ((" | ".join(lanes) + ") != 0", la, a), (" & ".join(lanes) + ") == 0", lb, b)):
            names = [self.let(c.v) for _ in vals]                  # (any vector: the type)
            texts = [self.vector(v) for v in vals]                 # (a constant's read: outside)
            self.lines.append(f"    if ({test} {{")
            self.lines += ["    " + line for line in lines]
            self.lines += [f"        {n} = {t};" for n, t in zip(names, texts)]
            self.lines.append("    }")
            out.append(tuple(Val(self, v.kind, n) for n, v in zip(names, vals)))
        return out[0], out[1]


def lane_name(name: str, lanes: int) -> str:
    return f"rt_math_{name}_w{lanes}"


def _live(lines: list[str], results: list[Val]) -> list[str]:
    """The lines without the `let`s nothing reads (every `let` here is pure: an operation or a
    load; an index's `i + c` whose lanes are read as i's, say)."""
    used, kept = {r.v for r in results if isinstance(r.v, str)}, []
    for line in reversed(lines):
        words = set(re.findall(r"\bu\d+\b", line))
        head = re.match(r"    let (u\d+) = ", line)
        if head and head.group(1) not in used:
            continue
        used |= words
        kept.append(line)
    return kept[::-1]


def _lane_fn(name: str, lanes: int) -> tuple[list[str], dict[str, tuple]]:
    """`fn rt_math_<name>_w<lanes>`'s lines and the vector constants it reads (module doc)."""
    go, fast = FAST[name]
    m = LaneSource(lanes)
    x = Val(m, "f", m.let(f"{m.vload}(p)"))
    take = go(m, x)
    ok, v = fast(m, x)
    for g in [ok] + m.guards:
        take = take & g
    out = [f"fn {lane_name(name, lanes)}(p: i64 writes {8 * lanes}) {{"] + _live(m.lines, [v, take])
    out.append(f"    {m.vstore}({SCRATCH}, {m.vector(v)});")
    out.append(f"    {m.vstore}({SCRATCH} + {8 * lanes}, {m.vector(take)});")
    end = " wide_end();" if lanes > 2 else ""            # (f64x2 needs no transition)
    if end:
        out.append(f"   {end}")
    every = " & ".join(f"load64({SCRATCH} + {8 * (lanes + k)})" for k in range(lanes))
    out.append(f"    if ({every}) != 0 {{ {m.vstore}(p, {m.vload}({SCRATCH}));{end} return; }}")
    for k in range(lanes):
        out.append(f"    if load64({SCRATCH} + {8 * (lanes + k)}) != 0 {{ storef(p + {8 * k}, loadf({SCRATCH} + {8 * k})); }}"
                   f" else {{ storef(p + {8 * k}, rt_math_{name}(loadf(p + {8 * k}))); }}")
    return out + ["}"], m.consts


def lane_source(names, widest: int) -> str:
    """The vector functions of `names` at 2 lanes where `widest` is 2 (AArch64's NEON), at 4,
    and at 8 too where `widest` is 8, with their vector constants, the scratch and
    `rt_math_arg` (64 bytes: where a caller puts the lanes)."""
    fns, consts = [], {}
    for name in sorted(set(names)):
        for lanes in (2,) if widest == 2 else (4, 8)[:widest // 4]:
            lines, used = _lane_fn(name, lanes)
            fns += lines
            consts.update(used)
    data = [f"data {t}: [i64; {w}] = [{', '.join([_lit(b)] * w)}];" for t, (w, b) in sorted(consts.items())]
    return "\n".join(data + [f"global {SCRATCH}: [i64; 16];", "global rt_math_arg: [f64; 8];"] + fns) + "\n"
