"""The fallbacks to the paths the H200 ran on 2026-12-04, each a row of the host choices
(alphac/nvdrv/host.py CHOICES; docs/nvdrv.md "Fallbacks to the verified paths"), against the mock.

Requires what tests/test_nvdrv_owner.py requires (ptxas, the mock). Guarantees checked, for each
choice (and all of them at once) on the least-squares Adam owner (sm_90), against a card that
takes time (the mock's latency: the channel runs three calls after its doorbell):
  * it prints the interpreter's bits under the full shadow and the sampled one (proven steps
    1, 2 and 4, step 3 adopted), with the calls its conversation lists and no mock error;
  * what it changes, in the plan, the push buffers and `--emit calls`: `results bar1`, no copy out
    (the mock's copies are the start-up upload alone), every chain ending with the host's release
    with WFI, the results read in the arena, all of the video memory mapped for the CPU;
    `sysmem uncached`, the system memory allocated UNCACHED, which the mock's driver maps uncached
    for the CPU (the default: CACHED); `inputs bar1`, the constant banks, their scalars and the
    scalar states the kernels read in the arena (the default: in `staging`), all of the video
    memory mapped for the CPU; `upload bar1`, no copy in at start-up, the image and the rows
    written into the arena, the setup push buffer run from there and ending with the host's
    release;
  * an executed mutant of the choice's path, caught: `results bar1`, a host that reads the arena
    before its wait (gpu-shadow-mismatch); `sysmem uncached`, a conversation that asks uncached
    only of the CPU mapping (the driver maps system memory as it was allocated: still cached);
    `inputs bar1`, a host that writes the step's scalars to `staging` while the kernels read their
    banks in the arena (gpu-shadow-mismatch); `upload bar1`, a host that writes the data rows to
    `staging`, which nothing copies to the arena (gpu-shadow-mismatch).
"""
import pytest

import mockgpu
import oracle
from alphac.nvdrv import abi, conversation as conv_mod, image as image_mod
from nvdrv_decode import decode_entry
from test_nvdrv_owner import card_for, host_for, need_mock, owner, refused

ARCH = abi.ARCHES["sm_90"]
ALL = {"results": "bar1", "sysmem": "uncached", "inputs": "bar1", "upload": "bar1"}   # every fallback on
CHOICES = [{"results": "bar1"}, {"sysmem": "uncached"}, {"inputs": "bar1"}, {"upload": "bar1"}, ALL]


def host_coherency(conv) -> int:
    """The NVOS32 coherency the conversation asks for its system memory (its RM_ALLOC's attr)."""
    call = next(c for c in conv.calls if c.what == "NV_ESC_RM_ALLOC NV01_MEMORY_SYSTEM")
    params = next(value for _, _, kind, value in call.patches if kind == conv_mod.ADDR)
    off, size = conv_mod.locate("NV_MEMORY_ALLOCATION_PARAMS", "attr")
    attr = int.from_bytes(conv.region.buf[params + off:params + off + size], "little")
    hi, lo = abi.BITFIELDS["NVOS32_ATTR_COHERENCY"]
    return attr >> lo & (1 << hi - lo + 1) - 1


def runs(path, built):
    """The owner under the full shadow (3 steps) and the sampled one (4 steps, 3 unproven)."""
    go = dict(card=card_for(90), kernels=built.kernels, latency=3)
    return (mockgpu.run(path, ("--steps", "3"), **go),
            mockgpu.run(path, ("--steps", "4", "--shadow", "sampled"), draws=b"\x01", **go))


@pytest.mark.parametrize("choices", CHOICES, ids=lambda c: ",".join(f"{k}-{v}" for k, v in c.items()))
def test_a_fallback_prints_the_interpreters_bits_full_and_sampled(choices):
    need_mock()
    path, built = owner("lsq_adam", 90, **choices)
    full, sampled = runs(path, built)
    for r, steps in ((full, 3), (sampled, 4)):
        assert (r.returncode, r.stderr, r.errors) == (0, "", [])
        assert r.stdout == oracle.run("lsq_adam", steps=steps)
        assert r.device_calls() == built.conversation.expected_trace()
    assert [int(e.split(" ")[1]) for e in sampled.events.split("\n") if e.startswith("proven ")] == [1, 2, 4]
    g, default = built.gpu, owner("lsq_adam", 90)[1]
    vid = g.alloc("vidmem")
    mapped = [c.args[1] for c in built.conversation.calls if c.what == "mmap h_vidmem"]
    if "bar1" in choices.values():          # the host reads or writes the arena: all of it mapped
        assert mapped == [vid.size] and f"+{vid.size:#x} fd_map (h_vidmem)" in built.conversation.listing()
        assert f"+{image_mod.GPFIFO_AREA:#x} fd_map (h_vidmem)" in default.conversation.listing()
    if choices.get("results") == "bar1":
        assert len(full.copies) == len(sampled.copies) == (choices.get("upload") != "bar1")   # the upload, if any
        assert full.submissions == 1 + 3 and sampled.submissions == 1 + 4 + 3
        for c in g.chains.values():
            assert c.copies == () and list(c.pushbuf[-6:]) == image_mod.semaphore_release(ARCH, g.semaphore_va)
        assert all(va == g.buffers[k] for k, va in g.results.items())       # read in the arena
        assert "results" not in {a.name for a in g.allocations}
        assert all(c.copies for c in default.gpu.chains.values())
    want = "UNCACHED" if choices.get("sysmem") == "uncached" else "CACHED"
    assert full.caching == sampled.caching == [want]       # the CPU mapping as the driver makes it
    assert g.alloc("host").where == f"sysmem-{want.lower()}"
    assert host_coherency(built.conversation) == abi.CONSTANTS[f"NVOS32_ATTR_COHERENCY_{want}"]
    assert host_coherency(default.conversation) == abi.CONSTANTS["NVOS32_ATTR_COHERENCY_CACHED"]
    # what the host writes each step (banks: scalars; p1, p2: scalar states) and the card reads
    where = g.alloc("arena") if choices.get("inputs") == "bar1" else g.alloc("staging")
    writes = [la.cbank_va for la in g.launches] + [s.va for la in g.launches for s in la.scalars] + \
        [g.buffers["state_p1"], g.buffers["state_p2"]]
    assert all(where.va <= va < where.va + where.size for va in writes)
    arena, staging = g.alloc("arena"), g.alloc("staging")
    setup_va = decode_entry(ARCH, g.setup_entry)[0]
    if choices.get("upload") == "bar1":      # the image and the rows written into the arena, no copy in
        assert not any(c[:2] == (staging.va, arena.va) for c in full.copies)
        assert list(g.setup_pushbuf[-6:]) == image_mod.semaphore_release(ARCH, g.semaphore_va)
        assert arena.va <= setup_va < arena.va + arena.size and g.staged("rows_x") == g.buffers["rows_x"]
    else:
        assert full.copies[0][:2] == (staging.va, arena.va) and staging.va <= setup_va < staging.va + staging.size


def test_results_bar1_a_host_that_reads_the_arena_before_its_wait_is_caught(monkeypatch, tmp_path):
    """Through BAR1 the host reads the buffers the kernels write: moved after its reads, the wait
    lets it compare what the arena held before the card's step ran."""
    need_mock()
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from alphac.lower import gpu as gpu_lowering
    from conftest import example
    step = gpu_lowering.step
    monkeypatch.setattr(gpu_lowering, "step", lambda lr, img: step(lr, img).replace("    gpu_wait();\n", "").replace(
        "    learner_commit();", "    gpu_wait();\n    learner_commit();"))
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90, results="bar1"))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "2"), card=card_for(90), kernels=built.kernels, latency=3)
    refused(r, "gpu-shadow-mismatch")


def test_sysmem_uncached_a_conversation_that_asks_it_only_of_the_mapping_is_caught(monkeypatch, tmp_path):
    """RM_MAP_MEMORY's caching flag does not change how the driver maps system memory for the CPU
    (nv-mmap.c: the allocation's own cache_type), so the allocation itself must be uncached."""
    need_mock()
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from conftest import example
    memory, map_cpu = conv_mod.Conversation.memory, conv_mod.Conversation.map_cpu
    uncached = abi.pack_bitfields({"NVOS33_FLAGS_CACHING_TYPE": abi.CONSTANTS["NVOS33_FLAGS_CACHING_TYPE_UNCACHED"]})
    monkeypatch.setattr(conv_mod.Conversation, "memory",
                        lambda self, name, where, *a: memory(self, name, where.replace("uncached", "cached"), *a))
    monkeypatch.setattr(conv_mod.Conversation, "map_cpu", lambda self, mem, va, size, system, flags: map_cpu(
        self, mem, va, size, system, uncached if system else flags))
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90, sysmem="uncached"))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    assert (r.returncode, r.errors) == (0, []) and r.caching == ["CACHED"]


def test_inputs_bar1_scalars_written_where_the_kernels_do_not_read_them_are_caught(monkeypatch, tmp_path):
    """Under `inputs bar1` the banks are in the arena: a host that still writes each step's scalar
    parameters to `staging` leaves the kernels reading the image's."""
    need_mock()
    import dataclasses
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from conftest import example
    plan = image_mod.plan

    def staged_scalars(*a, **k):
        g = plan(*a, **k)
        moved = g.alloc("staging").va - image_mod.ARENA_VA
        return dataclasses.replace(g, launches=tuple(dataclasses.replace(la, scalars=tuple(
            dataclasses.replace(s, va=s.va + moved) for s in la.scalars)) for la in g.launches))
    monkeypatch.setattr(image_mod, "plan", staged_scalars)
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90, inputs="bar1"))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    refused(r, "gpu-shadow-mismatch")


def test_upload_bar1_rows_written_where_nothing_copies_them_are_caught(monkeypatch, tmp_path):
    """Under `upload bar1` the setup copies nothing: rows written to `staging` never reach the card."""
    need_mock()
    from alphac.build import build_gpu_owner
    from alphac.driver import compile_file
    from conftest import example
    monkeypatch.setattr(image_mod.GpuImage, "staged", lambda self, name: self.alloc("staging").va
                        + self.buffers[name] - image_mod.ARENA_VA)
    built = build_gpu_owner(compile_file(example("lsq_adam")).learner, "x86_64+sm_90", host_for(90, upload="bar1"))
    (tmp_path / "o").write_bytes(built.image.elf)
    (tmp_path / "o").chmod(0o755)
    r = mockgpu.run(tmp_path / "o", ("--steps", "1"), card=card_for(90), kernels=built.kernels)
    refused(r, "gpu-shadow-mismatch")
