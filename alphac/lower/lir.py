"""LIR: the target-neutral low-level program both backends lower.

A `Program` is functions, globals and their initial bytes. A `Function` is basic blocks of
three-address `Inst`s over virtual registers of the classes `i` (64-bit integers and addresses),
`f` (binary64), `v` (f64x2), `w` (f64x4, on x86_64-v3 and up) and `z` (f64x8, x86_64-v4:
both `WIDE`). Blocks end in one terminator. The operations are a table (`OPS`): each says
what it defines and reads; the register allocator and both instruction selectors read it, so an
operation is added in one place.

Operands: `VReg`, `Imm` (a 64-bit integer), `Sym` (a global's address, by name), or a string
(function names, labels, condition codes). An `origin` on an instruction names the Alpha source
line it came from, for annotated listings.

Requires nothing. Guarantees: `Program.check()` verifies that every operand has the class its
operation wants, every label exists, and every block ends in a terminator.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class VReg:
    id: int
    cls: str            # "i" | "f" | "v" (f64x2: two binary64 lanes) | "w" (f64x4: four) | "z" (f64x8)

    def __repr__(self) -> str:
        return f"%{self.cls}{self.id}"


@dataclass(frozen=True)
class Imm:
    value: int

    def __repr__(self) -> str:
        return f"${self.value}"


@dataclass(frozen=True)
class Sym:
    name: str
    offset: int = 0

    def __repr__(self) -> str:
        return f"@{self.name}" + (f"+{self.offset}" if self.offset else "")


class Op(NamedTuple):
    defines: str | None          # the class of the result ("?": call's, as the callee returns)
    operands: str                # the signature, below
    clobbers: bool = False       # the caller-saved registers do not survive it (calls)


# op -> Op. Signature letters: i/f/v/w = a register of that class; I = an i register or an Imm;
# k = an Imm; F = an f register, or (x86-64, after alphac.lower.fold.pool_constants) an Imm: the
# bits of a binary64 read from the constant pool; s = Sym; n = a name (function/label); c = a condition; * = any number of i/f
# registers (call and syscall arguments). Both selectors have a rule for every op (tests/test_select_ops.py),
# and the register allocator reads `clobbers`.
_OPS: dict[str, tuple] = {
    "iconst": ("i", "I"),          # d = imm
    "fconst": ("f", "I"),          # d = the binary64 with these bits
    "addr": ("i", "s"),            # d = &sym
    "mov": ("i", "i"), "fmov": ("f", "f"),
    "add": ("i", "iI"), "sub": ("i", "iI"), "mul": ("i", "iI"),
    "and": ("i", "iI"), "or": ("i", "iI"), "xor": ("i", "iI"),
    "shl": ("i", "iI"), "shr": ("i", "iI"), "sar": ("i", "iI"),
    "udiv": ("i", "ii"), "urem": ("i", "ii"), "sdiv": ("i", "ii"), "srem": ("i", "ii"),
    "umulh": ("i", "ii"),          # d = the high 64 bits of the unsigned 128-bit product a * b
    "neg": ("i", "i"), "not": ("i", "i"),
    "ror64": ("i", "ik"),          # d = a rotated right by k (1..63)
    "ror32": ("i", "ik"),          # d = the low 32 bits of a rotated right by k (1..31), zero-extended
    "bswap32": ("i", "i"),         # d = the low 32 bits of a with their 4 bytes reversed, zero-extended
    "setcc": ("i", "ciI"),         # d = (a cc b) ? 1 : 0
    "fadd": ("f", "fF"), "fsub": ("f", "fF"), "fmul": ("f", "fF"), "fdiv": ("f", "fF"),
    "fsqrt": ("f", "f"), "fneg": ("f", "f"),
    "fgt": ("i", "fF"),            # d = (a > b) ? 1 : 0, ordered: 0 when either is a NaN
    "fge": ("i", "fF"),            # d = (a >= b) ? 1 : 0, ordered: 0 when either is a NaN
    "i2f": ("f", "i"),             # signed integer -> nearest binary64
    "f2bits": ("i", "f"), "bits2f": ("f", "i"),
    "load8": ("i", "iI"), "load16": ("i", "iI"), "load32": ("i", "iI"), "load64": ("i", "iI"),
    "fload": ("f", "iI"),          # d = mem[base + offset]
    "store8": (None, "iIi"), "store16": (None, "iIi"), "store32": (None, "iIi"),
    "store64": (None, "iIi"), "fstore": (None, "iIf"),   # mem[base + offset] = v
    "floadx": ("f", "ii"),         # d = mem[base + 8 * index]
    "fstorex": (None, "iif"),      # mem[base + 8 * index] = v
    # a load folded into the operation that reads it (alphac.lower.fold): d = a op mem[base +
    # offset], d = a op mem[base + 8 * index]
    **{f"f{op}m": ("f", "fiI") for op in ("add", "sub", "mul", "div")},
    **{f"f{op}mx": ("f", "fii") for op in ("add", "sub", "mul", "div")},
    # f64x2 (class v, in the binary64 registers): each lane is exactly the scalar operation on
    # that lane (SSE2 packed double on x86-64, NEON .2d on AArch64), never fused or reordered
    "vload": ("v", "iI"), "vloadx": ("v", "ii"),         # d = the 16 bytes at base + offset,
    "vstore": (None, "iIv"), "vstorex": (None, "iiv"),   # or at base + 8 * index
    "vadd": ("v", "vv"), "vsub": ("v", "vv"), "vmul": ("v", "vv"), "vdiv": ("v", "vv"),
    "vsqrt": ("v", "v"), "vneg": ("v", "v"), "vmov": ("v", "v"),
    "vsplat": ("v", "f"),          # d = (a, a)
    "vpack": ("v", "ff"),          # d = (a, b): a in lane 0
    "vlane": ("f", "vk"),          # d = lane k (0: the low 8 bytes, 1: the high) of a
    # f64x4 (class w, the binary64 registers at their full 32 bytes: AVX on x86_64-v3), each lane
    # exactly the scalar operation, as f64x2's; `wend` says no f64x4 is live (x86-64 clears the
    # registers' upper halves, so that the SSE code after runs without a transition)
    "wload": ("w", "iI"), "wloadx": ("w", "ii"), "wstore": (None, "iIw"), "wstorex": (None, "iiw"),
    "wadd": ("w", "ww"), "wsub": ("w", "ww"), "wmul": ("w", "ww"), "wdiv": ("w", "ww"),
    "wsqrt": ("w", "w"), "wneg": ("w", "w"), "wmov": ("w", "w"), "wsplat": ("w", "f"), "wend": (None, ""),
    "wsplatm": ("w", "iI"), "wsplatmx": ("w", "ii"),     # d = (m, m, m, m), m at base + offset
                                                         # or base + 8 * index (alphac.lower.fold)
    # f64x8 (class z, the same registers at 64 bytes: AVX-512F on x86_64-v4), as f64x4's; no
    # f64x8 is live across a `wend` either (vzeroupper clears the upper 48 bytes)
    "zload": ("z", "iI"), "zloadx": ("z", "ii"), "zstore": (None, "iIz"), "zstorex": (None, "iiz"),
    "zadd": ("z", "zz"), "zsub": ("z", "zz"), "zmul": ("z", "zz"), "zdiv": ("z", "zz"),
    "zsqrt": ("z", "z"), "zneg": ("z", "z"), "zmov": ("z", "z"), "zsplat": ("z", "f"),
    "zsplatm": ("z", "iI"), "zsplatmx": ("z", "ii"),
    "zmulm": ("z", "ziI"), "zmulmx": ("z", "zii"),       # d = a * zsplatm(...) in one instruction
                                                         # (the splat folded in: alphac.lower.fold)
    "zgather": ("z", "iz"),        # lane k = the binary64 at a + 8 b_k (b_k: lane k's 64 bits)
    "wgather": ("w", "iw"), "wgatherk": ("w", "iw"),     # the same on 4 lanes: AVX2's form (its
                                   # mask a vector register), AVX-512VL's (an opmask: x86_64-v4)
    # the lanes' 64 bits as integers (AVX2, AVX-512F; alphac.math.lanes): + - & | ^ modulo 2^64,
    # and the logical shifts by a constant k in 0..63
    **{c + op: (c, c + c) for c in "wz" for op in ("qadd", "qsub", "qand", "qor", "qxor")},
    **{c + op: (c, c + "k") for c in "wz" for op in ("qshl", "qshr")},
    # the same on f64x2 (SSE2 on x86-64, NEON on AArch64), and NEON's per-lane table read
    # (CPU_NEON = 1): lane k = the binary64 at a + 8 b_k
    **{"v" + op: ("v", "vv") for op in ("qadd", "qsub", "qand", "qor", "qxor")},
    **{"v" + op: ("v", "vk") for op in ("qshl", "qshr")}, "vgather": ("v", "iv"),
    "cpu_has_avx2": ("i", "", True),   # d = 1 when the CPU and the OS run AVX2 (0 on AArch64)
    "cpu_has_avx512": ("i", "", True),  # d = 1 when they run x86_64-v4's AVX-512 (F, BW, CD, DQ,
                                        # VL, and the OS saves the opmask and zmm state)
    "call": ("?", "n*", True),     # d (i, f or none) = fn(args...)
    "syscall": ("i", "*", True),   # d = syscall(nr, args...)
    "prefetch": (None, "iI"),      # a hint: the cache line at base + offset is read soon (x86-64
                                   # prefetcht0, AArch64 prfm pldl1keep); never faults, changes nothing
    "fence": (None, ""),           # a full memory barrier: every access before it is visible
                                   # (to devices too) before any after it
    # The CPU's SHA-256 instructions (x86-64 SHA-NI, the AArch64 SHA2 extension). cpu_has_sha256:
    # d = 1 when sha256_hw may run (a: AT_HWCAP, AArch64's answer; x86-64 asks cpuid instead);
    # sha256_hw(state, p, n, k): the n >= 0 64-byte blocks at p into the 8 words a..h at state,
    # k: the 64 round constants, then the x86-64 byte-swap shuffle (16 bytes, 16-aligned)
    "cpu_has_sha256": ("i", "i", True), "sha256_hw": (None, "iiii", True),
    # The CPU's carry-less multiply (x86-64 PCLMULQDQ, AArch64 PMULL). cpu_has_clmul: d = 1 when
    # polyval_hw may run (a: AT_HWCAP, as above); polyval_hw(s, key, p, n): the n >= 0 groups of
    # G = formats.PV_GROUP 16-byte blocks at p folded into POLYVAL's state, the 16 bytes at s
    # (polyval.rt): s = dot(s ^ X1, H^G) ^ dot(X2, H^(G-1)) ^ ... ^ dot(XG, H) a group; key: those
    # powers of H (H^k at key + 16 (k - 1)), then p's constant (1, 0xC2 << 56) at key + 16 G,
    # then each power's two halves xored (H^k's at key + 16 G + 16 k), for Karatsuba's products
    "cpu_has_clmul": ("i", "i", True), "polyval_hw": (None, "iiii", True),
}
OPS: dict[str, Op] = {name: Op(*row) for name, row in _OPS.items()}
WIDE = frozenset(op for op in OPS if op[0] in "wz")   # the ops only x86-64's selector has
NEON = frozenset(op for op in OPS if op.startswith("vgather"))   # only AArch64's has
TERMINATORS = {"jmp": "n", "br": "ciInn", "ret": "?", "trap": ""}
CONDS = ("eq", "ne", "lt", "le", "gt", "ge", "ult", "ule", "ugt", "uge")
NEGATE = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le",
          "ult": "uge", "uge": "ult", "ule": "ugt", "ugt": "ule"}


@dataclass
class Inst:
    op: str
    dst: VReg | None
    args: tuple
    origin: int = 0

    def uses(self) -> list[VReg]:
        return [a for a in self.args if isinstance(a, VReg)]

    def __repr__(self) -> str:
        lhs = f"{self.dst!r} = " if self.dst is not None else ""
        return f"{lhs}{self.op} " + ", ".join(map(repr, self.args))


@dataclass
class Block:
    label: str
    insts: list[Inst] = field(default_factory=list)
    term: Inst | None = None

    def successors(self) -> list[str]:
        t = self.term
        if t is None or t.op in ("ret", "trap"):
            return []
        if t.op == "jmp":
            return [t.args[0]]
        return [t.args[3], t.args[4]]


@dataclass
class Function:
    name: str
    params: list[VReg]
    ret: str | None                 # "i" | "f" | None
    blocks: list[Block] = field(default_factory=list)
    nvregs: int = 0
    exported: bool = False

    def new(self, cls: str) -> VReg:
        self.nvregs += 1
        return VReg(self.nvregs, cls)

    def block(self, label: str) -> Block:
        for b in self.blocks:
            if b.label == label:
                return b
        raise KeyError(label)

    def dump(self) -> str:
        out = [f"fn {self.name}({', '.join(map(repr, self.params))}) -> {self.ret}"]
        for b in self.blocks:
            out.append(f"{b.label}:")
            out += [f"    {i!r}" for i in b.insts]
            out.append(f"    {b.term!r}")
        return "\n".join(out)


@dataclass
class Global:
    name: str
    section: str            # ".rodata" | ".data" | ".bss"
    size: int
    init: bytes = b""
    align: int = 16


@dataclass
class Program:
    functions: list[Function] = field(default_factory=list)
    globals: list[Global] = field(default_factory=list)
    entry: str = "rt_start"

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def check(self) -> None:
        names = {f.name for f in self.functions}
        syms = {g.name for g in self.globals}
        for f in self.functions:
            labels = {b.label for b in f.blocks}
            for b in f.blocks:
                if b.term is None or b.term.op not in TERMINATORS:
                    raise ValueError(f"{f.name}:{b.label} does not end in a terminator")
                for inst in b.insts + [b.term]:
                    sig = OPS[inst.op].operands if inst.op in OPS else TERMINATORS[inst.op]
                    _check_args(f, inst, sig, labels, names, syms)


_OPERAND = {
    "i": lambda a, labels, names, syms: isinstance(a, VReg) and a.cls == "i",
    "f": lambda a, labels, names, syms: isinstance(a, VReg) and a.cls == "f",
    "v": lambda a, labels, names, syms: isinstance(a, VReg) and a.cls == "v",
    "w": lambda a, labels, names, syms: isinstance(a, VReg) and a.cls == "w",
    "z": lambda a, labels, names, syms: isinstance(a, VReg) and a.cls == "z",
    "I": lambda a, labels, names, syms: isinstance(a, Imm) or (isinstance(a, VReg) and a.cls == "i"),
    "k": lambda a, labels, names, syms: isinstance(a, Imm),
    "F": lambda a, labels, names, syms: isinstance(a, Imm) or (isinstance(a, VReg) and a.cls == "f"),
    "s": lambda a, labels, names, syms: isinstance(a, Sym) and a.name in syms,
    "c": lambda a, labels, names, syms: a in CONDS,
    "n": lambda a, labels, names, syms: isinstance(a, str) and (a in labels or a in names),
}                                   # an operand kind of OPS's signatures -> its test


def _check_args(f: Function, inst: Inst, sig: str, labels, names, syms) -> None:
    args = list(inst.args)
    where = lambda: f"{f.name}: {inst!r}"     # noqa: E731 (only for the message: repr is costly)
    if sig.endswith("*"):
        fixed = sig[:-1]
        if len(args) < len(fixed):
            raise ValueError(f"{where()}: too few operands")
        rest, args = args[len(fixed):], args[:len(fixed)]
        if not all(isinstance(a, VReg) for a in rest):
            raise ValueError(f"{where()}: variadic operands must be registers")
        sig = fixed
    if sig == "?":
        if len(args) > 1 or (args and not isinstance(args[0], VReg)):
            raise ValueError(f"{where()}: bad return")
        return
    if len(args) != len(sig):
        raise ValueError(f"{where()}: expected {len(sig)} operands")
    for a, s in zip(args, sig):
        if not _OPERAND[s](a, labels, names, syms):
            raise ValueError(f"{where()}: operand {a!r} is not {s}")
