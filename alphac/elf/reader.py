"""An ELF64 little-endian reader: the header, section headers and names, symbols, relocations.

What it does
    ``Elf(blob)`` reads the file header and the section header table; ``sections`` lists every
    section (index, name and the ``sh_*`` fields), ``section(name)`` finds the first of a name,
    ``data(section)`` gives its bytes (none for ``SHT_NOBITS``), ``symbols(section)`` the entries
    of a ``SHT_SYMTAB``/``SHT_DYNSYM`` section with their names from its linked string table, and
    ``relocations(section)`` the entries of a ``SHT_REL``/``SHT_RELA`` section. It is what the
    cubin reader (``alphac.ptx.cubin``) and the disassembly listing need; program headers are not
    read.

Requires
    The bytes of the file. Nothing beyond the standard library.

Guarantees
    Every offset, length, count and index read from the file is checked against the file (or the
    table it indexes) before use: a file header or section header table cut short, a section's
    bytes past the end of the file, a name or string table entry outside its table or without its
    NUL, an entry size that is not the format's, a symbol table's string table or a relocation's
    symbol that does not exist, extended section numbering (not supported) all raise ``ElfError``
    (a ``ValueError``) with a one-line reason, never another exception. Names are decoded as
    Latin-1, so any bytes decode. The reader never changes or keeps anything beyond ``blob``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")     # 64 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")           # 64 bytes
SYM = struct.Struct("<IBBHQQ")                # 24 bytes
REL = struct.Struct("<QQ")                    # 16 bytes
RELA = struct.Struct("<QQq")                  # 24 bytes
SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 2, 4, 8, 9, 11
SHN_XINDEX = 0xFFFF
SH_TYPES = {i: "SHT_" + n for i, n in enumerate(
    "NULL PROGBITS SYMTAB STRTAB RELA HASH DYNAMIC NOTE NOBITS REL SHLIB DYNSYM".split())}


class ElfError(ValueError):
    """A file that is not a well-formed ELF64 little-endian file; the message says where."""


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    bind: int                                  # st_info >> 4: 0 local, 1 global, 2 weak
    type: int                                  # st_info & 15: 0 none, 1 object, 2 func, ...
    other: int
    shndx: int


@dataclass(frozen=True)
class Relocation:
    offset: int
    type: int                                  # r_info & 0xffffffff
    symbol: int                                # r_info >> 32, an index into the linked table
    addend: int                                # 0 for SHT_REL


def _cstring(table: bytes, pos: int, what: str) -> str:
    end = table.find(b"\0", pos)
    if not 0 <= pos < len(table) or end < 0:
        raise ElfError(f"{what}: name at {pos} is outside its string table or has no NUL")
    return table[pos:end].decode("latin-1")


class Elf:
    def __init__(self, blob: bytes):
        self.blob = bytes(blob)
        if len(self.blob) < EHDR.size or self.blob[:4] != b"\x7fELF":
            raise ElfError("not an ELF file (no magic or header cut short)")
        if self.blob[4:6] != b"\x02\x01":
            raise ElfError("not a 64-bit little-endian ELF file")
        (ident, self.type, self.machine, _, self.entry, _, shoff, self.flags, _, _, _,
         shentsize, shnum, shstrndx) = EHDR.unpack_from(self.blob)
        self.abiversion = ident[8]
        if shoff == 0:
            shnum = 0
        elif shnum == 0 or shstrndx == SHN_XINDEX:
            raise ElfError("extended section numbering is not supported")
        elif shentsize != SHDR.size:
            raise ElfError(f"section header size {shentsize}, not {SHDR.size}")
        if shoff + shnum * SHDR.size > len(self.blob):
            raise ElfError(f"section header table ({shnum} at {shoff}) runs past the file")
        raw = [SHDR.unpack_from(self.blob, shoff + i * SHDR.size) for i in range(shnum)]
        for i, h in enumerate(raw):
            if h[1] != SHT_NOBITS and h[4] + h[5] > len(self.blob):
                raise ElfError(f"section {i}: bytes {h[4]}+{h[5]} run past the file")
        if shnum and shstrndx >= shnum:
            raise ElfError(f"section name table index {shstrndx} of {shnum} sections")
        names = self._bytes(raw[shstrndx]) if shnum else b""
        self.sections = tuple(Section(i, _cstring(names, h[0], f"section {i}"), *h[1:])
                              for i, h in enumerate(raw))

    def _bytes(self, h) -> bytes:
        return b"" if h[1] == SHT_NOBITS else self.blob[h[4]:h[4] + h[5]]

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def data(self, s: Section) -> bytes:
        return b"" if s.type == SHT_NOBITS else self.blob[s.offset:s.offset + s.size]

    def _entries(self, s: Section, types: tuple[int, ...], st: struct.Struct) -> list[tuple]:
        if s.type not in types:
            raise ElfError(f"section {s.name}: type {s.type:#x}, not {types}")
        if s.size and (s.entsize != st.size or s.size % st.size):
            raise ElfError(f"section {s.name}: entries of {s.entsize} bytes in {s.size}, "
                           f"not {st.size}")
        data = self.data(s)
        return [st.unpack_from(data, i) for i in range(0, len(data), st.size)]

    def _linked(self, s: Section) -> Section:
        if not 0 < s.link < len(self.sections):
            raise ElfError(f"section {s.name}: linked section {s.link} does not exist")
        return self.sections[s.link]

    def symbols(self, s: Section) -> tuple[Symbol, ...]:
        entries = self._entries(s, (SHT_SYMTAB, SHT_DYNSYM), SYM)
        names = self.data(self._linked(s))
        return tuple(Symbol(_cstring(names, e[0], f"{s.name}[{i}]"), e[4], e[5], e[1] >> 4,
                            e[1] & 15, e[2], e[3]) for i, e in enumerate(entries))

    def relocations(self, s: Section) -> tuple[Relocation, ...]:
        entries = (self._entries(s, (SHT_RELA,), RELA) if s.type == SHT_RELA
                   else self._entries(s, (SHT_REL,), REL))
        count = len(self.symbols(self._linked(s)))
        out = []
        for i, (offset, info, *addend) in enumerate(entries):
            if info >> 32 >= count:
                raise ElfError(f"{s.name}[{i}]: symbol {info >> 32} of {count}")
            out.append(Relocation(offset, info & 0xFFFFFFFF, info >> 32,
                                  addend[0] if addend else 0))
        return tuple(out)
