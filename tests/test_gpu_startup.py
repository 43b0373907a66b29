"""A GPU owner's start-up and its per-step writes, against the mock (issue 42; docs/gpu.md "Where
a GPU owner's start-up goes", docs/nvdrv.md "Memory").

Requires what tests/test_nvdrv_owner.py requires (ptxas, the mock). Guarantees checked:
  * between the `identity` and `memory` events the owner allocates two memories, one of video
    memory and one of system memory, each mapped once for the CPU and once for the GPU, and
    nothing else: the driver calls there are counted (15); of the video memory the CPU maps
    only the GPFIFO area;
  * the scalars, counts, sample indices, reduced scalars, scalar states and exact_sum's rounded
    G the host writes each step go to system memory the card reads (its constant banks and the
    mirrored buffers in `staging`), never to video memory through BAR1: every constant address
    the step's generated code stores to (store32/64/f, vec_copy) lies in system memory, for an
    Adam owner (scalar parameters), a minibatch owner (idx, counts), a clipped one (rd), one
    whose loss reads a scalar state and an exact_sum one; the last two print the interpreter's
    bits under the mock (the others' bits: tests/test_nvdrv_owner.py, test_gpu_sampled.py).
"""
import re

import pytest

from alphac.driver import compile_file
from conftest import example, exact_sum_variant
from test_gpu_sampled import CLIPPED
from test_nvdrv_owner import card_for, host_for, need_mock, owner

import mockgpu


def between(calls, first: str, last: str) -> list:
    """The conversation's calls from the MARK `first` to the MARK `last`."""
    labels = [c.what if c.op == 7 else None for c in calls]
    return calls[labels.index(first) + 1:labels.index(last)]


def test_start_up_allocates_two_memories_each_mapped_once():
    need_mock()
    path, built = owner("lsq_adam", 90)
    r = mockgpu.run(path, ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    assert r.errors == [] and r.returncode == 0, (r.errors, r.stderr)
    assert [name for name, _ in r.allocations] == ["NV1_MEMORY_USER", "NV01_MEMORY_SYSTEM"]
    calls = r.device_calls()
    maps = [c for c in calls if c[0] == "mmap"]
    assert len(maps) == 3                               # the usermode page and the two memories
    vid = built.gpu.alloc("vidmem")                    # of video memory only the ring and USERD
    assert [m[2] for m in maps if m[1] == vid.va] == [built.gpu.alloc("gpfifo").size] < [vid.size]
    ioctls = [c[2] for c in calls if c[0] == "ioctl"]
    assert ioctls.count(0x21) == ioctls.count(0x49) == 2    # UVM_MAP_EXTERNAL_ALLOCATION, _CREATE_EXTERNAL_RANGE
    part = [c for c in between(built.conversation.calls, "uvm", "memory") if c.op != 7]
    assert len(part) == 15, built.conversation.listing()   # 8 for video memory, 7 for system (37 with five)


SOURCES = {"clipped": CLIPPED,            # rd: the host's reduced scalar
           # a scalar state the loss reads: the host writes it before the gradient kernels
           "scaled": example("lsq_adam").read_text().replace("  0.5 * r^2\n", "  0.5 * p1 * r^2\n"),
           "exact": exact_sum_variant(example("lsq_adam").read_text())}   # the host's rounded G


@pytest.mark.parametrize("which", ["lsq_adam", "logistic", "clipped", "scaled", "exact"])
def test_the_host_stores_no_scalar_or_index_into_video_memory(tmp_path, which):
    from alphac.build import build_gpu_owner
    from alphac.lower.gpu import gpu_owner_source
    if which in SOURCES:
        assert SOURCES[which] != example("lsq_adam").read_text()
        (tmp_path / "x.alpha").write_text(SOURCES[which])
        src = tmp_path / "x.alpha"
    else:
        src = example(which)
    lr = compile_file(src).learner
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    text, _ = gpu_owner_source(lr, built.gpu, built.conversation)
    stores = [int(a, 16) for a in re.findall(r"\b(?:store(?:32|64|f)|vec_copy)\((0x[0-9a-f]+)", text)]
    assert stores, "the owner writes no parameter at all"
    video = [a for a in built.gpu.memories if a.where.startswith("vidmem")]
    host = [a for a in built.gpu.memories if a.where.startswith("sysmem")]
    assert [hex(s) for s in stores if any(m.va <= s < m.va + m.size for m in video)] == []
    assert all(any(m.va <= s < m.va + m.size for m in host) for s in stores)
    for la in built.gpu.launches:                       # the card reads the banks from system memory
        assert any(m.va <= la.cbank_va < m.va + m.size for m in host)
    if which in ("scaled", "exact"):                    # and computes the interpreter's bits so
        need_mock()
        (tmp_path / "x.gpu").write_bytes(built.image.elf)
        (tmp_path / "x.gpu").chmod(0o755)
        r = mockgpu.run(tmp_path / "x.gpu", ("--steps", "4"), card=card_for(90), kernels=built.kernels)
        assert r.errors == [] and (r.returncode, r.stderr) == (0, ""), (r.errors, r.stderr)
        from alphac.ir.interp import format_state, run as interp_run
        assert r.stdout == format_state(lr, interp_run(lr, 4))


# Each start-up part a card's events file times (docs/nvdrv.md "Where start-up goes"): the mark
# and the driver calls since the mark before it (for `gpu-open`, its last two).
PARTS = [("gpu-open", ["/dev/nvidia0", "NV_ESC_REGISTER_FD"]),
         ("device", ["NV_ESC_RM_ALLOC NV01_DEVICE_0", "NV_ESC_RM_ALLOC NV20_SUBDEVICE_0"]),
         ("identity", None),
         ("boost", ["NV_ESC_RM_CONTROL NV2080_CTRL_CMD_PERF_BOOST"]),
         ("uvm-open", ["/dev/nvidia-uvm", "/dev/nvidia-uvm", "UVM_INITIALIZE", "UVM_MM_INITIALIZE"]),
         ("usermode", ["NV_ESC_RM_ALLOC HOPPER_USERMODE_A", "/dev/nvidia0", "NV_ESC_REGISTER_FD",
                       "NV_ESC_RM_MAP_MEMORY h_usermode", "mmap h_usermode", "close"]),
         ("vaspace", ["NV_ESC_RM_ALLOC FERMI_VASPACE_A"]),
         ("uvm-register", ["UVM_REGISTER_GPU"]),
         ("uvm", ["UVM_REGISTER_GPU_VASPACE"]),
         ("alloc vidmem", ["NV_ESC_RM_ALLOC NV1_MEMORY_USER"]),
         ("memory vidmem", ["/dev/nvidia0", "NV_ESC_REGISTER_FD", "NV_ESC_RM_MAP_MEMORY h_vidmem", "mmap h_vidmem",
                            "close", "UVM_CREATE_EXTERNAL_RANGE", "UVM_MAP_EXTERNAL_ALLOCATION"]),
         ("alloc host", ["NV_ESC_RM_ALLOC NV01_MEMORY_SYSTEM"]),
         ("memory host", ["/dev/nvidiactl", "NV_ESC_RM_MAP_MEMORY h_host", "mmap h_host", "close",
                          "UVM_CREATE_EXTERNAL_RANGE", "UVM_MAP_EXTERNAL_ALLOCATION"]),
         ("memory", []),
         ("gpfifo", ["NV_ESC_RM_ALLOC KEPLER_CHANNEL_GROUP_A", "NV_ESC_RM_ALLOC FERMI_CONTEXT_SHARE_A",
                     "NV_ESC_RM_ALLOC HOPPER_CHANNEL_GPFIFO_A"]),
         ("objects", ["NV_ESC_RM_ALLOC HOPPER_COMPUTE_A", "NV_ESC_RM_ALLOC HOPPER_DMA_COPY_A"]),
         ("channel", None)]


def test_start_up_events_bracket_each_candidate_call():
    """Issue 42: where the H200's 176 ms between `identity` and `memory` went. Each call the
    driver source says may take long has an event on each side, so a card's events file names
    its milliseconds: the GPU file's first open (nv_open_device: the adapter's start when nothing
    holds it), the device, the boost, UVM's files, the vaspace, UVM_REGISTER_GPU (UVM's state for
    the GPU, made when no other process has it registered), each memory's RM allocation apart from
    its mappings (a scrub would be in the allocation), the channel apart from its objects; and
    the owner writes them in that order, each with its time, under the mock."""
    from alphac.build import build_gpu_owner
    lr = compile_file(example("lsq_adam")).learner
    built = build_gpu_owner(lr, "x86_64+sm_90", host_for(90))
    seen, part = [], []
    for c in built.conversation.calls:
        if c.op == 7:
            seen.append((c.what, part))
            part = []
        elif c.op in (1, 2, 3, 4):
            part.append(c.what)
    sizes = {f"memory {a.name}": f"memory {a.name} {a.size}" for a in built.gpu.memories}
    assert [w for w, _ in seen] == [sizes.get(w, w) for w, _ in PARTS]
    for (what, calls), (_, want) in zip(seen, PARTS):
        if want is not None:
            got = calls[-len(want):] if what == "gpu-open" else calls
            assert got == want, (what, calls)
    need_mock()
    path, _ = owner("lsq_adam", 90)
    r = mockgpu.run(path, ("--steps", "0"), card=card_for(90), kernels=built.kernels)
    assert r.errors == [] and r.returncode == 0, (r.errors, r.stderr)
    from alphac.tools.record import split_event
    events = [split_event(line) for line in r.events.split("\n")[1:-1]]
    marks = [(w, t) for w, t in events if w in built.conversation.marks()]
    assert [w for w, _ in marks] == built.conversation.marks() and all(t is not None for _, t in marks)
