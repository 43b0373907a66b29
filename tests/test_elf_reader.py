"""Tests for alphac.elf.reader, with pyelftools as the oracle (a test-only dependency).

What it does: reads real cubins (ptxas, sm_86 and sm_90, every kernel of two learners) and
alphac's own executables (x86-64 and AArch64) with the reader and with pyelftools and compares
the header, every section (name, type, fields, bytes), every symbol and every relocation; then
fuzzes the reader (and the cubin reader above it) with hypothesis on mutated and cut copies of
those files: only `ElfError` (`CubinError` for cubins) may come out, never IndexError,
struct.error or anything else.

Requires: pyelftools, hypothesis; ptxas for the cubins (`require_tool`: CI fails without it).
"""
from __future__ import annotations

import io
import struct
from functools import lru_cache

import pytest
from elftools.elf import enums
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import example, require_tool

from alphac.build import build_learner
from alphac.driver import compile_file
from alphac.elf.reader import SHT_NOBITS, Elf, ElfError
from alphac.ptx.cubin import CubinError, cubin_info, read_cubin

SH_TYPE = {k: v for name in dir(enums) if name.startswith("ENUM_SH_TYPE")
           for k, v in getattr(enums, name).items() if isinstance(v, int)}


@lru_cache(maxsize=None)
def executable(name: str, isa: str) -> bytes:
    return build_learner(compile_file(example(name)).learner, isa).elf


@lru_cache(maxsize=None)
def cubins() -> tuple[bytes, ...]:
    require_tool("ptxas")
    from alphac.ptx import build
    return tuple(b.cubin for name in ("lsq_adam", "independent_state") for sm in (86, 90)
                 for b in build(compile_file(example(name)).learner, sm))


def files():
    return [executable(n, isa) for n in ("lsq_adam", "scalar_regression")
            for isa in ("x86_64", "aarch64")] + list(cubins())


def number(value, enum) -> int:
    """pyelftools names the values it knows; the number behind a name, or the number itself."""
    return value if isinstance(value, int) else enum[value]


def test_the_reader_agrees_with_pyelftools():
    blobs = files()
    assert len(blobs) == 4 + 20     # lsq_adam's 3 kernels and independent_state's 1, each with the
                                    # sampled shadow's digest (gather and two levels), on two cards
    for blob in blobs:
        ours, theirs = Elf(blob), ELFFile(io.BytesIO(blob))
        h = theirs.header
        assert (ours.machine, ours.type, ours.flags, ours.entry, ours.abiversion) == (
            number(h["e_machine"], enums.ENUM_E_MACHINE), number(h["e_type"], enums.ENUM_E_TYPE),
            h["e_flags"], h["e_entry"], h["e_ident"]["EI_ABIVERSION"])
        assert len(ours.sections) == theirs.num_sections() > 1
        n_syms = n_relocs = 0
        for s, t in zip(ours.sections, theirs.iter_sections()):
            assert (s.name, s.type, s.flags, s.addr, s.offset, s.size, s.link, s.info, s.align,
                    s.entsize) == (t.name, number(t["sh_type"], SH_TYPE), t["sh_flags"],
                                   t["sh_addr"], t["sh_offset"], t["sh_size"], t["sh_link"],
                                   t["sh_info"], t["sh_addralign"], t["sh_entsize"])
            assert ours.section(s.name) == next(x for x in ours.sections if x.name == s.name)
            if s.type != SHT_NOBITS:
                assert ours.data(s) == t.data()
            if isinstance(t, SymbolTableSection):
                got = [(y.name, y.value, y.size, y.bind, y.type, y.other & 3, y.shndx)
                       for y in ours.symbols(s)]
                want = [(y.name, y["st_value"], y["st_size"],
                         number(y["st_info"]["bind"], enums.ENUM_ST_INFO_BIND),
                         number(y["st_info"]["type"], enums.ENUM_ST_INFO_TYPE),
                         number(y["st_other"]["visibility"], enums.ENUM_ST_VISIBILITY),
                         number(y["st_shndx"], enums.ENUM_ST_SHNDX)) for y in t.iter_symbols()]
                assert got == want
                n_syms += len(got)
            if isinstance(t, RelocationSection):
                got = [(r.offset, r.type, r.symbol, r.addend) for r in ours.relocations(s)]
                want = [(r["r_offset"], r["r_info_type"], r["r_info_sym"],
                         r.entry.get("r_addend", 0)) for r in t.iter_relocations()]
                assert got == want
                n_relocs += len(got)
        assert n_syms > 0
        assert ours.machine != 190 or n_relocs > 0     # cubins relocate their .debug_frame


def read_everything(blob: bytes) -> None:
    """Everything the reader gives, used as a caller would: names are whole strings, a
    section's bytes lie in the file, a relocation's symbol is one of its table's."""
    elf = Elf(blob)
    for s in elf.sections:
        assert elf.section(s.name) is not None and "\0" not in s.name
        assert s.type == SHT_NOBITS or len(elf.data(s)) == s.size
        try:
            if s.type in (2, 11):
                assert all("\0" not in y.name for y in elf.symbols(s))
            elif s.type in (4, 9):
                syms = elf.symbols(elf.sections[s.link]) if elf.relocations(s) else ()
                assert all(syms[r.symbol] for r in elf.relocations(s))
        except ElfError:
            pass


SHDR_FIELDS = ((0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4), (44, 4), (48, 8),
               (56, 8))                        # (offset, width) of each sh_* field
EHDR_FIELDS = ((0x28, 8), (0x3a, 2), (0x3c, 2), (0x3e, 2), (4, 1), (5, 1))


def mutations(blob: bytes):
    """Cut the file, or overwrite fields: the header's section table fields, one field of a
    section header, a word of a section's bytes (a symbol's name, a relocation's symbol...),
    or any bytes anywhere."""
    elf = Elf(blob)
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    targets = list(EHDR_FIELDS) + [(shoff + 64 * s.index + off, w) for s in elf.sections
                                   for off, w in SHDR_FIELDS]
    inside = st.sampled_from([s for s in elf.sections if s.size and s.type != SHT_NOBITS]).flatmap(
        lambda s: st.tuples(st.integers(s.offset, s.offset + s.size - 1), st.sampled_from([4, 8])))
    where = st.one_of(st.sampled_from(targets), inside,
                      st.tuples(st.integers(0, len(blob) - 1), st.sampled_from([1, 2, 4, 8])))
    value = st.one_of(st.integers(0, 255), st.integers(0, 2**64 - 1),
                      st.sampled_from([0, 1, 0xFFFF, 2**31, 2**32, 2**63, 2**64 - 1]))
    return st.tuples(st.lists(st.tuples(where, value), min_size=1, max_size=4),
                     st.integers(0, len(blob)))


def mutate(blob: bytes, edits, cut: int) -> bytes:
    out = bytearray(blob)
    for (pos, width), value in edits:
        pos = min(pos, len(out) - width)
        out[pos:pos + width] = (value % 256 ** width).to_bytes(width, "little")
    return bytes(out[:cut]) if cut < len(out) // 2 else bytes(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_executables_raise_only_elf_error(data):
    blob = executable("lsq_adam", data.draw(st.sampled_from(["x86_64", "aarch64"])))
    edits, cut = data.draw(mutations(blob))
    try:
        read_everything(mutate(blob, edits, cut))
    except ElfError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_cubins_raise_only_elf_and_cubin_errors(data):
    blob = data.draw(st.sampled_from(cubins()))
    edits, cut = data.draw(mutations(blob))
    bad = mutate(blob, edits, cut)
    try:
        read_everything(bad)
    except ElfError:
        pass
    for read in (read_cubin, cubin_info):
        try:
            read(bad)
        except CubinError:
            pass


EDGES = (0, 1, 2, 3, 23, 24, 63, 64, 0xFFFF, 2**31, 2**32 - 1, 2**63, 2**64 - 1)


def edge_cases(blob: bytes):
    """Every field the reader uses set to every edge value, one at a time: the file header's
    table fields, each section header's fields, each symbol's name and each relocation's info."""
    elf = Elf(blob)
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    places = list(EHDR_FIELDS) + [(shoff + 64 * s.index + off, w) for s in elf.sections
                                  for off, w in SHDR_FIELDS]
    for s in elf.sections:
        if s.type in (2, 11):
            places += [(s.offset + i, 4) for i in range(0, s.size, 24)]
        if s.type in (4, 9):
            places += [(s.offset + i + 8, 8) for i in range(0, s.size, s.entsize)]
    for pos, width in places:
        for v in EDGES + (len(elf.sections), len(blob), len(blob) - pos):
            yield mutate(blob, [((pos, width), v)], len(blob))


def test_every_field_at_its_edges_raises_only_elf_error():
    for blob in (executable("lsq_adam", "aarch64"), cubins()[0]):
        n = 0
        for bad in edge_cases(blob):
            n += 1
            try:
                read_everything(bad)
            except ElfError:
                pass
            if Elf(blob).machine == 190:
                try:
                    read_cubin(bad)
                except CubinError:
                    pass
        assert n > 1000


def name_at(blob: bytes, section: int, pos: int) -> bytes:
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    return mutate(blob, [((shoff + 64 * section, 4), pos)], len(blob))


def test_named_errors_for_what_is_not_an_elf_file():
    blob = executable("lsq_adam", "x86_64")
    for bad, why in ((b"", "not an ELF"), (b"\x7fELF", "not an ELF"),
                     (blob[:4] + b"\x01" + blob[5:], "64-bit"),
                     (blob[:200], "runs past the file"), (name_at(blob, 1, 2**31), "string table")):
        with pytest.raises(ElfError, match=why):
            Elf(bad)
