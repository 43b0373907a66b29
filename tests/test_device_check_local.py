"""gpu/device-check-local.sh, the local-memory and wide owners' device check, run whole against the mock.

Here there is no GPU: the script's hooks (DEVCHECK_PROC, a fake /proc tree; DEVCHECK_RUNNER,
each GPU owner under tests/mockgpu and each CPU executable as it is, through `mock_runner`
below) let it run end to end. What is checked: every file in $OUT, the summary's stages, the
host description written from the probe (with the card's topology), each learner spilling and
giving the CPU executable's bits; and that an owner the mock fails (its area short) fails the
stage and the script's exit.
"""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mockgpu
from conftest import ROOT, require_tool
from mockgpu import Card
from test_gpu_scripts import UUID, fake_proc

FILES = {"summary.txt", "env.txt", "local.txt", "local.json", "dmesg.txt", "host.gpuhost", "bin"}


def mock_runner(exe, args, built):
    """gpu/local_check.py's --runner: a GPU owner under the mock, on the H200 fake_proc describes
    (what the mock finds wrong fails the run); a CPU executable (built None) as it is."""
    if built is None:
        p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr
    from alphac.nvdrv.host import parse_uuid
    card = Card(uuid=parse_uuid(UUID), name="NVIDIA H200", driver="580.159.04", sm=90,
                topology=tuple(int(v) for v in os.environ.get("MOCK_TOPOLOGY", "8 9 2 64").split()))
    r = mockgpu.run(exe, args, card=card, kernels=built.kernels, events=False)
    return (r.returncode or (1 if r.errors else 0)), r.stdout, r.stderr + "".join(f"mock: {e}\n" for e in r.errors)


def local_check(tmp_path: Path, **env):
    out = tmp_path / "out"
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "dmesg").write_text("#!/bin/sh\necho '[  2.0] NVRM: loading'\n")
    (tmp_path / "bin" / "dmesg").chmod(0o755)
    e = dict(os.environ, OUT=str(out), PYTHON=sys.executable, DEVCHECK_PROC=str(fake_proc(tmp_path)),
             DEVCHECK_RUNNER=f"{ROOT / 'tests' / 'test_device_check_local.py'}:mock_runner",
             LOCALCHECK_WIDTHS="128,256", LOCALCHECK_STEPS="2", LOCALCHECK_LEARNERS="",
             PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}") | env
    run = subprocess.run(["bash", "gpu/device-check-local.sh"], cwd=ROOT, env=e, capture_output=True,
                         text=True, timeout=300)
    stages = {}
    for ln in (out / "summary.txt").read_text().splitlines()[3:]:
        name, result, _, _, *note = ln.split(None, 4)
        stages[name] = (result, note[0] if note else "")
    return run, stages, out


def need_mock():
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def test_device_check_local_against_the_mock(tmp_path):
    need_mock()
    run, stages, out = local_check(tmp_path, LOCALCHECK_LEARNERS="lsq:40,mlp:20-18-3")
    assert run.returncode == 0, (run.stdout, run.stderr, (out / "summary.txt").read_text(),
                                 (out / "local.txt").read_text())
    assert {p.name for p in out.iterdir()} == FILES
    assert [s for s in stages] == ["env", "local", "dmesg", "total"]
    assert all(result == "passed" for result, _ in stages.values())
    assert "topology 8 9 2 64" in (out / "host.gpuhost").read_text()
    res = json.loads((out / "local.json").read_text())
    assert res["passed"] and [r["learner"] for r in res["learners"]] == ["lsq_wide128", "lsq_wide256",
                                                                         "lsq_plain40", "mlp20_18_3"]
    for r in res["learners"]:       # kept vectors in local memory; the plain one in loops, none;
        local = r["learner"] in ("lsq_wide128", "lsq_wide256")   # the MLP's in batch buffers, none
        assert r["passed"] and (r["stack"]["grad_samples"] > 0) == local == (r["local"]["area"] > 0)
        assert r["gpu"]["stdout"] == r["cpu"]["stdout"] and "gpu_low_and_high" not in r
        assert r["gpu"]["equals_interpreter"] is (None if r["learner"] == "mlp20_18_3" else True)
    text = (out / "local.txt").read_text()
    assert all(f"{n}: PASS" in text for n in ("lsq_wide128", "lsq_wide256", "lsq_plain40", "mlp20_18_3"))
    assert "NVRM: loading" in (out / "dmesg.txt").read_text()


def test_a_card_whose_topology_the_probe_misreports_fails_the_stage(tmp_path):
    """The probe reads the card the runner's mock models; a card that then answers more warps per
    SM (here: the owners' mock, set after the probe by a runner that changes its mind) is refused
    gpu-topology by every spilling owner, and the script says failed."""
    need_mock()
    run, stages, out = local_check(tmp_path, LOCALCHECK_WIDTHS="128",
                                   DEVCHECK_RUNNER=f"{ROOT / 'tests' / 'test_device_check_local.py'}:fickle_runner")
    assert run.returncode == 1
    assert stages["local"][0] == "failed" and stages["total"][0] == "failed"
    res = json.loads((out / "local.json").read_text())
    assert not res["passed"] and res["learners"][0]["gpu"]["refused"] == "gpu-topology"
    assert "lsq_wide128: FAIL (refused: gpu-topology)" in (out / "local.txt").read_text()


def fickle_runner(exe, args, built):
    """The probe on an H200 of 64 warps per SM, every later run on one of 65."""
    if built is not None and "--probe-identity" not in args:
        os.environ["MOCK_TOPOLOGY"] = "8 9 2 65"
    try:
        return mock_runner(exe, args, built)
    finally:
        os.environ.pop("MOCK_TOPOLOGY", None)


def low_size_runner(exe, args, built):
    """A card that (unlike the mock) wants SHADER_LOCAL_MEMORY_LOW_SIZE: a spilling owner whose
    QMDs leave it 0 fails."""
    if built is not None and built.gpu.local_per_thread:
        from nvdrv_decode import unpack_qmd
        from alphac.nvdrv import abi
        la = built.gpu.launches[0]
        if unpack_qmd(abi.QMD_LAYOUTS[built.gpu.arch.qmd], la.qmd)["SHADER_LOCAL_MEMORY_LOW_SIZE"] == 0:
            return 1, "", "refused: gpu-timeout\n"
    return mock_runner(exe, args, built)


def test_an_owner_that_fails_is_tried_with_low_size_too(tmp_path):
    need_mock()
    run, stages, out = local_check(tmp_path, LOCALCHECK_WIDTHS="128",
                                   DEVCHECK_RUNNER=f"{ROOT / 'tests' / 'test_device_check_local.py'}:low_size_runner")
    assert run.returncode == 1 and stages["local"][0] == "failed"
    row = json.loads((out / "local.json").read_text())["learners"][0]
    assert row["gpu"]["refused"] == "gpu-timeout" and row["gpu_low_and_high"]["exit"] == 0
    assert row["gpu_low_and_high"]["stdout"] == row["cpu"]["stdout"]
    text = (out / "local.txt").read_text()
    assert "lsq_wide128: FAIL (refused: gpu-timeout)" in text
    assert "lsq_wide128 with SHADER_LOCAL_MEMORY_LOW_SIZE = HIGH_SIZE = 1600: PASS" in text


def test_device_all_runs_both_checks_into_at_most_eight_files(tmp_path):
    """gpu/device-all.sh, the one command a lease runs: both scripts and the GPU benchmark against
    the mock, their summaries in one file, everything in one archive, at most eight files in $OUT."""
    import tarfile
    need_mock()
    out = tmp_path / "out"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dmesg").write_text("#!/bin/sh\necho '[  2.0] NVRM: loading'\n")
    (tmp_path / "bin" / "dmesg").chmod(0o755)
    e = dict(os.environ, OUT=str(out), PYTHON=sys.executable, DEVCHECK_PROC=str(fake_proc(tmp_path)),
             DEVCHECK_RUNNER=f"{ROOT / 'tests' / 'test_device_check_local.py'}:mock_runner",
             DEVCHECK_LIBCUDA=str(tmp_path / "no-libcuda.so"), DEVCHECK_STEPS="2",
             DEVCHECK_VARIANTS="default", LOCALCHECK_WIDTHS="128", LOCALCHECK_STEPS="2",
             LOCALCHECK_LEARNERS="", DEVALL_BENCH_ARGS="--quick --learners lsq",
             DEVALL_CHOOSE_ARGS="--quick --learners lsq --keys map --steps 2",
             DEVALL_WORK=str(tmp_path / "work"),
             PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(["bash", "gpu/device-all.sh"], cwd=ROOT, env=e, capture_output=True,
                         text=True, timeout=400)
    summary = (out / "summary.txt").read_text()
    assert run.returncode == 0, (run.stdout, run.stderr, summary)
    files = {p.name for p in out.iterdir()}
    assert {"summary.txt", "results.tgz", "qualify.txt", "local.txt", "dmesg.txt", "bench-gpu.txt"} <= files
    assert len(files) <= 8 and all(p.is_file() for p in out.iterdir())
    assert "gpu/device-check.sh: exit 0" in summary and "gpu/device-check-local.sh: exit 0" in summary
    assert "bench/gpu.py: exit 0" in summary and "| least squares 8 x 64, exact_sum, Adam |" in summary
    assert re.search(r"device-all: check exit 0, choose exit 0, bench exit 0, local exit 0, [0-9]+ s of 540\n$",
                     summary)
    # the order a short lease must not lose: the qualification, the benchmark, then the spilling owners
    stages = [l.split(":")[0] for l in summary.splitlines() if l.startswith("== ")]
    assert stages == ["== gpu/device-check.sh", "== gpu/choose.py", "== bench/gpu.py",
                      "== gpu/device-check-local.sh"], summary
    assert "\nchosen: defaults\n" in summary and "steps; ms a step, median (spread)\n" in summary  # no --choose
    with tarfile.open(out / "results.tgz") as tar:
        names = tar.getnames()
    assert "check/summary.txt" in names and "local/local.json" in names and "left-out.txt" in names
    assert "choose/choose.txt" in names and "choose/choose.args" in names
    assert not any(n.endswith(".npy") for n in names)           # the learners' data stay behind
    assert any(n.endswith("bench-gpu.json") for n in names)       # the benchmark's own record
    assert "lsq_wide128: PASS" in (out / "local.txt").read_text()
