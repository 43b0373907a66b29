"""GPU owners whose memory the RM alone maps for the GPU (`--gpu-map rm`, host key `map`; docs/nvdrv.md
"Mapping with the RM alone"), against the mock driver (issue 42: UVM's registration is the
candidate for start-up's 176 ms).

Requires what tests/test_nvdrv_owner.py requires (ptxas, the mock). Guarantees checked:
  * an owner built with `map rm` prints the interpreter's bits (sm_90 and sm_86), makes exactly
    the calls its conversation lists, opens no UVM file and issues no UVM call; its events have
    `map` where UVM's `uvm-open`, `uvm-register` and `uvm` stood; the default stays UVM;
  * each mutant of the RM path is refused by name: a mapping at another address than the plan's,
    a mapping left out, a VA space still flagged for UVM (each caught by the mock, the owner
    refusing `nvidia-call`), and a driver that maps elsewhere than the fixed address asked (caught
    by the owner's own check of the answer);
  * a host description's `map` other than uvm or rm is refused, naming the key.
"""
import pytest

import mockgpu
import oracle
from alphac.driver import compile_file
from alphac.nvdrv import conversation as conv_mod
from alphac.nvdrv import host as host_mod
from alphac.refusals import exit_code
from conftest import example
from test_nvdrv_owner import card_for, host_for, need_mock, owner

UVM_CMDS = {io.cmd for io in conv_mod.UVM_IOCTLS.values()}
HUGE = 2 << 20


def no_uvm(r) -> bool:
    return not any(t[0] == "openat" and t[1] == "/dev/nvidia-uvm" for t in r.trace) and \
        not any(t[0] == "ioctl" and t[2] in UVM_CMDS and t[1] == "/dev/nvidia-uvm" for t in r.trace)


@pytest.mark.parametrize("name,sm", [("lsq_adam", 90), ("lsq_adam", 86), ("independent_state", 90)])
def test_an_rm_mapped_owner_prints_the_interpreters_bits_without_uvm(name, sm):
    need_mock()
    path, built = owner(name, sm, map="rm")
    r = mockgpu.run(path, ("--steps", "5"), card=card_for(sm), kernels=built.kernels)
    assert r.errors == [] and (r.returncode, r.stderr) == (0, "")
    assert r.stdout == oracle.run(name, steps=5)
    assert r.device_calls() == built.conversation.expected_trace()
    assert no_uvm(r)
    marks = built.conversation.marks()
    assert "map" in marks and not {"uvm-open", "uvm-register", "uvm"} & set(marks)
    assert marks.index("vaspace") < marks.index("map") < marks.index("memory")
    assert "map" not in owner(name, sm)[1].conversation.marks()          # the default: UVM


def mutant(monkeypatch, tmp_path, card=None, **patches):
    """An `map rm` lsq_adam owner built with Conversation's methods patched, run for a step."""
    from alphac.build import build_gpu_owner
    for attr, fn in patches.items():
        monkeypatch.setattr(conv_mod.Conversation, attr, fn)
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90, map="rm"))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    return mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card or card_for(90), kernels=built.kernels), built


def refused_call(r, errors):
    assert r.errors == errors
    assert (r.returncode, r.stdout, r.stderr) == (exit_code("nvidia-call"), "", "refused: nvidia-call\n")
    assert no_uvm(r)


def test_a_mapping_at_another_address_is_refused(monkeypatch, tmp_path):
    need_mock()
    real = conv_mod.Conversation.map_dma
    moved = lambda self, memory, va, size, where: real(self, memory, va + HUGE * (memory == "h_host"), size, where)   # noqa: E731
    r, built = mutant(monkeypatch, tmp_path, map_dma=moved)
    host = built.gpu.alloc("host")
    refused_call(r, [f"RM_MAP_MEMORY_DMA: {host.va + HUGE:#x}+{host.size:#x} outside the virtual range "
                     f"{host.va:#x}..{host.va + host.size - 1:#x} or not aligned to 0x1000"])


def test_a_mapping_left_out_is_refused(monkeypatch, tmp_path):
    need_mock()
    real = conv_mod.Conversation.map_dma
    r, built = mutant(monkeypatch, tmp_path, map_dma=lambda self, memory, *a: memory == "h_host" and real(self, memory, *a))
    ring = built.gpu.alloc("gpfifo").va
    refused_call(r, [f"RM_ALLOC HOPPER_CHANNEL_GPFIFO_A: GPFIFO ring {ring:#x} is not mapped for the GPU"])


def test_a_va_space_still_flagged_for_uvm_is_refused(monkeypatch, tmp_path):
    need_mock()
    real = conv_mod.Conversation.alloc
    uvm = conv_mod.CONSTANTS["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"]

    def alloc(self, cls, parent, handle, params=None, values=None, patches=()):
        if cls == "FERMI_VASPACE_A":
            values = {**values, "flags": values["flags"] | uvm}
        return real(self, cls, parent, handle, params, values, patches)
    r, _ = mutant(monkeypatch, tmp_path, alloc=alloc)
    refused_call(r, ["RM_MAP_MEMORY_DMA: the VA space is flagged for UVM (externally owned or faulting)"])


def test_a_driver_that_maps_elsewhere_is_refused_by_the_owner(monkeypatch, tmp_path):
    """The driver's answer is checked against the plan: a mapping one page off is refused by the
    owner itself (the mock raised no error: it is the card that moved it)."""
    need_mock()
    r, built = mutant(monkeypatch, tmp_path, card=card_for(90, dma_moved=True))
    refused_call(r, [])
    from alphac.tools.record import split_event
    assert [split_event(e)[0] for e in r.events.split("\n")[-3:]] == ["map vidmem", "refused: nvidia-call", ""]


def test_a_map_other_than_uvm_or_rm_is_refused():
    with pytest.raises(host_mod.HostError, match="map `dma` is not one of uvm, rm"):
        host_for(90, map="dma")
    assert host_for(90, map="rm").describe().endswith("map rm\n")
    assert "map" not in host_for(90).describe()
