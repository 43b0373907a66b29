"""The mock GPU: memory behind the driver's allocations, the GPFIFO channel, QMD launches.

Memory: every allocation the driver makes is a memfd (the executable maps the same memfd, so
both see the same real pages); `GpuMemory` is the GPU's address space, built from the UVM
mappings the executable asks for, and faults (KeyError) outside them.

A channel runs when its doorbell is rung with its token: the mock reads GPPut from USERD, takes
each GPFIFO entry from GPGet to GPPut, decodes the push buffer (method headers by
abi.BITFIELDS NVC56F_DMA_*, methods by abi.METHODS of the channel's classes), and for
SEND_SIGNALING_PCAS2_B launches the QMD at SEND_PCAS_A << 8: decoded with unpack_qmd, the
kernel found by the SHA-256 of the code at its program address, its parameters read from
constant bank 0 at the offsets of the kernel's launch image, and the kernel run by the PTX
interpreter (tests/ptx_interp.py) over this memory. The host semaphore release writes its
payload. The copy object on subchannel 4 (abi.METHODS of the arch's copy class) copies a linear
range at LAUNCH_DMA and releases its one-word semaphore (`dma`: every other LAUNCH_DMA field, an
empty, overlapping or unmapped range, a release without flush, refused by name). Anything the
mock does not know is an error the test reports.

Ordering. Launches on a channel may overlap until a wait-for-idle: the compute class's
WAIT_FOR_IDLE, or a host semaphore release with RELEASE_WFI. The mock runs them one after the
other, so it records each launch's loads and stores (8-byte words, `Accesses`) and reports a
launch that reads or writes a word another launch since the last wait-for-idle wrote, or writes
one it read: a chain of launches that leaves a dependency unordered is an error. The copy engine
is another engine: the compute WAIT_FOR_IDLE does not order it, the host's WFI (or a release with
RELEASE_WFI) does, so a copy that reads a word a launch wrote since the last of those is an error.
Either way the unordered reader also gets the word as it was before that launch wrote it (it
overtook the launch, the worst a card may do), so the missing order shows in the bits too: what
gpu/order_probe.py's control reads.
With the driver's `latency` the whole channel, copies included, runs only calls after the
doorbell, so a host that reads the copies before its wait reads what was there before.

Shared memory. A launch's SHARED_MEMORY_SIZE must hold its kernel's `.nv.shared.K` plus the bytes
the architecture reserves a block outside it, and its MIN and TARGET carve-outs must each be one of
the architecture's and hold SHARED_MEMORY_SIZE, MIN <= TARGET <= MAX (`shared_errors`; the reserve
and the carve-outs are alphac.nvdrv.image.CARVEOUTS, docs/nvdrv.md "Shared memory").

Local memory. The PTX alphac emits has no local space; ptxas spills in the SASS (the cubin's
MIN_STACK_SIZE, `Image.local`), so the mock models what the SASS does with it: each thread's
stack lives below the top of its 16 MiB local window, from the stack top the SASS loads from
constant bank 0's dword 10 down by MIN_STACK_SIZE bytes, so the QMD's SHADER_LOCAL_MEMORY_HIGH_SIZE
must cover `window top - stack top + MIN_STACK_SIZE`. The bytes behind a thread's window are its
slot in the area SET_SHADER_LOCAL_MEMORY_A/B sets up: per TPC SET_SHADER_LOCAL_MEMORY_NON_THROTTLED
_A/B bytes, which must hold warps-per-SM * SMs-per-TPC warps of 32 lanes at round_up(32 *
HIGH_SIZE, 0x200) bytes a warp, for every TPC of the card's topology (what GR_GET_INFO answers),
all of it mapped for the GPU. A launch of a spilling kernel that finds any of that short is an
error; otherwise every thread gets a slot (warps placed from the area's far end, so a short
allocation faults) and the interpreter writes its stack frame there before the thread runs and
checks it after (`LocalFrames`). The slot arithmetic is the mock's model [inferred]: what the
hardware checks is the same sizes (Mesa NVK, nvk_slm_area_ensure; tinygrad ops_nv.py).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import struct

from alphac.nvdrv import abi
from alphac.nvdrv.abi import BITFIELDS, CONSTANTS, METHODS
from alphac.nvdrv.image import CARVEOUTS, sm_config
from nvdrv_decode import decode_entry, unpack_qmd
from ptx_interp import Ptx


def shared_errors(sm: str, kernel: str, shared: int, q: dict) -> list[str]:
    """What is wrong with a QMD's shared memory for a kernel whose cubin declares `shared` bytes:
    SHARED_MEMORY_SIZE below them plus the architecture's reserve, a MIN or TARGET carve-out that is
    not one of the architecture's (image.CARVEOUTS) or does not hold SHARED_MEMORY_SIZE, or MIN >
    TARGET > MAX out of order (a block that does not fit its carve-out fails to launch on a card)."""
    c, size = CARVEOUTS[sm], q["SHARED_MEMORY_SIZE"]
    out = [f"{kernel}: shared memory {size} < {shared} + {c.reserve} reserved"] if size < shared + c.reserve else []
    kib = {sm_config(k): k for k in c.steps}
    for f in ("MIN", "TARGET"):
        v = q[f"{f}_SM_CONFIG_SHARED_MEM_SIZE"]
        if v not in kib or kib[v] << 10 < size:
            out.append(f"{kernel}: {f}_SM_CONFIG_SHARED_MEM_SIZE {v} ({kib.get(v, '?')} KiB) is not a carve-out "
                       f"of {sm} that holds the block's {size} bytes of shared memory")
    if not q["MIN_SM_CONFIG_SHARED_MEM_SIZE"] <= q["TARGET_SM_CONFIG_SHARED_MEM_SIZE"] <= \
            q["MAX_SM_CONFIG_SHARED_MEM_SIZE"]:
        out.append(f"{kernel}: the SM_CONFIG_SHARED_MEM_SIZE fields are not MIN <= TARGET <= MAX")
    return out


def bits(word: int, name: str) -> int:
    hi, lo = BITFIELDS[name]
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


class Alloc:
    """Driver memory: real pages in a memfd, mapped here and (by mmap) in the executable."""

    def __init__(self, handle: int, kind: str, size: int):
        self.handle, self.kind, self.size = handle, kind, size
        self.fd = os.memfd_create(f"alphac-mock-{kind}-{handle:#x}", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)

    def u32(self, off: int) -> int:
        return struct.unpack_from("<I", self.mm, off)[0]

    def set_u32(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.mm, off, v)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


class GpuMemory:
    """The GPU's virtual address space: (base, length, Alloc, offset in it) mappings from UVM or
    the RM's RM_MAP_MEMORY_DMA."""

    def __init__(self):
        self.maps: list[tuple[int, int, Alloc, int]] = []

    def map(self, base: int, length: int, alloc: Alloc, offset: int = 0) -> None:
        self.maps.append((base, length, alloc, offset))

    def spans(self) -> list[tuple[int, int, Alloc, int]]:
        return list(self.maps)

    def where(self, va: int, n: int) -> tuple[Alloc, int]:
        for base, length, alloc, offset in self.maps:
            if base <= va and va + n <= base + length:
                return alloc, va - base + offset
        raise KeyError(f"GPU fault at {va:#x} (+{n}): no mapping")

    def read(self, va: int, n: int) -> bytes:
        a, off = self.where(va, n)
        return bytes(a.mm[off:off + n])

    def write(self, va: int, data: bytes) -> None:
        a, off = self.where(va, len(data))
        a.mm[off:off + len(data)] = data

    def u32(self, va: int) -> int:
        return struct.unpack("<I", self.read(va, 4))[0]

    def u64(self, va: int) -> int:
        return struct.unpack("<Q", self.read(va, 8))[0]

    # the PTX interpreter's memory
    def load(self, va: int) -> float:
        return struct.unpack("<d", self.read(va, 8))[0]

    def store(self, va: int, value: float) -> None:
        self.write(va, struct.pack("<d", value))


WINDOW_SPAN = 1 << 24          # a thread's local window (the stack top 0xfffdc0 sits 0x240 below it)


def round_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


class LocalFrames:
    """The set-up area as the interpreter's local space: thread g's stack frame, `used` bytes at
    the top of its slot, written with g's pattern on entry and checked on exit."""

    def __init__(self, memory: GpuMemory, base: int, per_tpc: int, per_warp: int, per_thread: int,
                 used: int, topology: tuple):
        self.memory, self.base, self.per_tpc, self.per_warp = memory, base, per_tpc, per_warp
        self.per_thread, self.used = per_thread, used
        _, _, self.sms, self.warps = topology
        self.slots = topology[0] * topology[1] * self.sms * self.warps

    def frame(self, g: int) -> int:
        slot = self.slots - 1 - (g // 32) % self.slots
        tpc, rest = divmod(slot, self.sms * self.warps)
        return self.base + tpc * self.per_tpc + rest * self.per_warp + (g % 32 + 1) * self.per_thread - self.used

    def pattern(self, g: int) -> bytes:
        return struct.pack("<Q", 0x10ca1_0000_0000 | g) * (self.used // 8) + bytes(self.used % 8)

    def enter(self, g: int) -> None:
        self.memory.write(self.frame(g), self.pattern(g))

    def leave(self, g: int) -> None:
        if self.memory.read(self.frame(g), self.used) != self.pattern(g):
            raise KeyError(f"thread {g}'s local-memory frame at {self.frame(g):#x} was overwritten")


class Accesses:
    """The memory as one launch sees it: what it loads and stores, recorded; a word in `stale`
    (an earlier launch wrote it with no wait-for-idle between) it loads as it was before that
    launch, until it stores the word itself (this launch overtook the earlier one)."""

    def __init__(self, memory: GpuMemory, stale: dict[int, bytes] | None = None):
        self.memory, self.loads, self.stores, self.stale = memory, set(), set(), stale or {}
        self.before: dict[int, bytes] = {}          # each stored word as it was before the launch

    def load(self, va: int) -> float:
        self.loads.add(va)
        if va in self.stale and va not in self.stores:
            return struct.unpack("<d", self.stale[va])[0]
        return self.memory.load(va)

    def store(self, va: int, value: float) -> None:
        self.stores.add(va)
        if va not in self.before:
            self.before[va] = self.memory.read(va, 8)
        self.memory.store(va, value)


class Channel:
    def __init__(self, handle: int, token: int, ring_va: int, entries: int, userd: Alloc,
                 userd_off: int, group):
        self.handle, self.token, self.ring_va, self.entries = handle, token, ring_va, entries
        self.userd, self.userd_off, self.group = userd, userd_off, group
        self.compute: int | None = None               # the compute class allocated on it
        self.copy: int | None = None                  # the DMA copy class allocated on it
        self.unfenced: dict[int, tuple[str, bytes]] = {}   # since the last host WFI: word -> the launch
                                                           # that wrote it, the bytes it held before
        self.get = 0
        self.subch: dict[int, int] = {}               # subchannel -> bound class
        self.regs: dict[str, int] = {}                # method name -> last data
        self.written: dict[int, tuple[str, bytes]] = {}   # since the last wait-for-idle: word -> its
                                                          # writer, the bytes it held before
        self.read: dict[int, str] = {}                # ... word -> a reader

    @property
    def put(self) -> int:
        return self.userd.u32(self.userd_off + abi.USERD_GPPUT_OFFSET)


class Gpu:
    def __init__(self, arch: abi.Arch, kernels: list, memory: GpuMemory, errors: list[str],
                 topology: tuple = (1, 1, 1, 1)):
        self.arch, self.memory, self.errors, self.topology = arch, memory, errors, topology
        self.by_code = {b.image.code_sha256: b for b in kernels}
        self.programs: dict[str, Ptx] = {}
        self.once: dict[str, tuple[int, Ptx]] = {}          # kernel -> (its launch N, the program it runs then)
        self.launches: list[tuple[str, int, int, dict]] = []
        self.host = {v: k for k, v in METHODS[arch.host_methods].items()}
        self.copy_names = {v: k for k, v in METHODS[arch.copy_methods].items()}
        self.copies: list[tuple[int, int, int]] = []         # (src, dst, bytes) of each copy done
        self.compute = {v: k for k, v in METHODS[arch.compute_methods].items()}
        self.qmd_layout = abi.QMD_LAYOUTS[arch.qmd]

    # -- the channel -----------------------------------------------------------------------------
    def run(self, ch: Channel) -> None:
        """Everything from GPGet to GPPut; then GPGet = GPPut."""
        put = ch.put
        if put >= ch.entries:
            self.errors.append(f"GPPut {put} outside the ring of {ch.entries}")
            return
        while ch.get != put:
            entry = self.memory.u64(ch.ring_va + 8 * ch.get)
            va, dwords = decode_entry(self.arch, entry)
            words = struct.unpack(f"<{dwords}I", self.memory.read(va, 4 * dwords))
            self.pushbuf(ch, words)
            ch.get = (ch.get + 1) % ch.entries
        ch.userd.set_u32(ch.userd_off + abi.USERD_GPGET_OFFSET, ch.get)

    def pushbuf(self, ch: Channel, words: tuple[int, ...]) -> None:
        i = 0
        while i < len(words):
            head = words[i]
            op = bits(head, "NVC56F_DMA_SEC_OP")
            sub = bits(head, "NVC56F_DMA_METHOD_SUBCHANNEL")
            addr = bits(head, "NVC56F_DMA_METHOD_ADDRESS") << 2
            if op == CONSTANTS["NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD"]:
                self.method(ch, sub, addr, bits(head, "NVC56F_DMA_IMMD_DATA"))
                i += 1
                continue
            count = bits(head, "NVC56F_DMA_METHOD_COUNT")
            if op not in (CONSTANTS["NVC56F_DMA_SEC_OP_INC_METHOD"], CONSTANTS["NVC56F_DMA_SEC_OP_NON_INC_METHOD"],
                          CONSTANTS["NVC56F_DMA_SEC_OP_ONE_INC"]):
                self.errors.append(f"push buffer: unknown opcode {op} in {head:#010x}")
                return
            for k in range(count):
                step = {CONSTANTS["NVC56F_DMA_SEC_OP_INC_METHOD"]: k,
                        CONSTANTS["NVC56F_DMA_SEC_OP_NON_INC_METHOD"]: 0,
                        CONSTANTS["NVC56F_DMA_SEC_OP_ONE_INC"]: min(k, 1)}[op]
                self.method(ch, sub, addr + 4 * step, words[i + 1 + k])
            i += 1 + count

    def method(self, ch: Channel, sub: int, addr: int, data: int) -> None:
        if addr == 0:                                  # SET_OBJECT on every class
            for want, what in ((1, "compute"), (4, "copy")):
                if sub == want and data != getattr(ch, what):
                    self.errors.append(f"SET_OBJECT {data:#x} on subchannel {sub}: the channel's {what} "
                                       f"object is {getattr(ch, what)}")
            ch.subch[sub] = data
            return
        if sub == 0:
            name = self.host.get(addr)
            if name is None:
                self.errors.append(f"host method {addr:#x} unknown to {self.arch.host_methods}")
                return
            ch.regs["host." + name] = data
            if name == "SEM_EXECUTE":
                self.semaphore(ch, data)
                if bits(data, f"{self.arch.host_methods}_SEM_EXECUTE_RELEASE_WFI"):
                    ch.written, ch.read, ch.unfenced = {}, {}, {}
            elif name == "WFI":                        # every engine of the channel idle
                ch.written, ch.read, ch.unfenced = {}, {}, {}
            return
        if sub == 4:
            return self.copy_method(ch, addr, data)
        if ch.subch.get(sub) != ch.compute or sub != 1:
            self.errors.append(f"method {addr:#x} on subchannel {sub} with no compute object bound")
            return
        name = self.compute.get(addr)
        if name is None:
            self.errors.append(f"compute method {addr:#x} unknown to {self.arch.compute_methods}")
            return
        ch.regs[name] = data
        if name == "SEND_SIGNALING_PCAS2_B":
            c = self.arch.compute_methods
            action = bits(data, f"{c}_SEND_SIGNALING_PCAS2_B_PCAS_ACTION")
            if action not in (CONSTANTS[f"{c}_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_SCHEDULE"],
                              CONSTANTS[f"{c}_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE"]):
                self.errors.append(f"PCAS action {action} does not schedule the QMD")
                return
            self.launch(ch, ch.regs.get("SEND_PCAS_A", 0) << 8)
        elif name == "WAIT_FOR_IDLE":
            ch.written, ch.read = {}, {}
        elif name not in ("SEND_PCAS_A", "INVALIDATE_SHADER_CACHES_NO_WFI", "SET_SHADER_LOCAL_MEMORY_WINDOW_A",
                          "SET_SHADER_LOCAL_MEMORY_WINDOW_B", "SET_SHADER_SHARED_MEMORY_WINDOW_A",
                          "SET_SHADER_SHARED_MEMORY_WINDOW_B", "SET_SHADER_LOCAL_MEMORY_A",
                          "SET_SHADER_LOCAL_MEMORY_B", "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A",
                          "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B", "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C"):
            self.errors.append(f"compute method {name} is not modelled")

    def local_frames(self, ch: Channel, name: str, stack: int, q: dict, stack_top: int) -> LocalFrames | None:
        """The area a kernel with `stack` bytes of spills runs in, or None after an error."""
        c = self.arch.compute_methods
        per_thread = q["SHADER_LOCAL_MEMORY_HIGH_SIZE"]
        used = WINDOW_SPAN - stack_top + stack if stack_top < WINDOW_SPAN else None
        if used is None or per_thread < used:
            self.errors.append(f"{name}: its stack reaches {used} bytes below the local window's top; the "
                               f"QMD's SHADER_LOCAL_MEMORY_HIGH_SIZE gives {per_thread}")
            return None
        r = ch.regs
        base = bits(r.get("SET_SHADER_LOCAL_MEMORY_A", 0), f"{c}_SET_SHADER_LOCAL_MEMORY_A_ADDRESS_UPPER") << 32 | \
            bits(r.get("SET_SHADER_LOCAL_MEMORY_B", 0), f"{c}_SET_SHADER_LOCAL_MEMORY_B_ADDRESS_LOWER")
        per_tpc = bits(r.get("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", 0),
                       f"{c}_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A_SIZE_UPPER") << 32 | \
            bits(r.get("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B", 0),
                 f"{c}_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B_SIZE_LOWER")
        if not base or not per_tpc:
            self.errors.append(f"{name} spills {stack} bytes a thread, but no local-memory area is set up "
                               f"(SET_SHADER_LOCAL_MEMORY_A/B {base:#x}, NON_THROTTLED {per_tpc})")
            return None
        gpcs, tpcs, sms, warps = self.topology
        per_warp = round_up(32 * per_thread, 0x200)
        if per_tpc < per_warp * warps * sms:
            self.errors.append(f"{name}: {per_tpc} bytes of local memory per TPC < {warps} warps x {sms} SMs "
                               f"x {per_warp} bytes")
            return None
        try:
            self.memory.where(base, per_tpc * gpcs * tpcs)
        except KeyError:
            self.errors.append(f"{name}: the local-memory area {base:#x} + {per_tpc} x {gpcs * tpcs} TPCs is "
                               "not all mapped for the GPU")
            return None
        return LocalFrames(self.memory, base, per_tpc, per_warp, per_thread, used, self.topology)

    def semaphore(self, ch: Channel, data: int) -> None:
        h = self.arch.host_methods
        if bits(data, f"{h}_SEM_EXECUTE_OPERATION") != CONSTANTS[f"{h}_SEM_EXECUTE_OPERATION_RELEASE"]:
            self.errors.append("only semaphore releases are modelled")
            return
        if bits(data, f"{h}_SEM_EXECUTE_RELEASE_WFI") != 1:
            self.errors.append("a release without wait-for-idle does not wait for the kernel")
        va = (bits(ch.regs.get("host.SEM_ADDR_LO", 0), f"{h}_SEM_ADDR_LO_OFFSET") << 2) | \
             (bits(ch.regs.get("host.SEM_ADDR_HI", 0), f"{h}_SEM_ADDR_HI_OFFSET") << 32)
        payload = ch.regs.get("host.SEM_PAYLOAD_LO", 0)
        if bits(data, f"{h}_SEM_EXECUTE_PAYLOAD_SIZE") == 1:
            self.memory.write(va, struct.pack("<II", payload, ch.regs.get("host.SEM_PAYLOAD_HI", 0)))
        else:
            self.memory.write(va, struct.pack("<I", payload))

    # -- the copy engine ---------------------------------------------------------------------------
    def copy_method(self, ch: Channel, addr: int, data: int) -> None:
        if ch.copy is None or ch.subch.get(4) != ch.copy:
            self.errors.append(f"method {addr:#x} on subchannel 4 with no copy object bound")
            return
        name = self.copy_names.get(addr)
        if name is None:
            self.errors.append(f"copy method {addr:#x} unknown to {self.arch.copy_methods}")
            return
        ch.regs["copy." + name] = data
        if name == "LAUNCH_DMA":
            self.dma(ch, data)

    def dma(self, ch: Channel, data: int) -> None:
        """A LAUNCH_DMA: a linear copy (pitch to pitch, virtual addresses, one line) and/or the copy
        engine's one-word semaphore release; any other field set is an error, as is a copy of
        words a launch wrote since the last host WFI (the copy engine does not wait for the
        compute engine: such a copy reads those words as they were before the launch, the worst
        a card may do), one outside the GPU's mappings, or a release without flush."""
        b = self.arch.copy_methods
        f = lambda k: bits(data, f"{b}_LAUNCH_DMA_{k}")                          # noqa: E731
        v = lambda k, val: CONSTANTS[f"{b}_LAUNCH_DMA_{k}_{val}"]                # noqa: E731
        r = lambda k: ch.regs.get("copy." + k, 0)                                 # noqa: E731
        known = 0
        for k in ("DATA_TRANSFER_TYPE", "FLUSH_ENABLE", "SEMAPHORE_TYPE", "INTERRUPT_TYPE", "SRC_MEMORY_LAYOUT",
                  "DST_MEMORY_LAYOUT", "MULTI_LINE_ENABLE", "REMAP_ENABLE", "FORCE_RMWDISABLE", "SRC_TYPE",
                  "DST_TYPE", "SEMAPHORE_REDUCTION_ENABLE", "SEMAPHORE_PAYLOAD_SIZE", "FLUSH_TYPE"):
            hi, lo = BITFIELDS[f"{b}_LAUNCH_DMA_{k}"]
            known |= ((1 << (hi - lo + 1)) - 1) << lo
        bad = [k for k in ("INTERRUPT_TYPE", "REMAP_ENABLE", "FORCE_RMWDISABLE", "SEMAPHORE_REDUCTION_ENABLE",
                           "SEMAPHORE_PAYLOAD_SIZE") if f(k)]
        if data & ~known or bad:
            self.errors.append(f"LAUNCH_DMA {data:#x}: {', '.join(bad) or hex(data & ~known)} not modelled")
            return
        transfer = f("DATA_TRANSFER_TYPE")
        if transfer != v("DATA_TRANSFER_TYPE", "NONE"):
            src = r("OFFSET_IN_UPPER") << 32 | r("OFFSET_IN_LOWER")
            dst = r("OFFSET_OUT_UPPER") << 32 | r("OFFSET_OUT_LOWER")
            n = r("LINE_LENGTH_IN")
            want = {"SRC_MEMORY_LAYOUT": v("SRC_MEMORY_LAYOUT", "PITCH"), "DST_MEMORY_LAYOUT":
                    v("DST_MEMORY_LAYOUT", "PITCH"), "MULTI_LINE_ENABLE": v("MULTI_LINE_ENABLE", "FALSE"),
                    "SRC_TYPE": v("SRC_TYPE", "VIRTUAL"), "DST_TYPE": v("DST_TYPE", "VIRTUAL")}
            other = [k for k, w in want.items() if f(k) != w]
            if other or transfer not in (v("DATA_TRANSFER_TYPE", t) for t in ("PIPELINED", "NON_PIPELINED")):
                self.errors.append(f"LAUNCH_DMA {data:#x}: {', '.join(other) or 'DATA_TRANSFER_TYPE'} is not a "
                                   "linear copy between virtual addresses")
                return
            if n == 0 or (src < dst + n and dst < src + n):
                self.errors.append(f"a copy of {n} bytes from {src:#x} to {dst:#x}: empty or overlapping")
                return
            try:
                self.memory.where(dst, n)
                got = bytearray(self.memory.read(src, n))
            except KeyError as e:
                self.errors.append(f"a copy of {n} bytes from {src:#x} to {dst:#x}: {e.args[0]}")
                return
            overtaken = sorted(set(range(src - src % 8, src + n, 8)) & ch.unfenced.keys())
            for va in overtaken[:1]:
                self.errors.append(f"a copy reads {va:#x}, which {ch.unfenced[va][0]} wrote with no host WFI "
                                   "between them")
            for va in overtaken:            # the copy engine overtook the kernel: the word as it was
                for j, byte in enumerate(ch.unfenced[va][1]):
                    if src <= va + j < src + n:
                        got[va + j - src] = byte
            self.memory.write(dst, got)
            self.copies.append((src, dst, n))
        sem = f("SEMAPHORE_TYPE")
        if sem != v("SEMAPHORE_TYPE", "NONE"):
            if sem != v("SEMAPHORE_TYPE", "RELEASE_ONE_WORD_SEMAPHORE") or not f("FLUSH_ENABLE"):
                self.errors.append(f"LAUNCH_DMA {data:#x}: a release that is not one word with flush (the "
                                   "copies' data may land after it)")
                return
            va = r("SET_SEMAPHORE_A") << 32 | r("SET_SEMAPHORE_B")
            self.memory.write(va, struct.pack("<I", r("SET_SEMAPHORE_PAYLOAD")))

    # -- a launch --------------------------------------------------------------------------------
    def launch(self, ch: Channel, qmd_va: int) -> None:
        layout = self.qmd_layout
        q = unpack_qmd(layout, self.memory.read(qmd_va, layout.nbytes))
        v3 = self.arch.qmd == "V03_00"
        want_major = 3 if v3 else 4
        if q["QMD_MAJOR_VERSION"] != want_major:
            self.errors.append(f"QMD major version {q['QMD_MAJOR_VERSION']}, the class takes {want_major}")
            return
        if not v3 and q["QMD_TYPE"] != layout.values["QMD_TYPE_GRID_CTA"]:
            self.errors.append(f"QMD type {q['QMD_TYPE']} is not GRID_CTA")
        pc = q["PROGRAM_ADDRESS_LOWER"] | q["PROGRAM_ADDRESS_UPPER"] << 32
        built = None
        for b in self.by_code.values():
            try:
                if hashlib.sha256(self.memory.read(pc, len(b.image.code))).hexdigest() == b.image.code_sha256:
                    built = b
                    break
            except KeyError:
                continue
        if built is None:
            self.errors.append(f"no known kernel at program address {pc:#x}")
            return
        im, k = built.image, built.kernel
        regs = q["REGISTER_COUNT_V" if v3 else "REGISTER_COUNT"]
        if regs != im.registers:
            self.errors.append(f"{k.name}: QMD gives {regs} registers, the kernel needs {im.registers}")
        self.errors += shared_errors(self.arch.sm, k.name, im.shared, q)
        if q["CONSTANT_BUFFER_VALID(0)"] != 1:
            self.errors.append(f"{k.name}: constant bank 0 not valid")
        if v3:
            cb = q["CONSTANT_BUFFER_ADDR_LOWER(0)"] | q["CONSTANT_BUFFER_ADDR_UPPER(0)"] << 32
        else:
            cb = (q["CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)"] | q["CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)"] << 32) << 6
        # Mesa NVK aligns a bank's address and size to nvk_min_cbuf_alignment: 64 bytes from Turing
        # (256 before), in nvk_cmd_upload_qmd: `ba.size = align(ba.size, min_cbuf_alignment)`
        if cb % 64 or (q["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] << 4) % 64:
            self.errors.append(f"{k.name}: constant bank 0 at {cb:#x} of {q['CONSTANT_BUFFER_SIZE_SHIFTED4(0)'] << 4} "
                               "bytes: not in 64-byte units")
        if q["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] << 4 < im.cbank0:
            self.errors.append(f"{k.name}: constant bank 0 of {q['CONSTANT_BUFFER_SIZE_SHIFTED4(0)'] << 4} "
                               f"bytes < {im.cbank0}")
        window = {w: ch.regs.get(f"SET_SHADER_{w}_MEMORY_WINDOW_A", 0) << 32 |
                  ch.regs.get(f"SET_SHADER_{w}_MEMORY_WINDOW_B", 0) for w in ("SHARED", "LOCAL")}
        # Mesa NVK (nvk_cmd_dispatch.c, nvk_push_dispatch_state_init): "shared memory window needs
        # 4GB alignment on hopper+"
        if self.arch.sm == "sm_90" and window["SHARED"] % (1 << 32):
            self.errors.append(f"shared memory window {window['SHARED']:#x} is not 4 GiB aligned")
        # the bank's prefix repeats the windows, then 0xfffdc0 (tinygrad: dwords 6-11)
        for dw, value in ((6, window["SHARED"]), (8, window["LOCAL"]), (10, 0xfffdc0)):
            if self.memory.u64(cb + 4 * dw) != value:
                self.errors.append(f"{k.name}: constant bank dwords {dw}-{dw + 1} are not {value:#x}")
        grid = q["CTA_RASTER_WIDTH" if v3 else "GRID_WIDTH"]
        other = (q["CTA_RASTER_HEIGHT"], q["CTA_RASTER_DEPTH"]) if v3 else (q["GRID_HEIGHT"], q["GRID_DEPTH"])
        block = q["CTA_THREAD_DIMENSION0"]
        if other != (1, 1) or (q["CTA_THREAD_DIMENSION1"], q["CTA_THREAD_DIMENSION2"]) != (1, 1):
            self.errors.append(f"{k.name}: a launch that is not 1-D")
        if not 1 <= block <= 1024 or grid < 1:
            self.errors.append(f"{k.name}: grid {grid} x block {block}")
            return
        args = {}
        for p, kp in zip(k.params, im.params):
            at = cb + im.param_base + kp.offset
            if p.type == "u64":
                args[p.name] = self.memory.u64(at)
            elif p.type == "u32":
                args[p.name] = self.memory.u32(at)
            else:
                args[p.name] = struct.unpack("<d", self.memory.read(at, 8))[0]
        prog = self.programs.get(k.name)
        if prog is None:
            prog = self.programs[k.name] = Ptx(k.ptx)
        if self.once.get(k.name, (0,))[0] == 1 + sum(la[0] == k.name for la in self.launches):
            prog = self.once[k.name][1]
        # The QMD sizes the launch, but the code reads %ntid and %nctaid from the driver prefix of
        # constant bank 0: block dims in dwords 0-2, grid dims in 3-5 (tinygrad ops_nv.py, "nv: fill
        # grid/block sizes", 166670a2f2: `*local_size, *global_size` at the bank's start).
        ntid, nctaid = self.memory.u32(cb), self.memory.u32(cb + 12)
        local = None
        if im.local:
            local = self.local_frames(ch, k.name, im.local, q, self.memory.u64(cb + 40))
            if local is None:
                return
        seen = Accesses(self.memory, {va: before for va, (_, before) in ch.written.items()})
        try:
            prog.launch(seen, args, grid * block, block=block, grid=grid, ntid=ntid, nctaid=nctaid,
                        local=local)
        except KeyError as e:
            self.errors.append(f"{k.name}: {e}")
        for va in sorted((seen.loads | seen.stores) & ch.written.keys() | seen.stores & ch.read.keys())[:1]:
            other = ch.written[va][0] if va in ch.written else ch.read[va]
            self.errors.append(f"{k.name} {'writes' if va in seen.stores else 'reads'} {va:#x}, which {other} "
                               f"{'wrote' if va in ch.written else 'read'} with no wait-for-idle between them")
        ch.written.update({va: (k.name, ch.written.get(va, ("", seen.before[va]))[1]) for va in seen.stores})
        ch.unfenced.update({va: (k.name, ch.unfenced.get(va, ("", seen.before[va]))[1]) for va in seen.stores})
        ch.read.update(dict.fromkeys(seen.loads, k.name))
        self.launches.append((k.name, grid, block, args))
