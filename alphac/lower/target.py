"""The target record, and the one registry of targets.

Each backend package (`alphac.x86_64`, `alphac.aarch64`) exports one `TARGET`: everything
per-ISA that the shared passes call (the register file, instruction selection, encoding,
relocations, system calls), its ELF machine and page size (the ELF writer reads them), and the
GPU architectures a GPU owner on it may drive. Nothing above the backends knows an
instruction, a register name or a system-call number except through it.

`ISAS` lists the backends and `LEVELS` the levels above a backend's baseline (`x86_64-v3`: the
same backend with AVX2's f64x4; `x86_64-v4`: also AVX-512's f64x8), each with the Linux CPU flags
it needs: its executables refuse `cpu-level` on a CPU without them;
`target(name)`, `targets()`, `names()` and `gpu_targets()` are the registry the command line, the
deployment checker, the build, the PTX renderer and the artifacts read.
A backend that fails to import is an error, never a target quietly missing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

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
    elf_machine: int                 # e_machine
    page_size: int                   # the segments' alignment
    gpu_sms: tuple[int, ...] = ()    # GPU architectures a GPU owner on this ISA drives
    constants: tuple[tuple[str, int], ...] = ()   # ABI constants that differ per ISA (O_DIRECTORY)
    fold_loads: bool = False         # binary64 arithmetic takes a memory operand (alphac.lower.fold)
    lanes: int = 2                   # the widest binary64 vector: 2 (f64x2), 4 (f64x4, class w:
                                     # x86_64-v3's AVX2), 8 (f64x8, class z: x86_64-v4's AVX-512);
                                     # what the level adds is checked at start

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
        return out + "".join(f"const {name} = {v};\n" for name, v in self.constants) + formats.prelude()


ISAS = ("x86_64", "aarch64")         # the backends, each the package alphac.<name>
class Level(NamedTuple):
    isa: str                         # the backend
    lanes: int                       # Target.lanes
    flags: tuple[str, ...]           # what /proc/cpuinfo's flags must list to run it natively


LEVELS = {"x86_64-v3": Level("x86_64", 4, ("avx2",)),
          "x86_64-v4": Level("x86_64", 8, ("avx2", "avx512f", "avx512dq", "avx512cd", "avx512bw",
                                           "avx512vl"))}


class UnknownTarget(ValueError):
    pass


def names() -> tuple[str, ...]:
    return ISAS + tuple(LEVELS)


def target(name: str) -> Target:
    """The record of ISA or level `name`; UnknownTarget for any other name."""
    if name in LEVELS:
        return replace(target(LEVELS[name].isa), name=name, lanes=LEVELS[name].lanes)
    if name not in ISAS:
        raise UnknownTarget(f"unsupported target `{name}` (supported: {', '.join(names())})")
    return importlib.import_module(f"alphac.{name}").TARGET


def targets() -> dict[str, Target]:
    return {name: target(name) for name in ISAS}


def gpu_sms() -> tuple[int, ...]:
    return tuple(sorted({sm for t in targets().values() for sm in t.gpu_sms}))


def gpu_targets() -> tuple[str, ...]:
    """`ISA+sm_NN` for every GPU architecture of every ISA: x86_64+sm_86, x86_64+sm_90."""
    return tuple(f"{t.name}+sm_{sm}" for t in targets().values() for sm in t.gpu_sms)


def host_runs(name: str) -> bool:
    """Whether this host runs target `name`'s executables natively: its backend is this machine's
    and, for a level, Linux lists every flag the level needs for the first CPU."""
    import platform
    from pathlib import Path
    isa = LEVELS[name].isa if name in LEVELS else name
    if {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower()) != isa:
        return False
    if name not in LEVELS:
        return True
    try:
        flags = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")), "")
    except OSError:
        return False
    return set(LEVELS[name].flags) <= set(flags.partition(":")[2].split())
