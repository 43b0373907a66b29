"""gpu/order_probe.py, the ordering probe of gpu/qualify.py (issue 42), against the mock card.

  * its three push buffers are the owners' (image.launch_pushbuf through image.plan: the compute
    WAIT_FOR_IDLE between A and B, the host's WFI before the copy), the control's the same less
    the host's WFI;
  * against the mock (the PTX interpreter runs A's 16 spins, B and the copies): B and the copy
    after the WFI see A's marker (`passed`), the control's copy does not (`no-order`: the mock's
    copy engine overtakes a kernel no WFI waited for) and the mock reports exactly that copy;
  * a broken order, compute-copy built without its WFI or compute-compute without its
    WAIT_FOR_IDLE, is reported `failed`; a probe that printed nothing for a case says
    `no-verdict`, with its exit and refusal; one that cannot be built does not stop qualify.py.
"""
from pathlib import Path

import pytest

import mockgpu
from alphac.nvdrv import abi, image
from conftest import require_tool
from test_gpu_scripts import script
from test_nvdrv_owner import card_for, host_for, need_mock

SPINS = 16


def probe(tmp_path: Path, sm: int = 90, **kw):
    require_tool("ptxas")
    op = script("order_probe")
    built = op.build(sm, host_for(sm), SPINS, **kw)
    exe = tmp_path / "order-probe"
    exe.write_bytes(built.image.elf)
    exe.chmod(0o755)
    return op, built, exe


def run(op, built, exe, sm: int = 90):
    need_mock()
    r = mockgpu.run(exe, ("--steps", "3"), card=card_for(sm), kernels=built.kernels)
    return r, {v["case"]: v["result"] for v in op.verdicts(r.stdout, r.returncode, r.stderr, SPINS, r.events)}


def copy_report(built, slot: int) -> str:
    return f"a copy reads {built.gpu.buffers['G'] + 8 * slot:#x}, which order_spin{slot} wrote with no host WFI " \
           "between them"


@pytest.mark.parametrize("sm", [90, 86])
def test_the_probe_against_the_mock(tmp_path, sm):
    op, built, exe = probe(tmp_path, sm)
    g, arch = built.gpu, abi.ARCHES[f"sm_{sm}"]
    qmd = {la.kernel: la.qmd_va for la in g.launches}
    copies = [(g.buffers["G"], g.results["G"], 8 * op.WORDS)]
    for name, kernels, _, _ in op.CASES:
        pb = image.launch_pushbuf(arch, [qmd[k] for k in kernels], g.semaphore_va, copies)
        if name == op.CONTROL:
            wfi = image.host_wfi(arch)
            at = next(i for i in range(len(pb)) if pb[i:i + len(wfi)] == wfi)
            pb = pb[:at] + pb[at + len(wfi):]
        assert list(g.chain(kernels).pushbuf) == pb, name
    assert image.wait_for_idle(arch)[0] in g.chain(("order_spin0", "order_copy")).pushbuf
    r, got = run(op, built, exe, sm)
    assert r.returncode == 0, r.stderr
    assert got == {"compute-compute": "passed", "control-no-wfi": "no-order", "compute-copy": "passed"}
    assert r.errors == [copy_report(built, 3)]
    assert [la[0] for la in r.launches] == ["order_spin0", "order_copy", "order_spin3", "order_spin2"]


def test_a_broken_order_is_reported_failing(tmp_path):
    """compute-copy built without the host's WFI (a mutant of the owners' order): its copy misses
    A's marker, and the probe says `failed`, not the control's `no-order`."""
    op, built, exe = probe(tmp_path, drop_wfi=("control-no-wfi", "compute-copy"))
    r, got = run(op, built, exe)
    assert got == {"compute-compute": "passed", "control-no-wfi": "no-order", "compute-copy": "failed"}
    assert r.errors == [copy_report(built, 3), copy_report(built, 2)]


def test_kernels_without_their_wait_for_idle_are_reported_failing(tmp_path, monkeypatch):
    """The owners' builder without the compute WAIT_FOR_IDLE: B may run beside A, and the mock's
    B reads G[0] as it was before A (the second kernel overtook the first): `failed`."""
    monkeypatch.setattr(image, "wait_for_idle", lambda arch: [])
    op, built, exe = probe(tmp_path)
    r, got = run(op, built, exe)
    assert got == {"compute-compute": "failed", "control-no-wfi": "no-order", "compute-copy": "passed"}
    assert r.errors == [f"order_copy reads {built.gpu.buffers['G']:#x}, which order_spin0 wrote with no "
                        "wait-for-idle between them", copy_report(built, 3)]


def test_verdicts_from_what_the_probe_printed():
    op = script("order_probe")
    m = [f"{op.marker(s, 3):016x}" for s in range(4)]
    out = f"order 1 {m[0]} {m[0]} {'0' * 16} {'0' * 16}\norder 2 {m[0]} {m[0]} {'0' * 16} {m[3]}\n"
    v = op.verdicts(out, 127, "refused: gpu-timeout\n", 3, "uploaded @1000000\nstep 1 @3500000\n")
    assert [(x["case"], x["result"]) for x in v] == \
        [("compute-compute", "passed"), ("control-no-wfi", "saw-marker"), ("compute-copy", "no-verdict")]
    assert "in 2.500 ms" in v[0]["note"] and "exit 127, refused: gpu-timeout" in v[2]["note"]
    assert op.verdicts(out.replace(f"{m[0]} {m[0]}", f"{m[0]} {'0' * 16}"), 0, "", 3)[0]["result"] == "failed"
    assert op.marker(0, 0) == 1 and op.marker(0, 1) == (op.LCG_A + op.LCG_C) % (1 << 64)


def test_a_probe_that_cannot_be_built_is_not_fatal(tmp_path, monkeypatch):
    """qualify.py's `order`: whatever the probe does, one `no-verdict` line a case and why."""
    from types import SimpleNamespace
    q = script("qualify")
    import order_probe

    def broken(*args, **kw):
        raise RuntimeError("ptxas said no")
    monkeypatch.setattr(order_probe, "build", broken)
    got = q.order(SimpleNamespace(order_spins=SPINS), None, 90, tmp_path, None)
    assert [(v["case"], v["result"]) for v in got["verdicts"]] == [(c, "no-verdict") for c, *_ in order_probe.CASES]
    assert all("RuntimeError: ptxas said no" in v["note"] for v in got["verdicts"]) and "exit" not in got
