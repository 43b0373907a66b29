"""Tests for alphac.elf.writer, checked against outside oracles.

What it does: links a tiny hand-assembled program for x86-64 and for AArch64 (keystone encodes the
instructions, in this file only; a small ``apply_reloc`` here patches them), runs it (natively or
under qemu-user), reads it with pyelftools and ``readelf -W -a``, and checks reproducibility,
layout invariants over random section shapes, and the ``LinkError`` cases.

Requires: pytest, hypothesis, pyelftools, keystone-engine; ``readelf`` and ``qemu-aarch64`` on
PATH (tests that need a missing tool are skipped, and say so).

Guarantees: nothing at run time; a failure here means the writer broke its contract.
"""
from __future__ import annotations

import hashlib
import io
import os
import platform
import shutil
import struct
import subprocess
import tempfile

import pytest
from elftools.elf.constants import P_FLAGS
from elftools.elf.elffile import ELFFile
from hypothesis import given, settings, strategies as st

from alphac.elf.writer import LinkError, Reloc, Section, Symbol, layout, link
from alphac.lower.target import target

MSG = b"hello from alphac\n"
PAGE = {"x86_64": 0x1000, "aarch64": 0x10000}
EM = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}


# ---------------------------------------------------------------------------------------------
# The target side, as a back end would supply it: relocation encodings.
# ---------------------------------------------------------------------------------------------
def apply_reloc(kind: str, buf: bytearray, off: int, p: int, s_plus_a: int) -> None:
    if kind == "R_X86_64_PC32":
        v = s_plus_a - p
        assert -2**31 <= v < 2**31
        struct.pack_into("<i", buf, off, v)
        return
    insn, = struct.unpack_from("<I", buf, off)
    if kind == "R_AARCH64_ADR_PREL_PG_HI21":
        v = ((s_plus_a & ~0xFFF) - (p & ~0xFFF)) >> 12
        assert -2**20 <= v < 2**20
        insn &= ~((0x3 << 29) | (0x7FFFF << 5))
        insn |= ((v & 0x3) << 29) | (((v >> 2) & 0x7FFFF) << 5)
    elif kind == "R_AARCH64_ADD_ABS_LO12_NC":
        insn = (insn & ~(0xFFF << 10)) | ((s_plus_a & 0xFFF) << 10)
    else:
        raise ValueError(f"unknown reloc kind {kind}")
    struct.pack_into("<I", buf, off, insn)


# ---------------------------------------------------------------------------------------------
# The tiny programs: write MSG, exit with counter (.data, = 5) + scratch (.bss, = 0) + 2 = 7,
# having stored the sum to scratch and loaded it back.
# ---------------------------------------------------------------------------------------------
X86 = [  # (instruction, symbol whose rip-relative disp32 ends the instruction)
    ("mov eax, dword ptr [rip]", "counter"),
    ("mov ecx, dword ptr [rip]", "scratch"),
    ("add eax, ecx", None),
    ("add eax, 2", None),
    ("mov dword ptr [rip], eax", "scratch"),
    ("lea rsi, [rip]", "msg"),
    (f"mov edx, {len(MSG)}", None),
    ("mov edi, 1", None),
    ("mov eax, 1", None),
    ("syscall", None),
    ("mov edi, dword ptr [rip]", "scratch"),
    ("mov eax, 60", None),
    ("syscall", None),
]

A64 = [  # (instruction, reloc kind, symbol)
    ("adrp x3, 0", "R_AARCH64_ADR_PREL_PG_HI21", "counter"),
    ("add x3, x3, #0", "R_AARCH64_ADD_ABS_LO12_NC", "counter"),
    ("ldr w4, [x3]", None, None),
    ("adrp x5, 0", "R_AARCH64_ADR_PREL_PG_HI21", "scratch"),
    ("add x5, x5, #0", "R_AARCH64_ADD_ABS_LO12_NC", "scratch"),
    ("ldr w6, [x5]", None, None),
    ("add w4, w4, w6", None, None),
    ("add w4, w4, #2", None, None),
    ("str w4, [x5]", None, None),
    ("adrp x1, 0", "R_AARCH64_ADR_PREL_PG_HI21", "msg"),
    ("add x1, x1, #0", "R_AARCH64_ADD_ABS_LO12_NC", "msg"),
    (f"mov x2, #{len(MSG)}", None, None),
    ("mov x0, #1", None, None),
    ("mov x8, #64", None, None),
    ("svc #0", None, None),
    ("ldr w0, [x5]", None, None),
    ("mov x8, #93", None, None),
    ("svc #0", None, None),
]


def _assemble(machine: str) -> tuple[bytes, list[Reloc]]:
    import keystone as ks
    code, relocs = bytearray(), []
    if machine == "x86_64":
        k = ks.Ks(ks.KS_ARCH_X86, ks.KS_MODE_64)
        for line, sym in X86:
            enc = bytes(k.asm(line, 0)[0])
            if sym:
                assert enc[-4:] == bytes(4), line
                relocs.append(Reloc(".text", len(code) + len(enc) - 4, "R_X86_64_PC32", sym, -4))
            code += enc
    else:
        k = ks.Ks(ks.KS_ARCH_ARM64, ks.KS_MODE_LITTLE_ENDIAN)
        for line, kind, sym in A64:
            enc = bytes(k.asm(line, 0)[0])
            assert len(enc) == 4, line
            if kind:
                relocs.append(Reloc(".text", len(code), kind, sym))
            code += enc
    return bytes(code), relocs


def program(machine: str):
    code, relocs = _assemble(machine)
    sections = [
        Section(".text", code),
        Section(".rodata", MSG, align=1),
        Section(".data", struct.pack("<iI", 5, 0xDEADBEEF), align=8),
        Section(".bss", b"", size=64, align=32),
    ]
    symbols = [
        Symbol("_start", ".text", 0, len(code), "func", "global"),
        Symbol("_etext", ".text", len(code), 0, "object"),       # end marker
        Symbol("msg", ".rodata", 0, len(MSG), "object"),
        Symbol("counter", ".data", 0, 4, "object", "global"),
        Symbol("marker", ".data", 4, 4, "object"),
        Symbol("scratch", ".bss", 8, 4, "object"),
    ]
    return sections, symbols, relocs


def build(machine: str, **change) -> bytes:
    sections, symbols, relocs = program(machine)
    args = dict(machine=target(machine), sections=sections, symbols=symbols, relocs=relocs,
                entry="_start", apply_reloc=apply_reloc)
    args.update(change)
    return link(**args)


@pytest.fixture(scope="module", params=["x86_64", "aarch64"])
def exe(request, tmp_path_factory):
    machine = request.param
    path = tmp_path_factory.mktemp(machine) / "prog"
    data = build(machine)
    path.write_bytes(data)
    path.chmod(0o755)
    return machine, data, path


def _elf(data: bytes) -> ELFFile:
    return ELFFile(io.BytesIO(data))


def _runner(machine: str):
    if platform.machine() == machine:
        return []
    qemu = shutil.which(f"qemu-{machine}")
    if not qemu:
        pytest.skip(f"cannot run {machine} here: no qemu-{machine}")
    return [qemu]


# ---------------------------------------------------------------------------------------------
# It runs.
# ---------------------------------------------------------------------------------------------
def test_runs(exe):
    machine, _, path = exe
    r = subprocess.run(_runner(machine) + [str(path)], capture_output=True, timeout=30)
    assert (r.stdout, r.stderr, r.returncode) == (MSG, b"", 7)


# ---------------------------------------------------------------------------------------------
# pyelftools reads it.
# ---------------------------------------------------------------------------------------------
def test_header_and_segments(exe):
    machine, data, _ = exe
    elf = _elf(data)
    assert elf.elfclass == 64 and elf.little_endian
    assert elf["e_type"] == "ET_EXEC" and elf["e_machine"] == EM[machine]
    types = [seg["p_type"] for seg in elf.iter_segments()]
    assert "PT_INTERP" not in types and "PT_DYNAMIC" not in types
    assert elf.get_section_by_name(".dynamic") is None
    loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
    R, W, X = P_FLAGS.PF_R, P_FLAGS.PF_W, P_FLAGS.PF_X
    assert [seg["p_flags"] for seg in loads] == [R, R | X, R | W]
    for seg in loads:
        assert not (seg["p_flags"] & W and seg["p_flags"] & X)
        assert seg["p_align"] == PAGE[machine]
        assert seg["p_vaddr"] % PAGE[machine] == seg["p_offset"] % PAGE[machine]
    assert loads[0]["p_offset"] == 0 and loads[0]["p_vaddr"] == 0x400000
    stack = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_GNU_STACK"]
    assert len(stack) == 1 and stack[0]["p_flags"] == R | W
    entry = elf.get_section_by_name(".symtab").get_symbol_by_name("_start")[0]
    assert elf["e_entry"] == entry["st_value"]
    assert len(data) < 4096                                   # no page padding in the file


def test_sections_inside_segments(exe):
    machine, data, _ = exe
    elf = _elf(data)
    names = [s.name for s in elf.iter_sections()]
    assert names == ["", ".note.gnu.build-id", ".rodata", ".text", ".data", ".bss",
                     ".symtab", ".strtab", ".shstrtab"]
    assert elf.get_section_by_name(".bss")["sh_type"] == "SHT_NOBITS"
    loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
    predicted = layout(target(machine), program(machine)[0])
    sections, _, _ = program(machine)
    for s in elf.iter_sections():
        if not s["sh_flags"] & 2:                             # SHF_ALLOC
            continue
        if s.name in predicted:
            assert s["sh_addr"] == predicted[s.name]
            given = next(g for g in sections if g.name == s.name)
            assert s["sh_size"] == given.size and s["sh_addr"] % given.align == 0
        seg, = [g for g in loads if g["p_vaddr"] <= s["sh_addr"]
                and s["sh_addr"] + s["sh_size"] <= g["p_vaddr"] + g["p_memsz"]]
        assert s["sh_addr"] - seg["p_vaddr"] == s["sh_offset"] - seg["p_offset"]
        assert s["sh_addr"] % PAGE[machine] == s["sh_offset"] % PAGE[machine]
        if s["sh_type"] != "SHT_NOBITS":
            assert seg["p_offset"] <= s["sh_offset"]
            assert s["sh_offset"] + s["sh_size"] <= seg["p_offset"] + seg["p_filesz"]
    # The relocated .text still differs from the input only at the relocated places.
    code, relocs = _assemble(machine)
    text = elf.get_section_by_name(".text").data()
    width = 4
    patched = {r.offset + i for r in relocs for i in range(width)}
    assert all(text[i] == code[i] for i in range(len(code)) if i not in patched)


def test_build_id(exe):
    _, data, _ = exe
    elf = _elf(data)
    note_seg, = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_NOTE"]
    sec = elf.get_section_by_name(".note.gnu.build-id")
    assert sec["sh_type"] == "SHT_NOTE"
    assert (note_seg["p_offset"], note_seg["p_filesz"]) == (sec["sh_offset"], sec["sh_size"])
    note, = list(sec.iter_notes())
    assert (note["n_type"], note["n_name"], note["n_descsz"]) == ("NT_GNU_BUILD_ID", "GNU", 20)
    start = sec["sh_offset"] + 12 + 4                          # after the header and "GNU\0"
    zeroed = data[:start] + bytes(20) + data[start + 20:]
    assert bytes.fromhex(note["n_desc"]) == hashlib.sha256(zeroed).digest()[:20]
    assert data[start:start + 20] == hashlib.sha256(zeroed).digest()[:20]


def test_symbols(exe):
    machine, data, _ = exe
    elf = _elf(data)
    symtab = elf.get_section_by_name(".symtab")
    addr = layout(target(machine), program(machine)[0])
    _, symbols, _ = program(machine)
    syms = list(symtab.iter_symbols())
    assert syms[0].name == "" and len(syms) == len(symbols) + 1
    binds = [s["st_info"]["bind"] for s in syms[1:]]
    assert binds == sorted(binds, key=lambda b: b != "STB_LOCAL")        # locals first
    assert symtab["sh_info"] == 1 + binds.count("STB_LOCAL")
    for y in symbols:
        s, = symtab.get_symbol_by_name(y.name)
        assert s["st_value"] == addr[y.section] + y.offset
        assert s["st_size"] == y.size
        assert s["st_info"]["type"] == {"func": "STT_FUNC", "object": "STT_OBJECT"}[y.kind]
        assert s["st_info"]["bind"] == {"local": "STB_LOCAL", "global": "STB_GLOBAL"}[y.binding]
        assert elf.get_section(s["st_shndx"]).name == y.section


def _assert_readelf_quiet(data: bytes) -> str:
    """``readelf -W -a`` on the bytes: exit 0, nothing on stderr, no warning; its stdout."""
    if not shutil.which("readelf"):
        pytest.skip("no readelf on PATH")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.out")
        with open(path, "wb") as f:
            f.write(data)
        r = subprocess.run(["readelf", "-W", "-a", path], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert "warning" not in r.stdout.lower()
    return r.stdout


def test_readelf_is_quiet(exe):
    _, data, _ = exe
    assert "NT_GNU_BUILD_ID" in _assert_readelf_quiet(data)


# ---------------------------------------------------------------------------------------------
# Reproducible.
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_reproducible(machine):
    sections, symbols, relocs = program(machine)
    one = build(machine)
    assert build(machine) == one
    assert build(machine, symbols=symbols[::-1]) == one
    assert build(machine, symbols=symbols[2:] + symbols[:2]) == one
    assert build(machine, relocs=relocs[::-1]) == one
    assert build(machine, sections=sections[::-1]) == one


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_code_byte_changes_build_id(machine):
    def build_id(data):
        note, = list(_elf(data).get_section_by_name(".note.gnu.build-id").iter_notes())
        return note["n_desc"]
    sections, _, _ = program(machine)
    text = bytearray(sections[0].data)
    text[-5] ^= 1                                             # a byte no reloc touches
    changed = [Section(".text", bytes(text))] + sections[1:]
    assert build_id(build(machine, sections=changed)) != build_id(build(machine))


# ---------------------------------------------------------------------------------------------
# Shapes: empty sections are left out, and layout holds for random section shapes.
# ---------------------------------------------------------------------------------------------
def _nop(machine):
    return b"\x90" if machine == "x86_64" else b"\x1f\x20\x03\xd5"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_empty_sections_left_out(machine):
    sections = [Section(".text", _nop(machine)), Section(".rodata", b""), Section(".data", b""),
                Section(".bss", b"", size=0)]
    symbols = [Symbol("_start", ".text", 0, 1, "func", "global"),
               Symbol("data_end", ".data", 0, 0, "object")]
    out = link(target(machine), sections, symbols, [], "_start", apply_reloc)
    _assert_readelf_quiet(out)
    elf = _elf(out)
    assert [s.name for s in elf.iter_sections()] == [
        "", ".note.gnu.build-id", ".text", ".symtab", ".strtab", ".shstrtab"]
    loads = [seg["p_flags"] for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
    assert loads == [P_FLAGS.PF_R, P_FLAGS.PF_R | P_FLAGS.PF_X]
    s, = elf.get_section_by_name(".symtab").get_symbol_by_name("data_end")
    assert s["st_value"] == layout(target(machine), sections)[".data"]


BSS_ONLY = {  # exit 3 if the last word of a large .bss reads as zero
    "x86_64": ("mov eax, dword ptr [rip]; mov edi, eax; add edi, 3; mov eax, 60; syscall",
               [(2, "R_X86_64_PC32", -4)]),
    "aarch64": ("adrp x1, 0; add x1, x1, #0; ldr w0, [x1]; add w0, w0, #3; mov x8, #93; svc #0",
                [(0, "R_AARCH64_ADR_PREL_PG_HI21", 0), (4, "R_AARCH64_ADD_ABS_LO12_NC", 0)]),
}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_bss_only_segment_runs(machine, tmp_path):
    import keystone as ks
    k = (ks.Ks(ks.KS_ARCH_X86, ks.KS_MODE_64) if machine == "x86_64"
         else ks.Ks(ks.KS_ARCH_ARM64, ks.KS_MODE_LITTLE_ENDIAN))
    asm, fixups = BSS_ONLY[machine]
    code = bytes(k.asm(asm, 0)[0])
    sections = [Section(".text", code), Section(".bss", b"", size=200000, align=64)]
    symbols = [Symbol("_start", ".text", 0, len(code), "func", "global"),
               Symbol("v", ".bss", 199996, 4, "object")]
    relocs = [Reloc(".text", off, kind, "v", addend) for off, kind, addend in fixups]
    data = link(target(machine), sections, symbols, relocs, "_start", apply_reloc)
    _assert_readelf_quiet(data)
    rw, = [seg for seg in _elf(data).iter_segments() if seg["p_type"] == "PT_LOAD"
           and seg["p_flags"] == P_FLAGS.PF_R | P_FLAGS.PF_W]
    assert rw["p_filesz"] == 0 and rw["p_memsz"] == 200000
    path = tmp_path / "bss"
    path.write_bytes(data)
    path.chmod(0o755)
    assert subprocess.run(_runner(machine) + [str(path)], timeout=30).returncode == 3


SHAPE = st.tuples(st.integers(0, 5000), st.sampled_from([1, 2, 4, 8, 16, 64, 4096]))


@settings(max_examples=40, deadline=None)
@given(machine=st.sampled_from(["x86_64", "aarch64"]), text=SHAPE, rodata=SHAPE, data=SHAPE,
       bss=SHAPE)
def test_layout_invariants(machine, text, rodata, data, bss):
    sections = [Section(".text", bytes([0xAB]) * max(1, text[0]), align=text[1]),
                Section(".rodata", bytes([1]) * rodata[0], align=rodata[1]),
                Section(".data", bytes([2]) * data[0], align=data[1]),
                Section(".bss", b"", size=bss[0], align=bss[1])]
    out = link(target(machine), sections, [Symbol("_start", ".text", 0, 1, "func", "global")], [],
               "_start", apply_reloc)
    _assert_readelf_quiet(out)
    elf = _elf(out)
    predicted = layout(target(machine), sections)
    loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
    page = PAGE[machine]
    for a, b in zip(loads, loads[1:]):                        # own pages, in order, no overlap
        assert (a["p_vaddr"] + a["p_memsz"] - 1) // page < b["p_vaddr"] // page
        assert a["p_offset"] + a["p_filesz"] <= b["p_offset"]
    for seg in loads:
        assert seg["p_vaddr"] % page == seg["p_offset"] % page
        assert seg["p_offset"] + seg["p_filesz"] <= len(out)
    for g in sections:
        s = elf.get_section_by_name(g.name)
        assert (s is None) == (g.size == 0)
        if s is None:
            continue
        assert s["sh_addr"] == predicted[g.name] and s["sh_addr"] % g.align == 0
        if g.data:
            assert s.data() == g.data
    assert len(out) < 4 * 5000 + 3 * 4096 + 1024              # contiguous, not page-padded


# ---------------------------------------------------------------------------------------------
# LinkError.
# ---------------------------------------------------------------------------------------------
def test_unknown_symbol_in_reloc():
    sections, symbols, relocs = program("x86_64")
    bad = relocs + [Reloc(".text", 0, "R_X86_64_PC32", "nowhere")]
    with pytest.raises(LinkError, match="nowhere"):
        build("x86_64", relocs=bad)


def test_unknown_entry():
    with pytest.raises(LinkError, match="main"):
        build("x86_64", entry="main")


def test_entry_outside_text():
    with pytest.raises(LinkError, match="msg"):
        build("x86_64", entry="msg")


@pytest.mark.parametrize("name", [".init", ".text.hot", "text", ".symtab"])
def test_section_name_outside_allowed_set(name):
    sections, _, _ = program("aarch64")
    with pytest.raises(LinkError, match="not allowed"):
        build("aarch64", sections=sections + [Section(name, b"x")])
    with pytest.raises(LinkError, match="not allowed"):
        layout(target("aarch64"), sections + [Section(name, b"x")])


@pytest.mark.parametrize("bad", [
    Symbol("past", ".rodata", len(MSG), 1, "object"),       # at the end, but not size 0
    Symbol("over", ".data", 6, 4, "object"),
    Symbol("nosec", ".tdata", 0, 0, "object"),
    Symbol("_start", ".text", 0, 0, "func"),                 # duplicate
    Symbol("kind", ".text", 0, 0, "label"),
])
def test_bad_symbols(bad):
    sections, symbols, _ = program("x86_64")
    with pytest.raises(LinkError):
        build("x86_64", symbols=symbols + [bad])


def test_other_bad_inputs():
    with pytest.raises(LinkError, match="machine"):
        layout("riscv64", [Section(".text", b"\x90")])
    with pytest.raises(LinkError, match=".bss"):
        layout(target("x86_64"), [Section(".text", b"\x90"), Section(".bss", b"\0", size=1)])
    with pytest.raises(LinkError, match="align"):
        layout(target("x86_64"), [Section(".text", b"\x90", align=3)])
    with pytest.raises(LinkError, match="align"):
        layout(target("x86_64"), [Section(".text", b"\x90", align=0x2000)])
    with pytest.raises(LinkError, match="twice"):
        layout(target("x86_64"), [Section(".text", b"\x90"), Section(".text", b"\x90")])
    with pytest.raises(LinkError, match=".text"):
        layout(target("x86_64"), [Section(".data", b"\x90")])
    _, _, relocs = program("x86_64")
    with pytest.raises(LinkError, match="offset"):
        build("x86_64", relocs=relocs + [Reloc(".rodata", len(MSG), "R_X86_64_PC32", "msg")])
