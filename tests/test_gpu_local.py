"""GPU owners whose kernels spill to local memory, against the mock driver (docs/nvdrv.md,
"Local memory").

A least-squares learner whose prediction goes through p = w * x[i], with `w: f64[128]`, keeps p in
a .local array of grad_samples (gpu/local_check.py's `lsq_source`; 1,600 bytes a thread on sm_90). The owner sets up a local-memory area sized from the host description's topology, and
the mock GPU (tests/mockgpu/gpu.py) runs a spilling kernel only inside an area that holds it:
the QMD's per-thread size, SET_SHADER_LOCAL_MEMORY_A/B and _NON_THROTTLED_A/B, all of it mapped.
Guarantees checked:
  * the spilling learner as a single GPU owner, sm_90 and sm_86, prints the interpreter's bits
    with an empty mock error list, the area allocated (its size counted in the demand), and
    every thread's stack frame written and read back inside it;
  * in a star of an sm_90 owner and an sm_86 owner, each on its card, with a CPU owner, the
    interpreter's bits, and its checkpoint resumes on CPU owners;
  * mutants, each failing: the local-memory setup left out of the push buffer, the area short
    (per TPC, and allocated smaller), the QMD's SHADER_LOCAL_MEMORY_HIGH_SIZE zero or short of
    the ABI's 0x240 bytes;
  * a card with more warps per SM than the host description is refused `gpu-topology` before
    anything is allocated; a spilling learner without a `topology` is refused at build time by
    name; --probe-identity prints the card's topology.
"""
import json
import os
import pickle
import sys
from pathlib import Path

import pytest

import mockgpu
from conftest import ROOT, require_tool
from mockgpu import Card
from mockgpu.wrap import config

from alphac.dist.execute import run_plan
from alphac.driver import compile_deployments, compile_file
from alphac.ir.interp import format_state, initial_state, step
from alphac.nvdrv import host as host_mod, image as image_mod
from alphac.refusals import exit_code
from local_check import lsq_source

UUID = "GPU-5a1e7c3d-0b2f-4c6e-8a9d-1f2e3d4c5b6a"
UUID_C = "GPU-11111111-2222-3333-4444-555555555555"
PRODUCT = {90: "NVIDIA H200", 86: "NVIDIA GeForce RTX 3090"}
TOPOLOGY = {90: "8 9 2 64", 86: "7 6 2 48"}          # the mock cards' (mockgpu.driver.TOPOLOGY)
WIDTH, ROWS, STEPS = 128, 4, 3


DEPLOYMENTS = f"""
deployment gpu_and_cpu {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..1, owner[1] = 1..2, owner[2] = 2..{ROWS}
  target owner[0] = x86_64+sm_90, owner[1] = x86_64+sm_86
  gpu owner[0] = "a.gpuhost", owner[1] = "c.gpuhost"
}}

deployment cpus {{
  roles coordinator, owner[3]
  topology star(coordinator)
  samples owner[0] = 0..1, owner[1] = 1..2, owner[2] = 2..{ROWS}
}}
"""


def host_for(sm: int, **changes) -> host_mod.GpuHost:
    fields = {"uuid": UUID, "product": PRODUCT[sm], "memory": "143771 MiB", "driver": "580.159.04",
              "topology": TOPOLOGY[sm]} | changes
    return host_mod.make({k: str(v) for k, v in fields.items() if v is not None})


def card_for(sm: int, **changes) -> Card:
    h = host_for(sm)
    return Card(**({"uuid": h.uuid, "name": h.product, "driver": h.driver, "sm": sm} | changes))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    d = tmp_path_factory.mktemp("gpu-local")
    (d / "lsq_wide.alpha").write_text(lsq_source(WIDTH, ROWS) + DEPLOYMENTS)
    lr = compile_file(d / "lsq_wide.alpha").learner
    state = initial_state(lr)
    for _ in range(STEPS):
        state = step(lr, state)
    return d, lr, format_state(lr, state)


def owner(work, sm: int, tag: str = "", **host):
    from alphac.build import build_gpu_owner
    d, lr, _ = work
    built = build_gpu_owner(lr, f"x86_64+sm_{sm}", host_for(sm, **host))
    path = d / f"owner.sm_{sm}{tag}"
    path.write_bytes(built.image.elf)
    os.chmod(path, 0o755)
    return path, built


def run(work, sm: int, card=None, args=("--steps", str(STEPS)), tag: str = "", **host):
    path, built = owner(work, sm, tag, **host)
    return mockgpu.run(path, args, card=card or card_for(sm), kernels=built.kernels), built


@pytest.mark.parametrize("sm", [90, 86])
def test_a_spilling_owner_prints_the_interpreters_bits(work, sm):
    _, _, want = work
    r, built = run(work, sm)
    spills = {b.kernel.name: b.image.local for b in built.kernels}
    assert spills["grad_samples"] > 0                     # the learner does spill
    g = built.gpu
    assert g.local_per_thread == image_mod.local_per_thread(max(spills.values()))
    area = g.alloc("local")
    assert area.where == "vidmem-gpu" and area.size >= g.local_per_tpc * g.topology.tpcs
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "")
    assert r.stdout == want
    assert [la[0] for la in r.launches].count("grad_samples") == STEPS
    assert ("NV1_MEMORY_USER", area.size) in r.allocations
    assert sum(size for _, size in r.allocations) == g.demand + sum(a.size for a in g.memories
                                                                    if a.where.startswith("sysmem"))
    assert r.device_calls() == built.conversation.expected_trace()


def test_the_area_is_sized_as_tinygrad_and_nvk_size_it():
    """Per thread: the stack + 0x240, rounded to 32; per warp 32 lanes rounded to 0x200; per TPC
    warps x SMs rounded to 0x8000; the area TPCs x that rounded to 0x20000 (an H200's LITTER
    values 8 x 9 TPCs of 2 SMs of 64 warps: 144 bytes of stack give 736 a thread, 216 MB)."""
    t = host_mod.Topology(8, 9, 2, 64)
    assert image_mod.local_per_thread(144) == 736
    assert image_mod.local_per_tpc(736, t) == 736 * 32 * 64 * 2
    assert image_mod.local_area_size(736, t) == 736 * 32 * 64 * 2 * 72
    assert image_mod.local_per_thread(1) == 0x260 and image_mod.local_per_thread(0) == 0
    assert image_mod.local_per_tpc(1, host_mod.Topology(1, 1, 1, 1)) == 0x8000


def two_cards(d: Path, lr) -> list[str]:
    """An sm_90 card (a.gpuhost) and an sm_86 one (c.gpuhost) described in `d`, and the wrapper
    that runs each GPU owner of a launch against the mock holding both, with lr's kernels."""
    from alphac.build import gpu_kernels
    (d / "a.gpuhost").write_text(host_for(90).describe())
    (d / "c.gpuhost").write_text(host_for(86, uuid=UUID_C, minor=1).describe())
    (d / "logs").mkdir(exist_ok=True)
    (d / "kernels.pickle").write_bytes(pickle.dumps([gpu_kernels(lr, sm)[0] for sm in (86, 90)]))
    cards = [card_for(90), card_for(86, uuid=host_mod.parse_uuid(UUID_C), minor=1, gpu_id=0x1900,
                                    device_instance=1)]
    (d / "cards.json").write_text(json.dumps(config(cards, str(d / "kernels.pickle"), str(d / "logs"))))
    return [sys.executable, str(ROOT / "tests" / "mockgpu" / "wrap.py"), str(d / "cards.json")]


def test_two_gpu_owners_with_a_cpu_owner_in_a_star_and_resumed_on_cpu_owners(work, tmp_path):
    from alphac.artifacts import build_deployment
    from alphac.tools.launch import launch
    d, lr, _ = work
    wrapper = two_cards(d, lr)
    old = os.getcwd()
    os.chdir(d)
    try:
        _, plans = compile_deployments("lsq_wide.alpha")
        for name in ("gpu_and_cpu", "cpus"):
            build_deployment("lsq_wide.alpha", name, d / "build" / name)
        rec = launch(d / "build" / "gpu_and_cpu", steps=5, records=d / "runs", gpu_wrapper=wrapper)
        want = format_state(lr, run_plan(lr, plans["gpu_and_cpu"], 5))
        assert rec["passed"] and rec["published"] == want
        logs = [json.loads(f.read_text()) for f in sorted((d / "logs").iterdir())]
        assert sorted(log["card"] for log in logs) == [0, 1]
        assert all(log["errors"] == [] and log["launches"].count("grad_samples") == 5 for log in logs)
        a = launch(d / "build" / "gpu_and_cpu", steps=3, records=d / "runs", gpu_wrapper=wrapper,
                   checkpoint=tmp_path / "g")
        b = launch(d / "build" / "cpus", steps=2, records=d / "runs", resume=tmp_path / "g")
        assert a["passed"] and b["passed"] and b["published"] == want
    finally:
        os.chdir(old)


# -- mutants: each must fail ------------------------------------------------------------------
def local_error(r, what: str):
    assert r.returncode != 0 and any(what in e for e in r.errors), r.errors


def test_the_local_memory_setup_left_out_fails(work, monkeypatch):
    real = image_mod.setup_pushbuf
    monkeypatch.setattr(image_mod, "setup_pushbuf",
                        lambda arch, sem, va=0, per_tpc=0, upload=None: real(arch, sem, upload=upload))
    r, _ = run(work, 90, tag=".nosetup")
    local_error(r, "no local-memory area is set up")


def test_a_short_area_per_tpc_fails(work, monkeypatch):
    real = image_mod.local_per_tpc
    monkeypatch.setattr(image_mod, "local_per_tpc", lambda pt, t: real(pt, t) // 2)
    r, _ = run(work, 90, tag=".shorttpc")
    local_error(r, "of local memory per TPC")


def test_an_area_allocated_short_fails(work, monkeypatch):
    real = image_mod.local_area_size
    monkeypatch.setattr(image_mod, "local_area_size", lambda pt, t: real(pt, t) - (4 << 20))
    r, _ = run(work, 90, tag=".shortarea")
    local_error(r, "is not all mapped for the GPU")


@pytest.mark.parametrize("value", [0, "reserve"])
def test_the_qmd_local_size_zero_or_short_of_the_reserve_fails(work, monkeypatch, value):
    stack = max(b.image.local for b in owner(work, 90)[1].kernels)
    size = 0 if value == 0 else stack + image_mod.LOCAL_RESERVE - 32
    monkeypatch.setattr(image_mod, "QMD_OVERRIDES", {"SHADER_LOCAL_MEMORY_HIGH_SIZE": size})
    r, _ = run(work, 90, tag=f".qmd{value}")
    local_error(r, "SHADER_LOCAL_MEMORY_HIGH_SIZE gives")


# -- the topology -----------------------------------------------------------------------------
def test_a_card_with_more_warps_than_planned_is_refused_before_allocating(work):
    r, built = run(work, 90, card=card_for(90, topology=(8, 9, 2, 65)))
    assert r.errors == []
    assert (r.returncode, r.stdout, r.stderr) == (exit_code("gpu-topology"), "", "refused: gpu-topology\n")
    assert r.allocations == []
    calls = r.device_calls()
    assert calls == built.conversation.expected_trace(until_identity=True)[:len(calls)]


def test_a_card_with_fewer_is_accepted(work):
    _, _, want = work
    r, _ = run(work, 90, card=card_for(90, topology=(7, 9, 2, 64)))
    assert r.errors == [] and r.returncode == 0 and r.stdout == want


def test_without_a_topology_a_spilling_owner_is_refused_at_build_time(work):
    from alphac.diag import BuildError
    with pytest.raises(BuildError, match=r"grad_samples of `lsq_wide` needs \d+ bytes of local memory .* "
                                         r"has no `topology`"):
        owner(work, 90, topology=None)


def test_probe_identity_prints_the_topology(work):
    r, _ = run(work, 90, args=("--probe-identity",))
    assert r.errors == [] and r.returncode == 0 and r.allocations == []
    assert r.stdout.split("\n")[-5:] == ["gpcs 8", "tpcs-per-gpc 9", "sms-per-tpc 2", "warps-per-sm 64", ""]


def test_a_topology_in_a_host_description_is_checked():
    assert host_for(90).topology == host_mod.Topology(8, 9, 2, 64)
    assert "topology 8 9 2 64\n" in host_for(90).describe()
    for bad in ("8 9 2", "8 9 2 0", "a b c d", "8 9 2 64 1"):
        with pytest.raises(host_mod.HostError, match="topology"):
            host_for(90, topology=bad)
