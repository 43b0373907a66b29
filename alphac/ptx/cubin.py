"""A cubin reader: the ELF container (alphac.elf.reader) and NVIDIA's `.nv.info` records.

A cubin is an ELF (`EM_CUDA`, 190) with, per kernel K: `.text.K` (SASS), `.nv.constant0.K`
(constant bank 0: the driver's prefix, then the parameters), `.nv.shared.K` (static shared
memory, NOBITS), `.nv.info.K` (the kernel's attributes); and `.nv.info` (attributes keyed by a
function's symbol index). An attribute record is a 4-byte header, format byte, attribute byte,
u16, then for format SVAL a payload of that u16's size; for NVAL there is no value, for BVAL and
HVAL the u16 is the value. The records read here (sources: VivekPanyam/cudaparsers
`src/cubin.rs` for the record header, formats and KPARAM_INFO bits; redplait/denvdis
`test/nvd.cc` for the names up to 0x5a, the `e_flags` SM field and the cbank bit's sense;
`cuobjdump -elf` listings on the web for PARAM_CBANK; every layout checked against ptxas 13.0
output by tests/test_ptx.py, which compares with `ptxas -v`):

    0x2f REGCOUNT         .nv.info    SVAL  u32 function symbol, u32 registers per thread
    0x11 FRAME_SIZE       .nv.info    SVAL  u32 function symbol, u32 bytes
    0x12 MIN_STACK_SIZE   .nv.info    SVAL  u32 function symbol, u32 bytes of stack per thread
    0x0a PARAM_CBANK      .nv.info.K  SVAL  u32 symbol of .nv.constant0.K, u16 offset, u16 size
    0x19 CBANK_PARAM_SIZE .nv.info.K  HVAL  bytes of parameters
    0x17 KPARAM_INFO      .nv.info.K  SVAL  u32 index, u16 ordinal, u16 offset, u32 bits:
                                            log2 align 0-7, space 8-11, cbank 12-16,
                                            bit 17 clear = in the constant bank, size 18-31
    0x05 MAX_THREADS      .nv.info.K  SVAL  u32 x, y, z (from .maxntid; absent here)
    0x1c EXIT_INSTR_OFFSETS .nv.info.K SVAL u32 offsets into .text.K

`LaunchImage.shared` is the size of `.nv.shared.K`, what a launch must provide: on sm_90 it
includes a 1 KiB system-reserved window (`.nv.reservedSmem.offset0`) before the kernel's own
data, so it is 1024 more than the "bytes smem" `ptxas -v` prints (0 when the kernel has none);
on sm_86 it is what `ptxas -v` prints (the launch adds the reserve: alphac.nvdrv.image.CARVEOUTS).
A launch image binds constant bank 0 only: a cubin with another bank (`.nv.constantN.K`, what
ptxas emits unless `--disable-optimizer-constants`) is refused, as is `KPARAM_INFO_V2` (0x45),
which is not guessed. The register count comes from REGCOUNT: on sm_90, ptxas 13.0 leaves the
top byte of `.text.K`'s sh_info (where older cubins kept it) zero.

Requires: the bytes of one cubin. Guarantees: `CubinError` for anything malformed or not
understood; otherwise one frozen `LaunchImage` per kernel, in section order.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from alphac.elf.reader import SH_TYPES, Elf, ElfError, Symbol

EIFMT = {1: "NVAL", 2: "BVAL", 3: "HVAL", 4: "SVAL"}
EIATTR = {i: "EIATTR_" + n for i, n in enumerate("""
    ERROR PAD IMAGE_SLOT JUMPTABLE_RELOCS CTAIDZ_USED MAX_THREADS IMAGE_OFFSET IMAGE_SIZE
    TEXTURE_NORMALIZED SAMPLER_INIT PARAM_CBANK SMEM_PARAM_OFFSETS CBANK_PARAM_OFFSETS
    SYNC_STACK TEXID_SAMPID_MAP EXTERNS REQNTID FRAME_SIZE MIN_STACK_SIZE
    SAMPLER_FORCE_UNNORMALIZED BINDLESS_IMAGE_OFFSETS BINDLESS_TEXTURE_BANK
    BINDLESS_SURFACE_BANK KPARAM_INFO SMEM_PARAM_SIZE CBANK_PARAM_SIZE QUERY_NUMATTRIB
    MAXREG_COUNT EXIT_INSTR_OFFSETS S2RCTAID_INSTR_OFFSETS CRS_STACK_SIZE NEED_CNP_WRAPPER
    NEED_CNP_PATCH EXPLICIT_CACHING ISTYPEP_USED MAX_STACK_SIZE SUQ_USED
    LD_CACHEMOD_INSTR_OFFSETS LOAD_CACHE_REQUEST ATOM_SYS_INSTR_OFFSETS
    COOP_GROUP_INSTR_OFFSETS COOP_GROUP_MASK_REGIDS SW1850030_WAR WMMA_USED
    HAS_PRE_V10_OBJECT ATOMF16_EMUL_INSTR_OFFSETS ATOM16_EMUL_INSTR_REG_MAP REGCOUNT
    SW2393858_WAR INT_WARP_WIDE_INSTR_OFFSETS SHARED_SCRATCH STATISTICS
    INDIRECT_BRANCH_TARGETS SW2861232_WAR SW_WAR CUDA_API_VERSION NUM_MBARRIERS
    MBARRIER_INSTR_OFFSETS COROUTINE_RESUME_ID_OFFSETS SAM_REGION_STACK_SIZE
    PER_REG_TARGET_PERF_STATS CTA_PER_CLUSTER EXPLICIT_CLUSTER MAX_CLUSTER_RANK
    INSTR_REG_MAP RESERVED_SMEM_USED RESERVED_SMEM_0_SIZE UCODE_SECTION_DATA
    UNUSED_LOAD_BYTE_OFFSET KPARAM_INFO_V2 SYSCALL_OFFSETS SW_WAR_MEMBAR_SYS_INSTR_OFFSETS
    GRAPHICS_GLOBAL_CBANK SHADER_TYPE VRC_CTA_INIT_COUNT TOOLS_PATCH_FUNC NUM_BARRIERS
    TEXMODE_INDEPENDENT PERF_STATISTICS AT_ENTRY_FRAGMENTS SPARSE_MMA_MASK TCGEN05_1CTA_USED
    TCGEN05_2CTA_USED GEN_ERRBAR_AT_EXIT REG_RECONFIG ANNOTATIONS SANITIZE
    STACK_CANARY_TRAP_OFFSETS STUB_FUNCTION_KIND LOCAL_CTA_ASYNC_STORE_OFFSETS
    MERCURY_FINALIZER_OPTIONS""".split())}
BY_NAME = {v[len("EIATTR_"):]: k for k, v in EIATTR.items()}
FUNCTION_KEYED = {BY_NAME[n] for n in ("REGCOUNT", "FRAME_SIZE", "MIN_STACK_SIZE",
                                        "MAX_STACK_SIZE", "CRS_STACK_SIZE")}
EM_CUDA, STT_FUNC = 190, 2


class CubinError(Exception):
    pass


@dataclass(frozen=True)
class Attr:
    fmt: int
    attr: int
    value: int | bytes | None           # NVAL None; BVAL/HVAL the u16; SVAL the payload

    @property
    def name(self) -> str:
        return EIATTR.get(self.attr, f"EIATTR_{self.attr:#04x}")

    def words(self, at_least: int = 0) -> tuple[int, ...]:
        """The SVAL payload as u32s; CubinError unless it is one of at least `at_least` words."""
        n = len(self.value) // 4 if isinstance(self.value, bytes) else -1
        if n < at_least:
            raise CubinError(f"{self.name}: not a payload of {at_least} or more words")
        return struct.unpack(f"<{n}I", self.value[:n * 4])


@dataclass(frozen=True)
class KParam:
    ordinal: int
    offset: int                          # from the start of the parameters (PARAM_CBANK offset)
    size: int


@dataclass(frozen=True)
class Reloc:
    offset: int
    type: int
    symbol: str
    addend: int


@dataclass(frozen=True)
class LaunchImage:
    name: str
    sm: int
    code: bytes                          # .text.<name>
    code_sha256: str
    registers: int                       # per thread
    param_base: int                      # the parameters' offset in constant bank 0
    param_size: int
    params: tuple[KParam, ...]           # by ordinal
    shared: int                          # static shared memory per block, bytes (see above)
    local: int                           # stack per thread, bytes (MIN_STACK_SIZE)
    cbank0: int                          # constant bank 0 size: driver prefix + parameters
    max_threads: tuple[int, ...] | None  # from .maxntid, if any
    exits: tuple[int, ...]               # EXIT instruction offsets in code
    relocs: tuple[Reloc, ...]            # against .text.<name>; the loader must apply them


def nv_info(data: bytes) -> list[Attr]:
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CubinError(f".nv.info record header cut at byte {pos}")
        fmt, attr, word = struct.unpack_from("<BBH", data, pos)
        pos += 4
        if fmt == 1:
            value: int | bytes | None = None
        elif fmt in (2, 3):
            value = word
        elif fmt == 4:
            if pos + word > len(data):
                raise CubinError(f"{EIATTR.get(attr, hex(attr))} payload runs past the section")
            value, pos = data[pos:pos + word], pos + word
        else:
            raise CubinError(f"unknown .nv.info format {fmt} at byte {pos - 4}")
        out.append(Attr(fmt, attr, value))
    return out


def kparam(a: Attr) -> KParam:
    if not isinstance(a.value, bytes) or len(a.value) != 12:
        raise CubinError(f"KPARAM_INFO of {len(a.value)} bytes")
    _, ordinal, offset, bits = struct.unpack("<IHHI", a.value)
    if bits >> 17 & 1:
        raise CubinError(f"parameter {ordinal} is not in the constant bank")
    return KParam(ordinal, offset, bits >> 18)


def _elf(blob: bytes) -> Elf:
    try:
        elf = Elf(blob)
    except ElfError as e:
        raise CubinError(f"not an ELF file: {e}") from None
    if elf.machine != EM_CUDA:
        raise CubinError(f"not a 64-bit cubin (e_machine {elf.machine})")
    return elf


def _symbols(elf: Elf) -> tuple[Symbol, ...]:
    symtab = elf.section(".symtab")
    if symtab is None:
        raise CubinError("no .symtab")
    try:
        return elf.symbols(symtab)
    except ElfError as e:
        raise CubinError(str(e)) from None


def _data(elf: Elf, name: str) -> bytes | None:
    sec = elf.section(name)
    return None if sec is None else elf.data(sec)


def sm_of(elf: Elf) -> int:
    return (elf.flags >> 16) & 0xFF or (elf.flags >> 8) & 0xFF


def _function_attrs(elf: Elf) -> dict[tuple[int, int], int]:
    """(attribute, function symbol index) -> value, from the global .nv.info."""
    data = _data(elf, ".nv.info")
    out = {}
    for a in nv_info(data) if data is not None else []:
        if a.attr in FUNCTION_KEYED and a.fmt == 4 and len(a.value) == 8:
            sym, value = a.words()[:2]
            out[(a.attr, sym)] = value
    return out


def read_cubin(blob: bytes) -> dict[str, LaunchImage]:
    elf = _elf(blob)
    syms = _symbols(elf)
    fattrs, sm = _function_attrs(elf), sm_of(elf)
    images = {}
    for sec in elf.sections:
        if sec.name.startswith(".nv.constant") and not sec.name.startswith(".nv.constant0."):
            raise CubinError(f"{sec.name}: a launch binds constant bank 0 only")
        if not sec.name.startswith(".text."):
            continue
        name = sec.name[len(".text."):]
        index = next((i for i, s in enumerate(syms) if s.name == name and s.type == STT_FUNC),
                     None)
        info = _data(elf, ".nv.info." + name)
        if index is None or info is None or (BY_NAME["REGCOUNT"], index) not in fattrs:
            raise CubinError(f"kernel {name}: no symbol, .nv.info.{name} or REGCOUNT")
        attrs = nv_info(info)
        by = {a.attr: a for a in attrs}
        if BY_NAME["KPARAM_INFO_V2"] in by:
            raise CubinError(f"kernel {name}: KPARAM_INFO_V2 is not understood")
        if BY_NAME["PARAM_CBANK"] not in by:
            raise CubinError(f"kernel {name}: no PARAM_CBANK")
        cbank = by[BY_NAME["PARAM_CBANK"]].words(2)[1]
        params = sorted((kparam(a) for a in attrs if a.attr == BY_NAME["KPARAM_INFO"]),
                        key=lambda p: p.ordinal)
        const0 = elf.section(".nv.constant0." + name)
        shared = elf.section(".nv.shared." + name)
        mt = by.get(BY_NAME["MAX_THREADS"])
        ex = by.get(BY_NAME["EXIT_INSTR_OFFSETS"])
        code = elf.data(sec)
        images[name] = LaunchImage(
            name=name, sm=sm, code=code, code_sha256=hashlib.sha256(code).hexdigest(),
            registers=fattrs[(BY_NAME["REGCOUNT"], index)],
            param_base=cbank & 0xFFFF, param_size=cbank >> 16, params=tuple(params),
            shared=shared.size if shared else 0,
            local=fattrs.get((BY_NAME["MIN_STACK_SIZE"], index), 0),
            cbank0=const0.size if const0 else 0,
            max_threads=mt.words(3)[:3] if mt else None, exits=ex.words() if ex else (),
            relocs=_relocs(elf, sec.name))
    return images


def _relocs(elf: Elf, target: str) -> tuple[Reloc, ...]:
    out = []
    for prefix in (".rel", ".rela"):
        sec = elf.section(prefix + target)
        if sec is None:
            continue
        try:
            relocs = elf.relocations(sec)       # checks the link and every symbol index
            syms = elf.symbols(elf.sections[sec.link])
            out += [Reloc(r.offset, r.type, syms[r.symbol].name, r.addend) for r in relocs]
        except ElfError as e:
            raise CubinError(str(e)) from None
    return tuple(out)


def _show(a: Attr, syms: tuple[Symbol, ...]) -> str:
    if a.value is None:
        return ""
    if isinstance(a.value, int):
        return f"{a.value:#x}"
    if a.attr == BY_NAME["KPARAM_INFO"]:
        p = kparam(a)
        return f"ordinal {p.ordinal} offset {p.offset:#x} size {p.size}"
    w = a.words()
    if len(w) == 2 and (a.attr in FUNCTION_KEYED or a.attr == BY_NAME["PARAM_CBANK"]) \
            and w[0] < len(syms):
        rest = (f"offset {w[1] & 0xFFFF:#x} size {w[1] >> 16:#x}"
                if a.attr == BY_NAME["PARAM_CBANK"] else str(w[1]))
        return f"{syms[w[0]].name}: {rest}"
    return " ".join(f"{x:#x}" for x in w)


def cubin_info(blob: bytes) -> str:
    """A readable listing: the header, the sections, every attribute, each launch image."""
    elf = _elf(blob)
    syms = _symbols(elf)
    lines = [f"cubin sm_{sm_of(elf)}, ELF ABI version {elf.abiversion}, "
             f"e_flags {elf.flags:#010x}, {len(blob)} bytes", "sections:"]
    for s in elf.sections[1:]:
        kind = SH_TYPES.get(s.type, f"{s.type:#x}")
        lines.append(f"  [{s.index:2}] {s.name:32} {kind:18} size {s.size}")
    for s in elf.sections:
        if s.name.startswith(".nv.info"):
            lines.append(f"{s.name}:")
            lines += [f"  {a.name:32} {EIFMT[a.fmt]}  {_show(a, syms)}".rstrip()
                      for a in nv_info(elf.data(s))]
    for im in read_cubin(blob).values():
        lines += [f"kernel {im.name}:",
                  f"  code       {len(im.code)} bytes, sha256 {im.code_sha256}",
                  f"  registers  {im.registers}; shared {im.shared} B; local {im.local} B; "
                  f"constant bank 0 {im.cbank0} B",
                  f"  parameters c[0x0][{im.param_base:#x}], {im.param_size} bytes"]
        lines += [f"    {p.ordinal:3}  +{p.offset:#06x}  {p.size} B" for p in im.params]
        lines.append(f"  exits      {', '.join(f'{x:#x}' for x in im.exits) or '-'}")
        lines += [f"  reloc      {r.offset:#x} type {r.type} {r.symbol} {r.addend:+}"
                  for r in im.relocs]
    return "\n".join(lines) + "\n"
