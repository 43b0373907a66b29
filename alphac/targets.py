"""The targets as data, at the bottom of the layers so that every package reads them: `ISAS`
(the backends, each the package alphac.<name> whose `TARGET` alphac.lower.target finds by name)
and `LEVELS` above a baseline (x86_64-v3: AVX2's f64x4; x86_64-v4: AVX-512's f64x8), with the
CPU flags they need (`cpu-level` without them), the GPU architectures a GPU owner drives, and
how the launcher runs their executables on a host that cannot (`emulator`: a command; `()`: as
they are; None: refused). Nothing else lists a target; this requires nothing of alphac.
"""
from __future__ import annotations

from typing import NamedTuple


class Isa(NamedTuple):
    gpu_sms: tuple[int, ...]              # GPU architectures a GPU owner on this ISA drives
    emulator: tuple[str, ...] | None      # the command that runs its executables elsewhere


class Level(NamedTuple):
    isa: str                              # the backend
    lanes: int                            # Target.lanes
    flags: tuple[str, ...]                # what /proc/cpuinfo's flags must list to run it natively
    extension: str                        # what those flags are called
    emulator: tuple[str, ...] | None      # as Isa.emulator (qemu emulates AVX2, not AVX-512)


ISAS = {"x86_64": Isa((86, 90), ()),      # Ampere, Hopper
        "aarch64": Isa((), ("qemu-aarch64",))}
LEVELS = {"x86_64-v3": Level("x86_64", 4, ("avx2",), "AVX2", ("qemu-x86_64", "-cpu", "max")),
          "x86_64-v4": Level("x86_64", 8, ("avx2", "avx512f", "avx512dq", "avx512cd", "avx512bw",
                                           "avx512vl"), "AVX-512", None)}


def names() -> tuple[str, ...]:
    return tuple(ISAS) + tuple(LEVELS)


def gpu_sms() -> tuple[int, ...]:
    return tuple(sorted({sm for isa in ISAS.values() for sm in isa.gpu_sms}))


def gpu_targets() -> tuple[str, ...]:
    """`HOST+sm_NN` for every GPU architecture of every ISA, HOST the ISA or one of its levels
    (the host part's lanes; the kernels are the same): x86_64+sm_86, x86_64+sm_90,
    x86_64-v3+sm_86, ..., x86_64-v4+sm_90."""
    return tuple(f"{host}+sm_{sm}" for name, isa in ISAS.items()
                 for host in (name, *(lv for lv, l in LEVELS.items() if l.isa == name)) for sm in isa.gpu_sms)


def emulator(name: str) -> tuple[str, ...] | None:
    """How target `name`'s executables run on a host that does not run them natively (a GPU
    owner's, `HOST+sm_NN`: never, its driver's calls are not emulated)."""
    if "+" in name:
        return None
    return LEVELS[name].emulator if name in LEVELS else ISAS[name].emulator


def below(name: str) -> tuple[str, ...]:
    """The levels of level `name`'s backend with fewer lanes, widest first, then the backend."""
    lv = LEVELS[name]
    return tuple(sorted((n for n, l in LEVELS.items() if l.isa == lv.isa and l.lanes < lv.lanes),
                        key=lambda n: -LEVELS[n].lanes)) + (lv.isa,)


def host_runs(name: str) -> bool:
    """Whether this host runs target `name`'s executables natively: its backend is this machine's
    and, for a level, Linux lists every flag the level needs for the first CPU (for a GPU owner,
    `HOST+sm_NN`, those of its host part)."""
    import platform
    from pathlib import Path
    name = name.partition("+")[0]
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
