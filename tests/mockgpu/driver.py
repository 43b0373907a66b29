"""The mock NVIDIA driver: /dev/nvidiactl, /dev/nvidia<minor>, /dev/nvidia-uvm, at the syscall level.

It models what a GPU owner's conversation needs of nvidia.ko and nvidia-uvm.ko (release 580) and
checks every call against the ABI tables of alphac/nvdrv/abi.py (themselves checked against the
580.142 headers): an nvidia ioctl's number must be one of `NV_IOCTLS` (escape and size), a UVM
ioctl's one of `UVM_IOCTLS`; every structure is read by its `STRUCTS` layout; RM_ALLOC's class
must be known, its parent of the right kind and its parameters the class's structure, of that
size; RM_CONTROL's command must be in `CTRL_CMDS` with its parameter size; handles, fds and
UUIDs must be ones the driver gave. It answers as the driver does: handles, the card's identity
(UUID, name, driver version, classes, memory), CARD_INFO, the work-submit token; memory is real
pages (a memfd per allocation; RM_MAP_MEMORY puts that memfd in place of the fresh device fd, so
the executable's mmap maps it); a rung doorbell runs the channel on the mock GPU (gpu.py).
The GPU maps memory through UVM (UVM_MAP_EXTERNAL_ALLOCATION) or, under `map rm`, through the RM
alone: NV01_MEMORY_VIRTUAL ranges in a VA space that is not UVM's, and RM_MAP_MEMORY_DMA into
them (`rm_map_dma`: the checks virtual_mem.c, dma.c and gpu_vaspace.c make, docs/nvdrv.md).

Everything it cannot match is appended to `errors` and refused (EINVAL, or an RM status), and the
test fails on a non-empty list.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from alphac.nvdrv import abi
from alphac.nvdrv.abi import CLASSES, CONSTANTS, CTRL_CMDS, NV_IOCTLS, STATUS_CODES, STRUCTS, UVM_IOCTLS
from alphac.nvdrv.conversation import locate
from alphac.nvdrv.image import USERMODE_SIZE
from mockgpu.gpu import Alloc, Channel, Gpu, GpuMemory, bits

NV_CMDS = {io.cmd: io for io in NV_IOCTLS.values()}
UVM_CMDS = {io.cmd: (name, io.params) for name, io in UVM_IOCTLS.items()}
CTRL_BY_CMD = {c.cmd: (name, c.params) for name, c in CTRL_CMDS.items()}
CLASS_NAME = {v: k for k, v in CLASSES.items()}      # 0x40: NV1_MEMORY_USER (its later alias)
OK = 0
ERR = STATUS_CODES
TOPOLOGY = {90: (8, 9, 2, 64), 86: (7, 6, 2, 48)}
GR_INDEX = {CONSTANTS[k]: i for i, k in enumerate((
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS", "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC",
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC", "NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM"))}
GENERIC_CLASSES = ("NV01_ROOT_CLIENT", "NV01_DEVICE_0", "NV20_SUBDEVICE_0", "NV01_MEMORY_SYSTEM",
                   "NV1_MEMORY_USER", "NV01_MEMORY_VIRTUAL", "FERMI_VASPACE_A", "FERMI_CONTEXT_SHARE_A",
                   "KEPLER_CHANNEL_GROUP_A")


@dataclass
class Card:
    """The card the mock driver has: what the identity questions answer."""
    uuid: bytes
    name: str = "NVIDIA H200"
    driver: str = "580.159.04"
    sm: int = 90
    minor: int = 0
    memory: int = 143771 << 20          # bytes; FB_GET_INFO reports it in KiB
    gpu_id: int = 0x1800
    device_instance: int = 0
    topology: tuple | None = None       # GR_GET_INFO's (GPCs, TPCs/GPC, SMs/TPC, warps/SM)
    boost_denied: bool = False          # PERF_BOOST answered NV_ERR_INSUFFICIENT_PERMISSIONS
    copy_class: bool = True             # False: the class list has no DMA copy class
    copy_refused: bool = False          # the copy object's RM_ALLOC answered NV_ERR_INSUFFICIENT_RESOURCES
    dma_moved: bool = False             # RM_MAP_MEMORY_DMA maps a page past the fixed address asked

    def __post_init__(self):
        if self.topology is None:       # the chips' LITTER values: GH100 8x9x2, 64 warps; GA102
            self.topology = TOPOLOGY[self.sm]    # 7x6x2, 48 warps [inferred: not read on a card]

    @property
    def arch(self) -> abi.Arch:
        return abi.ARCHES[f"sm_{self.sm}"]

    def classes(self) -> list[int]:
        a = self.arch
        names = list(GENERIC_CLASSES) + [a.compute, a.gpfifo, a.usermode] + [a.dma_copy] * self.copy_class
        if self.sm == 90:
            names.append("AMPERE_CHANNEL_GPFIFO_A")     # GH100 lists both GPFIFO classes
        return sorted({CLASSES[n] for n in names if n != "NV01_ROOT_CLIENT"})


class View:
    """A structure's bytes, read and written by field path (abi.STRUCTS through `locate`)."""

    def __init__(self, struct: str, data: bytes):
        self.struct, self.buf = struct, bytearray(data)

    def __getitem__(self, path: str) -> int:
        off, size = locate(self.struct, path)
        return int.from_bytes(self.buf[off:off + size], "little")

    def signed(self, path: str) -> int:
        off, size = locate(self.struct, path)
        return int.from_bytes(self.buf[off:off + size], "little", signed=True)

    def raw(self, path: str) -> bytes:
        off, size = locate(self.struct, path)
        return bytes(self.buf[off:off + size])

    def __setitem__(self, path: str, value: int | bytes) -> None:
        off, size = locate(self.struct, path)
        data = value if isinstance(value, bytes) else (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        self.buf[off:off + len(data)] = data


@dataclass
class Obj:
    kind: str                    # client device subdevice usermode vaspace memory chgrp ctxshare channel compute copy
    cls: int
    parent: int
    alloc: Alloc | None = None
    where: str = ""              # memory: vidmem | sysmem
    channel: Channel | None = None
    scheduled: bool = False
    flags: int = 0               # vaspace: its NV_VASPACE_ALLOCATION_FLAGS
    vas: int = 0                 # virtual, ctxshare: its VA space
    va: tuple = ()               # virtual: (first, last) address of its range


@dataclass
class Fd:
    kind: str                    # ctl | dev | uvm
    path: str
    registered: bool = False     # dev: REGISTER_FD done
    bound: Alloc | None = None   # after RM_MAP_MEMORY: the memory an mmap of this fd maps
    map_length: int = 0
    uvm_initialized: bool = False


@dataclass
class Driver:
    card: Card                                                 # the card the process uses
    kernels: list
    present: bool = True                                       # False: no driver at all
    hang: bool = False                                         # a GPU that never runs its channel
    boosted: bool = False                                      # PERF_BOOST granted
    latency: int = 0                                           # calls after a doorbell before it runs
    pending: tuple | None = None                               # (channel, calls left) while it waits
    submissions: int = 0                                       # doorbells rung on a scheduled channel
    draws: bytes | None = None                                 # getrandom's answers in turn (None: the kernel's)
    errors: list = field(default_factory=list)
    trace: list = field(default_factory=list)                  # every call, as the mock saw it
    allocations: list = field(default_factory=list)            # (class name, size) in order
    caching: list = field(default_factory=list)                # each system memory's CPU mapping:
    # its allocation's NVOS32 coherency name (nv-mmap.c maps system memory with the allocation's
    # cache_type; RM_MAP_MEMORY's caching flag does not change it)
    cards: list = field(default_factory=list)                  # the machine's cards (default: card)

    def __post_init__(self):
        self.cards = list(self.cards) or [self.card]
        minors = [c.minor for c in self.cards]
        if len(set(minors)) != len(minors) or len({(c.gpu_id, c.device_instance) for c in self.cards}) != len(minors):
            raise ValueError("the mock's cards need distinct minors, GPU ids and device instances")
        self.opened: Card | None = None                        # the /dev/nvidiaN opened first
        self.arch = self.card.arch
        self.objects: dict[int, Obj] = {}
        self.fds: dict[int, Fd] = {}
        self.client: int | None = None
        self.next_handle = 0xcaf00001
        self.memory = GpuMemory()
        self.gpu = Gpu(self.arch, self.kernels, self.memory, self.errors, self.card.topology)
        self.cpu_maps: dict[int, int] = {}                     # alloc handle -> CPU address
        self.ranges: list[tuple[int, int]] = []
        self.vram = 0
        self.usermode: Alloc | None = None
        self.uvm_gpu = self.uvm_vaspace = False
        self.channels: list[Channel] = []

    def select(self, card: Card) -> None:
        """The card this process drives from now on (every later answer is about it); a card
        named by `mutated` (minor, kernel, program) runs that kernel's other program."""
        self.opened = self.card = card
        if card.arch != self.arch:
            self.arch = card.arch
            self.gpu = Gpu(self.arch, self.kernels, self.memory, self.errors, card.topology)
        self.gpu.topology = card.topology
        minor, kernel, program = getattr(self, "mutated", (None, None, None))
        if minor == card.minor:
            self.gpu.programs[kernel] = program

    def close(self) -> None:
        for o in self.objects.values():
            if o.alloc is not None:
                o.alloc.close()

    def fail(self, what: str, value: int = -errno.EINVAL) -> int:
        self.errors.append(what)
        return value

    # -- system calls ------------------------------------------------------------------------------
    def syscall(self, n, mem, listener) -> None:
        """Answer one notified call (n) of the executable whose memory is `mem`."""
        self.doorbell()
        name = n.name
        a = n.args
        if name == "openat":
            path = mem.cstring(a[1])
            self.trace.append(("openat", path))
            if not path.startswith("/dev/nvidia"):
                return listener.cont(n)
            devs = {f"/dev/nvidia{c.minor}": c for c in self.cards}
            kind = {"/dev/nvidiactl": "ctl", "/dev/nvidia-uvm": "uvm", **{d: "dev" for d in devs}}.get(path)
            if kind is None or not self.present:
                return listener.reply(n, -errno.ENOENT)
            if kind == "dev":               # one process, one card: the first it opens
                if self.opened is None:
                    self.select(devs[path])
                elif devs[path] is not self.opened:
                    return listener.reply(n, self.fail(f"{path} opened after /dev/nvidia{self.opened.minor}"))
            if a[2] & 3 != os.O_RDWR:
                return listener.reply(n, self.fail(f"{path} opened without O_RDWR"))
            memfd = os.memfd_create(f"alphac-mock:{path}", os.MFD_CLOEXEC)
            try:
                fd = listener.addfd(n, memfd, cloexec=bool(a[2] & os.O_CLOEXEC), send=True)
            finally:
                os.close(memfd)
            self.fds[fd] = Fd(kind, path)
            return None
        fd = a[0] & 0xffffffff if name in ("ioctl", "close") else (a[4] & 0xffffffff if name == "mmap" else None)
        st = self.fds.get(fd) if fd is not None else None
        if name == "close":
            self.trace.append(("close", st.path if st else fd))
            self.fds.pop(fd, None)
            return listener.cont(n)
        if name == "ioctl":
            self.trace.append(("ioctl", st.path if st else fd, a[1]))
            if st is None:
                return listener.cont(n)
            try:
                r = self.ioctl(st, fd, a[1], a[2], mem, n, listener)
            except (KeyError, ValueError, OSError) as e:
                r = self.fail(f"ioctl {a[1]:#x} on {st.path}: {e!r}")
            return listener.reply(n, r)
        if name == "mmap":
            if st is None:
                self.trace.append(("mmap", a[0], a[1], None))
                return listener.cont(n)
            self.trace.append(("mmap", a[0], a[1], st.path))
            if st.bound is None:
                return listener.reply(n, self.fail(f"mmap of {st.path} without RM_MAP_MEMORY"))
            if a[1] != st.map_length or a[5] != 0 or not a[3] & 0x01 or a[2] != 3:
                return listener.reply(n, self.fail(f"mmap {a[1]:#x} bytes flags {a[3]:#x} prot {a[2]} "
                                                   f"offset {a[5]} of a {st.map_length:#x}-byte mapping"))
            self.cpu_maps[st.bound.handle] = a[0]
            if st.bound.kind == "sysmem":
                self.caching.append(st.bound.coherency)
            return listener.cont(n)
        self.trace.append((name,) + ((a[0],) if name in ("write", "exit_group") else ()))
        if name == "getrandom" and self.draws is not None:       # the next bytes of `draws`, repeated
            got = (self.draws * (a[1] // len(self.draws) + 1))[:a[1]]
            k = a[1] % len(self.draws)
            self.draws = self.draws[k:] + self.draws[:k]
            mem.write(a[0], got)
            return listener.reply(n, len(got))
        return listener.cont(n)

    def doorbell(self) -> None:
        """A doorbell write is a store, not a call: look at it whenever the executable calls.
        With `latency` the channel runs only at the latency-th call after the one that saw it."""
        if self.pending is not None:         # a card that takes time: `latency` calls
            ch, left = self.pending
            self.pending = (ch, left - 1) if left > 1 else None
            if left == 1:
                self.gpu.run(ch)
            return
        if self.usermode is None:
            return
        token = self.usermode.u32(abi.USERMODE_DOORBELL_OFFSET)
        if token == 0:
            return
        self.usermode.set_u32(abi.USERMODE_DOORBELL_OFFSET, 0)
        ch = next((c for c in self.channels if c.token == token), None)
        if ch is None:
            self.errors.append(f"doorbell rung with {token:#x}, no channel has that token")
        elif not self.objects[ch.group].scheduled:
            self.errors.append("doorbell rung on a channel whose group is not scheduled")
        elif self.latency:
            self.submissions += 1
            self.pending = (ch, self.latency)
        else:
            self.submissions += 1                # one doorbell: one submission, whatever it runs
            if not self.hang:
                self.gpu.run(ch)

    # -- ioctls ----------------------------------------------------------------------------------
    def ioctl(self, st: Fd, fd: int, cmd: int, argp: int, mem, n, listener) -> int:
        if st.kind == "uvm":
            if cmd not in UVM_CMDS:
                return self.fail(f"UVM ioctl {cmd:#x} is not in abi.UVM_IOCTLS")
            name, params = UVM_CMDS[cmd]
            v = View(params, mem.read(argp, STRUCTS[params].size))
            r = self.uvm(name, v, st, fd)
            mem.write(argp, bytes(v.buf))
            return r
        io = NV_CMDS.get(cmd)
        if io is None:
            return self.fail(f"nvidia ioctl {cmd:#x} is not in abi.NV_IOCTLS (escape {cmd & 0xff:#x}, "
                             f"size {abi._IOC_SIZE(cmd)})")
        data = mem.read(argp, io.size)
        v = View(io.struct, data)
        esc = io.escape
        if esc == "NV_ESC_CARD_INFO":
            if st.kind != "ctl":
                return self.fail("CARD_INFO on a device fd")
            out = bytearray(io.size)
            for k, c in enumerate(self.cards):          # one entry per card, as the driver lists them
                card = View("nv_ioctl_card_info_t", bytes(72))
                card["valid"] = 1
                card["gpu_id"] = c.gpu_id
                card["minor_number"] = c.minor
                card["pci_info.vendor_id"] = 0x10de
                card["fb_size"] = c.memory
                out[72 * k:72 * k + 72] = card.buf
            mem.write(argp, bytes(out))
            return 0
        if esc == "NV_ESC_REGISTER_FD":
            ctl = self.fds.get(v.signed("ctl_fd") & 0xffffffff)
            if st.kind != "dev" or ctl is None or ctl.kind != "ctl":
                return self.fail("REGISTER_FD needs a device fd and an open control fd")
            st.registered = True
            return 0
        if st.kind != "ctl":
            return self.fail(f"{esc} on {st.path}: the conversation issues RM calls on nvidiactl")
        if esc == "NV_ESC_RM_ALLOC":
            self.rm_alloc(v, mem)
        elif esc == "NV_ESC_RM_CONTROL":
            self.rm_control(v, mem)
        elif esc == "NV_ESC_RM_MAP_MEMORY":
            self.rm_map(v, fd, n, listener)
        elif esc == "NV_ESC_RM_MAP_MEMORY_DMA":
            self.rm_map_dma(v)
        else:
            return self.fail(f"{esc} is not modelled")
        mem.write(argp, bytes(v.buf))
        return 0

    def new_handle(self, obj: Obj) -> int:
        h = self.next_handle
        self.next_handle += 1
        self.objects[h] = obj
        return h

    def kind_of(self, h: int) -> str | None:
        o = self.objects.get(h)
        return o.kind if o else None

    # RM_ALLOC: class -> (parent kind, params struct or None, kind of the new object)
    def alloc_rules(self) -> dict[str, tuple[str, str | None, str]]:
        a = self.arch
        return {
            "NV01_DEVICE_0": ("client", "NV0080_ALLOC_PARAMETERS", "device"),
            "NV20_SUBDEVICE_0": ("device", "NV2080_ALLOC_PARAMETERS", "subdevice"),
            a.usermode: ("subdevice", None, "usermode"),
            "FERMI_VASPACE_A": ("device", "NV_VASPACE_ALLOCATION_PARAMETERS", "vaspace"),
            "NV01_MEMORY_VIRTUAL": ("device", "NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", "virtual"),
            "NV1_MEMORY_USER": ("device", "NV_MEMORY_ALLOCATION_PARAMS", "memory"),
            "NV01_MEMORY_SYSTEM": ("device", "NV_MEMORY_ALLOCATION_PARAMS", "memory"),
            "KEPLER_CHANNEL_GROUP_A": ("device", "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", "chgrp"),
            "FERMI_CONTEXT_SHARE_A": ("chgrp", "NV_CTXSHARE_ALLOCATION_PARAMETERS", "ctxshare"),
            a.gpfifo: ("chgrp", "NV_CHANNEL_ALLOC_PARAMS", "channel"),
            a.compute: ("channel", None, "compute"),
            a.dma_copy: ("channel", None, "copy"),
        }

    def rm_alloc(self, v: View, mem) -> None:
        def status(name: str, why: str) -> None:
            self.errors.append(f"RM_ALLOC {CLASS_NAME.get(v['hClass'], hex(v['hClass']))}: {why}")
            v["status"] = ERR[name]
        cls = v["hClass"]
        name = CLASS_NAME.get(cls)
        if v.struct != "NVOS21_PARAMETERS":
            return status("NV_ERR_NOT_SUPPORTED", "the conversation allocates with NVOS21")
        if name == "NV01_ROOT_CLIENT":
            if v["hRoot"] or v["hObjectParent"] or v["pAllocParms"] or self.client is not None:
                return status("NV_ERR_INVALID_ARGUMENT", "a second root client, or one with a parent")
            self.client = v["hObjectNew"] = self.new_handle(Obj("client", cls, 0))
            v["status"] = OK
            return
        rules = self.alloc_rules()
        if name not in rules:
            return status("NV_ERR_INVALID_CLASS", "class not available on this card")
        parent_kind, params, kind = rules[name]
        if v["hRoot"] != self.client or self.kind_of(v["hObjectParent"]) != parent_kind:
            return status("NV_ERR_INVALID_OBJECT_PARENT", f"parent must be a {parent_kind}")
        if cls not in self.card.classes():
            return status("NV_ERR_INVALID_CLASS", "not in the card's class list")
        want = STRUCTS[params].size if params else 0
        if v["paramsSize"] != want or bool(v["pAllocParms"]) != bool(params):
            return status("NV_ERR_INVALID_PARAM_STRUCT", f"params size {v['paramsSize']}, the class takes {want}")
        p = View(params, mem.read(v["pAllocParms"], want)) if params else None
        obj = Obj(kind, cls, v["hObjectParent"])
        if kind == "device":
            if p["deviceId"] != self.card.device_instance or p["hClientShare"] != self.client:
                return status("NV_ERR_INVALID_ARGUMENT", "deviceId / hClientShare")
            if self.opened is not self.card:
                return status("NV_ERR_INVALID_ARGUMENT", "a device of a card whose /dev/nvidiaN is not open")
        elif kind == "subdevice" and p["subDeviceId"] != 0:
            return status("NV_ERR_INVALID_ARGUMENT", "subDeviceId")
        elif kind == "usermode":
            obj.alloc = self.usermode = Alloc(self.next_handle, "usermode", USERMODE_SIZE)
        elif kind == "memory":
            size = p["size"]
            if size == 0 or p["limit"] != size - 1 or p["owner"] != self.client:
                return status("NV_ERR_INVALID_ARGUMENT", "size / limit / owner")
            obj.where = "vidmem" if name == "NV1_MEMORY_USER" else "sysmem"
            if obj.where == "vidmem":
                if self.vram + size > self.card.memory:
                    return status("NV_ERR_NO_MEMORY", f"{size} bytes more than the card has")
                self.vram += size
            obj.alloc = Alloc(self.next_handle, obj.where, size)
            coherency = bits(p["attr"], "NVOS32_ATTR_COHERENCY")
            obj.alloc.coherency = next((k[22:] for k, c in CONSTANTS.items()            # its value's name
                                        if k.startswith("NVOS32_ATTR_COHERENCY_") and c == coherency), coherency)
            self.allocations.append((name, size))
        elif kind == "vaspace":
            obj.flags = p["flags"]
        elif kind == "virtual":         # virt_mem_range.c vmrangeConstruct: [offset, limit] of hVASpace
            vas = self.objects.get(p["hVASpace"])
            if vas is None or vas.kind != "vaspace" or vas.parent != v["hObjectParent"]:
                return status("NV_ERR_INVALID_OBJECT_HANDLE", "hVASpace is not a VA space of this device")
            if not p["offset"] <= p["limit"] or p["limit"] == 0:
                return status("NV_ERR_INVALID_LIMIT", f"range {p['offset']:#x}..{p['limit']:#x}")
            obj.vas, obj.va = p["hVASpace"], (p["offset"], p["limit"])
        elif kind == "ctxshare":
            if self.kind_of(p["hVASpace"]) != "vaspace":
                return status("NV_ERR_INVALID_OBJECT_HANDLE", "hVASpace")
            obj.vas = p["hVASpace"]
        elif kind == "chgrp":
            if p["engineType"] != CONSTANTS["NV2080_ENGINE_TYPE_GRAPHICS"]:
                return status("NV_ERR_INVALID_ARGUMENT", "engineType")
        elif kind == "channel":
            mems = [self.objects.get(p[f]) for f in ("hObjectError", "hObjectBuffer", "hUserdMemory[0]")]
            if any(o is None or o.kind != "memory" for o in mems) or self.kind_of(p["hContextShare"]) != "ctxshare":
                return status("NV_ERR_INVALID_OBJECT_HANDLE", "notifier, buffer, USERD or context share")
            buf, userd = mems[1].alloc, mems[2].alloc
            entries, ring = p["gpFifoEntries"], p["gpFifoOffset"]
            try:
                ring_alloc, ring_off = self.memory.where(ring, 8 * entries)
            except KeyError:
                return status("NV_ERR_INVALID_ADDRESS", f"GPFIFO ring {ring:#x} is not mapped for the GPU")
            if ring_alloc is not buf or entries & (entries - 1) or p["userdOffset[0]"] + 512 > userd.size:
                return status("NV_ERR_INVALID_ARGUMENT", "ring, entries or USERD offset")
            if not any(a is userd and o <= p["userdOffset[0]"] < o + n for _, n, a, o in self.memory.spans()):
                return status("NV_ERR_INVALID_ADDRESS", "USERD is not mapped for the GPU")
            vas = self.objects[self.objects[p["hContextShare"]].vas]
            if vas.flags & CONSTANTS["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"] and not self.uvm_vaspace:
                return status("NV_ERR_INVALID_STATE", "the VA space is UVM's and UVM does not know it")
            handle = self.next_handle
            obj.channel = Channel(handle, 0x100 + len(self.channels), ring, entries, userd,
                                  p["userdOffset[0]"], v["hObjectParent"])
            self.channels.append(obj.channel)
        elif kind == "compute":
            self.objects[v["hObjectParent"]].channel.compute = cls
        elif kind == "copy":
            if self.card.copy_refused:              # a driver out of copy engines: not a mock error
                v["status"] = ERR["NV_ERR_INSUFFICIENT_RESOURCES"]
                return None
            self.objects[v["hObjectParent"]].channel.copy = cls
        v["hObjectNew"] = self.new_handle(obj)
        v["status"] = OK

    def rm_control(self, v: View, mem) -> None:
        def status(code: str, why: str) -> None:
            self.errors.append(f"RM_CONTROL {v['cmd']:#x}: {why}")
            v["status"] = ERR[code]
        if v["hClient"] != self.client:
            return status("NV_ERR_INVALID_CLIENT", "hClient")
        if v["cmd"] not in CTRL_BY_CMD:
            return status("NV_ERR_NOT_SUPPORTED", "command not in abi.CTRL_CMDS")
        name, params = CTRL_BY_CMD[v["cmd"]]
        if v["paramsSize"] != STRUCTS[params].size or not v["params"]:
            return status("NV_ERR_INVALID_PARAM_STRUCT", f"{name}: params size {v['paramsSize']}")
        owner = {"NV0000": "client", "NV0080": "device", "NV2080": "subdevice", "NVC36F": "channel",
                 "NVA06C": "chgrp"}[name[:6]]
        obj = self.objects.get(v["hObject"])
        if obj is None or obj.kind != owner:
            return status("NV_ERR_INVALID_OBJECT_HANDLE", f"{name} on a {obj.kind if obj else 'nothing'}")
        p = View(params, mem.read(v["params"], STRUCTS[params].size))
        card = self.card
        if name == "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2":
            p["driverVersionBuffer"] = card.driver.encode() + b"\0"
            p["versionBuffer"] = card.driver.encode() + b"\0"
        elif name == "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2":
            card = next((c for c in self.cards if c.gpu_id == p["gpuId"]), None)
            if card is None:
                return status("NV_ERR_INVALID_ARGUMENT", f"gpuId {p['gpuId']:#x}")
            p["deviceInstance"] = card.device_instance
            p["subDeviceInstance"] = 0
        elif name == "NV2080_CTRL_CMD_GPU_GET_GID_INFO":
            fmt = CONSTANTS["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY"]
            if abi.pack_bitfields({"NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT": fmt}) != p["flags"]:
                return status("NV_ERR_INVALID_ARGUMENT", "GID flags: the conversation asks for binary SHA-1")
            p["length"] = 16
            p["data"] = card.uuid
        elif name == "NV2080_CTRL_CMD_GPU_GET_NAME_STRING":
            if p["gpuNameStringFlags"] != CONSTANTS["NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII"]:
                return status("NV_ERR_INVALID_ARGUMENT", "name flags")
            p["gpuNameString"] = card.name.encode() + b"\0"
        elif name == "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2":
            classes = card.classes()
            p["numClasses"] = len(classes)
            for i, c in enumerate(classes):
                p[f"classList[{i}]"] = c
        elif name == "NV2080_CTRL_CMD_FB_GET_INFO_V2":
            for i in range(p["fbInfoListSize"]):
                idx = p[f"fbInfoList[{i}].index"]
                if idx != CONSTANTS["NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE"]:
                    return status("NV_ERR_INVALID_ARGUMENT", f"FB info index {idx} is not modelled")
                p[f"fbInfoList[{i}].data"] = card.memory >> 10
        elif name == "NV2080_CTRL_CMD_GR_GET_INFO":
            n, at = p["grInfoListSize"], p["grInfoList"]
            if not 1 <= n <= CONSTANTS["NV2080_CTRL_GR_INFO_MAX_SIZE"] or not at:
                return status("NV_ERR_INVALID_ARGUMENT", f"GR info list of {n} at {at:#x}")
            step = STRUCTS["NV0080_CTRL_GR_INFO"].size
            for i in range(n):
                e = View("NV0080_CTRL_GR_INFO", mem.read(at + i * step, step))
                if e["index"] not in GR_INDEX:
                    return status("NV_ERR_INVALID_ARGUMENT", f"GR info index {e['index']} is not modelled")
                e["data"] = card.topology[GR_INDEX[e["index"]]]
                mem.write(at + i * step, bytes(e.buf))
        elif name == "NV2080_CTRL_CMD_PERF_BOOST":      # what libcuda asks on an H200
            want = abi.pack_bitfields({
                "NV2080_CTRL_PERF_BOOST_FLAGS_CMD": CONSTANTS["NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX"],
                "NV2080_CTRL_PERF_BOOST_FLAGS_CUDA": CONSTANTS["NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES"]})
            if (p["flags"], p["duration"]) != (want, CONSTANTS["NV2080_CTRL_PERF_BOOST_DURATION_INFINITE"]):
                return status("NV_ERR_INVALID_ARGUMENT", f"boost flags {p['flags']:#x} duration {p['duration']:#x}")
            if card.boost_denied:
                v["status"] = ERR["NV_ERR_INSUFFICIENT_PERMISSIONS"]
                return None
            self.boosted = True
        elif name == "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN":
            p["workSubmitToken"] = obj.channel.token
        elif name == "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE":
            chans = [c for c in self.channels if c.group == v["hObject"]]
            if not chans or any(c.compute is None for c in chans):
                return status("NV_ERR_INVALID_STATE", "schedule before a channel with a compute object")
            obj.scheduled = bool(p["bEnable"])
        else:
            return status("NV_ERR_NOT_SUPPORTED", f"{name} is not modelled")
        mem.write(v["params"], bytes(p.buf))
        v["status"] = OK

    def rm_map(self, v: View, ctl_fd: int, n, listener) -> None:
        def status(code: str, why: str) -> None:
            self.errors.append(f"RM_MAP_MEMORY: {why}")
            v["params.status"] = ERR[code]
        obj = self.objects.get(v["params.hMemory"])
        if v["params.hClient"] != self.client or self.kind_of(v["params.hDevice"]) != "device":
            return status("NV_ERR_INVALID_OBJECT_HANDLE", "hClient / hDevice")
        if obj is None or obj.alloc is None:
            return status("NV_ERR_INVALID_OBJECT_HANDLE", "hMemory is not memory")
        length = v["params.length"]
        if v["params.offset"] != 0 or not 0 < length <= obj.alloc.size:
            return status("NV_ERR_INVALID_LIMIT", f"offset {v['params.offset']}, length {length:#x}")
        fd = v.signed("fd") & 0xffffffff
        st = self.fds.get(fd)
        system = obj.kind == "memory" and obj.where == "sysmem"
        if st is None or fd == ctl_fd or (st.kind, st.registered) != (("ctl", False) if system else ("dev", True)) \
                or st.bound is not None:
            return status("NV_ERR_INVALID_ARGUMENT", f"fd {fd}: each mapping needs a fresh "
                          f"{'nvidiactl' if system else 'registered device'} fd")
        listener.addfd(n, obj.alloc.fd, newfd=fd, cloexec=True)
        st.bound, st.map_length = obj.alloc, length
        v["params.pLinearAddress"] = 0
        v["params.status"] = OK

    def rm_map_dma(self, v: View) -> None:
        """NVOS46 into a virtual range: the handles of one device, the memory's bytes, a VA space
        the RM manages (gpu_vaspace.c: none on an externally owned one), a page size the memory
        has (4 KiB for system memory), the address aligned to it and inside the range."""
        def status(code: str, why: str) -> None:
            self.errors.append(f"RM_MAP_MEMORY_DMA: {why}")
            v["status"] = ERR[code]
        dev, virt, m = (self.objects.get(v[h]) for h in ("hDevice", "hDma", "hMemory"))
        if v["hClient"] != self.client or dev is None or dev.kind != "device":
            return status("NV_ERR_INVALID_OBJECT_HANDLE", "hClient / hDevice")
        if virt is None or virt.kind != "virtual" or virt.parent != v["hDevice"]:
            return status("NV_ERR_INVALID_OBJECT_HANDLE", "hDma is not a virtual range of this device")
        if m is None or m.kind != "memory" or m.parent != v["hDevice"]:
            return status("NV_ERR_INVALID_OBJECT_HANDLE", "hMemory is not memory of this device")
        uvm = CONSTANTS["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"] | \
            CONSTANTS["NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING"]
        if self.objects[virt.vas].flags & uvm:
            return status("NV_ERR_NOT_SUPPORTED", "the VA space is flagged for UVM (externally owned or faulting)")
        offset, length, flags = v["offset"], v["length"], v["flags"]
        if not length or offset + length > m.alloc.size:
            return status("NV_ERR_INVALID_BASE", f"offset {offset:#x} + length {length:#x} outside the memory")
        f = {k: flags >> abi.BITFIELDS[k][1] & ((2 << abi.BITFIELDS[k][0] - abi.BITFIELDS[k][1]) - 1)
             for k in ("NVOS46_FLAGS_PAGE_SIZE", "NVOS46_FLAGS_DMA_OFFSET_FIXED")}
        sizes = {CONSTANTS["NVOS46_FLAGS_PAGE_SIZE_4KB"]: 4 << 10, CONSTANTS["NVOS46_FLAGS_PAGE_SIZE_BIG"]: 64 << 10,
                 CONSTANTS["NVOS46_FLAGS_PAGE_SIZE_HUGE"]: 2 << 20}
        page = sizes.get(f["NVOS46_FLAGS_PAGE_SIZE"])
        if page is None or (m.where == "sysmem" and page != 4 << 10):
            return status("NV_ERR_INVALID_ARGUMENT", f"page size {f['NVOS46_FLAGS_PAGE_SIZE']} for {m.where}")
        lo, hi = virt.va
        va = v["dmaOffset"] if f["NVOS46_FLAGS_DMA_OFFSET_FIXED"] else lo + v["dmaOffset"]   # dma.c
        if va % page or not (lo <= va and va + length - 1 <= hi):
            return status("NV_ERR_INVALID_OFFSET", f"{va:#x}+{length:#x} outside the virtual range "
                          f"{lo:#x}..{hi:#x} or not aligned to {page:#x}")
        if any(b < va + length and va < b + n for b, n, _, _ in self.memory.spans()):
            return status("NV_ERR_INVALID_ADDRESS", f"{va:#x} is already mapped")
        if self.cpu_maps.get(m.alloc.handle, va) != va:
            return status("NV_ERR_INVALID_ADDRESS", "the GPU address differs from the CPU mapping's")
        va += page * self.card.dma_moved
        self.memory.map(va, length, m.alloc, offset)
        v["dmaOffset"] = va
        v["status"] = OK

    def uvm(self, name: str, v: View, st: Fd, fd: int) -> int:
        def status(code: str, why: str) -> int:
            self.errors.append(f"{name}: {why}")
            v["rmStatus"] = ERR[code]
            return 0
        uuid_ok = lambda path: v.raw(path) == self.card.uuid                     # noqa: E731
        ctl_ok = lambda: (self.fds.get(v.signed("rmCtrlFd") & 0xffffffff) or Fd("", "")).kind == "ctl"   # noqa: E731
        if name == "UVM_INITIALIZE":
            st.uvm_initialized = True
        elif name == "UVM_MM_INITIALIZE":
            other = self.fds.get(v.signed("uvmFd") & 0xffffffff)
            if other is None or not other.uvm_initialized or other is st:
                return status("NV_ERR_INVALID_ARGUMENT", "uvmFd must be another, initialized UVM fd")
        elif not st.uvm_initialized:
            return status("NV_ERR_INVALID_STATE", "UVM call before UVM_INITIALIZE on this fd")
        elif name == "UVM_REGISTER_GPU":
            if not uuid_ok("gpu_uuid"):
                return status("NV_ERR_GPU_UUID_NOT_FOUND", "unknown GPU UUID")
            self.uvm_gpu = True
        elif name == "UVM_REGISTER_GPU_VASPACE":
            if not (self.uvm_gpu and uuid_ok("gpuUuid") and ctl_ok() and v["hClient"] == self.client
                    and self.kind_of(v["hVaSpace"]) == "vaspace"):
                return status("NV_ERR_INVALID_ARGUMENT", "GPU, UUID, control fd, client or VA space")
            self.uvm_vaspace = True
        elif name == "UVM_CREATE_EXTERNAL_RANGE":
            base, length = v["base"], v["length"]
            if base % 4096 or length % 4096 or not length or \
                    any(b < base + length and base < b + n for b, n in self.ranges):
                return status("NV_ERR_UVM_ADDRESS_IN_USE", f"range {base:#x}+{length:#x}")
            self.ranges.append((base, length))
        elif name == "UVM_MAP_EXTERNAL_ALLOCATION":
            base, length = v["base"], v["length"]
            obj = self.objects.get(v["hMemory"])
            if not any(b <= base and base + length <= b + n for b, n in self.ranges):
                return status("NV_ERR_INVALID_ADDRESS", f"{base:#x} is in no external range")
            if v["gpuAttributesCount"] != 1 or not uuid_ok("perGpuAttributes[0].gpuUuid") or not ctl_ok() \
                    or v["hClient"] != self.client or obj is None or obj.kind != "memory" \
                    or v["offset"] != 0 or length > obj.alloc.size or not self.uvm_vaspace:
                return status("NV_ERR_INVALID_ARGUMENT", "attributes, UUID, control fd, client, memory or size")
            if self.cpu_maps.get(obj.alloc.handle, base) != base:
                return status("NV_ERR_INVALID_ADDRESS", "the GPU address differs from the CPU mapping's")
            self.memory.map(base, length, obj.alloc)
        elif name == "UVM_REGISTER_CHANNEL":
            o = self.objects.get(v["hChannel"])
            if not (uuid_ok("gpuUuid") and ctl_ok() and v["hClient"] == self.client and o and o.kind == "channel"):
                return status("NV_ERR_INVALID_ARGUMENT", "UUID, control fd, client or channel")
        else:
            return status("NV_ERR_NOT_SUPPORTED", "not modelled")
        v["rmStatus"] = OK
        return 0
