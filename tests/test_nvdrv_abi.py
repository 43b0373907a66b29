"""alphac/nvdrv/abi.py (and its generated numbers, generated/abi_580.py) against the golden file the
header probe wrote.

tests/golden/nvdrv_abi_580.json holds what gcc computed from NVIDIA's published headers
(see tests/nvdrv_layout_probe/README.md).  Every table in abi.py must equal it entry for
entry, in both directions: nothing in abi.py that the headers did not confirm, nothing
probed that abi.py lacks.  No network, no headers, no GPU needed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from nvdrv_decode import unpack_qmd, qmd_field
from alphac.nvdrv import abi

GOLDEN_PATH = Path(__file__).parent / "golden" / "nvdrv_abi_580.json"


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN_PATH.read_text())


def same_keys(name, ours, theirs):
    ours, theirs = set(ours), set(theirs)
    assert not ours - theirs, f"{name}: in abi.py but not in the golden file: {sorted(ours - theirs)}"
    assert not theirs - ours, f"{name}: in the golden file but not in abi.py: {sorted(theirs - ours)}"


# ----------------------------------------------------------------------------- sources --

def test_source_matches_golden(golden):
    src = golden["source"]
    for tree in ("open-gpu-kernel-modules", "open-gpu-doc"):
        for k, v in src[tree].items():
            assert abi.SOURCE[tree][k] == v
    assert abi.SOURCE["open-gpu-kernel-modules"]["tag"].startswith("580.")
    paths = {h["path"] for h in src["headers"]}
    for must in ("src/common/sdk/nvidia/inc/nvos.h", "kernel-open/common/inc/nv-ioctl.h",
                 "kernel-open/nvidia-uvm/uvm_ioctl.h", "classes/compute/clcbc0qmd.h",
                 "classes/compute/clc7c0qmd.h", "src/nvidia/arch/nvalloc/unix/include/nv_escape.h"):
        assert must in paths
    assert all(len(h["sha256"]) == 64 for h in src["headers"])


def test_docstring_names_tag_and_paths():
    doc = abi.__doc__
    assert "580.142" in doc and abi.SOURCE["open-gpu-kernel-modules"]["commit"] in doc
    for p in ("nv-ioctl-numbers.h", "nv_escape.h", "nvos.h", "uvm_ioctl.h", "clcbc0qmd.h", "clc7c0qmd.h"):
        assert p in doc


# ----------------------------------------------------------------------------- structs --

def test_structs_match_golden(golden):
    same_keys("STRUCTS", abi.STRUCTS, golden["structs"])
    for name, s in abi.STRUCTS.items():
        g = golden["structs"][name]
        assert s.name == name
        assert (s.size, s.align) == (g["size"], g["align"]), name
        ours = [[f.name, f.offset, f.size, f.kind, f.count] for f in s.fields]
        assert ours == g["fields"], name


_SCALAR = {"u8": 1, "s8": 1, "char": 1, "bool": 1, "u16": 2, "s16": 2, "u32": 4, "s32": 4,
           "enum": 4, "u64": 8, "s64": 8, "ptr": 8}


@pytest.mark.parametrize("name", sorted(abi.STRUCTS))
def test_struct_is_self_consistent(name):
    s = abi.STRUCTS[name]
    end = 0
    for f in s.fields:
        assert f.offset >= end, f"{name}.{f.name} overlaps the field before it"
        assert f.count >= 1
        if f.kind in _SCALAR:
            assert f.size == _SCALAR[f.kind] * f.count, f"{name}.{f.name}"
            assert f.offset % _SCALAR[f.kind] == 0, f"{name}.{f.name} misaligned"
        elif f.kind.startswith("struct:"):
            ref = abi.STRUCTS[f.kind[len("struct:"):]]
            assert f.size == ref.size * f.count
            assert f.offset % ref.align == 0
        else:
            assert f.kind == "union"
        end = f.offset + f.size
    assert end <= s.size and s.size % s.align == 0


def test_launch_critical_layouts():
    """The layouts a first launch depends on, spelled out (also covered by the golden)."""
    S = abi.STRUCTS
    assert S["NVOS21_PARAMETERS"].size == 32 and S["NVOS64_PARAMETERS"].size == 48
    assert S["NVOS54_PARAMETERS"].size == 32 and S["NVOS54_PARAMETERS"].offset("params") == 16
    assert S["NVOS46_PARAMETERS"].size == 64                       # 580: flags2, kindOverride
    assert S["NVOS46_PARAMETERS"].offset("dmaOffset") == 48
    assert S["nv_ioctl_nvos33_parameters_with_fd"].offset("fd") == 48
    assert S["NV_VASPACE_ALLOCATION_PARAMETERS"].offset("pasid") == 48
    assert S["NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS"].size == 3      # bEnable, bSkipSubmit, bSkipEnable
    assert S["NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS"].offset("bSkipEnable") == 2
    assert S["UVM_MAP_EXTERNAL_ALLOCATION_PARAMS"].size == 9264
    assert S["UVM_MAP_EXTERNAL_ALLOCATION_PARAMS"].field("perGpuAttributes").count == 256
    assert S["NV_CHANNEL_ALLOC_PARAMS"].size == 368
    assert S["nv_ioctl_card_info_t"].size == 72
    assert abi.USERD_GPPUT_OFFSET == 0x8C == S["AmpereAControlGPFifo"].offset("GPPut")
    assert abi.USERD_GPGET_OFFSET == 0x88 == S["AmpereAControlGPFifo"].offset("GPGet")
    assert abi.USERMODE_DOORBELL_OFFSET == 0x90


# ----------------------------------------------------------------------------- ioctls ---

def test_escapes_match_golden(golden):
    same_keys("NV_ESCAPES", abi.NV_ESCAPES, golden["escapes"])
    assert dict(abi.NV_ESCAPES) == golden["escapes"]
    named = {"NV_ESC_CARD_INFO": 200, "NV_ESC_REGISTER_FD": 201, "NV_ESC_CHECK_VERSION_STR": 210,
             "NV_ESC_IOCTL_XFER_CMD": 211, "NV_ESC_WAIT_OPEN_COMPLETE": 218,
             "NV_ESC_RM_ALLOC_MEMORY": 0x27, "NV_ESC_RM_FREE": 0x29, "NV_ESC_RM_CONTROL": 0x2A,
             "NV_ESC_RM_ALLOC": 0x2B, "NV_ESC_RM_VID_HEAP_CONTROL": 0x4A,
             "NV_ESC_RM_MAP_MEMORY": 0x4E, "NV_ESC_RM_MAP_MEMORY_DMA": 0x57}
    for k, v in named.items():
        assert abi.NV_ESCAPES[k] == v


def test_nv_ioctls_match_golden(golden):
    same_keys("NV_IOCTLS", abi.NV_IOCTLS, golden["nv_ioctls"])
    for key, io in abi.NV_IOCTLS.items():
        g = golden["nv_ioctls"][key]
        assert (io.escape, io.struct, io.count) == (g["escape"], g["struct"], g["count"]), key
        assert (io.nr, io.size, io.cmd) == (g["nr"], g["size"], g["cmd"]), key
        assert g["size"] == golden["structs"][g["struct"]]["size"] * g["count"]
        assert abi._IOC_NR(io.cmd) == io.nr and abi._IOC_SIZE(io.cmd) == io.size
        assert abi._IOC_TYPE(io.cmd) == ord("F") and abi._IOC_DIR(io.cmd) == 3


def test_named_ioctl_numbers():
    io = abi.NV_IOCTLS
    assert io["NV_ESC_RM_ALLOC(NVOS21_PARAMETERS)"].cmd == 0xC020462B
    assert io["NV_ESC_RM_CONTROL(NVOS54_PARAMETERS)"].cmd == 0xC020462A
    assert io["NV_ESC_RM_MAP_MEMORY_DMA(NVOS46_PARAMETERS)"].cmd == 0xC0404657
    assert abi.NvIoctl("NV_ESC_CARD_INFO", "nv_ioctl_card_info_t", 64).cmd == abi._IOWR("F", 200, 64 * 72)


def test_uvm_ioctls_match_golden(golden):
    same_keys("UVM_IOCTLS", abi.UVM_IOCTLS, golden["uvm_ioctls"])
    for k, u in abi.UVM_IOCTLS.items():
        assert {"cmd": u.cmd, "params": u.params} == golden["uvm_ioctls"][k], k
        assert u.params is None or u.params in abi.STRUCTS
    named = {"UVM_INITIALIZE": 0x30000001, "UVM_MM_INITIALIZE": 75, "UVM_REGISTER_GPU": 37,
             "UVM_REGISTER_GPU_VASPACE": 25, "UVM_REGISTER_CHANNEL": 27,
             "UVM_MAP_EXTERNAL_ALLOCATION": 33, "UVM_CREATE_EXTERNAL_RANGE": 73, "UVM_FREE": 34}
    for k, v in named.items():
        assert abi.UVM_IOCTLS[k].cmd == v


def test_ctrl_cmds_match_golden(golden):
    same_keys("CTRL_CMDS", abi.CTRL_CMDS, golden["ctrl_cmds"])
    for k, c in abi.CTRL_CMDS.items():
        assert {"cmd": c.cmd, "params": c.params} == golden["ctrl_cmds"][k], k
        assert c.params in abi.STRUCTS
    assert abi.CTRL_CMDS["NV2080_CTRL_CMD_GPU_GET_GID_INFO"].cmd == 0x2080014A
    assert abi.CTRL_CMDS["NV2080_CTRL_CMD_GPU_GET_NAME_STRING"].cmd == 0x20800110
    assert abi.CTRL_CMDS["NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN"].cmd == 0xC36F0108
    assert abi.CTRL_CMDS["NVA06C_CTRL_CMD_GPFIFO_SCHEDULE"].cmd == 0xA06C0101


# ----------------------------------------------------------------------------- classes --

def test_classes_match_golden(golden):
    same_keys("CLASSES", abi.CLASSES, golden["classes"])
    assert dict(abi.CLASSES) == golden["classes"]
    named = {"NV01_ROOT_CLIENT": 0x41, "NV01_DEVICE_0": 0x80, "NV20_SUBDEVICE_0": 0x2080,
             "NV01_MEMORY_VIRTUAL": 0x70, "NV1_MEMORY_USER": 0x40, "NV01_MEMORY_SYSTEM": 0x3E,
             "FERMI_VASPACE_A": 0x90F1, "KEPLER_CHANNEL_GROUP_A": 0xA06C,
             "FERMI_CONTEXT_SHARE_A": 0x9067, "AMPERE_CHANNEL_GPFIFO_A": 0xC56F,
             "AMPERE_COMPUTE_B": 0xC7C0, "AMPERE_DMA_COPY_B": 0xC7B5, "AMPERE_USERMODE_A": 0xC561,
             "HOPPER_CHANNEL_GPFIFO_A": 0xC86F, "HOPPER_COMPUTE_A": 0xCBC0,
             "HOPPER_DMA_COPY_A": 0xC8B5, "HOPPER_USERMODE_A": 0xC661}
    for k, v in named.items():
        assert abi.CLASSES[k] == v


@pytest.mark.parametrize("sm", sorted(abi.ARCHES))
def test_arch_entries_refer_to_tables(sm):
    a = abi.ARCHES[sm]
    for c in (a.compute, a.gpfifo, a.dma_copy, a.usermode):
        assert c in abi.CLASSES
    assert a.qmd in abi.QMD_LAYOUTS
    for m in (a.compute_methods, a.host_methods, a.copy_methods):
        assert m in abi.METHODS
    # the method prefix is the class number: NVC7C0 <-> 0xc7c0
    assert int(a.compute_methods[2:], 16) == abi.CLASSES[a.compute]
    assert int(a.host_methods[2:], 16) == abi.CLASSES[a.gpfifo]
    assert int(a.copy_methods[2:], 16) == abi.CLASSES[a.dma_copy]


# ----------------------------------------------------------------------------- methods --

def test_methods_match_golden(golden):
    same_keys("METHODS", abi.METHODS, golden["methods"])
    for prefix, ms in abi.METHODS.items():
        same_keys(f"METHODS[{prefix}]", ms, golden["methods"][prefix])
        assert dict(ms) == golden["methods"][prefix], prefix


def test_named_methods():
    for p in ("NVC7C0", "NVCBC0"):
        m = abi.METHODS[p]
        assert m["SET_OBJECT"] == 0 and m["SEND_PCAS_A"] == 0x2B4 and m["SEND_SIGNALING_PCAS2_B"] == 0x2C0
    h = abi.METHODS["NVC86F"]
    assert (h["SEM_ADDR_LO"], h["SEM_ADDR_HI"], h["SEM_PAYLOAD_LO"], h["SEM_PAYLOAD_HI"],
            h["SEM_EXECUTE"]) == (0x5C, 0x60, 0x64, 0x68, 0x6C)


# ------------------------------------------------------------------ values and bit ranges --

def test_constants_match_golden(golden):
    same_keys("CONSTANTS", abi.CONSTANTS, golden["constants"])
    assert dict(abi.CONSTANTS) == golden["constants"]


def test_bitfields_match_golden(golden):
    same_keys("BITFIELDS", abi.BITFIELDS, golden["bitfields"])
    for k, v in abi.BITFIELDS.items():
        assert list(v) == golden["bitfields"][k], k
        assert 0 <= v[1] <= v[0] < 32


def test_status_codes_match_golden(golden):
    same_keys("STATUS_CODES", abi.STATUS_CODES, golden["status_codes"])
    assert dict(abi.STATUS_CODES) == golden["status_codes"]


def test_pack_bitfields():
    w = abi.pack_bitfields({"NVC86F_SEM_EXECUTE_OPERATION": abi.CONSTANTS["NVC86F_SEM_EXECUTE_OPERATION_RELEASE"],
                            "NVC86F_SEM_EXECUTE_RELEASE_WFI": 1,
                            "NVC86F_SEM_EXECUTE_PAYLOAD_SIZE": 1})
    assert w == 1 | (1 << 20) | (1 << 24)
    head = abi.pack_bitfields({"NVC56F_DMA_INCR_OPCODE": abi.CONSTANTS["NVC56F_DMA_INCR_OPCODE_VALUE"],
                               "NVC56F_DMA_INCR_COUNT": 2, "NVC56F_DMA_INCR_SUBCHANNEL": 1,
                               "NVC56F_DMA_INCR_ADDRESS": abi.METHODS["NVCBC0"]["SEND_PCAS_A"] >> 2})
    assert head == (1 << 29) | (2 << 16) | (1 << 13) | (0x2B4 >> 2)
    with pytest.raises(ValueError):
        abi.pack_bitfields({"NVC86F_SEM_EXECUTE_OPERATION": 8})


# ----------------------------------------------------------------------------- QMD ------

def test_qmd_layouts_match_golden(golden):
    same_keys("QMD_LAYOUTS", abi.QMD_LAYOUTS, golden["qmd"])
    for name, q in abi.QMD_LAYOUTS.items():
        g = golden["qmd"][name]
        assert (q.header, q.prefix, q.bits) == (g["header"], g["prefix"], g["bits"])
        same_keys(f"QMD {name} fields", q.fields, g["fields"])
        for f, v in q.fields.items():
            assert list(v) == g["fields"][f], f"{name}.{f}"
        same_keys(f"QMD {name} values", q.values, g["values"])
        assert dict(q.values) == g["values"]
        assert dict(q.indexed_counts) == g["indexed_counts"]


@pytest.mark.parametrize("name", sorted(abi.QMD_LAYOUTS))
def test_qmd_fields_disjoint_and_inside(name):
    q = abi.QMD_LAYOUTS[name]
    spans = sorted((lo, hi, f) for f, (hi, lo) in q.fields.items())
    for lo, hi, f in spans:
        assert 0 <= lo <= hi < q.bits, f
    for (alo, ahi, a), (blo, bhi, b) in zip(spans, spans[1:]):
        assert blo > ahi, f"{a} and {b} overlap"
    for fam, n in q.indexed_counts.items():
        assert all(qmd_field(fam, i) in q.fields for i in range(n))
        assert qmd_field(fam, n) not in q.fields


def test_qmd_sizes_and_named_fields():
    v3, v4 = abi.QMD_V03_00, abi.QMD_V04_00
    assert (v3.dwords, v3.nbytes) == (64, 256)
    assert (v4.dwords, v4.nbytes) == (96, 384)
    f3, f4 = v3.fields, v4.fields
    assert f3["CTA_RASTER_WIDTH"] == (415, 384) and f3["CTA_THREAD_DIMENSION0"] == (607, 592)
    assert f3["REGISTER_COUNT_V"] == (656, 648) and f3["SASS_VERSION"] == (1663, 1656)
    assert f3["PROGRAM_ADDRESS_LOWER"] == (1567, 1536) and f3["RELEASE0_ADDRESS_LOWER"] == (799, 768)
    assert f3["CONSTANT_BUFFER_ADDR_LOWER(1)"] == (1119, 1088)
    assert f4["REGISTER_COUNT"] == (1208, 1200) and f4["SASS_VERSION"] == (543, 536)
    assert f4["PROGRAM_ADDRESS_LOWER"] == (1247, 1216) and f4["PROGRAM_ADDRESS_UPPER"] == (1272, 1248)
    assert f4["CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)"] == (1567, 1536)
    assert f4["CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(2)"] == (1567 + 128, 1536 + 128)
    assert f4["RELEASE_SEMAPHORE0_ADDR_LOWER"] == (671, 640)
    assert f4["GRID_WIDTH"] == (1055, 1024) and f4["CTA_THREAD_DIMENSION2"] == (1199, 1184)
    assert f4["QMD_MAJOR_VERSION"] == (583, 580)


# pack_qmd: random subsets of fields with random values round-trip; out-of-range refused.

def _fields_and_values(layout):
    names = sorted(layout.fields)

    @st.composite
    def draw(d):
        chosen = d(st.lists(st.sampled_from(names), unique=True, max_size=40))
        vals = {}
        for n in chosen:
            hi, lo = layout.fields[n]
            vals[n] = d(st.integers(0, (1 << (hi - lo + 1)) - 1))
        return vals
    return draw()


@pytest.mark.parametrize("name", sorted(abi.QMD_LAYOUTS))
def test_pack_qmd_round_trip(name):
    layout = abi.QMD_LAYOUTS[name]

    @settings(max_examples=300, deadline=None)
    @given(_fields_and_values(layout))
    def check(vals):
        image = abi.pack_qmd(layout, vals)
        assert len(image) == layout.nbytes
        back = unpack_qmd(layout, image)
        for f, v in back.items():
            assert v == vals.get(f, 0), f
    check()


@pytest.mark.parametrize("name", sorted(abi.QMD_LAYOUTS))
def test_pack_qmd_refuses_overflow(name):
    layout = abi.QMD_LAYOUTS[name]
    names = sorted(layout.fields)

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from(names), st.integers(0, 1 << 70))
    def check(field, excess):
        hi, lo = layout.fields[field]
        with pytest.raises(abi.QmdFieldError):
            abi.pack_qmd(layout, {field: (1 << (hi - lo + 1)) + excess})
        with pytest.raises(abi.QmdFieldError):
            abi.pack_qmd(layout, {field: -1 - excess})
    check()


def test_pack_qmd_refuses_nonsense():
    q = abi.QMD_V04_00
    with pytest.raises(abi.QmdFieldError):
        abi.pack_qmd(q, {"NO_SUCH_FIELD": 1})
    with pytest.raises(abi.QmdFieldError):
        abi.pack_qmd(q, {"GRID_WIDTH": 1.0})
    with pytest.raises(abi.QmdFieldError):
        abi.pack_qmd(q, {"CTA_RASTER_WIDTH": 1})           # a V03 name
    with pytest.raises(abi.QmdFieldError):
        unpack_qmd(q, bytes(256))


def test_pack_qmd_bit_placement():
    """Bit n is bit n % 32 of little-endian dword n // 32."""
    q = abi.QMD_V04_00
    img = abi.pack_qmd(q, {"REGISTER_COUNT": 0x1FF, "QMD_MAJOR_VERSION": 4})
    dw = [int.from_bytes(img[i:i + 4], "little") for i in range(0, len(img), 4)]
    assert dw[1200 // 32] == 0x1FF << (1200 % 32)
    assert dw[580 // 32] == 4 << (580 % 32)
    assert sum(1 for d in dw if d) == 2


# ----------------------------------------------------------------------------- _IOC -----

@given(st.integers(0, 3), st.integers(0, 255), st.integers(0, 255), st.integers(0, (1 << 14) - 1))
def test_ioc_round_trip(d, t, nr, size):
    cmd = abi._IOC(d, t, nr, size)
    assert (abi._IOC_DIR(cmd), abi._IOC_TYPE(cmd), abi._IOC_NR(cmd), abi._IOC_SIZE(cmd)) == (d, t, nr, size)


def test_ioc_refuses_oversize():
    with pytest.raises(ValueError):
        abi._IOWR("F", 200, 1 << 14)
    with pytest.raises(ValueError):
        abi._IOWR("F", 256, 8)
    assert abi._IOWR("F", 0x2B, 32) == 0xC020462B


def test_generated_numbers_are_the_golden_file():
    """alphac/nvdrv/generated/abi_580.py is what tests/nvdrv_layout_probe/autogen.py writes from the
    golden file: the numbers live once (the probe's output), never typed by hand."""
    import subprocess
    import sys
    autogen = Path(__file__).parent / "nvdrv_layout_probe" / "autogen.py"
    r = subprocess.run([sys.executable, str(autogen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = (Path(abi.__file__).parent / "generated" / "abi_580.py").read_text().splitlines()[0]
    assert "generated; do not edit" in first
