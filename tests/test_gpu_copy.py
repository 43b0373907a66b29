"""The card's results come back through its copy engine (docs/nvdrv.md "Results through the copy
engine"): after a chain's kernels, the host's WFI, then the copy class copies G (exact_sum: the
accumulators) and the states into `results`, system memory the host maps cached, and releases the
step's one semaphore; the host reads the card only there.

Guarantees checked, against the mock card (tests/mockgpu/gpu.py `dma`, the oracle):
  * the push buffers decode to it: every chain ends with the host WFI, one LAUNCH_DMA a buffer
    (NON_PIPELINED, pitch, virtual, flush) and the copy engine's one-word release; the copy object
    is allocated on the channel and bound to subchannel 4;
  * executed mutants: a host that reads the copies before its wait (a card that takes time),
    copies 8 bytes short, copies not ordered after the kernels (no host WFI): each caught; a card
    without the copy class refused by name before anything is allocated;
  * the mock refuses by name a LAUNCH_DMA with a field it does not model, a copy that is not
    linear between virtual addresses, an unmapped or empty range, a release without flush.
"""
import struct

import pytest

import mockgpu
from alphac.nvdrv import abi, image as image_mod
from mockgpu.gpu import Alloc, Channel, Gpu, GpuMemory
from nvdrv_decode import decode_entry
from test_nvdrv_owner import card_for, host_for, need_mock, owner, refused, identity_only, run

ARCH = abi.ARCHES["sm_90"]


def build(tmp_path, name="lsq_adam"):
    """An owner built now (after a test's monkeypatching), written to tmp_path."""
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from conftest import example
    built = build_gpu_owner(compile_file(example(name)).learner, "x86_64+sm_90", host_for(90))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    return tmp_path / "o", built


def test_every_chain_ends_with_its_copies_and_the_copy_engines_release():
    _, built = owner("lsq_adam", 90)
    g = built.gpu
    m, h = abi.METHODS[ARCH.copy_methods], abi.METHODS[ARCH.host_methods]
    assert image_mod.method(4, h["SET_OBJECT"], 1) in g.setup_pushbuf
    grad, upd = ("grad_samples", "owner_sum"), ("update_g0",)
    states = [f"state_{s}" for s in ("w", "m", "v")]     # what update_g0 writes (p1, p2: the host's)
    sampled = grad + upd + ("digest_gather", "digest_0", "digest_1")     # and the digest's root
    want = {grad: ["G"], upd: states, grad + upd: ["G", *states], sampled: ["dout"], ("digest_read",): ["dprev", "dmsg"]}
    for kernels, c in g.chains.items():
        assert decode_entry(ARCH, c.entry) == (c.pushbuf_va, len(c.pushbuf))
        assert [g.results[k] for k in want[kernels]] == [dst for _, dst, _ in c.copies]
        assert all(src == g.buffers[k] for (src, _, _), k in zip(c.copies, want[kernels]))
        pb = list(c.pushbuf)
        tail = image_mod.host_wfi(ARCH)
        for src, dst, n in c.copies:
            tail += image_mod.copy_out(ARCH, src, dst, n)
        assert pb[-len(tail) - 6:-6] == tail and pb[-6:] == image_mod.copy_release(ARCH, g.semaphore_va)
        assert pb[-1] == 0xc           # FLUSH_ENABLE | SEMAPHORE_TYPE 1 (ONE_WORD): tinygrad's 0x14 has type 2
        assert image_mod.copy_out(ARCH, 0, 1 << 40, 8)[-1] == 0x186     # tinygrad's 0x182 | FLUSH_ENABLE
    assert g.alloc("results").where == "sysmem-cached"
    assert "NV_ESC_RM_ALLOC HOPPER_DMA_COPY_A" in built.conversation.listing()


def test_a_copy_longer_than_a_launch_is_split():
    pb = image_mod.copy_out(ARCH, 0x10_0000_0000, 0x20_0000_0000, 3 << 30)
    header = image_mod.method(4, abi.METHODS["NVC8B5"]["LINE_LENGTH_IN"], 1)
    lengths = [pb[i + 1] for i, w in enumerate(pb) if w == header]
    assert lengths == [1 << 31, 1 << 30] and image_mod.copies_dwords([(0, 0, 3 << 30)]) == 2 + len(pb)


def test_a_host_that_reads_the_copies_before_its_wait_is_caught(monkeypatch, tmp_path):
    """A card that takes time (the mock's latency: the channel, copies included, runs three calls
    after the doorbell): the step as built waits, then reads; moved after its reads, the wait
    lets the host compare what `results` held before the copies landed."""
    need_mock()
    path, built = build(tmp_path)
    ok = mockgpu.run(path, ("--steps", "2"), card=card_for(90), kernels=built.kernels, latency=3)
    assert (ok.returncode, ok.errors) == (0, []) and len(ok.copies) == 1 + 2 * 4   # the upload; G and three states
    from alphac.lower import gpu as gpu_lowering
    step = gpu_lowering.step
    monkeypatch.setattr(gpu_lowering, "step", lambda lr, img: step(lr, img).replace("    gpu_wait();\n", "").replace(
        "    learner_commit();", "    gpu_wait();\n    learner_commit();"))
    path, built = build(tmp_path)
    r = mockgpu.run(path, ("--steps", "2"), card=card_for(90), kernels=built.kernels, latency=3)
    refused(r, "gpu-shadow-mismatch")


def test_a_copy_of_the_wrong_length_is_caught(monkeypatch, tmp_path):
    need_mock()
    copy_out = image_mod.copy_out
    monkeypatch.setattr(image_mod, "copy_out", lambda arch, src, dst, n: copy_out(arch, src, dst, n - 8))
    path, built = build(tmp_path)
    r = mockgpu.run(path, ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    refused(r, "gpu-shadow-mismatch")


def test_copies_not_ordered_after_the_kernels_are_caught(monkeypatch, tmp_path):
    """Without the host's WFI the copy engine may read G and the states before owner_sum and
    update_g0 wrote them (the compute WAIT_FOR_IDLE orders the compute engine only)."""
    need_mock()
    monkeypatch.setattr(image_mod, "host_wfi", lambda arch: [])
    path, built = build(tmp_path)
    r = mockgpu.run(path, ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    b = built.gpu.buffers
    assert r.errors[:2] == [f"a copy reads {b['G']:#x}, which owner_sum wrote with no host WFI between them",
                            f"a copy reads {b['state_w']:#x}, which update_g0 wrote with no host WFI between them"]


def test_a_card_without_the_copy_class_is_refused_by_name():
    need_mock()
    r, built = run("lsq_adam", 90, card=card_for(90, copy_class=False))
    refused(r, "nvidia-plan-host")
    identity_only(r, built)
    r, _ = run("lsq_adam", 90, args=("--probe-identity",), card=card_for(90, copy_class=False))
    assert "class c8b5 absent\n" in r.stdout
    # listed, but its allocation refused: `nvidia-call`, the call and the driver's status named
    r, built = run("lsq_adam", 90, card=card_for(90, copy_refused=True))
    refused(r, "nvidia-call")
    at = next(i for i, c in enumerate(built.conversation.calls) if c.what == "NV_ESC_RM_ALLOC HOPPER_DMA_COPY_A")
    from alphac.tools.record import split_event
    assert [split_event(e)[0] for e in r.events.split("\n")[-4:-1]] == \
        [f"nvidia call {at}", f"status {abi.STATUS_CODES['NV_ERR_INSUFFICIENT_RESOURCES']}", "refused: nvidia-call"]


# -- the mock's copy engine, directly ----------------------------------------------------------
def card():
    errors, memory = [], GpuMemory()
    vid, sys_ = Alloc(1, "vidmem", 4096), Alloc(2, "sysmem", 4096)
    memory.map(0x10_0000_0000, 4096, vid)
    memory.map(0x20_0000_0000, 4096, sys_)
    vid.mm[:64] = bytes(range(64))
    gpu = Gpu(ARCH, [], memory, errors)
    ch = Channel(1, 0x100, 0, 0, None, 0, 0)
    ch.copy = abi.CLASSES[ARCH.dma_copy]
    gpu.pushbuf(ch, (image_mod.method(4, 0, 1), ch.copy))
    return gpu, ch, sys_, errors


def dma(src, dst, n, launch):
    return image_mod.copy_out(ARCH, src, dst, n)[:-1] + [launch]


def test_the_mock_copies_and_releases():
    gpu, ch, sys_, errors = card()
    gpu.pushbuf(ch, image_mod.copy_out(ARCH, 0x10_0000_0000, 0x20_0000_0100, 64)
                + image_mod.copy_release(ARCH, 0x20_0000_0000))
    assert errors == [] and bytes(sys_.mm[0x100:0x140]) == bytes(range(64)) and sys_.u32(0) == 1


@pytest.mark.parametrize("words,error", [
    (lambda: dma(0x10_0000_0000, 0x20_0000_0000, 64, image_mod.copy_dma(
        ARCH, data_transfer_type="NON_PIPELINED", src_memory_layout="PITCH", dst_memory_layout="PITCH") | 1 << 10),
     "LAUNCH_DMA 0x582: REMAP_ENABLE not modelled"),
    (lambda: dma(0x10_0000_0000, 0x20_0000_0000, 64, image_mod.copy_dma(
        ARCH, data_transfer_type="NON_PIPELINED", dst_memory_layout="PITCH")),
     "LAUNCH_DMA 0x102: SRC_MEMORY_LAYOUT is not a linear copy between virtual addresses"),
    (lambda: image_mod.copy_out(ARCH, 0x10_0000_0000, 0x30_0000_0000, 64),
     "a copy of 64 bytes from 0x1000000000 to 0x3000000000: GPU fault at 0x3000000000 (+64): no mapping"),
    (lambda: [0 if i == 6 else w for i, w in enumerate(image_mod.copy_out(ARCH, 0x10_0000_0000, 0x20_0000_0000, 8))],
     "a copy of 0 bytes from 0x1000000000 to 0x2000000000: empty or overlapping"),
    (lambda: image_mod.copy_release(ARCH, 0x20_0000_0000)[:-1] + [image_mod.copy_dma(
        ARCH, data_transfer_type="NONE", semaphore_type="RELEASE_ONE_WORD_SEMAPHORE")],
     "LAUNCH_DMA 0x8: a release that is not one word with flush (the copies' data may land after it)"),
])
def test_the_mock_refuses_a_copy_it_does_not_model_by_name(words, error):
    gpu, ch, sys_, errors = card()
    gpu.pushbuf(ch, words())
    assert errors == [error] and bytes(sys_.mm[:64]) == bytes(64)


def test_the_image_and_the_rows_reach_the_card_only_by_the_setup_copy(monkeypatch, tmp_path):
    """The host writes the launch image and the data rows to `staging` (system memory), never
    through BAR1: without the setup push buffer's copy, the card's arena holds no push buffer."""
    need_mock()
    real = image_mod.setup_pushbuf
    monkeypatch.setattr(image_mod, "setup_pushbuf", lambda arch, sem, va=0, per_tpc=0, upload=None:
                        real(arch, sem, va, per_tpc))
    path, built = build(tmp_path)
    r = mockgpu.run(path, ("--steps", "1"), card=card_for(90), kernels=built.kernels, timeout=30)
    assert r.launches == [] and r.copies == [] and r.errors[:1] == ["push buffer: unknown opcode 0 in 0x00000000"]
