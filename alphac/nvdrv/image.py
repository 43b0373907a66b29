"""What a GPU owner puts on the card: its memory plan, its launch image, its QMDs and push buffers.

Given the owner's kernels (`alphac.ptx.build`: each kernel's ABI and its cubin's launch image),
the target's `abi.Arch` and the host, `plan()` fixes, at compile time, everything a launch needs:

    allocation  va              size            what
    vidmem      ARENA_VA-2 MiB  2 MiB + arena   video memory, one allocation (start-up pays per
                                                allocation: issue 42), in two parts:
      gpfifo    its start       2 MiB             the GPFIFO ring, then USERD
      arena     ARENA_VA        k * 2 MiB         code, constant banks, QMDs, push buffers,
                                                  state, data, constants, gs, G (and under
                                                  exact_sum the accumulators xd, xc)
    host        after it        64 KiB units    system memory the host maps cached, one
                                                allocation in three parts:
      sysmem    its start       64 KiB            the channel's error notifier, the semaphore
      results   after it        64 KiB units      what the copy engine copies out of the arena
                                                  at the end of a chain (G, xd, xc, the
                                                  states an update kernel takes), the only
                                                  card results the host reads (none under
                                                  `results bar1`: it reads the arena, BAR1)
      staging   after it        64 KiB units      the host writes the launch image and the data
                                                  rows there at the arena's offsets, the setup
                                                  push buffer (read from here) copies them into
                                                  the arena; the card reads the constant banks,
                                                  idx and rd from here (MIRRORED), so the host
                                                  writes a step's scalars to system memory
    channel     after it        64 MiB          a VA range UVM reserves for the channel (unmapped)
    usermode    after it        64 KiB          the usermode page (the doorbell at 0x90)
    local       after it        see below       video memory mapped for the GPU only: the
                                                local-memory area, when a kernel spills

Every address is chosen here (UVM maps each allocation at the same address for the CPU and the
GPU), so the QMDs, constant banks and push buffers are complete at compile time; at run time the
owner writes only the scalar-state parameters into a constant bank (in `staging`), the
semaphore, one GPFIFO entry, GPPut and the doorbell, and it reads the card's results only from
`results`. The *launch
image* is the arena's initial bytes (code to the end of the constants); the executable carries it
with its SHA-256, checks that, and writes it to `staging`, whence the setup push buffer copies it.
The host choices `results`, `inputs` and `upload` bar1 (host.CHOICES: the paths of 2026-12-04)
put what the host reads, writes each step and uploads in the arena instead, through BAR1.

Memory demand (what admission checks against the card's declared memory, E0120) is the video
memory allocated: the arena with the GPFIFO area, and the local-memory area, in 2 MiB units.

Local memory (a kernel ptxas spilled: `Image.local` > 0; docs/nvdrv.md, "Local memory"): per
thread the stack + 0x240 (the ABI's bytes above STACK_TOP) rounded to 32, in every QMD's
SHADER_LOCAL_MEMORY_HIGH_SIZE [read: tinygrad ops_nv.py, NVProgram]; an area of round_up(32 x
that, 0x200) a warp, round_up(warps/SM x SMs/TPC warps, 0x8000) a TPC, round_up(TPCs x that,
0x20000) in all [read: NVK nvk_device.c nvk_slm_area_ensure; tinygrad _ensure_has_local_memory],
for the host description's topology (checked again at start-up: `gpu-topology`); the setup push
buffer's SET_SHADER_LOCAL_MEMORY_A/B and _NON_THROTTLED_A/B/C [read: tinygrad NVComputeQueue.setup;
on sm_90 inferred].

Facts and their sources (docs/nvdrv.md has the full list and what is still unknown on Hopper):
  - QMD fields for Ampere V03 as tinygrad's ops_nv.py sets them (group id 0x3f, caching,
    invalidations, API call limit, sampler index, L1 sysmembar, barrier count 1, prefetch, SASS
    version), constant bank 0 prefix: dwords 0-2 the
    block dims and 3-5 the grid dims (what %ntid and %nctaid read: tinygrad 166670a2f2 "nv: fill
    grid/block sizes" writes `*local_size, *global_size` there), dwords 6-11 the shared window,
    the local window and 0xfffdc0 [read: tinygrad].
  - QMD V04 (Hopper) as Mesa NAK's qmd.rs fills it (major 4, minor 0, API call limit NO_CHECK,
    sampler index INDEPENDENTLY, GRID_*, SHIFTED6 constant-buffer address, SHIFTED4 size,
    shared-memory configuration from the rounded size) [read: NAK]; the shared window 4 GiB
    aligned [read: NVK]; QMD_TYPE GRID_CTA, the invalidations, the membar, group id, SASS version
    0x90 and the rest of the constant-bank prefix are the Ampere choices carried over (tinygrad
    writes the same prefix below Blackwell) [inferred: unconfirmed on an H200].
  - Shared memory (`CARVEOUTS`, `shared_config`; docs/nvdrv.md "Shared memory"): SHARED_MEMORY_SIZE
    the kernel's `.nv.shared.K` plus what a block reserves outside it (1 KiB on sm_86: tinygrad,
    the CUDA guide), MIN = TARGET the smallest carve-out holding that, KiB / 4 + 1 [read: NAK,
    tinygrad]; a block over the largest carve-out is a BuildError naming the kernel.
  - Push buffer: SEND_PCAS_A = QMD >> 8, SEND_SIGNALING_PCAS2_B = PREFETCH_SCHEDULE, then the host
    semaphore release with wait-for-idle; GPFIFO entry with LEVEL = SUBROUTINE [read: tinygrad].
  - Copies out (docs/nvdrv.md "Results through the copy engine"): the copy object on subchannel 4
    [read: tinygrad NVCopyQueue], on the compute channel as libcuda allocates it (HOPPER_DMA_COPY_A
    beside HOPPER_COMPUTE_A, docs/nvdrv.md); after a chain's last launch the host's WFI, then per
    buffer OFFSET_IN/OUT, LINE_LENGTH_IN and LAUNCH_DMA NON_PIPELINED, pitch to pitch, virtual
    addresses, flush [read: tinygrad copy()], in pieces of 2^31 bytes at most [read: tinygrad];
    then the copy class's one-word semaphore release with flush [read: tinygrad signal()] in place
    of the host's: the one wait covers the copies.
  - Memory (docs/nvdrv.md "Memory"): two allocations with parts, the semaphore and the notifier
    in cached system memory, the constant banks and MIRRORED buffers read by the SMs from
    `staging`, the video memory mapped for the CPU only over the GPFIFO area [inferred:
    unconfirmed on an H200]. That the host WFI orders the copy engine after
    the compute engine on one channel is [inferred: unconfirmed on an H200].

Requires: every kernel's cubin for `arch.sm`. Guarantees: the same inputs give the same bytes.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

from alphac.nvdrv import abi
from alphac.nvdrv.abi import BITFIELDS, CONSTANTS, METHODS, pack_bitfields, pack_qmd
from alphac.formats import XC_WORDS, XS_WORDS
from alphac.nvdrv.host import CHOICES, Topology

ARENA_VA = 0x10_0000_0000          # 64 GiB: below 2^40 (GPFIFO entries and QMD addresses)
HUGE = 2 << 20
GPFIFO_AREA = 2 << 20
GPFIFO_ENTRIES = 0x400
SYSMEM_SIZE = 0x10000
SEMAPHORE_OFFSET = 0x1000          # in sysmem; the error notifier is at 0
CHANNEL_RANGE = 0x4000000          # tinygrad's UVM_REGISTER_CHANNEL length
USERMODE_SIZE = CONSTANTS["NVC361_NV_USERMODE__SIZE"]
# The windows (apertures, no memory behind them): Mesa NVK's, 0xfe << 24 for the shared window
# and 0xff << 24 for the local one, except that "shared memory window needs 4GB alignment on
# hopper+": 1 << 32 there (nvk_cmd_dispatch.c, nvk_push_dispatch_state_init). tinygrad's were
# 0xfe000000 / 0xff000000 on Ampere (4 GiB-aligned 0x729400000000 / 0x729300000000 since d90ddcc365).
SHARED_WINDOW = {"sm_86": 0xfe000000, "sm_90": 1 << 32}
LOCAL_WINDOW = 0xff000000
# Local memory (the module doc): a thread's window spans 16 MiB, the stack starts at STACK_TOP.
LOCAL_WINDOW_SPAN = 1 << 24
STACK_TOP = 0xfffdc0
LOCAL_RESERVE = LOCAL_WINDOW_SPAN - STACK_TOP       # 0x240: tinygrad's `MIN_STACK_SIZE + 0x240`
LANES = 32
SLM_ALIGN, WARP_ALIGN, TPC_ALIGN, AREA_ALIGN = 32, 0x200, 0x8000, 0x20000
MAX_SM_COUNT = 0xff                                 # NON_THROTTLED_C, tinygrad's value


def cbank_prefix(arch: abi.Arch) -> dict[int, int]:
    """Constant bank 0's dwords 6-11 (u64 each): the shared window, the local window, the
    stack's start (the SASS loads its stack pointer from dword 10)."""
    return {6: SHARED_WINDOW[arch.sm], 8: LOCAL_WINDOW, 10: STACK_TOP}


def local_per_thread(stack: int) -> int:
    """The per-thread local memory (QMD SHADER_LOCAL_MEMORY_HIGH_SIZE) for ptxas's stack bytes."""
    return round_up(stack + LOCAL_RESERVE, SLM_ALIGN) if stack else 0


def local_per_tpc(per_thread: int, topo: Topology) -> int:
    """SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A/B: a TPC's share of the area."""
    per_warp = round_up(per_thread * LANES, WARP_ALIGN)
    return round_up(per_warp * topo.warps_per_sm * topo.sms_per_tpc, TPC_ALIGN)


def local_area_size(per_thread: int, topo: Topology) -> int:
    """The area's bytes (the allocation is this in 2 MiB units)."""
    return round_up(local_per_tpc(per_thread, topo) * topo.tpcs, AREA_ALIGN)


# A constant bank's address and size: Mesa NVK aligns both to nvk_min_cbuf_alignment, 64 bytes
# from Turing and 0x100 before (nvk_physical_device.c, nvk_cmd_upload_qmd); tinygrad allocates its
# bank rounded to 1 << 8. 256 is both.
CODE_ALIGN, QMD_ALIGN, CBANK_ALIGN = 256, 256, 256
CODE_TAIL = 0x1000                 # room past the last instruction for the prefetcher
BLOCK = 128                        # threads per CTA at most
SEM_RELEASED = 1                   # the payload the release writes; the owner clears it first
MEMORY_KINDS = ("vidmem", "vidmem-gpu", "sysmem-cached", "sysmem-uncached")
# Buffers the host writes each step and the card only reads (`reduce` aside, which writes rd on
# the card, where the host compares it): the card reads them from `staging`, system memory, as
# it reads the constant banks, so the host never writes video memory through BAR1 for them.
# Besides these, every state no update kernel writes (a scalar state) and, under exact_sum, G
# (the host's rounded sum under --shadow full; a sampled run's kernels are pointed at `Gv`, in
# the arena, where xsum_round writes it) are read so (plan: `mirrored`), and `sc`, the scalar states
# where the card runs the scalar statements (the host writes them under --shadow full; a
# sampled step's `scalars` kernel writes them there).
MIRRORED = ("idx", "rd")
# The chain with no launch that a sampled step drawn to be proven submits: the copies of the card's
# message before the step (`dprev`) and after it (`dmsg`) to `results` (alphac/ptx/digest.py gather)
READBACK = ("digest_read",)


def round_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


@dataclass(frozen=True)
class Allocation:
    name: str
    va: int
    size: int
    where: str                     # "vidmem" | "vidmem-gpu" (not mapped for the CPU) |
                                   # "sysmem-cached" (mapped cached) | "sysmem-uncached" |
                                   # "usermode" | "reserved"
    within: str = ""               # a part of that allocation (not allocated by itself)
    cpu: int = 0                   # the bytes mapped for the CPU from its start (0: all of it)


@dataclass(frozen=True)
class Scalar:
    """A per-step f64 parameter: the host writes scalar state `ref` (version 0 old, 1 new)."""
    ref: str
    version: int
    va: int                        # where in the constant bank


@dataclass(frozen=True)
class Launch:
    kernel: str
    threads: int
    block: int
    grid: int
    code_va: int
    code_sha256: str
    qmd_va: int
    qmd: bytes
    cbank_va: int
    cbank: bytes
    scalars: tuple[Scalar, ...]
    counts: tuple[int, ...] = ()   # a minibatch learner: the u32 counts the host writes each step
    gslots: tuple[int, ...] = ()   # exact_sum: where the bank holds G's address (a sampled run
                                   # points it at `Gv`, in video memory)


@dataclass(frozen=True)
class Chain:
    """One push buffer: `kernels` launched in order, a wait-for-idle between, one release."""
    kernels: tuple[str, ...]
    pushbuf_va: int
    pushbuf: tuple[int, ...]       # dwords
    entry: int                     # the GPFIFO entry that runs the push buffer
    copies: tuple[tuple[int, int, int], ...] = ()  # (arena va, results va, bytes) after the launches


@dataclass(frozen=True)
class GpuImage:
    sm: int
    arch: abi.Arch
    allocations: tuple[Allocation, ...]
    launches: tuple[Launch, ...]
    setup_pushbuf: tuple[int, ...]
    setup_entry: int
    buffers: dict                  # "state_w" / "data_x" / "gs" / "G" / "const_..." -> va
    image: bytes                   # the arena's initial bytes
    sha256: bytes
    local_per_thread: int = 0      # QMD SHADER_LOCAL_MEMORY_HIGH_SIZE (0: no kernel spills)
    local_per_tpc: int = 0         # SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A/B
    topology: Topology | None = None   # what the area was sized for (checked at start-up)
    chains: dict = field(default_factory=dict)    # OwnerData.chains' names -> Chain, or None: the
                                                   # share launches none of them
    results: dict = field(default_factory=dict)   # buffer name -> where the host reads it: its copy in
                                                   # `results`, or under `results bar1` itself (BAR1)
    upload: int = 0                # where the host writes the rows (and the card fetches the setup
                                   # push buffer): `staging`, or under `upload bar1` the arena (BAR1),
                                   # the image to both

    def alloc(self, name: str) -> Allocation:
        return next(a for a in self.allocations if a.name == name)

    def launch(self, kernel: str) -> Launch:
        return next(x for x in self.launches if x.kernel == kernel)

    def chain(self, kernels) -> Chain | None:
        return self.chains[tuple(kernels)]

    @property
    def memories(self) -> tuple[Allocation, ...]:
        """The allocations the driver makes (one video-memory, one system-memory, and the
        local-memory area when a kernel spills), each mapped once; the others are parts of them."""
        return tuple(a for a in self.allocations if not a.within and a.where in MEMORY_KINDS)

    @property
    def demand(self) -> int:
        return sum(a.size for a in self.memories if a.where in ("vidmem", "vidmem-gpu"))

    def staged(self, name: str) -> int:
        """Where the host writes buffer `name` at start-up: its place in `staging` (`upload`)."""
        return self.upload + self.buffers[name] - ARENA_VA

    @property
    def semaphore_va(self) -> int:
        return self.alloc("sysmem").va + SEMAPHORE_OFFSET

    @property
    def ring_va(self) -> int:
        return self.alloc("gpfifo").va

    @property
    def userd_va(self) -> int:
        return self.alloc("gpfifo").va + GPFIFO_ENTRIES * CONSTANTS["NVC56F_GP_ENTRY__SIZE"]

    @property
    def doorbell_va(self) -> int:
        return self.alloc("usermode").va + abi.USERMODE_DOORBELL_OFFSET


# -- push buffers ------------------------------------------------------------------------------
def method(subchannel: int, offset: int, count: int) -> int:
    """A push-buffer method header (incrementing): NVC56F_DMA_INCR_* (Hopper: the same, assumed)."""
    return pack_bitfields({"NVC56F_DMA_INCR_OPCODE": CONSTANTS["NVC56F_DMA_INCR_OPCODE_VALUE"],
                           "NVC56F_DMA_INCR_COUNT": count, "NVC56F_DMA_INCR_SUBCHANNEL": subchannel,
                           "NVC56F_DMA_INCR_ADDRESS": offset >> 2})


SUBCH_HOST, SUBCH_COMPUTE, SUBCH_COPY = 0, 1, 4      # tinygrad's subchannels
COPY_PIECE = 1 << 31               # the bytes one LAUNCH_DMA copies at most (tinygrad's step)


def semaphore_release(arch: abi.Arch, va: int) -> list[int]:
    h = arch.host_methods
    execute = pack_bitfields({f"{h}_SEM_EXECUTE_OPERATION": CONSTANTS[f"{h}_SEM_EXECUTE_OPERATION_RELEASE"],
                              f"{h}_SEM_EXECUTE_RELEASE_WFI": 1,
                              f"{h}_SEM_EXECUTE_PAYLOAD_SIZE": CONSTANTS[f"{h}_SEM_EXECUTE_PAYLOAD_SIZE_32BIT"]})
    return [method(SUBCH_HOST, METHODS[h]["SEM_ADDR_LO"], 5),
            pack_bitfields({f"{h}_SEM_ADDR_LO_OFFSET": (va & 0xffffffff) >> 2}),
            pack_bitfields({f"{h}_SEM_ADDR_HI_OFFSET": va >> 32}),
            SEM_RELEASED, 0, execute]


SETUP_DWORDS, SETUP_LOCAL_DWORDS = 10 + 6, 7


def setup_pushbuf(arch: abi.Arch, sem_va: int, local_va: int = 0, per_tpc: int = 0, upload=None) -> list[int]:
    """SET_OBJECT, the two windows, the local-memory area when there is one, the release; with
    `upload` (staging va, arena va, bytes) the copy engine's copy of the image and the rows into
    the arena before its release (the GPU reads this push buffer from `staging`)."""
    c = arch.compute_methods
    m = METHODS[c]
    local = []
    if per_tpc:
        local = [method(SUBCH_COMPUTE, m["SET_SHADER_LOCAL_MEMORY_A"], 2),
                 pack_bitfields({f"{c}_SET_SHADER_LOCAL_MEMORY_A_ADDRESS_UPPER": local_va >> 32}),
                 pack_bitfields({f"{c}_SET_SHADER_LOCAL_MEMORY_B_ADDRESS_LOWER": local_va & 0xffffffff}),
                 method(SUBCH_COMPUTE, m["SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A"], 3),
                 pack_bitfields({f"{c}_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A_SIZE_UPPER": per_tpc >> 32}),
                 pack_bitfields({f"{c}_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B_SIZE_LOWER": per_tpc & 0xffffffff}),
                 pack_bitfields({f"{c}_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C_MAX_SM_COUNT": MAX_SM_COUNT})]
    return [method(SUBCH_COMPUTE, m["SET_OBJECT"], 1),
            pack_bitfields({f"{c}_SET_OBJECT_CLASS_ID": abi.CLASSES[arch.compute]}),
            method(SUBCH_COPY, METHODS[arch.host_methods]["SET_OBJECT"], 1), abi.CLASSES[arch.dma_copy],
            method(SUBCH_COMPUTE, m["SET_SHADER_LOCAL_MEMORY_WINDOW_A"], 2), LOCAL_WINDOW >> 32,
            LOCAL_WINDOW & 0xffffffff,
            method(SUBCH_COMPUTE, m["SET_SHADER_SHARED_MEMORY_WINDOW_A"], 2), SHARED_WINDOW[arch.sm] >> 32,
            SHARED_WINDOW[arch.sm] & 0xffffffff] + local + (
                host_wfi(arch) + copy_out(arch, *upload) + copy_release(arch, sem_va) if upload else
                semaphore_release(arch, sem_va))


def wait_for_idle(arch: abi.Arch) -> list[int]:
    """The compute class's WAIT_FOR_IDLE: what follows starts after every earlier launch ended."""
    return [method(SUBCH_COMPUTE, METHODS[arch.compute_methods]["WAIT_FOR_IDLE"], 1), 0]


def host_wfi(arch: abi.Arch) -> list[int]:
    """The host's WFI (scope all): what follows, on any engine of the channel, starts after every
    earlier launch ended; what orders the copy engine after the kernels."""
    h = arch.host_methods
    return [method(SUBCH_HOST, METHODS[h]["WFI"], 1),
            pack_bitfields({f"{h}_WFI_SCOPE": CONSTANTS[f"{h}_WFI_SCOPE_ALL"]})]


def copy_dma(arch: abi.Arch, **fields) -> int:
    """A copy class LAUNCH_DMA word from its fields' value names (data_transfer_type="NONE")."""
    b = arch.copy_methods
    return pack_bitfields({f"{b}_LAUNCH_DMA_{k.upper()}": CONSTANTS[f"{b}_LAUNCH_DMA_{k.upper()}_{v}"]
                           for k, v in fields.items()})


def copy_out(arch: abi.Arch, src: int, dst: int, n: int) -> list[int]:
    """n bytes from src to dst (GPU virtual addresses) by the copy engine, in pieces of COPY_PIECE."""
    m = METHODS[arch.copy_methods]
    launch = copy_dma(arch, data_transfer_type="NON_PIPELINED", flush_enable="TRUE", src_memory_layout="PITCH",
                      dst_memory_layout="PITCH", multi_line_enable="FALSE", src_type="VIRTUAL", dst_type="VIRTUAL")
    out = []
    for off in range(0, n, COPY_PIECE):
        a, b = src + off, dst + off
        out += [method(SUBCH_COPY, m["OFFSET_IN_UPPER"], 4), a >> 32, a & 0xffffffff, b >> 32, b & 0xffffffff,
                method(SUBCH_COPY, m["LINE_LENGTH_IN"], 1), min(n - off, COPY_PIECE),
                method(SUBCH_COPY, m["LAUNCH_DMA"], 1), launch]
    return out


def copy_release(arch: abi.Arch, va: int) -> list[int]:
    """The copy engine's one-word semaphore release, after its copies' data is flushed."""
    m = METHODS[arch.copy_methods]
    return [method(SUBCH_COPY, m["SET_SEMAPHORE_A"], 3), va >> 32, va & 0xffffffff, SEM_RELEASED,
            method(SUBCH_COPY, m["LAUNCH_DMA"], 1),
            copy_dma(arch, data_transfer_type="NONE", flush_enable="TRUE",
                     semaphore_type="RELEASE_ONE_WORD_SEMAPHORE")]


def copies_dwords(copies) -> int:
    """The dwords the copies after a chain's launches take (the host WFI, the copies, the release
    in place of the host's)."""
    return 2 + sum(9 * -(-n // COPY_PIECE) for _, _, n in copies) if copies else 0


def launch_pushbuf(arch: abi.Arch, qmd_vas, sem_va: int, copies=()) -> list[int]:
    """The launches of `qmd_vas` in order, WAIT_FOR_IDLE between consecutive ones, the release;
    with `copies` ((src, dst, bytes)), the host's WFI, the copies and the copy engine's release."""
    c = arch.compute_methods
    m = METHODS[c]
    invalidate = pack_bitfields({f"{c}_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION": 1,
                                 f"{c}_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA": 1,
                                 f"{c}_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT": 1})
    out = []
    for i, qmd_va in enumerate(qmd_vas):
        out += (wait_for_idle(arch) if i else []) + [
            method(SUBCH_COMPUTE, m["INVALIDATE_SHADER_CACHES_NO_WFI"], 1), invalidate,
            method(SUBCH_COMPUTE, m["SEND_PCAS_A"], 1), qmd_va >> 8,
            method(SUBCH_COMPUTE, m["SEND_SIGNALING_PCAS2_B"], 1),
            CONSTANTS[f"{c}_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE"]]
    if not copies:
        return out + semaphore_release(arch, sem_va)
    out += host_wfi(arch)
    for src, dst, n in copies:
        out += copy_out(arch, src, dst, n)
    return out + copy_release(arch, sem_va)


def gpfifo_entry(arch: abi.Arch, va: int, dwords: int) -> int:
    h = arch.host_methods
    lo = pack_bitfields({f"{h}_GP_ENTRY0_GET": (va & 0xffffffff) >> 2})
    hi = pack_bitfields({f"{h}_GP_ENTRY1_GET_HI": va >> 32,
                         f"{h}_GP_ENTRY1_LEVEL": CONSTANTS[f"{h}_GP_ENTRY1_LEVEL_SUBROUTINE"],
                         f"{h}_GP_ENTRY1_LENGTH": dwords})
    return lo | hi << 32


# -- QMDs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Carveout:
    """A block's shared memory on one architecture (docs/nvdrv.md, "Shared memory")."""
    reserve: int                # bytes a block holds for the system beyond the cubin's .nv.shared.K
    steps: tuple[int, ...]      # the carve-outs (KiB) MIN/TARGET may name, ascending; MAX names the last


# sm_86: 1 KiB a block reserved for the system, outside .nv.shared.K (CUDA C++ Programming Guide,
# compute capability 8.x; tinygrad ops_nv.py: SHARED_MEMORY_SIZE = 0x400 + the section), MIN = TARGET
# = the smallest of 32, 64, 100 KiB holding the block, MAX 100 KiB (tinygrad, tested on Ampere/Ada).
# sm_90: ptxas puts the reserved 1 KiB in .nv.shared.K itself; Mesa NAK's gv100_sm_config_smem_size
# steps, the largest (96 KiB) what the H200 ran (2026-12-04; qualify's sm-config-228k tries 228).
CARVEOUTS: dict[str, Carveout] = {"sm_86": Carveout(0x400, (32, 64, 100)),
                                  "sm_90": Carveout(0, (8, 16, 32, 64, 96))}


def sm_config(kib: int) -> int:
    """A carve-out as the QMD's SM_CONFIG fields hold it: KiB / 4 + 1 (Mesa NAK, tinygrad)."""
    return kib // 4 + 1


def shared_config(sm: str, kernel: str, shared: int) -> tuple[int, int, int]:
    """(SHARED_MEMORY_SIZE, MIN = TARGET, MAX) for a kernel whose cubin declares `shared` bytes: the
    block's bytes (the reserve added, in 256-byte units, at least 1 KiB) and the smallest carve-out
    that holds them. BuildError naming the kernel when none does."""
    c = CARVEOUTS[sm]
    size = max(0x400, round_up(shared + c.reserve, 0x100))
    fits = [kib for kib in c.steps if size <= kib << 10]
    if not fits:
        from alphac.diag import BuildError
        raise BuildError(f"kernel {kernel} needs {size} bytes of shared memory a block on {sm} "
                         f"({shared} declared + {c.reserve} reserved), more than its largest carve-out, "
                         f"{c.steps[-1]} KiB")
    return size, sm_config(fits[0]), sm_config(c.steps[-1])


# Qualification only (docs/nvdrv.md, "Qualification"): QMD fields by name, set over qmd_fields'
# choices. Empty in every build; gpu/qualify.py --qmd-variant fills it for one process's builds
# (its QMD_VARIANTS table says which fields and why). pack_qmd refuses an unknown name.
QMD_OVERRIDES: dict[str, int] = {}


def qmd_fields(arch: abi.Arch, la: Launch, registers: int, shared: int, code_size: int,
               cbank_size: int, local: int = 0) -> dict[str, int]:
    return _qmd_choices(arch, la, registers, shared, code_size, cbank_size, local) | QMD_OVERRIDES


def _qmd_choices(arch: abi.Arch, la: Launch, registers: int, shared: int, code_size: int,
                 cbank_size: int, local: int = 0) -> dict[str, int]:
    layout = abi.QMD_LAYOUTS[arch.qmd]
    v = layout.values
    shared_size, sm_cfg, sm_max = shared_config(arch.sm, la.kernel, shared)
    common = {
        "QMD_GROUP_ID": 0x3f,
        "INVALIDATE_TEXTURE_HEADER_CACHE": v["INVALIDATE_TEXTURE_HEADER_CACHE_TRUE"],
        "INVALIDATE_TEXTURE_SAMPLER_CACHE": v["INVALIDATE_TEXTURE_SAMPLER_CACHE_TRUE"],
        "INVALIDATE_TEXTURE_DATA_CACHE": v["INVALIDATE_TEXTURE_DATA_CACHE_TRUE"],
        "INVALIDATE_SHADER_DATA_CACHE": v["INVALIDATE_SHADER_DATA_CACHE_TRUE"],
        "API_VISIBLE_CALL_LIMIT": v["API_VISIBLE_CALL_LIMIT_NO_CHECK"],
        "CWD_MEMBAR_TYPE": v["CWD_MEMBAR_TYPE_L1_SYSMEMBAR"],
        "BARRIER_COUNT": 1,
        "SHARED_MEMORY_SIZE": shared_size, "MIN_SM_CONFIG_SHARED_MEM_SIZE": sm_cfg,
        "TARGET_SM_CONFIG_SHARED_MEM_SIZE": sm_cfg, "MAX_SM_CONFIG_SHARED_MEM_SIZE": sm_max,
        "SHADER_LOCAL_MEMORY_HIGH_SIZE": local,
        "SHADER_LOCAL_MEMORY_LOW_SIZE": 0,
        "CTA_THREAD_DIMENSION0": la.block, "CTA_THREAD_DIMENSION1": 1, "CTA_THREAD_DIMENSION2": 1,
        "PROGRAM_ADDRESS_LOWER": la.code_va & 0xffffffff,
        "PROGRAM_ADDRESS_UPPER": la.code_va >> 32,
        "PROGRAM_PREFETCH_ADDR_LOWER_SHIFTED": (la.code_va >> 8) & 0xffffffff,
        "PROGRAM_PREFETCH_ADDR_UPPER_SHIFTED": la.code_va >> 40,
        "PROGRAM_PREFETCH_SIZE": min(code_size >> 8, 0x1ff),
        "SASS_VERSION": sass_version(arch),
        "CONSTANT_BUFFER_VALID(0)": 1,
        "CONSTANT_BUFFER_INVALIDATE(0)": v["CONSTANT_BUFFER_INVALIDATE_TRUE"],
        "CONSTANT_BUFFER_SIZE_SHIFTED4(0)": cbank_size >> 4,
    }
    if arch.qmd == "V03_00":
        return common | {
            "QMD_MAJOR_VERSION": 3, "QMD_VERSION": 0, "SM_GLOBAL_CACHING_ENABLE": 1,
            "SAMPLER_INDEX": v["SAMPLER_INDEX_VIA_HEADER_INDEX"],
            "REGISTER_COUNT_V": registers,
            "CTA_RASTER_WIDTH": la.grid, "CTA_RASTER_HEIGHT": 1, "CTA_RASTER_DEPTH": 1,
            "CONSTANT_BUFFER_ADDR_LOWER(0)": la.cbank_va & 0xffffffff,
            "CONSTANT_BUFFER_ADDR_UPPER(0)": la.cbank_va >> 32,
        }
    return common | {
        "QMD_MAJOR_VERSION": 4, "QMD_MINOR_VERSION": 0, "QMD_TYPE": v["QMD_TYPE_GRID_CTA"],
        "SAMPLER_INDEX": v["SAMPLER_INDEX_INDEPENDENTLY"],
        "REGISTER_COUNT": registers,
        "GRID_WIDTH": la.grid, "GRID_HEIGHT": 1, "GRID_DEPTH": 1,
        "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)": (la.cbank_va >> 6) & 0xffffffff,
        "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)": la.cbank_va >> 38,
    }


def sass_version(arch: abi.Arch) -> int:
    """SASS_VERSION: the SM version as major << 4 | minor (sm_86 -> 0x86, sm_90 -> 0x90)."""
    n = int(arch.sm.split("_")[1])
    return (n // 10) << 4 | n % 10


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OwnerData:
    """What the layer above tells the driver layer of a learner (alphac.build.owner_data makes
    it), so that nothing here reaches up to the IR or the kernels' builders: its name (for
    messages), each state's initial values, each data array's row width, its parameter count,
    its samples, its coordinate groups' sizes, its batch (0: full batch) and the words of a gs
    row (alphac.ptx.abi.row_layout; 0: `params`) and of each batched product's."""
    name: str
    states: tuple[tuple[str, tuple[float, ...]], ...]
    data: tuple[tuple[str, int], ...]
    params: int
    samples: int
    groups: tuple[int, ...]
    batch: int = 0
    row: int = 0
    products: tuple[int, ...] = ()  # each batch buffer mv<k>'s row width (abi.batch_widths)
    chains: tuple[tuple[str, ...], ...] = ()    # the kernels submitted together (lower.gpu.chains)
    digest: tuple[int, ...] = ()    # the sampled shadow's tree digest (alphac/ptx/digest.py): its
                                    # message's words, the levels' digest words, the host's words
    scalars: tuple[float, ...] = ()     # `sc`'s initial words, where the card runs the scalar
                                        # statements (alphac/ptx/abi.py card_scalars)


@dataclass(frozen=True)
class Share:
    """What a GPU owner computes: samples lo..hi-1 of `total` (the mean's count) and, per
    coordinate group, the coordinates [klo, khi) it updates. The single-process owner has every
    sample and coordinate, a deployment's GPU role its share; either way the host writes its
    data rows into `rows_<d>` at start-up (read and checked at run time, never in the image)."""
    lo: int
    hi: int
    total: int
    updates: tuple[tuple[int, int], ...]      # (klo, khi) of each group, by index
    batch: int = 0                  # a minibatch learner's batch size (its steps' samples vary)

    @classmethod
    def whole(cls, od: OwnerData) -> "Share":
        return cls(0, od.samples, od.samples, tuple((0, size) for size in od.groups), od.batch)

    @property
    def rows(self) -> int:
        """The most samples one step computes: the share, or a batch's part of it."""
        return min(self.batch, self.hi - self.lo) if self.batch else self.hi - self.lo


def _threads(od: OwnerData, kernel, share: Share) -> int:
    if kernel.threads is not None:      # the sum kernels: fixed by the learner
        return kernel.threads
    if kernel.tile is not None:         # per-sample tiles: so many threads a tile of rows
        return -(-share.rows // kernel.tile[0]) * kernel.tile[1]
    if kernel.name == "grad_samples":
        return share.rows
    if kernel.name == "xsum_add":           # one a term (alphac/ptx/xsum.py)
        return share.rows * od.params
    if kernel.name in ("owner_sum", "xsum_clear", "xsum_fold", "xsum_round"):
        return od.params
    klo, khi = share.updates[kernel.group]
    return khi - klo


def plan(od: OwnerData, built: list, sm: int, share: Share | None = None,
         topology: Topology | None = None, host_arena: bool = False, choices=()) -> GpuImage:
    """The owner's memory plan and launch image for every kernel in `built` (alphac.ptx.build),
    for `share` (default: the whole learner); `topology` (the host description's) sizes the
    local-memory area when a kernel spills, and is required then (BuildError without it).
    `host_arena`: the host writes into the arena (a deployment role's states and combined G), so
    all of the video memory is mapped for the CPU; else only the GPFIFO area is. `choices`: the
    host's (key, value) of host.CHOICES other than the default (GpuHost.choices): `results bar1`,
    the host reads the card's results in the arena through BAR1 (all of the video memory mapped),
    no copy out, each chain ending with the host's release with WFI; `sysmem uncached`, the
    system-memory allocation uncached; `inputs bar1`, the constant banks and MIRRORED buffers in
    the arena, which the host writes through BAR1; `upload bar1`, the launch image and the data
    rows written into the arena through BAR1 at start-up, the setup push buffer run from there
    with no copy, ending with the host's release (docs/nvdrv.md "Fallbacks to the verified
    paths")."""
    pick = dict((k, v[0][0]) for k, v in CHOICES.items()) | dict(choices)
    copied = pick["results"] == "copy"          # else read through BAR1: what the H200 ran on 2026-12-04
    uploaded = pick["upload"] == "copy"         # else the image and the rows written through BAR1
    host_arena = host_arena or not copied or not uploaded or pick["inputs"] == "bar1"
    share = share or Share.whole(od)
    stack = max((b.image.local for b in built), default=0)
    per_thread = local_per_thread(stack)
    if stack and topology is None:
        from alphac.diag import BuildError
        worst = max(built, key=lambda b: b.image.local)
        raise BuildError(f"kernel {worst.kernel.name} of `{od.name}` needs {stack} bytes of local memory "
                         f"per thread (ptxas spilled it), and the GPU host description has no `topology` "
                         f"to size the card's local-memory area for: add `topology G T S W` (what the "
                         f"owner's --probe-identity prints, gpu/qualify.py writes it) or --gpu-topology")
    arch = abi.ARCHES[f"sm_{sm}"]
    qmd_layout = abi.QMD_LAYOUTS[arch.qmd]
    arena = bytearray()

    def put(data: bytes, align: int) -> int:
        while len(arena) % align:
            arena.append(0)
        off = len(arena)
        arena.extend(data)
        return off

    code_off = {}
    for b in built:
        if b.image.relocs:
            raise ValueError(f"{b.kernel.name}: relocations in the code are not supported")
        code_off[b.kernel.name] = put(b.image.code, CODE_ALIGN)
    put(bytes(CODE_TAIL), 1)
    cbank_off = {b.kernel.name: put(bytes(round_up(b.image.cbank0, CBANK_ALIGN)), CBANK_ALIGN) for b in built}
    qmd_off = {b.kernel.name: put(bytes(qmd_layout.nbytes), QMD_ALIGN) for b in built}
    empty = {f"update_g{i}" for i, (klo, khi) in enumerate(share.updates) if khi <= klo}

    def launched(chain) -> tuple[str, ...]:   # an update kernel with no coordinates is left out;
        return tuple(k for k in chain if k not in empty and k in qmd_off)     # (digest_read: none)
    P = od.params
    exact_sum = any(p.role == "xd" for b in built for p in b.kernel.params)
    # the states the card writes: an update kernel's; any other (a scalar state, or a grouped one
    # no statement assigns, whose update kernel takes none) has no result: the host's is the state
    written = {f"state_{p.ref}" for b in built if b.kernel.name.startswith("update_g")
               for p in b.kernel.params if p.role == "state"}
    out_sizes = {"G": 8 * P, **({"xd": 8 * XS_WORDS * P, "xc": 8 * XC_WORDS * P} if exact_sum else {}),
                 **{f"state_{name}": 8 * len(init) for name, init in od.states if f"state_{name}" in written},
                 **({"dout": 32, "dprev": 8 * od.digest[0], "dmsg": 8 * od.digest[0]} if od.digest else {})}
    results, at = {}, 0                 # each buffer's offset in the results allocation
    for name in out_sizes:
        results[name], at = at, round_up(at + out_sizes[name], 256)

    mirrored = {*MIRRORED, *({"G"} if exact_sum else ()), *({"dhost"} if od.digest else ()),
                *({"sc"} if od.scalars else ()),
                *(f"state_{name}" for name, _ in od.states if f"state_{name}" not in written)}

    def outs(chain) -> list[str]:       # what the host reads after the chain: what its kernels write
        upd = [k for k in chain if k.startswith("update_g")]
        if chain == READBACK:           # a sampled step drawn: the card's message before and after it
            return ["dprev", "dmsg"]
        if any(k.startswith("digest_") for k in chain):     # any other sampled step: its digest alone
            return ["dout"]
        grad = (["xd", "xc"] if exact_sum and "xsum_round" not in chain else ["G"]) if len(upd) < len(chain) else []
        return [k for k in grad + [k for k in results if k in written and upd] if out_sizes[k]]
    # per launch invalidate, PCAS A, PCAS2 B (2 dwords each), a wait-for-idle between; the release;
    # the copies out
    pb_off = {c: put(bytes(4 * (max(0, 8 * len(launched(c)) - 2) + 6 + copies_dwords(
        [(0, 0, out_sizes[k]) for k in outs(c) if copied]))), 256) for c in od.chains if launched(c) or c == READBACK}

    buffers: dict[str, int] = {}
    for name, init in od.states:
        buffers[f"state_{name}"] = put(struct.pack(f"<{len(init)}d", *init), 256)
    for b in built:
        for p in b.kernel.params:
            if p.role == "const":
                buffers[f"{b.kernel.name}.{p.name}"] = put(struct.pack(f"<{len(p.values)}d", *p.values), 256)
    rows = share.hi - share.lo
    # what the host writes each step and the card only reads (a minibatch's samples, the host's
    # reduced scalars: `reduce` writes the same words on the card) lies in the image, so that
    # the card reads it, as the constant banks, from its copy in `staging` (MIRRORED)
    if share.batch:
        buffers["idx"] = put(bytes(8 * max(1, share.rows)), 256)
    rd = [b.kernel.threads for b in built if b.kernel.name == "reduce"]   # the card's reduced scalars
    if rd:
        buffers["rd"] = put(bytes(8 * rd[0]), 256)
    if exact_sum:
        buffers["G"] = put(bytes(8 * max(1, P)), 256)
    if od.scalars:                      # the scalar states, two words each (the host's or `scalars`')
        buffers["sc"] = put(struct.pack(f"<{len(od.scalars)}d", *od.scalars), 256)
    if od.digest:                       # the host's states in the digest's message
        buffers["dhost"] = put(bytes(8 * max(1, od.digest[2])), 256)
    # the setup push buffer, last: it ends with the copy of the image and the rows from `staging`
    rows_bytes = sum(round_up(8 * max(1, rows * cols), 256) for _, cols in od.data)
    setup_dwords = SETUP_DWORDS + (SETUP_LOCAL_DWORDS if stack else 0)
    pieces = -(-(len(arena) + 4 * setup_dwords + 2048 + rows_bytes) // COPY_PIECE)
    setup_off = put(bytes(4 * (setup_dwords + copies_dwords([(0, 0, pieces * COPY_PIECE)] * uploaded))), 256)
    image_end = round_up(len(arena), 8)
    end = round_up(image_end, 256)
    for name, cols in od.data:          # written by the host at start-up: past the image
        buffers[f"rows_{name}"] = end
        end = round_up(end + 8 * max(1, rows * cols), 256)
    for k, width in enumerate(od.products):     # written by the batch kernels each step
        buffers[f"mv{k}"] = end
        end = round_up(end + 8 * max(1, width * share.rows), 256)
    gs_off = end
    g_off = round_up(gs_off + 8 * max(1, (od.row or P) * share.rows), 256)
    # under exact_sum G lies in `staging` (the full step's host writes it); a sampled run, whose
    # card alone writes and reads it (xsum_round, the updates, the digest), has it here (`Gv`)
    end = g_off if exact_sum and not od.digest else round_up(g_off + 8 * max(1, P), 256)
    exact = {}                          # exact_sum: the card's dense and compact accumulators; the digest's
    if exact_sum:
        exact = {"xd": end, "xc": end + 8 * XS_WORDS * P}
        end = round_up(exact["xc"] + 8 * XC_WORDS * P, 256)
    if rd and any(p.role == "xr" for b in built for p in b.kernel.params):
        exact["xr"], end = end, round_up(end + 8 * XS_WORDS * rd[0], 256)   # reduce's exact sums' accumulators
    if od.digest:                       # the message, the levels' digests, the root
        exact.update(dmsg=end, dprev=round_up(end + 8 * max(1, od.digest[0]), 256))
        exact["dg"] = round_up(exact["dprev"] + 8 * max(1, od.digest[0]), 256)
        exact["dout"] = round_up(exact["dg"] + 8 * od.digest[1], 256)
        end = round_up(exact["dout"] + 32, 256)
    arena_size = round_up(end, HUGE)

    upload_end = round_up(image_end, 256) + rows_bytes     # the image and the rows, from `staging`
    # Two allocations (start-up's cost is per allocation: issue 42): one of video memory, the
    # GPFIFO area (the ring, USERD) then the arena, and one of system memory, mapped cached: the
    # error notifier and the semaphore, the results, the staging copy; each mapped once.
    parts = {"vidmem": [("gpfifo", GPFIFO_AREA), ("arena", arena_size)],
             "host": [("sysmem", SYSMEM_SIZE), *[("results", round_up(max(at, 1), SYSMEM_SIZE))] * copied,
                      ("staging", round_up(upload_end, SYSMEM_SIZE))]}
    table = [("vidmem", "vidmem"), ("host", f"sysmem-{pick['sysmem']}"), ("channel", CHANNEL_RANGE, "reserved"),
             ("usermode", USERMODE_SIZE, "usermode")]
    per_tpc = local_per_tpc(per_thread, topology) if stack else 0
    if stack:
        table.append(("local", round_up(local_area_size(per_thread, topology), HUGE), "vidmem-gpu"))
    allocs, va = [], ARENA_VA - GPFIFO_AREA             # so the arena starts at ARENA_VA
    for name, *rest in table:
        size, where = (sum(n for _, n in parts[name]), rest[0]) if name in parts else rest
        cpu = GPFIFO_AREA if name == "vidmem" and not host_arena else 0
        allocs.append(Allocation(name, va, size, where, cpu=cpu))
        at_part = va
        for part, n in parts.get(name, ()):
            allocs.append(Allocation(part, at_part, n, where, name))
            at_part += n
        va = round_up(va + size, HUGE)
    by_name = {a.name: a for a in allocs}
    sem_va = by_name["sysmem"].va + SEMAPHORE_OFFSET
    staging = by_name["staging"].va
    inputs = staging if pick["inputs"] == "sysmem" else ARENA_VA     # where the host writes a step's inputs
    vas = {k: (inputs if k in mirrored else ARENA_VA) + v for k, v in buffers.items()}
    for name, cols in od.data:          # kernels index rows by the global sample number
        vas[f"data_{name}"] = vas[f"rows_{name}"] - 8 * share.lo * cols
    vas["gs"] = ARENA_VA + gs_off
    vas.setdefault("G", ARENA_VA + g_off)
    if exact_sum and od.digest:
        vas["Gv"] = ARENA_VA + g_off
    vas.update({k: ARENA_VA + v for k, v in exact.items()})
    results = {k: by_name["results"].va + v if copied else vas[k] for k, v in results.items()}

    launches = []
    for b in built:
        k, im = b.kernel, b.image
        threads = _threads(od, k, share)
        block = k.block or min(BLOCK, round_up(max(1, threads), 32))
        grid = max(1, -(-threads // block))
        cbank = bytearray(round_up(im.cbank0, CBANK_ALIGN))
        for dw, value in cbank_prefix(arch).items():
            struct.pack_into("<Q", cbank, 4 * dw, value)
        struct.pack_into("<6I", cbank, 0, block, 1, 1, grid, 1, 1)     # %ntid, %nctaid
        scalars, counts, gslots = [], [], []
        klo, khi = share.updates[k.group] if k.group is not None else (0, 0)
        statics = {"lo": share.lo, "hi": share.hi, "klo": klo, "khi": khi, "count": 0,
                   "rows": 0 if share.batch else rows,
                   "n": 0 if share.batch else rows if k.group is None and not k.name.startswith("reduce") else share.total}
        for p, kp in zip(k.params, im.params):
            at = im.param_base + kp.offset
            if p.type == "u64":
                key = {"state": f"state_{p.ref}", "data": f"data_{p.ref}", "mv": f"mv{p.ref}"}.get(p.role) or \
                    (f"{k.name}.{p.name}" if p.role == "const" else p.role)
                struct.pack_into("<Q", cbank, at, vas[key])
                if key == "G" and exact_sum:
                    gslots.append(inputs + cbank_off[k.name] + at)
            elif p.type == "u32":
                struct.pack_into("<I", cbank, at, statics[p.role])
                if share.batch and p.role in ("count", "n", "rows"):
                    counts.append(inputs + cbank_off[k.name] + at)
            else:
                scalars.append(Scalar(p.ref, p.version, inputs + cbank_off[k.name] + at))
        code_va = ARENA_VA + code_off[k.name]
        cbank_va = inputs + cbank_off[k.name]           # read by the card from system memory (or the arena)
        qmd_va = ARENA_VA + qmd_off[k.name]
        la = Launch(k.name, threads, block, grid, code_va, im.code_sha256, qmd_va, b"", cbank_va,
                    bytes(cbank), tuple(scalars), tuple(counts), tuple(gslots))
        qmd = pack_qmd(qmd_layout, qmd_fields(arch, la, im.registers, im.shared, len(im.code), len(cbank),
                                              per_thread))
        la = Launch(**{**la.__dict__, "qmd": qmd})
        arena[cbank_off[k.name]:cbank_off[k.name] + len(cbank)] = cbank
        arena[qmd_off[k.name]:qmd_off[k.name] + len(qmd)] = qmd
        launches.append(la)
    chains = {}
    for c, off in pb_off.items():
        copies = tuple((vas[k], results[k], out_sizes[k]) for k in outs(c if c == READBACK else launched(c)) if copied)
        pb = launch_pushbuf(arch, [ARENA_VA + qmd_off[k] for k in launched(c)], sem_va, copies)
        arena[off:off + 4 * len(pb)] = struct.pack(f"<{len(pb)}I", *pb)
        chains[c] = Chain(launched(c), ARENA_VA + off, tuple(pb), gpfifo_entry(arch, ARENA_VA + off, len(pb)),
                          copies)
    local_va = by_name["local"].va if stack else 0
    setup = setup_pushbuf(arch, sem_va, local_va, per_tpc, (staging, ARENA_VA, upload_end) if uploaded else None)
    arena[setup_off:setup_off + 4 * len(setup)] = struct.pack(f"<{len(setup)}I", *setup)
    upload = staging if uploaded else ARENA_VA          # where the host writes the rows
    image = bytes(arena[:image_end]) + bytes(image_end - len(arena))
    return GpuImage(sm, arch, tuple(allocs), tuple(launches), tuple(setup),
                    gpfifo_entry(arch, upload + setup_off, len(setup)), vas, image,
                    hashlib.sha256(image).digest(), per_thread, per_tpc, topology if stack else None,
                    {c: chains.get(c) for c in od.chains}, results, upload)

