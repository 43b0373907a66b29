"""The staging language the contract's functions are written in once, and its backends.

An algorithm (alphac/math/functions.py) is a Python function of a backend `m` and `Val`s: it
calls `m.f(x)` and `m.i(v)` for constants, uses operators on values, and `m.cond(c, then,
else_)` for control flow (each branch a function returning a tuple of values of the same
kinds; `m.first(go, fast, rest)` is Ziv's two steps, which RtSource writes as an early
return). The same algorithm text then runs four ways (two backends here, two in their modules):

    Eval      computes now, in Python: binary64 through alphac.math.binary64, integers as
              unsigned 64-bit; the reference interpreter's elementary functions
    RtSource  writes runtime-language source (alphac/lower/rt.py), one `fn` per function,
              which both ISAs lower like the rest of the runtime
    VecEval   computes now on numpy arrays, each element as Eval would (alphac/math/vec.py)
    PtxSource writes PTX instructions into a kernel (alphac/ptx/mathfn.py)

Values have a kind: "f" (binary64) or "i" (64-bit integer). Operators:
    f: + - * / and -x (one IEEE operation each, round to nearest even); m.sqrt(x)
    i: + - * & | ^ (modulo 2^64), << and >> (logical) by 0..63, a.sar(n), a.umulh(b) (the
       high 64 bits of the unsigned product), a.ult(b), a.slt(b), a.eq(b) (1 or 0)
    a.fgt(b): 1 if a > b as binary64 (0 when unordered); a.bits() and m.float_(i) reinterpret;
    m.i2f(i) converts a signed integer exactly-rounded
    m.load(table, index): word `index` of a constant table of 64-bit words; m.loadf(table,
    index) the same word as a binary64
Each operator is one operation of `OPS`, the op set's one table (its operand and result kinds);
every backend renders it through a table keyed by the same names (`EVAL_OPS` and `RT_OPS`
here, `vec.LANE_OPS`, `alphac.ptx.mathfn.PTX_OPS`), and tests/test_math_ops.py checks that
each covers `OPS` exactly and that the operators produce no other operation.

Requires alphac.math.binary64 (the one definition of + - * / sqrt). Guarantees: Eval checks what the other backends assume (shift amounts in
0..63, branch values of one kind), so an algorithm that runs under Eval is well formed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple

from alphac.math import binary64

M64 = (1 << 64) - 1


class Op(NamedTuple):
    args: str                        # the operands' kinds, in order ("ff": two binary64 values)
    result: str                      # the result's kind


# The staging language's operations: the one list every backend's table covers.
OPS: dict[str, Op] = {
    **dict.fromkeys(("fadd", "fsub", "fmul", "fdiv"), Op("ff", "f")),
    "fneg": Op("f", "f"), "fsqrt": Op("f", "f"),
    **dict.fromkeys(("add", "sub", "mul", "umulh", "and", "or", "xor"), Op("ii", "i")),
    **dict.fromkeys(("shl", "shr", "sar"), Op("ii", "i")),       # the amount in 0..63
    **dict.fromkeys(("ult", "slt", "eq"), Op("ii", "i")),        # 1 or 0
    "fgt": Op("ff", "i"),                                        # 1 or 0; 0 when unordered
    "bits": Op("f", "i"), "float": Op("i", "f"),                 # reinterpret the 64 bits
    "i2f": Op("i", "f"),                                         # a signed integer, rounded
}


@dataclass(frozen=True)
class Table:
    """Constant 64-bit words, by name (one data object per program)."""
    name: str
    words: tuple[int, ...]


class Val:
    __slots__ = ("m", "kind", "v")

    def __init__(self, m, kind: str, v):
        self.m, self.kind, self.v = m, kind, v

    def _other(self, b) -> "Val":
        if isinstance(b, Val):
            if b.kind != self.kind:
                raise TypeError(f"{self.kind} value with {b.kind} value")
            return b
        return self.m.f(b) if self.kind == "f" else self.m.i(b)

    def _bin(self, op_f: str | None, op_i: str | None, b) -> "Val":
        b = self._other(b)
        op = op_f if self.kind == "f" else op_i
        if op is None:
            raise TypeError(f"no {op_f or op_i} on {self.kind} values")
        return self.m.op(op, self, b)

    def __add__(self, b): return self._bin("fadd", "add", b)
    def __sub__(self, b): return self._bin("fsub", "sub", b)
    def __mul__(self, b): return self._bin("fmul", "mul", b)
    def __truediv__(self, b): return self._bin("fdiv", None, b)
    def __and__(self, b): return self._bin(None, "and", b)
    def __or__(self, b): return self._bin(None, "or", b)
    def __xor__(self, b): return self._bin(None, "xor", b)
    def __lshift__(self, n): return self._shift("shl", n)
    def __rshift__(self, n): return self._shift("shr", n)
    def __radd__(self, b): return self._other(b) + self
    def __rsub__(self, b): return self._other(b) - self
    def __rmul__(self, b): return self._other(b) * self

    def __neg__(self):
        return self.m.op("fneg", self) if self.kind == "f" else self.m.i(0) - self

    def _shift(self, op: str, n) -> "Val":
        assert self.kind == "i"
        return self.m.op(op, self, n if isinstance(n, Val) else self.m.i(n))

    def sar(self, n): return self._shift("sar", n)
    def umulh(self, b): return self.m.op("umulh", self, self._other(b))
    def ult(self, b): return self.m.op("ult", self, self._other(b))
    def slt(self, b): return self.m.op("slt", self, self._other(b))
    def eq(self, b): return self.m.op("eq", self, self._other(b))
    def fgt(self, b): return self.m.op("fgt", self, self._other(b))
    def bits(self): return self.m.op("bits", self)


# -- evaluation -------------------------------------------------------------------------------
def _f(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits & M64))[0]


def _b(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _shift(name: str, op: Callable[[int, int], int]) -> Callable[[int, int], int]:
    def run(x: int, n: int) -> int:
        if not 0 <= n < 64:
            raise ValueError(f"{name} by {n}: shift amounts are 0..63")
        return op(x, n)
    return run


def _signed(x: int) -> int:
    return x - (x >> 63 << 64)


# Each operation on Python values (binary64 as float, integers as unsigned 64-bit ints); Eval
# wraps the result to its kind (an integer modulo 2^64).
EVAL_OPS: dict[str, Callable] = {
    **{name: binary64.BINARY[name[1:]] for name in ("fadd", "fsub", "fmul", "fdiv")},
    "fneg": binary64.neg, "fsqrt": binary64.sqrt,
    "add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
    "umulh": lambda p, q: (p * q) >> 64, "and": lambda p, q: p & q,
    "or": lambda p, q: p | q, "xor": lambda p, q: p ^ q,
    "shl": _shift("shl", lambda x, n: x << n), "shr": _shift("shr", lambda x, n: x >> n),
    "sar": _shift("sar", lambda x, n: _signed(x) >> n),
    "ult": lambda p, q: int(p < q), "eq": lambda p, q: int(p == q),
    "slt": lambda p, q: int(_signed(p) < _signed(q)), "fgt": lambda p, q: int(p > q),
    "bits": _b, "float": _f, "i2f": lambda p: float(_signed(p)),
}


class Backend:
    """What every backend shares: the operations written as `op`, and `outline` (a subroutine
    the algorithm names: inline unless the backend writes it once and calls it)."""
    free_bits = False           # bits/float cost nothing (vector lanes): split by a mask there

    def sqrt(self, a: Val) -> Val:
        return self.op("fsqrt", a)

    def float_(self, a: Val) -> Val:
        return self.op("float", a)

    def i2f(self, a: Val) -> Val:
        return self.op("i2f", a)

    def outline(self, name: str, body: Callable, args: tuple, nout: int) -> tuple:
        return body(self, *args)

    def first(self, go: Val, fast: Callable[[], tuple], rest: Callable[[], Val]) -> Val:
        """fast() -> (ok, value) where `go`; its value where ok, else rest() (a function's
        special values and accurate path, written once)."""
        ok, v = self.cond(go, fast, lambda: (self.i(0), self.f(0.0)))
        return self.cond(ok, lambda: (v,), lambda: (rest(),))[0]


class Eval(Backend):
    """Runs an algorithm now. `ops` counts the operations executed (for the benchmarks)."""

    def __init__(self):
        self.ops = 0

    def f(self, x: float) -> Val:
        return Val(self, "f", float(x))

    def i(self, v: int) -> Val:
        return Val(self, "i", v & M64)

    def arg(self, kind: str, value) -> Val:
        return self.f(value) if kind == "f" else self.i(value)

    def op(self, name: str, *a: Val) -> Val:
        self.ops += 1
        r = EVAL_OPS[name](*(v.v for v in a))
        return self.f(r) if OPS[name].result == "f" else self.i(r)

    def load(self, table: Table, index) -> Val:
        self.ops += 1
        k = index.v if isinstance(index, Val) else index
        return self.i(table.words[k])

    def loadf(self, table: Table, index) -> Val:
        return self.f(_f(self.load(table, index).v))

    def cond(self, c: Val, then: Callable[[], tuple], else_: Callable[[], tuple]) -> tuple:
        self.ops += 1
        out = then() if c.v else else_()
        return out


# -- runtime-language source ----------------------------------------------------------------
RT_OPS: dict[str, str] = {"fadd": "{0} + {1}", "fsub": "{0} - {1}", "fmul": "{0} * {1}", "fdiv": "{0} / {1}",
          "fneg": "-{0}", "fsqrt": "sqrt({0})", "add": "{0} + {1}", "sub": "{0} - {1}",
          "mul": "{0} * {1}", "umulh": "umulh({0}, {1})", "and": "{0} & {1}", "or": "{0} | {1}",
          "xor": "{0} ^ {1}", "shl": "{0} << {1}", "shr": "{0} >> {1}", "sar": "sar({0}, {1})",
          "ult": "ult({0}, {1})", "slt": "{0} < {1}", "eq": "{0} == {1}", "fgt": "fgt({0}, {1})",
          "bits": "f2bits({0})", "float": "bits2f({0})", "i2f": "i2f({0})"}


class RtSource(Backend):
    """Writes an algorithm as runtime-language statements (straight-line lets, if/else)."""
    returns = True                               # `first` may return (not in an outlined body)

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.lines: list[str] = []
        self.depth = 1
        self.n = 0
        self.tables: dict[str, Table] = {}
        self.conds: dict[str, str] = {}          # comparison value -> its condition form
        self.helpers: dict[str, str] = {}        # outlined subroutines: name -> their `fn` text

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def put(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def f(self, x: float) -> Val:
        return Val(self, "f", f"bits2f({_b(float(x)):#x})")

    def i(self, v: int) -> Val:
        v &= M64
        return Val(self, "i", str(v - (1 << 64)) if v >> 63 else str(v))

    def arg(self, kind: str, name: str) -> Val:
        return Val(self, kind, name)

    def let(self, kind: str, expr: str) -> Val:
        name = self.fresh()
        self.put(f"let {name} = {expr};")
        return Val(self, kind, name)

    def op(self, name: str, *a: Val) -> Val:
        kind = OPS[name].result
        text = RT_OPS[name].format(*(v.v for v in a))
        if name in ("ult", "slt", "eq"):
            # a comparison stays an expression, so that a cond on it (or on && / || of such)
            # is one compare-and-branch; as a value it is the 0/1 the expression gives
            v = Val(self, "i", f"({text})")
            self.conds[v.v] = text
            return v
        if name in ("and", "or") and all(x.v in self.conds for x in a):
            v = Val(self, "i", f"({text})")
            self.conds[v.v] = f" {'&&' if name == 'and' else '||'} ".join(
                f"({self.conds[x.v]})" for x in a)
            return v
        return self.let(kind, text)

    def load(self, table: Table, index) -> Val:
        self.tables[table.name] = table
        k = index.v if isinstance(index, Val) else str(index)
        return self.let("i", f"load64({self.prefix}{table.name} + 8 * ({k}))")

    def loadf(self, table: Table, index) -> Val:
        self.tables[table.name] = table
        k = index.v if isinstance(index, Val) else str(index)
        return self.let("f", f"loadf({self.prefix}{table.name} + 8 * ({k}))")

    def outline(self, name: str, body: Callable, args: tuple, nout: int) -> tuple:
        """body(m, *args) (integer values in, `nout` out) written once as `fn <prefix><name>`,
        its results left in the words of the global `<prefix>out`, and called here."""
        fn = f"{self.prefix}{name}"
        if fn not in self.helpers:
            sub = RtSource(self.prefix)
            sub.returns = False
            params = [f"x{k}" for k in range(len(args))]
            out = body(sub, *(sub.arg("i", p) for p in params))
            assert len(out) == nout <= 4 and all(v.kind == "i" for v in out)
            stores = [f"    store64({self.prefix}out + {8 * k}, {v.v});" for k, v in enumerate(out)]
            self.helpers[fn] = "\n".join([f"fn {fn}({', '.join(p + ': i64' for p in params)}) {{"]
                                          + sub.lines + stores + ["}"]) + "\n"
            self.helpers.update(sub.helpers)
            self.tables.update(sub.tables)
        self.put(f"{fn}({', '.join(v.v for v in args)});")
        return tuple(self.let("i", f"load64({self.prefix}out + {8 * k})") for k in range(nout))

    def first(self, go: Val, fast: Callable[[], tuple], rest: Callable[[], Val]) -> Val:
        """Backend's, with the fast path's value returned from the function where its test
        passes, so that the path taken nearly always carries no merge of values."""
        if not self.returns:
            return super().first(go, fast, rest)
        self.put(f"if {self.conds.get(go.v, f'{go.v} != 0')} {{")
        self.depth += 1
        ok, v = fast()
        self.put(f"if {self.conds.get(ok.v, f'{ok.v} != 0')} {{ return {v.v}; }}")
        self.depth -= 1
        self.put("}")
        return rest()

    def cond(self, c: Val, then: Callable[[], tuple], else_: Callable[[], tuple]) -> tuple:
        head = len(self.lines)
        self.put("")                             # the result variables, filled in below
        self.put(f"if {self.conds.get(c.v, f'{c.v} != 0')} {{")
        self.depth += 1
        a = then()
        names = [self.fresh() for _ in a]
        for name, v in zip(names, a):
            self.put(f"{name} = {v.v};")
        self.depth -= 1
        self.put("} else {")
        self.depth += 1
        b = else_()
        if [v.kind for v in a] != [v.kind for v in b]:
            raise TypeError("the branches of a cond return values of different kinds")
        for name, v in zip(names, b):
            self.put(f"{name} = {v.v};")
        self.depth -= 1
        self.put("}")
        pad = "    " * self.depth
        self.lines[head] = "".join(f"{pad}let {n} = {'0.0' if v.kind == 'f' else '0'}; "
                                   for n, v in zip(names, a)).rstrip()
        return tuple(Val(self, v.kind, n) for n, v in zip(names, a))
