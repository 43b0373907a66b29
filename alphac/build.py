"""Building executables: the back half of the pipeline, as the list of passes it is.

    learner IR --alphac.lower.learner--> runtime-language source (+ the runtime, + the target's
    prelude) --rt.parse, rt_lower--> LIR --regalloc, target.select--> machine instructions
    --assemble--> .text --elf.link--> a static executable

Requires: a checked, differentiated learner (alphac.driver) and a target name. Guarantees: the
bytes depend only on the learner, the target and the compiler's own source (no time, no path,
no hash seed: every table is iterated in a fixed order). `Image` keeps what listings need.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from alphac.elf.writer import Reloc, Section, Symbol, layout, link
from alphac.ir.learner import Learner
from alphac.lower import learner as learner_lowering
from alphac.lower import rt
from alphac.lower.assemble import Text, assemble
from alphac.lower.lir import Program
from alphac.lower.regalloc import allocate
from alphac.lower.rt_lower import lower_program
from alphac.lower.target import Target
from alphac.runtime import source


class BuildError(Exception):
    """A build that cannot be done (an unsupported target, say); carries a refusal name."""


def targets() -> dict[str, Target]:
    from alphac.x86_64 import TARGET as X86
    out = {"x86_64": X86}
    try:
        from alphac.aarch64 import TARGET as A64
        out["aarch64"] = A64
    except ImportError:
        pass
    return out


def target(name: str) -> Target:
    t = targets().get(name)
    if t is None:
        raise BuildError(f"unsupported target `{name}` (supported: {', '.join(sorted(targets()))})")
    return t


@dataclass
class Image:
    """A built executable and what was made on the way, for listings and tests."""
    target: Target
    elf: bytes
    text: Text
    program: Program
    rt_source: str
    addresses: dict[str, int]


RUNTIME = ("core", "ckpt", "single")


@lru_cache(maxsize=64)
def _parsed(text: str, name: str) -> tuple:
    """The runtime's sources are parsed once per process (their trees are never modified)."""
    return tuple(rt.parse(text, name))


def program_for(lr: Learner, tgt: Target, runtime=RUNTIME, extra: str = "",
                blobs: dict[str, bytes] | None = None) -> tuple[Program, str]:
    """LIR for a learner executable: the prelude, the runtime, the generated learner code."""
    gen, gen_blobs = learner_lowering.generate(lr)
    items = list(_parsed(tgt.prelude(), "prelude.rt"))
    for name in runtime:
        items += _parsed(source(name), f"{name}.rt")
    items += rt.parse(gen, f"{lr.name}.rt")
    if extra:
        items += rt.parse(extra, "extra.rt")
    all_blobs = dict(gen_blobs)
    all_blobs.update(blobs or {})
    return lower_program(items, all_blobs), gen


def link_program(prog: Program, tgt: Target) -> tuple[bytes, Text, dict[str, int]]:
    functions = [("_start", tgt.entry_stub())]
    for fn in prog.functions:
        functions.append((fn.name, tgt.select(fn, allocate(fn, tgt.regfile))))
    text = assemble(functions, tgt.encode, pad=tgt.text_pad)
    sections = [Section(".text", text.code)]
    symbols = [Symbol(name, ".text", off, size, "func", "global" if name == "_start" else "local")
               for name, off, size in text.funcs]
    for sec in (".rodata", ".data", ".bss"):
        blob = bytearray()
        for g in prog.globals:
            if g.section != sec:
                continue
            while len(blob) % g.align:
                blob.append(0)
            symbols.append(Symbol(g.name, sec, len(blob), g.size, "object"))
            blob += g.init if sec != ".bss" else bytes(g.size)
        if blob:
            data = bytes(blob) if sec != ".bss" else b""
            sections.append(Section(sec, data, size=len(blob)))
    relocs = [Reloc(".text", off, kind, sym, addend) for off, kind, sym, addend in text.relocs]
    elf = link(tgt.name, sections, symbols, relocs, "_start", tgt.apply_reloc)
    return elf, text, layout(tgt.name, sections)


def build_learner(lr: Learner, target_name: str) -> Image:
    from alphac.lower.ckpt import single_source
    tgt = target(target_name)
    extra, blobs = single_source(lr)
    prog, gen = program_for(lr, tgt, extra=extra, blobs=blobs)
    elf, text, addrs = link_program(prog, tgt)
    return Image(tgt, elf, text, prog, gen, addrs)


ROLE_RUNTIME = ("core", "net", "ckpt", "role")


def build_role(plan, role, target_name: str | None = None) -> Image:
    """One role of a deployment: its projected program over the role runtime."""
    from alphac.lower.role import generate
    tgt = target(target_name or plan.dep.target_of(role))
    text, blobs = generate(plan, role)
    prog, gen = program_for(plan.lr, tgt, runtime=ROLE_RUNTIME, extra=text, blobs=blobs)
    elf, code, addrs = link_program(prog, tgt)
    return Image(tgt, elf, code, prog, gen + "\n" + text, addrs)
