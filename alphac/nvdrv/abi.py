"""The NVIDIA kernel driver's user ABI, release 580, as data.

Everything alphac needs to talk to nvidia.ko and nvidia-uvm.ko through ioctls, with no
CUDA and no libc, on Ampere (sm_86) and Hopper (sm_90): ioctl numbers, structure layouts,
control commands, class ids, push-buffer methods, bit ranges and QMD layouts.

Sources (facts read from the published headers; no NVIDIA code or header is copied here):
  NVIDIA/open-gpu-kernel-modules, tag 580.142 (commit 1a5075f82128be3603d4a4657c7b689234306778):
    kernel-open/common/inc/nv-ioctl-numbers.h, kernel-open/common/inc/nv-ioctl.h,
    src/nvidia/arch/nvalloc/unix/include/nv_escape.h,
    src/nvidia/arch/nvalloc/unix/include/nv-unix-nvos-params-wrappers.h,
    src/common/sdk/nvidia/inc/nvos.h, src/common/sdk/nvidia/inc/nvstatuscodes.h,
    src/common/sdk/nvidia/inc/alloc/alloc_channel.h,
    src/common/sdk/nvidia/inc/class/{cl0000,cl003e,cl0040,cl0070,cl0071,cl0080,cl2080,
      cl2080_notification,cl9067,cl90f1,cla06c,clc361,clc561,clc661,clc56f,clc86f,clc7b5,
      clc8b5,clc7c0,clcbc0}.h,
    src/common/sdk/nvidia/inc/ctrl/{ctrl0000/ctrl0000system,ctrl0000/ctrl0000gpu,
      ctrl0080/ctrl0080gpu,ctrl0080/ctrl0080gr,ctrl2080/ctrl2080gpu,ctrl2080/ctrl2080gr,
      ctrl2080/ctrl2080fb,ctrlc36f,ctrla06c,ctrla06f/ctrla06fgpfifo}.h,
    kernel-open/nvidia-uvm/uvm_ioctl.h, kernel-open/nvidia-uvm/uvm_linux_ioctl.h,
    kernel-open/nvidia-uvm/uvm_types.h, kernel-open/common/inc/nv_uvm_user_types.h;
    which struct each escape carries: kernel-open/nvidia/nv.c (nvidia_ioctl) and
    src/nvidia/arch/nvalloc/unix/src/escape.c (RmIoctl).
  NVIDIA/open-gpu-doc, commit c8607fe576b53ff821ffcf97e7548d2de11c4eaf:
    classes/compute/clcbc0.h (HOPPER_COMPUTE_A methods), classes/compute/clc7c0qmd.h
    (QMD V03_00), classes/compute/clcbc0qmd.h (QMD V04_00).

How it is checked: tests/nvdrv_layout_probe/probe.py compiles the headers with gcc and
writes every number (sizeof/_Alignof/offsetof of every field, every command number, class
id, method offset, bit range, QMD field) to tests/golden/nvdrv_abi_580.json, with the tag,
commits and the sha256 of every header read.  tests/test_nvdrv_abi.py compares every table
here with that file in both directions, offline.  Layouts are those of an LP64 Linux
target (the probe ran on x86-64; NvU64 and NvP64 are 8-byte aligned there and on AArch64).

Naming: tables are keyed by the header's own names (NV01_MEMORY_SYSTEM, not an alias).
Methods are keyed by class-header prefix ("NVC7C0") and method name.  Bit ranges are
(high, low), inclusive, as the headers write high:low.
"""
from __future__ import annotations

from dataclasses import dataclass, field as _dc_field
from typing import Mapping

from alphac.nvdrv.generated import abi_580 as _580

SOURCE = {**_580.SOURCE, "golden": "tests/golden/nvdrv_abi_580.json"}

# ---------------------------------------------------------------------------------------
# Linux generic ioctl encoding (include/uapi/asm-generic/ioctl.h; x86-64 and AArch64 use
# the generic layout): nr bits 0-7, type bits 8-15, size bits 16-29, direction 30-31.
# ---------------------------------------------------------------------------------------

_IOC_NRBITS, _IOC_TYPEBITS, _IOC_SIZEBITS, _IOC_DIRBITS = 8, 8, 14, 2
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = _IOC_NRSHIFT + _IOC_NRBITS
_IOC_SIZESHIFT = _IOC_TYPESHIFT + _IOC_TYPEBITS
_IOC_DIRSHIFT = _IOC_SIZESHIFT + _IOC_SIZEBITS
_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2


def _IOC(direction: int, type_: int | str, nr: int, size: int) -> int:
    """One ioctl command number; refuses any part that does not fit its bits."""
    if isinstance(type_, str):
        type_ = ord(type_)
    for what, v, nbits in (("direction", direction, _IOC_DIRBITS), ("type", type_, _IOC_TYPEBITS),
                           ("nr", nr, _IOC_NRBITS), ("size", size, _IOC_SIZEBITS)):
        if not 0 <= v < (1 << nbits):
            raise ValueError(f"ioctl {what} {v} does not fit in {nbits} bits")
    return (direction << _IOC_DIRSHIFT) | (type_ << _IOC_TYPESHIFT) | (nr << _IOC_NRSHIFT) | (size << _IOC_SIZESHIFT)


def _IOWR(type_, nr, size):
    return _IOC(_IOC_READ | _IOC_WRITE, type_, nr, size)


def _IOC_NR(cmd: int) -> int:
    return (cmd >> _IOC_NRSHIFT) & ((1 << _IOC_NRBITS) - 1)


def _IOC_TYPE(cmd: int) -> int:
    return (cmd >> _IOC_TYPESHIFT) & ((1 << _IOC_TYPEBITS) - 1)


def _IOC_SIZE(cmd: int) -> int:
    return (cmd >> _IOC_SIZESHIFT) & ((1 << _IOC_SIZEBITS) - 1)


def _IOC_DIR(cmd: int) -> int:
    return (cmd >> _IOC_DIRSHIFT) & ((1 << _IOC_DIRBITS) - 1)


# ---------------------------------------------------------------------------------------
# Structure layouts.  kind: u8 u16 u32 u64 s16 s32 (NvBool is u8; NvHandle, NvV32 and
# NV_STATUS are u32; an `int fd` is s32), char, ptr (NvP64: 8 bytes), union (opaque
# here), struct:<name> (another entry of STRUCTS).  size is the field's whole size in
# bytes; count > 1 for arrays (size = count * element size).
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    kind: str
    count: int = 1


@dataclass(frozen=True)
class Struct:
    name: str
    size: int
    align: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")

    def offset(self, name: str) -> int:
        return self.field(name).offset


STRUCTS: Mapping[str, Struct] = {
    name: Struct(name, size, align, tuple(Field(*f) for f in fields))
    for name, (size, align, fields) in _580.STRUCTS.items()}

# ---------------------------------------------------------------------------------------
# nvidia.ko escapes (ioctl nr) and the full command numbers.
# ---------------------------------------------------------------------------------------

# Every NV_ESC_* of nv-ioctl-numbers.h (200 + n) and nv_escape.h (RM API escapes).
NV_ESCAPES: Mapping[str, int] = _580.NV_ESCAPES


@dataclass(frozen=True)
class NvIoctl:
    """An nvidia.ko ioctl: the escape and the structure whose size nvidia.ko checks.

    The command is _IOWR('F', nr, count * sizeof(struct)) (nv.h __NV_IOWR).  nvidia.ko
    reads only _IOC_NR and _IOC_SIZE: NV_ESC_RM_ALLOC accepts NVOS21 or NVOS64 by size
    alone, and NV_ESC_CARD_INFO fills size / sizeof(nv_ioctl_card_info_t) entries."""
    escape: str
    struct: str
    count: int = 1

    @property
    def nr(self) -> int:
        return NV_ESCAPES[self.escape]

    @property
    def size(self) -> int:
        return STRUCTS[self.struct].size * self.count

    @property
    def cmd(self) -> int:
        return _IOWR(CONSTANTS["NV_IOCTL_MAGIC"], self.nr, self.size)

    @property
    def key(self) -> str:
        return f"{self.escape}({self.struct}[{self.count}])" if self.count != 1 else f"{self.escape}({self.struct})"


NV_IOCTLS: Mapping[str, NvIoctl] = {i.key: i for i in (NvIoctl(*t) for t in _580.NV_IOCTLS)}


# ---------------------------------------------------------------------------------------
# nvidia-uvm.ko: on Linux the command is the bare number (UVM_IOCTL_BASE(i) = i), not an
# _IOC encoding.  params: the structure passed (None: no argument).
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UvmIoctl:
    cmd: int
    params: str | None


UVM_IOCTLS: Mapping[str, UvmIoctl] = {k: UvmIoctl(*v) for k, v in _580.UVM_IOCTLS.items()}


# ---------------------------------------------------------------------------------------
# RM controls (NV_ESC_RM_CONTROL, NVOS54_PARAMETERS.cmd) and their parameter structs.
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CtrlCmd:
    cmd: int
    params: str


CTRL_CMDS: Mapping[str, CtrlCmd] = {k: CtrlCmd(*v) for k, v in _580.CTRL_CMDS.items()}


# ---------------------------------------------------------------------------------------
# Classes (hClass of NV_ESC_RM_ALLOC).  NV01_ROOT_CLIENT is defined in nvos.h; the others
# in class/clXXXX.h.  NV01_MEMORY_LOCAL_USER and NV1_MEMORY_USER are one class (0x40,
# video memory); NV01_MEMORY_SYSTEM (0x3e) is host memory.
# ---------------------------------------------------------------------------------------

CLASSES: Mapping[str, int] = _580.CLASSES


@dataclass(frozen=True)
class Arch:
    """Which classes and layouts a GPU generation uses.  This mapping is not a header
    fact (the driver's class list is): it is what the driver is expected to offer on
    that chip, and a launch path must still check NV0080_CTRL_CMD_GPU_GET_CLASSLIST."""
    sm: str
    chips: str
    compute: str
    gpfifo: str
    dma_copy: str
    usermode: str
    qmd: str                 # key of QMD_LAYOUTS
    compute_methods: str     # key of METHODS
    host_methods: str
    copy_methods: str


ARCHES: Mapping[str, Arch] = {
    "sm_86": Arch("sm_86", "GA10x (Ampere)", "AMPERE_COMPUTE_B", "AMPERE_CHANNEL_GPFIFO_A",
                  "AMPERE_DMA_COPY_B", "AMPERE_USERMODE_A", "V03_00", "NVC7C0", "NVC56F", "NVC7B5"),
    "sm_90": Arch("sm_90", "GH100 (Hopper: H100, H200)", "HOPPER_COMPUTE_A", "HOPPER_CHANNEL_GPFIFO_A",
                  "HOPPER_DMA_COPY_A", "HOPPER_USERMODE_A", "V04_00", "NVCBC0", "NVC86F", "NVC8B5"),
}


# ---------------------------------------------------------------------------------------
# Push-buffer methods: byte offsets of the methods a launch uses, per class header.
#   NVC7C0 AMPERE_COMPUTE_B, NVCBC0 HOPPER_COMPUTE_A (open-gpu-doc classes/compute/clcbc0.h;
#   the kernel tree's clcbc0.h holds only the class id), NVC56F/NVC86F the host (GPFIFO)
#   classes, NVC7B5/NVC8B5 the copy classes, NVC361 the usermode (doorbell) page.
# The kernel tree's clc86f.h is an excerpt: it has no NOP, SEMAPHOREA-D or
# NON_STALL_INTERRUPT, and no NVC86F_DMA_* push-buffer header fields (see docs/nvdrv-abi.md).
# A method header (NVC56F_DMA_INCR_*) carries the method as offset >> 2.
# ---------------------------------------------------------------------------------------

METHODS: Mapping[str, Mapping[str, int]] = _580.METHODS

# The doorbell: write a channel's work-submit token (NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN)
# to this offset of the mapped usermode object.  Defined once, in clc361.h (VOLTA_USERMODE_A);
# the RM itself rings it at this offset for every Volta+ usermode class (nv_gpu_ops.c
# nvGpuOpsGetWorkSubmissionInfo, nvidia-push.c).
USERMODE_DOORBELL_OFFSET = METHODS["NVC361"]["NOTIFY_CHANNEL_PENDING"]
# GPPut / GPGet in the channel's USERD page (Nvc56fControl and Nvc86fControl agree: 0x8c / 0x88).
USERD_GPPUT_OFFSET = STRUCTS["HopperAControlGPFifo"].offset("GPPut")
USERD_GPGET_OFFSET = STRUCTS["HopperAControlGPFifo"].offset("GPGet")


# ---------------------------------------------------------------------------------------
# Named values and bit ranges used to fill parameters and method data.
# ---------------------------------------------------------------------------------------

CONSTANTS: Mapping[str, int] = _580.CONSTANTS

BITFIELDS: Mapping[str, tuple[int, int]] = _580.BITFIELDS

# NV_STATUS (nvstatuscodes.h): what NVOSxx.status / rmStatus report.  For example 0x1f
# NV_ERR_INVALID_ARGUMENT, 0x3a NV_ERR_INVALID_PARAM_STRUCT (a params size the driver does
# not expect: the 580 NVA06C schedule params grew to 3 bytes).
STATUS_CODES: Mapping[str, int] = _580.STATUS_CODES


def pack_bitfields(values: Mapping[str, int], width: int = 32) -> int:
    """One method data word (or flags word) from BITFIELDS names; refuses a value that
    does not fit its field, a field outside `width`, and two fields that overlap."""
    return _pack_int({n: BITFIELDS[n] for n in values}, values, width)


# ---------------------------------------------------------------------------------------
# QMD layouts (the bit ranges are in generated/abi_580.py) and pack_qmd.
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QmdLayout:
    name: str
    header: str
    prefix: str
    bits: int
    fields: Mapping[str, tuple[int, int]]
    indexed_counts: Mapping[str, int]
    values: Mapping[str, int] = _dc_field(default_factory=dict)

    @property
    def dwords(self) -> int:
        return self.bits // 32

    @property
    def nbytes(self) -> int:
        return self.bits // 8


QMD_V03_00 = QmdLayout("V03_00", **_580.QMD["V03_00"])
QMD_V04_00 = QmdLayout("V04_00", **_580.QMD["V04_00"])
QMD_LAYOUTS: Mapping[str, QmdLayout] = {q.name: q for q in (QMD_V03_00, QMD_V04_00)}


class FieldError(ValueError):
    """A field name or value that pack_qmd / pack_bitfields refuse."""


QmdFieldError = FieldError


def _pack_int(fields: Mapping[str, tuple[int, int]], values: Mapping[str, int], width: int) -> int:
    word = 0
    used = 0
    for name, value in values.items():
        if name not in fields:
            raise FieldError(f"unknown field {name!r}")
        hi, lo = fields[name]
        if not (0 <= lo <= hi < width):
            raise FieldError(f"field {name} [{hi}:{lo}] is outside a {width}-bit image")
        if not isinstance(value, int):
            raise FieldError(f"field {name}: value {value!r} is not an int")
        nbits = hi - lo + 1
        if not 0 <= value < (1 << nbits):
            raise FieldError(f"field {name} [{hi}:{lo}] holds {nbits} bits; {value:#x} does not fit")
        mask = ((1 << nbits) - 1) << lo
        if used & mask:
            raise FieldError(f"field {name} [{hi}:{lo}] overlaps another field given")
        used |= mask
        word |= value << lo
    return word


def pack_qmd(layout: QmdLayout, values: Mapping[str, int]) -> bytes:
    """A QMD image (layout.nbytes bytes, little-endian dwords) with the given fields set
    and every other bit zero.  Refuses an unknown field, a value that does not fit its
    field (negative included), and a non-int value."""
    return _pack_int(layout.fields, values, layout.bits).to_bytes(layout.nbytes, "little")
