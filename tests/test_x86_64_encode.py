"""Oracle tests for the x86-64 encoder (alphac.x86_64.encode / isa.TABLE).

What it does: (1) for every row of isa.TABLE, hypothesis draws operands that row accepts
and checks our bytes against keystone assembling `intel(...)` and against capstone
disassembling them (one instruction, same length, same text up to number formatting, and
capstone's field offsets agree with `Encoded.fixup`); (2) replays the golden file
tests/golden/x86_64_enc.txt; (3) checks the encoding choices and EncodeError cases.

Requires: pytest, hypothesis, keystone-engine, capstone (test-only dependencies).

Vector registers 16-31 are drawn (and sampled for the golden file) only for EVEX rows, the only
ones that name them; a VEX row and its EVEX twin are told apart by the EVEX one's id (`:evex`).

Guarantees: a new table row is tested automatically (the row test is parametrised over
TABLE itself, every operand kind must have a strategy, and every row must appear in the
golden file).  Regenerate the golden file with
    python tests/test_x86_64_encode.py > tests/golden/x86_64_enc.txt
which checks each line against keystone and capstone while writing it.

Keystone/capstone quirks this file works around (each checked by the code below):
  * keystone mis-assembles absolute addresses `[disp32]` (no base, no index): it turns
    some into rip-relative forms (with a displacement that is even wrong for some
    registers) and picks the movabs moffs form (A1/A3) for rax/al -> capstone check only.
  * keystone relaxes `jmp`/`jcc` to the rel8 form whenever the target is in range; our
    rel32 is an explicit request -> keystone is consulted only when rel8 cannot reach.
  * keystone gets EVEX's compressed displacement (disp8*N) wrong: it writes the displacement
    itself as the disp8 -> for an EVEX row's memory operand with a displacement, capstone
    (which scales it) and GNU as (`test_evex_against_gnu_as`, every EVEX golden line).
  * keystone refuses AVX-512VL's EVEX.128/256 forms (`vaddpd xmm16, ...`: "missing CPU
    feature") and EVEX scalars with a memory operand (`vaddsd xmm16, xmm1, qword ptr [rax]`:
    "invalid operand") -> for an EVEX row keystone refuses, capstone and GNU as (as above).
  * capstone 5 reports `disp_size` 2 (not 4) for a disp32 behind a 66 prefix (ucomisd
    [rip + x]); only its `disp_offset` is compared with `Encoded.fixup`.
  * capstone prints an index-only `[rbx*1]` as `[rbx]` and chooses hex/decimal and
    sign-extended 64-bit forms for numbers freely -> `_norm` compares numbers by value.
"""
from __future__ import annotations

from dataclasses import replace
import pathlib
import re
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

if __name__ == '__main__':
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from alphac.x86_64.encode import EncodeError, Imm, Mem, Rel, accepts, encode, intel, select
from alphac.x86_64.isa import (CC, GPR8, GPR16, GPR32, GPR64, KREG, REGS, TABLE, XMM, YMM, ZMM, Reg, al, cl, eax, negate,
                               r8, r9, r12, r13, r15, rax, rbp, rbx, rcx, rsp, sil, xmm0, xmm9)

capstone = pytest.importorskip('capstone')
keystone = pytest.importorskip('keystone')

GOLDEN = pathlib.Path(__file__).parent / 'golden' / 'x86_64_enc.txt'
ADDR = 1 << 32          # hypothesis cases are assembled here, so every branch target is positive
KS = keystone.Ks(keystone.KS_ARCH_X86, keystone.KS_MODE_64)
CS = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
CS.detail = True


# ---- operand strategies, one per operand kind -------------------------------------------

_EDGES = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
          2**32 - 1, 2**32, 2**63 - 1, -2**63, 2**64 - 1]


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.sampled_from([v for v in _EDGES if lo <= v <= hi]) | st.integers(lo, hi)


def _mem(size: int) -> st.SearchStrategy[Mem]:
    disp = _ints(-128, 127) | _ints(-2**31, 2**31 - 1) | _ints(-128, 127).map(lambda d: d * size // 8)
    indexed = st.tuples(st.sampled_from([r for r in GPR64 if r != rsp]), st.sampled_from([1, 2, 4, 8]))
    based = st.builds(lambda base, ix, disp: Mem(base, *ix, disp=disp, size=size),
                      st.none() | st.sampled_from(GPR64), st.just((None, 1)) | indexed, disp)
    return based | st.builds(Mem, disp=disp, rip=st.just(True), size=st.just(size))


def _regs(regs) -> st.SearchStrategy:
    return st.sampled_from(regs)


KINDS: dict[str, st.SearchStrategy] = {
    'r64': _regs(GPR64), 'r32': _regs(GPR32), 'r16': _regs(GPR16), 'r8': _regs(GPR8),
    'xmm': _regs(XMM), 'rax': st.just(rax), 'cl': st.just(cl), 'xmm0': st.just(xmm0),
    'r64z': _regs(GPR64 + GPR32),
    'm': st.sampled_from([8, 16, 32, 64]).flatmap(_mem),
    **{f'm{n}': _mem(n) for n in (8, 16, 32, 64, 128, 256, 512)},
    'ymm': _regs(YMM), 'ym256': _regs(YMM) | _mem(256),
    'zmm': _regs(ZMM), 'zm512': _regs(ZMM) | _mem(512),
    'k': _regs(KREG[1:]),
    **{f'vm64{x[0]}': st.builds(lambda b, i, s, d, n=n: Mem(b, i, s, d, size=n), _regs(GPR64), _regs(regs),
                                st.sampled_from([1, 2, 4, 8]), _ints(-128, 127) | _ints(-2**31, 2**31 - 1)
                                | _ints(-128, 127).map(lambda d: d * 8))
       for x, regs, n in (('zmm', ZMM, 512), ('ymm', YMM, 256))},
    **{f'rm{n}': _regs(regs) | _mem(n) for n, regs in ((8, GPR8), (16, GPR16), (32, GPR32), (64, GPR64))},
    'xm64': _regs(XMM) | _mem(64),
    'b64': _mem(64).map(lambda m: replace(m, bcst=True)),
    'one': st.just(Imm(1)),
    'imm8': _ints(0, 255).map(Imm), 'simm8': _ints(-2**7, 2**7 - 1).map(Imm),
    'simm32': _ints(-2**31, 2**31 - 1).map(Imm), 'uimm32': _ints(0, 2**32 - 1).map(Imm),
    'imm64': _ints(-2**63, 2**64 - 1).map(Imm),
    'rel8': _ints(-2**7, 2**7 - 1).map(lambda d: Rel(d, 8)),
    'rel32': _ints(-2**31, 2**31 - 1).map(Rel),
}


# ---- oracles ----------------------------------------------------------------------------

_NUM = re.compile(r'(?<![\w*])(-?)(0x[0-9a-f]+|\d+)\b')


def _norm(text: str) -> str:
    """Intel text with every number as its value mod 2**64 and '*1' dropped."""
    text = re.sub(r'\*1\b', '', ' '.join(text.split()))
    return _NUM.sub(lambda m: str(int(m[1] + m[2], 0) % 2**64), text)


def _keystone_skip(ops: tuple, length: int, evex: bool = False) -> str | None:
    """Why keystone cannot be the oracle for these operands (see module docstring), or None."""
    if any(isinstance(o, Mem) and not (o.base or o.index or o.rip) for o in ops):
        return 'keystone bug: absolute [disp32] addressing'
    if any(isinstance(o, Rel) and o.size == 32 and -128 <= o.disp + length - 2 < 128 for o in ops):
        return 'keystone relaxes a reachable rel32 branch to rel8'
    if evex and any(isinstance(o, Mem) and o.disp and (o.base or o.index) for o in ops):
        return 'keystone bug: EVEX disp8*N'
    if any(isinstance(o, Mem) and o.index is not None and o.index.kind != 'r64' for o in ops):
        return 'keystone has no VSIB (a gather): GNU as checks its golden lines'
    return None


def check_oracles(mnemonic: str, ops: tuple, addr: int) -> bytes:
    """Encode, then check against capstone (always) and keystone (unless skipped)."""
    enc = encode(mnemonic, *ops)
    text = intel(mnemonic, *ops, addr=addr)
    insns = list(CS.disasm(enc.bytes, addr))
    assert len(insns) == 1 and insns[0].size == len(enc.bytes), (text, enc.bytes.hex(), insns)
    cs_text = f'{insns[0].mnemonic} {insns[0].op_str}'
    assert _norm(cs_text) == _norm(text), (cs_text, text, enc.bytes.hex())
    # fixup: present exactly for a rel32 or rip operand, pointing where capstone puts that field
    rip = [o for o in ops if isinstance(o, Mem) and o.rip]
    rel32 = [o for o in ops if isinstance(o, Rel) and o.size == 32]
    if rip:
        # (not disp_size: capstone 5 reports 2 for a disp32 after a 66 prefix, e.g. ucomisd)
        assert enc.fixup == insns[0].disp_offset, (text, enc.bytes.hex())
    elif rel32:
        assert enc.fixup == insns[0].imm_offset == len(enc.bytes) - 4
    else:
        assert enc.fixup is None
    if (rip or rel32) and enc.fixup is not None:
        field = int.from_bytes(enc.bytes[enc.fixup:enc.fixup + 4], 'little', signed=True)
        assert field == (rip or rel32)[0].disp
    evex = select(mnemonic, *ops).evex
    if _keystone_skip(ops, len(enc.bytes), evex) is None:
        try:
            ks_bytes = bytes(KS.asm(text, addr)[0])
        except keystone.KsError:
            if not evex:
                raise
            return enc.bytes            # keystone has no AVX-512VL, nor EVEX scalars from memory

        assert ks_bytes == enc.bytes, (text, ks_bytes.hex(), enc.bytes.hex())
    return enc.bytes


def _row_id(row) -> str:      # (a VEX copy has two rows of one form: the opcode tells them apart;
    # a VEX row and its EVEX twin, the prefix)
    return f'{row.name}:{",".join(row.ops)}' + (f':{row.opc.hex()}' if row.vex else '') + (':evex' * row.evex)


def _low(strategy):
    """`strategy` without the vector registers 16-31, which only an EVEX row names."""
    return strategy.filter(lambda o: (not isinstance(o, Reg) or o.num < 16) and
                           (not isinstance(o, Mem) or o.index is None or o.index.num < 16))


# ---- 1. every row against the oracles ---------------------------------------------------

@pytest.mark.parametrize('row', TABLE, ids=_row_id)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_row_against_oracles(row, data):
    ops = tuple(data.draw(KINDS[k] if row.evex else _low(KINDS[k]), label=k) for k in row.ops)
    assume(select(row.mnem, *ops) is row)
    check_oracles(row.mnem, ops, ADDR)


def test_table_is_fully_covered():
    kinds = {k for row in TABLE for k in row.ops}
    assert kinds <= KINDS.keys(), kinds - KINDS.keys()
    ids = [_row_id(r) for r in TABLE]
    assert len(ids) == len(set(ids)), 'two rows with the same operand form'
    golden_rows = {select(m, *ops) for m, ops, _, _ in _golden()}
    missing = [_row_id(r) for r in TABLE if r not in golden_rows]
    assert not missing, f'rows without a golden line: {missing}'



@pytest.mark.parametrize('mnemonic', ['addsd', 'subsd', 'mulsd', 'divsd', 'ucomisd', 'movsd'])
def test_constant_pool_operands_against_oracles(mnemonic):
    """The constant pool's RIP-relative forms (alphac.lower.fold.pool_constants, x86_64.select),
    each way the selector writes them: SSE2 at the baseline, VEX at the levels, EVEX where a
    register is 16-31."""
    two = mnemonic in ('ucomisd', 'movsd')
    for disp in (0, -0x2e1b, 2**31 - 1, -2**31):
        m = Mem(disp=disp, rip=True, size=64)
        for r in ('xmm0', 'xmm15'):
            check_oracles(mnemonic, (REGS[r], m), ADDR)
        for a, b in (('xmm0', 'xmm15'), ('xmm16', 'xmm31'), ('xmm3', 'xmm20'), ('xmm31', 'xmm1')):
            ops = (REGS[a], m) if two else (REGS[a], REGS[b], m)
            assert select('v' + mnemonic, *ops).evex == (a in ('xmm16', 'xmm31') or (b == 'xmm20' and not two))
            check_oracles('v' + mnemonic, ops, ADDR)

# ---- 2. golden file ---------------------------------------------------------------------

_PTR = {'byte': 8, 'word': 16, 'dword': 32, 'qword': 64, 'xmmword': 128, 'ymmword': 256, 'zmmword': 512}
_BRANCHES = {r.mnem for r in TABLE if any(k.startswith('rel') for k in r.ops)}


def _parse_operand(s: str, mnemonic: str, length: int):
    m = re.fullmatch(r'(?:(\w+) ptr )?\[(.*)\](\{1to8\})?', s)
    if m:
        kw = dict(size=_PTR[m[1]] if m[1] else 64, bcst=bool(m[3]))
        for sign, term in re.findall(r'([+-]?)\s*([\w*]+)', m[2]):
            if term == 'rip':
                kw['rip'] = True
            elif '*' in term:
                kw['index'], kw['scale'] = REGS[term.split('*')[0]], int(term.split('*')[1])
            elif term in REGS:
                kw['index' if 'base' in kw else 'base'] = REGS[term]
            else:
                kw['disp'] = int(sign + term, 0)
        return Mem(**kw)
    if s.strip('{}') in REGS:
        return REGS[s.strip('{}')]
    if mnemonic in _BRANCHES:   # absolute target from address 0; the size is the line's length
        return Rel(int(s, 0) - length, 8 if length == 2 else 32)
    return Imm(int(s, 0))


def _golden():
    """(mnemonic, operands, expected bytes, text) for each line of the golden file."""
    for line in GOLDEN.read_text().splitlines():
        line = line.split('#')[0].strip()
        if line:
            text, hexstr = line.rsplit(None, 1)
            want = bytes.fromhex(hexstr)
            mnemonic, _, rest = text.partition(' ')
            ops = tuple(_parse_operand(s.strip(), mnemonic, len(want))           # (`zmm1 {k1}`: two)
                        for s in rest.replace(' {', ', {').split(',') if s.strip())
            yield mnemonic, ops, want, text


def test_golden_file():
    lines = list(_golden())
    assert len(lines) >= len(TABLE)
    for mnemonic, ops, want, text in lines:
        assert encode(mnemonic, *ops).bytes == want, (text, want.hex())
        assert intel(mnemonic, *ops) == text        # the parser and intel() agree


def test_evex_against_gnu_as(tmp_path):
    """Every EVEX golden line (AVX-512: keystone's disp8*N is wrong) assembled by GNU as."""
    import shutil
    import subprocess
    if shutil.which('as') is None or shutil.which('objcopy') is None:
        pytest.skip('GNU binutils (as, objcopy) are not installed') if not __import__('os').environ.get('CI') \
            else pytest.fail('CI needs GNU binutils')
    lines = [(text, want) for m, ops, want, text in _golden() if want[:1] == b'\x62' or m == 'vgatherqpd']
    assert len(lines) >= 20
    src = tmp_path / 'evex.s'
    gnu = [re.sub('[yz]mmword', 'qword', t) if t.startswith('vgather') else t for t, _ in lines]  # (GNU as
    src.write_text('.intel_syntax noprefix\n' + ''.join(f'{t}\n' for t in gnu))  # names the element)
    subprocess.run(['as', '--64', '-o', str(tmp_path / 'evex.o'), str(src)], check=True)
    subprocess.run(['objcopy', '-O', 'binary', '-j', '.text', str(tmp_path / 'evex.o'),
                    str(tmp_path / 'evex.bin')], check=True)
    assert (tmp_path / 'evex.bin').read_bytes() == b''.join(w for _, w in lines)


# ---- 3. choices and errors --------------------------------------------------------------

@pytest.mark.parametrize('value, want', [
    (0, 'b800000000'), (2**31, 'b800000080'), (2**32 - 1, 'b8ffffffff'),
    (-1, '48c7c0ffffffff'), (-2**31, '48c7c000000080'),
    (2**32, '48b80000000001000000'), (-2**31 - 1, '48b8ffffff7fffffffff'),
])
def test_mov_immediate_choice(value, want):
    assert encode('mov', rax, Imm(value)).bytes.hex() == want


def test_alu_and_shift_choices():
    assert encode('add', rcx, Imm(127)).bytes.hex() == '4883c17f'
    assert encode('add', rcx, Imm(128)).bytes.hex() == '4881c180000000'
    assert encode('add', rax, Imm(128)).bytes.hex() == '480580000000'
    assert encode('shl', rax, Imm(1)).bytes.hex() == '48d1e0'
    assert encode('sar', r9, cl).bytes.hex() == '49d3f9'
    assert encode('movabs', rax, Imm(5)).bytes.hex() == '48b80500000000000000'
    assert encode('mov', eax, Imm(5)).bytes.hex() == 'b805000000'


def test_fixup_positions():
    e = encode('mov', Mem(rip=True, disp=0x10), Imm(5))       # rip operand, then an imm32
    assert (e.bytes.hex(), e.fixup) == ('48c7051000000005000000', 3)
    assert encode('lea', rax, Mem(rip=True, disp=-4)).fixup == 3
    assert encode('movsd', xmm9, Mem(rip=True)).fixup == 5
    assert encode('call', Rel(0)).fixup == 1
    assert encode('je', Rel(0)).fixup == 2
    with pytest.raises(EncodeError):                         # no short branches: rel32 only
        encode('je', Rel(0, 8))
    assert encode('mov', rax, Mem(rbp, disp=-8)).fixup is None


def test_intel_text():
    assert intel('mov', Mem(rbp, disp=-8), rax) == 'mov qword ptr [rbp - 8], rax'
    assert intel('movsd', xmm0, Mem(rip=True, disp=16)) == 'movsd xmm0, qword ptr [rip + 0x10]'
    assert intel('lea', r12, Mem(rsp, r13, 8, -0x80)) == 'lea r12, [rsp + r13*8 - 0x80]'
    assert intel('mov', r9, Imm(7)) == 'mov r9d, 7'
    assert intel('jmp', Rel(-5), addr=0x1000) == 'jmp 0x1000'
    assert intel('cqo') == 'cqo'


def test_condition_codes():
    assert len(CC) == 16 and sorted(CC.values()) == list(range(16))
    assert all(negate(negate(c)) == c and CC[negate(c)] == CC[c] ^ 1 for c in CC)
    assert negate('l') == 'ge' and negate('e') == 'ne' and negate('a') == 'be'


@pytest.mark.parametrize('mnemonic, ops', [
    ('shl', (rax, Imm(256))),                   # shift count is an imm8
    ('shl', (rax, Imm(-1))),
    ('mov', (Mem(rbp), Imm(2**31))),            # mov [m], imm sign-extends an imm32
    ('mov', (Mem(rbp), Imm(-2**31 - 1))),
    ('add', (rax, Imm(2**31))),
    ('imul', (rax, rbx, Imm(2**31))),
    ('mov', (rax, Imm(2**64))),
    ('mov', (Mem(rbp, size=8), rax)),           # size mismatch
    ('mov', (Mem(rbp), sil)),
    ('movsd', (xmm0, Mem(rbp, size=32))),
    ('movzx', (rax, Mem(rbp))),
    ('lea', (rax, rbx)),
    ('add', (rax, xmm0)),
    ('mov', (Mem(rbp), Mem(rbx))),
    ('push', (eax,)),
    ('jmp', (Rel(128, 8),)),                    # out of rel8 range
    ('jmp', (Rel(2**31),)),
    ('ret', (rax,)),
    ('frobnicate', ()),
])
def test_encode_errors(mnemonic, ops):
    with pytest.raises(EncodeError):
        encode(mnemonic, *ops)


@pytest.mark.parametrize('kw', [
    dict(base=rax, index=rsp),                  # rsp cannot be an index
    dict(base=rax, scale=3),
    dict(base=rax, scale=2),                    # scale without index
    dict(base=rax, disp=2**31),
    dict(base=rax, disp=-2**31 - 1),
    dict(rip=True, base=rax),
    dict(base=al),
    dict(base=eax),
    dict(base=rax, size=1024),
])
def test_bad_memory_operands(kw):
    with pytest.raises(EncodeError):
        Mem(**kw)


def test_accepts_is_strict():
    assert accepts('rm64', rax) and accepts('rm64', Mem()) and not accepts('rm64', eax)
    assert not accepts('rm64', Mem(size=32)) and accepts('m', Mem(size=8))
    assert accepts('simm8', Imm(-128)) and not accepts('simm8', Imm(128))


# ---- golden file generator --------------------------------------------------------------

_SAMPLES = {
    'r64': [rax, r9, rsp, r13], 'r32': [eax, REGS['r10d'], REGS['esp']],
    'r16': [REGS['ax'], REGS['r11w'], REGS['bp']], 'r8': [al, sil, REGS['r15b'], REGS['spl']],
    'xmm': [xmm0, xmm9, REGS['xmm15'], REGS['xmm16'], REGS['xmm31'], REGS['xmm23']], 'rax': [rax], 'cl': [cl], 'xmm0': [xmm0],
    'r64z': [rcx, r12, eax],
    'm': [Mem(rbp, disp=-8), Mem(rip=True, disp=0x40), Mem(rsp, r13, 8, 0x1234)],
    'one': [Imm(1)], 'imm8': [Imm(0), Imm(2), Imm(63), Imm(255)],
    'simm8': [Imm(-128), Imm(127), Imm(-1)], 'simm32': [Imm(0x12345678), Imm(-2**31), Imm(200)],
    'uimm32': [Imm(0), Imm(0xFFFFFFFF), Imm(0x1000)],
    'imm64': [Imm(0x123456789ABCDEF0), Imm(-2**63), Imm(2**64 - 1)],
    'rel8': [Rel(0, 8), Rel(0x7D, 8), Rel(0x10, 8)], 'rel32': [Rel(0x100), Rel(0x12345678), Rel(0x7FFFFF00)],
}
for _n, _regs_n in ((8, GPR8), (16, GPR16), (32, GPR32), (64, GPR64)):
    _SAMPLES[f'm{_n}'] = [Mem(rbp, disp=-8, size=_n), Mem(rip=True, disp=0x100, size=_n),
                          Mem(r12, r9, 4, 0x7F, size=_n)]
    _SAMPLES[f'rm{_n}'] = [_regs_n[0], _regs_n[12], Mem(r13, size=_n), Mem(rsp, disp=-0x80, size=_n)]
_SAMPLES['m128'] = [Mem(REGS['rdi'], disp=16, size=128), Mem(rcx, disp=0x100, size=128),
                    Mem(rsp, r13, 8, -8, size=128), Mem(rip=True, disp=0x40, size=128)]
_SAMPLES['m256'] = [Mem(rbx, size=256), Mem(r9, disp=0x20, size=256), Mem(rsp, r13, 8, -8, size=256),
                    Mem(rip=True, disp=0x40, size=256)]
_SAMPLES['ymm'] = [YMM[0], YMM[9], YMM[15], YMM[3], YMM[16], YMM[31], YMM[25]]
_SAMPLES['ym256'] = [YMM[1], YMM[12], YMM[20], Mem(r12, rcx, 8, 0x40, size=256), Mem(rip=True, disp=-0x20, size=256)]
_SAMPLES['m512'] = [Mem(rbx, size=512), Mem(r9, disp=0x40, size=512), Mem(rsp, r13, 8, -8, size=512),
                    Mem(rbp, disp=-0x2000, size=512), Mem(r12, disp=0x1fc0, size=512),
                    Mem(r12, disp=0x2000, size=512), Mem(rip=True, disp=0x40, size=512)]
_SAMPLES['zmm'] = [ZMM[0], ZMM[9], ZMM[15], ZMM[3], ZMM[16], ZMM[31], ZMM[25]]
_SAMPLES['k'] = [KREG[1], KREG[7], KREG[3]]
_SAMPLES['vm64y'] = [Mem(rax, YMM[2], 8, size=256), Mem(r12, YMM[10], 8, 0x40, size=256),
                     Mem(rsp, YMM[20], 1, -8, size=256), Mem(rbp, YMM[4], 4, 0x400, size=256)]
_SAMPLES['vm64z'] = [Mem(rax, ZMM[2], 8, size=512), Mem(r12, ZMM[17], 8, 0x40, size=512),
                     Mem(rsp, ZMM[31], 1, -8, size=512), Mem(rbp, ZMM[9], 4, 0x400, size=512)]
_SAMPLES['zm512'] = [ZMM[1], ZMM[12], ZMM[28], Mem(r12, rcx, 8, 0x40, size=512), Mem(rax, disp=0x48, size=512),
                     Mem(rip=True, disp=-0x20, size=512)]
_SAMPLES['xm64'] = [xmm0, REGS['xmm12'], REGS['xmm29'], Mem(rbx, rcx, 2, 0x10), Mem(rip=True, disp=-0x20),
                    Mem(r13, disp=0x3f8), Mem(rsp, disp=-0x404)]
_SAMPLES['b64'] = [replace(m, bcst=True) for m in _SAMPLES['xm64'] if isinstance(m, Mem)]

# The classic ModRM/SIB traps, shown as loads, stores and SSE operands.
_TRAPS = [Mem(rax), Mem(rsp), Mem(r12), Mem(rbp), Mem(r13), Mem(rbp, disp=0x7F), Mem(rbp, disp=0x80),
          Mem(rbp, disp=-0x80), Mem(rbp, disp=-0x81), Mem(r8, disp=-2**31), Mem(r15, disp=2**31 - 1),
          Mem(rsp, disp=8), Mem(r12, disp=8), Mem(rax, rbx), Mem(rbp, r13), Mem(r13, rbp, 2),
          Mem(rsp, r12, 8, -8), Mem(r12, rbp, 4),
          Mem(index=rbx), Mem(index=r13, scale=8, disp=0x10), Mem(index=r12, scale=2, disp=-4),
          Mem(rip=True), Mem(rip=True, disp=-1), Mem(rip=True, disp=2**31 - 1),
          Mem(disp=0x1000), Mem(disp=-0x10)]


def _golden_lines():
    yield '# x86-64 encodings: Intel text, then hex.  Generated and checked against keystone and'
    yield '# capstone by `python tests/test_x86_64_encode.py`; branch targets are from address 0.'
    for row in TABLE:
        yield f'\n# {_row_id(row)}'
        samples = {k: [o for o in _SAMPLES[k] if row.evex or not isinstance(o, Reg) or o.num < 16]
                   for k in row.ops}        # (registers 16-31: EVEX rows only)
        n = max([len(samples[k]) for k in row.ops] or [1])
        seen = set()
        for i in range(n):
            ops = tuple(samples[k][(i + j * (k in ('ymm', 'zmm') or bool(row.vex) and k == 'xmm')) % len(samples[k])]
                        for j, k in enumerate(row.ops))
            if ops not in seen and _selects(row, ops):
                seen.add(ops)
                yield _golden_line(row.mnem, ops)
        assert seen, f'no sample reaches {_row_id(row)}'
    yield '\n# memory operand traps (absolute [disp32] lines are checked by capstone only)'
    for m in _TRAPS:
        for mnemonic, ops in (('mov', (r9, m)), ('mov', (m, rax)), ('movsd', (xmm9, m)),
                              ('mov', (Mem(m.base, m.index, m.scale, m.disp, m.rip, 8), sil))):
            yield _golden_line(mnemonic, ops)


def _selects(row, ops) -> bool:
    try:
        return select(row.mnem, *ops) is row
    except EncodeError:                 # registers 16-31 for a row that is not EVEX
        return False


def _golden_line(mnemonic, ops) -> str:
    code = check_oracles(mnemonic, ops, 0)
    return f'{intel(mnemonic, *ops):<47} {code.hex()}'


if __name__ == '__main__':
    print('\n'.join(_golden_lines()))
