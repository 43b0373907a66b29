"""The contract's functions in PTX: the staging language's third backend (alphac.math.dsl).

`PtxSource(em, table_base)` writes an algorithm of alphac/math/functions.py inline into a kernel
being built with `alphac.ptx.render.Emitter`: binary64 values in %fd registers, integers in
%rd, a `cond` as a predicated branch around each side with the results moved into registers
declared before it. A constant table is a kernel parameter (a global buffer the host uploads
once, like the vector constants): `table_base(table)` gives the register holding its address.

Every binary64 operation is the `.rn` instruction of render.INSTR, so the bits are those of
the other backends; integer operations are 64-bit and modulo 2^64, as in the staging language.
"""
from __future__ import annotations

from typing import Callable

from alphac.math.dsl import M64, OPS, Backend, Table, Val
from alphac.ptx.render import Emitter, f64imm

# Each operation of dsl.OPS -> (its form, the render.INSTR it is): "op" the instruction on the
# operands, "shift" with the amount converted to 32 bits first, "setp" a predicate made 1 or 0.
PTX_OPS: dict[str, tuple[str, str]] = {
    "fadd": ("op", "add"), "fsub": ("op", "sub"), "fmul": ("op", "mul"), "fdiv": ("op", "div"),
    "fneg": ("op", "neg"), "fsqrt": ("op", "sqrt"),
    "add": ("op", "add64"), "sub": ("op", "sub64"), "mul": ("op", "mullo64"),
    "umulh": ("op", "mulhi64"), "and": ("op", "and64"), "or": ("op", "or64"), "xor": ("op", "xor64"),
    "shl": ("shift", "shl64"), "shr": ("shift", "shr64"), "sar": ("shift", "sar64"),
    "ult": ("setp", "ltu64"), "slt": ("setp", "lts64"), "eq": ("setp", "eq64"),
    "fgt": ("setp", "gtf64"),
    "bits": ("op", "f2b"), "float": ("op", "b2f"), "i2f": ("op", "s64tof"),
}


class PtxSource(Backend):       # outline: inline, every GPU thread has its own registers
    def __init__(self, em: Emitter, table_base: Callable[[Table], str]):
        self.em, self.table_base = em, table_base

    def f(self, x: float) -> Val:
        return Val(self, "f", self.em.op("movf", f64imm(float(x))))

    def i(self, v: int) -> Val:
        return Val(self, "i", self.em.op("movi64", str(v & M64)))

    def arg(self, kind: str, reg: str) -> Val:
        return Val(self, kind, reg)

    def op(self, name: str, *a: Val) -> Val:
        em, x = self.em, [v.v for v in a]
        form, instr = PTX_OPS[name]
        if form == "shift":
            reg = em.op(instr, x[0], em.op("cvt32", x[1]))
        elif form == "setp":
            reg = em.op("selp01", em.op(instr, *x))
        else:
            reg = em.op(instr, *x)
        return Val(self, OPS[name].result, reg)

    def _address(self, table: Table, index) -> str:
        em = self.em
        k = index.v if isinstance(index, Val) else em.op("movi64", str(index))
        return em.op("add64", self.table_base(table), em.op("shl64", k, "3"))

    def load(self, table: Table, index) -> Val:
        return Val(self, "i", self.em.op("ldu64", self._address(table, index), 0))

    def loadf(self, table: Table, index) -> Val:
        return Val(self, "f", self.em.op("ld", self._address(table, index), 0))

    def cond(self, c: Val, then: Callable[[], tuple], else_: Callable[[], tuple]) -> tuple:
        em = self.em
        em.math_labels += 1         # the emitter's: a kernel may lower through several of these
        other, end = f"$m{em.math_labels}_else", f"$m{em.math_labels}_end"
        em.op("braifnot", em.op("ne64", c.v, "0"), other)
        a = then()
        outs = [em.reg("fd" if v.kind == "f" else "rd") for v in a]
        for d, v in zip(outs, a):
            em.op("movf" if v.kind == "f" else "mov64", v.v, d=d)
        em.op("bra", end)
        em.label(other)
        b = else_()
        if [v.kind for v in a] != [v.kind for v in b]:
            raise TypeError("the branches of a cond return values of different kinds")
        for d, v in zip(outs, b):
            em.op("movf" if v.kind == "f" else "mov64", v.v, d=d)
        em.label(end)
        return tuple(Val(self, v.kind, d) for d, v in zip(outs, a))


def table_words_as_floats(table: Table) -> tuple[float, ...]:
    """A table's words as the binary64 values with those bits (how kernel buffers are held)."""
    import struct
    return tuple(struct.unpack("<d", struct.pack("<Q", w))[0] for w in table.words)

