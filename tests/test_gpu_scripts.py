"""The scripts for a machine with a GPU, run here as far as a machine without one allows.

  * gpu/qualify.py runs whole against the mock driver (its one hook, `runner`, runs each
    executable under tests/mockgpu instead of directly): identity from a /proc tree, the probe,
    the host description from the driver's answers, the builds, the runs, the comparisons, the
    run record (checked by alphac.tools.record.verify_record); without a driver it exits 2;
  * gpu/ioctl_sniffer.c builds with gcc -Wall -Werror and logs an ioctl (bytes before and after,
    and how long it took; the report names the slowest) when preloaded into a process that
    makes one on a file it watches; gpu/cuda_ioctl_trace.py names that call from the ABI tables,
    and exits 2 without libcuda;
  * the sniffer's fault guard: reading a PROT_NONE page (SIGSEGV) or a mapping past its file's
    end (SIGBUS), directly or as an ioctl's argument, is logged as a fault and the process goes
    on (with Python's faulthandler installed after the sniffer, too);
  * the trace's push-buffer decoding: a QMD launched from memory (SEND_PCAS_A) and one written
    inline (SET_INLINE_QMD_ADDRESS_A/B, LOAD_INLINE_QMD_DATA(i)) are both found, with their
    constant banks 0; qualify.py's QMD variants all pack, and a trace adds the libcuda one;
  * the libcuda trace on Hopper (issue 41): the H200 log of 2026-12-04 (tests/data, as recorded)
    holds no channel parameters (libcuda's paramsSize is 0) and the decoder says so; the sniffer
    logs an RM_ALLOC's parameters sized by class; the sniffer and decoder together find a ring
    through its CPU and GPU mappings, tag each entry with its launch, and find the QMD, its
    constant bank and the local-memory setup; the trace's spilling kernel needs local memory;
  * gpu/holder.py (bench/gpu.py's start-up with the GPU held, issue 42) holds the files open for
    its block and closes them after, makes at `uvm` the conversation's own UVM calls (the same
    requests, the card's UUID, rmCtrlFd -1) and nothing else, and names a missing file or a
    call the driver refuses, closing what it opened.
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


def test_qualify_against_the_mock(tmp_path, capsys):
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    from alphac.tools.record import verify_record
    from alphac.nvdrv.host import parse_uuid
    q = script("qualify")
    card = Card(uuid=parse_uuid(UUID), name="NVIDIA H200", driver="580.159.04", sm=90)
    seen = []

    def runner(exe, args, built):
        r = mockgpu.run(exe, args, card=card, kernels=built.kernels, events=False)
        # the ordering probe's control copies without the host's WFI, and the mock says so
        g = built.gpu.buffers["G"] + 24
        assert r.errors == ([f"a copy reads {g:#x}, which order_spin3 wrote with no host WFI between them"]
                            if Path(exe).name == "order-probe" else [])
        seen.append((Path(exe).name, r.returncode, r.allocations != []))
        return r.returncode, r.stdout, r.stderr
    rc = q.main(["--proc", str(fake_proc(tmp_path)), "--records", str(tmp_path / "runs"), "--steps", "3",
                 "--order-spins", "16"], runner=runner)
    assert rc == 0
    said = capsys.readouterr().out
    assert [ln.split()[1:3] for ln in said.splitlines() if ln.startswith("order ")] == \
        [["compute-compute", "passed"], ["control-no-wfi", "no-order"], ["compute-copy", "passed"]]
    rdir = tmp_path / "runs" / "gpu-qualify-0001"
    rec = json.loads((rdir / "record.json").read_text())
    assert rec["passed"] and verify_record(rdir / "record.json") == []
    assert (rec["qmd_variant"]["name"], rec["qmd_variant"]["fields"]) == ("default", {})
    assert seen == [("probe", 0, False), ("order-probe", 0, True), ("independent_state.sm_90", 0, True),
                    ("lsq_adam.sm_90", 0, True)]
    assert [v["result"] for v in rec["order"]["verdicts"]] == ["passed", "no-order", "passed"]
    assert rec["order"]["spins"] == 16 and rec["artifacts"]["bin/order-probe"] == rec["order"]["sha256"]
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
    # each ioctl timed (issue 42: where libcuda's start-up goes), a slow one named in the report
    assert isinstance(call["ns"], int) and 0 <= call["ns"] < 10**9
    slow = dict(call, seq=7, ns=123_400_000)
    assert "(123.4 ms)" in t.describe(slow) and " ms)" not in t.describe(dict(call, ns=999_999))
    assert t.slowest([dict(call, ns=600_000), slow]) == [
        "", "## the slowest ioctls (2 timed, 124.0 ms in all)", t.describe(slow), t.describe(dict(call, ns=600_000))]


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
    found = t.launched_qmds(arch, image.launch_pushbuf(arch, [0x10_0002_0000], 0x10_0040_1000), read)
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
    # through the inline-to-memory engine (tinygrad's way), then launched from memory the CPU
    # cannot read (read gives None there): the QMD comes from the method stream alone
    at = 0x10_0005_0000
    pb = [image.method(1, m["OFFSET_OUT_UPPER"], 2), at >> 32, at & 0xffffffff,
          image.method(1, m["LINE_LENGTH_IN"], 2), len(qmd), 1, image.method(1, m["LAUNCH_DMA"], 1), 0x41,
          image.pack_bitfields({"NVC56F_DMA_SEC_OP": abi.CONSTANTS["NVC56F_DMA_SEC_OP_NON_INC_METHOD"],
                                "NVC56F_DMA_METHOD_COUNT": len(words), "NVC56F_DMA_METHOD_SUBCHANNEL": 1,
                                "NVC56F_DMA_METHOD_ADDRESS": m["LOAD_INLINE_DATA"] >> 2}), *words,
          image.method(1, m["SEND_PCAS_A"], 1), at >> 8]
    assert t.launched_qmds(arch, pb, read) == [{"how": "i2m", "va": at, "qmd": qmd.hex(), "dwords": 96, "cbank0": cb}]
    # qualify's variants: every one packs; a trace holding that QMD adds "libcuda", second
    q = script("qualify")
    la = image.Launch("k", 1, 32, 3, 0x10_0000_0000, "", 0, b"", 0x10_0004_0000, cbank, ())
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


# -- the libcuda trace on Hopper (issue 41) ---------------------------------------------------------
RECORDED = ROOT / "tests" / "data" / "libcuda-h200-2026-12-04.sniff.jsonl.gz"


def pack(struct_name: str, values: dict) -> bytearray:
    """A structure's bytes from abi.STRUCTS, fields by path."""
    from alphac.nvdrv import abi
    from alphac.nvdrv.conversation import locate
    buf = bytearray(abi.STRUCTS[struct_name].size)
    for path, v in values.items():
        off, size = locate(struct_name, path)
        buf[off:off + size] = v.to_bytes(size, "little")
    return buf


def test_recorded_libcuda_log_says_why_there_is_no_ring():
    """The H200 log of 2026-12-04: libcuda passes NVOS64.paramsSize 0 for every RM_ALLOC (the RM
    sizes the parameters by class), so that log holds no NV_CHANNEL_ALLOC_PARAMS: the decoder
    says so for each of libcuda's 20 channels instead of reading empty bytes as ring 0, entries 0
    (what the old decoder reported), and still names what the log does show."""
    t = script("cuda_ioctl_trace")
    log = t.load_log(RECORDED)
    allocs = [e for e in log if e["call"] == "ioctl" and "nested_addr" in e and e["req"] & 0xff == 0x2b]
    assert allocs and all(e["nested_out"] == "" for e in allocs)
    chans = t.channels(log)
    assert [c["class"] for c in chans] == ["HOPPER_CHANNEL_GPFIFO_A"] * 20
    assert all(c["params"] is None and "paramsSize 0" in c["missing"] for c in chans)
    first = chans[:8]
    assert {c["group"] for c in first} == {0x5c000015} and [c["token"] for c in first] == list(range(0xa, 0x12))
    assert all([o for o, _ in c["objects"]] == ["HOPPER_COMPUTE_A", "HOPPER_DMA_COPY_A"] for c in first)
    assert all([o for o, _ in c["objects"]] == ["HOPPER_DMA_COPY_A"] for c in chans[8:])
    dumped = t.dump_channels(log, lambda addr, n: pytest.fail("nothing to read without the parameters"))
    assert all(c["gpput"] is None and c["submits"] == [] and c["params"] is None for c in dumped)
    with pytest.raises(t.TraceError):
        t.field(b"", "NV_CHANNEL_ALLOC_PARAMS", "gpFifoOffset")
    # what the log does show: libcuda's allocations mapped at the same address for CPU and GPU
    maps = t.mappings(log)
    gpu = {m["handle"]: m["at"] for m in maps["gpu"]}
    assert sum(1 for m in maps["cpu"] if gpu.get(m["handle"]) == m["at"]) >= 5
    assert "NV_CHANNEL_ALLOC_PARAMS not recorded (paramsSize 0" in "\n".join(t.channel_lines(log))


def test_sniffer_records_alloc_params_by_class(tmp_path):
    """An NVOS64 RM_ALLOC that says 0 bytes (as libcuda's do) is logged with the class's own
    parameter structure: a GPFIFO channel's 368 bytes; a class the table lacks logs none and
    says why."""
    require_tool("gcc")
    t = script("cuda_ioctl_trace")
    so = t.build_sniffer(tmp_path)
    from alphac.nvdrv import abi
    cmd = abi.NV_IOCTLS["NV_ESC_RM_ALLOC(NVOS64_PARAMETERS)"].cmd
    probe = f"""
import ctypes, os
params = ctypes.create_string_buffer(bytes(range(256)) + bytes(range(112)))
for cls in ({abi.CLASSES['HOPPER_CHANNEL_GPFIFO_A']}, 0xcb33):
    arg = bytearray(48)
    arg[12:16] = cls.to_bytes(4, "little")
    arg[16:24] = ctypes.addressof(params).to_bytes(8, "little")
    buf = (ctypes.c_char * 48).from_buffer(arg)
    libc = ctypes.CDLL(None)
    libc.ioctl(os.open('/dev/null', os.O_RDWR), {cmd}, buf)
"""
    env = dict(os.environ, LD_PRELOAD=str(so), SNIFF_PREFIX="/dev/null", **t.sniffer_env(tmp_path / "log"))
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    chan, other = [e for e in t.load_log(tmp_path / "log") if e["call"] == "ioctl"]
    assert chan["nested_by"] == "class" and t.logged(chan, "nested_in") == bytes(range(256)) + bytes(range(112))
    assert t.alloc_params(chan)[0] == bytes(range(256)) + bytes(range(112))
    assert other["nested_by"] == "unknown-class" and other["nested_out"] == ""
    assert "not in cuda_ioctl_trace.ALLOC_PARAMS" in t.alloc_params(other)[1]


HARNESS = r"""
import ctypes, json, mmap, os, struct, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/gpu"]
import cuda_ioctl_trace as t
from alphac.nvdrv import abi, image
from test_gpu_scripts import pack
dev, GPU, H_MEM, H_CHAN, H_GROUP = Path(sys.argv[2]), 0x20_0020_0000, 0x5c000019, 0x5c00001c, 0x5c000015
arch = abi.ARCHES["sm_90"]
m = abi.METHODS[arch.compute_methods]
libc = ctypes.CDLL(None)
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
sn = ctypes.CDLL(sys.argv[3])
sn.sniff_read.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
def ioctl(fd, name, data):
    buf = (ctypes.c_char * len(data)).from_buffer(data)
    libc.ioctl(fd, abi.NV_IOCTLS[name].cmd if isinstance(name, str) else name, ctypes.addressof(buf))
ctl = os.open(dev / "nvidiactl", os.O_RDWR)
uvm = os.open(dev / "nvidia-uvm", os.O_RDWR)
# the channel, its parameters sized by class (paramsSize 0, as libcuda does)
params = pack("NV_CHANNEL_ALLOC_PARAMS", {"gpFifoOffset": GPU, "gpFifoEntries": 8, "hObjectBuffer": H_MEM,
                                          "hUserdMemory[0]": H_MEM, "userdOffset[0]": 0x1000})
pbuf = (ctypes.c_char * len(params)).from_buffer(params)
ioctl(ctl, "NV_ESC_RM_ALLOC(NVOS64_PARAMETERS)", pack("NVOS64_PARAMETERS", {
    "hObjectParent": H_GROUP, "hObjectNew": H_CHAN, "hClass": abi.CLASSES["HOPPER_CHANNEL_GPFIFO_A"],
    "pAllocParms": ctypes.addressof(pbuf)}))
# the memory: mapped for the CPU (RM_MAP_MEMORY, mmap on the fd it names) and the GPU (UVM)
fd = os.open(dev / "nvidia0", os.O_RDWR)
ioctl(ctl, "NV_ESC_RM_MAP_MEMORY(nv_ioctl_nvos33_parameters_with_fd)", pack(
    "nv_ioctl_nvos33_parameters_with_fd", {"params.hMemory": H_MEM, "params.length": 0x10000, "fd": fd}))
cpu = libc.mmap(None, 0x10000, 3, 1, fd, 0)
os.close(fd)
ioctl(uvm, abi.UVM_IOCTLS["UVM_MAP_EXTERNAL_ALLOCATION"].cmd, pack("UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", {
    "base": GPU, "length": 0x10000, "hMemory": H_MEM}))
mem = (ctypes.c_char * 0x10000).from_address(cpu)
def put(off, words):
    mem[off:off + 4 * len(words)] = struct.pack(f"<{len(words)}I", *words)
def gpput(n):
    put(0x1000 + abi.USERD_GPPUT_OFFSET, [n])
def read(addr, n):
    buf = ctypes.create_string_buffer(n)
    return buf.raw if sn.sniff_read(addr, n, buf) == 0 else None
layout = abi.QMD_LAYOUTS[arch.qmd]
qmd = abi.pack_qmd(layout, {"QMD_MAJOR_VERSION": 4, "SHADER_LOCAL_MEMORY_LOW_SIZE": 0x400 >> 4,
                            "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)": (GPU + 0x5000) >> 6 & 0xffffffff,
                            "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)": (GPU + 0x5000) >> 38,
                            "CONSTANT_BUFFER_SIZE_SHIFTED4(0)": 0x100 >> 4})
mem[0x4000:0x4000 + len(qmd)] = qmd
mem[0x5000:0x5100] = bytes(range(256))
setup = [image.method(4, m["SET_OBJECT"], 1), abi.CLASSES["HOPPER_COMPUTE_A"],
         image.method(4, m["SET_SHADER_LOCAL_MEMORY_A"], 2), 0x7f, 0x12340000,
         image.method(4, m["SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A"], 3), 0, 0x420000, 0x84]
launch = [image.method(4, m["SEND_PCAS_A"], 1), (GPU + 0x4000) >> 8]
put(0x2000, setup)
put(0x3000, launch)
put(0, struct.unpack("<2I", struct.pack("<Q", image.gpfifo_entry(arch, GPU + 0x2000, len(setup)))))
gpput(1)
log = Path(os.environ["SNIFF_LOG"])
marks = [("set-up", t.gpputs(t.load_log(log), read))]
put(8, struct.unpack("<2I", struct.pack("<Q", image.gpfifo_entry(arch, GPU + 0x3000, len(launch)))))
gpput(2)
marks.append(("k", t.gpputs(t.load_log(log), read)))
print(json.dumps({"sm": 90, "kernel": "k", "learner": "independent_state"} | t.after_launch(
    log, read, marks, [{"kernel": "k", "threads": 32, "local_per_thread": 1024}])))
"""


def test_trace_reads_a_hopper_ring_through_its_mappings(tmp_path):
    """The sniffer and the decoder together, as inner() uses them, on files standing in for the
    device nodes: a channel whose parameters come sized by class (paramsSize 0), its memory mapped
    for the CPU at one address and for the GPU at another, GPPut in its USERD read between the
    'launches'. The ring, both push buffers (the compute class bound by SET_OBJECT in the first
    on subchannel 4, tinygrad's copy one, and used in the second), the QMD and its constant bank
    are found through the mappings, each submit
    tagged with its launch, traced_qmd takes the tagged one, and the report's local-memory
    section shows the methods and the QMD's local-memory size."""
    require_tool("gcc")
    t = script("cuda_ioctl_trace")
    so = t.build_sniffer(tmp_path)
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ("nvidiactl", "nvidia0", "nvidia-uvm"):
        (dev / n).write_bytes(bytes(0x10000))
    env = dict(os.environ, LD_PRELOAD=str(so), SNIFF_PREFIX=str(dev / "nvidia"),
               PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", **t.sniffer_env(tmp_path / "log"))
    run = subprocess.run([sys.executable, "-c", HARNESS, str(ROOT), str(dev), str(so)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    (ch,) = info["channels"]
    assert ch["params"]["ring"] == 0x20_0020_0000 and ch["params"]["entries"] == 8 and ch["gpput"] == 2
    assert [(s["index"], s["launch"]) for s in ch["submits"]] == [(0, "set-up"), (1, "k")]
    (q,) = ch["submits"][1]["qmds"]
    assert q["how"] == "memory" and q["va"] == 0x20_0020_4000 and q["cbank0"]["bytes"] == bytes(range(256)).hex()
    assert t.traced_qmd(info)[1] == q
    from alphac.nvdrv import abi
    lines = "\n".join(t.local_memory_lines(info, abi.ARCHES["sm_90"], None))
    assert "set-up): SET_SHADER_LOCAL_MEMORY_A = 0x7f" in lines and "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C = 0x84" in lines
    assert "libcuda in all: area 0x7f12340000, size 0x420000, NON_THROTTLED_C 0x84" in lines
    assert "(k): SHADER_LOCAL_MEMORY_HIGH_SIZE=0x0, SHADER_LOCAL_MEMORY_LOW_SIZE=0x40" in lines


def test_trace_spill_kernel_needs_local_memory():
    """The trace's second kernel: ptxas gives it at least its 1 KiB .local array a thread."""
    require_tool("ptxas")
    t = script("cuda_ioctl_trace")
    from alphac.ptx.cubin import read_cubin
    from alphac.ptx.ptxas import assemble
    for sm in (86, 90):
        assert read_cubin(assemble(t.SPILL_PTX.format(sm=sm), sm))[t.SPILL_KERNEL].local >= 1024
    assert t.spill_expected(3) == [5, 13, 21]


FAKE_CUDA = r"""
import ctypes, struct, sys, types
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/gpu"]
import cuda_ioctl_trace as t
fake = types.ModuleType("vendor_check")
launched = []
class Cuda:
    sm = 90
    def __init__(self, path):
        pass
    def call(self, name, *args):
        if name == "cuMemcpyDtoH_v2":            # the spilling kernel's result, as the card computes it
            if sys.argv[3] == "fails":
                raise RuntimeError("cuMemcpyDtoH_v2: CUDA_ERROR_LAUNCH_FAILED (719)")
            ctypes.memmove(args[0], struct.pack("<128I", *t.spill_expected(128)), 512)
class CudaDevice:
    def __init__(self, cuda, cubins):
        self.cubins, self.next = cubins, 0x1000
    def alloc(self, values):
        self.next += 0x1000
        return self.next
    def write(self, addr, values):
        pass
    def read(self, addr, count):
        return [0.0] * count
    def launch(self, kernel, args, threads):
        launched.append((kernel.name, [p.type for p in kernel.params], threads, kernel.name in self.cubins))
fake.Cuda, fake.CudaDevice = Cuda, CudaDevice
sys.modules["vendor_check"] = fake
rc = t.main(["--inner", "--out", sys.argv[2]])
print(rc, launched)
"""


@pytest.mark.parametrize("spill", ["right", "fails"])
def test_trace_inner_run_with_a_fake_libcuda(tmp_path, spill):
    """The inner run's glue, with CUDA's calls faked (no ioctls, so no channels): alphac's
    kernel is launched first, then the spilling kernel, assembled and loaded (u64, u32; 128
    threads), and its result checked (a CUDA error there is recorded as its result);
    channels.json lists both launches with their local memory, and the report's local-memory
    section and its verdict on libcuda's QMD come out."""
    require_tool("gcc")
    require_tool("ptxas")
    t = script("cuda_ioctl_trace")
    so = t.build_sniffer(tmp_path)
    env = dict(os.environ, LD_PRELOAD=str(so), **t.sniffer_env(tmp_path / "sniff.jsonl"))
    run = subprocess.run([sys.executable, "-c", FAKE_CUDA, str(ROOT), str(tmp_path), spill], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("0 "), run.stderr
    assert "('update_g0', " in run.stdout and "), ('spill_local', ['u64', 'u32'], 128, True)]" in run.stdout
    info = json.loads((tmp_path / "channels.json").read_text())
    assert info["channels"] == [] and info["kernel"] == "update_g0"
    mine, spill_la = info["launches"]
    assert (spill_la["kernel"], mine["kernel"]) == ("spill_local", "update_g0")
    assert spill_la["result"] == ("right" if spill == "right" else
                                  "failed: cuMemcpyDtoH_v2: CUDA_ERROR_LAUNCH_FAILED (719)")
    spill = spill_la
    assert spill["local_per_thread"] >= 1024 and mine["local_per_thread"] == 0
    text = t.report(tmp_path)
    assert "libcuda launch spill_local: 128 threads" in text and "alphac QMD (update_g0): SHADER_LOCAL_MEMORY" in text
    assert "## no QMD of libcuda's for update_g0 in the trace" in text


def test_holder_holds_the_files_and_makes_the_owners_uvm_calls(tmp_path):
    holder = script("holder")
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.nvdrv.conversation import IOCTL, locate
    from test_nvdrv_owner import host_for
    at = {f: locate("UVM_REGISTER_GPU_PARAMS", f)[0] for f in ("gpu_uuid", "rmCtrlFd", "rmStatus")}
    host = host_for(90)
    for name in ("nvidiactl", "nvidia0", "nvidia-uvm"):
        (tmp_path / name).write_bytes(b"")

    def opened():
        paths = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:             # listdir's own
                pass
        return sorted(p for p in paths if p.startswith(str(tmp_path)))
    with holder.held(host.uuid, 0, "fds", dev=str(tmp_path)):
        assert opened() == [str(tmp_path / "nvidia0"), str(tmp_path / "nvidiactl")]
    assert opened() == []
    calls = []

    def ioctl(fd, request, arg, mutate, status=0):
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), request, bytes(arg)))
        if len(calls) == 3:
            arg[at["rmStatus"]:at["rmStatus"] + 4] = status.to_bytes(4, "little")
    with holder.held(host.uuid, 0, "uvm", dev=str(tmp_path), ioctl=ioctl):
        assert len(opened()) == 4
    assert opened() == []
    conv = build_gpu_owner(compile_file(ROOT / "examples" / "lsq_adam.alpha").learner, "x86_64+sm_90", host).conversation
    owners = [c.args[1] for c in conv.calls if c.op == IOCTL and c.what.startswith("UVM_")][:3]
    assert [r for _, r, _ in calls] == owners          # UVM_INITIALIZE, UVM_MM_INITIALIZE, UVM_REGISTER_GPU
    assert all(p == str(tmp_path / "nvidia-uvm") for p, _, _ in calls)
    register = calls[2][2]
    assert register[at["gpu_uuid"]:at["gpu_uuid"] + 16] == host.uuid
    assert int.from_bytes(register[at["rmCtrlFd"]:at["rmCtrlFd"] + 4], "little", signed=True) == -1
    calls.clear()
    with pytest.raises(holder.HoldFailed, match="UVM_REGISTER_GPU: status 0x56"):
        with holder.held(host.uuid, 0, "uvm", dev=str(tmp_path), ioctl=lambda *a: ioctl(*a, status=0x56)):
            pass
    assert opened() == []
    (tmp_path / "nvidia-uvm").unlink()
    with pytest.raises(holder.HoldFailed, match="cannot open .*nvidia-uvm: No such file"):
        with holder.held(host.uuid, 0, "uvm", dev=str(tmp_path)):
            pass
    assert opened() == []
