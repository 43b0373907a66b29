"""Encode one x86-64 instruction to machine code, driven by `isa.TABLE`.

What it does: `encode(mnemonic, *operands)` finds the first table row whose operand kinds
accept the operands and lays out its bytes -- legacy prefix, REX, opcode, ModRM, SIB,
displacement, immediate.  `intel(...)` prints the same instruction in the Intel syntax
keystone assembles and capstone prints (for tests and listings).

Requires: `alphac.x86_64.isa` only (stdlib otherwise).

Guarantees: operands are a `Reg` from isa, `Mem`, `Imm` or `Rel`; an operand form no row
accepts (wrong kind, immediate out of range, bad address) raises `EncodeError`, never
wrong bytes.  Memory operands get every ModRM/SIB special case right: rsp/r12 as base
take a SIB byte, rbp/r13 as base with no displacement take a zero disp8, index without
base takes disp32, rsp is never an index, disp8 is used whenever it fits, and REX.R/X/B
carry bit 3 of r8-r15/xmm8-15 (in a VEX row, the inverted VEX.R/X/B, and the 2-byte VEX
wherever X, B, W and the map allow it; in an EVEX row, bit 4 of a vector register in the inverted
R', V' or, for ModRM.rm, X, and a disp8 scaled by the memory operand's size, disp8*N, wherever the
displacement is a multiple of N); vector registers 16-31 only in EVEX rows (where a VEX row and
its EVEX twin both fit, the VEX one, as the assemblers choose).  `Encoded.fixup` is the offset inside the bytes of the
4-byte PC-relative field (rel32 branch/call, RIP-relative memory), else None.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from alphac.x86_64.isa import GPR32, TABLE, Reg, Row

BITS = {'ymm': 256, 'zmm': 512}             # a VSIB index's width: its memory operand's size


class EncodeError(ValueError):
    """An instruction or operand that has no encoding."""


@dataclass(frozen=True)
class Mem:
    """[base + index*scale + disp], or [rip + disp] (disp from the end of the instruction).

    With neither base nor index nor rip, the address is the absolute sign-extended disp32.
    `size` is the access width in bits where the instruction needs one (8/16/32/64/128/256/512).
    `bcst`: an EVEX embedded broadcast (`qword ptr [...]{1to8}`, operand kind b64): the one
    binary64 at the address, read into every lane.
    """
    base: Reg | None = None
    index: Reg | None = None
    scale: int = 1
    disp: int = 0
    rip: bool = False
    size: int = 64
    bcst: bool = False

    def __post_init__(self) -> None:
        for r in (self.base, self.index):
            if r is not None and (not isinstance(r, Reg) or r.kind != 'r64') and \
                    not (r is self.index and isinstance(r, Reg) and r.kind in ('ymm', 'zmm')):   # VSIB
                raise EncodeError(f'address register must be a 64-bit GPR, not {r!r}')
        if self.index is not None and self.index.kind == 'r64' and self.index.num == 4:
            raise EncodeError('rsp cannot be an index register')
        if self.scale not in (1, 2, 4, 8):
            raise EncodeError(f'scale must be 1, 2, 4 or 8, not {self.scale}')
        if self.scale != 1 and self.index is None:
            raise EncodeError('a scale needs an index register')
        if not -2**31 <= self.disp < 2**31:
            raise EncodeError(f'displacement {self.disp:#x} does not fit in 32 bits')
        if self.rip and (self.base or self.index):
            raise EncodeError('rip-relative address takes no base or index')
        if self.size not in (8, 16, 32, 64, 128, 256, 512):
            raise EncodeError(f'memory size must be 8/16/32/64/128/256/512 bits, not {self.size}')


@dataclass(frozen=True)
class Imm:
    """An immediate; each row checks its range (signed or unsigned, by operand kind)."""
    value: int


@dataclass(frozen=True)
class Rel:
    """Branch displacement from the end of the instruction; size 8 asks for the short form."""
    disp: int
    size: int = 32


@dataclass(frozen=True)
class Encoded:
    """One instruction's machine code, and where a later assembler patches its rel32/rip field."""
    bytes: bytes
    fixup: int | None = None   # offset of the 4-byte PC-relative field, if any


_IMM_RANGE = {'one': (1, 1), 'imm8': (0, 255), 'simm8': (-2**7, 2**7 - 1),
              'simm32': (-2**31, 2**31 - 1), 'uimm32': (0, 2**32 - 1),
              'imm64': (-2**63, 2**64 - 1)}
_PTR = {8: 'byte', 16: 'word', 32: 'dword', 64: 'qword', 128: 'xmmword', 256: 'ymmword', 512: 'zmmword'}

_BY_NAME: dict[str, list[Row]] = {}
for _r in TABLE:
    _BY_NAME.setdefault(_r.mnem, []).append(_r)
    if _r.name != _r.mnem:
        _BY_NAME.setdefault(_r.name, []).append(_r)


def accepts(kind: str, op: object) -> bool:
    """Whether operand `op` is of operand kind `kind` (see the legend in isa)."""
    if isinstance(op, Reg):
        if kind in ('rax', 'cl', 'xmm0'):
            return op.name == kind
        if kind == 'r64z':
            return op.kind in ('r64', 'r32')
        return op.kind == kind or kind == 'rm' + op.kind[1:] or (kind == 'xm64' and op.kind == 'xmm') \
            or (kind == 'ym256' and op.kind == 'ymm') or (kind == 'zm512' and op.kind == 'zmm')
    if isinstance(op, Mem) and op.bcst:
        return kind == 'b64' and op.size == 64
    if isinstance(op, Mem):
        if op.index is not None and op.index.kind in ('ymm', 'zmm'):     # a vector of indexes (VSIB)
            return kind == 'vm64' + op.index.kind[0] and op.size == BITS[op.index.kind] and op.base is not None
        return kind in ('m', f'm{op.size}', f'rm{op.size}') or (kind == 'xm64' and op.size == 64) \
            or (kind == 'ym256' and op.size == 256) or (kind == 'zm512' and op.size == 512)
    if isinstance(op, Imm):
        lo, hi = _IMM_RANGE.get(kind, (1, 0))
        return isinstance(op.value, int) and lo <= op.value <= hi
    if isinstance(op, Rel):
        return kind == f'rel{op.size}' and -2**(op.size - 1) <= op.disp < 2**(op.size - 1)
    return False


def select(mnemonic: str, *operands: object) -> Row:
    """The first table row for `mnemonic` that accepts `operands`."""
    rows = _BY_NAME.get(mnemonic)
    if rows is None:
        raise EncodeError(f'unknown mnemonic {mnemonic!r}')
    low = all(not isinstance(o, Reg) or o.num < 16 for o in operands) and \
        all(o.index.num < 16 for o in operands if isinstance(o, Mem) and o.index is not None)
    fits = [row for row in rows if len(row.ops) == len(operands) and all(map(accepts, row.ops, operands))
            and (low or row.evex)]
    if fits:            # VEX rows of one form (a register copy): the shortest, as keystone; VEX first
        return min(fits, key=lambda r: (r.evex, len(_emit(r, operands).bytes))) if fits[0].vex else fits[0]
    forms = '; '.join(map(repr, rows))
    raise EncodeError(f'no encoding of {mnemonic} {", ".join(map(repr, operands))} (forms: {forms})')


def _modrm(reg: int, rm: Reg | Mem, n: int = 0) -> tuple[int, bytes, int | None]:
    """(REX X/B bits, ModRM+SIB+disp bytes, offset of a RIP disp32 in them) for reg field `reg`;
    `n`: an EVEX row's disp8 unit (disp8*N), 0 for the plain disp8."""
    if isinstance(rm, Reg):             # (bit 4 of a register 16-31 in X: EVEX rows only)
        return rm.num >> 3 & 1 | rm.num >> 4 << 1, bytes([0xC0 | reg << 3 | rm.num & 7]), None
    disp32 = (rm.disp & 0xFFFFFFFF).to_bytes(4, 'little')
    if rm.rip:                                          # mod=00 rm=101: [rip + disp32]
        return 0, bytes([reg << 3 | 5]) + disp32, 1
    ss = {1: 0, 2: 1, 4: 2, 8: 3}[rm.scale]
    idx = rm.index.num if rm.index else 4               # index 100 = none
    rex = (idx >> 3 & 1) << 1                           # (bit 4 of a VSIB index: EVEX.V')
    if rm.base is None:                                 # SIB base 101 with mod=00: disp32, no base
        return rex, bytes([reg << 3 | 4, ss << 6 | (idx & 7) << 3 | 5]) + disp32, None
    b = rm.base.num & 7
    rex |= rm.base.num >> 3
    if rm.disp == 0 and b != 5:                         # rbp/r13 with mod=00 would mean rip/no base
        mod, disp = 0, b''
    elif not n and -128 <= rm.disp < 128:
        mod, disp = 1, (rm.disp & 0xFF).to_bytes(1, 'little')
    elif n and rm.disp % n == 0 and -128 <= rm.disp // n < 128:
        mod, disp = 1, (rm.disp // n & 0xFF).to_bytes(1, 'little')
    else:
        mod, disp = 2, disp32
    if rm.index is None and b != 4:                     # rm=100 means "SIB follows"
        return rex, bytes([mod << 6 | reg << 3 | b]) + disp, None
    return rex, bytes([mod << 6 | reg << 3 | 4, ss << 6 | (idx & 7) << 3 | b]) + disp, None


def _emit(row: Row, ops: tuple) -> Encoded:
    rex = 8 if row.w else 0                             # REX bits: W=8 R=4 X=2 B=1
    force_rex = any(isinstance(o, Reg) and o.kind == 'r8' and 4 <= o.num < 8 for o in ops)
    opc, reg, rm, tail, vvvv, aaa = bytearray(row.opc), row.ext or 0, None, b'', 0, 0
    for role, op in zip(row.enc, ops):
        if role == 'r':
            reg = op.num
            rex |= (op.num >> 3 & 1) << 2
        elif role == 'o':
            opc[-1] += op.num & 7
            rex |= op.num >> 3
        elif role == 'm':
            rm = op
        elif role == 'v':
            vvvv = op.num
        elif role == 'a':                 # an EVEX row's opmask
            aaa = op.num
        elif role in 'id':
            value = op.value if role == 'i' else op.disp
            tail = (value & (1 << 8 * row.imm) - 1).to_bytes(row.imm, 'little')
    modrm, rip_at = b'', None
    if rm is not None:
        vsib = isinstance(rm, Mem) and rm.index is not None and rm.index.kind in ('ymm', 'zmm')
        xb, modrm, rip_at = _modrm(reg & 7, rm, (8 if vsib else rm.size // 8) if row.evex and isinstance(rm, Mem) else 0)
        rex |= xb
        vvvv |= rm.index.num & 16 if vsib else 0           # V' holds the index's bit 4
    if row.evex:                          # EVEX: R X B R' 0 0 mm; W vvvv 1 pp; z L'L b V' aaa
        length, pp, mp, w = row.vex       # (R X B R' vvvv V' inverted; no mask, no broadcast)
        bcst = isinstance(rm, Mem) and rm.bcst            # EVEX.b: the m64 broadcast to every lane
        head = bytes([0x62, (~rex & 7) << 5 | (~reg >> 4 & 1) << 4 | mp, w << 7 | (~vvvv & 15) << 3 | 4 | pp,
                      length << 5 | bcst << 4 | (~vvvv >> 4 & 1) << 3 | aaa]) + opc
    elif row.vex:
        length, pp, mp, w = row.vex
        rxb, tail2 = (~rex & 7) << 5, (~vvvv & 15) << 3 | length << 2 | pp
        short = rxb & 0x60 == 0x60 and not w and mp == 1        # X and B unused, W0, map 0F
        vex = bytes([0xC5, (rxb & 0x80) | tail2]) if short else bytes([0xC4, rxb | mp, w << 7 | tail2])
        head = vex + opc
    else:
        head = row.pfx + (bytes([0x40 | rex]) if rex or force_rex else b'') + opc
    fixup = None
    if rip_at is not None:
        fixup = len(head) + rip_at
    elif 'd' in row.enc and row.imm == 4:
        fixup = len(head)
    return Encoded(head + modrm + tail, fixup)


@lru_cache(maxsize=1 << 16)
def encode(mnemonic: str, *operands: Reg | Mem | Imm | Rel) -> Encoded:
    """Machine code for one instruction; EncodeError if no table row accepts the operands.
    A pure function of frozen operands, so it is memoized: an executable repeats most of its
    instructions (the runtime's, in every role), and the assembler encodes each twice."""
    return _emit(select(mnemonic, *operands), operands)


def _num(v: int) -> str:
    return str(v) if -10 < v < 10 else ('-' if v < 0 else '') + hex(abs(v))


def _address(m: Mem) -> str:
    terms = ['rip'] if m.rip else []
    if m.base:
        terms.append(m.base.name)
    if m.index:
        terms.append(m.index.name + (f'*{m.scale}' if m.scale != 1 or not m.base else ''))
    text = ' + '.join(terms)
    if not terms:
        text = _num(m.disp)
    elif m.disp:
        text += f' {"-" if m.disp < 0 else "+"} {_num(abs(m.disp))}'
    return f'[{text}]'


def intel(mnemonic: str, *operands: Reg | Mem | Imm | Rel, addr: int = 0) -> str:
    """Intel-syntax text of the instruction `encode` would produce; a branch target is
    printed as an absolute address, as if the instruction started at `addr`."""
    row = select(mnemonic, *operands)
    out = []
    for kind, op in zip(row.ops, operands):
        if kind == 'k' and row.evex:
            out[-1] += f' {{{op.name}}}'                # the opmask, after the register it guards
        elif isinstance(op, Reg):
            out.append(GPR32[op.num].name if kind == 'r64z' else op.name)
        elif isinstance(op, Mem):
            out.append(_address(op) if kind == 'm' else f'{_PTR[op.size]} ptr {_address(op)}'
                       + ('{1to8}' if op.bcst else ''))
        elif isinstance(op, Imm):
            out.append(_num(op.value))
        else:
            out.append(_num(addr + len(_emit(row, operands).bytes) + op.disp))
    return f'{row.name} {", ".join(out)}'.rstrip()
