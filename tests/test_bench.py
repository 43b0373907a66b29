"""Every benchmark runs, in its short mode, so that none can silently break (issue 21: `make
bench` crashed while the docs quoted its numbers). The figures of a short run are not checked:
benchmarks measure, tests do not time."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, require_tool

HEADERS = {"learners.py": "| learner | compile ms |", "functions.py": "function",
           "fleet.py": "| deployment | check time s |", "distributed.py": "| system | learner |",
           "interp.py": "| learner | samples |",
           "mlp.py": "| model | system | CPU ms a step, median |", "digits.py": "| system | ms a step, median | spread |",
           "sha256.py": "| system | message bytes |", "data.py": "| measure | alphac |",
           "exact_sum.py": "| learner | contract |", "codegen.py": "| workload | target | alphac ms/step |",
           "bits_before_after.py": "| learner | ISA | output identical |"}


@pytest.mark.parametrize("script", sorted(HEADERS))
def test_benchmark_runs_in_its_short_mode(script):
    if script == "functions.py":
        require_tool("gcc")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick"], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert HEADERS[script] in r.stdout, r.stdout
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and "---" not in l]
    assert script == "functions.py" or len(rows) >= 2, r.stdout      # a header and a row at least


def lying_runner(exe, args, built):
    """mock_runner, but the GPU owner's printed state has one bit changed (its last digit)."""
    from test_device_check_local import mock_runner
    rc, out, err = mock_runner(exe, args, built)
    if built is not None and out:
        out = out[:-2] + ("0" if out[-2] != "0" else "1") + out[-1:]
    return rc, out, err


def rm_failing_runner(exe, args, built):
    """mock_runner, but an owner built with --gpu-map rm exits as a refused driver call would."""
    from test_device_check_local import mock_runner
    if str(exe).endswith(".rm"):
        return 131, "", "refused: nvidia-call\n"
    return mock_runner(exe, args, built)


def test_a_failing_rm_mapped_owner_is_said_and_the_benchmark_goes_on(tmp_path):
    from test_device_check_local import need_mock
    from test_gpu_scripts import fake_proc
    need_mock()
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), "--quick", "--learners", "lsq", "--runner",
                        str(ROOT / "tests" / "test_bench.py") + ":rm_failing_runner",
                        "--proc", str(fake_proc(tmp_path)), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    failed = [l for l in lines if "map rm FAILED: exit 131: refused: nvidia-call" in l]
    assert len(failed) == 1 and lines.index(failed[0]) > max(
        i for i, l in enumerate(lines) if "start-up parts, ms:" in l), r.stdout
    assert lines[-1].endswith("map rm, bits = CPU: NO") and "| least squares 8 x 64, exact_sum, Adam |" in r.stdout


@pytest.mark.parametrize("runner,code,bits", [("test_device_check_local.py:mock_runner", 0, "yes"),
                                              ("test_bench.py:lying_runner", 1, "NO")])
def test_gpu_benchmark_against_the_mock(tmp_path, runner, code, bits):
    """bench/gpu.py --quick with every GPU owner under the mock (issue 42): a row per learner, the
    GPU owner's bits compared with the CPU executable's (a changed bit says NO and exits 1)."""
    from test_device_check_local import need_mock
    from test_gpu_scripts import fake_proc
    need_mock()
    lying = code == 1                   # the lie is found on one learner: the least squares alone
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), "--quick", "--runner",
                        str(ROOT / "tests" / runner.split(":")[0]) + ":" + runner.split(":")[1],
                        "--proc", str(fake_proc(tmp_path)), "--out", str(tmp_path / "out"),
                        *(["--learners", "lsq", "--rates", "2,8", "--choose", "map=rm"] if lying else [])],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == code, (r.stdout, r.stderr[-2000:])
    assert ("| learner | alphac GPU owner | alphac GPU owner, sampled 1/2 | alphac GPU owner, sampled 1/8 | "
            "alphac CPU executable |" if lying else
            "| learner | alphac GPU owner | alphac GPU owner, sampled 1/8 | alphac CPU executable |") in r.stdout
    assert lying == ("steps; ms a step, median (spread); map rm" in r.stdout), r.stdout   # --choose, said
    # the GPU owner's host part at the CPU executable's level, the best this CPU runs, said in the header
    from alphac.targets import LEVELS, host_runs
    level = json.loads((tmp_path / "out" / "bench-gpu.json").read_text())["level"]
    assert level == next((lv for lv in sorted(LEVELS, key=lambda lv: -LEVELS[lv].lanes) if host_runs(lv)), "x86_64")
    assert f"# GPU owner ({level}+sm_90) beside the CPU executable ({level}) and" in r.stdout
    owners = sorted((tmp_path / "out" / "bin").glob("*+sm_90"))
    assert owners and all(f"\ntarget {level}\n" in subprocess.run([o, "--version"], capture_output=True,
                                                                   text=True).stdout for o in owners)
    rows = [l for l in r.stdout.splitlines() if l.startswith("| ") and "---" not in l][1:]
    assert [l.split(" | ")[0] for l in rows] == ["| least squares 8 x 64, exact_sum, Adam",
                                                "| MLP 6-5-3 tanh, batch 16, Adam"][:2 - lying]
    assert all(l.endswith(f"| {bits} |") for l in rows), r.stdout
    # the sampled shadow on every learner, exact_sum's least squares included
    assert [l.split(" | ")[2] == "-" for l in rows] == [False, False][:2 - lying], r.stdout
    assert not lying or rows[0].split(" | ")[3] != "-", r.stdout
    # where start-up goes, from the owner's own events (issue 42): every span and every part
    # (each event the conversation writes: docs/nvdrv.md "Where start-up goes"), every learner
    lines = r.stdout.splitlines()
    spans = [l for l in lines if "start-up spans, ms:" in l]
    parts = [l for l in lines if "start-up parts, ms:" in l]
    uvm = ("vaspace->map",) if lying else ("vaspace->uvm-register", "uvm-register->uvm")   # --choose map=rm
    assert len(spans) == len(parts) == len(rows) and all(k in l for l in spans for k in (
        ("identity->memory",) if lying else ("identity->uvm", "uvm->memory")) + ("memory->channel", "channel->uploaded")), r.stdout
    assert all(k in l for l in parts for k in ("data checked->gpu-open", "gpu-open->device", "identity->boost", *uvm,
                                               "memory->gpfifo", "rows->uploaded")), r.stdout
    # the owner mapped by the RM alone (--gpu-map rm), after the default's lines: its parts, its bits
    rm = [l for l in lines if "start-up parts, map rm, ms:" in l]
    assert len(rm) == len(rows) and all("vaspace->map" in l and "uvm" not in l for l in rm), r.stdout
    assert lines.index(rm[0]) > max(lines.index(l) for l in parts) and "map rm FAILED" not in r.stdout
    assert [l.endswith(f"map rm, bits = CPU: {bits}") for l in lines if "map rm, bits" in l] == [True] * len(rows)
    # and with the GPU held by this process (gpu/holder.py): not here, where no driver is, said so
    held = [l for l in lines if "start-up, the GPU" in l and "held" in l]
    assert Path("/dev/nvidiactl").exists() or len(held) == 2 * len(rows) and all(
        l.endswith("not measured: cannot open /dev/nvidiactl: No such file or directory") for l in held), r.stdout
