"""gpu/device-check.sh, the one command for a machine with a GPU, run whole against the mock.

Here there is no GPU, no nvidia-smi and no libcuda: the script's hooks (DEVCHECK_PROC, a fake
/proc tree; DEVCHECK_RUNNER, each owner under tests/mockgpu through `mock_runner` below; PATH,
fake tools) let it run end to end. What is checked: every file in $OUT, a summary that names the
stages that could not run and why, the QMD variants tried in turn (one the mock rejects, then
the default, which passes, and the rest not run), the records; and that a hanging stage is cut
by its budget while the later stages still run and $OUT is still complete.
"""
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import mockgpu
from conftest import ROOT, require_tool
from mockgpu import Card
from test_gpu_scripts import UUID, fake_proc

FILES = {"summary.txt", "env.txt", "cuda-trace.txt", "vendor.txt", "qualify.txt", "dmesg.txt", "records.tgz"}


def mock_runner(exe, args, built):
    """gpu/qualify.py's --runner here: the owner under the mock, on the H200 fake_proc describes.
    Whatever the mock finds wrong (a QMD field it does not accept, say) fails the run."""
    from alphac.nvdrv.host import parse_uuid
    card = Card(uuid=parse_uuid(UUID), name="NVIDIA H200", driver="580.159.04", sm=90)
    r = mockgpu.run(exe, args, card=card, kernels=built.kernels, events=False)
    return (r.returncode or (1 if r.errors else 0)), r.stdout, r.stderr + "".join(f"mock: {e}\n" for e in r.errors)


def tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + body + "\n")
    (bin_dir / name).chmod(0o755)


def device_check(tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, dict[str, tuple[str, str]], Path]:
    out = tmp_path / "out"
    e = dict(os.environ, OUT=str(out), PYTHON=sys.executable, DEVCHECK_WORK=str(tmp_path / "work"),
             DEVCHECK_LIBCUDA=str(tmp_path / "no-libcuda.so"), DEVCHECK_STEPS="2",
             PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", **env)
    run = subprocess.run(["bash", "gpu/device-check.sh"], cwd=ROOT, env=e, capture_output=True, text=True,
                         timeout=120)
    stages = {}
    for ln in (out / "summary.txt").read_text().splitlines()[3:]:
        name, result, _, _, *note = ln.split(None, 4)
        stages[name] = (result, note[0] if note else "")
    return run, stages, out


def test_device_check_against_the_mock(tmp_path):
    require_tool("ptxas")
    why = mockgpu.available()
    if why:
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    from alphac.tools.record import verify_record
    tool(tmp_path / "bin", "dmesg", "echo '[  1.0] usb 1-1: new device'\n"
         "echo '[  2.0] NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception'")
    run, stages, out = device_check(
        tmp_path, DEVCHECK_PROC=str(fake_proc(tmp_path)),
        DEVCHECK_RUNNER=f"{ROOT / 'tests' / 'test_device_check.py'}:mock_runner",
        DEVCHECK_VARIANTS="qmd-type-gpc-cga default group-id-0", DEVCHECK_ORDER_SPINS="16")
    assert run.returncode == 0, (run.stdout, run.stderr, (out / "summary.txt").read_text())
    assert {p.name for p in out.iterdir()} == FILES
    assert stages["env"][0] == "passed"
    assert stages["cuda-trace"][0] == "could-not-run" and "libcuda" in stages["cuda-trace"][1]
    assert stages["vendor"][0] == "could-not-run" and "libcuda" in stages["vendor"][1]
    assert stages["qualify:qmd-type-gpc-cga"][0] == "failed"
    assert stages["qualify:default"] == ("passed", "")
    assert stages["qualify:group-id-0"] == ("not-run", "an earlier variant passed")
    assert stages["qualify"] == ("passed", "variant default") and stages["total"][0] == "passed"
    # the ordering probe, a line a case (the control's copy without the WFI: `no-order`, not a failure)
    assert [(s, stages[s][0]) for s in stages if s.startswith("order:default:")] == \
        [("order:default:compute-compute", "passed"), ("order:default:control-no-wfi", "no-order"),
         ("order:default:compute-copy", "passed")]
    assert "B saw A's marker" in stages["order:default:compute-compute"][1]
    assert all(stages[f"dmesg:{s}"][0] == "passed" for s in ("cuda-trace", "vendor", "qualify:default"))
    env = (out / "env.txt").read_text()
    assert "== uname -a" in env and "580.159.04" in env and "GPU UUID" in env and "== nvidia-smi -q" in env
    assert "mock: QMD type 3 is not GRID_CTA" in (out / "qualify.txt").read_text()
    dmesg = (out / "dmesg.txt").read_text()
    assert dmesg.count("Xid (PCI:0000:18:00): 13") == 1 and "usb" not in dmesg    # new lines only
    assert "after qualify:default: 0 new" in dmesg
    with tarfile.open(out / "records.tgz") as tar:
        tar.extractall(tmp_path / "records", filter="data")
    recs = [json.loads((tmp_path / "records" / "runs" / f"gpu-qualify-000{n}" / "record.json").read_text())
            for n in (1, 2)]
    assert [(r["qmd_variant"]["name"], r["qmd_variant"]["fields"], r["passed"]) for r in recs] == \
        [("qmd-type-gpc-cga", {"QMD_TYPE": 3}, False), ("default", {}, True)]
    assert verify_record(tmp_path / "records" / "runs" / "gpu-qualify-0002" / "record.json") == []


def test_device_check_cuts_a_hanging_stage(tmp_path):
    tool(tmp_path / "bin", "nvidia-smi", '[ "$1" = -q ] && exec sleep 60; exit 9')   # -q hangs
    t0 = time.monotonic()
    run, stages, out = device_check(tmp_path, DEVCHECK_PROC=str(tmp_path / "no-driver"), DEVCHECK_BUDGET_ENV="3")
    assert time.monotonic() - t0 < 40
    assert run.returncode == 1
    assert {p.name for p in out.iterdir()} == FILES
    assert stages["env"][0] == "timed-out" and "cut after 3 s" in stages["env"][1]
    env = (out / "env.txt").read_text()
    assert "== uname -a" in env and "== nvidia-smi -q" in env           # what it had, kept
    assert stages["cuda-trace"][0] == "could-not-run" and stages["vendor"][0] == "could-not-run"
    assert stages["qualify:default"][0] == "could-not-run" and "no NVIDIA kernel driver" in stages["qualify:default"][1]
    assert stages["qualify"][0] == "could-not-run" and stages["total"][0] == "failed"
