"""AArch64 (A64) registers, condition codes and the instruction encoding table.

Requires: nothing beyond the standard library.

Guarantees: every instruction alphac emits for AArch64 is one row of ``ROWS``:
a mnemonic, the operand kinds it accepts, a base 32-bit word and, for each operand,
the bit fields (``FIELDS``) that operand fills. Rows are checked for internal
consistency at import (fields exist, operand and field counts agree, the base word
has no bits inside a field an operand fills). The rows are pure data; turning
operands into field values is ``alphac.aarch64.encode``'s job. The table is in the
spirit of Go's cmd/internal/obj/arm64 optab: first matching row wins.

Operand kinds (what an operand of that kind may be; ``.N`` is the access size in bytes):
  x       x0..x30 or xzr (31 means the zero register)
  xsp     x0..x30 or sp  (31 means the stack pointer)
  sp      sp only
  w       w0..w30 or wzr; w2: the same, filling two fields (ror: extr wd, wn, wn); x2: so for x
  d       d0..d31
  q v4s v16b  v0..v31 (a Reg of class 'v'), written q0, v0.4s, v0.16b; v16b2: filling two fields
  v1q v1d v2d the same, written v0.1q, v0.1d, v0.2d (pmull's product and factors)
  u4      Imm(0..15)                             -> imm4 (ext's byte position)
  aimm    Imm(0..4095, lsl=0|12)                 -> sh:imm12 (add/sub immediate)
  limm    Imm(64-bit logical bitmask immediate)  -> N:immr:imms
  mimm    Imm(0..65535, lsl=0|16|32|48)          -> hw:imm16 (move wide)
  lsl6    Imm(0..63), a left-shift amount        -> immr:imms of ubfm
  shr6    Imm(0..63), a right-shift amount       -> immr of ubfm/sbfm
  ushr6   Imm(1..64), ushr's shift               -> immr (64 - shift, mod 64)
  vl1     v0..v31, written {v0.d}[1] (ld1's lane); M0: Mem(base, 0) -> Rn
  u16     Imm(0..65535)                          -> imm16 (svc, brk); u5: Imm(0..31); u6: Imm(0..63)
  cond    a condition code; ncond: its inverse (cset), al not allowed
  rel26, rel19   Label(byte displacement, multiple of 4) -> imm26 / imm19
  rel21   Label(byte displacement, +-1 MiB)      -> immlo:immhi (adr)
  page21  Label(displacement between 4 KiB pages, in bytes) -> immlo:immhi (adrp)
  Mu12.N  Mem(base, 0..4095*N, multiple of N)    -> Rn:imm12 (scaled unsigned offset)
  Ms9     Mem(base, -256..255)                   -> Rn:imm9  (unscaled, ldur/stur)
  Mpre9, Mpost9         Mem(base, -256..255, mode='pre'|'post') -> Rn:imm9
  Ms7.N, Mpre7.N, Mpost7.N  Mem(base, -64*N..63*N, multiple of N) -> Rn:imm7 (pairs)
  Mreg.N  MemReg(base, index, shift)             -> Rn:Rm:S (index lsl log2(N) if shift)
"""
from dataclasses import dataclass


@dataclass(frozen=True, repr=False)
class Reg:
    """A register. ``cls`` is 'x', 'w', 'd' or 'v' (128 bits); sp/wsp and xzr/wzr share number 31."""
    name: str
    num: int
    cls: str
    is_sp: bool = False

    def __repr__(self):
        return self.name


X = tuple(Reg(f"x{i}", i, "x") for i in range(31))
W = tuple(Reg(f"w{i}", i, "w") for i in range(31))
D = tuple(Reg(f"d{i}", i, "d") for i in range(32))
V = tuple(Reg(f"v{i}", i, "v") for i in range(32))
(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18,
 x19, x20, x21, x22, x23, x24, x25, x26, x27, x28, x29, x30) = X
(w0, w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11, w12, w13, w14, w15, w16, w17, w18,
 w19, w20, w21, w22, w23, w24, w25, w26, w27, w28, w29, w30) = W
(d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, d12, d13, d14, d15, d16, d17, d18,
 d19, d20, d21, d22, d23, d24, d25, d26, d27, d28, d29, d30, d31) = D
xzr, sp = Reg("xzr", 31, "x"), Reg("sp", 31, "x", is_sp=True)
wzr, wsp = Reg("wzr", 31, "w"), Reg("wsp", 31, "w", is_sp=True)
fp, lr = x29, x30
REGS = {r.name: r for r in (*X, *W, *D, *V, xzr, sp, wzr, wsp)}


@dataclass(frozen=True, repr=False)
class Cond:
    """A condition code (4-bit number as in b.cond, csel)."""
    name: str
    num: int

    def __repr__(self):
        return self.name

    def invert(self):
        """The opposite condition (al inverts to nv, which ``COND`` does not offer)."""
        return Cond(_COND_NAMES[self.num ^ 1], self.num ^ 1)


_COND_NAMES = ("eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc",
               "hi", "ls", "ge", "lt", "gt", "le", "al", "nv")
COND = {n: Cond(n, i) for i, n in enumerate(_COND_NAMES[:15])}
COND["hs"], COND["lo"] = Cond("hs", 2), Cond("lo", 3)
EQ, NE, CS, HS, CC, LO, MI, PL = (COND[n] for n in ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl"))
VS, VC, HI, LS, GE, LT, GT, LE, AL = (COND[n] for n in ("vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al"))


# name: (lowest bit, width)
FIELDS = {
    "Rd": (0, 5), "Rt": (0, 5), "Rn": (5, 5), "Rt2": (10, 5), "Ra": (10, 5), "Rm": (16, 5),
    "imm12": (10, 12), "sh": (22, 1),                  # add/sub immediate
    "N": (22, 1), "immr": (16, 6), "imms": (10, 6),    # bitmask immediate, bitfield move
    "imm16": (5, 16), "hw": (21, 2),                   # move wide, svc, brk
    "imm9": (12, 9), "imm7": (15, 7), "S": (12, 1),    # load/store offsets, index shift
    "imm26": (0, 26), "imm19": (5, 19),                # branches, cbz, ldr literal
    "immlo": (29, 2), "immhi": (5, 19),                # adr, adrp
    "cond": (12, 4), "bcond": (0, 4),                  # csel/csinc, b.cond
    "imm4": (11, 4),                                   # ext
}


@dataclass(frozen=True)
class Row:
    """One encoding: ``fields[i]`` are the FIELDS names operand ``i`` (of kind ``kinds[i]``) fills."""
    mnemonic: str
    kinds: tuple
    base: int
    fields: tuple

    def __str__(self):
        return f"{self.mnemonic} {', '.join(self.kinds)}".strip()


_ROWS = [
    # mnemonic  operand kinds     base word   fields filled, one group per operand
    # integer arithmetic (cmp/cmn/neg/mul are subs/adds/sub/madd with xzr baked in)
    ("add",  "x x x",           0x8b000000, "Rd Rn Rm"),
    ("add",  "xsp xsp aimm",    0x91000000, "Rd Rn sh:imm12"),
    ("sub",  "x x x",           0xcb000000, "Rd Rn Rm"),
    ("sub",  "xsp xsp aimm",    0xd1000000, "Rd Rn sh:imm12"),
    ("cmp",  "x x",             0xeb00001f, "Rn Rm"),
    ("cmp",  "xsp aimm",        0xf100001f, "Rn sh:imm12"),
    ("cmn",  "xsp aimm",        0xb100001f, "Rn sh:imm12"),
    ("neg",  "x x",             0xcb0003e0, "Rd Rm"),
    ("mul",  "x x x",           0x9b007c00, "Rd Rn Rm"),
    ("msub", "x x x x",         0x9b008000, "Rd Rn Rm Ra"),
    ("umulh", "x x x",          0x9bc07c00, "Rd Rn Rm"),
    ("udiv", "x x x",           0x9ac00800, "Rd Rn Rm"),
    ("sdiv", "x x x",           0x9ac00c00, "Rd Rn Rm"),
    # logical (mvn is orn with xzr, tst is ands into xzr)
    ("and",  "x x x",           0x8a000000, "Rd Rn Rm"),
    ("orr",  "x x x",           0xaa000000, "Rd Rn Rm"),
    ("eor",  "x x x",           0xca000000, "Rd Rn Rm"),
    ("and",  "xsp x limm",      0x92000000, "Rd Rn N:immr:imms"),
    ("orr",  "xsp x limm",      0xb2000000, "Rd Rn N:immr:imms"),
    ("eor",  "xsp x limm",      0xd2000000, "Rd Rn N:immr:imms"),
    ("mvn",  "x x",             0xaa2003e0, "Rd Rm"),
    # shifts: immediate forms are ubfm/sbfm, register forms lslv/lsrv/asrv
    ("lsl",  "x x lsl6",        0xd3400000, "Rd Rn immr:imms"),
    ("lsr",  "x x shr6",        0xd340fc00, "Rd Rn immr"),
    ("asr",  "x x shr6",        0x9340fc00, "Rd Rn immr"),
    ("lslv", "x x x",           0x9ac02000, "Rd Rn Rm"),
    ("lsrv", "x x x",           0x9ac02400, "Rd Rn Rm"),
    ("asrv", "x x x",           0x9ac02800, "Rd Rn Rm"),
    ("ror",  "w w2 u5",         0x13800000, "Rd Rn:Rm imms"),   # extr wd, wn, wn, #k
    ("ror",  "x x2 u6",         0x93c00000, "Rd Rn:Rm imms"),   # extr xd, xn, xn, #k
    ("rev",  "w w",             0x5ac00800, "Rd Rn"),
    # moves: mov x,x is orr with xzr; mov to/from sp is add #0
    ("mov",  "x x",             0xaa0003e0, "Rd Rm"),
    ("mov",  "xsp sp",          0x91000000, "Rd Rn"),
    ("movz", "x mimm",          0xd2800000, "Rd hw:imm16"),
    ("movk", "x mimm",          0xf2800000, "Rd hw:imm16"),
    ("movn", "x mimm",          0x92800000, "Rd hw:imm16"),
    # conditional select (cset is csinc xd, xzr, xzr, !cond)
    ("cset", "x ncond",         0x9a9f07e0, "Rd cond"),
    # branches, system, pc-relative
    ("b",    "rel26",           0x14000000, "imm26"),
    ("b",    "cond rel19",      0x54000000, "bcond imm19"),
    ("bl",   "rel26",           0x94000000, "imm26"),
    ("ret",  "",                0xd65f03c0, ""),
    ("svc",  "u16",             0xd4000001, "imm16"),
    ("brk",  "u16",             0xd4200000, "imm16"),
    ("dmb",  "",                0xd5033fbf, ""),           # dmb sy
    # prefetch for a load into L1, kept (prfop PLDL1KEEP, 0, in Rt): scaled, unscaled, register
    ("prfm", "Mu12.8",          0xf9800000, "Rn:imm12"),
    ("prfum", "Ms9",            0xf8800000, "Rn:imm9"),
    ("prfm", "Mreg.8",          0xf8a06800, "Rn:Rm:S"),
    ("adrp", "x page21",        0x90000000, "Rd immlo:immhi"),
    # floating point, double precision (deliberately no fused multiply-add)
    ("fadd", "d d d",           0x1e602800, "Rd Rn Rm"),
    ("fsub", "d d d",           0x1e603800, "Rd Rn Rm"),
    ("fmul", "d d d",           0x1e600800, "Rd Rn Rm"),
    ("fdiv", "d d d",           0x1e601800, "Rd Rn Rm"),
    ("fsqrt", "d d",            0x1e61c000, "Rd Rn"),
    ("fneg", "d d",             0x1e614000, "Rd Rn"),
    ("fcmp", "d d",             0x1e602000, "Rn Rm"),
    ("fmov", "d d",             0x1e604000, "Rd Rn"),
    ("fmov", "d x",             0x9e670000, "Rd Rn"),
    ("fmov", "x d",             0x9e660000, "Rd Rn"),
    ("scvtf", "d x",            0x9e620000, "Rd Rn"),
    # Advanced SIMD on 2 x binary64 (f64x2): each lane the scalar instruction above, never fused
    ("str",  "q Mu12.16",       0x3d800000, "Rt Rn:imm12"),
    ("fadd", "v2d v2d v2d",     0x4e60d400, "Rd Rn Rm"),
    ("fsub", "v2d v2d v2d",     0x4ee0d400, "Rd Rn Rm"),
    ("fmul", "v2d v2d v2d",     0x6e60dc00, "Rd Rn Rm"),
    ("fdiv", "v2d v2d v2d",     0x6e60fc00, "Rd Rn Rm"),
    ("fsqrt", "v2d v2d",        0x6ee1f800, "Rd Rn"),
    ("fneg", "v2d v2d",         0x6ee0f800, "Rd Rn"),
    ("dup",  "v2d vd0",         0x4e080400, "Rd Rn"),           # both lanes = lane 0 of vn
    ("dup",  "d vd1",           0x5e180400, "Rd Rn"),           # (mov dd, vn.d[1])
    ("ins",  "vd1 vd0",         0x6e180400, "Rd Rn"),           # lane 1 of vd = lane 0 of vn
    # the lanes' 64 bits as integers (alphac.math.lanes' 2-lane functions): + - modulo 2^64,
    # & | ^, shifts by a constant; lane 1 to an x register, and one loaded into lane 1
    ("add.2d", "v2d v2d v2d",   0x4ee08400, "Rd Rn Rm"),        # (add.4s's operands: named apart)
    ("sub",  "v2d v2d v2d",     0x6ee08400, "Rd Rn Rm"),
    ("and",  "v16b v16b v16b",  0x4e201c00, "Rd Rn Rm"),
    ("orr",  "v16b v16b v16b",  0x4ea01c00, "Rd Rn Rm"),
    ("shl",  "v2d v2d u6",      0x4f405400, "Rd Rn immr"),
    ("ushr", "v2d v2d ushr6",   0x6f400400, "Rd Rn immr"),
    ("mov",  "x vd1",           0x4e183c00, "Rd Rn"),           # umov xd, vn.d[1] (lane 0: fmov)
    ("ld1",  "vl1 M0",          0x4d408400, "Rt Rn"),           # ld1 {vt.d}[1], [xn]
    # Advanced SIMD on 4 x u32 and the SHA2 extension: the hardware SHA-256 (sha256_hw)
    ("ldr",  "q Mu12.16",       0x3dc00000, "Rt Rn:imm12"),
    ("ldp",  "q q Ms7.16",      0xad400000, "Rt Rt2 Rn:imm7"),
    ("stp",  "q q Ms7.16",      0xad000000, "Rt Rt2 Rn:imm7"),
    ("mov",  "v16b v16b2",      0x4ea01c00, "Rd Rn:Rm"),        # orr vd.16b, vn.16b, vn.16b
    ("rev32", "v16b v16b",      0x6e200800, "Rd Rn"),
    ("add",  "v4s v4s v4s",     0x4ea08400, "Rd Rn Rm"),
    ("sha256h", "q q v4s",      0x5e004000, "Rd Rn Rm"),
    ("sha256h2", "q q v4s",     0x5e005000, "Rd Rn Rm"),
    ("sha256su0", "v4s v4s",    0x5e282800, "Rd Rn"),
    ("sha256su1", "v4s v4s v4s", 0x5e006000, "Rd Rn Rm"),
    # PMULL (the AES extension's 64 x 64 -> 128-bit carry-less multiply, of the low or high
    # halves), EOR and EXT on 16 bytes: POLYVAL (polyval_hw)
    ("pmull", "v1q v1d v1d",    0x0ee0e000, "Rd Rn Rm"),
    ("pmull2", "v1q v2d v2d",   0x4ee0e000, "Rd Rn Rm"),
    ("eor",  "v16b v16b v16b",  0x6e201c00, "Rd Rn Rm"),
    ("ext",  "v16b v16b v16b u4", 0x6e000000, "Rd Rn Rm imm4"),
]

# Single-register loads/stores: five addressing forms each, derived from the
# unsigned-offset word. (mnemonic, unscaled mnemonic, data register kind, size, base)
_LDST = [
    ("strb", "sturb", "w", 1, 0x39000000), ("ldrb", "ldurb", "w", 1, 0x39400000),
    ("strh", "sturh", "w", 2, 0x79000000), ("ldrh", "ldurh", "w", 2, 0x79400000),
    ("str", "stur", "w", 4, 0xb9000000), ("ldr", "ldur", "w", 4, 0xb9400000),
    ("str", "stur", "x", 8, 0xf9000000), ("ldr", "ldur", "x", 8, 0xf9400000),
    ("str", "stur", "d", 8, 0xfd000000), ("ldr", "ldur", "d", 8, 0xfd400000),
]
for _mn, _umn, _r, _n, _base in _LDST:
    _unscaled = _base & ~0x01000000            # bit 24 selects the scaled unsigned form
    _ROWS += [
        (_mn, f"{_r} Mu12.{_n}", _base, "Rt Rn:imm12"),
        (_umn, f"{_r} Ms9", _unscaled, "Rt Rn:imm9"),
        (_mn, f"{_r} Mreg.{_n}", _unscaled | 0x206800, "Rt Rn:Rm:S"),  # option=lsl/uxtx
    ]
    if _n == 8:                                # the frame: str pre-index saves, ldr post restores
        _ROWS.append((_mn, f"{_r} {'Mpre9' if _mn == 'str' else 'Mpost9'}",
                      _unscaled | (0xc00 if _mn == "str" else 0x400), "Rt Rn:imm9"))

# Pair stores pre-index (bits 24:23 = 11) and pair loads post-index (01): the frame's saves.
for _mn, _r, _base in [("stp", "x", 0xa9000000), ("ldp", "x", 0xa9400000),
                       ("stp", "d", 0x6d000000), ("ldp", "d", 0x6d400000)]:
    _ROWS.append((_mn, f"{_r} {_r} {'Mpre7.8' if _mn == 'stp' else 'Mpost7.8'}",
                  _base | 0x00800000 if _mn == "stp" else (_base & ~0x01000000) | 0x00800000,
                  "Rt Rt2 Rn:imm7"))


def _row(mnemonic, kinds, base, fields):
    row = Row(mnemonic, tuple(kinds.split()), base, tuple(tuple(f.split(":")) for f in fields.split()))
    assert len(row.kinds) == len(row.fields), row
    for group in row.fields:
        for name in group:
            lsb, width = FIELDS[name]
            assert base & (((1 << width) - 1) << lsb) == 0, (row, name)
    return row


ROWS = tuple(_row(*r) for r in _ROWS)
del _mn, _umn, _r, _n, _base, _unscaled
