"""Encode A64 instructions from ``isa.ROWS``; print them as assembler text; patch relocations.

Requires: ``alphac.aarch64.isa`` and the standard library only.

Guarantees:
  * ``encode(mnemonic, *operands)`` returns the 32-bit word of the first row of
    ``isa.ROWS`` with that mnemonic whose operand kinds accept the operands, or raises
    ``EncodeError`` naming every row tried and why it refused. Nothing is silently
    truncated: out-of-range or misaligned immediates, wrong registers (sp where xzr is
    meant and vice versa), al in cset, and architecturally unpredictable forms
    (writeback base also transferred, ldp into one register twice) are errors.
  * ``text(...)`` is assembler text for the same instruction that LLVM-family
    assemblers (keystone) accept and that assembles to the same word; branch and adr
    targets are written as ``#disp``, i.e. as if the instruction sat at address 0.
  * ``patch_adrp`` and ``patch_add_lo12`` (the two relocations the ELF writer applies: a
    global's page and its offset in it) rewrite only the immediate field of an
    already-encoded word of the right instruction class, with the range/alignment checks
    of the matching ELF relocation, and raise ``EncodeError`` otherwise.
"""
from dataclasses import dataclass
from functools import lru_cache

from alphac.aarch64.isa import COND, FIELDS, ROWS, Cond, Reg, sp

M64 = (1 << 64) - 1


class EncodeError(ValueError):
    """An instruction that no table row can encode."""


@dataclass(frozen=True)
class Imm:
    """An immediate; ``lsl`` is the optional explicit shift (add #imm, lsl #12; movz hw)."""
    value: int
    lsl: int = 0


@dataclass(frozen=True)
class Mem:
    """[base, #offset] (mode 'offset'), [base, #offset]! ('pre') or [base], #offset ('post')."""
    base: Reg
    offset: int = 0
    mode: str = "offset"

    def __post_init__(self):
        if self.mode not in ("offset", "pre", "post"):
            raise EncodeError(f"Mem mode must be 'offset', 'pre' or 'post', not {self.mode!r}")


@dataclass(frozen=True)
class MemReg:
    """[base, index] or, with ``shift``, [base, index, lsl #log2(access size)]."""
    base: Reg
    index: Reg
    shift: bool = False


@dataclass(frozen=True)
class Label:
    """A pc-relative target: byte displacement from this instruction (adrp: between pages)."""
    disp: int


# --- logical (bitmask) immediates ---------------------------------------------------------

def bitmask_encode(value):
    """(N, immr, imms) encoding the 64-bit ``value`` (taken mod 2**64), or None if not encodable."""
    v = value & M64
    if v in (0, M64):
        return None
    e = 64                                        # smallest element size that v repeats
    while e > 2 and not (v ^ (v >> (e // 2))) & ((1 << (e // 2)) - 1):
        e //= 2
    mask = (1 << e) - 1
    elt = v & mask
    ones = elt.bit_count()
    run = (1 << ones) - 1
    for r in range(e):                             # elt must be a rotated run of ones
        if ((run >> r) | (run << (e - r))) & mask == elt:
            return int(e == 64), r, (~(2 * e - 1) & 0x3F) | (ones - 1)
    return None


def is_bitmask_imm(value):
    """Whether ``value`` can be the immediate of a 64-bit and/orr/eor/ands/tst."""
    return bitmask_encode(value) is not None


# --- operand kinds: operand -> tuple of field values ---------------------------------------

class _NoFit(Exception):
    """The operand does not fit this row's kind (message says why)."""


def _need(ok, why):
    if not ok:
        raise _NoFit(why)


def _scaled(value, lo, hi, scale, what):
    _need(isinstance(value, int), f"{what} {value!r} is not an int")
    _need(value % scale == 0, f"{what} {value} is not a multiple of {scale}")
    _need(lo <= value // scale <= hi, f"{what} {value} is outside [{lo * scale}, {hi * scale}]")
    return value // scale


def _reg(cls, allow_sp):
    def kind(op, _):
        _need(isinstance(op, Reg) and op.cls == cls, f"{op!r} is not a {cls} register")
        _need(op.num != 31 or op.is_sp == allow_sp, f"{op!r} is not allowed here")
        return (op.num,)
    return kind


def _imm(op, lo, hi, shifts=(0,)):
    _need(isinstance(op, Imm), f"{op!r} is not an Imm")
    _need(op.lsl in shifts, f"shift lsl #{op.lsl} is not one of {shifts}")
    return _scaled(op.value, lo, hi, 1, "immediate")


def _sp(op, _):
    _need(op == sp, f"{op!r} is not sp")
    return (31,)


def _aimm(op, _):
    imm12 = _imm(op, 0, 4095, (0, 12))
    return op.lsl // 12, imm12


def _mimm(op, _):
    imm16 = _imm(op, 0, 0xFFFF, (0, 16, 32, 48))
    return op.lsl // 16, imm16


def _limm(op, _):
    _imm(op, -(1 << 63), M64)
    enc = bitmask_encode(op.value)
    _need(enc is not None, f"{op.value:#x} is not a logical (bitmask) immediate")
    return enc


def _lsl6(op, _):
    s = _imm(op, 0, 63)
    return (-s) % 64, 63 - s


def _cond(invert):
    def kind(op, _):
        _need(isinstance(op, Cond), f"{op!r} is not a condition code")
        _need(not (invert and op.num >= 14), f"{op!r} cannot be inverted here")
        return (op.num ^ invert,)
    return kind


def _label(bits, scale):
    def kind(op, _):
        _need(isinstance(op, Label), f"{op!r} is not a Label")
        v = _scaled(op.disp, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, scale, "displacement")
        return (v & 3, v >> 2) if bits == 21 else (v,)
    return kind


def _mem(mode, lo, hi, scaled):
    def kind(op, size):
        _need(isinstance(op, Mem) and op.mode == mode, f"{op!r} is not a Mem with mode {mode!r}")
        base = _reg("x", True)(op.base, None)
        return base + (_scaled(op.offset, lo, hi, size if scaled else 1, "offset"),)
    return kind


def _memreg(op, size):
    _need(isinstance(op, MemReg), f"{op!r} is not a MemReg")
    _need(isinstance(op.shift, bool), "MemReg shift must be a bool")
    return _reg("x", True)(op.base, None) + _reg("x", False)(op.index, None) + (int(op.shift),)


KINDS = {
    "x": _reg("x", False), "xsp": _reg("x", True), "w": _reg("w", False), "d": _reg("d", False),
    "w2": lambda op, _: _reg("w", False)(op, _) * 2, "u5": lambda op, _: (_imm(op, 0, 31),),
    "x2": lambda op, _: _reg("x", False)(op, _) * 2, "u6": lambda op, _: (_imm(op, 0, 63),),
    "q": _reg("v", False), "v4s": _reg("v", False), "v16b": _reg("v", False),
    "v2d": _reg("v", False), "vd0": _reg("v", False), "vd1": _reg("v", False),
    "v1q": _reg("v", False), "v1d": _reg("v", False), "u4": lambda op, _: (_imm(op, 0, 15),),
    "v16b2": lambda op, _: _reg("v", False)(op, _) * 2, "vl1": _reg("v", False),
    "ushr6": lambda op, _: ((64 - _imm(op, 1, 64)) % 64,),
    "M0": lambda op, _: _mem("offset", 0, 0, False)(op, _)[:1],
    "sp": _sp,
    "aimm": _aimm,
    "limm": _limm,
    "mimm": _mimm,
    "lsl6": _lsl6,
    "shr6": lambda op, _: (_imm(op, 0, 63),),
    "u16": lambda op, _: (_imm(op, 0, 0xFFFF),),
    "cond": _cond(0), "ncond": _cond(1),
    "rel26": _label(26, 4), "rel19": _label(19, 4), "rel21": _label(21, 1), "page21": _label(21, 4096),
    "Mu12": _mem("offset", 0, 4095, True), "Ms9": _mem("offset", -256, 255, False),
    "Mpre9": _mem("pre", -256, 255, False), "Mpost9": _mem("post", -256, 255, False),
    "Ms7": _mem("offset", -64, 63, True), "Mpre7": _mem("pre", -64, 63, True),
    "Mpost7": _mem("post", -64, 63, True),
    "Mreg": _memreg,
}


def _kind(kind):
    """'Mu12.8' -> ('Mu12', 8); 'x' -> ('x', None)."""
    name, _, arg = kind.partition(".")
    return name, int(arg) if arg else None


def _convert(kind, op):
    name, arg = _kind(kind)
    return KINDS[name](op, arg)


def _put(word, field, value):
    lsb, width = FIELDS[field]
    mask = (1 << width) - 1
    return (word & ~(mask << lsb)) | ((value & mask) << lsb)


def _fill(row, operands):
    _need(len(operands) == len(row.kinds), f"takes {len(row.kinds)} operands, not {len(operands)}")
    word = row.base
    for kind, fields, op in zip(row.kinds, row.fields, operands):
        for field, value in zip(fields, _convert(kind, op)):
            word = _put(word, field, value)
    mem = next((op for op in operands if isinstance(op, Mem)), None)
    if mem is not None and mem.mode != "offset" and mem.base.num != 31:
        data = [op for op, k in zip(operands, row.kinds) if k in ("x", "w")]
        _need(all(r.num != mem.base.num for r in data), "writeback base is also transferred (unpredictable)")
    if row.mnemonic == "ldp":
        _need(operands[0] != operands[1], "ldp into one register twice is unpredictable")
    return word


# --- public encoder -------------------------------------------------------------------------

_BY_MNEMONIC = {}                                  # mnemonic -> its rows, in table order
for _row in ROWS:
    _BY_MNEMONIC.setdefault(_row.mnemonic, []).append(_row)
del _row


def _canonical(mnemonic, operands):
    """'b.eq', Label -> 'b', EQ, Label; everything else unchanged."""
    if mnemonic.startswith("b.") and mnemonic[2:] in COND:
        return "b", (COND[mnemonic[2:]], *operands)
    return mnemonic, operands


def _select(mnemonic, operands):
    mnemonic, operands = _canonical(mnemonic, operands)
    rows = _BY_MNEMONIC.get(mnemonic)
    if rows is None:
        raise EncodeError(f"unknown mnemonic {mnemonic!r}")
    why = []
    for row in rows:
        try:
            return row, operands, _fill(row, operands)
        except _NoFit as e:
            why.append(f"  {row}: {e}")
    raise EncodeError(f"{mnemonic} {', '.join(map(repr, operands))}: no form accepts these operands\n"
                      + "\n".join(why))


def find_row(mnemonic, *operands):
    """The table row ``encode`` uses for these operands."""
    return _select(mnemonic, operands)[0]


def encode_row(row, *operands):
    """Encode ``operands`` with this particular ``row`` (EncodeError if they do not fit it)."""
    try:
        return _fill(row, operands)
    except _NoFit as e:
        raise EncodeError(f"{row}: {e}") from None


@lru_cache(maxsize=1 << 16)
def encode(mnemonic, *operands):
    """The 32-bit instruction word, e.g. encode('add', x0, x1, Imm(16)). Memoized: a pure
    function of frozen operands (see alphac/x86_64/encode.py)."""
    return _select(mnemonic, operands)[2]


def encode_bytes(mnemonic, *operands):
    """The instruction as 4 little-endian bytes."""
    return encode(mnemonic, *operands).to_bytes(4, "little")


def _op_text(kind, op):
    name, size = _kind(kind)
    if isinstance(op, Reg) and op.cls == "v":
        if name in ("vd0", "vd1"):
            return f"{op.name}.d[{name[2]}]"
        if name == "vl1":
            return f"{{{op.name}.d}}[1]"
        return f"q{op.num}" if name == "q" else f"{op.name}.{name[1:].rstrip('2') if name != 'v2d' else '2d'}"
    if isinstance(op, (Reg, Cond)):
        return op.name
    if isinstance(op, Label):
        return f"#{op.disp}"
    if isinstance(op, Imm):
        if name == "limm":
            return f"#{op.value & M64:#x}"
        return f"#{op.value}" + (f", lsl #{op.lsl}" if op.lsl else "")
    if isinstance(op, MemReg):
        shift = f", lsl #{size.bit_length() - 1}" if op.shift else ""
        return f"[{op.base.name}, {op.index.name}{shift}]"
    b, off = op.base.name, op.offset
    return {"offset": f"[{b}, #{off}]" if off else f"[{b}]",
            "pre": f"[{b}, #{off}]!", "post": f"[{b}], #{off}"}[op.mode]


def text(mnemonic, *operands):
    """Assembler text, e.g. 'stp x29, x30, [sp, #-16]!' (EncodeError if not encodable)."""
    row, operands, _ = _select(mnemonic, operands)
    if row.kinds[:1] == ("cond",) and row.mnemonic == "b":
        return f"b.{operands[0].name} {_op_text(row.kinds[1], operands[1])}"
    ops = ", ".join(_op_text(k, op) for k, op in zip(row.kinds, operands))
    if row.mnemonic == "dmb":                  # the row is `dmb sy`: its option is in the word
        return "dmb sy"
    if row.mnemonic in ("prfm", "prfum"):      # so is a prefetch's (pldl1keep)
        return f"{row.mnemonic} pldl1keep, {ops}"
    mnemonic = row.mnemonic.removesuffix(".2d")       # add.2d: add's 64-bit lanes (isa.ROWS)
    return f"{mnemonic} {ops}" if ops else mnemonic


# --- relocation patching --------------------------------------------------------------------

def _patch(word, what, classes, kind, op, fields):
    """Check ``word`` is one of ``classes`` ((mask, value) pairs), then refill ``fields``."""
    if not any(word & mask == want for mask, want in classes):
        raise EncodeError(f"{word:#010x} is not {what}")
    try:
        values = _convert(kind, op)
    except _NoFit as e:
        raise EncodeError(f"{what}: {e}") from None
    for field, value in zip(fields, values):
        if field:
            word = _put(word, field, value)
    return word


def patch_adrp(word, page_disp):
    """R_AARCH64_ADR_PREL_PG_HI21: ``page_disp`` = Page(S+A) - Page(P) in bytes (multiple of 4096)."""
    return _patch(word, "adrp", [(0x9F000000, 0x90000000)], "page21", Label(page_disp), ["immlo", "immhi"])


def patch_add_lo12(word, lo12):
    """R_AARCH64_ADD_ABS_LO12_NC: set imm12 of add #imm (no lsl #12) to the low 12 bits of ``lo12``."""
    return _patch(word, "add immediate without lsl #12", [(0x7FC00000, 0x11000000)],
                  "aimm", Imm(lo12 & 0xFFF), [None, "imm12"])
