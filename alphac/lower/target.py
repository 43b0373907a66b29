"""The target record, and the one registry of targets.

Each backend package (`alphac.x86_64`, `alphac.aarch64`) exports one `TARGET`: everything
per-ISA that the shared passes call (the register file, instruction selection, encoding,
relocations, system calls), its ELF machine and page size (the ELF writer reads them). Nothing above the backends knows an
instruction, a register name or a system-call number except through it.

The names of the targets, their levels and GPU architectures are data in alphac/targets.py
(below every layer, so that the deployment checker and the PTX renderer read them without
reaching up here); `target(name)` and `targets()` find each one's record, importing its backend
package by name: the registry of plug-ins.
A backend that fails to import is an error, never a target quietly missing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Callable

from alphac.elf.writer import BASE_ADDRESS, PT_NOTE
from alphac.lower.regalloc import RegFile
from alphac.targets import ISAS, LEVELS, names


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
    elf_machine: int                 # e_machine
    page_size: int                   # the segments' alignment
    constants: tuple[tuple[str, int], ...] = ()   # ABI constants that differ per ISA (O_DIRECTORY)
    fold_loads: bool = False         # binary64 arithmetic takes a memory operand (alphac.lower.fold)
    lanes: int = 2                   # the widest binary64 vector: 2 (f64x2), 4 (f64x4, class w:
                                     # x86_64-v3's AVX2), 8 (f64x8, class z: x86_64-v4's AVX-512);
                                     # what the level adds is checked at start
    level: Callable | None = None    # (lanes) -> the fields a level of this ISA changes (its
                                     # register file, its selector's instruction forms)

    @property
    def wide(self) -> bool:
        return self.lanes >= 4

    @property
    def isa(self) -> str:
        """The backend: the name without its level (x86_64-v3 -> x86_64)."""
        return self.name.partition("-")[0]

    def prelude(self) -> str:
        """The runtime-language constants for this target's system calls and ABI, and those of
        the binary formats every target shares (alphac.formats)."""
        from alphac import formats
        out = "".join(f"const SYS_{name} = {nr};\n" for name, nr in sorted(self.syscalls.items()))
        out += f"const CPU_AVX2 = {int(self.lanes >= 4)};\n"      # f64x4, and the start's check
        out += f"const CPU_AVX512 = {int(self.lanes >= 8)};\n"    # f64x8, and its check
        out += f"const ELF_BASE = {BASE_ADDRESS};\nconst ELF_PT_NOTE = {PT_NOTE};\n"   # --version's build ID
        return out + "".join(f"const {name} = {v};\n" for name, v in self.constants) + formats.prelude()


class UnknownTarget(ValueError):
    pass


def target(name: str) -> Target:
    """The record of ISA or level `name` (alphac.targets names them); UnknownTarget for any other."""
    if name in LEVELS:
        base, lanes = target(LEVELS[name].isa), LEVELS[name].lanes
        return replace(base, name=name, lanes=lanes, **(base.level(lanes) if base.level else {}))
    if name not in ISAS:
        raise UnknownTarget(f"unsupported target `{name}` (supported: {', '.join(names())})")
    return importlib.import_module(f"alphac.{name}").TARGET


def targets() -> dict[str, Target]:
    return {name: target(name) for name in ISAS}
