"""PTX text: the instruction table and an emitter with numbered virtual registers.

`INSTR` maps each operation the kernels use to its destination register class and its PTX format;
nothing else in alphac writes a PTX mnemonic. The binary64 rows carry `.rn` on every rounding
operation: PTX fuses a multiply and an add into `fma` only when neither names a rounding mode
(PTX ISA, "add/mul: rounding modifiers"), so the explicit `.rn` keeps each one a separate IEEE
operation rounded to nearest even; `ptxas --fmad=false` (alphac/ptx/ptxas.py) says it twice.
No row has `.ftz`, `.approx`, `fma` or `mad`; `bar.sync` is the one barrier; the one kind of
atomic is `red` (a reduction without a result) on integer words, for the exact sums' limbs
(alphac/ptx/xsum.py), whose adds and ors are order-free.

`Emitter` collects instruction lines, allocates registers `%fd1 %rd1 %r1 %p1 ...` in emission
order, names `.local` arrays `lv0 lv1 ...`, `.shared` ones `sh0 sh1 ...` and loop labels
`$L1 $L2 ...`, and `module()` wraps the body into one `.entry` with its `.param` list and
`.reg`, `.local` and `.shared` declarations.

Requires: operands already rendered as text (registers, integer literals, `f64imm` immediates).
Guarantees: the same calls give the same text, byte for byte.
"""
from __future__ import annotations

import struct

from alphac.targets import gpu_sms

PTX_VERSION = "7.8"       # the first PTX ISA with sm_90; ptxas 13.0 accepts 1.0 .. 9.0

# name -> (destination register class or None, format)
INSTR: dict[str, tuple[str | None, str]] = {
    # binary64 arithmetic: one IEEE operation each, round to nearest even
    "add":    ("fd", "add.rn.f64 {d}, {a}, {b};"),
    "sub":    ("fd", "sub.rn.f64 {d}, {a}, {b};"),
    "mul":    ("fd", "mul.rn.f64 {d}, {a}, {b};"),
    "div":    ("fd", "div.rn.f64 {d}, {a}, {b};"),
    "sqrt":   ("fd", "sqrt.rn.f64 {d}, {a};"),
    "neg":    ("fd", "neg.f64 {d}, {a};"),                  # exact: flips the sign bit
    "movf":   ("fd", "mov.f64 {d}, {a};"),                  # a register or an exact immediate
    "cvtf":   ("fd", "cvt.rn.f64.u32 {d}, {a};"),           # exact below 2^53
    "cvtu":   ("r",  "cvt.rzi.u32.f64 {d}, {a};"),          # a checked index: a whole number
    # parameters and global memory
    "ldp64":  ("rd", "ld.param.u64 {d}, [{a}];"),
    "ldp32":  ("r",  "ld.param.u32 {d}, [{a}];"),
    "ldpf":   ("fd", "ld.param.f64 {d}, [{a}];"),
    "global": ("rd", "cvta.to.global.u64 {d}, {a};"),
    "ld":     ("fd", "ld.global.f64 {d}, [{a}+{b}];"),
    "st":     (None, "st.global.f64 [{a}+{b}], {c};"),
    # the thread's own arrays (`Emitter.local`): vectors a loop reads more than once
    "addrl":  ("rd", "mov.u64 {d}, {a};"),                  # the address of a .local array
    "ldl":    ("fd", "ld.local.f64 {d}, [{a}+{b}];"),
    "stl":    (None, "st.local.f64 [{a}+{b}], {c};"),
    # the block's shared arrays (`Emitter.shared`: alphac/ptx/tiled.py) and its barrier
    "addrs":  ("rd", "mov.u64 {d}, {a};"),                  # the address of a .shared array
    "lds":    ("fd", "ld.shared.f64 {d}, [{a}+{b}];"),
    "sts":    (None, "st.shared.f64 [{a}+{b}], {c};"),
    "bar":    (None, "bar.sync 0;"),                        # every thread of the block waits
    # integer index arithmetic (u32 indices, u64 byte addresses)
    "sreg":   ("r",  "mov.u32 {d}, %{a};"),
    "mov32":  ("r",  "mov.u32 {d}, {a};"),
    "add32":  ("r",  "add.u32 {d}, {a}, {b};"),
    "sub32":  ("r",  "sub.u32 {d}, {a}, {b};"),
    "mul32":  ("r",  "mul.lo.u32 {d}, {a}, {b};"),
    "div32":  ("r",  "div.u32 {d}, {a}, {b};"),
    "rem32":  ("r",  "rem.u32 {d}, {a}, {b};"),
    "selp32": ("r",  "selp.u32 {d}, {a}, {b}, {c};"),
    "wide":   ("rd", "mul.wide.u32 {d}, {a}, {b};"),
    "add64":  ("rd", "add.s64 {d}, {a}, {b};"),
    # 64-bit integers (the functions of alphac.math: alphac/ptx/mathfn.py), modulo 2^64
    "movi64": ("rd", "mov.u64 {d}, {a};"),
    "mov64":  ("rd", "mov.b64 {d}, {a};"),
    "sub64":  ("rd", "sub.s64 {d}, {a}, {b};"),
    "mullo64": ("rd", "mul.lo.s64 {d}, {a}, {b};"),
    "mulhi64": ("rd", "mul.hi.u64 {d}, {a}, {b};"),
    "and64":  ("rd", "and.b64 {d}, {a}, {b};"),
    "or64":   ("rd", "or.b64 {d}, {a}, {b};"),
    "xor64":  ("rd", "xor.b64 {d}, {a}, {b};"),
    "cvt32":  ("r",  "cvt.u32.u64 {d}, {a};"),
    "shl64":  ("rd", "shl.b64 {d}, {a}, {b};"),
    "shr64":  ("rd", "shr.u64 {d}, {a}, {b};"),
    "sar64":  ("rd", "shr.s64 {d}, {a}, {b};"),
    "f2b":    ("rd", "mov.b64 {d}, {a};"),                  # the bits of a binary64
    "b2f":    ("fd", "mov.b64 {d}, {a};"),                  # the binary64 with these bits
    "s64tof": ("fd", "cvt.rn.f64.s64 {d}, {a};"),
    "ldu64":  ("rd", "ld.global.u64 {d}, [{a}+{b}];"),
    "ltu64":  ("p",  "setp.lt.u64 {d}, {a}, {b};"),
    "lts64":  ("p",  "setp.lt.s64 {d}, {a}, {b};"),
    "eq64":   ("p",  "setp.eq.u64 {d}, {a}, {b};"),
    "ne64":   ("p",  "setp.ne.u64 {d}, {a}, {b};"),
    "gtf64":  ("p",  "setp.gt.f64 {d}, {a}, {b};"),         # ordered: false with a NaN
    "eqf64":  ("p",  "setp.eq.f64 {d}, {a}, {b};"),         # ordered: false with a NaN
    "gef64":  ("p",  "setp.ge.f64 {d}, {a}, {b};"),         # ordered: false with a NaN
    "neuf64": ("p",  "setp.neu.f64 {d}, {a}, {b};"),        # unordered: true with a NaN
    "selp01": ("rd", "selp.u64 {d}, 1, 0, {a};"),
    "selp64": ("rd", "selp.u64 {d}, {a}, {b}, {c};"),
    "rem64":  ("rd", "rem.u64 {d}, {a}, {b};"),
    "sub32":  ("r",  "sub.u32 {d}, {a}, {b};"),
    # 32-bit words (SHA-256: alphac/ptx/digest.py), modulo 2^32
    "and32":  ("r",  "and.b32 {d}, {a}, {b};"),
    "or32":   ("r",  "or.b32 {d}, {a}, {b};"),
    "xor32":  ("r",  "xor.b32 {d}, {a}, {b};"),
    "shr32":  ("r",  "shr.u32 {d}, {a}, {b};"),
    "rotr32": ("r",  "shf.r.wrap.b32 {d}, {a}, {a}, {b};"),   # a rotated right by b (< 32)
    "bswap32": ("r", "prmt.b32 {d}, {a}, 0, 291;"),          # selector 0x0123: bytes reversed
    "stu64":  (None, "st.global.u64 [{a}+{b}], {c};"),
    # the exact sums' limbs (xsum.py): integer reductions, order-free (PTX ISA, "red")
    "redadd64": (None, "red.global.add.u64 [{a}+{b}], {c};"),
    "redor64": (None, "red.global.or.b64 [{a}+{b}], {c};"),
    "selpf":  ("fd", "selp.f64 {d}, {a}, {b}, {c};"),
    # control
    "ge":     ("p",  "setp.ge.u32 {d}, {a}, {b};"),
    "eq32":   ("p",  "setp.eq.u32 {d}, {a}, {b};"),
    "braif":  (None, "@{a} bra {b};"),
    "braifnot": (None, "@!{a} bra {b};"),
    "bra":    (None, "bra.uni {a};"),
    "nounroll": (None, ".pragma \"nounroll\";"),
    "ret":    (None, "ret;"),
}

PARAM_TYPES = {"u64": 8, "u32": 4, "f64": 8}     # PTX parameter type -> bytes
REG_TYPES = {"p": "pred", "r": "b32", "rd": "b64", "fd": "f64"}


def f64imm(x: float) -> str:
    """The PTX immediate with exactly the bits of `x` (signed zeros, NaN payloads included)."""
    return "0d%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = {"p": 0, "r": 0, "rd": 0, "fd": 0}
        self.arrays: list[tuple[str, int]] = []     # .local arrays: (name, binary64 words)
        self.blocks: list[tuple[str, int]] = []     # .shared arrays: (name, binary64 words)
        self.labels = 0
        self.math_labels = 0        # mathfn.PtxSource.cond's labels, $m<N>_else/_end

    def local(self, words: int) -> str:
        """A fresh .local array of `words` binary64 values; returns its name."""
        name = f"lv{len(self.arrays)}"
        self.arrays.append((name, words))
        return name

    def shared(self, words: int) -> str:
        """A fresh .shared array (the block's) of `words` binary64 values; returns its name."""
        name = f"sh{len(self.blocks)}"
        self.blocks.append((name, words))
        return name

    def fresh_label(self) -> str:
        self.labels += 1
        return f"$L{self.labels}"

    def reg(self, cls: str) -> str:
        self.count[cls] += 1
        return f"%{cls}{self.count[cls]}"

    def op(self, name: str, a: object = "", b: object = "", c: object = "",
           d: str | None = None) -> str:
        """Append one instruction; returns its destination (a fresh register unless `d`)."""
        cls, fmt = INSTR[name]
        if cls is not None and d is None:
            d = self.reg(cls)
        self.lines.append("\t" + fmt.format(d=d, a=a, b=b, c=c))
        return d or ""

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def comment(self, text: str) -> None:
        self.lines.append(f"\t// {text}")

    def thread_index(self) -> str:
        """%ctaid.x * %ntid.x + %tid.x, the launch's 1-D thread number (u32)."""
        blk = self.op("sreg", "ctaid.x")
        size = self.op("sreg", "ntid.x")
        tid = self.op("sreg", "tid.x")
        return self.op("add32", self.op("mul32", blk, size), tid)

    def module(self, name: str, params: list[tuple[str, str]], sm: int, title: str) -> str:
        assert sm in gpu_sms(), sm
        decl = ",\n".join(f"\t.param .{t} {n}" for n, t in params)
        regs = [f"\t.reg .{REG_TYPES[c]} %{c}<{n + 1}>;" for c, n in self.count.items() if n]
        regs += [f"\t.local .align 8 .b8 {name}[{8 * words}];" for name, words in self.arrays]
        regs += [f"\t.shared .align 8 .b8 {name}[{8 * words}];" for name, words in self.blocks]
        return "\n".join([f"// {title}", "// generated by alphac (alphac/ptx/kernels.py)", "",
                          f".version {PTX_VERSION}", f".target sm_{sm}", ".address_size 64", "",
                          f".visible .entry {name}(", decl, ")", "{", *regs, *self.lines,
                          "}", ""])
