"""The driver conversation as data: every call a GPU owner makes, in order, with its structures.

A GPU owner talks to nvidia.ko and nvidia-uvm.ko through `openat`, `ioctl`, `mmap` and `close`
and nothing else. `conversation(host, image)` lists those calls for one host and one launch
image (`image.plan`), from the ABI tables of `abi.py`: each ioctl's number, the structure it
carries, filled from a template whose fields are constants (known at compile time) or values
from earlier answers (file descriptors, handles, the device instance, the UUID). Between the
calls sit the identity checks: the driver's version, the card's UUID, its product name, its
classes and its memory, each compared with the host the plan was built for, before any memory
is allocated.

    1  open /dev/nvidiactl; allocate the root client
    2  ask the driver's version                          -> nvidia-plan-host on a difference
    3  CARD_INFO: find the card of /dev/nvidia<minor>    -> nvidia-plan-host if absent
    4  its device instance; open /dev/nvidia<minor>, register it; allocate device, subdevice
    5  ask the UUID                                      -> device-uuid on a difference
    6  ask the product name, the class list (the compute, channel, usermode and copy classes),
       the memory                                        -> nvidia-plan-host
       and the topology (GR_GET_INFO)                    -> gpu-topology when the local-memory
                                                            area was sized for less
       ---- identity checked: nothing has been allocated yet but the objects that ask ----
       the SM clock's boost (PERF_BOOST, as libcuda asks it; declining it is not a refusal)
    7  UVM: open, initialize; usermode page (mapped: the doorbell); VA space; register the GPU
       (`map rm`, host.py: no UVM; the VA space the RM's own, a virtual range per allocation)
    8  memory (image.GpuImage.memories): two allocations, sub-allocated by the plan: video
       memory (the GPFIFO area, the arena) and system memory mapped cached (`sysmem uncached`:
       uncached; notifier and semaphore, results, staging); each mapped once for the CPU (RM_MAP_MEMORY on a fresh fd,
       then mmap at the planned address) and once for the GPU (UVM; `map rm`: RM_MAP_MEMORY_DMA
       at the planned address, the answer's address checked -> nvidia-call); then the
       local-memory area when a kernel spills, for the GPU only (not contiguous)
    9  channel group, context share, GPFIFO channel, compute and copy objects, work-submit token,
       UVM channel registration (not under `map rm`), schedule

The calls are encoded into a table of 64-bit words (`encode`) that the runtime interprets
(`alphac/runtime/nvdrv.rt`, `nv_converse`), over a writable region holding every structure
(`region`). Nothing in the runtime knows an offset: every one comes from `abi.STRUCTS`.

Record: op, a0..a6, npatch, nsave (10 words), then npatch patches (dst, size, kind, value) and
nsave saves (src, size, slot, base-slot), each 4 words. Patches are applied before the call:
kind 1 writes a slot's value, 2 the address of a region offset, 3 copies `size` region bytes.
Saves run after it: slot = the u32/u64 at region offset src + slots[base-slot].

    op 1 OPEN   a0 path, a1 fd slot, a2 flags          refuse nvidia-open
    op 2 IOCTL  a0 fd slot, a1 request, a2 argument, a3 status offset (-1: none)
                                                          refuse nvidia-call (errno or status)
    op 3 MMAP   a0 address, a1 length, a2 prot, a3 flags, a4 fd slot
                                                          refuse nvidia-map (not at the address)
    op 4 CLOSE  a0 fd slot
    op 5 FIND   a0 array, a1 count, a2 stride, a3 key offset, a4 key, a5 valid offset (-1),
                a6 out slot (index * stride; -1 none)     refuse nvidia-plan-host if absent
    op 6 EXPECT a0 kind (1 16 bytes, 2 string, 3 u32 >= value, 4 u32 <= value, 5 u64 == value),
                a1 answer, a2 expected (offset, or the value), a3 refusal (1 device-uuid,
                2 nvidia-plan-host, 3 gpu-topology, 4 nvidia-call), a4 label
    op 7 MARK   a0 label, a1 1 when the identity checks end: an event (`marks()`) after each
                part of start-up whose time a card's events file should show (issue 42)

`expected_trace()` is the system-call sequence the table makes: the mock driver and the strace
test compare what the executable does with it.

Requires: a `GpuHost` and a `GpuImage`. Guarantees: the same inputs give the same table.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from alphac.formats import CONV_EXPECTS, CONV_HEADER_WORDS, CONV_OPS, CONV_PATCHES, CONV_REFUSALS
from alphac.nvdrv import abi
from alphac.nvdrv.abi import CLASSES, CONSTANTS, CTRL_CMDS, NV_IOCTLS, STRUCTS, UVM_IOCTLS
from alphac.nvdrv.host import TOPOLOGY_NAMES, GpuHost
from alphac.nvdrv.image import CHANNEL_RANGE, GPFIFO_ENTRIES, GpuImage

O_RDWR, O_CLOEXEC = 0x2, 0x80000
PROT_RW = 0x3
MAP_SHARED, MAP_FIXED_NOREPLACE = 0x01, 0x100000
# the record format's codes: one table, alphac.formats (nvdrv.rt reads the same)
OPEN, IOCTL, MMAP, CLOSE, FIND, EXPECT, MARK = (CONV_OPS[k] for k in
                                                ("open", "ioctl", "mmap", "close", "find", "expect", "mark"))
OP_NAMES = {OPEN: "openat", IOCTL: "ioctl", MMAP: "mmap", CLOSE: "close", FIND: "find",
            EXPECT: "expect", MARK: "mark"}
SLOT, ADDR, COPY = CONV_PATCHES["slot"], CONV_PATCHES["addr"], CONV_PATCHES["copy"]
REFUSE_UUID, REFUSE_HOST = CONV_REFUSALS["device-uuid"], CONV_REFUSALS["nvidia-plan-host"]
REFUSE_TOPOLOGY = CONV_REFUSALS["gpu-topology"]
EXPECT_BYTES, EXPECT_STRING, EXPECT_GE = CONV_EXPECTS["bytes"], CONV_EXPECTS["string"], CONV_EXPECTS["ge"]
EXPECT_LE, EXPECT_EQ64, REFUSE_CALL = CONV_EXPECTS["le"], CONV_EXPECTS["eq64"], CONV_REFUSALS["nvidia-call"]
# GR_GET_INFO's indices for the card's topology, in host.TOPOLOGY_NAMES' order (tinygrad's
# _query_gpu_info asks the same four: LITTER_ values where they exist)
GR_INDICES = ("NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS", "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC",
              "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC", "NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM")
U32_MAX = 0xffffffff
HEADER_WORDS = CONV_HEADER_WORDS
NV_MAX_DEVICES = CONSTANTS["NV_MAX_DEVICES"]
# Video memory is allocated with these NVOS32 attributes and flags (tinygrad's _gpu_alloc),
# system memory with tinygrad's _gpu_system_alloc ones. format 6 is tinygrad's value too.
MEMORY_FORMAT = 6


# -- structure paths: "params.hClient", "perGpuAttributes[0].gpuUuid", "classList[3]" -------
def locate(struct_name: str, path: str) -> tuple[int, int]:
    """(offset, size) of a field path inside a structure, from abi.STRUCTS alone."""
    st = STRUCTS[struct_name]
    off = 0
    parts = path.split(".")
    for i, part in enumerate(parts):
        m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part)
        if m is None:
            raise KeyError(f"bad field path {path!r}")
        f = st.field(m.group(1))
        off += f.offset
        size = f.size
        if m.group(2) is not None:
            idx = int(m.group(2))
            if not 0 <= idx < f.count:
                raise KeyError(f"{struct_name}.{path}: index {idx} outside {f.count}")
            size = f.size // f.count
            off += idx * size
        if i + 1 < len(parts):
            if not f.kind.startswith("struct:"):
                raise KeyError(f"{struct_name}.{path}: {f.name} is not a structure")
            st = STRUCTS[f.kind[len("struct:"):]]
    return off, size


@dataclass
class Region:
    """The writable bytes every structure of the conversation lives in."""
    buf: bytearray = field(default_factory=bytearray)

    def place(self, struct_name: str, values: dict[str, int | bytes] | None = None, count: int = 1) -> "Placed":
        st = STRUCTS[struct_name]
        while len(self.buf) % max(8, st.align):
            self.buf.append(0)
        p = Placed(self, len(self.buf), struct_name)
        self.buf.extend(bytes(st.size * count))
        for path, v in (values or {}).items():
            p.set(path, v)
        return p

    def string(self, text: str | bytes) -> int:
        data = text.encode() if isinstance(text, str) else text
        off = len(self.buf)
        self.buf.extend(data + b"\0")
        return off


@dataclass(frozen=True)
class Placed:
    region: Region
    offset: int
    struct: str

    def at(self, path: str) -> tuple[int, int]:
        off, size = locate(self.struct, path)
        return self.offset + off, size

    def set(self, path: str, value: int | bytes) -> None:
        off, size = self.at(path)
        data = value if isinstance(value, bytes) else (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        if len(data) > size:
            raise ValueError(f"{self.struct}.{path}: {len(data)} bytes for a {size}-byte field")
        self.region.buf[off:off + len(data)] = data


@dataclass(frozen=True)
class Call:
    op: int
    args: tuple[int, ...]
    patches: tuple[tuple[int, int, int, int], ...] = ()
    saves: tuple[tuple[int, int, int, int], ...] = ()
    what: str = ""                  # for listings: the escape/command and the class or control
    fd: str = ""                    # the fd slot's name (openat: the slot opened)
    path: str = ""                  # openat: the file


class Conversation:
    """The calls of one GPU owner (`build` lists them), the region their structures live in,
    and the slots the driver's answers go to."""

    def __init__(self, host: GpuHost, img: GpuImage):
        self.host, self.img, self.arch = host, img, img.arch
        self.region = Region()
        self.calls: list[Call] = []
        self.slots: dict[str, int] = {"zero": 0}
        self.build()

    # -- building blocks ---------------------------------------------------------------------
    def slot(self, name: str) -> int:
        if name not in self.slots:
            self.slots[name] = len(self.slots)
        return self.slots[name]

    def open(self, path: str, fd: str) -> None:
        self.calls.append(Call(OPEN, (self.region.string(path), self.slot(fd), O_RDWR | O_CLOEXEC),
                               what=path, fd=fd, path=path))

    def close(self, fd: str) -> None:
        self.calls.append(Call(CLOSE, (self.slot(fd),), what="close", fd=fd))

    def mark(self, label: str, identity_end: bool = False) -> None:
        self.calls.append(Call(MARK, (self.region.string(label), int(identity_end)), what=label))

    def ioctl(self, fd: str, request: int, arg: Placed, what: str, status: str | None,
              patches=(), saves=()) -> None:
        pat = []
        for target, path, kind, value in patches:
            off, size = target.at(path)
            if kind == SLOT:
                value = self.slot(value)
            pat.append((off, size, kind, value))
        sav = []
        for src, path, slot, base in saves:
            off, size = src.at(path)
            sav.append((off, size, self.slot(slot), self.slot(base)))
        st = -1 if status is None else arg.at(status)[0]
        self.calls.append(Call(IOCTL, (self.slot(fd), request, arg.offset, st), tuple(pat), tuple(sav),
                               what=what, fd=fd))

    def nv(self, fd: str, escape_struct: str, values: dict, what: str, status: str | None = "status",
           patches=(), saves=(), count: int = 1) -> Placed:
        """An nvidia.ko ioctl carrying one structure (or `count` of them); patches and saves are
        (path, kind, value) and (path, slot, base-slot) within that structure."""
        escape, struct_name = escape_struct.rstrip(")").split("(")
        key = f"{escape}({struct_name}[{count}])" if count != 1 else escape_struct
        io = NV_IOCTLS[key]
        arg = self.region.place(struct_name, values, count)
        self.ioctl(fd, io.cmd, arg, f"{escape} {what}".strip(), status,
                   [(arg, p, k, v) for p, k, v in patches], [(arg, p, s, b) for p, s, b in saves])
        return arg

    def uvm(self, name: str, values: dict, patches=(), fd: str = "fd_uvm",
            status: str | None = "rmStatus") -> Placed:
        """An nvidia-uvm.ko ioctl (a bare command number) with its parameters."""
        io = UVM_IOCTLS[name]
        arg = self.region.place(io.params, values)
        self.ioctl(fd, io.cmd, arg, name, status, [(arg, p, k, v) for p, k, v in patches])
        return arg

    def alloc(self, cls: str, parent: str, handle: str, params: str | None = None,
              values: dict | None = None, patches=()) -> Placed | None:
        """NV_ESC_RM_ALLOC (NVOS21) of class `cls` under `parent`, its parameters `params` filled
        from `values` and `patches`; the handle the driver answers goes into slot `handle`."""
        prm = self.region.place(params, values) if params else None
        arg = self.region.place("NVOS21_PARAMETERS", {"hClass": CLASSES[cls],
                                                      "paramsSize": STRUCTS[params].size if params else 0})
        pat = [] if cls == "NV01_ROOT_CLIENT" else \
            [(arg, "hRoot", SLOT, "h_root"), (arg, "hObjectParent", SLOT, parent)]
        if prm is not None:
            pat += [(arg, "pAllocParms", ADDR, prm.offset)] + [(prm, p, k, v) for p, k, v in patches]
        self.ioctl("fd_ctl", NV_IOCTLS["NV_ESC_RM_ALLOC(NVOS21_PARAMETERS)"].cmd, arg,
                   f"NV_ESC_RM_ALLOC {cls}", "status", pat, [(arg, "hObjectNew", handle, "zero")])
        return prm

    def control(self, obj: str, cmd: str, values: dict | None = None, patches=(), saves=(),
                status: str | None = "status") -> Placed:
        """NV_ESC_RM_CONTROL `cmd` on object `obj`; returns the placed parameters. With `status`
        None the answer's status is not checked (a request the driver may decline)."""
        c = CTRL_CMDS[cmd]
        prm = self.region.place(c.params, values)
        arg = self.region.place("NVOS54_PARAMETERS", {"cmd": c.cmd, "paramsSize": STRUCTS[c.params].size})
        full = [(arg, "hClient", SLOT, "h_root"), (arg, "hObject", SLOT, obj),
                (arg, "params", ADDR, prm.offset)] + [(prm, p, k, v) for p, k, v in patches]
        self.ioctl("fd_ctl", NV_IOCTLS["NV_ESC_RM_CONTROL(NVOS54_PARAMETERS)"].cmd, arg,
                   f"NV_ESC_RM_CONTROL {cmd}", status, full,
                   [(prm, p, s, b) for p, s, b in saves])
        return prm

    def expect(self, kind: int, answer: int, expected: int, refusal: int, label: str) -> None:
        self.calls.append(Call(EXPECT, (kind, answer, expected, refusal, self.region.string(label)),
                               what=f"expect {label}"))

    def find(self, array: int, count: int, stride: int, key_off: int, key: int, valid_off: int,
             out: str | None, what: str, saves=()) -> None:
        """FIND, then saves (region offset, size, slot, base-slot) relative to what it found."""
        self.calls.append(Call(FIND, (array, count, stride, key_off, key, valid_off,
                                      self.slot(out) if out else -1),
                               saves=tuple((o, n, self.slot(s), self.slot(b)) for o, n, s, b in saves),
                               what=what))

    def open_device(self, fd: str) -> None:
        """A fresh /dev/nvidia<minor>, registered with the control fd (one per CPU mapping)."""
        self.open(f"/dev/nvidia{self.host.minor}", fd)
        self.nv(fd, "NV_ESC_REGISTER_FD(nv_ioctl_register_fd_t)", {}, "", None,
                patches=[("ctl_fd", SLOT, "fd_ctl")])

    def map_cpu(self, memory: str, va: int, size: int, system: bool, flags: int) -> None:
        """RM_MAP_MEMORY on a fresh fd, mmap it at `va`, close it."""
        fd = "fd_map"
        if system:
            self.open("/dev/nvidiactl", fd)
        else:
            self.open_device(fd)
        arg = self.region.place("nv_ioctl_nvos33_parameters_with_fd",
                                {"params.length": size, "params.flags": flags})
        self.ioctl("fd_ctl", NV_IOCTLS["NV_ESC_RM_MAP_MEMORY(nv_ioctl_nvos33_parameters_with_fd)"].cmd,
                   arg, f"NV_ESC_RM_MAP_MEMORY {memory}", "params.status",
                   [(arg, "params.hClient", SLOT, "h_root"), (arg, "params.hDevice", SLOT, "h_device"),
                    (arg, "params.hMemory", SLOT, memory), (arg, "fd", SLOT, fd)])
        self.calls.append(Call(MMAP, (va, size, PROT_RW, MAP_SHARED | MAP_FIXED_NOREPLACE, self.slot(fd)),
                               what=f"mmap {memory}", fd=fd))
        self.close(fd)

    def virtual(self, name: str, va: int, size: int) -> None:
        """`map rm`: the range [va, va + size) of the RM's VA space, NV01_MEMORY_VIRTUAL under the
        device (nvkms-rm.c AllocGpuVASpace; virt_mem_range.c vmrangeConstruct: offset, limit)."""
        self.alloc("NV01_MEMORY_VIRTUAL", "h_device", f"h_virt_{name}", "NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS",
                   {"offset": va, "limit": va + size - 1}, [("hVASpace", SLOT, "h_vaspace")])

    def map_dma(self, memory: str, va: int, size: int, where: str) -> None:
        """`map rm`: RM_MAP_MEMORY_DMA (NVOS46) of the whole allocation into its virtual range at
        `va` (DMA_OFFSET_FIXED: an absolute address, dma.c dmaAllocMap), 2 MiB pages for video
        memory (allocated in them), 4 KiB for system memory; the address answered must be `va`."""
        n = CONSTANTS
        system = where.startswith("sysmem")
        flags = abi.pack_bitfields({
            "NVOS46_FLAGS_DMA_OFFSET_FIXED": n["NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE"],
            "NVOS46_FLAGS_PAGE_SIZE": n["NVOS46_FLAGS_PAGE_SIZE_4KB" if system else "NVOS46_FLAGS_PAGE_SIZE_HUGE"],
            "NVOS46_FLAGS_CACHE_SNOOP": n["NVOS46_FLAGS_CACHE_SNOOP_ENABLE" if system else
                                          "NVOS46_FLAGS_CACHE_SNOOP_DISABLE"]})
        short = memory.removeprefix("h_")
        arg = self.nv("fd_ctl", "NV_ESC_RM_MAP_MEMORY_DMA(NVOS46_PARAMETERS)",
                      {"offset": 0, "length": size, "flags": flags, "dmaOffset": va}, short,
                      patches=[("hClient", SLOT, "h_root"), ("hDevice", SLOT, "h_device"),
                               ("hDma", SLOT, f"h_virt_{short}"), ("hMemory", SLOT, memory)])
        self.expect(EXPECT_EQ64, arg.at("dmaOffset")[0], va, REFUSE_CALL, f"map {short}")

    def map_gpu(self, memory: str, va: int, size: int) -> None:
        """The allocation at the same address for the GPU: a UVM external range, then a mapping."""
        self.uvm("UVM_CREATE_EXTERNAL_RANGE", {"base": va, "length": size})
        self.uvm("UVM_MAP_EXTERNAL_ALLOCATION",
                 {"base": va, "length": size, "offset": 0, "gpuAttributesCount": 1,
                  "perGpuAttributes[0].gpuMappingType": CONSTANTS["UvmGpuMappingTypeReadWriteAtomic"]},
                 [("perGpuAttributes[0].gpuUuid", COPY, self.uuid_at), ("rmCtrlFd", SLOT, "fd_ctl"),
                  ("hClient", SLOT, "h_root"), ("hMemory", SLOT, memory)])

    def memory(self, name: str, where: str, size: int, va: int, cpu: int = 0) -> None:
        n = lambda k: CONSTANTS[k]                               # noqa: E731
        if where in ("vidmem", "vidmem-gpu"):
            # the local-memory area (vidmem-gpu) is GBs, so not contiguous (tinygrad's _gpu_alloc
            # default), and never mapped for the CPU; the arena is contiguous
            phys = "ALLOW_NONCONTIGUOUS" if where == "vidmem-gpu" else "CONTIGUOUS"
            attr = abi.pack_bitfields({"NVOS32_ATTR_PHYSICALITY": n(f"NVOS32_ATTR_PHYSICALITY_{phys}"),
                                       "NVOS32_ATTR_PAGE_SIZE": n("NVOS32_ATTR_PAGE_SIZE_HUGE")})
            attr2 = abi.pack_bitfields({"NVOS32_ATTR2_ZBC": n("NVOS32_ATTR2_ZBC_PREFER_NO_ZBC"),
                                        "NVOS32_ATTR2_GPU_CACHEABLE": n("NVOS32_ATTR2_GPU_CACHEABLE_YES"),
                                        "NVOS32_ATTR2_PAGE_SIZE_HUGE": n("NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB")})
            flags = (n("NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE") | n("NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM")
                     | n("NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED") | n("NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT")
                     | n("NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED"))
            cls, kind, align = "NV1_MEMORY_USER", n("NVOS32_TYPE_IMAGE"), 2 << 20
        else:       # sysmem-cached: cached, as pinned host memory is [inferred] (an uncached one
                    # costs the driver a page-attribute change a page: nv-vm.c); sysmem-uncached
                    # (`sysmem uncached`): as the notifier and semaphore were on 2026-12-04
            coherency = "CACHED" if where == "sysmem-cached" else "UNCACHED"
            attr = abi.pack_bitfields({"NVOS32_ATTR_PHYSICALITY": n("NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS"),
                                       "NVOS32_ATTR_LOCATION": n("NVOS32_ATTR_LOCATION_PCI"),
                                       "NVOS32_ATTR_COHERENCY": n(f"NVOS32_ATTR_COHERENCY_{coherency}")})
            attr2 = abi.pack_bitfields({"NVOS32_ATTR2_ZBC": n("NVOS32_ATTR2_ZBC_PREFER_NO_ZBC"),
                                        "NVOS32_ATTR2_GPU_CACHEABLE": n("NVOS32_ATTR2_GPU_CACHEABLE_NO")})
            flags = (n("NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT") | n("NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED")
                     | n("NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"))
            cls, kind, align = "NV01_MEMORY_SYSTEM", n("NVOS32_TYPE_NOTIFIER"), 4 << 10
        self.alloc(cls, "h_device", name, "NV_MEMORY_ALLOCATION_PARAMS",
                   {"type": kind, "attr": attr, "attr2": attr2, "flags": flags, "format": MEMORY_FORMAT,
                    "size": size, "alignment": align, "offset": 0, "limit": size - 1},
                   [("owner", SLOT, "h_root")])
        self.mark(f"alloc {name.removeprefix('h_')}")     # the RM's allocation alone, then its mappings
        # tinygrad maps host memory with flags 0: CACHED (for system memory nv-mmap.c maps the
        # allocation's own caching whatever the flag asks: the coherency above decides)
        caching = abi.pack_bitfields({"NVOS33_FLAGS_CACHING_TYPE": n("NVOS33_FLAGS_CACHING_TYPE_CACHED"
                                                                     if where == "sysmem-cached" else
                                                                     "NVOS33_FLAGS_CACHING_TYPE_DEFAULT")})
        if where != "vidmem-gpu":
            self.map_cpu(name, va, cpu or size, where.startswith("sysmem"), caching)
        if self.rm:
            self.map_dma(name, va, size, where)
        else:
            self.map_gpu(name, va, size)

    # -- the conversation --------------------------------------------------------------------
    def build(self) -> None:
        host, img, arch = self.host, self.img, self.arch
        st = STRUCTS
        self.rm = host.gpu_map == "rm"      # no UVM at all (docs/nvdrv.md "Mapping with the RM alone")
        self.open("/dev/nvidiactl", "fd_ctl")
        self.alloc("NV01_ROOT_CLIENT", "zero", "h_root")
        ver = self.control("h_root", "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2")
        self.expect(EXPECT_STRING, ver.at("driverVersionBuffer")[0], self.region.string(host.driver),
                    REFUSE_HOST, "driver")
        card = self.nv("fd_ctl", "NV_ESC_CARD_INFO(nv_ioctl_card_info_t)", {}, "", None, count=NV_MAX_DEVICES)
        ci = st["nv_ioctl_card_info_t"]
        self.find(card.offset, NV_MAX_DEVICES, ci.size, ci.offset("minor_number"), host.minor,
                  ci.offset("valid"), "card", f"card /dev/nvidia{host.minor}",
                  saves=[(card.offset + ci.offset("gpu_id"), 4, "gpu_id", "card")])
        self.control("h_root", "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", patches=[("gpuId", SLOT, "gpu_id")],
                     saves=[("deviceInstance", "dev_inst", "zero")])
        self.open_device("fd_dev")
        self.mark("gpu-open")       # the first open of the GPU's file: nv_open_device (docs/nvdrv.md
                                    # "Where start-up goes": each mark an event, issue 42)
        self.alloc("NV01_DEVICE_0", "h_root", "h_device", "NV0080_ALLOC_PARAMETERS",
                   {"vaMode": CONSTANTS["NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES"]},
                   [("deviceId", SLOT, "dev_inst"), ("hClientShare", SLOT, "h_root")])
        self.alloc("NV20_SUBDEVICE_0", "h_device", "h_subdevice", "NV2080_ALLOC_PARAMETERS", {"subDeviceId": 0})
        self.mark("device")
        gid = self.control("h_subdevice", "NV2080_CTRL_CMD_GPU_GET_GID_INFO",
                           {"flags": abi.pack_bitfields({
                               "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT": CONSTANTS["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY"],
                               "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE": CONSTANTS["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1"]}),
                            "length": CONSTANTS["NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH"]})
        self.uuid_at = gid.at("data")[0]
        self.expect(EXPECT_BYTES, self.uuid_at, self.region.string(host.uuid), REFUSE_UUID, "uuid")
        name = self.control("h_subdevice", "NV2080_CTRL_CMD_GPU_GET_NAME_STRING",
                            {"gpuNameStringFlags": CONSTANTS["NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII"]})
        self.expect(EXPECT_STRING, name.at("gpuNameString")[0], self.region.string(host.product),
                    REFUSE_HOST, "product")
        cl = self.control("h_device", "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
        cls_off, cls_size = cl.at("classList")
        for cls in (arch.compute, arch.gpfifo, arch.usermode, arch.dma_copy):
            self.find(cls_off, cls_size // 4, 4, 0, CLASSES[cls], -1, None, f"class {cls}")
        fb = self.control("h_subdevice", "NV2080_CTRL_CMD_FB_GET_INFO_V2",
                          {"fbInfoListSize": 1,
                           "fbInfoList[0].index": CONSTANTS["NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE"]})
        self.expect(EXPECT_GE, fb.at("fbInfoList[0].data")[0], -(-img.demand // 1024), REFUSE_HOST,
                    "memory-kib")
        # The topology: printed by --probe-identity; checked against what the local-memory area
        # was sized for (no bound when no kernel spills).
        infos = self.region.place("NV0080_CTRL_GR_INFO", None, len(GR_INDICES))
        step = STRUCTS["NV0080_CTRL_GR_INFO"].size
        idx_off, data_off = (locate("NV0080_CTRL_GR_INFO", f)[0] for f in ("index", "data"))
        for i, k in enumerate(GR_INDICES):
            struct.pack_into("<I", self.region.buf, infos.offset + i * step + idx_off, CONSTANTS[k])
        self.control("h_subdevice", "NV2080_CTRL_CMD_GR_GET_INFO", {"grInfoListSize": len(GR_INDICES)},
                     patches=[("grInfoList", ADDR, infos.offset)])
        bounds = img.topology.values if img.topology else (U32_MAX,) * len(GR_INDICES)
        for i, (label, bound) in enumerate(zip(TOPOLOGY_NAMES, bounds)):
            self.expect(EXPECT_LE, infos.offset + i * step + data_off, bound, REFUSE_TOPOLOGY, label)
        self.mark("identity", identity_end=True)
        # The SM clock: the maximum boost until the run ends, as libcuda asks on the H200 (flags
        # 0x12, duration infinite; issue 42): without it the card stayed at its idle 345 MHz. Not
        # checked: a driver that declines leaves the clock, which changes speed, never a bit.
        boost = {"NV2080_CTRL_PERF_BOOST_FLAGS_CMD": CONSTANTS["NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX"],
                 "NV2080_CTRL_PERF_BOOST_FLAGS_CUDA": CONSTANTS["NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES"]}
        self.control("h_subdevice", "NV2080_CTRL_CMD_PERF_BOOST",
                     {"flags": abi.pack_bitfields(boost),
                      "duration": CONSTANTS["NV2080_CTRL_PERF_BOOST_DURATION_INFINITE"]}, status=None)
        self.mark("boost")

        if not self.rm:
            self.open("/dev/nvidia-uvm", "fd_uvm")
            self.open("/dev/nvidia-uvm", "fd_uvm2")
            self.uvm("UVM_INITIALIZE", {"flags": 0})
            # tinygrad: "this error is okay, CUDA hits it too": the status is not checked.
            self.uvm("UVM_MM_INITIALIZE", {}, [("uvmFd", SLOT, "fd_uvm")], fd="fd_uvm2", status=None)
            self.mark("uvm-open")
        um = img.alloc("usermode")
        self.alloc(arch.usermode, "h_subdevice", "h_usermode")
        self.map_cpu("h_usermode", um.va, um.size, False,
                     abi.pack_bitfields({"NVOS33_FLAGS_ACCESS": CONSTANTS["NVOS33_FLAGS_ACCESS_WRITE_ONLY"]}))
        self.mark("usermode")
        # UVM's VA space: externally owned (UVM writes its page tables) and fault-capable; the
        # RM's own (`map rm`): neither flag, the RM writes the page tables (vaspace_api.c)
        uvm_flags = ("NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING", "NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED")
        self.alloc("FERMI_VASPACE_A", "h_device", "h_vaspace", "NV_VASPACE_ALLOCATION_PARAMETERS",
                   {"vaBase": 0x1000, "vaSize": 0x1fffffb000000,
                    "flags": 0 if self.rm else CONSTANTS[uvm_flags[0]] | CONSTANTS[uvm_flags[1]]})
        self.mark("vaspace")
        if self.rm:
            self.rm_tail()
            return
        self.uvm("UVM_REGISTER_GPU", {"rmCtrlFd": -1}, [("gpu_uuid", COPY, self.uuid_at)])
        self.mark("uvm-register")   # UVM's own state for the GPU when no process holds it (add_gpu)
        self.uvm("UVM_REGISTER_GPU_VASPACE", {},
                 [("gpuUuid", COPY, self.uuid_at), ("rmCtrlFd", SLOT, "fd_ctl"),
                  ("hClient", SLOT, "h_root"), ("hVaSpace", SLOT, "h_vaspace")])
        self.mark("uvm")
        self.memories_and_channel()

    def rm_tail(self) -> None:
        """`map rm` after the VA space: a virtual range per allocation (the `map` event where
        UVM's registration stood), then the memories and the channel as under UVM."""
        for a in self.img.memories:
            self.virtual(a.name, a.va, a.size)
        self.mark("map")
        self.memories_and_channel()

    def memories_and_channel(self) -> None:
        img, arch = self.img, self.arch
        for a in img.memories:
            self.memory(f"h_{a.name}", a.where, a.size, a.va, a.cpu)
            self.mark(f"memory {a.name} {a.size}")
        self.mark("memory")
        self.alloc("KEPLER_CHANNEL_GROUP_A", "h_device", "h_chgrp", "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS",
                   {"engineType": CONSTANTS["NV2080_ENGINE_TYPE_GRAPHICS"]})
        self.alloc("FERMI_CONTEXT_SHARE_A", "h_chgrp", "h_ctxshare", "NV_CTXSHARE_ALLOCATION_PARAMETERS",
                   {"flags": abi.pack_bitfields({"NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT":
                                                 CONSTANTS["NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC"]})},
                   [("hVASpace", SLOT, "h_vaspace")])
        gp, err = img.alloc("gpfifo"), img.alloc("sysmem")       # parts of the two allocations
        vid = img.alloc(gp.within)
        entry = CONSTANTS["NVC56F_GP_ENTRY__SIZE"]
        self.alloc(arch.gpfifo, "h_chgrp", "h_channel", "NV_CHANNEL_ALLOC_PARAMS",
                   {"gpFifoOffset": gp.va, "gpFifoEntries": GPFIFO_ENTRIES,
                    "userdOffset[0]": gp.va - vid.va + GPFIFO_ENTRIES * entry},
                   [("hObjectError", SLOT, f"h_{err.within}"), ("hObjectBuffer", SLOT, f"h_{vid.name}"),
                    ("hContextShare", SLOT, "h_ctxshare"), ("hUserdMemory[0]", SLOT, f"h_{vid.name}")])
        self.mark("gpfifo")
        self.alloc(arch.compute, "h_channel", "h_compute")
        self.alloc(arch.dma_copy, "h_channel", "h_copy")      # the copies out, beside it (as libcuda)
        self.mark("objects")
        self.control("h_channel", "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN",
                     {"workSubmitToken": 0xffffffff}, saves=[("workSubmitToken", "token", "zero")])
        ch = img.alloc("channel")
        if not self.rm:     # the RM's own VA space needs no registration (nvidia-push's channels)
            self.uvm("UVM_REGISTER_CHANNEL", {"base": ch.va, "length": CHANNEL_RANGE},
                     [("gpuUuid", COPY, self.uuid_at), ("rmCtrlFd", SLOT, "fd_ctl"), ("hClient", SLOT, "h_root"),
                      ("hChannel", SLOT, "h_channel")])
        self.control("h_chgrp", "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", {"bEnable": 1})
        self.mark("channel")

    # -- what the runtime and the tests read ---------------------------------------------------
    def encode(self) -> bytes:
        """The table the runtime interprets: 64-bit little-endian words (see the module doc)."""
        words: list[int] = []
        for c in self.calls:
            args = list(c.args) + [0] * (7 - len(c.args))
            words += [c.op, *args, len(c.patches), len(c.saves)]
            for p in c.patches:
                words += list(p)
            for s in c.saves:
                words += list(s)
        return struct.pack(f"<{len(words)}q", *[w if w < (1 << 63) else w - (1 << 64) for w in words])

    def expected_trace(self, until_identity: bool = False) -> list[tuple]:
        """The system calls the table makes, in order: ("openat", path), ("ioctl", path, request),
        ("mmap", address, length, path), ("close", path)."""
        paths: dict[str, str] = {}
        out: list[tuple] = []
        for c in self.calls:
            if c.op == OPEN:
                paths[c.fd] = c.path
                out.append(("openat", c.path))
            elif c.op == IOCTL:
                out.append(("ioctl", paths[c.fd], c.args[1]))
            elif c.op == MMAP:
                out.append(("mmap", c.args[0], c.args[1], paths[c.fd]))
            elif c.op == CLOSE:
                out.append(("close", paths[c.fd]))
            elif c.op == MARK and c.args[1] and until_identity:
                break
        return out

    def marks(self) -> list[str]:
        """The events the table writes, in order (MARK's labels): start-up's parts, which
        bench/gpu.py times one after the other (docs/nvdrv.md "Where start-up goes")."""
        return [c.what for c in self.calls if c.op == MARK]

    def listing(self) -> str:
        """One line per call: what `alphac build --emit calls` prints and docs/nvdrv.md shows."""
        names = {v: k for k, v in self.slots.items()}
        lines = []
        for i, c in enumerate(self.calls):
            if c.op == IOCTL:
                saved = ", ".join(names[s[2]] for s in c.saves)
                lines.append(f"{i:3d} ioctl  {c.fd:<9} {c.args[1]:#010x} {c.what}"
                             + (f" -> {saved}" if saved else ""))
            elif c.op == OPEN:
                lines.append(f"{i:3d} openat {c.path} -> {c.fd}")
            elif c.op == MMAP:
                lines.append(f"{i:3d} mmap   {c.args[0]:#x} +{c.args[1]:#x} {c.fd} ({c.what[5:]})")
            elif c.op == CLOSE:
                lines.append(f"{i:3d} close  {c.fd}")
            elif c.op == MARK:
                lines.append(f"    ---- {c.what}" + (" (identity checked; nothing allocated before this)"
                                                      if c.args[1] else ""))
            else:
                lines.append(f"    check  {c.what}")
        return "\n".join(lines) + "\n"


def conversation(host: GpuHost, img: GpuImage) -> Conversation:
    return Conversation(host, img)
