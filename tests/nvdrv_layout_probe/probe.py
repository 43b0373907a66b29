#!/usr/bin/env python3
"""Regenerate tests/golden/nvdrv_abi_580.json from NVIDIA's published headers.

The golden file holds, as plain numbers, what gcc computes from the headers for every
fact alphac/nvdrv/abi.py carries: struct sizes, alignments and field offsets, ioctl and
control command numbers, class ids, push-buffer method offsets, bit ranges, and the QMD
layouts.  The test (tests/test_nvdrv_abi.py) then needs neither the headers nor a network.

How the facts are read:
  * Struct fields are not listed here by hand.  A first program declares one variable of
    each struct type and is compiled with -g; the DWARF (read with pyelftools) gives
    every member, its type and offset.  Structs that members refer to are added until
    the set is closed.  A second program prints sizeof/_Alignof/offsetof for every
    member found, and the two readings must agree.
  * Constants, command numbers, class ids and method offsets are named in SPEC below
    and evaluated by gcc.  Bit ranges written `high:low` are read with the (1 ? X) /
    (0 ? X) idiom the headers are written for.
  * Escape numbers, status codes and QMD fields are enumerated from the header text by
    name (a regular expression finds the names; gcc evaluates the values).

Usage: see README.md in this folder.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from elftools.elf.elffile import ELFFile

HERE = Path(__file__).resolve().parent

KERNEL_INCLUDE_DIRS = (
    "src/common/sdk/nvidia/inc",
    "kernel-open/common/inc",
    "kernel-open/nvidia-uvm",
    "src/nvidia/arch/nvalloc/unix/include",
)
DOC_INCLUDE_DIR = "classes"

# --------------------------------------------------------------------------------------
# What to probe.  Struct *fields* come from DWARF; here are only the struct names.
# --------------------------------------------------------------------------------------

STRUCTS = [
    # unix ioctl layer (nv-ioctl.h, nv-unix-nvos-params-wrappers.h)
    "nv_ioctl_card_info_t", "nv_ioctl_register_fd_t", "nv_ioctl_rm_api_version_t",
    "nv_ioctl_xfer_t", "nv_ioctl_wait_open_complete_t",
    "nv_ioctl_nvos33_parameters_with_fd", "nv_ioctl_nvos02_parameters_with_fd",
    # RM API (nvos.h)
    "NVOS00_PARAMETERS", "NVOS02_PARAMETERS", "NVOS21_PARAMETERS", "NVOS64_PARAMETERS",
    "NVOS32_PARAMETERS", "NVOS33_PARAMETERS", "NVOS34_PARAMETERS", "NVOS46_PARAMETERS",
    "NVOS47_PARAMETERS", "NVOS54_PARAMETERS",
    # UVM
    "UVM_INITIALIZE_PARAMS", "UVM_MM_INITIALIZE_PARAMS", "UVM_REGISTER_GPU_PARAMS",
    "UVM_UNREGISTER_GPU_PARAMS", "UVM_REGISTER_GPU_VASPACE_PARAMS",
    "UVM_UNREGISTER_GPU_VASPACE_PARAMS", "UVM_REGISTER_CHANNEL_PARAMS",
    "UVM_UNREGISTER_CHANNEL_PARAMS", "UVM_CREATE_EXTERNAL_RANGE_PARAMS",
    "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", "UVM_FREE_PARAMS",
    # allocation parameters
    "NV0080_ALLOC_PARAMETERS", "NV2080_ALLOC_PARAMETERS", "NV_VASPACE_ALLOCATION_PARAMETERS",
    "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", "NV_CTXSHARE_ALLOCATION_PARAMETERS",
    "NV_CHANNEL_ALLOC_PARAMS", "NV_MEMORY_ALLOCATION_PARAMS",
    "NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", "NV_HOPPER_USERMODE_A_PARAMS",
    # control parameters
    "NV2080_CTRL_GPU_GET_GID_INFO_PARAMS", "NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS",
    "NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS", "NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS",
    "NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS", "NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS",
    "NV2080_CTRL_GR_GET_INFO_PARAMS", "NV2080_CTRL_GR_GET_INFO_V2_PARAMS",
    "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS", "NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS",
    "NV2080_CTRL_FB_GET_INFO_V2_PARAMS", "NV2080_CTRL_PERF_BOOST_PARAMS",
    # USERD (the channel's control page), GPPut lives here
    "AmpereAControlGPFifo", "HopperAControlGPFifo",
]

# Escapes: every name defined in these two headers, found by regex.
ESCAPE_HEADERS = (
    ("kernel-open/common/inc/nv-ioctl-numbers.h", r"NV_ESC_\w+"),
    ("src/nvidia/arch/nvalloc/unix/include/nv_escape.h", r"NV_ESC_\w+"),
)

# Full nv ioctl command numbers: (escape, struct the driver checks the size against,
# element count).  The pairing is what nvidia.ko checks (kernel-open/nvidia/nv.c,
# src/nvidia/arch/nvalloc/unix/src/escape.c); the number is _IOWR('F', nr, size).
NV_IOCTLS = [
    ("NV_ESC_CARD_INFO", "nv_ioctl_card_info_t", "NV_MAX_DEVICES"),
    ("NV_ESC_REGISTER_FD", "nv_ioctl_register_fd_t", None),
    ("NV_ESC_CHECK_VERSION_STR", "nv_ioctl_rm_api_version_t", None),
    ("NV_ESC_IOCTL_XFER_CMD", "nv_ioctl_xfer_t", None),
    ("NV_ESC_WAIT_OPEN_COMPLETE", "nv_ioctl_wait_open_complete_t", None),
    ("NV_ESC_RM_ALLOC_MEMORY", "nv_ioctl_nvos02_parameters_with_fd", None),
    ("NV_ESC_RM_FREE", "NVOS00_PARAMETERS", None),
    ("NV_ESC_RM_CONTROL", "NVOS54_PARAMETERS", None),
    ("NV_ESC_RM_ALLOC", "NVOS21_PARAMETERS", None),
    ("NV_ESC_RM_ALLOC", "NVOS64_PARAMETERS", None),
    ("NV_ESC_RM_VID_HEAP_CONTROL", "NVOS32_PARAMETERS", None),
    ("NV_ESC_RM_MAP_MEMORY", "nv_ioctl_nvos33_parameters_with_fd", None),
    ("NV_ESC_RM_UNMAP_MEMORY", "NVOS34_PARAMETERS", None),
    ("NV_ESC_RM_MAP_MEMORY_DMA", "NVOS46_PARAMETERS", None),
    ("NV_ESC_RM_UNMAP_MEMORY_DMA", "NVOS47_PARAMETERS", None),
]

UVM_IOCTLS = [
    ("UVM_INITIALIZE", "UVM_INITIALIZE_PARAMS"),
    ("UVM_DEINITIALIZE", None),
    ("UVM_MM_INITIALIZE", "UVM_MM_INITIALIZE_PARAMS"),
    ("UVM_REGISTER_GPU", "UVM_REGISTER_GPU_PARAMS"),
    ("UVM_UNREGISTER_GPU", "UVM_UNREGISTER_GPU_PARAMS"),
    ("UVM_REGISTER_GPU_VASPACE", "UVM_REGISTER_GPU_VASPACE_PARAMS"),
    ("UVM_UNREGISTER_GPU_VASPACE", "UVM_UNREGISTER_GPU_VASPACE_PARAMS"),
    ("UVM_REGISTER_CHANNEL", "UVM_REGISTER_CHANNEL_PARAMS"),
    ("UVM_UNREGISTER_CHANNEL", "UVM_UNREGISTER_CHANNEL_PARAMS"),
    ("UVM_CREATE_EXTERNAL_RANGE", "UVM_CREATE_EXTERNAL_RANGE_PARAMS"),
    ("UVM_MAP_EXTERNAL_ALLOCATION", "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS"),
    ("UVM_FREE", "UVM_FREE_PARAMS"),
]

CTRL_CMDS = [
    ("NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2", "NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS"),
    ("NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", "NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS"),
    ("NV0080_CTRL_CMD_GPU_GET_CLASSLIST", "NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS"),
    ("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2", "NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS"),
    ("NV2080_CTRL_CMD_GPU_GET_NAME_STRING", "NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS"),
    ("NV2080_CTRL_CMD_GPU_GET_GID_INFO", "NV2080_CTRL_GPU_GET_GID_INFO_PARAMS"),
    ("NV2080_CTRL_CMD_GR_GET_INFO", "NV2080_CTRL_GR_GET_INFO_PARAMS"),
    ("NV2080_CTRL_CMD_GR_GET_INFO_V2", "NV2080_CTRL_GR_GET_INFO_V2_PARAMS"),
    ("NV2080_CTRL_CMD_FB_GET_INFO_V2", "NV2080_CTRL_FB_GET_INFO_V2_PARAMS"),
    ("NV2080_CTRL_CMD_PERF_BOOST", "NV2080_CTRL_PERF_BOOST_PARAMS"),
    ("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN", "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS"),
    ("NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", "NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS"),
]

CLASSES = [
    "NV01_ROOT", "NV01_ROOT_CLIENT", "NV01_DEVICE_0", "NV20_SUBDEVICE_0",
    "NV01_MEMORY_SYSTEM", "NV01_MEMORY_LOCAL_USER", "NV1_MEMORY_USER",
    "NV01_MEMORY_VIRTUAL", "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR",
    "FERMI_VASPACE_A", "FERMI_CONTEXT_SHARE_A", "KEPLER_CHANNEL_GROUP_A",
    "VOLTA_USERMODE_A", "AMPERE_USERMODE_A", "HOPPER_USERMODE_A",
    "AMPERE_CHANNEL_GPFIFO_A", "HOPPER_CHANNEL_GPFIFO_A",
    "AMPERE_COMPUTE_B", "HOPPER_COMPUTE_A",
    "AMPERE_DMA_COPY_B", "HOPPER_DMA_COPY_A",
]

_COMPUTE_METHODS = [
    "SET_OBJECT", "NO_OPERATION", "WAIT_FOR_IDLE",
    "SET_REPORT_SEMAPHORE_PAYLOAD_LOWER", "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER",
    "SET_REPORT_SEMAPHORE_ADDRESS_LOWER", "SET_REPORT_SEMAPHORE_ADDRESS_UPPER",
    "LINE_LENGTH_IN", "LINE_COUNT", "OFFSET_OUT_UPPER", "OFFSET_OUT", "LAUNCH_DMA",
    "LOAD_INLINE_DATA", "INVALIDATE_SHADER_CACHES", "SET_QMD_VERSION", "INVALIDATE_SKED_CACHES",
    "SET_SHADER_SHARED_MEMORY_WINDOW_A", "SET_SHADER_SHARED_MEMORY_WINDOW_B",
    "SET_CWD_SLOT_COUNT", "SEND_PCAS_A", "SEND_PCAS_B", "SEND_SIGNALING_PCAS_B",
    "SEND_SIGNALING_PCAS2_B",
    "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B",
    "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C", "SET_SPA_VERSION",
    "SET_INLINE_QMD_ADDRESS_A", "SET_INLINE_QMD_ADDRESS_B",
    "SET_SHADER_LOCAL_MEMORY_A", "SET_SHADER_LOCAL_MEMORY_B",
    "SET_SHADER_LOCAL_MEMORY_WINDOW_A", "SET_SHADER_LOCAL_MEMORY_WINDOW_B",
    "SET_SHADER_CACHE_CONTROL", "INVALIDATE_SHADER_CACHES_NO_WFI", "PIPE_NOP",
    "SET_REPORT_SEMAPHORE_A", "SET_REPORT_SEMAPHORE_B", "SET_REPORT_SEMAPHORE_C",
    "SET_REPORT_SEMAPHORE_D",
]
METHODS = {
    "NVC7C0": _COMPUTE_METHODS,
    "NVCBC0": _COMPUTE_METHODS + ["REPORT_SEMAPHORE_EXECUTE"],
    "NVC56F": ["SET_OBJECT", "NOP", "SEMAPHOREA", "SEMAPHOREB", "SEMAPHOREC", "SEMAPHORED",
               "NON_STALL_INTERRUPT", "MEM_OP_A", "MEM_OP_B", "MEM_OP_C", "MEM_OP_D",
               "SET_REFERENCE", "SEM_ADDR_LO", "SEM_ADDR_HI", "SEM_PAYLOAD_LO", "SEM_PAYLOAD_HI",
               "SEM_EXECUTE", "WFI"],
    "NVC86F": ["SET_OBJECT", "MEM_OP_A", "MEM_OP_B", "MEM_OP_C", "MEM_OP_D",
               "SEM_ADDR_LO", "SEM_ADDR_HI", "SEM_PAYLOAD_LO", "SEM_PAYLOAD_HI", "SEM_EXECUTE", "WFI"],
    "NVC7B5": ["NOP", "SET_SEMAPHORE_A", "SET_SEMAPHORE_B", "SET_SEMAPHORE_PAYLOAD",
               "SET_SEMAPHORE_PAYLOAD_UPPER", "LAUNCH_DMA", "OFFSET_IN_UPPER", "OFFSET_IN_LOWER",
               "OFFSET_OUT_UPPER", "OFFSET_OUT_LOWER", "PITCH_IN", "PITCH_OUT",
               "LINE_LENGTH_IN", "LINE_COUNT"],
    "NVC8B5": ["NOP", "SET_SEMAPHORE_A", "SET_SEMAPHORE_B", "SET_SEMAPHORE_PAYLOAD",
               "SET_SEMAPHORE_PAYLOAD_UPPER", "LAUNCH_DMA", "OFFSET_IN_UPPER", "OFFSET_IN_LOWER",
               "OFFSET_OUT_UPPER", "OFFSET_OUT_LOWER", "PITCH_IN", "PITCH_OUT",
               "LINE_LENGTH_IN", "LINE_COUNT"],
    "NVC361": ["NOTIFY_CHANNEL_PENDING", "TIME_0", "TIME_1"],
}


def _each(prefixes, names):
    return [p + n for p in prefixes for n in names]


CONSTANTS = [
    # ioctl layer
    "NV_IOCTL_MAGIC", "NV_IOCTL_BASE", "NV_RM_API_VERSION_STRING_LENGTH",
    "NV_RM_API_VERSION_CMD_STRICT", "NV_RM_API_VERSION_CMD_RELAXED", "NV_RM_API_VERSION_CMD_QUERY",
    "NV_RM_API_VERSION_REPLY_UNRECOGNIZED", "NV_RM_API_VERSION_REPLY_RECOGNIZED",
    "NV_MAX_DEVICES", "NV_MAX_SUBDEVICES", "UVM_MAX_GPUS",
    # NVOS32 / NV_MEMORY_ALLOCATION_PARAMS
    "NVOS32_TYPE_IMAGE", "NVOS32_TYPE_NOTIFIER",
    "NVOS32_ALLOC_FLAGS_IGNORE_BANK_PLACEMENT", "NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE",
    "NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE", "NVOS32_ALLOC_FLAGS_MEMORY_HANDLE_PROVIDED",
    "NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED", "NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM",
    "NVOS32_ALLOC_FLAGS_VIRTUAL",
    "NVOS32_ATTR_PAGE_SIZE_DEFAULT", "NVOS32_ATTR_PAGE_SIZE_4KB", "NVOS32_ATTR_PAGE_SIZE_BIG",
    "NVOS32_ATTR_PAGE_SIZE_HUGE",
    "NVOS32_ATTR_LOCATION_VIDMEM", "NVOS32_ATTR_LOCATION_PCI", "NVOS32_ATTR_LOCATION_ANY",
    "NVOS32_ATTR_PHYSICALITY_DEFAULT", "NVOS32_ATTR_PHYSICALITY_NONCONTIGUOUS",
    "NVOS32_ATTR_PHYSICALITY_CONTIGUOUS", "NVOS32_ATTR_PHYSICALITY_ALLOW_NONCONTIGUOUS",
    "NVOS32_ATTR_COHERENCY_UNCACHED", "NVOS32_ATTR_COHERENCY_CACHED",
    "NVOS32_ATTR_COHERENCY_WRITE_COMBINE", "NVOS32_ATTR_COHERENCY_WRITE_BACK",
    "NVOS32_ATTR2_ZBC_DEFAULT", "NVOS32_ATTR2_ZBC_PREFER_NO_ZBC",
    "NVOS32_ATTR2_GPU_CACHEABLE_DEFAULT", "NVOS32_ATTR2_GPU_CACHEABLE_YES",
    "NVOS32_ATTR2_GPU_CACHEABLE_NO",
    "NVOS32_ATTR2_PAGE_SIZE_HUGE_DEFAULT", "NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB",
    # NVOS02 (RM_ALLOC_MEMORY)
    "NVOS02_FLAGS_PHYSICALITY_CONTIGUOUS", "NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS",
    "NVOS02_FLAGS_COHERENCY_UNCACHED", "NVOS02_FLAGS_COHERENCY_CACHED",
    "NVOS02_FLAGS_COHERENCY_WRITE_COMBINE",
    "NVOS02_FLAGS_MAPPING_DEFAULT", "NVOS02_FLAGS_MAPPING_NO_MAP", "NVOS02_FLAGS_MAPPING_NEVER_MAP",
    # NVOS33 (RM_MAP_MEMORY)
    "NVOS33_FLAGS_ACCESS_READ_WRITE", "NVOS33_FLAGS_ACCESS_READ_ONLY", "NVOS33_FLAGS_ACCESS_WRITE_ONLY",
    "NVOS33_FLAGS_MAPPING_DEFAULT", "NVOS33_FLAGS_MAPPING_DIRECT", "NVOS33_FLAGS_MAPPING_REFLECTED",
    "NVOS33_FLAGS_CACHING_TYPE_CACHED", "NVOS33_FLAGS_CACHING_TYPE_UNCACHED",
    "NVOS33_FLAGS_CACHING_TYPE_WRITECOMBINED", "NVOS33_FLAGS_CACHING_TYPE_WRITEBACK",
    "NVOS33_FLAGS_CACHING_TYPE_DEFAULT",
    # NVOS46 (RM_MAP_MEMORY_DMA)
    "NVOS46_FLAGS_ACCESS_READ_WRITE", "NVOS46_FLAGS_ACCESS_READ_ONLY",
    "NVOS46_FLAGS_PAGE_KIND_PHYSICAL", "NVOS46_FLAGS_PAGE_KIND_VIRTUAL",
    "NVOS46_FLAGS_CACHE_SNOOP_DISABLE", "NVOS46_FLAGS_CACHE_SNOOP_ENABLE",
    "NVOS46_FLAGS_PAGE_SIZE_DEFAULT", "NVOS46_FLAGS_PAGE_SIZE_4KB", "NVOS46_FLAGS_PAGE_SIZE_BIG",
    "NVOS46_FLAGS_PAGE_SIZE_HUGE",
    "NVOS46_FLAGS_DMA_OFFSET_FIXED_FALSE", "NVOS46_FLAGS_DMA_OFFSET_FIXED_TRUE",
    # allocation parameters
    "NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES",
    "NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE", "NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES",
    "NV_VASPACE_ALLOCATION_FLAGS_NONE", "NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED",
    "NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING",
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC", "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC",
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED",
    "NV_MEMORY_VIRTUAL_SYSMEM_DYNAMIC_HVASPACE", "NV_CHANNELGPFIFO_NOTIFICATION_TYPE__SIZE_1",
    "CC_CHAN_ALLOC_IV_SIZE_DWORD", "CC_CHAN_ALLOC_NONCE_SIZE_DWORD",
    "NV2080_ENGINE_TYPE_GRAPHICS", "NV2080_ENGINE_TYPE_COPY0",
    # controls
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII", "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY",
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1", "NV2080_GPU_MAX_GID_LENGTH",
    "NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH", "NV2080_GPU_MAX_NAME_STRING_LENGTH",
    "NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII",
    "NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE", "NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE",
    "NV2080_CTRL_GR_INFO_INDEX_SM_VERSION", "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS",
    "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC", "NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC",
    "NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM", "NV2080_CTRL_GR_INFO_MAX_SIZE",
    "NV2080_CTRL_PERF_BOOST_FLAGS_CMD_BOOST_TO_MAX", "NV2080_CTRL_PERF_BOOST_FLAGS_CUDA_YES",
    "NV2080_CTRL_PERF_BOOST_DURATION_INFINITE",
    "NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE", "NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE",
    "NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE", "NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE",
    "NV2080_CTRL_FB_INFO_INDEX_L2CACHE_SIZE", "NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE",
    "NV2080_CTRL_FB_INFO_MAX_LIST_SIZE",
    # UVM external mappings
    "UvmGpuMappingTypeDefault", "UvmGpuMappingTypeReadWriteAtomic", "UvmGpuMappingTypeReadWrite",
    "UvmGpuMappingTypeReadOnly", "UvmGpuCachingTypeDefault", "UvmGpuCachingTypeForceUncached",
    "UvmGpuCachingTypeForceCached",
    # usermode (doorbell page)
    "NVC361_NV_USERMODE__SIZE",
    # host class: semaphores, GPFIFO entries, push-buffer method headers
    "NVC56F_SEM_EXECUTE_OPERATION_ACQUIRE", "NVC56F_SEM_EXECUTE_OPERATION_RELEASE",
    "NVC56F_SEM_EXECUTE_OPERATION_ACQ_STRICT_GEQ", "NVC56F_SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ",
    "NVC56F_SEM_EXECUTE_OPERATION_REDUCTION",
    "NVC56F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN", "NVC56F_SEM_EXECUTE_RELEASE_WFI_DIS",
    "NVC56F_SEM_EXECUTE_RELEASE_WFI_EN", "NVC56F_SEM_EXECUTE_PAYLOAD_SIZE_32BIT",
    "NVC56F_SEM_EXECUTE_PAYLOAD_SIZE_64BIT", "NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP_DIS",
    "NVC56F_SEM_EXECUTE_RELEASE_TIMESTAMP_EN",
    "NVC86F_SEM_EXECUTE_OPERATION_ACQUIRE", "NVC86F_SEM_EXECUTE_OPERATION_RELEASE",
    "NVC86F_SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ", "NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG_EN",
    "NVC86F_SEM_EXECUTE_RELEASE_WFI_DIS", "NVC86F_SEM_EXECUTE_PAYLOAD_SIZE_32BIT",
    "NVC86F_SEM_EXECUTE_RELEASE_TIMESTAMP_DIS", "NVC86F_SEM_EXECUTE_RELEASE_TIMESTAMP_EN",
    "NVC56F_GP_ENTRY__SIZE", "NVC86F_GP_ENTRY__SIZE",
    *_each(("NVC56F_", "NVC86F_"), (
        "GP_ENTRY0_FETCH_UNCONDITIONAL", "GP_ENTRY0_FETCH_CONDITIONAL",
        "GP_ENTRY1_LEVEL_MAIN", "GP_ENTRY1_LEVEL_SUBROUTINE",
        "GP_ENTRY1_SYNC_PROCEED", "GP_ENTRY1_SYNC_WAIT", "GP_ENTRY1_OPCODE_NOP")),
    "NVC56F_DMA_SEC_OP_INC_METHOD", "NVC56F_DMA_SEC_OP_NON_INC_METHOD",
    "NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD", "NVC56F_DMA_SEC_OP_ONE_INC",
    "NVC56F_DMA_INCR_OPCODE_VALUE", "NVC56F_DMA_NONINCR_OPCODE_VALUE",
    "NVC56F_DMA_ONEINCR_OPCODE_VALUE", "NVC56F_DMA_IMMD_OPCODE_VALUE",
    # compute class values
    *_each(("NVC7C0_", "NVCBC0_"), (
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_NOP", "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_SCHEDULE",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_COPY_SCHEDULE",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_PREFETCH_SCHEDULE",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION_INVALIDATE_PREFETCH_COPY_SCHEDULE",
        "INVALIDATE_SHADER_CACHES_INSTRUCTION_TRUE", "INVALIDATE_SHADER_CACHES_DATA_TRUE",
        "INVALIDATE_SHADER_CACHES_CONSTANT_TRUE", "INVALIDATE_SHADER_CACHES_LOCKS_TRUE",
        "INVALIDATE_SHADER_CACHES_FLUSH_DATA_TRUE",
        "INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION_TRUE",
        "INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA_TRUE",
        "INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT_TRUE",
        "LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH", "LAUNCH_DMA_COMPLETION_TYPE_FLUSH_DISABLE",
        "LAUNCH_DMA_COMPLETION_TYPE_FLUSH_ONLY", "LAUNCH_DMA_COMPLETION_TYPE_RELEASE_SEMAPHORE",
        "SET_REPORT_SEMAPHORE_D_OPERATION_RELEASE", "SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_FOUR_WORDS",
        "SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE_ONE_WORD")),
    # copy class values
    *_each(("NVC7B5_", "NVC8B5_"), (
        "LAUNCH_DMA_DATA_TRANSFER_TYPE_NONE", "LAUNCH_DMA_DATA_TRANSFER_TYPE_PIPELINED",
        "LAUNCH_DMA_DATA_TRANSFER_TYPE_NON_PIPELINED", "LAUNCH_DMA_FLUSH_ENABLE_TRUE",
        "LAUNCH_DMA_SEMAPHORE_TYPE_RELEASE_ONE_WORD_SEMAPHORE",
        "LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH", "LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH",
        "LAUNCH_DMA_FLUSH_ENABLE_FALSE", "LAUNCH_DMA_SEMAPHORE_TYPE_NONE", "LAUNCH_DMA_INTERRUPT_TYPE_NONE",
        "LAUNCH_DMA_MULTI_LINE_ENABLE_FALSE", "LAUNCH_DMA_SRC_TYPE_VIRTUAL", "LAUNCH_DMA_DST_TYPE_VIRTUAL",
        "LAUNCH_DMA_FLUSH_TYPE_SYS")),
    "NVC56F_WFI_SCOPE_ALL", "NVC86F_WFI_SCOPE_ALL",
]

BITFIELDS = [
    "NVOS32_ATTR_PAGE_SIZE", "NVOS32_ATTR_LOCATION", "NVOS32_ATTR_PHYSICALITY", "NVOS32_ATTR_COHERENCY",
    "NVOS32_ATTR2_ZBC", "NVOS32_ATTR2_GPU_CACHEABLE", "NVOS32_ATTR2_PAGE_SIZE_HUGE",
    "NVOS02_FLAGS_PHYSICALITY", "NVOS02_FLAGS_COHERENCY", "NVOS02_FLAGS_MAPPING",
    "NVOS33_FLAGS_ACCESS", "NVOS33_FLAGS_MAPPING", "NVOS33_FLAGS_CACHING_TYPE",
    "NVOS46_FLAGS_ACCESS", "NVOS46_FLAGS_PAGE_KIND", "NVOS46_FLAGS_CACHE_SNOOP",
    "NVOS46_FLAGS_PAGE_SIZE", "NVOS46_FLAGS_DMA_OFFSET_FIXED", "NVOS46_FLAGS_PAGE_KIND_OVERRIDE",
    "NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT",
    "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT", "NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE",
    "NV2080_CTRL_PERF_BOOST_FLAGS_CMD", "NV2080_CTRL_PERF_BOOST_FLAGS_CUDA",
    *_each(("NVC56F_", "NVC86F_"), (
        "SEM_ADDR_LO_OFFSET", "SEM_ADDR_HI_OFFSET", "SEM_EXECUTE_OPERATION",
        "SEM_EXECUTE_ACQUIRE_SWITCH_TSG", "SEM_EXECUTE_RELEASE_WFI", "SEM_EXECUTE_PAYLOAD_SIZE",
        "SEM_EXECUTE_RELEASE_TIMESTAMP",
        "GP_ENTRY0_FETCH", "GP_ENTRY0_GET", "GP_ENTRY0_OPERAND", "GP_ENTRY1_GET_HI",
        "GP_ENTRY1_LEVEL", "GP_ENTRY1_LENGTH", "GP_ENTRY1_SYNC", "GP_ENTRY1_OPCODE")),
    "NVC56F_SEM_EXECUTE_REDUCTION", "NVC56F_SEM_EXECUTE_REDUCTION_FORMAT",
    "NVC56F_NON_STALL_INTERRUPT_HANDLE",
    "NVC56F_DMA_METHOD_ADDRESS", "NVC56F_DMA_METHOD_SUBCHANNEL", "NVC56F_DMA_METHOD_COUNT",
    "NVC56F_DMA_SEC_OP", "NVC56F_DMA_TERT_OP",
    "NVC56F_DMA_INCR_ADDRESS", "NVC56F_DMA_INCR_SUBCHANNEL", "NVC56F_DMA_INCR_COUNT",
    "NVC56F_DMA_INCR_OPCODE",
    "NVC56F_DMA_NONINCR_ADDRESS", "NVC56F_DMA_NONINCR_SUBCHANNEL", "NVC56F_DMA_NONINCR_COUNT",
    "NVC56F_DMA_NONINCR_OPCODE",
    "NVC56F_DMA_ONEINCR_ADDRESS", "NVC56F_DMA_ONEINCR_SUBCHANNEL", "NVC56F_DMA_ONEINCR_COUNT",
    "NVC56F_DMA_ONEINCR_OPCODE",
    "NVC56F_DMA_IMMD_ADDRESS", "NVC56F_DMA_IMMD_SUBCHANNEL", "NVC56F_DMA_IMMD_DATA",
    "NVC56F_DMA_IMMD_OPCODE",
    *_each(("NVC7C0_", "NVCBC0_"), (
        "SET_OBJECT_CLASS_ID", "SET_OBJECT_ENGINE_ID", "SEND_PCAS_A_QMD_ADDRESS_SHIFTED8",
        "SEND_SIGNALING_PCAS2_B_PCAS_ACTION",
        "INVALIDATE_SHADER_CACHES_INSTRUCTION", "INVALIDATE_SHADER_CACHES_DATA",
        "INVALIDATE_SHADER_CACHES_CONSTANT", "INVALIDATE_SHADER_CACHES_LOCKS",
        "INVALIDATE_SHADER_CACHES_FLUSH_DATA",
        "INVALIDATE_SHADER_CACHES_NO_WFI_INSTRUCTION", "INVALIDATE_SHADER_CACHES_NO_WFI_GLOBAL_DATA",
        "INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT",
        "SET_SHADER_LOCAL_MEMORY_A_ADDRESS_UPPER", "SET_SHADER_LOCAL_MEMORY_B_ADDRESS_LOWER",
        "SET_SHADER_LOCAL_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER",
        "SET_SHADER_LOCAL_MEMORY_WINDOW_B_BASE_ADDRESS",
        "SET_SHADER_SHARED_MEMORY_WINDOW_A_BASE_ADDRESS_UPPER",
        "SET_SHADER_SHARED_MEMORY_WINDOW_B_BASE_ADDRESS",
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A_SIZE_UPPER",
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B_SIZE_LOWER",
        "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C_MAX_SM_COUNT",
        "SET_QMD_VERSION_CURRENT", "SET_QMD_VERSION_OLDEST_SUPPORTED",
        "LAUNCH_DMA_DST_MEMORY_LAYOUT", "LAUNCH_DMA_COMPLETION_TYPE",
        "SET_REPORT_SEMAPHORE_ADDRESS_UPPER_UPPER", "SET_REPORT_SEMAPHORE_D_OPERATION",
        "SET_REPORT_SEMAPHORE_D_STRUCTURE_SIZE")),
    *_each(("NVC7B5_", "NVC8B5_"), (
        "LAUNCH_DMA_DATA_TRANSFER_TYPE", "LAUNCH_DMA_FLUSH_ENABLE", "LAUNCH_DMA_SEMAPHORE_TYPE",
        "LAUNCH_DMA_SRC_MEMORY_LAYOUT", "LAUNCH_DMA_DST_MEMORY_LAYOUT",
        "LAUNCH_DMA_MULTI_LINE_ENABLE", "LAUNCH_DMA_SRC_TYPE", "LAUNCH_DMA_DST_TYPE",
        "LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE", "LAUNCH_DMA_INTERRUPT_TYPE", "LAUNCH_DMA_FLUSH_TYPE",
        "LAUNCH_DMA_REMAP_ENABLE", "LAUNCH_DMA_FORCE_RMWDISABLE", "LAUNCH_DMA_SEMAPHORE_REDUCTION_ENABLE")),
    "NVC56F_WFI_SCOPE", "NVC86F_WFI_SCOPE",
]

STATUS_HEADER = "src/common/sdk/nvidia/inc/nvstatuscodes.h"

# QMD layouts: (label, open-gpu-doc header, macro prefix, size in bits).
# sm_86 (GA10x) runs AMPERE_COMPUTE_B (0xc7c0), whose header is clc7c0qmd.h.
QMDS = [
    ("V03_00", "classes/compute/clc7c0qmd.h", "NVC7C0_QMDV03_00_", 2048),
    ("V04_00", "classes/compute/clcbc0qmd.h", "NVCBC0_QMDV04_00_", 3072),
]
# Indexed fields FIELD(i) are evaluated for i < QMD_INDEX_PROBE; see _qmd_counts.
QMD_INDEX_PROBE = 32


# --------------------------------------------------------------------------------------

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def include_flags(kernel: Path, doc: Path):
    flags = []
    for d in KERNEL_INCLUDE_DIRS:
        flags += ["-I", str(kernel / d)]
    flags += ["-I", str(doc / DOC_INCLUDE_DIR)]
    return flags


def compile_c(src: str, workdir: Path, name: str, kernel: Path, doc: Path, debug=False) -> Path:
    c = workdir / f"{name}.c"
    c.write_text(src)
    exe = workdir / name
    cmd = ["gcc", "-std=gnu11", "-O0", "-w", "-I", str(HERE)] + include_flags(kernel, doc)
    if debug:
        cmd += ["-g", "-gdwarf-4"]
    cmd += [str(c), "-o", str(exe)]
    r = subprocess.run(cmd, text=True, capture_output=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-6000:])
        raise SystemExit(f"probe: gcc failed on {c}")
    return exe


def header_deps(kernel: Path, doc: Path, workdir: Path):
    """Every header the probe reads, as (tree, relative path, sha256)."""
    c = workdir / "deps.c"
    c.write_text('#include "probe.h"\n')
    r = run(["gcc", "-std=gnu11", "-M", "-I", str(HERE)] + include_flags(kernel, doc) + [str(c)])
    paths = r.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    out = []
    for p in paths:
        p = Path(p).resolve()
        for tree, root in (("open-gpu-kernel-modules", kernel.resolve()), ("open-gpu-doc", doc.resolve())):
            try:
                rel = p.relative_to(root)
            except ValueError:
                continue
            out.append({"tree": tree, "path": rel.as_posix(),
                        "sha256": hashlib.sha256(p.read_bytes()).hexdigest()})
            break
    out.sort(key=lambda d: (d["tree"], d["path"]))
    return out


def names_in(path: Path, pattern: str):
    text = path.read_text(errors="replace")
    return sorted(set(re.findall(r"^#\s*define\s+(" + pattern + r")\b", text, re.M)))


def status_names(path: Path):
    text = path.read_text(errors="replace")
    return re.findall(r"^NV_STATUS_CODE\(\s*(\w+)\s*,", text, re.M)


def qmd_names(path: Path, prefix: str):
    """Fields (plain and indexed) and value defines of one QMD version, by name."""
    fields, indexed, values = [], [], []
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"#define\s+(" + re.escape(prefix) + r"\w+?)(\(i\))?\s+(.*)$", line)
        if not m:
            continue
        name, idx, body = m.group(1), m.group(2), m.group(3).strip()
        if body.startswith("MW("):
            (indexed if idx else fields).append(name)
        elif idx:
            raise SystemExit(f"probe: unexpected indexed non-field {name}")
        else:
            values.append(name)
    return fields, indexed, values


# ----------------------------------------------------------------------------- DWARF --

BASE_KINDS = {
    ("unsigned char", 1): "u8", ("char", 1): "char", ("signed char", 1): "s8",
    ("short unsigned int", 2): "u16", ("short int", 2): "s16",
    ("unsigned int", 4): "u32", ("int", 4): "s32",
    ("long unsigned int", 8): "u64", ("long int", 8): "s64",
    ("long long unsigned int", 8): "u64", ("long long int", 8): "s64",
    ("_Bool", 1): "bool",
}


class Dwarf:
    def __init__(self, exe: Path):
        self.f = open(exe, "rb")
        self.elf = ElfFile = ELFFile(self.f)
        self.dw = ElfFile.get_dwarf_info()
        self.vars = {}
        for cu in self.dw.iter_CUs():
            for die in cu.iter_DIEs():
                if die.tag == "DW_TAG_variable" and "DW_AT_name" in die.attributes:
                    name = die.attributes["DW_AT_name"].value.decode()
                    if name.startswith("probe_v_"):
                        self.vars[name] = die
        self.typedefs = {}  # typedef name -> DIE
        for cu in self.dw.iter_CUs():
            for die in cu.iter_DIEs():
                if die.tag == "DW_TAG_typedef" and "DW_AT_name" in die.attributes:
                    self.typedefs.setdefault(die.attributes["DW_AT_name"].value.decode(), die)

    @staticmethod
    def name(die):
        a = die.attributes.get("DW_AT_name")
        return a.value.decode() if a else None

    @staticmethod
    def target(die):
        return die.get_DIE_from_attribute("DW_AT_type")

    def strip(self, die):
        """Follow typedefs and qualifiers; return (first typedef name, underlying DIE)."""
        first = None
        while die.tag in ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type"):
            if die.tag == "DW_TAG_typedef" and first is None:
                first = self.name(die)
            die = self.target(die)
        return first, die

    def byte_size(self, die):
        _, die = self.strip(die)
        if die.tag == "DW_TAG_array_type":
            return self.byte_size(self.target(die)) * self.array_count(die)
        return die.attributes["DW_AT_byte_size"].value

    @staticmethod
    def array_count(die):
        n = 1
        dims = 0
        for ch in die.iter_children():
            if ch.tag != "DW_TAG_subrange_type":
                continue
            dims += 1
            if "DW_AT_count" in ch.attributes:
                n *= ch.attributes["DW_AT_count"].value
            else:
                n *= ch.attributes["DW_AT_upper_bound"].value + 1
        if dims != 1:
            raise SystemExit("probe: multi-dimensional array member")
        return n

    def kind(self, die):
        """(kind, count) of a member type.  kind: u8..u64, s8..s64, char, bool, ptr,
        enum, union, or struct:<typedef name>."""
        tname, die = self.strip(die)
        if die.tag == "DW_TAG_array_type":
            k, c = self.kind(self.target(die))
            if c != 1:
                raise SystemExit("probe: array of arrays")
            return k, self.array_count(die)
        if die.tag == "DW_TAG_base_type":
            key = (self.name(die), die.attributes["DW_AT_byte_size"].value)
            if key not in BASE_KINDS:
                raise SystemExit(f"probe: unknown base type {key}")
            return BASE_KINDS[key], 1
        if die.tag == "DW_TAG_pointer_type":
            return "ptr", 1
        if die.tag == "DW_TAG_enumeration_type":
            return "enum", 1
        if die.tag == "DW_TAG_union_type":
            return "union", 1
        if die.tag == "DW_TAG_structure_type":
            if tname is None:
                raise SystemExit("probe: member of an untypedef'd struct type")
            return "struct:" + tname, 1
        raise SystemExit(f"probe: unhandled member type {die.tag}")

    def members(self, type_die):
        _, s = self.strip(type_die)
        if s.tag != "DW_TAG_structure_type":
            raise SystemExit(f"probe: not a struct: {s.tag}")
        out = []
        for m in s.iter_children():
            if m.tag != "DW_TAG_member":
                continue
            if "DW_AT_bit_size" in m.attributes:
                raise SystemExit("probe: bit-field member")
            name = self.name(m)
            if name is None:
                raise SystemExit("probe: anonymous member")
            loc = m.attributes["DW_AT_data_member_location"].value
            if not isinstance(loc, int):
                raise SystemExit("probe: non-constant member location")
            kind, count = self.kind(self.target(m))
            out.append([name, loc, self.byte_size(self.target(m)), kind, count])
        return out


# ----------------------------------------------------------------------------- passes --

def c_line(tag, name, *exprs):
    fmt = "\\t".join(["%s", "%s"] + ["%lld"] * len(exprs))
    args = ", ".join([f'"{tag}"', f'"{name}"'] + [f"(long long)({e})" for e in exprs])
    return f'  printf("{fmt}\\n", {args});'


def pass1_source(structs, kernel, doc):
    """Declares one variable per struct (for DWARF) and prints every named constant."""
    lines = ['#include "probe.h"']
    for i, s in enumerate(structs):
        lines.append(f"{s} probe_v_{i};")
    lines.append("int main(void) {")
    for esc_hdr, pat in ESCAPE_HEADERS:
        for n in names_in(kernel / esc_hdr, pat):
            lines.append(c_line("escape", n, n))
    for esc, st, count in NV_IOCTLS:
        t = f"{st}[{count}]" if count else st
        key = f"{esc}({st}[{count}])" if count else f"{esc}({st})"
        lines.append(c_line("nv_ioctl", key, esc, f"_IOWR(NV_IOCTL_MAGIC, {esc}, {t})",
                            f"sizeof({t})", count or 1))
    for cmd, _ in UVM_IOCTLS:
        lines.append(c_line("uvm_ioctl", cmd, cmd))
    for cmd, _ in CTRL_CMDS:
        lines.append(c_line("ctrl", cmd, cmd))
    for c in CLASSES:
        lines.append(c_line("class", c, c))
    for prefix, ms in METHODS.items():
        for m in ms:
            lines.append(c_line("method", f"{prefix}:{m}", f"{prefix}_{m}"))
    for c in CONSTANTS:
        lines.append(c_line("const", c, c))
    for b in BITFIELDS:
        lines.append(c_line("bits", b, f"1 ? {b}", f"0 ? {b}"))
    for s in status_names(kernel / STATUS_HEADER):
        lines.append(c_line("status", s, s))
    for label, hdr, prefix, _bits in QMDS:
        fields, indexed, values = qmd_names(doc / hdr, prefix)
        for f in fields:
            lines.append(c_line("qmd_field", f"{label}:{f[len(prefix):]}", f"1 ? {f}", f"0 ? {f}"))
        for f in indexed:
            for i in range(QMD_INDEX_PROBE):
                lines.append(c_line("qmd_ifield", f"{label}:{f[len(prefix):]}:{i}",
                                    f"1 ? {f}({i})", f"0 ? {f}({i})"))
        for v in values:
            lines.append(c_line("qmd_value", f"{label}:{v[len(prefix):]}", v))
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


def pass2_source(layouts):
    """sizeof/_Alignof/offsetof for every struct and member DWARF reported."""
    lines = ['#include "probe.h"', "int main(void) {"]
    for s, fields in layouts.items():
        lines.append(c_line("struct", s, f"sizeof({s})", f"_Alignof({s})"))
        for name, *_ in fields:
            lines.append(c_line("member", f"{s}.{name}", f"offsetof({s}, {name})",
                                f"sizeof((({s} *)0)->{name})"))
    lines.append("  return 0;\n}")
    return "\n".join(lines) + "\n"


def parse_output(text):
    out = []
    for line in text.splitlines():
        tag, name, *vals = line.split("\t")
        out.append((tag, name, [int(v) for v in vals]))
    return out


def _qmd_counts(fields, ifields, bits):
    """How many instances each indexed field FIELD(i) has.

    The headers give FIELD(i) as a formula without a range, so the count is inferred:
    families with the same stride whose instance 0 lies within one stride of each other
    form one record (e.g. a constant buffer's address, size and flags).  A record's
    instance i (i > 0) exists while none of its families' bits leave the image, overlap
    a non-indexed field, or overlap instance 0 of another record.  Afterwards every
    instance of every family must be disjoint from every other field, or the probe stops
    and a person must look."""
    def stride(inst):
        return inst[1][1] - inst[0][1]

    for fam, inst in ifields.items():
        for i in range(QMD_INDEX_PROBE):
            if inst[i][1] != inst[0][1] + i * stride(inst) or \
               inst[i][0] - inst[i][1] != inst[0][0] - inst[0][1]:
                raise SystemExit(f"probe: {fam}(i) is not a plain stride")
    records = []  # lists of family names
    for fam in sorted(ifields, key=lambda f: (stride(ifields[f]), ifields[f][0][1])):
        st, base = stride(ifields[fam]), ifields[fam][0][1]
        for rec in records:
            r0 = ifields[rec[0]]
            if stride(r0) == st and 0 <= base - r0[0][1] < st:
                rec.append(fam)
                break
        else:
            records.append([fam])
    counts = {}
    for rec in records:
        others = [(ifields[f][0][1], ifields[f][0][0]) for r in records if r is not rec for f in r]
        occupied = [(lo, hi) for hi, lo in fields.values()] + others
        n = 1
        while n < QMD_INDEX_PROBE:
            spans = [(ifields[f][n][1], ifields[f][n][0]) for f in rec]
            if any(hi >= bits or any(not (hi < a or lo > b) for a, b in occupied) for lo, hi in spans):
                break
            n += 1
        if n == QMD_INDEX_PROBE:
            raise SystemExit(f"probe: {rec} fills all {QMD_INDEX_PROBE} probed instances")
        for f in rec:
            counts[f] = n
    spans = [(lo, hi, f) for f, (hi, lo) in fields.items()]
    for fam, n in counts.items():
        spans += [(ifields[fam][i][1], ifields[fam][i][0], f"{fam}({i})") for i in range(n)]
    spans.sort()
    overlaps = []
    for (a_lo, a_hi, a), (b_lo, b_hi, b) in zip(spans, spans[1:]):
        if b_lo <= a_hi:
            overlaps.append(f"{a} [{a_hi}:{a_lo}] and {b} [{b_hi}:{b_lo}]")
    if overlaps:
        raise SystemExit("probe: QMD fields overlap:\n  " + "\n  ".join(overlaps))
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", required=True, type=Path, help="open-gpu-kernel-modules tree at --tag")
    ap.add_argument("--kernel-tag", required=True)
    ap.add_argument("--kernel-commit", help="default: git rev-parse HEAD in --kernel")
    ap.add_argument("--doc", required=True, type=Path, help="open-gpu-doc tree")
    ap.add_argument("--doc-commit", help="default: git rev-parse HEAD in --doc")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    for tree, attr in ((args.kernel, "kernel_commit"), (args.doc, "doc_commit")):
        if getattr(args, attr) is None:
            r = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], text=True, capture_output=True)
            if r.returncode != 0:
                raise SystemExit(f"probe: {tree} is not a git checkout; pass --{attr.replace('_', '-')}")
            setattr(args, attr, r.stdout.strip())

    with tempfile.TemporaryDirectory(prefix="nvprobe") as tmp:
        tmp = Path(tmp)
        # pass 1
        exe1 = compile_c(pass1_source(STRUCTS, args.kernel, args.doc), tmp, "pass1",
                         args.kernel, args.doc, debug=True)
        rows = parse_output(run([str(exe1)]).stdout)
        dw = Dwarf(exe1)
        layouts = {}
        pending = list(STRUCTS)
        while pending:
            s = pending.pop(0)
            if s in layouts:
                continue
            die = dw.vars.get(f"probe_v_{STRUCTS.index(s)}") if s in STRUCTS else None
            tdie = dw.target(die) if die is not None else dw.typedefs.get(s)
            if tdie is None:
                raise SystemExit(f"probe: no DWARF type for {s}")
            layouts[s] = dw.members(tdie)
            for f in layouts[s]:
                if f[3].startswith("struct:"):
                    pending.append(f[3][len("struct:"):])
        # pass 2
        exe2 = compile_c(pass2_source(layouts), tmp, "pass2", args.kernel, args.doc)
        rows2 = parse_output(run([str(exe2)]).stdout)
        deps = header_deps(args.kernel, args.doc, tmp)
        gcc = run(["gcc", "--version"]).stdout.splitlines()[0]
        machine = run(["gcc", "-dumpmachine"]).stdout.strip()

    structs = {}
    for tag, name, vals in rows2:
        if tag == "struct":
            structs[name] = {"size": vals[0], "align": vals[1], "fields": layouts[name]}
    for tag, name, vals in rows2:
        if tag == "member":
            s, m = name.split(".", 1)
            f = next(f for f in structs[s]["fields"] if f[0] == m)
            if (f[1], f[2]) != (vals[0], vals[1]):
                raise SystemExit(f"probe: DWARF and offsetof disagree on {name}: {f[1:3]} vs {vals}")

    g = {
        "escapes": {}, "nv_ioctls": {}, "uvm_ioctls": {}, "ctrl_cmds": {}, "classes": {},
        "methods": {}, "constants": {}, "bitfields": {}, "status_codes": {}, "qmd": {},
    }
    uvm_params = dict(UVM_IOCTLS)
    ctrl_params = dict(CTRL_CMDS)
    ioctl_structs = {(f"{e}({s}[{c}])" if c else f"{e}({s})"): s for e, s, c in NV_IOCTLS}
    qmd_raw = {label: {"fields": {}, "ifields": {}, "values": {}} for label, *_ in QMDS}
    for tag, name, vals in rows:
        if tag == "escape":
            g["escapes"][name] = vals[0]
        elif tag == "nv_ioctl":
            esc, st = name.split("(", 1)[0], ioctl_structs[name]
            key = f"{esc}({st}[{vals[3]}])" if "[" in name else name
            g["nv_ioctls"][key] = {"escape": esc, "nr": vals[0], "cmd": vals[1], "size": vals[2],
                                  "count": vals[3], "struct": st}
        elif tag == "uvm_ioctl":
            g["uvm_ioctls"][name] = {"cmd": vals[0], "params": uvm_params[name]}
        elif tag == "ctrl":
            g["ctrl_cmds"][name] = {"cmd": vals[0], "params": ctrl_params[name]}
        elif tag == "class":
            g["classes"][name] = vals[0]
        elif tag == "method":
            prefix, m = name.split(":")
            g["methods"].setdefault(prefix, {})[m] = vals[0]
        elif tag == "const":
            g["constants"][name] = vals[0]
        elif tag == "bits":
            g["bitfields"][name] = vals
        elif tag == "status":
            g["status_codes"][name] = vals[0]
        elif tag == "qmd_field":
            label, f = name.split(":")
            qmd_raw[label]["fields"][f] = vals
        elif tag == "qmd_ifield":
            label, f, i = name.split(":")
            qmd_raw[label]["ifields"].setdefault(f, {})[int(i)] = vals
        elif tag == "qmd_value":
            label, v = name.split(":")
            qmd_raw[label]["values"][v] = vals[0]
    for label, hdr, prefix, bits in QMDS:
        raw = qmd_raw[label]
        counts = _qmd_counts(raw["fields"], raw["ifields"], bits)
        fields = dict(raw["fields"])
        for fam, n in counts.items():
            for i in range(n):
                fields[f"{fam}({i})"] = raw["ifields"][fam][i]
        g["qmd"][label] = {"header": hdr, "prefix": prefix, "bits": bits,
                           "fields": fields, "indexed_counts": counts, "values": raw["values"]}
    g["structs"] = structs
    g["source"] = {
        "open-gpu-kernel-modules": {"url": "https://github.com/NVIDIA/open-gpu-kernel-modules",
                                    "tag": args.kernel_tag, "commit": args.kernel_commit},
        "open-gpu-doc": {"url": "https://github.com/NVIDIA/open-gpu-doc", "commit": args.doc_commit},
        "include_dirs": list(KERNEL_INCLUDE_DIRS) + ["open-gpu-doc:" + DOC_INCLUDE_DIR],
        "headers": deps,
        "ioctl_pairing": "kernel-open/nvidia/nv.c nvidia_ioctl, src/nvidia/arch/nvalloc/unix/src/escape.c RmIoctl",
        "compiler": gcc,
        "target": machine,
        "generator": "tests/nvdrv_layout_probe/probe.py",
    }
    args.out.write_text(json.dumps(g, indent=1, sort_keys=True) + "\n")
    print(f"probe: wrote {args.out}: {len(structs)} structs, "
          f"{sum(len(v['fields']) for v in structs.values())} fields, "
          f"{len(g['constants'])} constants, {len(g['bitfields'])} bit ranges, "
          + ", ".join(f"QMD {k}: {len(v['fields'])} fields" for k, v in g["qmd"].items()))


if __name__ == "__main__":
    main()
