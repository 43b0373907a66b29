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
   points to, every QMD they launch (one in memory, SEND_PCAS_A, or one written inline in the
   push buffer, SET_INLINE_QMD_ADDRESS_A/B then LOAD_INLINE_QMD_DATA(i), reassembled from the
   method stream) and each QMD's constant bank 0 (at its CONSTANT_BUFFER_ADDR fields), into
   DIR/channels.json; every read goes through the sniffer's fault-guarded sniff_read, which also
   reads video memory mapped through BAR1;
3. decodes both with alphac's ABI tables into DIR/report.txt: each call by name (escape, class,
   control, UVM command, status), each push-buffer method by name, each QMD field by name, the
   QMD alphac builds for the same kernel beside libcuda's, field by field, and the first dwords
   of both constant banks 0 (the prefix: the shared and local windows).

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
    run = subprocess.run([gcc, "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-pthread", "-o", str(so),
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


def logged(e: dict, key: str) -> bytes | None:
    """The bytes the sniffer logged under `key`; None when it could not read them (a NULL pointer:
    "unreadable"; a faulting one: "fault", with `key`_fault naming the signal)."""
    v = e.get(key)
    return None if v is None or v in ("unreadable", "fault") else bytes.fromhex(v)


def describe(e: dict) -> str:
    """One line for one logged call, named by the ABI tables."""
    if e["call"] != "ioctl":
        extra = f" {e['addr']:#x}+{e['len']:#x} -> {e['result']:#x}" if e["call"] == "mmap" else ""
        return f"{e['seq']:5d} {e['call']:<6} {e['path']} fd {e['fd']}{extra}"
    req, out = e["req"], logged(e, "out") or b""
    head = f"{e['seq']:5d} ioctl  {e['path']} {req:#010x} ret {e['ret']}" + \
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
        out = logged(e, "out") if e["call"] == "ioctl" else None
        if out is None:
            continue
        io = NV_BY_CMD.get(e["req"]) if "uvm" not in e["path"] else None
        if io and io.escape == "NV_ESC_RM_MAP_MEMORY":
            pending[field(out, io.struct, "fd")] = field(out, io.struct, "params.hMemory")
        elif "uvm" in e["path"] and UVM_NAME.get(e["req"]) == "UVM_MAP_EXTERNAL_ALLOCATION":
            gpu_map[field(out, "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", "hMemory")] = \
                field(out, "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", "base")
        elif io and io.escape == "NV_ESC_RM_ALLOC" and field(out, io.struct, "hClass") in GPFIFO_CLASSES \
                and logged(e, "nested_out") is not None:
            p = logged(e, "nested_out")
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


def _method_names(arch: abi.Arch) -> dict[int, dict[int, str]]:
    """Method names by subchannel as tinygrad binds them (0 host, 1 compute, 4 copy), with
    LOAD_INLINE_QMD_DATA(i) named too (see INLINE_QMD_DATA)."""
    compute = {v: k for k, v in abi.METHODS[arch.compute_methods].items()}
    base = INLINE_QMD_DATA(arch)
    compute |= {base + 4 * i: f"LOAD_INLINE_QMD_DATA({i})" for i in range(abi.QMD_LAYOUTS[arch.qmd].nbytes // 4)}
    return {0: {v: k for k, v in abi.METHODS[arch.host_methods].items()}, 1: compute,
            4: {v: k for k, v in abi.METHODS[arch.copy_methods].items()}}


def methods(arch: abi.Arch, words: list[int]) -> list[tuple[int, str, int]]:
    """(subchannel, method name, data) for a push buffer, by abi.BITFIELDS and abi.METHODS."""
    names = _method_names(arch)
    return [(sub, names.get(sub, {}).get(a, f"{a:#x}"), data) for sub, a, data in method_stream(words)]


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


def launched_qmds(arch: abi.Arch, words: list[int], read) -> list[dict]:
    """Every QMD a push buffer launches, with its constant bank 0. `read(addr, n)` reads memory
    (None when it faults). A QMD is either in memory (SEND_PCAS_A = its address >> 8: read there)
    or written inline: SET_INLINE_QMD_ADDRESS_A/B (the address >> 8, upper then lower) and the
    LOAD_INLINE_QMD_DATA(i) dwords, reassembled here from the method stream (dwords never sent
    stay zero; `dwords` counts those that were). Each: {"how": "memory" | "inline", "va", "qmd":
    hex | None, "dwords", "cbank0": {"va", "size", "bytes": hex | None}}."""
    layout = abi.QMD_LAYOUTS[arch.qmd]
    m = abi.METHODS[arch.compute_methods]
    compute_class = abi.CLASSES[arch.compute]
    compute_subs = {1}                              # tinygrad's binding, until a SET_OBJECT says
    base, n_dw = INLINE_QMD_DATA(arch), layout.nbytes // 4
    out, inline, inline_hi, inline_va = [], None, 0, None
    sent: set[int] = set()

    def flush():
        nonlocal inline
        if inline is not None:
            raw, seen = inline
            out.append({"how": "inline", "va": inline_va, "qmd": bytes(raw).hex(), "dwords": len(seen)})
            sent.add(inline_va)
        inline = None
    for sub, addr, data in method_stream(words):
        if addr == m["SET_OBJECT"] and sub != 0:
            (compute_subs.add if data & 0xffff == compute_class else compute_subs.discard)(sub)
            continue
        if sub not in compute_subs:
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
        elif addr == m["SEND_PCAS_A"]:
            flush()
            va = data << 8
            if va not in sent:
                raw = read(va, layout.nbytes)
                out.append({"how": "memory", "va": va, "qmd": raw.hex() if raw else None, "dwords": n_dw if raw else 0})
    flush()
    for q in out:
        if q["qmd"] is None:
            continue
        cva, size = cbank0_of(layout, unpack_qmd(layout, bytes.fromhex(q["qmd"])))
        raw = read(cva, min(size, MAX_CBANK)) if cva and size else None
        q["cbank0"] = {"va": cva, "size": size, "bytes": raw.hex() if raw else None}
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
        for s in ch["submits"]:
            if not s["words"]:
                continue
            words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
            s["qmds"] = launched_qmds(arch, words, read)
    Path(args.out, "channels.json").write_text(json.dumps({"sm": cuda.sm, "kernel": k.name,
                                                           "learner": args.learner, "channels": chans}, indent=1))
    return 0


def traced_qmd(info: dict) -> tuple[bytes, dict] | None:
    """The last whole QMD libcuda launched in a channels.json (`info`), with its launched_qmds
    entry; None when the trace holds none (no launch, or every QMD unreadable)."""
    layout = abi.QMD_LAYOUTS[abi.ARCHES[f"sm_{info['sm']}"].qmd]
    found = None
    for ch in info["channels"]:
        for s in ch["submits"]:
            for q in s.get("qmds") or []:
                if q["qmd"] and q["dwords"] == layout.nbytes // 4:
                    found = bytes.fromhex(q["qmd"]), q
    return found


def dwords_rows(raw: bytes, base: int, limit: int = 0x400) -> list[str]:
    words = struct.unpack(f"<{min(len(raw), limit) // 4}I", raw[:min(len(raw), limit) // 4 * 4])
    return [f"      {base + 32 * r:#06x}: " + " ".join(f"{w:08x}" for w in words[8 * r:8 * r + 8])
            for r in range((len(words) + 7) // 8)]


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
    for ch in info["channels"]:
        lines += ["", f"## channel {ch['class']} ring {ch['ring']:#x} entries {ch['entries']} GPPut {ch['gpput']}"]
        for s in ch["submits"]:
            lines.append(f"entry {s['entry']:#018x}: {s['dwords']} dwords at {s['va']:#x}")
            if s["words"]:
                words = list(struct.unpack(f"<{len(s['words']) // 8}I", bytes.fromhex(s["words"])))
                lines += [f"    subch {sub} {name} = {data:#x}" for sub, name, data in methods(arch, words)]
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
    found = traced_qmd(info)
    if found is not None:
        theirs, q = unpack_qmd(layout, found[0]), found[1]
        h = host_mod.make({"uuid": "GPU-00000000-0000-0000-0000-000000000000", "product": "x",
                           "memory": "1 TiB", "driver": "0.0"})
        lr = compile_file(ROOT / "examples" / f"{info['learner']}.alpha").learner
        la = build_gpu_owner(lr, f"x86_64+sm_{info['sm']}", h).gpu.launch(info["kernel"])
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
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
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
