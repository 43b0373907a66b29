"""GPU owners against the mock driver: the conversation, the identity checks, the launches, the
host shadow, the refusals (docs/nvdrv.md).

Requires ptxas (the kernels are assembled; failed in CI, skipped elsewhere) and Linux >= 5.14 on
x86-64 for the mock (tests/mockgpu: seccomp user notification at the executable's syscall
boundary). Guarantees checked:
  * the independent-state learner and the least-squares Adam owner, for sm_90 and sm_86, run end
    to end and print the oracle's bits (tests/oracle.py) after five steps, with every driver call
    matching alphac's ABI tables (the mock's error list is empty) and the calls, in order, equal
    to the conversation table's (`expected_trace`); so does the least-squares owner with its host
    part at x86_64-v3 and x86_64-v4 (its shadow in the level's lanes; the launch image and the
    calls the baseline owner's), which gives the baseline owner's and the interpreter's bits and
    refuses `cpu-level` under qemu's model of a CPU without the level's flags (and natively on one);
  * under strace, the executable makes only the calls the conversation lists, plus its output,
    its events file, the completion waits (clock_gettime; nanosleep only after spinning) and exit_group;
  * executed mutants: built for another UUID (device-uuid), another product or driver version, a
    card with less memory than the plan (nvidia-plan-host), no driver (nvidia-open), a flipped
    byte in the launch image (launch-image), a GPU that computes another bit
    (gpu-shadow-mismatch); identity refusals happen before any memory is allocated; one byte
    over the card's memory is refused at compile time, exactly the supply is accepted;
  * the runtime's SHA-256 equals hashlib's at every length up to 300 bytes;
  * the table itself: only ABI numbers, identity before allocation, QMDs and push buffers that
    decode to the plan, GPFIFO entries that round-trip, host descriptions parsed or refused.
"""
import atexit
import os
import re
import shutil
import struct
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import given, strategies as st

import mockgpu
import oracle
from conftest import ROOT, alphac, example, require_tool

from nvdrv_decode import decode_entry, unpack_qmd
from alphac.driver import compile_file
from alphac.nvdrv import abi, conversation as conv_mod, host as host_mod, image as image_mod
from alphac.refusals import exit_code
from mockgpu import Card

HOST = host_mod.make({"uuid": "GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a", "product": "NVIDIA H200",
                      "memory": "143771 MiB", "driver": "580.159.04"})
OWNERS = [("independent_state", 90), ("lsq_adam", 90), ("independent_state", 86), ("lsq_adam", 86)]
# the host part at a level (x86_64-v3+sm_90): its shadow in the level's lanes, and qemu's CPU model
# without the level's flags (-cpu Nehalem: no AVX2; -cpu max: no AVX-512)
LEVELS_RUN = {"x86_64-v3": ("loadw(", "Nehalem"), "x86_64-v4": ("loadz(", "max")}
PRODUCT = {90: "NVIDIA H200", 86: "NVIDIA GeForce RTX 3090"}
_DIR = tempfile.mkdtemp(prefix="alphac-gpu-owners-")
atexit.register(shutil.rmtree, _DIR, True)


def need_mock():
    require_tool("ptxas")
    why = mockgpu.available()
    if why:                             # like require_tool: CI must run the mock
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def host_for(sm: int, **changes) -> host_mod.GpuHost:
    fields = HOST.as_dict() | {"product": PRODUCT[sm]} | changes
    return host_mod.make({k: str(v) for k, v in fields.items()})


def card_for(sm: int, **changes) -> Card:
    h = host_for(sm)
    return Card(**({"uuid": h.uuid, "name": h.product, "driver": h.driver, "sm": sm} | changes))


@lru_cache(maxsize=None)
def owner(name: str, sm: int, level: str = "x86_64", **changes):
    """(path, GpuBuild) of a GPU owner, its host part at `level`, built for host_for(sm, **changes)."""
    from alphac.build import build_gpu_owner
    built = build_gpu_owner(compile_file(example(name)).learner, f"{level}+sm_{sm}", host_for(sm, **changes))
    out = Path(_DIR)
    tag = "-".join(f"{k}{abs(hash(v)) % 10**8}" for k, v in sorted(changes.items()))
    path = out / f"{name}.{level}.sm_{sm}{'.' + tag if tag else ''}"
    path.write_bytes(built.image.elf)
    os.chmod(path, 0o755)
    return path, built


def run(name, sm, args=("--steps", "5"), card=None, **kw):
    path, built = owner(name, sm, kw.pop("level", "x86_64"), **kw.pop("host", {}))
    return mockgpu.run(path, args, card=card or card_for(sm), kernels=built.kernels, **kw), built


# -- end to end ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name,sm,level", [(n, s, "x86_64") for n, s in OWNERS] +
                         [("lsq_adam", 90, lv) for lv in sorted(LEVELS_RUN)])
def test_owner_prints_the_oracle_bits(name, sm, level):
    """At a level (x86_64-v4+sm_90) the host part, the shadow, is lowered in the level's lanes and
    gives the baseline owner's and the interpreter's bits; on a CPU without the level's flags
    (natively, or qemu's model) it is refused `cpu-level` before any call, as a CPU executable is."""
    need_mock()
    r, built = run(name, sm, level=level)
    if level != "x86_64":
        import subprocess
        from alphac.ir.interp import format_state, run as interp_run
        from alphac.targets import LEVELS, host_runs
        vector, cpu = LEVELS_RUN[level]
        assert built.image.target.lanes == LEVELS[level].lanes and vector in built.image.rt_source
        base = owner(name, sm)[1]       # the card's side unchanged: the launch image, the calls
        assert (built.gpu.image, built.conversation.listing()) == (base.gpu.image, base.conversation.listing())
        q = subprocess.run([require_tool("qemu-x86_64"), "-cpu", cpu, str(owner(name, sm, level)[0]), "--steps", "5"],
                           capture_output=True, text=True, timeout=60)
        said = [line for line in q.stderr.splitlines() if not line.startswith("qemu-x86_64: warning")]
        assert (q.returncode, q.stdout, said) == (exit_code("cpu-level"), "", ["refused: cpu-level"])
        if not host_runs(level):        # this CPU: the same refusal, the driver never opened
            assert (r.returncode, r.stdout, r.device_calls()) == (exit_code("cpu-level"), "", [])
            return
        lr = compile_file(example(name)).learner
        assert r.stdout == run(name, sm)[0].stdout == format_state(lr, interp_run(lr, 5))
    assert r.errors == []
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == oracle.run(name, steps=5)
    assert r.device_calls() == built.conversation.expected_trace()
    assert r.boosted                    # the SM clock's boost asked as libcuda asks it
    kernels = [b.kernel.name for b in built.kernels if not b.kernel.name.startswith("digest_")]   # sampled only
    assert [la[0] for la in r.launches] == kernels * 5
    assert r.submissions == 1 + 5       # the setup, then one a step (before the chains: 1 + 5 x 3)
    from alphac.tools.record import split_event
    events = [split_event(line) for line in r.events.split("\n")[1:-1]]
    mem = [f"memory {a.name} {a.size}" for a in built.gpu.memories]
    assert [a.where for a in built.gpu.memories] == ["vidmem", "sysmem-cached"]   # one of each, mapped once
    assert [what for what, _ in events] == ["shadow full", *built.conversation.marks(), "image", "rows", "uploaded",
                                            *(f"step {k}" for k in range(1, 6)), "done"]
    assert {"identity", *mem, "memory", "channel"} <= set(built.conversation.marks())
    assert r.events.endswith("\n") and [t for _, t in events] == sorted(t for _, t in events)
    assert sum(size for _, size in r.allocations) == built.gpu.demand + \
        sum(a.size for a in built.gpu.memories if a.where.startswith("sysmem"))
    # each step's results copied to system memory by the copy engine, in the step's one submission
    chain = built.gpu.chains[tuple(kernels)]
    assert chain.copies and r.copies[1:] == list(chain.copies) * 5
    # and before them, at start-up, the image and the rows from system memory in one copy
    g = built.gpu
    assert r.copies[0][:2] == (g.alloc("staging").va, g.alloc("arena").va) and r.copies[0][2] >= len(g.image)
    assert {built.gpu.results[k] for k in built.gpu.results} >= {dst for _, dst, _ in chain.copies}


def test_an_owner_of_a_learner_with_the_functions_prints_the_interpreters_bits():
    """tests/regress/elementwise_functions.alpha calls every function of the contract (its
    kernels carry the functions inline and their tables as constant buffers)."""
    need_mock()
    from alphac.build import build_gpu_owner
    from alphac.ir.interp import format_state, initial_state, step
    lr = compile_file(ROOT / "tests/regress/elementwise_functions.alpha").learner
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    path = Path(_DIR) / "elementwise_functions.sm_90"
    path.write_bytes(built.image.elf)
    os.chmod(path, 0o755)
    r = mockgpu.run(path, ("--steps", "5"), card=card_for(90), kernels=built.kernels)
    state = initial_state(lr)
    for _ in range(5):
        state = step(lr, state)
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "")
    assert r.stdout == format_state(lr, state)
    assert any(p.name.startswith("tbl_") for b in built.kernels for p in b.kernel.params)


STRACE_LINE = re.compile(r"^\d+ +(\w+)\((.*)\) += (-?\w+)")


def test_strace_shows_only_the_conversation():
    need_mock()
    require_tool("strace")
    r, built = run("lsq_adam", 90, strace=True)
    assert r.errors == [] and r.returncode == 0 and r.stdout == oracle.run("lsq_adam", steps=5)
    calls = []
    for line in r.strace:
        m = STRACE_LINE.match(line)
        if m is None:
            assert "exit_group" in line or "+++" in line, line
            calls.append(("exit_group", line.split("(")[1].split(")")[0]))
            continue
        calls.append((m[1], m[2], m[3]))
    assert calls[0][0] == "execve"
    paths, device, other = {}, [], []
    for c in calls[1:]:
        if c[0] == "openat":
            path = re.search(r'"([^"]*)"', c[1])[1]
            paths[int(c[2])] = path
            (device if path.startswith("/dev/nvidia") else other).append(("openat", path))
        elif c[0] in ("ioctl", "close"):
            args = c[1].split(", ")
            path = paths[int(args[0])]
            device.append(("ioctl", path, int(args[1], 16)) if c[0] == "ioctl" else ("close", path))
        elif c[0] == "mmap":
            args = c[1].split(", ")
            device.append(("mmap", int(args[0], 16), int(args[1]), paths[int(args[4])]))
        else:
            other.append(c[0] if c[0] != "write" else ("write", paths.get(int(c[1].split(",")[0]), c[1][:1])))
    assert device == built.conversation.expected_trace()
    # the completion wait reads CLOCK_MONOTONIC first: the mock runs the channel on that call, so
    # the semaphore is released before the first poll would sleep (no nanosleep here)
    assert {c[0] for c in calls} == {"execve", "openat", "ioctl", "mmap", "close", "write",
                                     "exit_group", "clock_gettime"}   # events' times, the waits
    events = next(p for p in paths.values() if p.endswith("events.log"))
    assert set(other) == {("openat", events), ("write", events), ("write", "1"), "exit_group",
                          "clock_gettime"}
    # one per event, one per wait: the setup's, then one a step (3 a step before the chains)
    assert other.count("clock_gettime") == other.count(("write", events)) + 1 + 5
    assert calls[-1] == ("exit_group", "0")


def test_a_declined_boost_changes_nothing():
    """A driver that declines the SM clock's boost (NV_ERR_INSUFFICIENT_PERMISSIONS): the run
    goes on at whatever clock the card has, with the same bits."""
    need_mock()
    r, built = run("lsq_adam", 90, card=card_for(90, boost_denied=True))
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "") and not r.boosted
    assert r.stdout == oracle.run("lsq_adam", steps=5)


def test_probe_identity_prints_what_the_driver_says():
    need_mock()
    r, _ = run("lsq_adam", 90, args=("--probe-identity",), card=card_for(90, uuid=bytes(range(16))))
    assert r.errors == [] and r.returncode == 0 and r.allocations == []
    assert r.stdout.split("\n") == [
        "driver 580.159.04", "uuid GPU-00010203-0405-0607-0809-0a0b0c0d0e0f", "product NVIDIA H200",
        "class cbc0 present", "class c86f present", "class c661 present", "class c8b5 present",
        f"memory-kib {143771 << 10}", "gpcs 8", "tpcs-per-gpc 9", "sms-per-tpc 2", "warps-per-sm 64", ""]
    assert not any(t[0] == "openat" and t[1] == "/dev/nvidia-uvm" for t in r.trace)


# -- refusals, each by an executed mutant ----------------------------------------------------------
def refused(r, name, detail=None):
    assert r.errors == []
    line = f"refused: {name}" + (f" ({detail})" if detail else "")
    assert (r.returncode, r.stdout, r.stderr) == (exit_code(name), "", line + "\n")


def identity_only(r, built):
    """Refused before anything was allocated: the calls are a prefix of the identity part."""
    assert r.allocations == []
    calls = r.device_calls()
    assert calls == built.conversation.expected_trace(until_identity=True)[:len(calls)]


def test_another_uuid_is_refused_before_anything_is_allocated():
    need_mock()
    r, built = run("lsq_adam", 90, host={"uuid": "GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6b"})
    refused(r, "device-uuid")
    identity_only(r, built)
    from alphac.tools.record import split_event
    assert [split_event(e)[0] for e in r.events.split("\n")[-3:]] == \
        ["uuid", "refused: device-uuid", ""]                                    # the check named


@pytest.mark.parametrize("change", [{"product": "NVIDIA H100 80GB HBM3"}, {"driver": "580.142"}])
def test_another_product_or_driver_is_refused(change):
    need_mock()
    r, built = run("lsq_adam", 90, host=change)
    refused(r, "nvidia-plan-host")
    identity_only(r, built)


def test_a_card_with_less_memory_than_the_plan_is_refused():
    need_mock()
    _, built = owner("independent_state", 90)
    r, _ = run("independent_state", 90, card=card_for(90, memory=built.gpu.demand - 1024))
    refused(r, "nvidia-plan-host")
    identity_only(r, built)


def test_another_device_minor_and_no_driver():
    need_mock()
    r, built = run("independent_state", 90, card=card_for(90, minor=1))
    refused(r, "nvidia-plan-host")
    identity_only(r, built)
    r, _ = run("independent_state", 90, present=False)
    refused(r, "nvidia-open", "/dev/nvidiactl: errno 2")      # the device file, ENOENT
    assert r.device_calls() == [("openat", "/dev/nvidiactl")]


def test_only_the_planned_card_is_opened():
    """Built for /dev/nvidia1, the owner opens that card's file and no other, and runs there."""
    need_mock()
    r, built = run("independent_state", 90, host={"minor": 1}, card=card_for(90, minor=1))
    assert r.errors == [] and r.returncode == 0 and r.stdout == oracle.run("independent_state", steps=5)
    opened = {t[1] for t in r.device_calls() if t[0] == "openat"}
    assert opened == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}


def test_one_byte_over_the_card_is_refused_at_compile_time(tmp_path):
    require_tool("ptxas")
    _, built = owner("independent_state", 90)
    demand = built.gpu.demand
    for memory, want in ((demand - 1, 1), (demand, 0)):
        rc, _, err = alphac("build", example("independent_state"), "--target", "x86_64+sm_90",
                            "--gpu-uuid", HOST.uuid_text, "--gpu-product", "H200", "--driver", "580.159.04",
                            "--gpu-memory", memory, "-o", tmp_path / f"owner{memory}")
        assert rc == want, err
        assert ("error[E0120]" in err) == (want == 1)
        assert (tmp_path / f"owner{memory}").exists() == (want == 0)


def _symbol_offset(path: Path, name: str) -> int:
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        sym = elf.get_section_by_name(".symtab").get_symbol_by_name(name)[0]
        sec = elf.get_section(sym["st_shndx"])
        return sec["sh_offset"] + sym["st_value"] - sec["sh_addr"]


def test_a_corrupted_launch_image_is_refused_before_the_driver_is_opened(tmp_path):
    need_mock()
    path, built = owner("lsq_adam", 90)
    data = bytearray(path.read_bytes())
    at = _symbol_offset(path, "nv_image") + len(built.gpu.image) // 2
    data[at] ^= 0x01
    bad = tmp_path / "corrupted"
    bad.write_bytes(data)
    os.chmod(bad, 0o755)
    r = mockgpu.run(bad, ["--steps", "5"], card=card_for(90), kernels=built.kernels)
    refused(r, "launch-image")
    assert r.device_calls() == []


def test_a_chain_without_its_wait_for_idle_is_caught_by_the_mock(monkeypatch, tmp_path):
    """A step's kernels run in one push buffer: owner_sum reads the rows grad_samples wrote and
    update_g0 writes the w grad_samples read, so a card may overlap them without the
    WAIT_FOR_IDLE between. The mock runs them in turn but names the first such word."""
    need_mock()
    from alphac.build import build_gpu_owner
    monkeypatch.setattr(image_mod, "wait_for_idle", lambda arch: [])
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    b = built.gpu.buffers
    assert r.errors == [f"owner_sum reads {b['gs']:#x}, which grad_samples wrote with no wait-for-idle between them",
                        f"update_g0 writes {b['state_w']:#x}, which grad_samples read with no wait-for-idle "
                        "between them"]


SHORT = {"target-32k": lambda size, cfg, most, shared: (size, 9, most),       # the old fixed sm_86 carve-out
         "no-reserve": lambda size, cfg, most, shared: (max(0x400, image_mod.round_up(shared, 0x100)), cfg, most)}


@pytest.mark.parametrize("sm,short,error", [
    (86, "target-32k", "MIN_SM_CONFIG_SHARED_MEM_SIZE 9 (32 KiB) is not a carve-out of sm_86 that holds the block's "
                       "50176 bytes of shared memory"),
    (86, "no-reserve", "shared memory 49152 < 49152 + 1024 reserved"),
    (90, "target-32k", "MIN_SM_CONFIG_SHARED_MEM_SIZE 9 (32 KiB) is not a carve-out of sm_90 that holds the block's "
                       "50176 bytes of shared memory")], ids=["sm_86-target-32k", "sm_86-no-reserve", "sm_90-target-32k"])
def test_owner_sums_carve_out_holds_its_block_and_the_mock_checks_it(sm, short, error, monkeypatch, tmp_path):
    """owner_sum declares 48 KiB of static shared memory (sm_86's cubin; sm_90's adds the reserved
    1 KiB itself), so its block needs 49 KiB and the 64 KiB carve-out on both: the QMD says so,
    and the mock names a launch whose carve-out or SHARED_MEMORY_SIZE is short."""
    need_mock()
    from alphac.build import build_gpu_owner
    lr = compile_file(example("lsq_adam")).learner
    built = build_gpu_owner(lr, f"x86_64+sm_{sm}", host_for(sm))
    la = next(la for la in built.gpu.launches if la.kernel == "owner_sum")
    q = unpack_qmd(abi.QMD_LAYOUTS[abi.ARCHES[f"sm_{sm}"].qmd], la.qmd)
    assert [q[f] for f in ("SHARED_MEMORY_SIZE", "MIN_SM_CONFIG_SHARED_MEM_SIZE", "TARGET_SM_CONFIG_SHARED_MEM_SIZE",
                           "MAX_SM_CONFIG_SHARED_MEM_SIZE")] == [49 << 10, 64 // 4 + 1, 64 // 4 + 1, {86: 0x1a, 90: 25}[sm]]
    config = image_mod.shared_config
    monkeypatch.setattr(image_mod, "shared_config", lambda arch, kernel, shared:
                        SHORT[short](*config(arch, kernel, shared), shared))
    bad = build_gpu_owner(lr, f"x86_64+sm_{sm}", host_for(sm))
    (tmp_path / "o").write_bytes(bad.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card_for(sm), kernels=bad.kernels)
    assert r.errors[0] == "owner_sum: " + error
    assert all(e.startswith("owner_sum: ") and "_SM_CONFIG_" in e for e in r.errors[1:])


@pytest.mark.parametrize("sm,kib,reserve", [(86, 100, 0x400), (90, 96, 0)])
def test_a_kernel_over_the_largest_carve_out_is_refused_by_name(sm, kib, reserve):
    """The carve-out comes from one table (image.CARVEOUTS): a block up to the largest step (99 KiB
    declared on sm_86, the per-block bound CUDA gives, and the 1 KiB reserve) is configured, one byte
    more is a BuildError naming the kernel (ptxas itself refuses static shared memory over 48 KiB:
    the bound guards the table)."""
    from alphac.diag import BuildError
    arch = abi.ARCHES[f"sm_{sm}"]
    la = image_mod.Launch("big", 32, 32, 1, 1 << 36, "", 0, b"", 1 << 36, b"", ())
    f = image_mod.qmd_fields(arch, la, 16, (kib << 10) - reserve, 0x400, 0x200)
    assert f["SHARED_MEMORY_SIZE"] == kib << 10
    assert f["TARGET_SM_CONFIG_SHARED_MEM_SIZE"] == f["MAX_SM_CONFIG_SHARED_MEM_SIZE"] == kib // 4 + 1
    with pytest.raises(BuildError, match=f"^kernel big needs {(kib << 10) + 0x100} bytes of shared memory a block "
                                         f"on sm_{sm} .* largest carve-out, {kib} KiB$"):
        image_mod.qmd_fields(arch, la, 16, (kib << 10) - reserve + 1, 0x400, 0x200)


def test_an_exact_sum_owner_runs_its_step_in_one_submission(tmp_path):
    """Under exact_sum the host writes its own G, rounded once, to the card before the chain
    (xsum_clear, grad_samples, xsum_add, xsum_fold, update_g0), then checks the card's sums."""
    need_mock()
    from alphac.build import build_gpu_owner
    from alphac.ir.interp import format_state, run as interp_run
    from conftest import exact_sum_variant
    (tmp_path / "x.alpha").write_text(exact_sum_variant(example("lsq_adam").read_text()))
    lr = compile_file(tmp_path / "x.alpha").learner
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    (tmp_path / "x").write_bytes(built.image.elf)
    (tmp_path / "x").chmod(0o755)
    r = mockgpu.run(tmp_path / "x", ("--steps", "3"), card=card_for(90), kernels=built.kernels)
    assert (r.returncode, r.stderr, r.errors) == (0, "", [])
    assert r.stdout == format_state(lr, interp_run(lr, 3)) and r.submissions == 1 + 3
    assert [la[0] for la in r.launches[:5]] == ["xsum_clear", "grad_samples", "xsum_add", "xsum_fold", "update_g0"]


def test_a_gpu_that_computes_another_bit_is_refused():
    need_mock()

    def off_by_one(ptx):            # the update's first add becomes a subtraction
        return ptx.replace("add.rn.f64", "sub.rn.f64", 1)
    r, _ = run("independent_state", 90, mutate={"update_g0": off_by_one})
    refused(r, "gpu-shadow-mismatch")
    assert "mismatch at step 1" in r.events and len(r.launches) == 1
    def last_terms_off(ptx):        # owner_sum's first add of its last terms (fewer than a stage)
        head, mark, tail = ptx.partition("$last:")
        return head + mark + off_by_one(tail)
    r, _ = run("lsq_adam", 86, mutate={"owner_sum": last_terms_off})     # G differs: refused at step 1
    refused(r, "gpu-shadow-mismatch")
    assert [la[0] for la in r.launches] == ["grad_samples", "owner_sum", "update_g0"]    # one chain


# -- the runtime's SHA-256 -----------------------------------------------------------------------
SHA_MAIN = """
data msg: [u8; 300] = extern;
global digest: [u8; 32];
fn print_digest() {
    let i = 0;
    while i < 32 {
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) >> 4)));
        rt_out_byte(load8(rt_hex_digits + (load8(digest + i) & 15)));
        i = i + 1;
    }
    rt_out_byte(10);
}

fn main(argc: i64, argv: i64) -> i64 {
    let n = 0;
    while n <= 300 {
        sha256(msg, n, digest);
        print_digest();
        n = n + 1;
    }
    n = 0;
    while n <= 192 {                        // HMAC-SHA-256 under the key msg[200..232]
        hmac_sha256(msg + 200, msg, n, digest);
        print_digest();
        n = n + 1;
    }
    rt_flush();
    return 0;
}
"""


@pytest.mark.parametrize("isa", ["x86_64", "aarch64"])
def test_runtime_sha256_and_hmac_equal_hashlib(tmp_path, isa):
    import hashlib
    import hmac
    from backend import run_exe
    from alphac.build import link_program, runtime_closure, target
    from alphac.lower import rt
    from alphac.lower.rt_lower import lower_program
    tgt = target(isa)
    msg = bytes((i * 37 + 11) & 255 for i in range(300))
    items = rt.parse(tgt.prelude(), "prelude.rt") + runtime_closure("core") \
        + rt.parse(SHA_MAIN, "sha.rt")
    elf, _, _ = link_program(lower_program(items, {"msg": msg}), tgt)
    exe = tmp_path / f"sha.{isa}"
    exe.write_bytes(elf)
    os.chmod(exe, 0o755)
    out = run_exe(exe, target=isa).stdout.split()
    assert out == [hashlib.sha256(msg[:n]).hexdigest() for n in range(301)] + \
        [hmac.new(msg[200:232], msg[:n], hashlib.sha256).hexdigest() for n in range(193)]


# -- the table and the plan, without running anything --------------------------------------------
def plan(name="lsq_adam", sm=90):
    return owner(name, sm)[1]


def test_every_call_is_an_abi_call_with_its_structure():
    require_tool("ptxas")
    nv = {io.cmd: io for io in abi.NV_IOCTLS.values()}
    uvm = {io.cmd: io for io in abi.UVM_IOCTLS.values()}
    for sm in (90, 86):
        c = plan(sm=sm).conversation
        for call in c.calls:
            if call.op == conv_mod.IOCTL:
                cmd = call.args[1]
                assert cmd in (uvm if call.fd.startswith("fd_uvm") else nv), call.what
                size = uvm[cmd].params and abi.STRUCTS[uvm[cmd].params].size if cmd in uvm else nv[cmd].size
                assert call.args[2] + size <= len(c.region.buf)
                for dst, n, kind, value in call.patches:
                    assert 0 <= dst and dst + n <= len(c.region.buf) and n in ((4, 8) if kind != 3 else (16,))


def test_identity_comes_before_any_allocation():
    require_tool("ptxas")
    c = plan().conversation
    ident = next(i for i, x in enumerate(c.calls) if x.op == conv_mod.MARK and x.args[1])
    before = c.calls[:ident]
    assert not any(x.op == conv_mod.MMAP for x in before)
    assert not any("MEMORY" in x.what or "UVM" in x.what or "/dev/nvidia-uvm" in x.what for x in before)
    checks = [x.what for x in before if x.op in (conv_mod.EXPECT, conv_mod.FIND)]
    assert checks == ["expect driver", "card /dev/nvidia0", "expect uuid", "expect product",
                      "class HOPPER_COMPUTE_A", "class HOPPER_CHANNEL_GPFIFO_A", "class HOPPER_USERMODE_A",
                      "class HOPPER_DMA_COPY_A",
                      "expect memory-kib", "expect gpcs", "expect tpcs-per-gpc", "expect sms-per-tpc",
                      "expect warps-per-sm"]


@pytest.mark.parametrize("sm", [90, 86])
def test_qmds_and_push_buffers_decode_to_the_plan(sm):
    require_tool("ptxas")
    b = plan(sm=sm)
    g, arch = b.gpu, b.gpu.arch
    layout = abi.QMD_LAYOUTS[arch.qmd]
    for la, k in zip(g.launches, b.kernels):
        q = unpack_qmd(layout, la.qmd)
        assert q["PROGRAM_ADDRESS_LOWER"] | q["PROGRAM_ADDRESS_UPPER"] << 32 == la.code_va
        assert q["REGISTER_COUNT_V" if sm == 86 else "REGISTER_COUNT"] == k.image.registers
        cb = q["CONSTANT_BUFFER_ADDR_LOWER(0)"] | q["CONSTANT_BUFFER_ADDR_UPPER(0)"] << 32 if sm == 86 else \
            (q["CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)"] | q["CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)"] << 32) << 6
        assert cb == la.cbank_va and la.qmd_va % 256 == 0 and la.code_va % 256 == 0
        off = la.qmd_va - g.alloc("arena").va
        assert g.image[off:off + len(la.qmd)] == la.qmd
        assert la.grid * la.block >= la.threads
        assert struct.unpack_from("<6I", la.cbank) == (la.block, 1, 1, la.grid, 1, 1)   # %ntid, %nctaid
        assert q["CONSTANT_BUFFER_SIZE_SHIFTED4(0)"] << 4 == len(la.cbank) == -(-k.image.cbank0 // 256) * 256
    methods = abi.METHODS[arch.compute_methods]
    assert sorted(g.chains) == sorted({("grad_samples", "owner_sum"), ("update_g0",),
                                       ("grad_samples", "owner_sum", "update_g0"),     # then the sampled step's
                                       ("grad_samples", "owner_sum", "update_g0", "digest_gather", "digest_0", "digest_1"),
                                       ("digest_read",)})          # a drawn step's copies, no launch
    for c in g.chains.values():         # each chain one push buffer: its launches in order, a
        assert decode_entry(arch, c.entry) == (c.pushbuf_va, len(c.pushbuf))     # WFI between
        off = c.pushbuf_va - g.alloc("arena").va
        assert g.image[off:off + 4 * len(c.pushbuf)] == struct.pack(f"<{len(c.pushbuf)}I", *c.pushbuf)
        pb, pcas = list(c.pushbuf), image_mod.method(1, methods["SEND_PCAS_A"], 1)
        assert [pb[i + 1] for i, w in enumerate(pb) if w == pcas] == [g.launch(k).qmd_va >> 8 for k in c.kernels]
        assert pb.count(image_mod.method(1, methods["WAIT_FOR_IDLE"], 1)) == max(0, len(c.kernels) - 1)
        assert pb[-6:] == image_mod.copy_release(arch, g.semaphore_va)     # after the copies out
    assert g.image[:len(g.image)] and len(g.image) % 8 == 0
    import hashlib
    assert hashlib.sha256(g.image).digest() == g.sha256


@given(st.integers(0, (1 << 40) - 4).map(lambda v: v & ~3), st.integers(0, (1 << 21) - 1))
def test_gpfifo_entries_round_trip(va, dwords):
    for arch in abi.ARCHES.values():
        assert decode_entry(arch, image_mod.gpfifo_entry(arch, va, dwords)) == (va, dwords)


def test_host_descriptions(tmp_path):
    p = tmp_path / "h"
    p.write_text("# a comment\nuuid GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a\nproduct NVIDIA H200 # x\n"
                 "memory 2 GiB\ndriver 580.159.04\nminor 3\n")
    h = host_mod.load(p)
    assert (h.product, h.memory, h.minor, h.uuid_text) == ("NVIDIA H200", 2 << 30, 3,
                                                           "GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a")
    assert host_mod.load(p, {"memory": "100", "minor": None}).memory == 100
    for bad in ({"uuid": "GPU-xyz"}, {"memory": "2 GB"}, {"memory": "0"}, {"driver": "r580"},
                {"minor": "-1"}, {"product": ""}, {"color": "red"}, {"product": "x" * 64}):
        with pytest.raises(host_mod.HostError):
            host_mod.make(HOST.as_dict() | bad)
    p.write_text("uuid a\nuuid b\n")
    with pytest.raises(host_mod.HostError, match="twice"):
        host_mod.load(p)


def test_emit_calls_lists_the_conversation(tmp_path):
    require_tool("ptxas")
    rc, out, err = alphac("build", example("independent_state"), "--target", "x86_64+sm_86",
                          "--gpu-host", ROOT / "tests" / "diagnostics" / "h200.gpuhost", "--emit", "calls")
    assert rc == 0, err
    assert "NV_ESC_RM_ALLOC NV01_ROOT_CLIENT -> h_root" in out
    assert "AMPERE_COMPUTE_B" in out and "(identity checked; nothing allocated before this)" in out
    rc, _, err = alphac("build", example("independent_state"), "--emit", "calls")
    assert rc == 1 and "needs a GPU target" in err


def test_the_docs_show_the_table_as_it_is():
    require_tool("ptxas")
    rc, out, err = alphac("build", example("independent_state"), "--target", "x86_64+sm_90",
                          "--gpu-host", ROOT / "tests" / "diagnostics" / "h200.gpuhost", "--emit", "calls")
    assert rc == 0, err
    doc = (ROOT / "docs" / "nvdrv.md").read_text()
    block = doc.split("`tests/diagnostics/h200.gpuhost`")[1].split("```\n")[1]
    assert block == out
