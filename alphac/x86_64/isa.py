"""x86-64 registers, condition codes and the instruction encoding table.

What it does: names every register the code generator may use, the sixteen condition
codes, and lists -- as data, one row per operand form -- how each instruction the
instruction selector emits is encoded (the shape of Go's asm6.go optab and Zig's
encodings.zig, written in the Intel manual's opcode notation).

Requires: nothing beyond the standard library.

Guarantees: `Reg.num` is the hardware register number 0..15, or 0..31 for a vector register
(bit 3 goes to a REX bit; bit 4, which only an EVEX row can encode, to EVEX.R', V' or X);
`CC[cc]` is the 4-bit condition number used by Jcc/SETcc/CMOVcc; every `Row` in `TABLE`
is self-consistent (one role per operand, '+r' opcodes exactly for 'o' operands, an
immediate size exactly when an operand is an immediate or displacement), checked at
import.  `alphac.x86_64.encode` picks the first row, in table order, that accepts the
operands, so for one mnemonic the shorter or canonical (keystone's) form comes first.
"""
from __future__ import annotations

from typing import NamedTuple


class Reg(NamedTuple):
    name: str
    num: int    # 0..15; 0..31 for xmm ymm zmm (16-31: EVEX rows only, at x86_64-v4)
    kind: str   # 'r64' | 'r32' | 'r16' | 'r8' | 'xmm' | 'ymm' | 'zmm'

    def __repr__(self) -> str:
        return self.name


def _regs(kind: str, names: str) -> tuple[Reg, ...]:
    return tuple(Reg(n, i, kind) for i, n in enumerate(names.split()))


def _hi(suffix: str) -> str:
    return ' '.join(f'r{i}{suffix}' for i in range(8, 16))


GPR64 = _regs('r64', 'rax rcx rdx rbx rsp rbp rsi rdi ' + _hi(''))
GPR32 = _regs('r32', 'eax ecx edx ebx esp ebp esi edi ' + _hi('d'))
GPR16 = _regs('r16', 'ax cx dx bx sp bp si di ' + _hi('w'))
# No ah/ch/dh/bh: with them, numbers 4..7 would need "no REX"; here they always mean
# spl/bpl/sil/dil, which need a REX prefix (the encoder adds an empty one, 0x40).
GPR8 = _regs('r8', 'al cl dl bl spl bpl sil dil ' + _hi('b'))
XMM = _regs('xmm', ' '.join(f'xmm{i}' for i in range(32)))
YMM = _regs('ymm', ' '.join(f'ymm{i}' for i in range(32)))     # xmm{i} widened to 32 bytes (AVX)
ZMM = _regs('zmm', ' '.join(f'zmm{i}' for i in range(32)))     # and to 64 bytes (AVX-512)
KREG = _regs('k', 'k0 k1 k2 k3 k4 k5 k6 k7')                    # AVX-512's opmask registers

rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15 = GPR64
(eax, ecx, edx, ebx, esp, ebp, esi, edi,
 r8d, r9d, r10d, r11d, r12d, r13d, r14d, r15d) = GPR32
(ax, cx, dx, bx, sp, bp, si, di,
 r8w, r9w, r10w, r11w, r12w, r13w, r14w, r15w) = GPR16
(al, cl, dl, bl, spl, bpl, sil, dil,
 r8b, r9b, r10b, r11b, r12b, r13b, r14b, r15b) = GPR8
(xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7,
 xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15) = XMM[:16]

REGS: dict[str, Reg] = {r.name: r for r in GPR64 + GPR32 + GPR16 + GPR8 + XMM + YMM + ZMM + KREG}

# Condition codes: the low nibble of Jcc (70+cc, 0F 80+cc), SETcc (0F 90+cc), CMOVcc (0F 40+cc).
CC: dict[str, int] = {
    'o': 0x0, 'no': 0x1, 'b': 0x2, 'ae': 0x3, 'e': 0x4, 'ne': 0x5, 'be': 0x6, 'a': 0x7,
    's': 0x8, 'ns': 0x9, 'p': 0xA, 'np': 0xB, 'l': 0xC, 'ge': 0xD, 'le': 0xE, 'g': 0xF,
}
_CC_NAME = {n: cc for cc, n in CC.items()}


def negate(cc: str) -> str:
    """The condition that holds exactly when `cc` does not (flip the low bit)."""
    return _CC_NAME[CC[cc] ^ 1]


# ---------------------------------------------------------------------------------------
# The table.
#
# Operand kinds (what an operand may be):
#   r64 r32 r16 r8 xmm ymm zmm  a register of that class
#   rax cl xmm0           exactly that register (implicit in the opcode)
#   r64z                  r64 or r32 register, written as its 32-bit name (the CPU zero-extends)
#   m                     memory of any size, printed without a size (lea)
#   m8 m16 m32 m64 m128 m256 m512  memory with Mem.size of that many bits
#   rm8 rm16 rm32 rm64    a register of that width, or memory of that size
#   xm64                  an xmm register, or 64-bit memory
#   ym256                 a ymm register, or 256-bit memory
#   zm512                 a zmm register, or 512-bit memory
#   b64                   64-bit memory broadcast to every lane (Mem.bcst: EVEX.b, `{1to8}`)
#   k                     an opmask register k0-k7
#   vm64z vm64y           [base + zmm*scale + disp] (VSIB: 8 addresses; printed zmmword, disp8*8),
#                         [base + ymm*scale + disp] (4 addresses; ymmword)
#   one                   the immediate 1 (implicit in the opcode)
#   imm8                  immediate 0..255            simm8   -2**7..2**7-1
#   simm32  -2**31..2**31-1   uimm32  0..2**32-1      imm64   -2**63..2**64-1
#   rel8 rel32            Rel branch displacement of that size
#
# Roles (one letter per operand): r = ModRM.reg, m = ModRM.rm, o = added to the last
# opcode byte, i = immediate, d = PC-relative displacement, v = VEX.vvvv, a = EVEX.aaa (the
# opmask), - = implicit.
#
# Code, in the Intel manual's notation: optional mandatory prefix (66/F2/F3, emitted before
# REX), REX.W, opcode bytes ('+r' = register in the low 3 bits), '/digit' (ModRM.reg holds
# an opcode extension) or '/r', then ib/id/io (imm 1/4/8 bytes) or cb/cd (rel 1/4 bytes).
# A VEX row starts `VEX.L.pp.map.W` (VEX.256.66.0F38.W0): the vector length (LIG, a scalar's:
# 128), the implied prefix, the opcode map and W (WIG: W0); its opcode bytes follow the map. An
# EVEX row (`EVEX.512.66.0F.W1`, AVX-512) is the same fields, no mask, no embedded rounding, a
# broadcast only where an operand is b64 (EVEX.b); its disp8 counts in units of the memory
# operand's size (disp8*N, N = 64 for m512, 8 for m64 and b64), and it alone names the vector registers 16-31 (the encoder refuses them elsewhere).
# ---------------------------------------------------------------------------------------

class Row(NamedTuple):
    mnem: str             # mnemonic the instruction selector asks for
    ops: tuple[str, ...]  # operand kinds
    enc: str              # one role letter per operand
    pfx: bytes            # mandatory legacy prefix
    w: bool               # REX.W
    opc: bytes            # opcode bytes
    ext: int | None       # ModRM.reg opcode extension (/digit), None for /r or no ModRM
    imm: int              # bytes of trailing immediate / displacement, 0 if none
    name: str             # mnemonic as printed in Intel syntax
    vex: tuple[int, int, int, int] | None = None   # (L, pp, map, W) of a VEX or EVEX row (L 2: 512)
    evex: bool = False    # an EVEX row: the only kind that names vector registers 16-31

    def __repr__(self) -> str:
        return f'{self.name} {", ".join(self.ops)}'.strip()


_TRAILER = {'ib': 1, 'iw': 2, 'id': 4, 'io': 8, 'cb': 1, 'cd': 4}
IMM_KINDS = {'imm8': 1, 'simm8': 1, 'simm32': 4, 'uimm32': 4, 'imm64': 8, 'rel8': 1, 'rel32': 4}


def _row(mnem: str, ops: str, enc: str, code: str, name: str | None = None) -> Row:
    pfx, opc, w, ext, imm, plus_r, vex = bytearray(), bytearray(), False, None, 0, False, None
    for tok in code.split():
        if tok.startswith(('VEX.', 'EVEX.')):
            prefix, length, pp, mp, wbit = tok.split('.')
            assert length != '512' or prefix == 'EVEX', tok
            vex = ({'LIG': 0, '128': 0, '256': 1, '512': 2}[length], {'NP': 0, '66': 1, 'F3': 2, 'F2': 3}[pp],
                   {'0F': 1, '0F38': 2, '0F3A': 3}[mp], wbit == 'W1')
        elif tok == 'REX.W':
            w = True
        elif tok == '/r':
            pass
        elif tok[0] == '/':
            ext = int(tok[1:])
        elif tok in _TRAILER:
            imm = _TRAILER[tok]
        elif tok.endswith('+r'):
            opc.append(int(tok[:-2], 16))
            plus_r = True
        elif not opc and tok in ('66', 'F2', 'F3'):
            pfx.append(int(tok, 16))
        else:
            opc.append(int(tok, 16))
    kinds = tuple(ops.split(', ')) if ops else ()
    assert len(enc) == len(kinds), (mnem, ops, enc)
    assert plus_r == ('o' in enc), (mnem, ops)
    assert (ext is not None or '/r' in code.split()) == ('m' in enc), (mnem, ops)
    assert ('r' in enc) == ('/r' in code.split() and ext is None), (mnem, ops)
    sized = [IMM_KINDS[k] for k, e in zip(kinds, enc) if e in 'id']
    assert sized == ([imm] if imm else []), (mnem, ops)
    assert (vex is not None) == mnem.startswith(('v', 'k')) and ('v' not in enc or vex), (mnem, ops)
    return Row(mnem, kinds, enc, bytes(pfx), w, bytes(opc), ext, imm, name or mnem, vex,
               code.startswith('EVEX.'))


def _avx(mnem: str, ops: str, enc: str, form: str, opc: str, evex: bool = True) -> tuple[Row, ...]:
    """A VEX row (`form`: L.pp.map.W) and, with `evex`, its EVEX twin (W1: every double's), the
    form that names registers 16-31 (x86_64-v4); the encoder takes the VEX row where it can."""
    length, pp, mp, _ = form.split('.')
    twin = (_row(mnem, ops, enc, f'EVEX.{length}.{pp}.{mp}.W1 {opc} /r'),) if evex else ()
    return (_row(mnem, ops, enc, f'VEX.{form} {opc} /r'),) + twin


# The conditions LIR compares with (alphac.lower.lir.CONDS: eq ne lt le gt ge ult ule ugt uge).
LIR_CC = ('e', 'ne', 'l', 'le', 'g', 'ge', 'b', 'be', 'a', 'ae')
_ALU = {'add': (0x00, 0), 'or': (0x08, 1), 'and': (0x20, 4), 'sub': (0x28, 5),
        'xor': (0x30, 6), 'cmp': (0x38, 7)}
_SHIFT = {'shl': 4, 'shr': 5, 'sar': 7}
_SSE_ARITH = {'addsd': 0x58, 'mulsd': 0x59, 'subsd': 0x5C, 'divsd': 0x5E, 'sqrtsd': 0x51}
BITS = {'xmm': 128, 'ymm': 256}                      # a VEX register's width
XM = {'xmm': 'xmm', 'ymm': 'ym256'}                  # its second source (f64x2's: a register)
_QALU = {'vpaddq': 'D4', 'vpsubq': 'FB', 'vpandq': 'DB', 'vporq': 'EB', 'vpxorq': 'EF'}
_QSHIFT = {'vpsllq': 6, 'vpsrlq': 2}                 # by an immediate: 73 /6 ib, 73 /2 ib

TABLE: tuple[Row, ...] = (
    # -- moves: registers and memory
    _row('mov', 'rm64, r64', 'mr', 'REX.W 89 /r'),
    _row('mov', 'r64, m64', 'rm', 'REX.W 8B /r'),
    _row('mov', 'rm32, r32', 'mr', '89 /r'),
    _row('mov', 'r32, m32', 'rm', '8B /r'),             # zero-extends into the r64
    _row('mov', 'rm16, r16', 'mr', '66 89 /r'),
    _row('mov', 'rm8, r8', 'mr', '88 /r'),
    # -- moves: immediates, shortest first (keystone picks the same)
    _row('mov', 'r64z, uimm32', 'oi', 'B8+r id'),       # mov r32, imm32: zero-extends
    _row('mov', 'rm64, simm32', 'mi', 'REX.W C7 /0 id'),
    _row('mov', 'r64, imm64', 'oi', 'REX.W B8+r io', name='movabs'),
    # -- widening loads
    _row('movzx', 'r64, rm8', 'rm', 'REX.W 0F B6 /r'),
    _row('movzx', 'r64, rm16', 'rm', 'REX.W 0F B7 /r'),
    _row('lea', 'r64, m', 'rm', 'REX.W 8D /r'),
    # -- integer arithmetic; for imm: imm8 form, then the short rax form, then imm32
    *(r for mn, (op, d) in _ALU.items() for r in (
        _row(mn, 'rm64, r64', 'mr', f'REX.W {op + 1:02X} /r'),
        _row(mn, 'rm64, simm8', 'mi', f'REX.W 83 /{d} ib'),
        _row(mn, 'rax, simm32', '-i', f'REX.W {op + 5:02X} id'),
        _row(mn, 'rm64, simm32', 'mi', f'REX.W 81 /{d} id'))),
    _row('imul', 'r64, rm64', 'rm', 'REX.W 0F AF /r'),
    _row('imul', 'r64, rm64, simm8', 'rmi', 'REX.W 6B /r ib'),
    _row('imul', 'r64, rm64, simm32', 'rmi', 'REX.W 69 /r id'),
    _row('not', 'rm64', 'm', 'REX.W F7 /2'),
    _row('neg', 'rm64', 'm', 'REX.W F7 /3'),
    _row('mul', 'rm64', 'm', 'REX.W F7 /4'),            # rdx:rax = rax * rm64, unsigned
    _row('div', 'rm64', 'm', 'REX.W F7 /6'),
    _row('idiv', 'rm64', 'm', 'REX.W F7 /7'),
    _row('cqo', '', '', 'REX.W 99'),
    *(r for mn, d in _SHIFT.items() for r in (
        _row(mn, 'rm64, one', 'm-', f'REX.W D1 /{d}'),
        _row(mn, 'rm64, imm8', 'mi', f'REX.W C1 /{d} ib'),
        _row(mn, 'rm64, cl', 'm-', f'REX.W D3 /{d}'))),
    _row('ror', 'rm64, one', 'm-', 'REX.W D1 /1'),
    _row('ror', 'rm64, imm8', 'mi', 'REX.W C1 /1 ib'),
    _row('ror', 'rm32, one', 'm-', 'D1 /1'),
    _row('ror', 'rm32, imm8', 'mi', 'C1 /1 ib'),
    _row('bswap', 'r32', 'o', '0F C8+r'),
    # -- conditions
    *(_row('set' + cc, 'rm8', 'm', f'0F {0x90 + CC[cc]:02X} /0') for cc in LIR_CC),
    # -- control flow
    *(_row('j' + cc, 'rel32', 'd', f'0F {0x80 + CC[cc]:02X} cd') for cc in LIR_CC),
    _row('jmp', 'rel32', 'd', 'E9 cd'),
    _row('call', 'rel32', 'd', 'E8 cd'),
    _row('ret', '', '', 'C3'),
    _row('push', 'r64', 'o', '50+r'),
    _row('pop', 'r64', 'o', '58+r'),
    _row('syscall', '', '', '0F 05'),
    _row('ud2', '', '', '0F 0B'),
    _row('mfence', '', '', '0F AE F0'),
    _row('prefetcht0', 'm8', 'm', '0F 18 /1'),
    # -- SSE2 scalar double
    _row('movsd', 'xmm, xm64', 'rm', 'F2 0F 10 /r'),
    _row('movsd', 'm64, xmm', 'mr', 'F2 0F 11 /r'),
    *(_row(mn, 'xmm, xm64', 'rm', f'F2 0F {op:02X} /r') for mn, op in _SSE_ARITH.items()),
    _row('movq', 'xmm, r64', 'rm', '66 REX.W 0F 6E /r'),
    _row('movq', 'r64, xmm', 'mr', '66 REX.W 0F 7E /r'),
    _row('cvtsi2sd', 'xmm, rm64', 'rm', 'F2 REX.W 0F 2A /r'),
    _row('ucomisd', 'xmm, xm64', 'rm', '66 0F 2E /r'),
    _row('xorpd', 'xmm, xmm', 'rm', '66 0F 57 /r'),
    _row('movapd', 'xmm, xmm', 'rm', '66 0F 28 /r'),
    # -- SSE2 packed double: f64x2, each lane the scalar instruction above
    _row('movupd', 'xmm, m128', 'rm', '66 0F 10 /r'),
    _row('movupd', 'm128, xmm', 'mr', '66 0F 11 /r'),
    *(_row(mn[:-2] + 'pd', 'xmm, xmm', 'rm', f'66 0F {op:02X} /r') for mn, op in _SSE_ARITH.items()),
    _row('unpcklpd', 'xmm, xmm', 'rm', '66 0F 14 /r'),
    _row('unpckhpd', 'xmm, xmm', 'rm', '66 0F 15 /r'),
    # SSE2 on the two lanes' 64 bits as integers (the q builtins on f64x2; pxor is below)
    *(_row(mn, 'xmm, xmm', 'rm', f'66 0F {op} /r') for mn, op in
      (('paddq', 'D4'), ('psubq', 'FB'), ('pand', 'DB'), ('por', 'EB'))),
    *(_row(mn, 'xmm, imm8', 'mi', f'66 0F 73 /{d} ib') for mn, d in (('psllq', 6), ('psrlq', 2))),
    # -- SSE2/SSSE3/SSE4.1 on 4 x u32, and the SHA extensions: the hardware SHA-256 (sha256_hw)
    _row('movdqu', 'xmm, m128', 'rm', 'F3 0F 6F /r'),
    _row('movdqu', 'm128, xmm', 'mr', 'F3 0F 7F /r'),
    _row('movdqa', 'xmm, xmm', 'rm', '66 0F 6F /r'),
    _row('paddd', 'xmm, xmm', 'rm', '66 0F FE /r'),
    _row('pshufb', 'xmm, xmm', 'rm', '66 0F 38 00 /r'),
    _row('pshufd', 'xmm, xmm, imm8', 'rmi', '66 0F 70 /r ib'),
    _row('palignr', 'xmm, xmm, imm8', 'rmi', '66 0F 3A 0F /r ib'),
    _row('pblendw', 'xmm, xmm, imm8', 'rmi', '66 0F 3A 0E /r ib'),
    _row('sha256rnds2', 'xmm, xmm, xmm0', 'rm-', '0F 38 CB /r'),
    _row('sha256msg1', 'xmm, xmm', 'rm', '0F 38 CC /r'),
    _row('sha256msg2', 'xmm, xmm', 'rm', '0F 38 CD /r'),
    # -- PCLMULQDQ, and SSE2's xor and byte shifts: the carry-less multiply of POLYVAL (polyval_hw)
    _row('pclmulqdq', 'xmm, xmm, imm8', 'rmi', '66 0F 3A 44 /r ib'),
    _row('pxor', 'xmm, xmm', 'rm', '66 0F EF /r'),
    _row('pslldq', 'xmm, imm8', 'mi', '66 0F 73 /7 ib'),
    _row('psrldq', 'xmm, imm8', 'mi', '66 0F 73 /3 ib'),
    _row('cpuid', '', '', '0F A2'),
    _row('xgetbv', '', '', '0F 01 D0'),
    # -- AVX (x86_64-v3 and v4): the SSE2 scalar and f64x2 instructions above in their VEX forms,
    # three operands (no copy of the first), each lane the SSE2 instruction's; and AVX2's f64x4.
    # Each with its EVEX twin, the only form of registers 16-31 (x86_64-v4). No FMA.
    *_avx('vmovsd', 'xmm, m64', 'rm', 'LIG.F2.0F.WIG', '10'),
    *_avx('vmovsd', 'm64, xmm', 'mr', 'LIG.F2.0F.WIG', '11'),
    *(r for mn, op in _SSE_ARITH.items() for r in _avx('v' + mn, 'xmm, xmm, xm64', 'rvm', 'LIG.F2.0F.WIG', f'{op:02X}')),
    *_avx('vucomisd', 'xmm, xm64', 'rm', 'LIG.66.0F.WIG', '2E'),
    *_avx('vcvtsi2sd', 'xmm, xmm, rm64', 'rvm', 'LIG.F2.0F.W1', '2A'),
    *_avx('vmovq', 'xmm, r64', 'rm', '128.66.0F.W1', '6E'),
    *_avx('vmovq', 'r64, xmm', 'mr', '128.66.0F.W1', '7E'),
    # Two VEX rows for a register copy: the encoder takes the shorter (a 2-byte VEX), as keystone.
    *(r for x in ('xmm', 'ymm') for r in (
        *_avx('vmovapd', f'{x}, {x}', 'rm', f'{BITS[x]}.66.0F.WIG', '28'),
        *_avx('vmovapd', f'{x}, {x}', 'mr', f'{BITS[x]}.66.0F.WIG', '29', evex=False),
        *_avx('vmovupd', f'{x}, m{BITS[x]}', 'rm', f'{BITS[x]}.66.0F.WIG', '10'),
        *_avx('vmovupd', f'm{BITS[x]}, {x}', 'mr', f'{BITS[x]}.66.0F.WIG', '11'),
        *(r for mn, op in _SSE_ARITH.items() if mn != 'sqrtsd' for r in _avx(
            'v' + mn[:-2] + 'pd', f'{x}, {x}, {XM[x]}', 'rvm', f'{BITS[x]}.66.0F.WIG', f'{op:02X}')),
        *_avx('vsqrtpd', f'{x}, {XM[x]}', 'rm', f'{BITS[x]}.66.0F.WIG', '51'),
        *_avx('vxorpd', f'{x}, {x}, {XM[x]}', 'rvm', f'{BITS[x]}.66.0F.WIG', '57'))),
    *_avx('vunpcklpd', 'xmm, xmm, xmm', 'rvm', '128.66.0F.WIG', '14'),
    *_avx('vunpckhpd', 'xmm, xmm, xmm', 'rvm', '128.66.0F.WIG', '15'),
    *_avx('vbroadcastsd', 'ymm, xm64', 'rm', '256.66.0F38.W0', '19'),
    _row('vzeroupper', '', '', 'VEX.128.NP.0F.WIG 77'),
    # -- AVX-512F packed double (x86_64-v4): f64x8, zmm0-31, each lane the scalar instruction.
    _row('vmovupd', 'zmm, m512', 'rm', 'EVEX.512.66.0F.W1 10 /r'),
    _row('vmovupd', 'm512, zmm', 'mr', 'EVEX.512.66.0F.W1 11 /r'),
    _row('vmovapd', 'zmm, zmm', 'rm', 'EVEX.512.66.0F.W1 28 /r'),
    *(_row('v' + mn[:-2] + 'pd', 'zmm, zmm, zm512', 'rvm', f'EVEX.512.66.0F.W1 {op:02X} /r')
      for mn, op in _SSE_ARITH.items() if mn != 'sqrtsd'),
    _row('vsqrtpd', 'zmm, zm512', 'rm', 'EVEX.512.66.0F.W1 51 /r'),
    _row('vpxorq', 'zmm, zmm, zm512', 'rvm', 'EVEX.512.66.0F.W1 EF /r'),
    _row('vbroadcastsd', 'zmm, xm64', 'rm', 'EVEX.512.66.0F38.W1 19 /r'),
    # a product with a binary64 from memory in every lane (a splat folded in: alphac.lower.fold)
    _row('vmulpd', 'zmm, zmm, b64', 'rvm', 'EVEX.512.66.0F.W1 59 /r'),
    # -- AVX2 and AVX-512F on 64-bit integer lanes (the bits of f64x4 and f64x8 lanes, for the
    # vector elementary functions: alphac.math.lanes): ymm's VEX row (vpand, vpor, vpxor by
    # their VEX names) and its EVEX twin (registers 16-31), zmm's EVEX row
    *(r for mn, op in _QALU.items() for r in (
        _row(mn, 'ymm, ymm, ym256', 'rvm', f'VEX.256.66.0F.WIG {op} /r', name=mn.removesuffix('q')
             if mn in ('vpandq', 'vporq', 'vpxorq') else mn),
        _row(mn, 'ymm, ymm, ym256', 'rvm', f'EVEX.256.66.0F.W1 {op} /r'),
        *((_row(mn, 'zmm, zmm, zm512', 'rvm', f'EVEX.512.66.0F.W1 {op} /r'),) if mn != 'vpxorq' else ()))),
    *(r for mn, d in _QSHIFT.items() for r in (
        _row(mn, 'ymm, ymm, imm8', 'vmi', f'VEX.256.66.0F.WIG 73 /{d} ib'),
        _row(mn, 'ymm, ymm, imm8', 'vmi', f'EVEX.256.66.0F.W1 73 /{d} ib'),
        _row(mn, 'zmm, zmm, imm8', 'vmi', f'EVEX.512.66.0F.W1 73 /{d} ib'))),
    # the same on xmm (the q builtins on f64x2 at x86_64-v3 and v4; SSE2's at the baseline)
    *(r for mn, op in _QALU.items() for r in (
        _row(mn, 'xmm, xmm, xmm', 'rvm', f'VEX.128.66.0F.WIG {op} /r', name=mn.removesuffix('q')
             if mn in ('vpandq', 'vporq', 'vpxorq') else mn),
        _row(mn, 'xmm, xmm, xmm', 'rvm', f'EVEX.128.66.0F.W1 {op} /r'))),
    *(r for mn, d in _QSHIFT.items() for r in (
        _row(mn, 'xmm, xmm, imm8', 'vmi', f'VEX.128.66.0F.WIG 73 /{d} ib'),
        _row(mn, 'xmm, xmm, imm8', 'vmi', f'EVEX.128.66.0F.W1 73 /{d} ib'))),
    # -- AVX-512F's gather (x86_64-v4): zmm's lanes from base + 8 * each index lane, where k's bits
    # are set (cleared as each lane arrives); kxnorw k, k, k sets them all
    _row('kxnorw', 'k, k, k', 'rvm', 'VEX.256.NP.0F.W0 46 /r'),
    _row('vgatherqpd', 'zmm, k, vm64z', 'ram', 'EVEX.512.66.0F38.W1 93 /r'),
    _row('vgatherqpd', 'ymm, k, vm64y', 'ram', 'EVEX.256.66.0F38.W1 93 /r'),
    # AVX2's (x86_64-v3): the mask a register whose sign bits say which lanes (all ones from
    # vpcmpeqq r, r, r), cleared; destination, index and mask three distinct registers
    _row('vgatherqpd', 'ymm, vm64y, ymm', 'rmv', 'VEX.256.66.0F38.W1 93 /r'),
    _row('vpcmpeqq', 'ymm, ymm, ym256', 'rvm', 'VEX.256.66.0F38.WIG 29 /r'),
)
