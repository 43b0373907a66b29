"""The shared assembler: machine instructions with symbolic labels -> one .text section.

Each backend's selector produces, per function, a list of `MI` (one machine instruction, with
its mnemonic and operands as that ISA's encoder takes them) and `Label`s. `assemble` lays all
functions out in one section, resolves branches and calls between them, and leaves references
to data (globals) as relocations for the ELF writer. The ISA supplies `encode(mi, pc, labels)`,
which returns the instruction's bytes and any data relocations inside them; since every
instruction's size is fixed by its form (rel32 branches on x86-64, 4-byte words on AArch64),
two passes over each function suffice: one to place its labels, one to encode with the right
displacements. A function's code does not depend on where it is placed, except for its calls to
other functions: each function is laid out once per process, and the calls are encoded last.

The constant pool: an instruction that reads a binary64 constant from memory (x86-64, after
alphac.lower.fold.pool_constants) addresses `pool_symbol(bits)`; `constant_pool(relocs)` lays out
the executable's pool from the relocations that name such symbols: each distinct constant once,
in increasing order of its bits, 8 bytes each from a 16-byte-aligned start (the ELF writer
places it in .rodata, alphac.build.link_program).

Guarantees: deterministic; `Text.lines` maps code offsets to the Alpha source lines the
instructions came from (for `--emit asm`); `Text.funcs` gives each function's extent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from alphac.lower.memo import IdMemo


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


POOL = "f64."                                        # a pooled constant's symbol: POOL + 16 hex digits


def pool_symbol(bits: int) -> str:
    return f"{POOL}{bits & ((1 << 64) - 1):016x}"


def constant_pool(relocs: list[tuple[int, str, str, int]]) -> tuple[list[tuple[str, int]], bytes]:
    """The pool of the constants `relocs` address: (symbol, offset) each, and the bytes."""
    names = sorted({sym for _, _, sym, _ in relocs if sym.startswith(POOL)})
    return ([(n, 8 * k) for k, n in enumerate(names)],
            b"".join(int(n[len(POOL):], 16).to_bytes(8, "little") for n in names))


Encoder = Callable[[MI, int, dict[str, int]], tuple[bytes, list[tuple[int, str, str, int]]]]


def assemble(functions: list[tuple[str, list]], encode: Encoder, align: int = 16,
             pad: bytes = b"\x00") -> Text:
    """Each function laid out on its own (`_layout`: once per process for a selected function,
    whose items every program that has it shares), then placed; the branches and calls to other
    functions are encoded last, when every function's address is known."""
    code = bytearray()
    relocs: list[tuple[int, str, str, int]] = []
    funcs: list[tuple[str, int, int]] = []
    lines: list[tuple[int, str, int]] = []
    starts: dict[str, int] = {}
    far: list[tuple[str, int, int, MI]] = []
    for name, items in functions:
        while len(code) % align:
            code += pad
        start = starts[name] = len(code)
        body, rels, marks, calls = _layout(items, encode)
        code += body
        relocs += [(start + off, kind, sym, addend) for off, kind, sym, addend in rels]
        lines += [(start + off, name, line) for off, line in marks]
        far += [(name, start + off, size, it) for off, size, it in calls]
        funcs.append((name, start, len(body)))
    for name, pc, size, it in far:
        data, rels = encode(it, pc, _Scope(starts, name))
        if len(data) != size or rels:
            raise ValueError(f"{name}: {it.mnemonic} to {it.target} changed size when placed")
        code[pc:pc + size] = data
    return Text(bytes(code), relocs, funcs, lines)


_LAID = IdMemo(20000)


def _layout(items: list, encode: Encoder) -> tuple:
    """One function at offset 0: its bytes, data relocations, line marks (offset, line) and the
    branches to other functions (offset, size, MI), encoded there with no destination and placed
    by `assemble`. Its own labels are resolved here: a branch between them encodes the same at
    any address. Two passes: the first places the labels, the second encodes."""
    hit = _LAID.get(items)
    if hit is not None and hit[0] is encode:
        return hit[1]
    local: dict[str, int] = {}
    for _ in range(2):
        code = bytearray()
        relocs: list[tuple[int, str, str, int]] = []
        marks: list[tuple[int, int]] = []
        calls: list[tuple[int, int, MI]] = []
        for it in items:
            if isinstance(it, Label):
                local[it.name] = len(code)
                continue
            pc = len(code)
            if it.target is None:
                memo = it.encoded
                if memo is None or memo[0] is not encode:
                    memo = it.encoded = (encode, *encode(it, pc, None))
                data, rels = memo[1], memo[2]
            elif it.target.startswith("."):
                data, rels = encode(it, pc, local)
            else:
                data, rels = encode(it, pc, {})
                calls.append((pc, len(data), it))
            for off, kind, sym, addend in rels:
                relocs.append((pc + off, kind, sym, addend))
            if it.origin and (not marks or marks[-1][1] != it.origin):
                marks.append((pc, it.origin))
            code += data
    return _LAID.put(items, (encode, (bytes(code), relocs, marks, calls)))[1]


class _Scope(dict):
    """Label lookup inside one function: local labels (`.loop3`) first, then function names."""

    def __init__(self, labels: dict[str, int], fn: str):
        super().__init__()
        self.labels, self.fn = labels, fn

    def get(self, name: str, default=None):
        if name.startswith("."):
            return self.labels.get(f"{self.fn}{name}", default)
        return self.labels.get(name, default)
