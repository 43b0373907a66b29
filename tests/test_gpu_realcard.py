"""What a real card needs that the first mock did not ask for (issue 19), each checked by the mock
(tests/mockgpu) the way the hardware would: a defect gives wrong bits, a mock error or a refusal.

  * more than one block: the kernels read %ntid and %nctaid from constant bank 0 (dwords 0-2 and
    3-5), so the launch image must write them; the mock GPU reads them from there;
  * Hopper's shared-memory window is 4 GiB aligned, and the bank's prefix repeats the windows the
    channel set: the mock's error list names a window that is not (every sm_90 run here and in
    test_nvdrv_owner.py asserts an empty list);
  * a constant bank's address and size in the hardware's units (64 bytes from Turing, Mesa NVK;
    the image uses 256): the mock's error list names a bank that is not;
  * a GPU that never completes is refused `gpu-timeout` after about 4 s of CLOCK_MONOTONIC (not
    after a poll count), with the channel's state in the events file;
  * the completion wait spins first: a card that completes a few calls after its doorbell (the
    mock's `latency`) is waited for without one nanosleep (the clock read every SPIN_POLLS polls
    is what gives the mock control), and one that never completes is slept for only after
    SPIN_NS of spinning;
  * a GPU build imports only the stdlib, numpy and alphac (the GPU machine has nothing else;
    pyelftools, capstone and keystone are the tests' oracles): built with those unimportable.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import mockgpu
import oracle
from test_nvdrv_owner import _DIR, card_for, host_for, need_mock

from alphac.driver import compile_file
from alphac.nvdrv import image as image_mod
from alphac.refusals import exit_code
from conftest import ROOT, example


def build(name, sm, tag=""):
    from alphac.build import build_gpu_owner
    built = build_gpu_owner(compile_file(example(name)).learner, f"x86_64+sm_{sm}", host_for(sm))
    path = Path(_DIR) / f"{name}.sm_{sm}.realcard{tag}"
    path.write_bytes(built.image.elf)
    os.chmod(path, 0o755)
    return path, built


def test_kernels_of_several_blocks_print_the_oracle_bits(monkeypatch):
    """BLOCK = 4 splits every kernel of lsq_adam (8 samples, 5 coordinates) over two or more blocks:
    a block past the first computes the right indices only if %ntid.x (c[0x0][0x0]) is the block."""
    need_mock()
    monkeypatch.setattr(image_mod, "BLOCK", 4)
    for sm in (90, 86):
        path, built = build("lsq_adam", sm, ".block4")
        fixed = {b.kernel.name: b.kernel.block for b in built.kernels if b.kernel.block}
        assert all(la.grid >= 2 and la.block == 4 for la in built.gpu.launches   # but owner_sum's
                   if la.kernel not in fixed and not la.kernel.startswith("digest_"))     # (the tree's: one a node)
        r = mockgpu.run(path, ("--steps", "5"), card=card_for(sm), kernels=built.kernels)
        assert r.errors == [] and (r.returncode, r.stderr) == (0, ""), (r.errors, r.stderr)
        assert r.stdout == oracle.run("lsq_adam", steps=5)
        assert {(g, b) for _, g, b, _ in r.launches} == \
            {(la.grid, fixed.get(la.kernel, 4)) for la in built.gpu.launches if not la.kernel.startswith("digest_")}


def test_a_gpu_that_never_completes_is_refused_within_seconds():
    """The mock's GPU never runs the channel: the setup push buffer's wait ends by the clock."""
    need_mock()
    path, built = build("independent_state", 90)
    start = time.monotonic()
    r = mockgpu.run(path, ("--steps", "5"), card=card_for(90), kernels=built.kernels, hang=True,
                    timeout=30)
    took = time.monotonic() - start
    assert r.errors == [] and r.launches == []
    assert (r.returncode, r.stdout, r.stderr) == (exit_code("gpu-timeout"), "", "refused: gpu-timeout\n")
    assert 4 <= took < 15, took
    from alphac.tools.record import split_event
    lines = [split_event(e)[0] for e in r.events.split("\n")[1:-1]]
    starts = ["shadow full", *built.conversation.marks(), "image", "rows"]
    assert lines[:len(starts)] == starts
    assert lines[len(starts):] == ["gpget 0 gpput 1", *(f"notifier {i} 0" for i in range(12)), "semaphore 0",
                         "refused: gpu-timeout"]



def test_the_wait_spins_before_it_sleeps():
    """A card that takes three more calls to complete each push buffer: the wait reads the clock
    every SPIN_POLLS polls and never sleeps (nanosleep per poll would sleep at least twice a wait);
    the bits are the oracle's. A card that never completes: spinning ends after SPIN_NS, then
    every poll sleeps, until the bound."""
    from alphac.lower.gpu import SPIN_NS
    need_mock()
    path, built = build("lsq_adam", 90)
    r = mockgpu.run(path, ("--steps", "2"), card=card_for(90), kernels=built.kernels, latency=3)
    assert r.errors == [] and (r.returncode, r.stderr) == (0, ""), (r.errors, r.stderr)
    assert r.stdout == oracle.run("lsq_adam", steps=2)
    calls = [t[0] for t in r.trace]
    waits = 1 + 2 * sum(not b.kernel.name.startswith("digest_") for b in built.kernels)   # the setup, then each
                                                                                          # kernel a step (full)
    assert "nanosleep" not in calls and calls.count("clock_gettime") >= 3 * waits
    r = mockgpu.run(path, ("--steps", "1"), card=card_for(90), kernels=built.kernels, hang=True,
                    timeout=30)
    assert r.returncode == exit_code("gpu-timeout")
    calls = [t[0] for t in r.trace]
    first = calls.index("nanosleep")
    spun = calls[:first].count("clock_gettime")
    assert 2 <= spun and calls.count("nanosleep") > 100, (spun, calls.count("nanosleep"))
    assert SPIN_NS < 4_000_000_000 // 100


# A GPU build as the CLI runs it, where the test oracles cannot be imported; then every module it
# imported must be the stdlib's, numpy's or alphac's.
NO_ORACLES = """
import sys
before = set(sys.modules)
for name in ("elftools", "capstone", "keystone"):
    sys.modules[name] = None                    # `import name` (and its submodules) raises
from alphac.cli import main
rc = main(sys.argv[1:])
new = {n.split(".")[0] for n in set(sys.modules) - before
       if sys.modules[n] is not None and not n.startswith("_sysconfigdata")}   # stdlib, unlisted
print(" ".join(sorted(new - set(sys.stdlib_module_names) - {"alphac", "numpy"})))
raise SystemExit(rc)
"""


def test_a_gpu_build_needs_no_test_oracle(tmp_path):
    need_mock()
    out = tmp_path / "owner"
    r = subprocess.run([sys.executable, "-c", NO_ORACLES, "build", "examples/lsq_adam.alpha",
                        "--target", "x86_64+sm_90", "--gpu-host", "examples/h200.gpuhost", "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stdout, r.stderr) == (0, "\n", "") and out.is_file()
