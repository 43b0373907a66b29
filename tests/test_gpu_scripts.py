"""The scripts for a machine with a GPU, run here as far as a machine without one allows.

  * gpu/qualify.py runs whole against the mock driver (its one hook, `runner`, runs each
    executable under tests/mockgpu instead of directly): identity from a /proc tree, the probe,
    the host description from the driver's answers, the builds, the runs, the comparisons, the
    run record (checked by alphac.tools.launch.verify_record); without a driver it exits 2;
  * gpu/ioctl_sniffer.c builds with gcc -Wall -Werror and logs an ioctl (bytes before and after)
    when preloaded into a process that makes one on a file it watches; gpu/cuda_ioctl_trace.py
    names that call from the ABI tables, and exits 2 without libcuda;
  * the sniffer's fault guard: reading a PROT_NONE page (SIGSEGV) or a mapping past its file's
    end (SIGBUS), directly or as an ioctl's argument, is logged as a fault and the process goes
    on (with Python's faulthandler installed after the sniffer, too);
  * the trace's push-buffer decoding: a QMD launched from memory (SEND_PCAS_A) and one written
    inline (SET_INLINE_QMD_ADDRESS_A/B, LOAD_INLINE_QMD_DATA(i)) are both found, with their
    constant banks 0; qualify.py's QMD variants all pack, and a trace adds the libcuda one.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mockgpu
from conftest import ROOT, require_tool
from mockgpu import Card

UUID = "GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a"
VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
           "(dvs-builder@U22-I3-AE18-23-3)  Mon Sep  1 00:00:00 UTC 2025\n"
           "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
INFORMATION = f"""Model: \t\t NVIDIA H200
IRQ:   \t\t 120
GPU UUID: \t {UUID}
Video BIOS: \t 96.00.af.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t 0000:18:00.0
Device Minor: \t 0
GPU Excluded:\t No
"""


def script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "gpu" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "gpus" / "0000:18:00.0").mkdir(parents=True)
    (proc / "version").write_text(VERSION)
    (proc / "gpus" / "0000:18:00.0" / "information").write_text(INFORMATION)
    return proc


def test_proc_parsers():
    q = script("qualify")
    assert q.parse_version(VERSION) == "580.159.04"
    assert q.parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Tue Jan\n") == "570.86.15"
    assert q.parse_information(INFORMATION) == {"product": "NVIDIA H200", "uuid": UUID, "minor": "0"}
    assert q.sm_of("NVIDIA H200", None) == 90 and q.sm_of("NVIDIA GeForce RTX 3090", None) == 86


def test_identity_from_nvidia_smi_without_proc(tmp_path, monkeypatch):
    """Where the driver's /proc tree is hidden (gVisor proxies the device files), nvidia-smi says."""
    q = script("qualify")
    (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\necho 'NVIDIA H200, {UUID}, 580.159.04, 0'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert q.read_identity(tmp_path / "none", None) == {"product": "NVIDIA H200", "uuid": UUID, "minor": "0",
                                                         "driver": "580.159.04", "source": "nvidia-smi"}
    with pytest.raises(q.Unavailable, match="no NVIDIA kernel driver"):
        q.read_identity(tmp_path / "none", 1)


def test_qualify_against_the_mock(tmp_path):
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    from alphac.tools.launch import verify_record
    from alphac.nvdrv.host import parse_uuid
    q = script("qualify")
    card = Card(uuid=parse_uuid(UUID), name="NVIDIA H200", driver="580.159.04", sm=90)
    seen = []

    def runner(exe, args, built):
        r = mockgpu.run(exe, args, card=card, kernels=built.kernels, events=False)
        assert r.errors == []
        seen.append((Path(exe).name, r.returncode, r.allocations != []))
        return r.returncode, r.stdout, r.stderr
    rc = q.main(["--proc", str(fake_proc(tmp_path)), "--records", str(tmp_path / "runs"), "--steps", "3"],
                runner=runner)
    assert rc == 0
    rdir = tmp_path / "runs" / "gpu-qualify-0001"
    rec = json.loads((rdir / "record.json").read_text())
    assert rec["passed"] and verify_record(rdir / "record.json") == []
    assert (rec["qmd_variant"]["name"], rec["qmd_variant"]["fields"]) == ("default", {})
    assert seen == [("probe", 0, False), ("independent_state.sm_90", 0, True), ("lsq_adam.sm_90", 0, True)]
    assert rec["gpu"] == {"uuid": UUID, "product": "NVIDIA H200", "driver": "580.159.04",
                          "memory": 143771 << 20, "minor": 0, "sm": 90, "topology": "8 9 2 64"}
    assert (rdir / "host.gpuhost").read_text().startswith(f"uuid {UUID}\nproduct NVIDIA H200\n")
    assert [r["role"] for r in rec["roles"]] == ["independent_state", "lsq_adam"]
    assert all(r["equals_interpreter"] and r["equals_oracle"] for r in rec["roles"])
    for path, digest in rec["artifacts"].items():
        import hashlib
        assert hashlib.sha256((rdir / path).read_bytes()).hexdigest() == digest
    assert any(p.endswith(".cubin") for p in rec["artifacts"]) and "ptxas" in rec["tools"]
    # a record whose stream was edited no longer verifies
    log = rdir / "events" / "lsq_adam.log"
    log.write_text(log.read_text().replace("step 2", "step 9"))
    assert verify_record(rdir / "record.json") == ["lsq_adam: stream does not match its seal"]


def test_qualify_without_a_driver_exits_2(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "gpu" / "qualify.py"), "--proc", str(tmp_path / "none"),
                          "--records", str(tmp_path / "runs")], capture_output=True, text=True)
    assert run.returncode == 2 and "no NVIDIA kernel driver" in run.stderr


def test_sniffer_builds_and_logs_an_ioctl(tmp_path):
    require_tool("gcc")
    t = script("cuda_ioctl_trace")
    so = t.build_sniffer(tmp_path)
    from alphac.nvdrv import abi
    cmd = abi.NV_IOCTLS["NV_ESC_RM_ALLOC(NVOS21_PARAMETERS)"].cmd
    probe = (f"import fcntl, os\nfd = os.open('/dev/null', os.O_RDWR)\nbuf = bytearray(range(32))\n"
             f"try:\n    fcntl.ioctl(fd, {cmd}, buf)\nexcept OSError as e:\n    print(e.errno)\n")
    env = dict(os.environ, LD_PRELOAD=str(so), SNIFF_PREFIX="/dev/null", **t.sniffer_env(tmp_path / "log"))
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "25"              # ENOTTY
    log = t.load_log(tmp_path / "log")
    call = next(e for e in log if e["call"] == "ioctl")
    assert call["req"] == cmd and call["size"] == 32 and call["in"] == bytes(range(32)).hex()
    assert (call["ret"], call["errno"]) == (-1, 25)
    assert "NV_ESC_RM_ALLOC" in t.describe(call)
    assert any(e["call"] == "open" and e["path"] == "/dev/null" for e in log)


def test_cuda_trace_without_libcuda_exits_2(tmp_path):
    require_tool("gcc")
    run = subprocess.run([sys.executable, str(ROOT / "gpu" / "cuda_ioctl_trace.py"), "--out", str(tmp_path),
                          "--libcuda", str(tmp_path / "nope.so")], capture_output=True, text=True)
    assert run.returncode == 2 and "libcuda" in run.stderr
    assert shutil.which("gcc")


FAULT_HARNESS = """
import ctypes, faulthandler, json, os, sys, tempfile
faulthandler.enable()                       # a handler installed after the sniffer's
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
none = libc.mmap(None, 4096, 0, 0x22, -1, 0)                 # PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS
empty = tempfile.TemporaryFile()
past = libc.mmap(None, 4096, 1, 1, empty.fileno(), 0)        # PROT_READ, MAP_SHARED past the end
sn = ctypes.CDLL(sys.argv[1])
sn.sniff_read.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
sn.sniff_faults.restype = ctypes.c_ulong
buf, ok = ctypes.create_string_buffer(16), ctypes.create_string_buffer(b"0123456789abcdef")
reads = [sn.sniff_read(none, 16, buf), sn.sniff_read(past, 16, buf), sn.sniff_read(ctypes.addressof(ok), 16, buf)]
fd = os.open("/dev/null", os.O_RDWR)
ret = libc.ioctl(fd, int(sys.argv[2]), none)
print(json.dumps({"reads": reads, "copied": buf.raw.decode(), "ioctl": [ret, ctypes.get_errno()],
                  "faults": sn.sniff_faults()}))
"""


def test_sniffer_fault_guard(tmp_path):
    require_tool("gcc")
    t = script("cuda_ioctl_trace")
    so = t.build_sniffer(tmp_path)
    from alphac.nvdrv import abi
    cmd = abi.NV_IOCTLS["NV_ESC_RM_ALLOC(NVOS21_PARAMETERS)"].cmd
    env = dict(os.environ, LD_PRELOAD=str(so), SNIFF_PREFIX="/dev/null", **t.sniffer_env(tmp_path / "log"))
    run = subprocess.run([sys.executable, "-c", FAULT_HARNESS, str(so), str(cmd)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["reads"] == [-1, -1, 0] and got["copied"] == "0123456789abcdef"
    assert got["ioctl"] == [-1, 25] and got["faults"] == 5     # 2 reads; the ioctl's nested pointer, in, out
    call = next(e for e in t.load_log(tmp_path / "log") if e["call"] == "ioctl")
    assert (call["in"], call["in_fault"], call["out"], call["out_fault"]) == ("fault", "SIGSEGV", "fault", "SIGSEGV")
    assert t.logged(call, "in") is None and "(in SIGSEGV at" in t.describe(call)


def test_trace_finds_qmds_in_memory_and_inline(tmp_path):
    import struct
    from alphac.nvdrv import abi, image
    from nvdrv_decode import unpack_qmd
    t = script("cuda_ioctl_trace")
    arch = abi.ARCHES["sm_90"]
    layout = abi.QMD_LAYOUTS[arch.qmd]
    m = abi.METHODS[arch.compute_methods]
    cbank = bytes(range(256)) * 2
    qmd = abi.pack_qmd(layout, {"QMD_MAJOR_VERSION": 4, "QMD_TYPE": 2, "GRID_WIDTH": 3,
                                "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)": 0x10_0004_0000 >> 6 & 0xffffffff,
                                "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)": 0x10_0004_0000 >> 38,
                                "CONSTANT_BUFFER_SIZE_SHIFTED4(0)": len(cbank) >> 4})
    memory = {0x10_0002_0000: qmd, 0x10_0004_0000: cbank}

    def read(va, n):
        return next((d[va - b:va - b + n] for b, d in memory.items() if b <= va and va + n <= b + len(d)), None)
    cb = {"va": 0x10_0004_0000, "size": len(cbank), "bytes": cbank.hex()}
    # from memory: alphac's own launch push buffer
    found = t.launched_qmds(arch, image.launch_pushbuf(arch, 0x10_0002_0000, 0x10_0040_1000), read)
    assert found == [{"how": "memory", "va": 0x10_0002_0000, "qmd": qmd.hex(), "dwords": 96, "cbank0": cb}]
    # inline, in two method runs (the address, then the dwords), then launched from that address
    words = struct.unpack(f"<{len(qmd) // 4}I", qmd)
    pb = [image.method(1, m["SET_INLINE_QMD_ADDRESS_A"], 2), 0x10_0003_0000 >> 40, 0x10_0003_0000 >> 8 & 0xffffffff,
          image.method(1, t.INLINE_QMD_DATA(arch), 40), *words[:40],
          image.method(1, t.INLINE_QMD_DATA(arch) + 160, 56), *words[40:],
          image.method(1, m["SEND_PCAS_A"], 1), 0x10_0003_0000 >> 8]
    assert t.launched_qmds(arch, pb, read) == [{"how": "inline", "va": 0x10_0003_0000, "qmd": qmd.hex(),
                                                "dwords": 96, "cbank0": cb}]
    assert ("LOAD_INLINE_QMD_DATA(95)" in [n for _, n, _ in t.methods(arch, pb)])
    # qualify's variants: every one packs; a trace holding that QMD adds "libcuda", second
    q = script("qualify")
    la = image.Launch("k", 1, 32, 3, 0x10_0000_0000, "", 0, b"", 0x10_0004_0000, cbank, 0, (), 0, ())
    for name, fields, _ in q.qmd_variants(90):
        image.QMD_OVERRIDES.update(fields)
        try:
            packed = abi.pack_qmd(layout, image.qmd_fields(arch, la, 16, 0, 0x400, len(cbank)))
        finally:
            image.QMD_OVERRIDES.clear()
        assert all(unpack_qmd(layout, packed)[k] == v for k, v in fields.items()), name
    assert [n for n, _, _ in q.qmd_variants(90, tmp_path)][:2] == ["default", "group-id-0"]   # no trace
    trace = tmp_path / "channels.json"
    trace.write_text(json.dumps({"sm": 90, "channels": [{"submits": [{"qmds": found}]}]}))
    names = [n for n, _, _ in q.qmd_variants(90, trace)]
    assert names[:2] == ["default", "libcuda"] and len(names) == len(q.QMD_VARIANTS["V04_00"]) + 1
    assert dict(q.qmd_variants(90, trace)[1][1]) == {k: v for k, v in unpack_qmd(layout, qmd).items()
                                                     if q.TRACE_FIELDS.fullmatch(k)}
