"""What every ISA's instruction selector does the same way.

`SelectorBase` walks a function's blocks in layout order (each block's label, its instructions,
its terminator with the next block's label for fall-through), keeps the Alpha source line of the
instruction being selected, and assigns call arguments to the ISA's argument registers in order;
it selects each instruction by its operation's rule (`RULES`), and the rules and terminators
that read the same on every ISA (a copy, an integer ALU operation, a call, jmp/br/ret/trap).
A backend's `Selector` subclasses it and supplies the ISA: `REGS` (register objects by name),
`INT_ARGS`/`FLOAT_ARGS`, `ISA` (its name in messages), `RULES` (`rules(Selector)`, set after the
class), `JUMP`, `CALL` and `TRAP` (the instructions), `where(v)` (a register or a stack slot),
`move`, `alu`, `compare(a, b)`, `jcc(cc)` (the conditional jump's mnemonic), `prologue()` and the
other rules' methods.
"""
from __future__ import annotations

from alphac.lower.assemble import MI, Label
from alphac.lower.lir import NEGATE, Function, Inst, VReg
from alphac.lower.regalloc import Allocation


# Each LIR operation -> the name of the selector method that lowers it. The grouping is the
# same on every ISA (an ISA's `RULES` is this table over its own methods); a test checks it
# covers alphac.lower.lir.OPS exactly.
OP_RULES: dict[str, str] = {
    "iconst": "iconst", "fconst": "fconst", "addr": "addr", "mov": "copy", "fmov": "copy",
    **dict.fromkeys(("add", "sub", "mul", "and", "or", "xor"), "int_alu"),
    **dict.fromkeys(("shl", "shr", "sar"), "int_shift"),
    **dict.fromkeys(("udiv", "urem", "sdiv", "srem"), "divide"), "umulh": "umulh",
    "neg": "int_unary", "not": "int_unary", "setcc": "setcc",
    **dict.fromkeys(("ror32", "ror64", "bswap32"), "rotate_swap"),
    **dict.fromkeys(("fadd", "fsub", "fmul", "fdiv"), "float_alu"), "fsqrt": "fsqrt", "fneg": "fneg",
    "fgt": "fgt", "fge": "fgt", "i2f": "i2f", "f2bits": "bits", "bits2f": "bits",
    **dict.fromkeys(("load8", "load16", "load32", "load64", "fload"), "load"),
    **dict.fromkeys(("store8", "store16", "store32", "store64", "fstore"), "store"),
    "floadx": "load_indexed", "fstorex": "store_indexed",
    **dict.fromkeys((f"f{op}m{x}" for op in ("add", "sub", "mul", "div") for x in ("", "x")),
                    "float_alu_mem"),
    "vload": "vec_load", "vloadx": "vec_load", "vstore": "vec_store", "vstorex": "vec_store",
    **dict.fromkeys(("vadd", "vsub", "vmul", "vdiv"), "vec_alu"), "vsqrt": "vec_unary",
    "vneg": "vec_unary", "vmov": "vec_copy", "vsplat": "vec_splat", "vlane": "vec_lane",
    "vpack": "vec_pack",
    "wload": "wide_load", "wloadx": "wide_load", "wstore": "wide_store", "wstorex": "wide_store",
    **dict.fromkeys(("wadd", "wsub", "wmul", "wdiv"), "wide_alu"), "wmov": "wide_copy",
    "wsqrt": "wide_unary", "wneg": "wide_unary",
    "wsplat": "wide_splat", "wsplatm": "wide_splat", "wsplatmx": "wide_splat", "wend": "wide_end", "cpu_has_avx2": "cpu_has_avx2",
    **{"z" + op[1:]: rule for op, rule in (("wload", "wide_load"), ("wloadx", "wide_load"),
       ("wstore", "wide_store"), ("wstorex", "wide_store"), ("wadd", "wide_alu"), ("wsub", "wide_alu"),
       ("wmul", "wide_alu"), ("wdiv", "wide_alu"), ("wmov", "wide_copy"), ("wsqrt", "wide_unary"),
       ("wneg", "wide_unary"), ("wsplat", "wide_splat"), ("wsplatm", "wide_splat"), ("wsplatmx", "wide_splat"))},
    "zmulm": "wide_mul_splat", "zmulmx": "wide_mul_splat", "cpu_has_avx512": "cpu_has_avx512",
    "zgather": "wide_gather", "wgatherk": "wide_gather", "wgather": "avx2_gather",
    **{c + "q" + op: "wide_int" for c in "wz" for op in ("add", "sub", "and", "or", "xor", "shl", "shr")},
    **{"vq" + op: "vec_int" for op in ("add", "sub", "and", "or", "xor", "shl", "shr")}, "vgather": "vec_gather",
    "call": "call", "syscall": "syscall", "fence": "fence", "prefetch": "prefetch",
    "cpu_has_sha256": "cpu_has_sha256", "sha256_hw": "sha256_hw",
    "cpu_has_clmul": "cpu_has_clmul", "polyval_hw": "polyval_hw",
}


def rules(selector: type) -> dict:
    """An ISA's rule table: each operation's method of `selector` (an ISA without f64x4 has no
    rule for the ops of lir.WIDE, one without NEON none for lir.NEON's; the runtime language
    refuses them on it first)."""
    return {op: getattr(selector, name) for op, name in OP_RULES.items() if hasattr(selector, name)}


class SelectorBase:
    REGS: dict
    INT_ARGS: tuple[str, ...]
    FLOAT_ARGS: tuple[str, ...]
    INT_RET: str
    FLOAT_RET: str
    ISA: str
    RULES: dict
    JUMP: str
    CALL: str
    TRAP: tuple

    def __init__(self, fn: Function, alloc: Allocation):
        self.fn, self.alloc = fn, alloc
        self.out: list = []
        self.origin = 0

    def emit(self, mnemonic: str, *ops, target: str | None = None, sym: str | None = None) -> None:
        self.out.append(MI(mnemonic, ops, self.origin, target, sym))

    def defreg(self, v: VReg, scratch):
        """The register to compute v into: its own, or `scratch` when v lives in a slot."""
        loc = self.where(v)
        return loc if loc in self.REGS.values() else scratch

    def arg_regs(self, regs: list[VReg]) -> list:
        ints, floats = iter(self.INT_ARGS), iter(self.FLOAT_ARGS)
        out = []
        for v in regs:
            name = next(floats if v.cls == "f" else ints, None)
            if name is None:
                raise ValueError(f"{self.fn.name}: too many arguments of class {v.cls}")
            out.append(self.REGS[name])
        return out

    def return_(self, t) -> None:
        """A `ret` terminator: the value (if any) to the ISA's result register, then the epilogue."""
        if t.args:
            v = t.args[0]
            self.move(self.REGS[self.FLOAT_RET if v.cls == "f" else self.INT_RET], self.where(v))
        self.epilogue()

    # -- instructions: one rule per LIR operation (RULES) --------------------------------------
    def inst(self, inst: Inst) -> None:
        rule = self.RULES.get(inst.op)
        if rule is None:
            raise ValueError(f"{self.ISA} selector: no rule for {inst.op}")
        rule(self, inst.op, inst.dst, inst.args)

    def copy(self, op, d, a) -> None:
        self.move(self.where(d), self.where(a[0]))

    def int_alu(self, op, d, a) -> None:
        self.alu(op, d, a[0], a[1])

    def call(self, op, d, a) -> None:
        self.arg_moves(list(a[1:]), incoming=False)
        self.emit(self.CALL, target=a[0])
        if d is not None:
            self.commit(d, self.REGS[self.FLOAT_RET if d.cls == "f" else self.INT_RET])

    # -- terminators: a jump to the next block left out, a branch falling through where it can
    def term(self, t: Inst, nxt: str | None) -> None:
        if t.op == "jmp":
            if t.args[0] != nxt:
                self.emit(self.JUMP, target=t.args[0])
        elif t.op == "br":
            cc, a, b, yes, no = t.args
            self.compare(a, b)
            if yes == nxt:
                self.emit(self.jcc(NEGATE[cc]), target=no)
            else:
                self.emit(self.jcc(cc), target=yes)
                if no != nxt:
                    self.emit(self.JUMP, target=no)
        elif t.op == "ret":
            self.return_(t)
        elif t.op == "trap":
            self.emit(*self.TRAP)
        else:
            raise ValueError(t.op)

    def select(self) -> list:
        self.prologue()
        self.arg_moves(self.fn.params, incoming=True)
        for i, b in enumerate(self.fn.blocks):
            self.out.append(Label(b.label))
            nxt = self.fn.blocks[i + 1].label if i + 1 < len(self.fn.blocks) else None
            for inst in b.insts:
                self.origin = inst.origin
                self.inst(inst)
            self.origin = b.term.origin
            self.term(b.term, nxt)
        return self.out
