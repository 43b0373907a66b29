"""The target record: everything per-ISA that the shared passes call, in one place.

Each backend package (`alphac.x86_64`, `alphac.aarch64`) exports one `TARGET`. Nothing above the
backends knows an instruction, a register name or a system-call number except through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from alphac.lower.regalloc import RegFile


@dataclass(frozen=True)
class Target:
    name: str                        # "x86_64" | "aarch64"
    regfile: RegFile
    syscalls: dict[str, int]
    select: Callable                 # (lir.Function, Allocation) -> [MI | Label]
    entry_stub: Callable             # () -> [MI]  (the `_start` function)
    encode: Callable                 # assemble.Encoder
    apply_reloc: Callable            # elf.writer apply_reloc
    text_pad: bytes                  # filler between functions (never executed)
    capstone: tuple[str, str]        # (arch, mode) constant names, for listings and tests
    constants: tuple[tuple[str, int], ...] = ()   # ABI constants that differ per ISA (O_DIRECTORY)

    def prelude(self) -> str:
        """The runtime-language constants for this target's system calls and ABI, and those of
        the binary formats every target shares (alphac.formats)."""
        from alphac import formats
        out = "".join(f"const SYS_{name} = {nr};\n" for name, nr in sorted(self.syscalls.items()))
        return out + "".join(f"const {name} = {v};\n" for name, v in self.constants) + formats.prelude()
