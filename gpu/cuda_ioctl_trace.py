#!/usr/bin/env python3
"""Record what CUDA's own driver says to the kernel for one tiny launch, and decode it.

For a machine with an NVIDIA GPU and libcuda (the first thing to run on an H200, before our own
executable: Hopper has no public raw-ioctl launcher, so this is where its facts come from):

    python3 gpu/cuda_ioctl_trace.py [--out DIR] [--libcuda PATH] [--learner independent_state]

1. compiles gpu/ioctl_sniffer.c with gcc into DIR/sniffer.so (an LD_PRELOAD library);
2. runs this script again (`--inner`) under it: CUDA's driver API loads one of alphac's cubins
   (the first update kernel of the learner, assembled by ptxas for the device's SM) and makes
   exactly one launch; the sniffer logs every open, ioctl (argument bytes before and after, and
   the structure RM_ALLOC / RM_CONTROL point to) and mmap on /dev/nvidia*; after the launch the
   inner run reads the GPFIFO ring of every channel libcuda allocated, the push buffers it
   points to and every QMD they send, into DIR/channels.json;
3. decodes both with alphac's ABI tables into DIR/report.txt: each call by name (escape, class,
   control, UVM command, status), each push-buffer method by name, each QMD field by name, and
   the QMD alphac builds for the same kernel beside libcuda's, field by field.

Exit codes: 0 recorded; 2 it cannot run here (no gcc, no libcuda, no device, no ptxas).
Nothing here runs without a GPU; tests/test_gpu_scripts.py builds the sniffer and checks it on an
ioctl to /dev/null.
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


def sniffer_env(log: Path) -> dict[str, str]:
    """What the sniffer needs from the ABI tables: UVM argument sizes and the nested pointers."""
    uvm = ",".join(f"{io.cmd}:{abi.STRUCTS[io.params].size}" for io in abi.UVM_IOCTLS.values() if io.params)
    nested = []
    for st, ptr, size in (("NVOS21_PARAMETERS", "pAllocParms", "paramsSize"),
                          ("NVOS64_PARAMETERS", "pAllocParms", "paramsSize"),
                          ("NVOS54_PARAMETERS", "params", "paramsSize")):
        nr = abi.NV_ESCAPES["NV_ESC_RM_CONTROL" if st == "NVOS54_PARAMETERS" else "NV_ESC_RM_ALLOC"]
        s = abi.STRUCTS[st]
        nested.append(f"{nr}:{s.size}:{s.offset(ptr)}:{s.offset(size)}")
    return {"SNIFF_LOG": str(log), "SNIFF_UVM_SIZES": uvm, "SNIFF_NESTED": ",".join(nested)}


def build_sniffer(out: Path) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise Unavailable("no C compiler (gcc) to build the sniffer")
    so = out / "sniffer.so"
    run = subprocess.run([gcc, "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(so),
                          str(ROOT / "gpu" / "ioctl_sniffer.c"), "-ldl"], capture_output=True, text=True)
    if run.returncode:
        raise Unavailable(f"the sniffer does not build: {run.stderr.strip()}")
    return so


def field(data: bytes, struct_name: str, path: str) -> int:
    from alphac.nvdrv.conversation import locate
    off, size = locate(struct_name, path)
    return int.from_bytes(data[off:off + size], "little")


def load_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def describe(e: dict) -> str:
    """One line for one logged call, named by the ABI tables."""
    if e["call"] != "ioctl":
        extra = f" {e['addr']:#x}+{e['len']:#x} -> {e['result']:#x}" if e["call"] == "mmap" else ""
        return f"{e['seq']:5d} {e['call']:<6} {e['path']} fd {e['fd']}{extra}"
    req, out = e["req"], bytes.fromhex(e["out"]) if e.get("out", "unreadable") != "unreadable" else b""
    head = f"{e['seq']:5d} ioctl  {e['path']} {req:#010x} ret {e['ret']}"
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
    elif out and io.struct == "NVOS54_PARAMETERS":
        cmd = field(out, io.struct, "cmd")
        what += f" {CTRL_NAME.get(cmd, hex(cmd))} on {field(out, io.struct, 'hObject'):#x} status {field(out, io.struct, 'status'):#x}"
    return f"{head} {what}"


# -- after the launch, inside the traced process ------------------------------------------------
def dump_channels(log: list[dict], read) -> list[dict]:
    """Every GPFIFO channel in the log: its ring up to GPPut, the push buffers, the QMDs sent.
    `read(addr, n)` reads our own memory (None when unreadable)."""
    cpu_map: dict[int, int] = {}          # memory handle -> CPU address
    pending: dict[int, int] = {}          # fd -> memory handle (RM_MAP_MEMORY before its mmap)
    gpu_map: dict[int, int] = {}          # memory handle -> GPU VA (UVM_MAP_EXTERNAL_ALLOCATION)
    chans = []
    for e in log:
        if e["call"] == "mmap" and e["fd"] in pending:
            cpu_map[pending.pop(e["fd"])] = e["result"]
        if e["call"] != "ioctl" or e.get("out", "unreadable") == "unreadable":
            continue
        out = bytes.fromhex(e["out"])
        io = NV_BY_CMD.get(e["req"]) if "uvm" not in e["path"] else None
        if io and io.escape == "NV_ESC_RM_MAP_MEMORY":
            pending[field(out, io.struct, "fd")] = field(out, io.struct, "params.hMemory")
        elif "uvm" in e["path"] and UVM_NAME.get(e["req"]) == "UVM_MAP_EXTERNAL_ALLOCATION":
            gpu_map[field(out, "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", "hMemory")] = \
                field(out, "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", "base")
        elif io and io.escape == "NV_ESC_RM_ALLOC" and field(out, io.struct, "hClass") in GPFIFO_CLASSES \
                and e.get("nested_out", "unreadable") != "unreadable":
            p = bytes.fromhex(e["nested_out"])
            chans.append({"class": CLASS_NAME[field(out, io.struct, "hClass")],
                          "ring": field(p, "NV_CHANNEL_ALLOC_PARAMS", "gpFifoOffset"),
                          "entries": field(p, "NV_CHANNEL_ALLOC_PARAMS", "gpFifoEntries"),
                          "buffer": field(p, "NV_CHANNEL_ALLOC_PARAMS", "hObjectBuffer"),
                          "userd_mem": field(p, "NV_CHANNEL_ALLOC_PARAMS", "hUserdMemory[0]"),
                          "userd_off": field(p, "NV_CHANNEL_ALLOC_PARAMS", "userdOffset[0]")})

    def cpu(handle: int, gpu_va: int) -> int:
        if handle in cpu_map and handle in gpu_map:
            return cpu_map[handle] + gpu_va - gpu_map[handle]
        return gpu_va                      # UVM: the same address for the CPU, if mapped at all

    for ch in chans:
        userd = cpu_map.get(ch["userd_mem"])
        raw = read(userd + ch["userd_off"] + abi.USERD_GPPUT_OFFSET, 4) if userd else None
        put = struct.unpack("<I", raw)[0] if raw else ch["entries"]
        ch["gpput"] = put if raw else None
        ch["submits"] = []
        for i in range(min(put, ch["entries"])):
            raw = read(cpu(ch["buffer"], ch["ring"] + 8 * i), 8)
            if raw is None:
                break
            entry = struct.unpack("<Q", raw)[0]
            if entry == 0:
                continue
            arch = next(a for a in abi.ARCHES.values() if a.gpfifo == ch["class"])
            va, dwords = decode_entry(arch, entry)
            words = read(va, 4 * dwords)
            ch["submits"].append({"entry": entry, "va": va, "dwords": dwords,
                                  "words": words.hex() if words else None})
    return chans


def methods(arch: abi.Arch, words: list[int]) -> list[tuple[int, str, int]]:
    """(subchannel, method name, data) for a push buffer, by abi.BITFIELDS and abi.METHODS."""
    def bits(w, name):
        hi, lo = abi.BITFIELDS[name]
        return (w >> lo) & ((1 << (hi - lo + 1)) - 1)
    names = {0: {v: k for k, v in abi.METHODS[arch.host_methods].items()},
             1: {v: k for k, v in abi.METHODS[arch.compute_methods].items()},
             4: {v: k for k, v in abi.METHODS[arch.copy_methods].items()}}
    out, i = [], 0
    while i < len(words):
        h = words[i]
        op, sub = bits(h, "NVC56F_DMA_SEC_OP"), bits(h, "NVC56F_DMA_METHOD_SUBCHANNEL")
        addr = bits(h, "NVC56F_DMA_METHOD_ADDRESS") << 2
        if op == abi.CONSTANTS["NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD"]:
            out.append((sub, names.get(sub, {}).get(addr, f"{addr:#x}"), bits(h, "NVC56F_DMA_IMMD_DATA")))
            i += 1
            continue
        n = bits(h, "NVC56F_DMA_METHOD_COUNT")
        for k in range(n):
            step = k if op == 1 else (0 if op == 3 else min(k, 1))
            a = addr + 4 * step
            out.append((sub, names.get(sub, {}).get(a, f"{a:#x}"), words[i + 1 + k] if i + 1 + k < len(words) else -1))
        i += 1 + max(n, 0)
        if n == 0 and op not in (1, 3, 5):
            break
    return out


def inner(args) -> int:
    import ctypes
    sys.path.insert(0, str(ROOT / "gpu"))
    from vendor_check import Cuda, CudaDevice
    from alphac.driver import compile_file
    from alphac.ptx import build
    from ptx_host import Owner
    from alphac.ptx.kernels import host_scalars
    cuda = Cuda(args.libcuda)
    lr = compile_file(ROOT / "examples" / f"{args.learner}.alpha").learner
    built = [b for b in build(lr, cuda.sm) if b.kernel.group is not None][:1]
    dev = CudaDevice(cuda, {b.kernel.name: b.cubin for b in built})
    owner = Owner(dev, lr, [b.kernel for b in built])
    lib = ctypes.CDLL(None)
    lib.sniff_read.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    marker = Path(args.out) / "launch.mark"
    marker.write_text("before the launch\n")
    k = built[0].kernel
    values = host_scalars(lr, {s.name: tuple(s.init[:1]) for s in lr.scalar_states})
    owner.dev.launch(k, owner._args(k, n=lr.nsamples or 0, klo=0, khi=lr.groups[k.group].size,
                                    values=values), lr.groups[k.group].size)

    def read(addr, n):
        buf = ctypes.create_string_buffer(n)
        return buf.raw if lib.sniff_read(addr, n, buf) == 0 else None
    log = load_log(Path(os.environ["SNIFF_LOG"]))
    chans = dump_channels(log, read)
    for ch in chans:
        arch = next(a for a in abi.ARCHES.values() if a.gpfifo == ch["class"])
        qmd_bytes = abi.QMD_LAYOUTS[arch.qmd].nbytes
        for s in ch["submits"]:
            if not s["words"]:
                continue
            words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
            s["qmds"] = {}
            for _, name, data in methods(arch, words):
                if name == "SEND_PCAS_A":
                    raw = read(data << 8, qmd_bytes)
                    s["qmds"][hex(data << 8)] = raw.hex() if raw else None
    Path(args.out, "channels.json").write_text(json.dumps({"sm": cuda.sm, "kernel": k.name,
                                                           "learner": args.learner, "channels": chans}, indent=1))
    return 0


def report(out: Path) -> str:
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.nvdrv import host as host_mod
    log = load_log(out / "sniff.jsonl")
    lines = ["# what libcuda said to the driver (gpu/cuda_ioctl_trace.py)", ""]
    lines += [describe(e) for e in log]
    ch_path = out / "channels.json"
    if not ch_path.exists():
        return "\n".join(lines + ["", "no channels.json: the launch did not complete"]) + "\n"
    info = json.loads(ch_path.read_text())
    arch = abi.ARCHES[f"sm_{info['sm']}"]
    layout = abi.QMD_LAYOUTS[arch.qmd]
    theirs = None
    for ch in info["channels"]:
        lines += ["", f"## channel {ch['class']} ring {ch['ring']:#x} entries {ch['entries']} GPPut {ch['gpput']}"]
        for s in ch["submits"]:
            lines.append(f"entry {s['entry']:#018x}: {s['dwords']} dwords at {s['va']:#x}")
            if s["words"]:
                words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
                lines += [f"    subch {sub} {name} = {data:#x}" for sub, name, data in methods(arch, words)]
            for va, q in (s.get("qmds") or {}).items():
                if q:
                    fields = unpack_qmd(layout, bytes.fromhex(q))
                    theirs = fields
                    lines.append(f"    QMD at {va}: " + ", ".join(f"{k}={v:#x}" for k, v in fields.items() if v))
    if theirs is not None:
        h = host_mod.make({"uuid": "GPU-00000000-0000-0000-0000-000000000000", "product": "x",
                           "memory": "1 TiB", "driver": "0.0"})
        lr = compile_file(ROOT / "examples" / f"{info['learner']}.alpha").learner
        ours = build_gpu_owner(lr, f"x86_64+sm_{info['sm']}", h).gpu.launch(info["kernel"]).qmd
        mine = unpack_qmd(layout, ours)
        skip = ("PROGRAM_ADDRESS", "CONSTANT_BUFFER_ADDR", "PROGRAM_PREFETCH_ADDR", "RELEASE_SEMAPHORE")
        lines += ["", f"## QMD fields that differ (libcuda vs alphac, {info['kernel']}; addresses not compared)"]
        for k in layout.fields:
            if theirs[k] != mine[k] and not k.startswith(skip):
                lines.append(f"    {k}: libcuda {theirs[k]:#x}  alphac {mine[k]:#x}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/cuda-trace", help="where the log and the report go")
    ap.add_argument("--libcuda", default="libcuda.so.1")
    ap.add_argument("--learner", default="independent_state")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.inner:
            return inner(args)
        so = build_sniffer(out)
        env = dict(os.environ, LD_PRELOAD=str(so), **sniffer_env(out / "sniff.jsonl"))
        run = subprocess.run([sys.executable, __file__, "--inner", "--out", str(out), "--libcuda",
                              args.libcuda, "--learner", args.learner], env=env)
        if run.returncode == 2:
            return 2
        (out / "report.txt").write_text(report(out))
        print(f"cuda_ioctl_trace: {out}/report.txt ({'launch recorded' if run.returncode == 0 else 'the launch failed'})")
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
