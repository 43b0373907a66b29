"""The shared assembler: machine instructions with symbolic labels -> one .text section.

Each backend's selector produces, per function, a list of `MI` (one machine instruction, with
its mnemonic and operands as that ISA's encoder takes them) and `Label`s. `assemble` lays all
functions out in one section, resolves branches and calls between them, and leaves references
to data (globals) as relocations for the ELF writer. The ISA supplies `encode(mi, pc, labels)`,
which returns the instruction's bytes and any data relocations inside them; since every
instruction's size is fixed by its form (rel32 branches on x86-64, 4-byte words on AArch64),
two passes suffice: one to place the labels, one to encode with the right displacements. An
instruction that names no label encodes the same anywhere: it is encoded once (`MI.encoded`).

Guarantees: deterministic; `Text.lines` maps code offsets to the Alpha source lines the
instructions came from (for `--emit asm`); `Text.funcs` gives each function's extent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class MI:
    mnemonic: str
    ops: tuple
    origin: int = 0
    target: str | None = None      # a label or function this branch/call refers to
    sym: str | None = None         # a data symbol this instruction addresses
    # (encoder, bytes, relocations) once encoded: an instruction without a `target` encodes the
    # same at every address (data addresses are relocations), and the selected instructions of
    # a function are shared by every program that has it (alphac.build.selected), so each is
    # encoded once per process
    encoded: tuple | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Label:
    name: str


@dataclass
class Text:
    code: bytes
    relocs: list[tuple[int, str, str, int]]          # (offset, kind, symbol, addend)
    funcs: list[tuple[str, int, int]]                # (name, offset, size)
    lines: list[tuple[int, str, int]] = field(default_factory=list)   # (offset, function, line)


Encoder = Callable[[MI, int, dict[str, int]], tuple[bytes, list[tuple[int, str, str, int]]]]


def assemble(functions: list[tuple[str, list]], encode: Encoder, align: int = 16,
             pad: bytes = b"\x00") -> Text:
    labels: dict[str, int] = {}
    for _ in range(2):
        code = bytearray()
        relocs: list[tuple[int, str, str, int]] = []
        funcs: list[tuple[str, int, int]] = []
        lines: list[tuple[int, str, int]] = []
        for name, items in functions:
            while len(code) % align:
                code += pad
            start = len(code)
            labels[name] = start
            for it in items:
                if isinstance(it, Label):
                    labels[f"{name}{it.name}"] = len(code)
                    continue
                pc = len(code)
                if it.target is None:
                    memo = it.encoded
                    if memo is None or memo[0] is not encode:
                        memo = it.encoded = (encode, *encode(it, pc, None))
                    data, rels = memo[1], memo[2]
                else:
                    data, rels = encode(it, pc, _Scope(labels, name))
                for off, kind, sym, addend in rels:
                    relocs.append((pc + off, kind, sym, addend))
                if it.origin and (not lines or lines[-1][1:] != (name, it.origin)):
                    lines.append((pc, name, it.origin))
                code += data
            funcs.append((name, start, len(code) - start))
    return Text(bytes(code), relocs, funcs, lines)


class _Scope(dict):
    """Label lookup inside one function: local labels (`.loop3`) first, then function names."""

    def __init__(self, labels: dict[str, int], fn: str):
        super().__init__()
        self.labels, self.fn = labels, fn

    def get(self, name: str, default=None):
        if name.startswith("."):
            return self.labels.get(f"{self.fn}{name}", default)
        return self.labels.get(name, default)
