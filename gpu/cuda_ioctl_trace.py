#!/usr/bin/env python3
"""Record what CUDA's own driver says to the kernel for two tiny launches, and decode it.

For a machine with an NVIDIA GPU and libcuda (the first thing to run on an H200, before our own
executable: Hopper has no public raw-ioctl launcher, so this is where its facts come from):

    python3 gpu/cuda_ioctl_trace.py [--out DIR] [--libcuda PATH] [--learner independent_state]
    python3 gpu/cuda_ioctl_trace.py --out DIR --report-only     (DIR/report.txt again, no GPU)

1. compiles gpu/ioctl_sniffer.c with gcc into DIR/sniffer.so (an LD_PRELOAD library);
2. runs this script again (`--inner`) under it: CUDA's driver API loads one of alphac's cubins
   (the first update kernel of the learner, assembled by ptxas for the device's SM) and a kernel
   that needs local memory (SPILL_PTX: a 1 KiB .local array indexed at run time), and launches
   alphac's, then the spilling one, once each (channels.json written after each); the sniffer
   logs every open, ioctl (argument bytes before and after, and the structure RM_ALLOC / RM_CONTROL point to: for RM_ALLOC sized
   by the class, ALLOC_PARAMS, since libcuda passes paramsSize 0 and the RM sizes it by class)
   and mmap on /dev/nvidia*. Before the first launch and after each, the inner run reads every
   channel's GPPut from its USERD (gpputs), so each ring entry is tagged with the launch that
   added it; after the last it reads the GPFIFO ring of every channel (NV_CHANNEL_ALLOC_PARAMS:
   the ring's GPU VA, the USERD memory and offset), the push buffers the entries point to,
   every QMD they launch (one in memory, SEND_PCAS_A, or one written inline,
   SET_INLINE_QMD_ADDRESS_A/B then LOAD_INLINE_QMD_DATA(i), reassembled from the method stream)
   and each QMD's constant bank 0, into DIR/channels.json. GPU VAs are read through the CPU
   mapping of the memory they are in (mappings: UVM_MAP_EXTERNAL_ALLOCATION for the GPU side,
   RM_MAP_MEMORY then mmap for the CPU side; the same address where libcuda maps it so); every
   read goes through the sniffer's fault-guarded sniff_read, which also reads video memory
   mapped through BAR1;
3. decodes both with alphac's ABI tables into DIR/report.txt: each call by name (escape, class,
   control, UVM command, status, the RM_ALLOC parameters' size or why they are missing), the
   channels as the log alone shows them (group, objects, work-submit token, ring), each
   push-buffer method by name (following SET_OBJECT through a channel's submits), each QMD field
   by name, the local-memory setup of libcuda (every SET_SHADER_LOCAL_MEMORY* method and each
   QMD's local-memory fields, by launch) beside alphac's, the QMD alphac builds for the same
   kernel beside libcuda's, field by field, and the first dwords of both constant banks 0.

A channel whose NV_CHANNEL_ALLOC_PARAMS the log lacks (the log of 2026-12-04, recorded before
the sniffer sized parameters by class) is reported as such ("missing"), never as ring 0.
Exit codes: 0 recorded; 2 it cannot run here (no gcc, no libcuda, no device, no ptxas).
Nothing here runs without a GPU; tests/test_gpu_scripts.py builds the sniffer and checks it on
ioctls to /dev/null and, with the decoder, on files standing in for the device nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu")]

from alphac.nvdrv import abi                                # noqa: E402
from nvdrv_decode import decode_entry, unpack_qmd           # noqa: E402

GPFIFO_CLASSES = {abi.CLASSES[n] for n in ("AMPERE_CHANNEL_GPFIFO_A", "HOPPER_CHANNEL_GPFIFO_A")}
CLASS_NAME = {v: k for k, v in abi.CLASSES.items()}
CTRL_NAME = {c.cmd: n for n, c in abi.CTRL_CMDS.items()}
UVM_NAME = {io.cmd: n for n, io in abi.UVM_IOCTLS.items()}
NV_BY_CMD = {io.cmd: io for io in abi.NV_IOCTLS.values()}


class Unavailable(Exception):
    pass


# The parameter structure the RM copies in for an RM_ALLOC of each class. The RM sizes it by
# hClass (serverAllocApiCopyIn: rmapiParamsCopyInit looks the class up in its resource list),
# whatever NVOS21/NVOS64.paramsSize says, and libcuda passes paramsSize 0 for every class [read:
# libcuda log 2026-12-04]: so the sniffer must take the size from here. Only classes whose
# structure is in abi.STRUCTS; another class's parameters are logged as not recorded.
ALLOC_PARAMS = {
    "NV01_DEVICE_0": "NV0080_ALLOC_PARAMETERS", "NV20_SUBDEVICE_0": "NV2080_ALLOC_PARAMETERS",
    "FERMI_VASPACE_A": "NV_VASPACE_ALLOCATION_PARAMETERS",
    "NV01_MEMORY_SYSTEM": "NV_MEMORY_ALLOCATION_PARAMS", "NV1_MEMORY_USER": "NV_MEMORY_ALLOCATION_PARAMS",
    "NV01_MEMORY_VIRTUAL": "NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS",
    "KEPLER_CHANNEL_GROUP_A": "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS",
    "FERMI_CONTEXT_SHARE_A": "NV_CTXSHARE_ALLOCATION_PARAMETERS",
    "AMPERE_CHANNEL_GPFIFO_A": "NV_CHANNEL_ALLOC_PARAMS", "HOPPER_CHANNEL_GPFIFO_A": "NV_CHANNEL_ALLOC_PARAMS",
    "HOPPER_USERMODE_A": "NV_HOPPER_USERMODE_A_PARAMS",
}


def sniffer_env(log: Path) -> dict[str, str]:
    """What the sniffer needs from the ABI tables: UVM argument sizes, the nested pointers (with
    hClass's offset for RM_ALLOC) and the parameter size of each class (ALLOC_PARAMS)."""
    uvm = ",".join(f"{io.cmd}:{abi.STRUCTS[io.params].size}" for io in abi.UVM_IOCTLS.values() if io.params)
    nested = []
    for st, ptr, size in (("NVOS21_PARAMETERS", "pAllocParms", "paramsSize"),
                          ("NVOS64_PARAMETERS", "pAllocParms", "paramsSize"),
                          ("NVOS54_PARAMETERS", "params", "paramsSize")):
        ctl = st == "NVOS54_PARAMETERS"
        nr = abi.NV_ESCAPES["NV_ESC_RM_CONTROL" if ctl else "NV_ESC_RM_ALLOC"]
        s = abi.STRUCTS[st]
        nested.append(f"{nr}:{s.size}:{s.offset(ptr)}:{s.offset(size)}" + ("" if ctl else f":{s.offset('hClass')}"))
    sizes = ",".join(f"{abi.CLASSES[c]}:{abi.STRUCTS[p].size}" for c, p in sorted(ALLOC_PARAMS.items()))
    return {"SNIFF_LOG": str(log), "SNIFF_UVM_SIZES": uvm, "SNIFF_NESTED": ",".join(nested),
            "SNIFF_ALLOC_SIZES": sizes}


def build_sniffer(out: Path) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise Unavailable("no C compiler (gcc) to build the sniffer")
    so = out / "sniffer.so"
    run = subprocess.run([gcc, "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-pthread", "-o", str(so),
                          str(ROOT / "gpu" / "ioctl_sniffer.c"), "-ldl"], capture_output=True, text=True)
    if run.returncode:
        raise Unavailable(f"the sniffer does not build: {run.stderr.strip()}")
    return so


class TraceError(ValueError):
    """A logged structure too short for the field asked of it (never read as zeros)."""


def field(data: bytes, struct_name: str, path: str) -> int:
    from alphac.nvdrv.conversation import locate
    off, size = locate(struct_name, path)
    if len(data) < off + size:
        raise TraceError(f"{struct_name}.{path} is at bytes {off}..{off + size}, but only {len(data)} were logged")
    return int.from_bytes(data[off:off + size], "little")


def load_log(path: Path) -> list[dict]:
    """The sniffer's records (a .gz is read through gzip)."""
    import gzip
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def logged(e: dict, key: str) -> bytes | None:
    """The bytes the sniffer logged under `key`; None when it could not read them (a NULL pointer:
    "unreadable"; a faulting one: "fault", with `key`_fault naming the signal)."""
    v = e.get(key)
    return None if v is None or v in ("unreadable", "fault") else bytes.fromhex(v)


def took(e: dict) -> str:
    """" (12.3 ms)" for an ioctl the sniffer timed at 1 ms or more (its "ns"), else ""."""
    return f" ({e['ns'] / 1e6:.1f} ms)" if e.get("ns", 0) >= 1_000_000 else ""


def slowest(log: list[dict], n: int = 12) -> list[str]:
    """The n slowest timed ioctls, slowest first, and the sum of all: where libcuda's start-up
    goes (issue 42: its UVM_REGISTER_GPU beside alphac's `uvm-register` event)."""
    timed = sorted((e for e in log if e["call"] == "ioctl" and "ns" in e), key=lambda e: (-e["ns"], e["seq"]))
    if not timed:
        return []
    total = sum(e["ns"] for e in timed) / 1e6
    return ["", f"## the slowest ioctls ({len(timed)} timed, {total:.1f} ms in all)"] + [describe(e) for e in timed[:n]]


def describe(e: dict) -> str:
    """One line for one logged call, named by the ABI tables."""
    if e["call"] != "ioctl":
        extra = f" {e['addr']:#x}+{e['len']:#x} -> {e['result']:#x}" if e["call"] == "mmap" else ""
        return f"{e['seq']:5d} {e['call']:<6} {e['path']} fd {e['fd']}{extra}"
    req, out = e["req"], logged(e, "out") or b""
    head = f"{e['seq']:5d} ioctl  {e['path']} {req:#010x} ret {e['ret']}" + took(e) + \
        "".join(f" ({k} {e[k + '_fault']} at {e[k + '_addr']:#x})" for k in ("in", "out") if e.get(k) == "fault")
    if "uvm" in e["path"]:
        name = UVM_NAME.get(req, "UVM?")
        st = abi.UVM_IOCTLS[name].params if name in abi.UVM_IOCTLS else None
        status = field(out, st, "rmStatus") if st and out else None
        return f"{head} {name} rmStatus {status}"
    io = NV_BY_CMD.get(req)
    if io is None:
        return f"{head} escape {req & 0xff:#x} size {(req >> 16) & 0x3fff} (not in abi.NV_IOCTLS)"
    what = io.escape
    if out and io.struct in ("NVOS21_PARAMETERS", "NVOS64_PARAMETERS"):
        cls = field(out, io.struct, "hClass")
        what += (f" {CLASS_NAME.get(cls, hex(cls))} parent {field(out, io.struct, 'hObjectParent'):#x}"
                 f" -> {field(out, io.struct, 'hObjectNew'):#x} status {field(out, io.struct, 'status'):#x}")
        params, why = alloc_params(e)
        what += f" params {len(params)} bytes" + (" (by class)" if e.get("nested_by") == "class" else "") \
            if params else f" params not recorded ({why})" if why else ""
    elif out and io.struct == "NVOS54_PARAMETERS":
        cmd = field(out, io.struct, "cmd")
        what += f" {CTRL_NAME.get(cmd, hex(cmd))} on {field(out, io.struct, 'hObject'):#x} status {field(out, io.struct, 'status'):#x}"
    return f"{head} {what}"


# -- what the log says about memory and channels ------------------------------------------------
def alloc_params(e: dict) -> tuple[bytes | None, str | None]:
    """The parameters an RM_ALLOC record carries (after the call), or None and why not: None,
    None when the call had none (a NULL pointer)."""
    if "nested_out" not in e:
        return None, None
    raw = logged(e, "nested_out")
    if raw is None:
        return None, "unreadable"
    if raw:
        return raw, None
    if e.get("nested_by") == "unknown-class":
        return None, "a class not in cuda_ioctl_trace.ALLOC_PARAMS"
    return None, ("paramsSize 0: the RM sizes the parameters by class, and this log's sniffer "
                  "took the caller's size")


def allocations(log: list[dict]) -> list[dict]:
    """Every successful RM_ALLOC: seq, class (name or hex), handle, parent, params (bytes or
    None) and why they are missing."""
    out = []
    for e in log:
        io = NV_BY_CMD.get(e.get("req")) if e["call"] == "ioctl" and "uvm" not in e["path"] else None
        raw = logged(e, "out") if io else None
        if not io or io.escape != "NV_ESC_RM_ALLOC" or raw is None or field(raw, io.struct, "status"):
            continue
        cls = field(raw, io.struct, "hClass")
        params, why = alloc_params(e)
        out.append({"seq": e["seq"], "class": CLASS_NAME.get(cls, f"{cls:#x}"), "handle": field(raw, io.struct, "hObjectNew"),
                    "parent": field(raw, io.struct, "hObjectParent"), "params": params, "missing": why})
    return out


def mappings(log: list[dict]) -> dict[str, list[dict]]:
    """Where each memory handle is mapped: "cpu" (RM_MAP_MEMORY then mmap on the fd it names:
    handle, offset into the memory, length, CPU address) and "gpu" (UVM_MAP_EXTERNAL_ALLOCATION:
    handle, offset, length, GPU VA), in log order."""
    pending: dict[int, tuple[int, int]] = {}
    cpu, gpu = [], []
    for e in log:
        if e["call"] == "mmap" and e["fd"] in pending and e["result"] not in (0, (1 << 64) - 1):
            h, off = pending.pop(e["fd"])
            cpu.append({"handle": h, "offset": off, "length": e["len"], "at": e["result"]})
        out = logged(e, "out") if e["call"] == "ioctl" else None
        if out is None:
            continue
        if "uvm" in e["path"]:
            if UVM_NAME.get(e["req"]) == "UVM_MAP_EXTERNAL_ALLOCATION":
                st = "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS"
                gpu.append({"handle": field(out, st, "hMemory"), "offset": field(out, st, "offset"),
                            "length": field(out, st, "length"), "at": field(out, st, "base")})
            continue
        io = NV_BY_CMD.get(e["req"])
        if io and io.escape == "NV_ESC_RM_MAP_MEMORY":
            pending[field(out, io.struct, "fd")] = (field(out, io.struct, "params.hMemory"),
                                                    field(out, io.struct, "params.offset"))
    return {"cpu": cpu, "gpu": gpu}


def gpu_to_cpu(maps: dict[str, list[dict]], va: int) -> int:
    """The CPU address of GPU VA `va`: through the memory it is in when that memory is mapped for
    the CPU too (the last mapping of each), else `va` itself (UVM: libcuda maps its allocations at
    the same address for both, which the log shows for every one of them)."""
    cpu = {m["handle"]: m for m in maps["cpu"]}
    for g in reversed(maps["gpu"]):
        c = cpu.get(g["handle"])
        if g["at"] <= va < g["at"] + g["length"] and c is not None:
            at = va - g["at"] + g["offset"]
            if c["offset"] <= at < c["offset"] + c["length"]:
                return c["at"] + at - c["offset"]
    return va


def channels(log: list[dict]) -> list[dict]:
    """What the log says about every GPFIFO channel: its handle, class, group, the objects bound
    to it, its work-submit token, and its ring and USERD from NV_CHANNEL_ALLOC_PARAMS when the log
    holds them ("missing" says why not)."""
    allocs = allocations(log)
    tokens = {}
    for e in log:
        io = NV_BY_CMD.get(e.get("req")) if e["call"] == "ioctl" and "uvm" not in e["path"] else None
        out, nested = (logged(e, "out"), logged(e, "nested_out")) if io else (None, None)
        if io and io.escape == "NV_ESC_RM_CONTROL" and out and nested and \
                CTRL_NAME.get(field(out, io.struct, "cmd")) == "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN":
            tokens[field(out, io.struct, "hObject")] = field(nested, "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS",
                                                             "workSubmitToken")
    chans = []
    for a in allocs:
        if a["class"] not in ("AMPERE_CHANNEL_GPFIFO_A", "HOPPER_CHANNEL_GPFIFO_A"):
            continue
        ch = {"seq": a["seq"], "class": a["class"], "handle": a["handle"], "group": a["parent"],
              "objects": [(b["class"], b["handle"]) for b in allocs if b["parent"] == a["handle"]],
              "token": tokens.get(a["handle"]), "missing": a["missing"], "params": None}
        p = a["params"]
        if p is not None:
            if len(p) < abi.STRUCTS["NV_CHANNEL_ALLOC_PARAMS"].size:
                ch["missing"] = f"{len(p)} bytes logged, NV_CHANNEL_ALLOC_PARAMS is {abi.STRUCTS['NV_CHANNEL_ALLOC_PARAMS'].size}"
            else:
                ch["params"] = {k: field(p, "NV_CHANNEL_ALLOC_PARAMS", f) for k, f in (
                    ("ring", "gpFifoOffset"), ("entries", "gpFifoEntries"), ("buffer", "hObjectBuffer"),
                    ("userd_mem", "hUserdMemory[0]"), ("userd_off", "userdOffset[0]"), ("flags", "flags"))}
        chans.append(ch)
    return chans


# -- after a launch, inside the traced process ----------------------------------------------------
def gpputs(log: list[dict], read) -> dict[int, int | None]:
    """Each channel's GPPut now (channel handle -> value; None when its USERD is not known or not
    readable): read between launches, it says which ring entries each launch added. USERD is in
    the memory hUserdMemory[0] names (libcuda's own page per channel), or, where that is 0, the
    RM's, mapped through the channel's handle."""
    maps, out = mappings(log), {}
    cpu = {m["handle"]: m for m in maps["cpu"]}
    for ch in channels(log):
        p = ch["params"]
        m = cpu.get(p["userd_mem"] or ch["handle"]) if p else None
        raw = read(m["at"] + p["userd_off"] - m["offset"] + abi.USERD_GPPUT_OFFSET, 4) if m else None
        out[ch["handle"]] = struct.unpack("<I", raw)[0] if raw else None
    return out


def dump_channels(log: list[dict], read, marks: list[tuple[str, dict]] = ()) -> list[dict]:
    """Every GPFIFO channel in the log (see channels()): its ring up to GPPut and the push buffers
    its entries point to. `read(addr, n)` reads our own memory (None when unreadable); GPU VAs
    are read through gpu_to_cpu. `marks`: (name, gpputs() after it), in order ("set-up" before the
    first launch, then each launch's name): each submit is tagged ("launch") with the first mark
    whose GPPut is past it (None when there are no marks or it came after the last)."""
    maps = mappings(log)
    chans = channels(log)
    for ch in chans:
        p = ch["params"]
        ch["gpput"], ch["submits"] = None, []
        if p is None:
            continue
        put = gpputs(log, read).get(ch["handle"])
        ch["gpput"] = put
        arch = next(a for a in abi.ARCHES.values() if a.gpfifo == ch["class"])
        for i in range(min(put or 0, p["entries"])):
            raw = read(gpu_to_cpu(maps, p["ring"] + 8 * i), 8)
            if raw is None:
                ch["missing"] = f"ring entry {i} at {p['ring'] + 8 * i:#x} unreadable"
                break
            entry = struct.unpack("<Q", raw)[0]
            if entry == 0:
                continue
            va, dwords = decode_entry(arch, entry)
            words = read(gpu_to_cpu(maps, va), 4 * dwords)
            launch = None
            for name, after in marks:
                if (after.get(ch["handle"]) or 0) > i:
                    launch = name
                    break
            ch["submits"].append({"index": i, "entry": entry, "va": va, "dwords": dwords, "launch": launch,
                                  "words": words.hex() if words else None})
    return chans


def method_stream(words: list[int]) -> list[tuple[int, int, int]]:
    """(subchannel, method offset, data) for a push buffer, by abi.BITFIELDS (NVC56F_DMA_*)."""
    def bits(w, name):
        hi, lo = abi.BITFIELDS[name]
        return (w >> lo) & ((1 << (hi - lo + 1)) - 1)
    out, i = [], 0
    while i < len(words):
        h = words[i]
        op, sub = bits(h, "NVC56F_DMA_SEC_OP"), bits(h, "NVC56F_DMA_METHOD_SUBCHANNEL")
        addr = bits(h, "NVC56F_DMA_METHOD_ADDRESS") << 2
        if op == abi.CONSTANTS["NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD"]:
            out.append((sub, addr, bits(h, "NVC56F_DMA_IMMD_DATA")))
            i += 1
            continue
        n = bits(h, "NVC56F_DMA_METHOD_COUNT")
        for k in range(n):
            step = k if op == 1 else (0 if op == 3 else min(k, 1))
            out.append((sub, addr + 4 * step, words[i + 1 + k] if i + 1 + k < len(words) else -1))
        i += 1 + max(n, 0)
        if n == 0 and op not in (1, 3, 5):
            break
    return out


HOST_METHODS_END = 0x100       # methods below this offset go to the host (the channel's own class)


def _method_names(arch: abi.Arch) -> dict[str, dict[int, str]]:
    """Method names by table: "host", "compute" (with LOAD_INLINE_QMD_DATA(i), see
    INLINE_QMD_DATA), "copy"."""
    compute = {v: k for k, v in abi.METHODS[arch.compute_methods].items()}
    base = INLINE_QMD_DATA(arch)
    compute |= {base + 4 * i: f"LOAD_INLINE_QMD_DATA({i})" for i in range(abi.QMD_LAYOUTS[arch.qmd].nbytes // 4)}
    return {"host": {v: k for k, v in abi.METHODS[arch.host_methods].items()}, "compute": compute,
            "copy": {v: k for k, v in abi.METHODS[arch.copy_methods].items()}}


def binding() -> dict[int, str]:
    """Which table names each subchannel's methods, as SET_OBJECTs bind them (empty: none seen
    yet). A channel's SET_OBJECTs (in its set-up push buffer, usually) hold for the push buffers
    after: pass one dict through all of a channel's submits in ring order. A subchannel never
    bound is read as tinygrad binds them (4 copy, every other compute; see table_of): the RM may
    bind the engines itself (NV906F_CTRL_GET_CLASS_ENGINEID answers for each object libcuda
    allocates on a channel, in the log of 2026-12-04), so libcuda's push buffers need not carry
    a SET_OBJECT at all [inferred]."""
    return {}


def table_of(bound: dict[int, str], sub: int) -> str:
    """The method table of subchannel `sub` (above the host's methods): its SET_OBJECT's class,
    else "copy" on 4 and "compute" on any other (tinygrad's binding: 1 compute, 4 copy)."""
    return bound.get(sub) or ("copy" if sub == 4 else "compute")


def bind(arch: abi.Arch, bound: dict[int, str], sub: int, addr: int, data: int) -> None:
    """Follow a SET_OBJECT on a subchannel (other than the host's, 0)."""
    if addr == abi.METHODS[arch.compute_methods]["SET_OBJECT"] and sub != 0:
        by_class = {abi.CLASSES[arch.compute]: "compute", abi.CLASSES[arch.dma_copy]: "copy"}
        bound[sub] = by_class.get(data & 0xffff, f"class {data & 0xffff:#x}")     # unnamed


def methods(arch: abi.Arch, words: list[int], bound: dict[int, str] | None = None) -> list[tuple[int, str, int]]:
    """(subchannel, method name, data) for a push buffer, by abi.BITFIELDS and abi.METHODS: a
    method below 0x100 is the host's on any subchannel; above, it is named by the class bound to
    its subchannel (`bound`, see binding(); updated by the SET_OBJECTs here)."""
    names = _method_names(arch)
    bound = binding() if bound is None else bound
    out = []
    for sub, a, data in method_stream(words):
        bind(arch, bound, sub, a, data)
        table = "host" if a < HOST_METHODS_END else table_of(bound, sub)
        out.append((sub, names.get(table, {}).get(a, f"{a:#x}"), data))
    return out


def INLINE_QMD_DATA(arch: abi.Arch) -> int:
    """LOAD_INLINE_QMD_DATA(0): the method array right after SET_INLINE_QMD_ADDRESS_B (0x320 in
    clc7c0.h beside 0x318/0x31c; not in abi.METHODS, whose golden headers list only what the
    owners send) [inferred for Hopper's NVCBC0]."""
    return abi.METHODS[arch.compute_methods]["SET_INLINE_QMD_ADDRESS_B"] + 4


def cbank0_of(layout: abi.QmdLayout, fields: dict[str, int]) -> tuple[int, int]:
    """(address, bytes) of a QMD's constant bank 0, from its CONSTANT_BUFFER_ADDR/SIZE fields."""
    if "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)" in layout.fields:
        va = (fields["CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)"]
              | fields["CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)"] << 32) << 6
    else:
        va = fields["CONSTANT_BUFFER_ADDR_LOWER(0)"] | fields["CONSTANT_BUFFER_ADDR_UPPER(0)"] << 32
    return va, fields["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] << 4


MAX_CBANK = 1 << 16


def launched_qmds(arch: abi.Arch, words: list[int], read, bound: dict[int, str] | None = None) -> list[dict]:
    """Every QMD a push buffer launches, with its constant bank 0. `read(addr, n)` reads memory
    (None when it faults). A QMD is either in memory (SEND_PCAS_A = its address >> 8: read there)
    or written inline: SET_INLINE_QMD_ADDRESS_A/B (the address >> 8, upper then lower) and the
    LOAD_INLINE_QMD_DATA(i) dwords, reassembled here from the method stream (dwords never sent
    stay zero; `dwords` counts those that were), or written into memory by the compute class's
    inline-to-memory engine earlier in the same push buffer (OFFSET_OUT_UPPER/OFFSET_OUT,
    LAUNCH_DMA, then LOAD_INLINE_DATA dwords, as tinygrad's ops_nv writes QMDs and constants):
    those dwords are laid over what memory holds, since memory read after the fact may be
    GPU-only or rewritten. Each: {"how": "memory" | "inline" | "i2m", "va", "qmd": hex | None,
    "dwords", "cbank0": {"va", "size", "bytes": hex | None}}. `bound`: the channel's subchannel
    binding (see binding()), followed through this push buffer's SET_OBJECTs."""
    layout = abi.QMD_LAYOUTS[arch.qmd]
    m = abi.METHODS[arch.compute_methods]
    bound = binding() if bound is None else bound
    base, n_dw = INLINE_QMD_DATA(arch), layout.nbytes // 4
    out, inline, inline_hi, inline_va = [], None, 0, None
    sent: set[int] = set()
    i2m: dict[int, int] = {}            # inline-to-memory: dword address -> the dword written
    i2m_out, i2m_at = 0, None

    def flush():
        nonlocal inline
        if inline is not None:
            raw, seen = inline
            out.append({"how": "inline", "va": inline_va, "qmd": bytes(raw).hex(), "dwords": len(seen)})
            sent.add(inline_va)
        inline = None
    for sub, addr, data in method_stream(words):
        if addr == m["SET_OBJECT"] and sub != 0:
            bind(arch, bound, sub, addr, data)
            continue
        if table_of(bound, sub) != "compute" or addr < HOST_METHODS_END:
            continue
        if addr == m["SET_INLINE_QMD_ADDRESS_A"]:
            flush()
            inline_hi = data
        elif addr == m["SET_INLINE_QMD_ADDRESS_B"]:
            flush()
            inline_va = (inline_hi << 32 | data) << 8
            inline = (bytearray(layout.nbytes), set())
        elif base <= addr < base + 4 * n_dw and inline is not None:
            i = (addr - base) // 4
            inline[0][4 * i:4 * i + 4] = struct.pack("<I", data & 0xffffffff)
            inline[1].add(i)
        elif addr == m["OFFSET_OUT_UPPER"]:
            i2m_out = (data & 0xffffffff) << 32 | i2m_out & 0xffffffff
        elif addr == m["OFFSET_OUT"]:
            i2m_out = i2m_out >> 32 << 32 | data & 0xffffffff
        elif addr == m["LAUNCH_DMA"]:
            i2m_at = i2m_out
        elif addr == m["LOAD_INLINE_DATA"] and i2m_at is not None:
            i2m[i2m_at] = data & 0xffffffff
            i2m_at += 4
        elif addr == m["SEND_PCAS_A"]:
            flush()
            va = data << 8
            if va not in sent:
                raw = read(va, layout.nbytes)
                over = [i for i in range(n_dw) if va + 4 * i in i2m]
                if over:                 # the inline-to-memory dwords over what memory holds
                    qmd = bytearray(raw or bytes(layout.nbytes))
                    for i in over:
                        qmd[4 * i:4 * i + 4] = struct.pack("<I", i2m[va + 4 * i])
                    out.append({"how": "i2m", "va": va, "qmd": bytes(qmd).hex(), "dwords": len(over)})
                else:
                    out.append({"how": "memory", "va": va, "qmd": raw.hex() if raw else None,
                                "dwords": n_dw if raw else 0})
    flush()
    for q in out:
        if q["qmd"] is None:
            continue
        cva, size = cbank0_of(layout, unpack_qmd(layout, bytes.fromhex(q["qmd"])))
        raw = read(cva, min(size, MAX_CBANK)) if cva and size else None
        q["cbank0"] = {"va": cva, "size": size, "bytes": raw.hex() if raw else None}
    return out


# A kernel that needs local memory whatever ptxas does: a 1 KiB .local array written in a loop
# and read at an index known only at run time (out[i] = buf[(7 i + n) & 255], buf[j] = j + i).
SPILL_KERNEL = "spill_local"
SPILL_PTX = """.version 7.8
.target sm_{sm}
.address_size 64
.visible .entry spill_local(.param .u64 out, .param .u32 n)
{{
    .local .align 8 .b8 buf[1024];
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u64 %rd2, buf;
    mov.u32 %r3, 0;
FILL:
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd2, %rd3;
    add.u32 %r4, %r3, %r2;
    st.local.u32 [%rd4], %r4;
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, 256;
    @%p1 bra FILL;
    mad.lo.u32 %r5, %r2, 7, %r1;
    and.b32 %r5, %r5, 255;
    mul.wide.u32 %rd5, %r5, 4;
    add.u64 %rd6, %rd2, %rd5;
    ld.local.u32 %r6, [%rd6];
    mul.wide.u32 %rd7, %r2, 4;
    add.u64 %rd8, %rd1, %rd7;
    st.global.u32 [%rd8], %r6;
    ret;
}}
"""
SPILL_N = 5


def spill_expected(threads: int, n: int = SPILL_N) -> list[int]:
    """What spill_local writes: thread i reads buf[(7 i + n) & 255] = that index + i."""
    return [((7 * i + n) & 255) + i for i in range(threads)]


def after_launch(log_path: Path, read, marks, launches: list[dict]) -> dict:
    """channels.json's channels and launches, read now (after the last launch) through `read`:
    every channel's ring, push buffers, the QMDs they launch and their constant banks."""
    log = load_log(log_path)
    chans = dump_channels(log, read, marks)
    maps = mappings(log)
    for ch in chans:
        arch = next(a for a in abi.ARCHES.values() if a.gpfifo == ch["class"])
        bound = binding()
        for s in ch["submits"]:
            if not s["words"]:
                continue
            words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
            s["qmds"] = launched_qmds(arch, words, lambda va, n: read(gpu_to_cpu(maps, va), n), bound)
    for ch in chans:
        ch["objects"] = [list(o) for o in ch["objects"]]
    return {"channels": chans, "launches": launches}


def inner(args) -> int:
    import ctypes
    sys.path.insert(0, str(ROOT / "gpu"))
    from vendor_check import Cuda, CudaDevice
    from alphac.driver import compile_file
    from alphac.ptx import build
    from alphac.ptx.cubin import read_cubin
    from alphac.ptx.ptxas import assemble
    from ptx_host import Owner
    from alphac.ptx.abi import host_scalars
    cuda = Cuda(args.libcuda)
    lr = compile_file(ROOT / "examples" / f"{args.learner}.alpha").learner
    built = [b for b in build(lr, cuda.sm) if b.kernel.group is not None][:1]
    spill = assemble(SPILL_PTX.format(sm=cuda.sm), cuda.sm)
    dev = CudaDevice(cuda, {b.kernel.name: b.cubin for b in built} | {SPILL_KERNEL: spill})
    owner = Owner(dev, lr, [b.kernel for b in built])
    lib = ctypes.CDLL(None)
    lib.sniff_read.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    log_path = Path(os.environ["SNIFF_LOG"])

    def read(addr, n):
        buf = ctypes.create_string_buffer(n)
        return buf.raw if lib.sniff_read(addr, n, buf) == 0 else None
    marks = [("set-up", gpputs(load_log(log_path), read))]
    Path(args.out, "launch.mark").write_text("before the launches\n")
    base = {"sm": cuda.sm, "kernel": built[0].kernel.name, "learner": args.learner}

    def record(launches):               # channels.json as things stand (again after each launch)
        Path(args.out, "channels.json").write_text(json.dumps(base | after_launch(log_path, read, marks, launches),
                                                              indent=1))
    # 1. alphac's kernel first: its QMD is the trace's first purpose, and an error that spoils
    #    the context (a launch failure is sticky) can then come only from the second launch
    k = built[0].kernel
    values = host_scalars(lr, {s.name: tuple(s.init[:1]) for s in lr.scalar_states})
    owner.dev.launch(k, owner._args(k, n=lr.nsamples or 0, klo=0, khi=lr.groups[k.group].size,
                                    values=values), lr.groups[k.group].size)
    marks.append((k.name, gpputs(load_log(log_path), read)))
    launches = [{"kernel": k.name, "threads": lr.groups[k.group].size, "local_per_thread": built[0].image.local}]
    record(launches)
    # 2. the spilling kernel, 128 threads, then its result read back; a CUDA error is recorded
    #    as its result, with the ring as libcuda left it
    out = dev.alloc([0.0] * 64)
    local = read_cubin(spill)[SPILL_KERNEL].local
    kparams = type("K", (), {"name": SPILL_KERNEL, "params": [type("P", (), {"type": t})() for t in ("u64", "u32")]})
    got = ctypes.create_string_buffer(4 * 128)
    try:
        dev.launch(kparams, [out, SPILL_N], 128)
        cuda.call("cuMemcpyDtoH_v2", got, ctypes.c_uint64(out), ctypes.c_size_t(4 * 128))
        result = "right" if list(struct.unpack("<128I", got.raw)) == spill_expected(128) else "wrong"
    except Exception as e:                          # vendor_check.Unavailable: a CUDA error
        result = f"failed: {e}"
    marks.append((SPILL_KERNEL, gpputs(load_log(log_path), read)))
    record(launches + [{"kernel": SPILL_KERNEL, "threads": 128, "local_per_thread": local, "result": result}])
    return 0


def traced_qmd(info: dict) -> tuple[bytes, dict] | None:
    """The whole QMD libcuda launched for info["kernel"] in a channels.json (`info`): the last one
    in the submits tagged with that launch, or, in a trace without tags, the last one of all; with
    its launched_qmds entry. None when the trace holds none (no launch, or every QMD unreadable)."""
    layout = abi.QMD_LAYOUTS[abi.ARCHES[f"sm_{info['sm']}"].qmd]
    found = tagged = None
    for ch in info["channels"]:
        for s in ch.get("submits") or []:
            for q in s.get("qmds") or []:
                if q["qmd"] and q["dwords"] == layout.nbytes // 4:
                    found = bytes.fromhex(q["qmd"]), q
                    if s.get("launch") == info.get("kernel"):
                        tagged = found
    return tagged or found


def dwords_rows(raw: bytes, base: int, limit: int = 0x400) -> list[str]:
    words = struct.unpack(f"<{min(len(raw), limit) // 4}I", raw[:min(len(raw), limit) // 4 * 4])
    return [f"      {base + 32 * r:#06x}: " + " ".join(f"{w:08x}" for w in words[8 * r:8 * r + 8])
            for r in range((len(words) + 7) // 8)]


def channel_lines(log: list[dict]) -> list[str]:
    """The channels as the log alone shows them (channels())."""
    lines = ["", "## channels (from the log alone)"]
    for ch in channels(log):
        objs = ", ".join(f"{c} {h:#x}" for c, h in ch["objects"]) or "nothing"
        tok = f"{ch['token']:#x}" if ch["token"] is not None else "not asked"
        p = ch["params"]
        where = (f"ring {p['ring']:#x}, {p['entries']} entries in memory {p['buffer']:#x}; USERD memory "
                 f"{p['userd_mem']:#x} + {p['userd_off']:#x}") if p else f"NV_CHANNEL_ALLOC_PARAMS not recorded ({ch['missing']})"
        lines.append(f"    {ch['handle']:#x} {ch['class']} (seq {ch['seq']}) in group {ch['group']:#x}: {objs}; "
                     f"work-submit token {tok}; {where}")
    return lines


def local_memory_methods(arch: abi.Arch, words: list[int], bound: dict[int, str] | None = None) -> list[tuple[str, int]]:
    """The local-memory methods (SET_SHADER_LOCAL_MEMORY*) in a push buffer, in order."""
    return [(n, d) for _, n, d in methods(arch, words, bound) if n.startswith("SET_SHADER_LOCAL_MEMORY")]


def local_memory_summary(pairs: list[tuple[str, int]]) -> str:
    """The last value of each local-memory method, read as clcbc0.h names them: A/B the area's
    address (upper, lower), NON_THROTTLED_A/B its size (upper, lower) and C the SM count it is
    for, WINDOW_A/B the window (upper, lower)."""
    v = dict(pairs)
    out = []
    for label, a, b in (("area", "SET_SHADER_LOCAL_MEMORY_A", "SET_SHADER_LOCAL_MEMORY_B"),
                        ("size", "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B"),
                        ("window", "SET_SHADER_LOCAL_MEMORY_WINDOW_A", "SET_SHADER_LOCAL_MEMORY_WINDOW_B")):
        if a in v or b in v:
            out.append(f"{label} {v.get(a, 0) << 32 | v.get(b, 0):#x}")
    if "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C" in v:
        out.append(f"NON_THROTTLED_C {v['SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C']:#x}")
    return ", ".join(out) or "none"


def qmd_local_fields(layout: abi.QmdLayout, qmd: bytes) -> str:
    f = unpack_qmd(layout, qmd)
    return ", ".join(f"{k}={f[k]:#x}" for k in layout.fields if "LOCAL_MEMORY" in k)


def local_memory_lines(info: dict, arch: abi.Arch, alphac_image) -> list[str]:
    """libcuda's local-memory setup (every SET_SHADER_LOCAL_MEMORY* method in its push buffers and
    each QMD's local-memory fields, by launch) beside alphac's (its set-up push buffer and the
    traced kernel's QMD)."""
    layout = abi.QMD_LAYOUTS[arch.qmd]
    lines = ["", "## local memory: libcuda's setup beside alphac's"]
    for la in info.get("launches") or []:
        lines.append(f"    libcuda launch {la['kernel']}: {la['threads']} threads, {la['local_per_thread']} bytes of "
                     f"local memory a thread (the cubin's MIN_STACK_SIZE)"
                     + (f", result {la['result']}" if "result" in la else ""))
    seen: list[tuple[str, int]] = []
    for ch in info["channels"]:
        bound = binding()
        for s in ch.get("submits") or []:
            words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"]))) if s.get("words") else []
            pairs = local_memory_methods(arch, words, bound)
            seen += pairs
            for n, d in pairs:
                lines.append(f"    libcuda {ch['handle']:#x} entry {s.get('index', '?')} ({s.get('launch') or 'untagged'}): {n} = {d:#x}")
            for q in s.get("qmds") or []:
                if q["qmd"]:
                    lines.append(f"    libcuda QMD at {q['va']:#x} ({s.get('launch') or 'untagged'}): "
                                 + qmd_local_fields(layout, bytes.fromhex(q["qmd"])))
    lines.append(f"    libcuda in all: {local_memory_summary(seen)}")
    if alphac_image is not None:
        mine = local_memory_methods(arch, list(alphac_image.setup_pushbuf))
        lines += [f"    alphac set-up: {n} = {d:#x}" for n, d in mine]
        lines.append(f"    alphac in all: {local_memory_summary(mine)}")
        la = alphac_image.launch(info["kernel"])
        lines.append(f"    alphac QMD ({info['kernel']}): {qmd_local_fields(layout, la.qmd)}")
    return lines


def report(out: Path) -> str:
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.nvdrv import host as host_mod
    log = load_log(out / "sniff.jsonl")
    lines = ["# what libcuda said to the driver (gpu/cuda_ioctl_trace.py)", ""]
    lines += [describe(e) for e in log]
    lines += slowest(log)
    lines += channel_lines(log)
    ch_path = out / "channels.json"
    if not ch_path.exists():
        return "\n".join(lines + ["", "no channels.json: the launch did not complete"]) + "\n"
    info = json.loads(ch_path.read_text())
    arch = abi.ARCHES[f"sm_{info['sm']}"]
    layout = abi.QMD_LAYOUTS[arch.qmd]
    for ch in info["channels"]:
        p = ch.get("params")
        if p is None:
            why = ch.get("missing") or "an older trace's channels.json, without them: see the channels above"
            lines += ["", f"## channel {ch['class']} {ch.get('handle', 0):#x}: ring unknown ({why})"]
            continue
        lines += ["", f"## channel {ch['class']} {ch['handle']:#x} ring {p['ring']:#x} entries {p['entries']} "
                      f"GPPut {ch['gpput']}" + (f" ({ch['missing']})" if ch.get("missing") else "")]
        bound = binding()
        for s in ch["submits"]:
            lines.append(f"entry {s['index']} {s['entry']:#018x}: {s['dwords']} dwords at {s['va']:#x}"
                         f" ({s.get('launch') or 'untagged'})" + ("" if s["words"] else ": unreadable"))
            if s["words"]:
                words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
                lines += [f"    subch {sub} {name} = {data:#x}" for sub, name, data in methods(arch, words, bound)]
            for q in s.get("qmds") or []:
                if not q["qmd"]:
                    lines.append(f"    QMD ({q['how']}) at {q['va']:#x}: unreadable")
                    continue
                fields = unpack_qmd(layout, bytes.fromhex(q["qmd"]))
                lines.append(f"    QMD ({q['how']}, {q['dwords']} dwords) at {q['va']:#x}: "
                             + ", ".join(f"{k}={v:#x}" for k, v in fields.items() if v))
                cb = q.get("cbank0") or {}
                got = bytes.fromhex(cb["bytes"]) if cb.get("bytes") else None
                lines.append(f"    constant bank 0 at {cb.get('va', 0):#x}, {cb.get('size', 0)} bytes"
                             + ("" if got else ": unreadable"))
                lines += dwords_rows(got, 0) if got else []
    h = host_mod.make({"uuid": "GPU-00000000-0000-0000-0000-000000000000", "product": "x",
                       "memory": "1 TiB", "driver": "0.0"})
    lr = compile_file(ROOT / "examples" / f"{info['learner']}.alpha").learner
    image = build_gpu_owner(lr, f"x86_64+sm_{info['sm']}", h).gpu
    lines += local_memory_lines(info, arch, image)
    found = traced_qmd(info)
    if found is None:
        lines += ["", f"## no QMD of libcuda's for {info['kernel']} in the trace"]
    else:
        theirs, q = unpack_qmd(layout, found[0]), found[1]
        la = image.launch(info["kernel"])
        mine = unpack_qmd(layout, la.qmd)
        skip = ("PROGRAM_ADDRESS", "CONSTANT_BUFFER_ADDR", "PROGRAM_PREFETCH_ADDR", "RELEASE_SEMAPHORE")
        lines += ["", f"## QMD fields that differ (libcuda vs alphac, {info['kernel']}; addresses not compared)"]
        for k in layout.fields:
            if theirs[k] != mine[k] and not k.startswith(skip):
                lines.append(f"    {k}: libcuda {theirs[k]:#x}  alphac {mine[k]:#x}")
        cb = (q.get("cbank0") or {}).get("bytes")
        if cb:
            lines += ["", "## constant bank 0, dwords 0-15 (the prefix: windows): libcuda, then alphac"]
            lines += dwords_rows(bytes.fromhex(cb), 0, 64) + dwords_rows(la.cbank, 0, 64)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/cuda-trace", help="where the log and the report go")
    ap.add_argument("--libcuda", default="libcuda.so.1")
    ap.add_argument("--learner", default="independent_state")
    ap.add_argument("--report-only", action="store_true",
                    help="only (re)write OUT/report.txt from OUT/sniff.jsonl and OUT/channels.json (no GPU)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.report_only:
            (out / "report.txt").write_text(report(out))
            print(f"cuda_ioctl_trace: {out}/report.txt")
            return 0
        if args.inner:
            return inner(args)
        so = build_sniffer(out)
        (out / "sniff.jsonl").unlink(missing_ok=True)          # the sniffer appends
        (out / "channels.json").unlink(missing_ok=True)
        env = dict(os.environ, LD_PRELOAD=str(so), **sniffer_env(out / "sniff.jsonl"))
        run = subprocess.run([sys.executable, __file__, "--inner", "--out", str(out), "--libcuda",
                              args.libcuda, "--learner", args.learner], env=env)
        if run.returncode == 2:
            return 2
        (out / "report.txt").write_text(report(out))
        found = traced_qmd(json.loads((out / "channels.json").read_text())) if run.returncode == 0 else None
        print(f"cuda_ioctl_trace: {out}/report.txt ("
              + ("the launches failed" if run.returncode else "launches recorded; libcuda's QMD "
                 + ("found" if found else "NOT found: see the report's channels")) + ")")
        return 0 if run.returncode == 0 else 1
    except Unavailable as e:
        print(f"cuda_ioctl_trace: cannot run here: {e}", file=sys.stderr)
        return 2
    except Exception as e:                   # an inner run without a device, say
        if args.inner and type(e).__name__ == "Unavailable":
            print(f"cuda_ioctl_trace: cannot run here: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
