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
    (QMD V03_00), classes/compute/clcbc0qmd.h (QMD V04_00); see qmd_layouts.py.

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

from alphac.nvdrv import qmd_layouts as _qmd

SOURCE = {
    "open-gpu-kernel-modules": {
        "url": "https://github.com/NVIDIA/open-gpu-kernel-modules",
        "tag": "580.142",
        "commit": "1a5075f82128be3603d4a4657c7b689234306778",
    },
    "open-gpu-doc": {
        "url": "https://github.com/NVIDIA/open-gpu-doc",
        "commit": "c8607fe576b53ff821ffcf97e7548d2de11c4eaf",
    },
    "golden": "tests/golden/nvdrv_abi_580.json",
}

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


def _s(name: str, size: int, align: int, *fields: tuple) -> tuple[str, Struct]:
    return name, Struct(name, size, align, tuple(Field(*f) for f in fields))


STRUCTS: Mapping[str, Struct] = dict((
    # unix ioctl layer: nv-ioctl.h, nv-unix-nvos-params-wrappers.h (an `int fd` follows the RM params)
    _s("nv_ioctl_card_info_t", 72, 8,
       ("valid", 0, 1, "u8"),
       ("pci_info", 4, 12, "struct:nv_pci_info_t"),
       ("gpu_id", 16, 4, "u32"),
       ("interrupt_line", 20, 2, "u16"),
       ("reg_address", 24, 8, "u64"),
       ("reg_size", 32, 8, "u64"),
       ("fb_address", 40, 8, "u64"),
       ("fb_size", 48, 8, "u64"),
       ("minor_number", 56, 4, "u32"),
       ("dev_name", 60, 10, "u8", 10),
    ),
    _s("nv_ioctl_register_fd_t", 4, 4,
       ("ctl_fd", 0, 4, "s32"),
    ),
    _s("nv_ioctl_rm_api_version_t", 72, 4,
       ("cmd", 0, 4, "u32"),
       ("reply", 4, 4, "u32"),
       ("versionString", 8, 64, "char", 64),
    ),
    _s("nv_ioctl_xfer_t", 16, 8,
       ("cmd", 0, 4, "u32"),
       ("size", 4, 4, "u32"),
       ("ptr", 8, 8, "ptr"),
    ),
    _s("nv_ioctl_wait_open_complete_t", 8, 4,
       ("rc", 0, 4, "s32"),
       ("adapterStatus", 4, 4, "u32"),
    ),
    _s("nv_ioctl_nvos33_parameters_with_fd", 56, 8,
       ("params", 0, 48, "struct:NVOS33_PARAMETERS"),
       ("fd", 48, 4, "s32"),
    ),
    _s("nv_ioctl_nvos02_parameters_with_fd", 56, 8,
       ("params", 0, 48, "struct:NVOS02_PARAMETERS"),
       ("fd", 48, 4, "s32"),
    ),
    # RM API parameters: nvos.h (NVOS00 free, 02 alloc memory, 21/64 alloc, 32 vid heap, 33/34 map,
    # 46/47 map DMA (580: 64 bytes, flags2 and kindOverride), 54 control)
    _s("NVOS00_PARAMETERS", 16, 4,
       ("hRoot", 0, 4, "u32"),
       ("hObjectParent", 4, 4, "u32"),
       ("hObjectOld", 8, 4, "u32"),
       ("status", 12, 4, "u32"),
    ),
    _s("NVOS02_PARAMETERS", 48, 8,
       ("hRoot", 0, 4, "u32"),
       ("hObjectParent", 4, 4, "u32"),
       ("hObjectNew", 8, 4, "u32"),
       ("hClass", 12, 4, "u32"),
       ("flags", 16, 4, "u32"),
       ("pMemory", 24, 8, "ptr"),
       ("limit", 32, 8, "u64"),
       ("status", 40, 4, "u32"),
    ),
    _s("NVOS21_PARAMETERS", 32, 8,
       ("hRoot", 0, 4, "u32"),
       ("hObjectParent", 4, 4, "u32"),
       ("hObjectNew", 8, 4, "u32"),
       ("hClass", 12, 4, "u32"),
       ("pAllocParms", 16, 8, "ptr"),
       ("paramsSize", 24, 4, "u32"),
       ("status", 28, 4, "u32"),
    ),
    _s("NVOS64_PARAMETERS", 48, 8,
       ("hRoot", 0, 4, "u32"),
       ("hObjectParent", 4, 4, "u32"),
       ("hObjectNew", 8, 4, "u32"),
       ("hClass", 12, 4, "u32"),
       ("pAllocParms", 16, 8, "ptr"),
       ("pRightsRequested", 24, 8, "ptr"),
       ("paramsSize", 32, 4, "u32"),
       ("flags", 36, 4, "u32"),
       ("status", 40, 4, "u32"),
    ),
    _s("NVOS32_PARAMETERS", 184, 8,
       ("hRoot", 0, 4, "u32"),
       ("hObjectParent", 4, 4, "u32"),
       ("function", 8, 4, "u32"),
       ("hVASpace", 12, 4, "u32"),
       ("ivcHeapNumber", 16, 2, "s16"),
       ("status", 20, 4, "u32"),
       ("total", 24, 8, "u64"),
       ("free", 32, 8, "u64"),
       ("data", 40, 144, "union"),
    ),
    _s("NVOS33_PARAMETERS", 48, 8,
       ("hClient", 0, 4, "u32"),
       ("hDevice", 4, 4, "u32"),
       ("hMemory", 8, 4, "u32"),
       ("offset", 16, 8, "u64"),
       ("length", 24, 8, "u64"),
       ("pLinearAddress", 32, 8, "ptr"),
       ("status", 40, 4, "u32"),
       ("flags", 44, 4, "u32"),
    ),
    _s("NVOS34_PARAMETERS", 32, 8,
       ("hClient", 0, 4, "u32"),
       ("hDevice", 4, 4, "u32"),
       ("hMemory", 8, 4, "u32"),
       ("pLinearAddress", 16, 8, "ptr"),
       ("status", 24, 4, "u32"),
       ("flags", 28, 4, "u32"),
    ),
    _s("NVOS46_PARAMETERS", 64, 8,
       ("hClient", 0, 4, "u32"),
       ("hDevice", 4, 4, "u32"),
       ("hDma", 8, 4, "u32"),
       ("hMemory", 12, 4, "u32"),
       ("offset", 16, 8, "u64"),
       ("length", 24, 8, "u64"),
       ("flags", 32, 4, "u32"),
       ("flags2", 36, 4, "u32"),
       ("kindOverride", 40, 4, "u32"),
       ("dmaOffset", 48, 8, "u64"),
       ("status", 56, 4, "u32"),
    ),
    _s("NVOS47_PARAMETERS", 48, 8,
       ("hClient", 0, 4, "u32"),
       ("hDevice", 4, 4, "u32"),
       ("hDma", 8, 4, "u32"),
       ("hMemory", 12, 4, "u32"),
       ("flags", 16, 4, "u32"),
       ("dmaOffset", 24, 8, "u64"),
       ("size", 32, 8, "u64"),
       ("status", 40, 4, "u32"),
    ),
    _s("NVOS54_PARAMETERS", 32, 8,
       ("hClient", 0, 4, "u32"),
       ("hObject", 4, 4, "u32"),
       ("cmd", 8, 4, "u32"),
       ("flags", 12, 4, "u32"),
       ("params", 16, 8, "ptr"),
       ("paramsSize", 24, 4, "u32"),
       ("status", 28, 4, "u32"),
    ),
    # nvidia-uvm: uvm_linux_ioctl.h, uvm_ioctl.h, uvm_types.h
    _s("UVM_INITIALIZE_PARAMS", 16, 8,
       ("flags", 0, 8, "u64"),
       ("rmStatus", 8, 4, "u32"),
    ),
    _s("UVM_MM_INITIALIZE_PARAMS", 8, 4,
       ("uvmFd", 0, 4, "s32"),
       ("rmStatus", 4, 4, "u32"),
    ),
    _s("UVM_REGISTER_GPU_PARAMS", 40, 4,
       ("gpu_uuid", 0, 16, "struct:NvProcessorUuid"),
       ("numaEnabled", 16, 1, "u8"),
       ("numaNodeId", 20, 4, "s32"),
       ("rmCtrlFd", 24, 4, "s32"),
       ("hClient", 28, 4, "u32"),
       ("hSmcPartRef", 32, 4, "u32"),
       ("rmStatus", 36, 4, "u32"),
    ),
    _s("UVM_UNREGISTER_GPU_PARAMS", 20, 4,
       ("gpu_uuid", 0, 16, "struct:NvProcessorUuid"),
       ("rmStatus", 16, 4, "u32"),
    ),
    _s("UVM_REGISTER_GPU_VASPACE_PARAMS", 32, 4,
       ("gpuUuid", 0, 16, "struct:NvProcessorUuid"),
       ("rmCtrlFd", 16, 4, "s32"),
       ("hClient", 20, 4, "u32"),
       ("hVaSpace", 24, 4, "u32"),
       ("rmStatus", 28, 4, "u32"),
    ),
    _s("UVM_UNREGISTER_GPU_VASPACE_PARAMS", 20, 4,
       ("gpuUuid", 0, 16, "struct:NvProcessorUuid"),
       ("rmStatus", 16, 4, "u32"),
    ),
    _s("UVM_REGISTER_CHANNEL_PARAMS", 56, 8,
       ("gpuUuid", 0, 16, "struct:NvProcessorUuid"),
       ("rmCtrlFd", 16, 4, "s32"),
       ("hClient", 20, 4, "u32"),
       ("hChannel", 24, 4, "u32"),
       ("base", 32, 8, "u64"),
       ("length", 40, 8, "u64"),
       ("rmStatus", 48, 4, "u32"),
    ),
    _s("UVM_UNREGISTER_CHANNEL_PARAMS", 28, 4,
       ("gpuUuid", 0, 16, "struct:NvProcessorUuid"),
       ("hClient", 16, 4, "u32"),
       ("hChannel", 20, 4, "u32"),
       ("rmStatus", 24, 4, "u32"),
    ),
    _s("UVM_CREATE_EXTERNAL_RANGE_PARAMS", 24, 8,
       ("base", 0, 8, "u64"),
       ("length", 8, 8, "u64"),
       ("rmStatus", 16, 4, "u32"),
    ),
    _s("UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", 9264, 8,
       ("base", 0, 8, "u64"),
       ("length", 8, 8, "u64"),
       ("offset", 16, 8, "u64"),
       ("perGpuAttributes", 24, 9216, "struct:UvmGpuMappingAttributes", 256),
       ("gpuAttributesCount", 9240, 8, "u64"),
       ("rmCtrlFd", 9248, 4, "s32"),
       ("hClient", 9252, 4, "u32"),
       ("hMemory", 9256, 4, "u32"),
       ("rmStatus", 9260, 4, "u32"),
    ),
    _s("UVM_FREE_PARAMS", 24, 8,
       ("base", 0, 8, "u64"),
       ("length", 8, 8, "u64"),
       ("rmStatus", 16, 4, "u32"),
    ),
    # allocation parameters (pAllocParms of NV_ESC_RM_ALLOC): cl0080.h, cl2080.h, nvos.h, cl0070.h,
    # alloc/alloc_channel.h (NV_CHANNEL_ALLOC_PARAMS = NV_CHANNELGPFIFO_ALLOCATION_PARAMETERS)
    _s("NV0080_ALLOC_PARAMETERS", 56, 8,
       ("deviceId", 0, 4, "u32"),
       ("hClientShare", 4, 4, "u32"),
       ("hTargetClient", 8, 4, "u32"),
       ("hTargetDevice", 12, 4, "u32"),
       ("flags", 16, 4, "u32"),
       ("vaSpaceSize", 24, 8, "u64"),
       ("vaStartInternal", 32, 8, "u64"),
       ("vaLimitInternal", 40, 8, "u64"),
       ("vaMode", 48, 4, "u32"),
    ),
    _s("NV2080_ALLOC_PARAMETERS", 4, 4,
       ("subDeviceId", 0, 4, "u32"),
    ),
    _s("NV_VASPACE_ALLOCATION_PARAMETERS", 56, 8,
       ("index", 0, 4, "u32"),
       ("flags", 4, 4, "u32"),
       ("vaSize", 8, 8, "u64"),
       ("vaStartInternal", 16, 8, "u64"),
       ("vaLimitInternal", 24, 8, "u64"),
       ("bigPageSize", 32, 4, "u32"),
       ("vaBase", 40, 8, "u64"),
       ("pasid", 48, 4, "u32"),
    ),
    _s("NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", 20, 4,
       ("hObjectError", 0, 4, "u32"),
       ("hObjectEccError", 4, 4, "u32"),
       ("hVASpace", 8, 4, "u32"),
       ("engineType", 12, 4, "u32"),
       ("bIsCallingContextVgpuPlugin", 16, 1, "u8"),
    ),
    _s("NV_CTXSHARE_ALLOCATION_PARAMETERS", 12, 4,
       ("hVASpace", 0, 4, "u32"),
       ("flags", 4, 4, "u32"),
       ("subctxId", 8, 4, "u32"),
    ),
    _s("NV_CHANNEL_ALLOC_PARAMS", 368, 8,
       ("hObjectError", 0, 4, "u32"),
       ("hObjectBuffer", 4, 4, "u32"),
       ("gpFifoOffset", 8, 8, "u64"),
       ("gpFifoEntries", 16, 4, "u32"),
       ("flags", 20, 4, "u32"),
       ("hContextShare", 24, 4, "u32"),
       ("hVASpace", 28, 4, "u32"),
       ("hUserdMemory", 32, 32, "u32", 8),
       ("userdOffset", 64, 64, "u64", 8),
       ("engineType", 128, 4, "u32"),
       ("cid", 132, 4, "u32"),
       ("subDeviceId", 136, 4, "u32"),
       ("hObjectEccError", 140, 4, "u32"),
       ("instanceMem", 144, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("userdMem", 168, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("ramfcMem", 192, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("mthdbufMem", 216, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("hPhysChannelGroup", 240, 4, "u32"),
       ("internalFlags", 244, 4, "u32"),
       ("errorNotifierMem", 248, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("eccErrorNotifierMem", 272, 24, "struct:NV_MEMORY_DESC_PARAMS"),
       ("ProcessID", 296, 4, "u32"),
       ("SubProcessID", 300, 4, "u32"),
       ("encryptIv", 304, 12, "u32", 3),
       ("decryptIv", 316, 12, "u32", 3),
       ("hmacNonce", 328, 32, "u32", 8),
       ("tpcConfigID", 360, 4, "u32"),
    ),
    _s("NV_MEMORY_ALLOCATION_PARAMS", 128, 8,
       ("owner", 0, 4, "u32"),
       ("type", 4, 4, "u32"),
       ("flags", 8, 4, "u32"),
       ("width", 12, 4, "u32"),
       ("height", 16, 4, "u32"),
       ("pitch", 20, 4, "s32"),
       ("attr", 24, 4, "u32"),
       ("attr2", 28, 4, "u32"),
       ("format", 32, 4, "u32"),
       ("comprCovg", 36, 4, "u32"),
       ("zcullCovg", 40, 4, "u32"),
       ("rangeLo", 48, 8, "u64"),
       ("rangeHi", 56, 8, "u64"),
       ("size", 64, 8, "u64"),
       ("alignment", 72, 8, "u64"),
       ("offset", 80, 8, "u64"),
       ("limit", 88, 8, "u64"),
       ("address", 96, 8, "ptr"),
       ("ctagOffset", 104, 4, "u32"),
       ("hVASpace", 108, 4, "u32"),
       ("internalflags", 112, 4, "u32"),
       ("tag", 116, 4, "u32"),
       ("numaNode", 120, 4, "s32"),
    ),
    _s("NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", 24, 8,
       ("offset", 0, 8, "u64"),
       ("limit", 8, 8, "u64"),
       ("hVASpace", 16, 4, "u32"),
    ),
    _s("NV_HOPPER_USERMODE_A_PARAMS", 2, 1,
       ("bBar1Mapping", 0, 1, "u8"),
       ("bPriv", 1, 1, "u8"),
    ),
    # control parameters (NVOS54_PARAMETERS.params)
    _s("NV2080_CTRL_GPU_GET_GID_INFO_PARAMS", 268, 4,
       ("index", 0, 4, "u32"),
       ("flags", 4, 4, "u32"),
       ("length", 8, 4, "u32"),
       ("data", 12, 256, "u8", 256),
    ),
    _s("NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS", 132, 4,
       ("gpuNameStringFlags", 0, 4, "u32"),
       ("gpuNameString", 4, 128, "union"),
    ),
    _s("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS", 1032, 4,
       ("driverVersionBuffer", 0, 256, "char", 256),
       ("versionBuffer", 256, 256, "char", 256),
       ("driverBranch", 512, 256, "char", 256),
       ("titleBuffer", 768, 256, "char", 256),
       ("changelistNumber", 1024, 4, "u32"),
       ("officialChangelistNumber", 1028, 4, "u32"),
    ),
    _s("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS", 16, 8,
       ("numClasses", 0, 4, "u32"),
       ("classList", 8, 8, "ptr"),
    ),
    _s("NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS", 804, 4,
       ("numClasses", 0, 4, "u32"),
       ("classList", 4, 800, "u32", 200),
    ),
    _s("NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS", 32, 4,
       ("gpuId", 0, 4, "u32"),
       ("gpuFlags", 4, 4, "u32"),
       ("deviceInstance", 8, 4, "u32"),
       ("subDeviceInstance", 12, 4, "u32"),
       ("sliStatus", 16, 4, "u32"),
       ("boardId", 20, 4, "u32"),
       ("gpuInstance", 24, 4, "u32"),
       ("numaId", 28, 4, "s32"),
    ),
    _s("NV2080_CTRL_GR_GET_INFO_PARAMS", 32, 8,
       ("grInfoListSize", 0, 4, "u32"),
       ("grInfoList", 8, 8, "ptr"),
       ("grRouteInfo", 16, 16, "struct:NV2080_CTRL_GR_ROUTE_INFO"),
    ),
    _s("NV2080_CTRL_GR_GET_INFO_V2_PARAMS", 488, 8,
       ("grInfoListSize", 0, 4, "u32"),
       ("grInfoList", 4, 464, "struct:NV0080_CTRL_GR_INFO", 58),
       ("grRouteInfo", 472, 16, "struct:NV0080_CTRL_GR_ROUTE_INFO"),
    ),
    _s("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS", 4, 4,
       ("workSubmitToken", 0, 4, "u32"),
    ),
    _s("NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS", 3, 1,
       ("bEnable", 0, 1, "u8"),
       ("bSkipSubmit", 1, 1, "u8"),
       ("bSkipEnable", 2, 1, "u8"),
    ),
    _s("NV2080_CTRL_FB_GET_INFO_V2_PARAMS", 1028, 4,
       ("fbInfoListSize", 0, 4, "u32"),
       ("fbInfoList", 4, 1024, "struct:NV2080_CTRL_FB_INFO", 128),
    ),
    # USERD, the channel control page: clc56f.h Nvc56fControl, clc86f.h Nvc86fControl
    _s("AmpereAControlGPFifo", 512, 4,
       ("Ignored00", 0, 64, "u32", 16),
       ("Put", 64, 4, "u32"),
       ("Get", 68, 4, "u32"),
       ("Reference", 72, 4, "u32"),
       ("PutHi", 76, 4, "u32"),
       ("Ignored01", 80, 8, "u32", 2),
       ("TopLevelGet", 88, 4, "u32"),
       ("TopLevelGetHi", 92, 4, "u32"),
       ("GetHi", 96, 4, "u32"),
       ("Ignored02", 100, 28, "u32", 7),
       ("Ignored03", 128, 4, "u32"),
       ("Ignored04", 132, 4, "u32"),
       ("GPGet", 136, 4, "u32"),
       ("GPPut", 140, 4, "u32"),
       ("Ignored05", 144, 368, "u32", 92),
    ),
    _s("HopperAControlGPFifo", 512, 4,
       ("Ignored00", 0, 64, "u32", 16),
       ("Put", 64, 4, "u32"),
       ("Get", 68, 4, "u32"),
       ("Reference", 72, 4, "u32"),
       ("PutHi", 76, 4, "u32"),
       ("Ignored01", 80, 8, "u32", 2),
       ("TopLevelGet", 88, 4, "u32"),
       ("TopLevelGetHi", 92, 4, "u32"),
       ("GetHi", 96, 4, "u32"),
       ("Ignored02", 100, 28, "u32", 7),
       ("Ignored03", 128, 4, "u32"),
       ("Ignored04", 132, 4, "u32"),
       ("GPGet", 136, 4, "u32"),
       ("GPPut", 140, 4, "u32"),
       ("Ignored05", 144, 368, "u32", 92),
    ),
    # structures that fields above refer to
    _s("NV0080_CTRL_GR_INFO", 8, 4,
       ("index", 0, 4, "u32"),
       ("data", 4, 4, "u32"),
    ),
    _s("NV0080_CTRL_GR_ROUTE_INFO", 16, 8,
       ("flags", 0, 4, "u32"),
       ("route", 8, 8, "u64"),
    ),
    _s("NV2080_CTRL_FB_INFO", 8, 4,
       ("index", 0, 4, "u32"),
       ("data", 4, 4, "u32"),
    ),
    _s("NV2080_CTRL_GR_ROUTE_INFO", 16, 8,
       ("flags", 0, 4, "u32"),
       ("route", 8, 8, "u64"),
    ),
    _s("NV_MEMORY_DESC_PARAMS", 24, 8,
       ("base", 0, 8, "u64"),
       ("size", 8, 8, "u64"),
       ("addressSpace", 16, 4, "u32"),
       ("cacheAttrib", 20, 4, "u32"),
    ),
    _s("NvProcessorUuid", 16, 1,
       ("uuid", 0, 16, "u8", 16),
    ),
    _s("UvmGpuMappingAttributes", 36, 4,
       ("gpuUuid", 0, 16, "struct:NvProcessorUuid"),
       ("gpuMappingType", 16, 4, "u32"),
       ("gpuCachingType", 20, 4, "u32"),
       ("gpuFormatType", 24, 4, "u32"),
       ("gpuElementBits", 28, 4, "u32"),
       ("gpuCompressionType", 32, 4, "u32"),
    ),
    _s("nv_pci_info_t", 12, 4,
       ("domain", 0, 4, "u32"),
       ("bus", 4, 1, "u8"),
       ("slot", 5, 1, "u8"),
       ("function", 6, 1, "u8"),
       ("vendor_id", 8, 2, "u16"),
       ("device_id", 10, 2, "u16"),
    ),
))

# ---------------------------------------------------------------------------------------
# nvidia.ko escapes (ioctl nr) and the full command numbers.
# ---------------------------------------------------------------------------------------

# Every NV_ESC_* of nv-ioctl-numbers.h (200 + n) and nv_escape.h (RM API escapes).
NV_ESCAPES: Mapping[str, int] = {
    "NV_ESC_RM_ALLOC_MEMORY": 0x27,
    "NV_ESC_RM_ALLOC_OBJECT": 0x28,
    "NV_ESC_RM_FREE": 0x29,
    "NV_ESC_RM_CONTROL": 0x2a,
    "NV_ESC_RM_ALLOC": 0x2b,
    "NV_ESC_RM_CONFIG_GET": 0x32,
    "NV_ESC_RM_CONFIG_SET": 0x33,
    "NV_ESC_RM_DUP_OBJECT": 0x34,
    "NV_ESC_RM_SHARE": 0x35,
    "NV_ESC_RM_CONFIG_GET_EX": 0x37,
    "NV_ESC_RM_CONFIG_SET_EX": 0x38,
    "NV_ESC_RM_I2C_ACCESS": 0x39,
    "NV_ESC_RM_IDLE_CHANNELS": 0x41,
    "NV_ESC_RM_VID_HEAP_CONTROL": 0x4a,
    "NV_ESC_RM_ACCESS_REGISTRY": 0x4d,
    "NV_ESC_RM_MAP_MEMORY": 0x4e,
    "NV_ESC_RM_UNMAP_MEMORY": 0x4f,
    "NV_ESC_RM_GET_EVENT_DATA": 0x52,
    "NV_ESC_RM_ALLOC_CONTEXT_DMA2": 0x54,
    "NV_ESC_RM_ADD_VBLANK_CALLBACK": 0x56,
    "NV_ESC_RM_MAP_MEMORY_DMA": 0x57,
    "NV_ESC_RM_UNMAP_MEMORY_DMA": 0x58,
    "NV_ESC_RM_BIND_CONTEXT_DMA": 0x59,
    "NV_ESC_RM_EXPORT_OBJECT_TO_FD": 0x5c,
    "NV_ESC_RM_IMPORT_OBJECT_FROM_FD": 0x5d,
    "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO": 0x5e,
    "NV_ESC_RM_LOCKLESS_DIAGNOSTIC": 0x5f,
    "NV_ESC_CARD_INFO": 200,
    "NV_ESC_REGISTER_FD": 201,
    "NV_ESC_ALLOC_OS_EVENT": 206,
    "NV_ESC_FREE_OS_EVENT": 207,
    "NV_ESC_STATUS_CODE": 209,
    "NV_ESC_CHECK_VERSION_STR": 210,
    "NV_ESC_IOCTL_XFER_CMD": 211,
    "NV_ESC_ATTACH_GPUS_TO_FD": 212,
    "NV_ESC_QUERY_DEVICE_INTR": 213,
    "NV_ESC_SYS_PARAMS": 214,
    "NV_ESC_EXPORT_TO_DMABUF_FD": 217,
    "NV_ESC_WAIT_OPEN_COMPLETE": 218,
}


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


def nv_ioctl_cmd(escape: str, struct: str, count: int = 1) -> int:
    return NvIoctl(escape, struct, count).cmd


NV_IOCTLS: Mapping[str, NvIoctl] = {i.key: i for i in (
    NvIoctl("NV_ESC_CARD_INFO", "nv_ioctl_card_info_t", 32),  # NV_MAX_DEVICES entries
    NvIoctl("NV_ESC_REGISTER_FD", "nv_ioctl_register_fd_t"),
    NvIoctl("NV_ESC_CHECK_VERSION_STR", "nv_ioctl_rm_api_version_t"),
    NvIoctl("NV_ESC_IOCTL_XFER_CMD", "nv_ioctl_xfer_t"),
    NvIoctl("NV_ESC_WAIT_OPEN_COMPLETE", "nv_ioctl_wait_open_complete_t"),
    NvIoctl("NV_ESC_RM_ALLOC_MEMORY", "nv_ioctl_nvos02_parameters_with_fd"),
    NvIoctl("NV_ESC_RM_FREE", "NVOS00_PARAMETERS"),
    NvIoctl("NV_ESC_RM_CONTROL", "NVOS54_PARAMETERS"),
    NvIoctl("NV_ESC_RM_ALLOC", "NVOS21_PARAMETERS"),
    NvIoctl("NV_ESC_RM_ALLOC", "NVOS64_PARAMETERS"),
    NvIoctl("NV_ESC_RM_VID_HEAP_CONTROL", "NVOS32_PARAMETERS"),
    NvIoctl("NV_ESC_RM_MAP_MEMORY", "nv_ioctl_nvos33_parameters_with_fd"),
    NvIoctl("NV_ESC_RM_UNMAP_MEMORY", "NVOS34_PARAMETERS"),
    NvIoctl("NV_ESC_RM_MAP_MEMORY_DMA", "NVOS46_PARAMETERS"),  # 64 bytes since flags2/kindOverride
    NvIoctl("NV_ESC_RM_UNMAP_MEMORY_DMA", "NVOS47_PARAMETERS"),
)}


# ---------------------------------------------------------------------------------------
# nvidia-uvm.ko: on Linux the command is the bare number (UVM_IOCTL_BASE(i) = i), not an
# _IOC encoding.  params: the structure passed (None: no argument).
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UvmIoctl:
    cmd: int
    params: str | None


UVM_IOCTLS: Mapping[str, UvmIoctl] = {
    "UVM_INITIALIZE": UvmIoctl(0x30000001, 'UVM_INITIALIZE_PARAMS'),
    "UVM_DEINITIALIZE": UvmIoctl(0x30000002, None),
    "UVM_MM_INITIALIZE": UvmIoctl(75, 'UVM_MM_INITIALIZE_PARAMS'),
    "UVM_REGISTER_GPU": UvmIoctl(37, 'UVM_REGISTER_GPU_PARAMS'),
    "UVM_UNREGISTER_GPU": UvmIoctl(38, 'UVM_UNREGISTER_GPU_PARAMS'),
    "UVM_REGISTER_GPU_VASPACE": UvmIoctl(25, 'UVM_REGISTER_GPU_VASPACE_PARAMS'),
    "UVM_UNREGISTER_GPU_VASPACE": UvmIoctl(26, 'UVM_UNREGISTER_GPU_VASPACE_PARAMS'),
    "UVM_REGISTER_CHANNEL": UvmIoctl(27, 'UVM_REGISTER_CHANNEL_PARAMS'),
    "UVM_UNREGISTER_CHANNEL": UvmIoctl(28, 'UVM_UNREGISTER_CHANNEL_PARAMS'),
    "UVM_CREATE_EXTERNAL_RANGE": UvmIoctl(73, 'UVM_CREATE_EXTERNAL_RANGE_PARAMS'),
    "UVM_MAP_EXTERNAL_ALLOCATION": UvmIoctl(33, 'UVM_MAP_EXTERNAL_ALLOCATION_PARAMS'),
    "UVM_FREE": UvmIoctl(34, 'UVM_FREE_PARAMS'),
}


# ---------------------------------------------------------------------------------------
# RM controls (NV_ESC_RM_CONTROL, NVOS54_PARAMETERS.cmd) and their parameter structs.
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CtrlCmd:
    cmd: int
    params: str


CTRL_CMDS: Mapping[str, CtrlCmd] = {
    "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2": CtrlCmd(0x13e, 'NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS'),
    "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2": CtrlCmd(0x205, 'NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS'),
    "NV0080_CTRL_CMD_GPU_GET_CLASSLIST": CtrlCmd(0x800201, 'NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS'),
    "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2": CtrlCmd(0x800292, 'NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS'),
    "NV2080_CTRL_CMD_GPU_GET_NAME_STRING": CtrlCmd(0x20800110, 'NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS'),
    "NV2080_CTRL_CMD_GPU_GET_GID_INFO": CtrlCmd(0x2080014a, 'NV2080_CTRL_GPU_GET_GID_INFO_PARAMS'),
    "NV2080_CTRL_CMD_GR_GET_INFO": CtrlCmd(0x20801201, 'NV2080_CTRL_GR_GET_INFO_PARAMS'),
    "NV2080_CTRL_CMD_GR_GET_INFO_V2": CtrlCmd(0x20801228, 'NV2080_CTRL_GR_GET_INFO_V2_PARAMS'),
    "NV2080_CTRL_CMD_FB_GET_INFO_V2": CtrlCmd(0x20801303, 'NV2080_CTRL_FB_GET_INFO_V2_PARAMS'),
    "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN": CtrlCmd(0xc36f0108, 'NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS'),
    "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE": CtrlCmd(0xa06c0101, 'NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS'),
}


# ---------------------------------------------------------------------------------------
# Classes (hClass of NV_ESC_RM_ALLOC).  NV01_ROOT_CLIENT is defined in nvos.h; the others
# in class/clXXXX.h.  NV01_MEMORY_LOCAL_USER and NV1_MEMORY_USER are one class (0x40,
# video memory); NV01_MEMORY_SYSTEM (0x3e) is host memory.
# ---------------------------------------------------------------------------------------

CLASSES: Mapping[str, int] = {
    "NV01_ROOT": 0x0000,
    "NV01_ROOT_CLIENT": 0x0041,
    "NV01_DEVICE_0": 0x0080,
    "NV20_SUBDEVICE_0": 0x2080,
    "NV01_MEMORY_SYSTEM": 0x003e,
    "NV01_MEMORY_LOCAL_USER": 0x0040,
    "NV1_MEMORY_USER": 0x0040,
    "NV01_MEMORY_VIRTUAL": 0x0070,
    "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR": 0x0071,
    "FERMI_VASPACE_A": 0x90f1,
    "FERMI_CONTEXT_SHARE_A": 0x9067,
    "KEPLER_CHANNEL_GROUP_A": 0xa06c,
    "VOLTA_USERMODE_A": 0xc361,
    "AMPERE_USERMODE_A": 0xc561,
    "HOPPER_USERMODE_A": 0xc661,
    "AMPERE_CHANNEL_GPFIFO_A": 0xc56f,
    "HOPPER_CHANNEL_GPFIFO_A": 0xc86f,
    "AMPERE_COMPUTE_B": 0xc7c0,
    "HOPPER_COMPUTE_A": 0xcbc0,
    "AMPERE_DMA_COPY_B": 0xc7b5,
    "HOPPER_DMA_COPY_A": 0xc8b5,
}


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

METHODS: Mapping[str, Mapping[str, int]] = {
    "NVC7C0": {
        "SET_OBJECT": 0x0000,
        "NO_OPERATION": 0x0100,
        "WAIT_FOR_IDLE": 0x0110,
        "SET_REPORT_SEMAPHORE_PAYLOAD_LOWER": 0x0158,
        "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER": 0x015c,
        "SET_REPORT_SEMAPHORE_ADDRESS_LOWER": 0x0160,
        "SET_REPORT_SEMAPHORE_ADDRESS_UPPER": 0x0164,
        "LINE_LENGTH_IN": 0x0180,
        "LINE_COUNT": 0x0184,
        "OFFSET_OUT_UPPER": 0x0188,
        "OFFSET_OUT": 0x018c,
        "LAUNCH_DMA": 0x01b0,
        "LOAD_INLINE_DATA": 0x01b4,
        "INVALIDATE_SHADER_CACHES": 0x021c,
        "SET_QMD_VERSION": 0x0288,
        "INVALIDATE_SKED_CACHES": 0x0298,
        "SET_SHADER_SHARED_MEMORY_WINDOW_A": 0x02a0,
        "SET_SHADER_SHARED_MEMORY_WINDOW_B": 0x02a4,
        "SET_CWD_SLOT_COUNT": 0x02b0,
        "SEND_PCAS_A": 0x02b4,
        "SEND_PCAS_B": 0x02b8,
        "SEND_SIGNALING_PCAS_B": 0x02bc,
        "SEND_SIGNALING_PCAS2_B": 0x02c0,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A": 0x02e4,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B": 0x02e8,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C": 0x02ec,
        "SET_SPA_VERSION": 0x0310,
        "SET_INLINE_QMD_ADDRESS_A": 0x0318,
        "SET_INLINE_QMD_ADDRESS_B": 0x031c,
        "SET_SHADER_LOCAL_MEMORY_A": 0x0790,
        "SET_SHADER_LOCAL_MEMORY_B": 0x0794,
        "SET_SHADER_LOCAL_MEMORY_WINDOW_A": 0x07b0,
        "SET_SHADER_LOCAL_MEMORY_WINDOW_B": 0x07b4,
        "SET_SHADER_CACHE_CONTROL": 0x0d94,
        "INVALIDATE_SHADER_CACHES_NO_WFI": 0x1698,
        "PIPE_NOP": 0x1a2c,
        "SET_REPORT_SEMAPHORE_A": 0x1b00,
        "SET_REPORT_SEMAPHORE_B": 0x1b04,
        "SET_REPORT_SEMAPHORE_C": 0x1b08,
        "SET_REPORT_SEMAPHORE_D": 0x1b0c,
    },
    "NVCBC0": {
        "SET_OBJECT": 0x0000,
        "NO_OPERATION": 0x0100,
        "WAIT_FOR_IDLE": 0x0110,
        "SET_REPORT_SEMAPHORE_PAYLOAD_LOWER": 0x0158,
        "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER": 0x015c,
        "SET_REPORT_SEMAPHORE_ADDRESS_LOWER": 0x0160,
        "SET_REPORT_SEMAPHORE_ADDRESS_UPPER": 0x0164,
        "REPORT_SEMAPHORE_EXECUTE": 0x0168,
        "LINE_LENGTH_IN": 0x0180,
        "LINE_COUNT": 0x0184,
        "OFFSET_OUT_UPPER": 0x0188,
        "OFFSET_OUT": 0x018c,
        "LAUNCH_DMA": 0x01b0,
        "LOAD_INLINE_DATA": 0x01b4,
        "INVALIDATE_SHADER_CACHES": 0x021c,
        "SET_QMD_VERSION": 0x0288,
        "INVALIDATE_SKED_CACHES": 0x0298,
        "SET_SHADER_SHARED_MEMORY_WINDOW_A": 0x02a0,
        "SET_SHADER_SHARED_MEMORY_WINDOW_B": 0x02a4,
        "SET_CWD_SLOT_COUNT": 0x02b0,
        "SEND_PCAS_A": 0x02b4,
        "SEND_PCAS_B": 0x02b8,
        "SEND_SIGNALING_PCAS_B": 0x02bc,
        "SEND_SIGNALING_PCAS2_B": 0x02c0,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A": 0x02e4,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B": 0x02e8,
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C": 0x02ec,
        "SET_SPA_VERSION": 0x0310,
        "SET_INLINE_QMD_ADDRESS_A": 0x0318,
        "SET_INLINE_QMD_ADDRESS_B": 0x031c,
        "SET_SHADER_LOCAL_MEMORY_A": 0x0790,
        "SET_SHADER_LOCAL_MEMORY_B": 0x0794,
        "SET_SHADER_LOCAL_MEMORY_WINDOW_A": 0x07b0,
        "SET_SHADER_LOCAL_MEMORY_WINDOW_B": 0x07b4,
        "SET_SHADER_CACHE_CONTROL": 0x0d94,
        "INVALIDATE_SHADER_CACHES_NO_WFI": 0x1698,
        "PIPE_NOP": 0x1a2c,
        "SET_REPORT_SEMAPHORE_A": 0x1b00,
        "SET_REPORT_SEMAPHORE_B": 0x1b04,
        "SET_REPORT_SEMAPHORE_C": 0x1b08,
        "SET_REPORT_SEMAPHORE_D": 0x1b0c,
    },
    "NVC56F": {
        "SET_OBJECT": 0x0000,
        "NOP": 0x0008,
        "SEMAPHOREA": 0x0010,
        "SEMAPHOREB": 0x0014,
        "SEMAPHOREC": 0x0018,
        "SEMAPHORED": 0x001c,
        "NON_STALL_INTERRUPT": 0x0020,
        "MEM_OP_A": 0x0028,
        "MEM_OP_B": 0x002c,
        "MEM_OP_C": 0x0030,
        "MEM_OP_D": 0x0034,
        "SET_REFERENCE": 0x0050,
        "SEM_ADDR_LO": 0x005c,
        "SEM_ADDR_HI": 0x0060,
        "SEM_PAYLOAD_LO": 0x0064,
        "SEM_PAYLOAD_HI": 0x0068,
        "SEM_EXECUTE": 0x006c,
        "WFI": 0x0078,
    },
    "NVC86F": {
        "SET_OBJECT": 0x0000,
        "MEM_OP_A": 0x0028,
        "MEM_OP_B": 0x002c,
        "MEM_OP_C": 0x0030,
        "MEM_OP_D": 0x0034,
        "SEM_ADDR_LO": 0x005c,
        "SEM_ADDR_HI": 0x0060,
        "SEM_PAYLOAD_LO": 0x0064,
        "SEM_PAYLOAD_HI": 0x0068,
        "SEM_EXECUTE": 0x006c,
        "WFI": 0x0078,
    },
    "NVC7B5": {
        "NOP": 0x0100,
        "SET_SEMAPHORE_A": 0x0240,
        "SET_SEMAPHORE_B": 0x0244,
        "SET_SEMAPHORE_PAYLOAD": 0x0248,
        "SET_SEMAPHORE_PAYLOAD_UPPER": 0x024c,
        "LAUNCH_DMA": 0x0300,
        "OFFSET_IN_UPPER": 0x0400,
        "OFFSET_IN_LOWER": 0x0404,
        "OFFSET_OUT_UPPER": 0x0408,
        "OFFSET_OUT_LOWER": 0x040c,
        "PITCH_IN": 0x0410,
        "PITCH_OUT": 0x0414,
        "LINE_LENGTH_IN": 0x0418,
        "LINE_COUNT": 0x041c,
    },
    "NVC8B5": {
        "SET_SEMAPHORE_A": 0x0240,
        "SET_SEMAPHORE_B": 0x0244,
        "SET_SEMAPHORE_PAYLOAD": 0x0248,
        "LAUNCH_DMA": 0x0300,
        "OFFSET_IN_UPPER": 0x0400,
        "OFFSET_IN_LOWER": 0x0404,
        "OFFSET_OUT_UPPER": 0x0408,
        "OFFSET_OUT_LOWER": 0x040c,
        "LINE_LENGTH_IN": 0x0418,
    },
    "NVC361": {
        "TIME_0": 0x0080,
        "TIME_1": 0x0084,
        "NOTIFY_CHANNEL_PENDING": 0x0090,
    },
}

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

CONSTANTS: Mapping[str, int] = {
    "NV_IOCTL_MAGIC": 70,
    "NV_IOCTL_BASE": 200,
    "NV_RM_API_VERSION_STRING_LENGTH": 64,
    "NV_RM_API_VERSION_CMD_STRICT": 0,
    "NV_RM_API_VERSION_CMD_RELAXED": 49,
    "NV_RM_API_VERSION_CMD_QUERY": 50,
    "NV_RM_API_VERSION_REPLY_UNRECOGNIZED": 0,
    "NV_RM_API_VERSION_REPLY_RECOGNIZED": 1,
    "NV_MAX_DEVICES": 32,
    "NV_MAX_SUBDEVICES": 8,
    "UVM_MAX_GPUS": 0x100,
    "NVOS32_TYPE_IMAGE": 0,
    "NVOS32_TYPE_NOTIFIER": 13,
    "NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT": 1,
    "NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE": 16,
    "NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE": 0x100,
    "NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED": 0x4000,
    "NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED": 0x8000,
    "NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM": 0x10000,
    "NVOS32_ALLOC_FLAGS_VIRTUAL": 0x80000,
    "NVOS32_ATTR_PAGE_SIZE_DEFAULT": 0,
    "NVOS32_ATTR_PAGE_SIZE_4KB": 1,
    "NVOS32_ATTR_PAGE_SIZE_BIG": 2,
    "NVOS32_ATTR_PAGE_SIZE_HUGE": 3,
    "NVOS32_ATTR_LOCATION_VIDMEM": 0,
    "NVOS32_ATTR_LOCATION_PCI": 1,
    "NVOS32_ATTR_LOCATION_ANY": 3,
    "NVOS32_ATTR_PHYSICALITY_DEFAULT": 0,
    "NVOS32_ATTR_PHYSICALITY_NONCONTIGUOUS": 1,
    "NVOS32_ATTR_PHYSICALITY_CONTIGUOUS": 2,
    "NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS": 3,
    "NVOS32_ATTR_COHERENCY_UNCACHED": 0,
    "NVOS32_ATTR_COHERENCY_CACHED": 1,
    "NVOS32_ATTR_COHERENCY_WRITE_COMBINE": 2,
    "NVOS32_ATTR_COHERENCY_WRITE_BACK": 5,
    "NVOS32_ATTR2_ZBC_DEFAULT": 0,
    "NVOS32_ATTR2_ZBC_PREFER_NO_ZBC": 1,
    "NVOS32_ATTR2_GPU_CACHEABLE_DEFAULT": 0,
    "NVOS32_ATTR2_GPU_CACHEABLE_YES": 1,
    "NVOS32_ATTR2_GPU_CACHEABLE_NO": 2,
    "NVOS32_ATTR2_PAGE_SIZE_HUGE_DEFAULT": 0,
    "NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB": 1,
    "NVOS02_FLAGS_PHYSICALITY_CONTIGUOUS": 0,
    "NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS": 1,
    "NVOS02_FLAGS_COHERENCY_UNCACHED": 0,
    "NVOS02_FLAGS_COHERENCY_CACHED": 1,
    "NVOS02_FLAGS_COHERENCY_WRITE_COMBINE": 2,
    "NVOS02_FLAGS_MAPPING_DEFAULT": 0,
    "NVOS02_FLAGS_MAPPING_NO_MAP": 1,
    "NVOS02_FLAGS_MAPPING_NEVER_MAP": 2,
    "NVOS33_FLAGS_ACCESS_READ_WRITE": 0,
    "NVOS33_FLAGS_ACCESS_READ_ONLY": 1,
    "NVOS33_FLAGS_ACCESS_WRITE_ONLY": 2,
    "NVOS33_FLAGS_MAPPING_DEFAULT": 0,
    "NVOS33_FLAGS_MAPPING_DIRECT": 1,
    "NVOS33_FLAGS_MAPPING_REFLECTED": 2,
    "NVOS33_FLAGS_CACHING_TYPE_CACHED": 0,
    "NVOS33_FLAGS_CACHING_TYPE_UNCACHED": 1,
    "NVOS33_FLAGS_CACHING_TYPE_WRITECOMBINED": 2,
    "NVOS33_FLAGS_CACHING_TYPE_WRITEBACK": 5,
    "NVOS33_FLAGS_CACHING_TYPE_DEFAULT": 6,
    "NVOS46_FLAGS_ACCESS_READ_WRITE": 0,
    "NVOS46_FLAGS_ACCESS_READ_ONLY": 1,
    "NVOS46_FLAGS_PAGE_KIND_PHYSICAL": 0,
    "NVOS46_FLAGS_PAGE_KIND_VIRTUAL": 1,
    "NVOS46_FLAGS_CACHE_SNOOP_DISABLE": 0,
    "NVOS46_FLAGS_CACHE_SNOOP_ENABLE": 1,
    "NVOS46_FLAGS_PAGE_SIZE_DEFAULT": 0,
    "NVOS46_FLAGS_PAGE_SIZE_4KB": 1,
    "NVOS46_FLAGS_PAGE_SIZE_BIG": 2,
    "NVOS46_FLAGS_PAGE_SIZE_HUGE": 4,
    "NVOS46_FLAGS_DMA_OFFSET_FIXED_FALSE": 0,
    "NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE": 1,
    "NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES": 0,
    "NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE": 1,
    "NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES": 2,
    "NV_VASPACE_ALLOCATION_FLAGS_NONE": 0,
    "NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED": 8,
    "NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING": 64,
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC": 0,
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC": 1,
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED": 2,
    "NV_MEMORY_VIRTUAL_SYSMEM_DYNAMIC_HVASPACE": 0xffffffff,
    "NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1": 3,
    "CC_CHAN_ALLOC_IV_SIZE_DWORD": 3,
    "CC_CHAN_ALLOC_NONCE_SIZE_DWORD": 8,
    "NV2080_ENGINE_TYPE_GRAPHICS": 1,
    "NV2080_ENGINE_TYPE_COPY0": 9,
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII": 0,
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY": 2,
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1": 0,
    "NV2080_GPU_MAX_GID_LENGTH": 0x100,
    "NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH": 16,
    "NV2080_GPU_MAX_NAME_STRING_LENGTH": 64,
    "NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII": 0,
    "NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE": 200,
    "NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE": 0x100,
    "NV2080_CTRL_GR_INFO_INDEX_SM_VERSION": 12,
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS": 20,
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC": 23,
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC": 32,
    "NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM": 13,
    "NV2080_CTRL_GR_INFO_MAX_SIZE": 58,
    "NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE": 7,
    "NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE": 8,
    "NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE": 9,
    "NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE": 22,
    "NV2080_CTRL_FB_INFO_INDEX_L2CACHE_SIZE": 27,
    "NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE": 32,
    "NV2080_CTRL_FB_INFO_MAX_LIST_SIZE": 128,
    "UvmGpuMappingTypeDefault": 0,
    "UvmGpuMappingTypeReadWriteAtomic": 1,
    "UvmGpuMappingTypeReadWrite": 2,
    "UvmGpuMappingTypeReadOnly": 3,
    "UvmGpuCachingTypeDefault": 0,
    "UvmGpuCachingTypeForceUncached": 1,
    "UvmGpuCachingTypeForceCached": 2,
    "NVC361_NV_USERMODE__SIZE": 0x10000,
    "NVC56F_SEM_EXECUTE_OPERATION_ACQUIRE": 0,
    "NVC56F_SEM_EXECUTE_OPERATION_RELEASE": 1,
    "NVC56F_SEM_EXECUTE_OPERATION_ACQ_STRICT_GEQ": 2,
    "NVC56F_SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ": 3,
    "NVC56F_SEM_EXECUTE_OPERATION_REDUCTION": 6,
    "NVC56F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN": 1,
    "NVC56F_SEM_EXECUTE_RELEASE_WFI_DIS": 0,
    "NVC56F_SEM_EXECUTE_RELEASE_WFI_EN": 1,
    "NVC56F_SEM_EXECUTE_PAYLOAD_SIZE_32BIT": 0,
    "NVC56F_SEM_EXECUTE_PAYLOAD_SIZE_64BIT": 1,
    "NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP_DIS": 0,
    "NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP_EN": 1,
    "NVC86F_SEM_EXECUTE_OPERATION_ACQUIRE": 0,
    "NVC86F_SEM_EXECUTE_OPERATION_RELEASE": 1,
    "NVC86F_SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ": 3,
    "NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN": 1,
    "NVC86F_SEM_EXECUTE_RELEASE_WFI_DIS": 0,
    "NVC86F_SEM_EXECUTE_PAYLOAD_SIZE_32BIT": 0,
    "NVC86F_SEM_EXECUTE_RELEASE_TIMESTAMP_DIS": 0,
    "NVC86F_SEM_EXECUTE_RELEASE_TIMESTAMP_EN": 1,
    "NVC56F_GP_ENTRY__SIZE": 8,
    "NVC86F_GP_ENTRY__SIZE": 8,
    "NVC56F_GP_ENTRY0_FETCH_UNCONDITIONAL": 0,
    "NVC56F_GP_ENTRY0_FETCH_CONDITIONAL": 1,
    "NVC56F_GP_ENTRY1_LEVEL_MAIN": 0,
    "NVC56F_GP_ENTRY1_LEVEL_SUBROUTINE": 1,
    "NVC56F_GP_ENTRY1_SYNC_PROCEED": 0,
    "NVC56F_GP_ENTRY1_SYNC_WAIT": 1,
    "NVC56F_GP_ENTRY1_OPCODE_NOP": 0,
    "NVC86F_GP_ENTRY0_FETCH_UNCONDITIONAL": 0,
    "NVC86F_GP_ENTRY0_FETCH_CONDITIONAL": 1,
    "NVC86F_GP_ENTRY1_LEVEL_MAIN": 0,
    "NVC86F_GP_ENTRY1_LEVEL_SUBROUTINE": 1,
    "NVC86F_GP_ENTRY1_SYNC_PROCEED": 0,
    "NVC86F_GP_ENTRY1_SYNC_WAIT": 1,
    "NVC86F_GP_ENTRY1_OPCODE_NOP": 0,
    "NVC56F_DMA_SEC_OP_INC_METHOD": 1,
    "NVC56F_DMA_SEC_OP_NON_INC_METHOD": 3,
    "NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD": 4,
    "NVC56F_DMA_SEC_OP_ONE_INC": 5,
    "NVC56F_DMA_INCR_OPCODE_VALUE": 1,
    "NVC56F_DMA_NONINCR_OPCODE_VALUE": 3,
    "NVC56F_DMA_ONEINCR_OPCODE_VALUE": 5,
    "NVC56F_DMA_IMMD_OPCODE_VALUE": 4,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_NOP": 0,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE": 1,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_SCHEDULE": 2,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_COPY_SCHEDULE": 3,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH": 8,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE": 9,
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE": 10,
    "NVC7C0_INVALIDATE_SHADER_CACHES_INSTRUCTION_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_DATA_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_CONSTANT_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_LOCKS_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_FLUSH_DATA_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA_TRUE": 1,
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT_TRUE": 1,
    "NVC7C0_LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH": 1,
    "NVC7C0_LAUNCH_DMA_COMPLETION_TYPE_FLUSH_DISABLE": 0,
    "NVC7C0_LAUNCH_DMA_COMPLETION_TYPE_FLUSH_ONLY": 1,
    "NVC7C0_LAUNCH_DMA_COMPLETION_TYPE_RELEASE_SEMAPHORE": 2,
    "NVC7C0_SET_REPORT_SEMAPHORE_D_OPERATION_RELEASE": 0,
    "NVC7C0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_FOUR_WORDS": 0,
    "NVC7C0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_ONE_WORD": 1,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_NOP": 0,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE": 1,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_SCHEDULE": 2,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_COPY_SCHEDULE": 3,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH": 8,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE": 9,
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE": 10,
    "NVCBC0_INVALIDATE_SHADER_CACHES_INSTRUCTION_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_DATA_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_CONSTANT_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_LOCKS_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_FLUSH_DATA_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA_TRUE": 1,
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT_TRUE": 1,
    "NVCBC0_LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH": 1,
    "NVCBC0_LAUNCH_DMA_COMPLETION_TYPE_FLUSH_DISABLE": 0,
    "NVCBC0_LAUNCH_DMA_COMPLETION_TYPE_FLUSH_ONLY": 1,
    "NVCBC0_LAUNCH_DMA_COMPLETION_TYPE_RELEASE_SEMAPHORE": 2,
    "NVCBC0_SET_REPORT_SEMAPHORE_D_OPERATION_RELEASE": 0,
    "NVCBC0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_FOUR_WORDS": 0,
    "NVCBC0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_ONE_WORD": 1,
    "NVC7B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NONE": 0,
    "NVC7B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_PIPELINED": 1,
    "NVC7B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED": 2,
    "NVC7B5_LAUNCH_DMA_FLUSH_ENABLE_TRUE": 1,
    "NVC7B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE": 1,
    "NVC7B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH": 1,
    "NVC7B5_LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH": 1,
    "NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NONE": 0,
    "NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_PIPELINED": 1,
    "NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED": 2,
    "NVC8B5_LAUNCH_DMA_FLUSH_ENABLE_TRUE": 1,
    "NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE": 1,
    "NVC8B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH": 1,
    "NVC8B5_LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH": 1,
}

BITFIELDS: Mapping[str, tuple[int, int]] = {
    "NVOS32_ATTR_PAGE_SIZE": (24, 23),
    "NVOS32_ATTR_LOCATION": (26, 25),
    "NVOS32_ATTR_PHYSICALITY": (28, 27),
    "NVOS32_ATTR_COHERENCY": (31, 29),
    "NVOS32_ATTR2_ZBC": (1, 0),
    "NVOS32_ATTR2_GPU_CACHEABLE": (3, 2),
    "NVOS32_ATTR2_PAGE_SIZE_HUGE": (21, 20),
    "NVOS02_FLAGS_PHYSICALITY": (7, 4),
    "NVOS02_FLAGS_COHERENCY": (15, 12),
    "NVOS02_FLAGS_MAPPING": (31, 30),
    "NVOS33_FLAGS_ACCESS": (1, 0),
    "NVOS33_FLAGS_MAPPING": (16, 15),
    "NVOS33_FLAGS_CACHING_TYPE": (25, 23),
    "NVOS46_FLAGS_ACCESS": (1, 0),
    "NVOS46_FLAGS_PAGE_KIND": (3, 3),
    "NVOS46_FLAGS_CACHE_SNOOP": (4, 4),
    "NVOS46_FLAGS_PAGE_SIZE": (11, 8),
    "NVOS46_FLAGS_DMA_OFFSET_FIXED": (15, 15),
    "NVOS46_FLAGS_PAGE_KIND_OVERRIDE": (19, 19),
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT": (1, 0),
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT": (1, 0),
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE": (2, 2),
    "NVC56F_SEM_ADDR_LO_OFFSET": (31, 2),
    "NVC56F_SEM_ADDR_HI_OFFSET": (7, 0),
    "NVC56F_SEM_EXECUTE_OPERATION": (2, 0),
    "NVC56F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG": (12, 12),
    "NVC56F_SEM_EXECUTE_RELEASE_WFI": (20, 20),
    "NVC56F_SEM_EXECUTE_PAYLOAD_SIZE": (24, 24),
    "NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP": (25, 25),
    "NVC56F_GP_ENTRY0_FETCH": (0, 0),
    "NVC56F_GP_ENTRY0_GET": (31, 2),
    "NVC56F_GP_ENTRY0_OPERAND": (31, 0),
    "NVC56F_GP_ENTRY1_GET_HI": (7, 0),
    "NVC56F_GP_ENTRY1_LEVEL": (9, 9),
    "NVC56F_GP_ENTRY1_LENGTH": (30, 10),
    "NVC56F_GP_ENTRY1_SYNC": (31, 31),
    "NVC56F_GP_ENTRY1_OPCODE": (7, 0),
    "NVC86F_SEM_ADDR_LO_OFFSET": (31, 2),
    "NVC86F_SEM_ADDR_HI_OFFSET": (24, 0),
    "NVC86F_SEM_EXECUTE_OPERATION": (2, 0),
    "NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG": (12, 12),
    "NVC86F_SEM_EXECUTE_RELEASE_WFI": (20, 20),
    "NVC86F_SEM_EXECUTE_PAYLOAD_SIZE": (24, 24),
    "NVC86F_SEM_EXECUTE_RELEASE_TIMESTAMP": (25, 25),
    "NVC86F_GP_ENTRY0_FETCH": (0, 0),
    "NVC86F_GP_ENTRY0_GET": (31, 2),
    "NVC86F_GP_ENTRY0_OPERAND": (31, 0),
    "NVC86F_GP_ENTRY1_GET_HI": (7, 0),
    "NVC86F_GP_ENTRY1_LEVEL": (9, 9),
    "NVC86F_GP_ENTRY1_LENGTH": (30, 10),
    "NVC86F_GP_ENTRY1_SYNC": (31, 31),
    "NVC86F_GP_ENTRY1_OPCODE": (7, 0),
    "NVC56F_SEM_EXECUTE_REDUCTION": (30, 27),
    "NVC56F_SEM_EXECUTE_REDUCTION_FORMAT": (31, 31),
    "NVC56F_NON_STALL_INTERRUPT_HANDLE": (31, 0),
    "NVC56F_DMA_METHOD_ADDRESS": (11, 0),
    "NVC56F_DMA_METHOD_SUBCHANNEL": (15, 13),
    "NVC56F_DMA_METHOD_COUNT": (28, 16),
    "NVC56F_DMA_SEC_OP": (31, 29),
    "NVC56F_DMA_TERT_OP": (17, 16),
    "NVC56F_DMA_INCR_ADDRESS": (11, 0),
    "NVC56F_DMA_INCR_SUBCHANNEL": (15, 13),
    "NVC56F_DMA_INCR_COUNT": (28, 16),
    "NVC56F_DMA_INCR_OPCODE": (31, 29),
    "NVC56F_DMA_NONINCR_ADDRESS": (11, 0),
    "NVC56F_DMA_NONINCR_SUBCHANNEL": (15, 13),
    "NVC56F_DMA_NONINCR_COUNT": (28, 16),
    "NVC56F_DMA_NONINCR_OPCODE": (31, 29),
    "NVC56F_DMA_ONEINCR_ADDRESS": (11, 0),
    "NVC56F_DMA_ONEINCR_SUBCHANNEL": (15, 13),
    "NVC56F_DMA_ONEINCR_COUNT": (28, 16),
    "NVC56F_DMA_ONEINCR_OPCODE": (31, 29),
    "NVC56F_DMA_IMMD_ADDRESS": (11, 0),
    "NVC56F_DMA_IMMD_SUBCHANNEL": (15, 13),
    "NVC56F_DMA_IMMD_DATA": (28, 16),
    "NVC56F_DMA_IMMD_OPCODE": (31, 29),
    "NVC7C0_SET_OBJECT_CLASS_ID": (15, 0),
    "NVC7C0_SET_OBJECT_ENGINE_ID": (20, 16),
    "NVC7C0_SEND_PCAS_A_QMD_ADDRESS_SHIFTED8": (31, 0),
    "NVC7C0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION": (3, 0),
    "NVC7C0_INVALIDATE_SHADER_CACHES_INSTRUCTION": (0, 0),
    "NVC7C0_INVALIDATE_SHADER_CACHES_DATA": (4, 4),
    "NVC7C0_INVALIDATE_SHADER_CACHES_CONSTANT": (12, 12),
    "NVC7C0_INVALIDATE_SHADER_CACHES_LOCKS": (1, 1),
    "NVC7C0_INVALIDATE_SHADER_CACHES_FLUSH_DATA": (2, 2),
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION": (0, 0),
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA": (4, 4),
    "NVC7C0_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT": (12, 12),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_A_ADDRESS_UPPER": (16, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_B_ADDRESS_LOWER": (31, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER": (16, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_WINDOW_B_BASE_ADDRESS": (31, 0),
    "NVC7C0_SET_SHADER_SHARED_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER": (16, 0),
    "NVC7C0_SET_SHADER_SHARED_MEMORY_WINDOW_B_BASE_ADDRESS": (31, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A_SIZE_UPPER": (7, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B_SIZE_LOWER": (31, 0),
    "NVC7C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C_MAX_SM_COUNT": (8, 0),
    "NVC7C0_SET_QMD_VERSION_CURRENT": (15, 0),
    "NVC7C0_SET_QMD_VERSION_OLDEST_SUPPORTED": (31, 16),
    "NVC7C0_LAUNCH_DMA_DST_MEMORY_LAYOUT": (0, 0),
    "NVC7C0_LAUNCH_DMA_COMPLETION_TYPE": (5, 4),
    "NVC7C0_SET_REPORT_SEMAPHORE_ADDRESS_UPPER_UPPER": (7, 0),
    "NVC7C0_SET_REPORT_SEMAPHORE_D_OPERATION": (1, 0),
    "NVC7C0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE": (28, 28),
    "NVCBC0_SET_OBJECT_CLASS_ID": (15, 0),
    "NVCBC0_SET_OBJECT_ENGINE_ID": (20, 16),
    "NVCBC0_SEND_PCAS_A_QMD_ADDRESS_SHIFTED8": (31, 0),
    "NVCBC0_SEND_SIGNALING_PCAS2_B_PCAS_ACTION": (3, 0),
    "NVCBC0_INVALIDATE_SHADER_CACHES_INSTRUCTION": (0, 0),
    "NVCBC0_INVALIDATE_SHADER_CACHES_DATA": (4, 4),
    "NVCBC0_INVALIDATE_SHADER_CACHES_CONSTANT": (12, 12),
    "NVCBC0_INVALIDATE_SHADER_CACHES_LOCKS": (1, 1),
    "NVCBC0_INVALIDATE_SHADER_CACHES_FLUSH_DATA": (2, 2),
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION": (0, 0),
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA": (4, 4),
    "NVCBC0_INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT": (12, 12),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_A_ADDRESS_UPPER": (24, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_B_ADDRESS_LOWER": (31, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER": (16, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_B_BASE_ADDRESS": (31, 0),
    "NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER": (16, 0),
    "NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_B_BASE_ADDRESS": (31, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A_SIZE_UPPER": (7, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B_SIZE_LOWER": (31, 0),
    "NVCBC0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C_MAX_SM_COUNT": (8, 0),
    "NVCBC0_SET_QMD_VERSION_CURRENT": (15, 0),
    "NVCBC0_SET_QMD_VERSION_OLDEST_SUPPORTED": (31, 16),
    "NVCBC0_LAUNCH_DMA_DST_MEMORY_LAYOUT": (0, 0),
    "NVCBC0_LAUNCH_DMA_COMPLETION_TYPE": (5, 4),
    "NVCBC0_SET_REPORT_SEMAPHORE_ADDRESS_UPPER_UPPER": (24, 0),
    "NVCBC0_SET_REPORT_SEMAPHORE_D_OPERATION": (1, 0),
    "NVCBC0_SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE": (28, 28),
    "NVC7B5_LAUNCH_DMA_DATA_TRANSFER_TYPE": (1, 0),
    "NVC7B5_LAUNCH_DMA_FLUSH_ENABLE": (2, 2),
    "NVC7B5_LAUNCH_DMA_SEMAPHORE_TYPE": (4, 3),
    "NVC7B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT": (7, 7),
    "NVC7B5_LAUNCH_DMA_DST_MEMORY_LAYOUT": (8, 8),
    "NVC7B5_LAUNCH_DMA_MULTI_LINE_ENABLE": (9, 9),
    "NVC7B5_LAUNCH_DMA_SRC_TYPE": (12, 12),
    "NVC7B5_LAUNCH_DMA_DST_TYPE": (13, 13),
    "NVC7B5_LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE": (27, 27),
    "NVC8B5_LAUNCH_DMA_DATA_TRANSFER_TYPE": (1, 0),
    "NVC8B5_LAUNCH_DMA_FLUSH_ENABLE": (2, 2),
    "NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE": (4, 3),
    "NVC8B5_LAUNCH_DMA_SRC_MEMORY_LAYOUT": (7, 7),
    "NVC8B5_LAUNCH_DMA_DST_MEMORY_LAYOUT": (8, 8),
    "NVC8B5_LAUNCH_DMA_MULTI_LINE_ENABLE": (9, 9),
    "NVC8B5_LAUNCH_DMA_SRC_TYPE": (12, 12),
    "NVC8B5_LAUNCH_DMA_DST_TYPE": (13, 13),
    "NVC8B5_LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE": (27, 27),
}

# NV_STATUS (nvstatuscodes.h): what NVOSxx.status / rmStatus report.  For example 0x1f
# NV_ERR_INVALID_ARGUMENT, 0x3a NV_ERR_INVALID_PARAM_STRUCT (a params size the driver does
# not expect: the 580 NVA06C schedule params grew to 3 bytes).
STATUS_CODES: Mapping[str, int] = {
    "NV_OK": 0x0000,
    "NV_ERR_BROKEN_FB": 0x0001,
    "NV_ERR_BUFFER_TOO_SMALL": 0x0002,
    "NV_ERR_BUSY_RETRY": 0x0003,
    "NV_ERR_CALLBACK_NOT_SCHEDULED": 0x0004,
    "NV_ERR_CARD_NOT_PRESENT": 0x0005,
    "NV_ERR_CYCLE_DETECTED": 0x0006,
    "NV_ERR_DMA_IN_USE": 0x0007,
    "NV_ERR_DMA_MEM_NOT_LOCKED": 0x0008,
    "NV_ERR_DMA_MEM_NOT_UNLOCKED": 0x0009,
    "NV_ERR_DUAL_LINK_INUSE": 0x000a,
    "NV_ERR_ECC_ERROR": 0x000b,
    "NV_ERR_FIFO_BAD_ACCESS": 0x000c,
    "NV_ERR_FREQ_NOT_SUPPORTED": 0x000d,
    "NV_ERR_GPU_DMA_NOT_INITIALIZED": 0x000e,
    "NV_ERR_GPU_IS_LOST": 0x000f,
    "NV_ERR_GPU_IN_FULLCHIP_RESET": 0x0010,
    "NV_ERR_GPU_NOT_FULL_POWER": 0x0011,
    "NV_ERR_GPU_UUID_NOT_FOUND": 0x0012,
    "NV_ERR_HOT_SWITCH": 0x0013,
    "NV_ERR_I2C_ERROR": 0x0014,
    "NV_ERR_I2C_SPEED_TOO_HIGH": 0x0015,
    "NV_ERR_ILLEGAL_ACTION": 0x0016,
    "NV_ERR_IN_USE": 0x0017,
    "NV_ERR_INFLATE_COMPRESSED_DATA_FAILED": 0x0018,
    "NV_ERR_INSERT_DUPLICATE_NAME": 0x0019,
    "NV_ERR_INSUFFICIENT_RESOURCES": 0x001a,
    "NV_ERR_INSUFFICIENT_PERMISSIONS": 0x001b,
    "NV_ERR_INSUFFICIENT_POWER": 0x001c,
    "NV_ERR_INVALID_ACCESS_TYPE": 0x001d,
    "NV_ERR_INVALID_ADDRESS": 0x001e,
    "NV_ERR_INVALID_ARGUMENT": 0x001f,
    "NV_ERR_INVALID_BASE": 0x0020,
    "NV_ERR_INVALID_CHANNEL": 0x0021,
    "NV_ERR_INVALID_CLASS": 0x0022,
    "NV_ERR_INVALID_CLIENT": 0x0023,
    "NV_ERR_INVALID_COMMAND": 0x0024,
    "NV_ERR_INVALID_DATA": 0x0025,
    "NV_ERR_INVALID_DEVICE": 0x0026,
    "NV_ERR_INVALID_DMA_SPECIFIER": 0x0027,
    "NV_ERR_INVALID_EVENT": 0x0028,
    "NV_ERR_INVALID_FLAGS": 0x0029,
    "NV_ERR_INVALID_FUNCTION": 0x002a,
    "NV_ERR_INVALID_HEAP": 0x002b,
    "NV_ERR_INVALID_INDEX": 0x002c,
    "NV_ERR_INVALID_IRQ_LEVEL": 0x002d,
    "NV_ERR_INVALID_LIMIT": 0x002e,
    "NV_ERR_INVALID_LOCK_STATE": 0x002f,
    "NV_ERR_INVALID_METHOD": 0x0030,
    "NV_ERR_INVALID_OBJECT": 0x0031,
    "NV_ERR_INVALID_OBJECT_BUFFER": 0x0032,
    "NV_ERR_INVALID_OBJECT_HANDLE": 0x0033,
    "NV_ERR_INVALID_OBJECT_NEW": 0x0034,
    "NV_ERR_INVALID_OBJECT_OLD": 0x0035,
    "NV_ERR_INVALID_OBJECT_PARENT": 0x0036,
    "NV_ERR_INVALID_OFFSET": 0x0037,
    "NV_ERR_INVALID_OPERATION": 0x0038,
    "NV_ERR_INVALID_OWNER": 0x0039,
    "NV_ERR_INVALID_PARAM_STRUCT": 0x003a,
    "NV_ERR_INVALID_PARAMETER": 0x003b,
    "NV_ERR_INVALID_PATH": 0x003c,
    "NV_ERR_INVALID_POINTER": 0x003d,
    "NV_ERR_INVALID_REGISTRY_KEY": 0x003e,
    "NV_ERR_INVALID_REQUEST": 0x003f,
    "NV_ERR_INVALID_STATE": 0x0040,
    "NV_ERR_INVALID_STRING_LENGTH": 0x0041,
    "NV_ERR_INVALID_READ": 0x0042,
    "NV_ERR_INVALID_WRITE": 0x0043,
    "NV_ERR_INVALID_XLATE": 0x0044,
    "NV_ERR_IRQ_NOT_FIRING": 0x0045,
    "NV_ERR_IRQ_EDGE_TRIGGERED": 0x0046,
    "NV_ERR_MEMORY_TRAINING_FAILED": 0x0047,
    "NV_ERR_MISMATCHED_SLAVE": 0x0048,
    "NV_ERR_MISMATCHED_TARGET": 0x0049,
    "NV_ERR_MISSING_TABLE_ENTRY": 0x004a,
    "NV_ERR_MODULE_LOAD_FAILED": 0x004b,
    "NV_ERR_MORE_DATA_AVAILABLE": 0x004c,
    "NV_ERR_MORE_PROCESSING_REQUIRED": 0x004d,
    "NV_ERR_MULTIPLE_MEMORY_TYPES": 0x004e,
    "NV_ERR_NO_FREE_FIFOS": 0x004f,
    "NV_ERR_NO_INTR_PENDING": 0x0050,
    "NV_ERR_NO_MEMORY": 0x0051,
    "NV_ERR_NO_SUCH_DOMAIN": 0x0052,
    "NV_ERR_NO_VALID_PATH": 0x0053,
    "NV_ERR_NOT_COMPATIBLE": 0x0054,
    "NV_ERR_NOT_READY": 0x0055,
    "NV_ERR_NOT_SUPPORTED": 0x0056,
    "NV_ERR_OBJECT_NOT_FOUND": 0x0057,
    "NV_ERR_OBJECT_TYPE_MISMATCH": 0x0058,
    "NV_ERR_OPERATING_SYSTEM": 0x0059,
    "NV_ERR_OTHER_DEVICE_FOUND": 0x005a,
    "NV_ERR_OUT_OF_RANGE": 0x005b,
    "NV_ERR_OVERLAPPING_UVM_COMMIT": 0x005c,
    "NV_ERR_PAGE_TABLE_NOT_AVAIL": 0x005d,
    "NV_ERR_PID_NOT_FOUND": 0x005e,
    "NV_ERR_PROTECTION_FAULT": 0x005f,
    "NV_ERR_RC_ERROR": 0x0060,
    "NV_ERR_REJECTED_VBIOS": 0x0061,
    "NV_ERR_RESET_REQUIRED": 0x0062,
    "NV_ERR_STATE_IN_USE": 0x0063,
    "NV_ERR_SIGNAL_PENDING": 0x0064,
    "NV_ERR_TIMEOUT": 0x0065,
    "NV_ERR_TIMEOUT_RETRY": 0x0066,
    "NV_ERR_TOO_MANY_PRIMARIES": 0x0067,
    "NV_ERR_UVM_ADDRESS_IN_USE": 0x0068,
    "NV_ERR_MAX_SESSION_LIMIT_REACHED": 0x0069,
    "NV_ERR_LIB_RM_VERSION_MISMATCH": 0x006a,
    "NV_ERR_PRIV_SEC_VIOLATION": 0x006b,
    "NV_ERR_GPU_IN_DEBUG_MODE": 0x006c,
    "NV_ERR_FEATURE_NOT_ENABLED": 0x006d,
    "NV_ERR_RESOURCE_LOST": 0x006e,
    "NV_ERR_PMU_NOT_READY": 0x006f,
    "NV_ERR_FLCN_ERROR": 0x0070,
    "NV_ERR_FATAL_ERROR": 0x0071,
    "NV_ERR_MEMORY_ERROR": 0x0072,
    "NV_ERR_INVALID_LICENSE": 0x0073,
    "NV_ERR_NVLINK_INIT_ERROR": 0x0074,
    "NV_ERR_NVLINK_MINION_ERROR": 0x0075,
    "NV_ERR_NVLINK_CLOCK_ERROR": 0x0076,
    "NV_ERR_NVLINK_TRAINING_ERROR": 0x0077,
    "NV_ERR_NVLINK_CONFIGURATION_ERROR": 0x0078,
    "NV_ERR_RISCV_ERROR": 0x0079,
    "NV_ERR_FABRIC_MANAGER_NOT_PRESENT": 0x007a,
    "NV_ERR_ALREADY_SIGNALLED": 0x007b,
    "NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE": 0x007c,
    "NV_ERR_KEY_ROTATION_IN_PROGRESS": 0x007d,
    "NV_ERR_TEST_ONLY_CODE_NOT_ENABLED": 0x007e,
    "NV_ERR_SECURE_BOOT_FAILED": 0x007f,
    "NV_ERR_INSUFFICIENT_ZBC_ENTRY": 0x0080,
    "NV_ERR_NVLINK_FABRIC_NOT_READY": 0x0081,
    "NV_ERR_NVLINK_FABRIC_FAILURE": 0x0082,
    "NV_ERR_GPU_MEMORY_ONLINING_FAILURE": 0x0083,
    "NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE": 0x0084,
    "NV_ERR_THRESHOLD_CROSSED": 0x0085,
    "NV_ERR_RESOURCE_RETIREMENT_ERROR": 0x0086,
    "NV_ERR_FABRIC_STATE_OUT_OF_SYNC": 0x0087,
    "NV_ERR_BUFFER_FULL": 0x0088,
    "NV_ERR_BUFFER_EMPTY": 0x0089,
    "NV_ERR_MC_FLA_OFFSET_TABLE_FULL": 0x008a,
    "NV_ERR_DMA_XFER_FAILED": 0x008b,
    "NV_ERR_GENERIC": 0xffff,
    "NV_WARN_HOT_SWITCH": 0x10001,
    "NV_WARN_INCORRECT_PERFMON_DATA": 0x10002,
    "NV_WARN_MISMATCHED_SLAVE": 0x10003,
    "NV_WARN_MISMATCHED_TARGET": 0x10004,
    "NV_WARN_MORE_PROCESSING_REQUIRED": 0x10005,
    "NV_WARN_NOTHING_TO_DO": 0x10006,
    "NV_WARN_NULL_OBJECT": 0x10007,
    "NV_WARN_OUT_OF_RANGE": 0x10008,
    "NV_WARN_THRESHOLD_CROSSED": 0x10009,
}
STATUS_NAMES: Mapping[int, str] = {v: k for k, v in STATUS_CODES.items()}


def pack_bitfields(values: Mapping[str, int], width: int = 32) -> int:
    """One method data word (or flags word) from BITFIELDS names; refuses a value that
    does not fit its field, a field outside `width`, and two fields that overlap."""
    return _pack_int({n: BITFIELDS[n] for n in values}, values, width)


# ---------------------------------------------------------------------------------------
# QMD layouts (data in qmd_layouts.py) and pack_qmd.
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


QMD_V03_00 = QmdLayout("V03_00", "classes/compute/clc7c0qmd.h", "NVC7C0_QMDV03_00_", 2048,
                       _qmd.V03_00_FIELDS, _qmd.V03_00_INDEXED_COUNTS, _qmd.V03_00_VALUES)
QMD_V04_00 = QmdLayout("V04_00", "classes/compute/clcbc0qmd.h", "NVCBC0_QMDV04_00_", 3072,
                       _qmd.V04_00_FIELDS, _qmd.V04_00_INDEXED_COUNTS, _qmd.V04_00_VALUES)
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
