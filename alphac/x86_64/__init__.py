"""x86-64 target: `TARGET`, the record the shared passes use (see alphac.lower.target).

Besides the record, this module holds the two hooks that connect the encoder to the shared
assembler and ELF writer: `encode_mi` (branches as rel32 to labels, data addresses as
RIP-relative with an R_X86_64_PC32-style relocation) and `apply_reloc`.
"""
from __future__ import annotations

from functools import partial

from alphac.lower.assemble import MI
from alphac.elf.writer import EM_X86_64
from alphac.lower.target import Target
from alphac.x86_64 import abi, select as _select
from alphac.x86_64.encode import Mem, Rel, encode


def encode_mi(mi: MI, pc: int, labels) -> tuple[bytes, list]:
    if mi.target is not None:
        size = len(encode(mi.mnemonic, Rel(0)).bytes)
        dest = labels.get(mi.target)
        disp = 0 if dest is None else dest - (pc + size)
        return encode(mi.mnemonic, Rel(disp)).bytes, []
    if mi.sym is not None:
        enc = encode(mi.mnemonic, *mi.ops)
        tail = len(enc.bytes) - enc.fixup
        return enc.bytes, [(enc.fixup, "pc32", mi.sym, -tail)]
    return encode(mi.mnemonic, *mi.ops).bytes, []


def apply_reloc(kind: str, data: bytearray, offset: int, P: int, S_plus_A: int) -> None:
    if kind != "pc32":
        raise ValueError(f"x86-64: unknown relocation {kind}")
    value = S_plus_A - P
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError("x86-64: PC-relative displacement out of range")
    data[offset:offset + 4] = value.to_bytes(4, "little", signed=True)


def level(lanes: int) -> dict:
    """What the levels change: VEX's three-operand forms at x86_64-v3 (AVX) and above, and the
    vector registers 16-31, which only EVEX names, at x86_64-v4 (AVX-512)."""
    return {"select": partial(_select.select, vex=True),
            "regfile": abi.REGFILE_V4 if lanes >= 8 else abi.REGFILE}


TARGET = Target(
    name="x86_64",
    regfile=abi.REGFILE,
    syscalls=abi.SYSCALLS,
    select=_select.select,
    entry_stub=_select.entry_stub,
    encode=encode_mi,
    apply_reloc=apply_reloc,
    text_pad=b"\xcc",
    fold_loads=True,
    capstone=("CS_ARCH_X86", "CS_MODE_64"),
    elf_machine=EM_X86_64,
    page_size=0x1000,
    constants=(("O_DIRECTORY", 0x10000),),
    level=level,
)
