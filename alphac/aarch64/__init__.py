"""AArch64 target: `TARGET`, the record the shared passes use (see alphac.lower.target).

Besides the record, this module holds the two hooks that connect the encoder to the shared
assembler and ELF writer: `encode_mi` (branches and calls as pc-relative displacements to labels,
checked against their range; data addresses as adrp + add with `adrp` and `add_lo12`
relocations) and `apply_reloc`, which patches those two with the encoder's patchers.
"""
from __future__ import annotations

from alphac.aarch64 import abi, select as _select
from alphac.aarch64.encode import Imm, Label, encode_bytes, patch_add_lo12, patch_adrp
from alphac.lower.assemble import MI
from alphac.elf.writer import EM_AARCH64
from alphac.lower.target import Target

RELOC_OF = {"adrp": "adrp", "add": "add_lo12"}     # mnemonic -> relocation kind of its address
RANGE = {"b": 1 << 27, "bl": 1 << 27}              # +- bytes; b.cond: 1 << 20


def encode_mi(mi: MI, pc: int, labels) -> tuple[bytes, list]:
    if mi.target is not None:
        dest = labels.get(mi.target)
        disp = 0 if dest is None else dest - pc
        reach = RANGE.get(mi.mnemonic, 1 << 20)
        if not -reach <= disp < reach:
            raise ValueError(f"aarch64: {mi.mnemonic} to {mi.target} is {disp} bytes away, "
                             f"beyond its range of +-{reach} bytes")
        return encode_bytes(mi.mnemonic, *mi.ops, Label(disp)), []
    if mi.sym is not None:
        return encode_bytes(mi.mnemonic, *mi.ops), [(0, RELOC_OF[mi.mnemonic], mi.sym, 0)]
    return encode_bytes(mi.mnemonic, *mi.ops), []


def apply_reloc(kind: str, data: bytearray, offset: int, P: int, S_plus_A: int) -> None:
    word = int.from_bytes(data[offset:offset + 4], "little")
    if kind == "adrp":                                # R_AARCH64_ADR_PREL_PG_HI21
        word = patch_adrp(word, (S_plus_A & ~0xFFF) - (P & ~0xFFF))
    elif kind == "add_lo12":                          # R_AARCH64_ADD_ABS_LO12_NC
        word = patch_add_lo12(word, S_plus_A)
    else:
        raise ValueError(f"aarch64: unknown relocation {kind}")
    data[offset:offset + 4] = word.to_bytes(4, "little")


TARGET = Target(
    name="aarch64",
    regfile=abi.REGFILE,
    syscalls=abi.SYSCALLS,
    select=_select.select,
    entry_stub=_select.entry_stub,
    encode=encode_mi,
    apply_reloc=apply_reloc,
    text_pad=encode_bytes("brk", Imm(0)),            # 4 bytes: tiles the 16-byte alignment
    capstone=("CS_ARCH_ARM64", "CS_MODE_ARM"),
    elf_machine=EM_AARCH64,
    page_size=0x10000,               # 64 KiB, so that kernels with 64K pages load it
    constants=(("O_DIRECTORY", 0x4000), ("CPU_NEON", 1)),   # NEON: the q builtins on f64x2
)
