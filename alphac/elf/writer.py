"""Static ELF64 executable writer for x86-64 and AArch64 Linux: one writer, every ISA.

What it does
    ``link`` turns up to four loadable sections (``.text``, ``.rodata``, ``.data``, ``.bss``),
    their symbols and their relocations into the bytes of a static executable. ``layout`` tells
    the address every section will get, before anything is linked, so that a compiler or a test
    can predict addresses. Relocations are resolved here (the writer computes P, the address of
    the place, and S+A, the symbol's address plus addend) and applied by the target's
    ``apply_reloc(kind, section_bytes, offset, P, S_plus_A)``: the ISA knows its encodings.

Requires
    Nothing beyond the standard library. Section names come from ``SECTION_ORDER``; alignments
    are powers of two no larger than the machine's page size; ``.bss`` has no bytes, only a size.

Guarantees
    * ELF64 little-endian ``ET_EXEC``; no ``PT_INTERP``, no ``PT_DYNAMIC``, no ``.dynamic``.
    * File layout, contiguous (no page padding in the file)::

          ELF header | program headers | .note.gnu.build-id | .rodata     -> PT_LOAD R
          .text                                                          -> PT_LOAD R+X
          .data (.bss follows in memory only)                            -> PT_LOAD R+W
          .symtab | .strtab | .shstrtab | section headers                   (not loaded)

      then ``PT_NOTE`` (the build-id note) and ``PT_GNU_STACK`` (R+W). The R segment starts at
      file offset 0 and address ``BASE_ADDRESS``; every later segment starts at the next page
      boundary past the previous segment's memory end, plus ``offset % page`` so that
      vaddr == offset (mod page). Each section's file offset is aligned to its own ``align``.
      No segment is both writable and executable. An empty section is left out of the file and
      the section table; a segment left without sections (RW) is left out.
    * Build-id: the ``NT_GNU_BUILD_ID`` descriptor is the first 20 bytes of SHA-256 of the
      whole file computed with the descriptor zeroed.
    * Symbols: a null symbol, then locals, then globals, each sorted by (section file order,
      offset, name); input order never shows in the output. The bytes depend only on inputs.
    * Bad input (unknown machine, section, symbol, entry; out-of-range offsets; duplicates)
      raises ``LinkError``, a ``ValueError``.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Callable

# --------------------------------------------------------------------------------------------
# Constants: every number of the ELF format this writer uses, in one table.
# --------------------------------------------------------------------------------------------
ELFMAG = b"\x7fELF"
ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_SYSV = 2, 1, 1, 0
ET_EXEC = 2
EM_X86_64, EM_AARCH64 = 62, 183

PT_LOAD, PT_NOTE, PT_GNU_STACK = 1, 4, 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOTE, SHT_NOBITS = 0, 1, 2, 3, 7, 8
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
SHN_UNDEF, SHN_ABS = 0, 0xFFF1

STB_LOCAL, STB_GLOBAL = 0, 1
STT_OBJECT, STT_FUNC = 1, 2
STV_DEFAULT = 0

NT_GNU_BUILD_ID = 3
NOTE_NAME = b"GNU\0"
BUILD_ID_SIZE = 20                       # first 20 bytes of SHA-256

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # 64 bytes
PHDR = struct.Struct("<IIQQQQQQ")          # 56 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")        # 64 bytes
SYM = struct.Struct("<IBBHQQ")             # 24 bytes
NHDR = struct.Struct("<III")               # namesz, descsz, type

BASE_ADDRESS = 0x400000
NOTE_ALIGN = 4
META_ALIGN = 8                           # .symtab and the section header table
STACK_ALIGN = 16                         # p_align of PT_GNU_STACK


# section name -> (sh_type, sh_flags); the order is the file and address order.
SECTION_ORDER = {
    ".rodata": (SHT_PROGBITS, SHF_ALLOC),
    ".text": (SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR),
    ".data": (SHT_PROGBITS, SHF_ALLOC | SHF_WRITE),
    ".bss": (SHT_NOBITS, SHF_ALLOC | SHF_WRITE),
}

# PT_LOAD segments: flags and the sections they hold (the first also holds headers + note).
SEGMENTS = (
    (PF_R, (".rodata",)),
    (PF_R | PF_X, (".text",)),
    (PF_R | PF_W, (".data", ".bss")),
)

SYMBOL_KINDS = {"func": STT_FUNC, "object": STT_OBJECT}
BINDINGS = {"local": STB_LOCAL, "global": STB_GLOBAL}


class LinkError(ValueError):
    """The inputs cannot make an executable; the message says which input and why."""


@dataclass(frozen=True)
class Section:
    """A loadable section: ``data`` is its bytes (``b''`` for ``.bss``, whose ``size`` counts)."""
    name: str
    data: bytes
    size: int = None
    align: int = 16

    def __post_init__(self):
        if self.size is None:
            object.__setattr__(self, "size", len(self.data))


@dataclass(frozen=True)
class Symbol:
    """A named place: ``offset`` bytes into ``section``, ``size`` bytes long."""
    name: str
    section: str
    offset: int
    size: int
    kind: str                            # 'func' | 'object'
    binding: str = "local"               # 'local' | 'global'


@dataclass(frozen=True)
class Reloc:
    """A place at ``offset`` in ``section`` to patch with ``symbol``'s address + ``addend``."""
    section: str
    offset: int
    kind: str
    symbol: str
    addend: int = 0


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Placed:
    offset: int
    vaddr: int
    size: int


@dataclass(frozen=True)
class _Plan:
    e_machine: int
    page: int
    sections: dict        # name -> Section, as given
    placed: dict          # name -> _Placed, every given section (empty ones where they would be)
    loads: list           # (flags, offset, vaddr, filesz, memsz)
    note_offset: int
    end: int              # end of the loaded part of the file


def _align(n: int, a: int) -> int:
    return (n + a - 1) & -a


def _note() -> bytes:
    return NHDR.pack(len(NOTE_NAME), BUILD_ID_SIZE, NT_GNU_BUILD_ID) + NOTE_NAME + bytes(BUILD_ID_SIZE)


def _check_sections(machine, sections) -> tuple[int, int, dict]:
    e_machine, page = getattr(machine, "elf_machine", None), getattr(machine, "page_size", None)
    if not isinstance(e_machine, int) or not isinstance(page, int) or page & (page - 1):
        raise LinkError(f"not a machine: {type(machine).__name__} (a target record, "
                        "alphac.lower.target, with its ELF machine and page size)")
    by_name = {}
    for s in sections:
        if not isinstance(s, Section):
            raise LinkError(f"not a Section: {s!r}")
        if s.name not in SECTION_ORDER:
            raise LinkError(f"section {s.name!r} not allowed; expected one of {list(SECTION_ORDER)}")
        if s.name in by_name:
            raise LinkError(f"section {s.name!r} given twice")
        if not isinstance(s.data, (bytes, bytearray)):
            raise LinkError(f"section {s.name!r}: data must be bytes")
        if not isinstance(s.align, int) or s.align < 1 or s.align & (s.align - 1) or s.align > page:
            raise LinkError(f"section {s.name!r}: align {s.align!r} is not a power of two <= {page:#x}")
        if s.name == ".bss":
            if s.data or not isinstance(s.size, int) or s.size < 0:
                raise LinkError(".bss must have data b'' and a size >= 0")
        elif s.size != len(s.data):
            raise LinkError(f"section {s.name!r}: size {s.size!r} != len(data) {len(s.data)}")
        by_name[s.name] = s
    if by_name.get(".text") is None or by_name[".text"].size == 0:
        raise LinkError("a non-empty .text section is required")
    return e_machine, page, by_name


def _plan(machine, sections) -> _Plan:
    e_machine, page, secs = _check_sections(machine, sections)
    live = lambda name: name in secs and secs[name].size > 0
    emitted = [i == 0 or any(live(n) for n in names) for i, (_, names) in enumerate(SEGMENTS)]
    n_phdrs = sum(emitted) + 2                          # + PT_NOTE + PT_GNU_STACK
    note_offset = _align(EHDR.size + PHDR.size * n_phdrs, NOTE_ALIGN)

    pos, vend = note_offset + len(_note()), BASE_ADDRESS   # file end, memory end so far
    placed, loads = {}, []
    for i, (flags, names) in enumerate(SEGMENTS):
        if i == 0:
            seg_off, seg_vaddr, fpos = 0, BASE_ADDRESS, pos
        else:
            first = next((secs[n] for n in names if live(n)), None)
            seg_off = _align(pos, first.align if first else 1)
            seg_vaddr = _align(vend, page) + seg_off % page
            fpos = seg_off
        delta = seg_vaddr - seg_off                     # a multiple of the page size
        mend = fpos + delta
        for name in names:
            if name not in secs:
                continue
            s = secs[name]
            if SECTION_ORDER[name][0] == SHT_NOBITS:
                vaddr = _align(mend, s.align)
                placed[name] = _Placed(vaddr - delta, vaddr, s.size)
                if s.size:
                    mend = vaddr + s.size
            else:
                off = _align(fpos, s.align)
                placed[name] = _Placed(off, off + delta, s.size)
                if s.size:
                    fpos, mend = off + s.size, off + delta + s.size
        if emitted[i]:
            loads.append((flags, seg_off, seg_vaddr, fpos - seg_off, mend - seg_vaddr))
            pos, vend = fpos, mend
    return _Plan(e_machine, page, secs, placed, loads, note_offset, pos)


def layout(machine, sections) -> dict[str, int]:
    """Section name -> virtual address that ``link`` gives it (for every given section)."""
    plan = _plan(machine, sections)
    return {name: p.vaddr for name, p in plan.placed.items()}


# --------------------------------------------------------------------------------------------
# Link
# --------------------------------------------------------------------------------------------
def _check_symbols(plan: _Plan, symbols) -> dict:
    by_name = {}
    for y in symbols:
        if not isinstance(y, Symbol):
            raise LinkError(f"not a Symbol: {y!r}")
        if not isinstance(y.name, str) or not y.name or "\0" in y.name:
            raise LinkError(f"bad symbol name {y.name!r}")
        if y.name in SECTION_ORDER:
            raise LinkError(f"symbol {y.name!r} has a section's name")
        if y.name in by_name:
            raise LinkError(f"symbol {y.name!r} defined twice")
        if y.section not in plan.sections:
            raise LinkError(f"symbol {y.name!r}: no section {y.section!r}")
        if y.kind not in SYMBOL_KINDS:
            raise LinkError(f"symbol {y.name!r}: kind {y.kind!r} not in {list(SYMBOL_KINDS)}")
        if y.binding not in BINDINGS:
            raise LinkError(f"symbol {y.name!r}: binding {y.binding!r} not in {list(BINDINGS)}")
        limit = plan.sections[y.section].size
        if not (isinstance(y.offset, int) and isinstance(y.size, int)
                and 0 <= y.offset and 0 <= y.size and y.offset + y.size <= limit):
            raise LinkError(f"symbol {y.name!r}: [{y.offset}, +{y.size}) outside {y.section} "
                            f"of size {limit}")
        by_name[y.name] = y
    return by_name


def _address(plan: _Plan, symbols: dict, name: str, what: str) -> int:
    if name in symbols:
        y = symbols[name]
        return plan.placed[y.section].vaddr + y.offset
    if name in plan.placed:
        return plan.placed[name].vaddr
    raise LinkError(f"{what}: unknown symbol {name!r}")


def _apply_relocs(plan: _Plan, symbols: dict, relocs, apply_reloc) -> dict:
    body = {name: bytearray(s.data) for name, s in plan.sections.items()}
    order = list(SECTION_ORDER)
    checked = []
    for r in relocs:
        if not isinstance(r, Reloc):
            raise LinkError(f"not a Reloc: {r!r}")
        if r.section not in plan.sections or r.section == ".bss":
            raise LinkError(f"{r}: no section {r.section!r} with bytes to patch")
        if not (isinstance(r.offset, int) and 0 <= r.offset < len(body[r.section])):
            raise LinkError(f"{r}: offset outside {r.section}")
        if not isinstance(r.addend, int) or not isinstance(r.kind, str):
            raise LinkError(f"{r}: kind must be a str and addend an int")
        checked.append(r)
    checked.sort(key=lambda r: (order.index(r.section), r.offset, r.kind, r.symbol, r.addend))
    for r in checked:
        s_plus_a = _address(plan, symbols, r.symbol, str(r)) + r.addend
        p = plan.placed[r.section].vaddr + r.offset
        buf = body[r.section]
        try:
            apply_reloc(r.kind, buf, r.offset, p, s_plus_a)
        except Exception as e:
            e.add_note(f"while applying {r} (P={p:#x}, S+A={s_plus_a:#x})")
            raise
        if len(buf) != plan.sections[r.section].size:
            raise LinkError(f"{r}: apply_reloc changed the size of {r.section}")
    return body


def _symtab(plan: _Plan, symbols: dict, shndx: dict) -> tuple[bytes, bytes, int]:
    """(.symtab bytes, .strtab bytes, index of the first global symbol)."""
    order = list(SECTION_ORDER)
    ordered = sorted(symbols.values(), key=lambda y: (
        BINDINGS[y.binding], order.index(y.section), y.offset, y.name))
    symtab, strtab = [SYM.pack(0, 0, 0, SHN_UNDEF, 0, 0)], bytearray(b"\0")
    first_global = 1 + sum(1 for y in ordered if y.binding == "local")
    for y in ordered:
        name_off = len(strtab)
        strtab += y.name.encode() + b"\0"
        info = (BINDINGS[y.binding] << 4) | SYMBOL_KINDS[y.kind]
        value = plan.placed[y.section].vaddr + y.offset
        symtab.append(SYM.pack(name_off, info, STV_DEFAULT, shndx.get(y.section, SHN_ABS),
                               value, y.size))
    return b"".join(symtab), bytes(strtab), first_global


def link(machine, sections, symbols, relocs, entry: str,
         apply_reloc: Callable[[str, bytearray, int, int, int], None]) -> bytes:
    """The bytes of a static executable; see the module docstring for what they guarantee."""
    plan = _plan(machine, sections)
    syms = _check_symbols(plan, symbols)
    body = _apply_relocs(plan, syms, relocs, apply_reloc)

    text = plan.placed[".text"]
    e_entry = _address(plan, syms, entry, "entry")
    if not text.vaddr <= e_entry < text.vaddr + text.size:
        raise LinkError(f"entry {entry!r} at {e_entry:#x} is not inside .text")

    # Section table: null, note, the non-empty loadable sections in address order, then meta.
    live = [n for n in SECTION_ORDER if n in plan.sections and plan.sections[n].size > 0]
    shndx = {name: 2 + i for i, name in enumerate(live)}
    symtab, strtab, first_global = _symtab(plan, syms, shndx)
    names = [".note.gnu.build-id", *live, ".symtab", ".strtab", ".shstrtab"]
    shstrtab, name_off = bytearray(b"\0"), {}
    for n in names:
        name_off[n] = len(shstrtab)
        shstrtab += n.encode() + b"\0"

    symtab_off = _align(plan.end, META_ALIGN)
    strtab_off = symtab_off + len(symtab)
    shstrtab_off = strtab_off + len(strtab)
    shoff = _align(shstrtab_off + len(shstrtab), META_ALIGN)
    out = bytearray(shoff + SHDR.size * (len(names) + 1))

    def put(off: int, data: bytes):
        out[off:off + len(data)] = data

    note = _note()
    shdrs = [SHDR.pack(0, SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0),
             SHDR.pack(name_off[names[0]], SHT_NOTE, SHF_ALLOC, BASE_ADDRESS + plan.note_offset,
                       plan.note_offset, len(note), 0, 0, NOTE_ALIGN, 0)]
    put(plan.note_offset, note)
    for n in live:
        p, (sh_type, sh_flags) = plan.placed[n], SECTION_ORDER[n]
        if sh_type != SHT_NOBITS:
            put(p.offset, body[n])
        shdrs.append(SHDR.pack(name_off[n], sh_type, sh_flags, p.vaddr, p.offset, p.size,
                               0, 0, plan.sections[n].align, 0))
    strtab_index = len(shdrs) + 1
    shdrs += [SHDR.pack(name_off[".symtab"], SHT_SYMTAB, 0, 0, symtab_off, len(symtab),
                        strtab_index, first_global, META_ALIGN, SYM.size),
              SHDR.pack(name_off[".strtab"], SHT_STRTAB, 0, 0, strtab_off, len(strtab),
                        0, 0, 1, 0),
              SHDR.pack(name_off[".shstrtab"], SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab),
                        0, 0, 1, 0)]
    put(symtab_off, symtab)
    put(strtab_off, strtab)
    put(shstrtab_off, shstrtab)
    put(shoff, b"".join(shdrs))

    phdrs = [PHDR.pack(PT_LOAD, flags, off, vaddr, vaddr, filesz, memsz, plan.page)
             for flags, off, vaddr, filesz, memsz in plan.loads]
    phdrs.append(PHDR.pack(PT_NOTE, PF_R, plan.note_offset, BASE_ADDRESS + plan.note_offset,
                           BASE_ADDRESS + plan.note_offset, len(note), len(note), NOTE_ALIGN))
    phdrs.append(PHDR.pack(PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0, STACK_ALIGN))
    put(EHDR.size, b"".join(phdrs))

    ident = ELFMAG + bytes([ELFCLASS64, ELFDATA2LSB, EV_CURRENT, ELFOSABI_SYSV]) + bytes(8)
    put(0, EHDR.pack(ident, ET_EXEC, plan.e_machine, EV_CURRENT, e_entry, EHDR.size, shoff, 0,
                     EHDR.size, PHDR.size, len(phdrs), SHDR.size, len(shdrs), len(shdrs) - 1))

    desc = plan.note_offset + NHDR.size + len(NOTE_NAME)
    put(desc, hashlib.sha256(out).digest()[:BUILD_ID_SIZE])   # descriptor is still zero here
    return bytes(out)

