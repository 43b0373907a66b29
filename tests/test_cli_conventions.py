"""The CLI as cargo and git users expect it (issue 21): no abbreviated options, suggestions for
typos, a command's own usage on its errors, --version with the source digest, help for every
option, launch errors with their detail and a hint, output formats, one-command deployments."""
import json
import os
import shutil

import pytest

from conftest import ROOT, alphac, example, require_tool


def test_an_abbreviated_option_is_not_taken_for_another():
    code, out, err = alphac("run", example("lsq_adam"), "--step", "5")
    assert code == 2 and out == "" and "alphac run" in err and "did you mean `--steps`?" in err


def test_a_mistyped_command_gets_a_suggestion():
    code, _, err = alphac("biuld", example("lsq_adam"))
    assert code == 2 and "unknown command `biuld`; did you mean `build`?" in err


def test_a_mistyped_option_prints_the_commands_usage():
    code, _, err = alphac("launch", "x", "--stepz", "3")
    assert code == 2 and err.startswith("usage: alphac launch") and "--steps" in err


def test_version_names_the_source_digest():
    from alphac.manifest import compiler_digest
    code, out, _ = alphac("--version")
    assert code == 0 and out.strip().endswith(f"(source sha256 {compiler_digest()[:16]})")


def test_every_option_of_every_command_has_help():
    from alphac.cli import build_parser
    ap = build_parser()
    subs = ap._subparsers._group_actions[0].choices
    missing = [f"{name} {a.dest}" for name, p in subs.items() for a in p._actions
               if a.help in (None, "") and a.dest != "help"]
    assert missing == []


@pytest.mark.parametrize("case", ["nosuch", "empty", "alpha file", "role binary", "roles folder"])
def test_launch_errors_say_what_is_wrong_and_what_to_do(case, tmp_path, example_roles):
    paths = {"nosuch": tmp_path / "nosuch", "empty": tmp_path / "empty",
             "alpha file": example("lsq_adam"), "role binary": example_roles / "lsq_adam_star" / "owner.0",
             "roles folder": example_roles}
    (tmp_path / "empty").mkdir()
    code, out, err = alphac("launch", paths[case], "--records", tmp_path / "runs")
    assert code == 103 and out == "" and err.count("\n") == 1, err
    assert err.startswith("refused: launch-input (") and str(paths[case]) in err
    want = {"nosuch": "does not exist", "empty": "has no roles.json", "alpha file": "is a file",
            "role binary": "is a file", "roles folder": "holds deployments"}[case]
    assert want in err and ("alphac build FILE --deployment" in err or "launch one of" in err)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("fmt", ["decimal", "json"])
def test_the_state_in_decimal_and_json_reads_back_to_the_same_bits(fmt):
    import struct
    _, hexed, _ = alphac("run", example("lsq_adam"), "--steps", "3")
    code, out, _ = alphac("run", example("lsq_adam"), "--steps", "3", "--format", fmt)
    assert code == 0
    bits = lambda v: f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x}"
    if fmt == "decimal":
        back = [f"{l.split()[0]} {bits(float(l.split()[1]))}" for l in out.splitlines()]
    else:
        back = []
        for name, v in json.loads(out).items():
            back += [f"{name}[{k}] {bits(x)}" for k, x in enumerate(v)] if isinstance(v, list) \
                else [f"{name} {bits(v)}"]
    assert "\n".join(back) + "\n" == hexed


def test_a_deployment_of_your_own_in_one_command(tmp_path, monkeypatch):
    """A learner in a folder of its own, its deployment built with one command and launched."""
    work = tmp_path / "mine"
    work.mkdir()
    shutil.copy(example("lsq_adam"), work / "mine.alpha")
    monkeypatch.chdir(work)
    code, out, err = alphac("build", "mine.alpha", "--deployment", "lsq_adam_star", "-o", "dep")
    assert code == 0, err
    assert sorted(p.name for p in (work / "dep").iterdir()) == sorted(
        ["MANIFEST.json", "roles.json", "coordinator", "owner.0", "owner.1", "owner.2", "owner.3"])
    code, out, err = alphac("launch", "dep", "--steps", "3", "--records", "runs")
    assert code == 0, err
    _, want, _ = alphac("run", "mine.alpha", "--steps", "3", "--deployment", "lsq_adam_star")
    assert out == want
    code, out, err = alphac("verify", "dep/MANIFEST.json")
    assert code == 0, err
    record = next((work / "runs").glob("*/record.json"))
    assert alphac("verify-record", record)[0] == 0
    code, _, err = alphac("trace", record, "-o", "trace.json")
    assert code == 0 and json.loads((work / "trace.json").read_text())["traceEvents"]


def test_a_checkpoint_exported_and_shown_as_json(tmp_path):
    import numpy as np
    from backend import build_learner_exe, run_exe
    exe = build_learner_exe("lsq_adam", "x86_64", tmp_path)
    r = run_exe(exe, "--steps", 3, "--checkpoint", tmp_path / "ck")
    code, out, err = alphac("ckpt", "export", tmp_path / "ck", "-o", tmp_path / "m.npz",
                            "--learner", example("lsq_adam"))
    assert code == 0, err
    with np.load(tmp_path / "m.npz") as z:
        assert z["p1"].shape == () and z["w"].shape == (5,)
    code, out, _ = alphac("ckpt", "show", tmp_path / "ck", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["manifests"][0]["path"] == "MANIFEST"
    printed = dict(l.split() for l in r.stdout.splitlines())
    assert shown["state"]["w"]["hex"] == [printed[f"w[{k}]"] for k in range(5)]
    code, _, err = alphac("ckpt", "export", tmp_path / "ck", "-o", tmp_path / "m.txt")
    assert code == 1 and ".safetensors or .npz" in err


def test_launch_shows_progress_when_asked_and_not_otherwise(tmp_path, example_roles):
    code, out, err = alphac("launch", example_roles / "lsq_adam_star", "--steps", "40",
                            "--records", tmp_path / "runs", "--progress", "always")
    assert code == 0 and "launch: step 40/40, " in err and "steps/s" in err
    assert "\r" not in err                  # off a terminal (a log, make demo's): lines, no \r
    code, out, err = alphac("launch", example_roles / "lsq_adam_star", "--steps", "3",
                            "--records", tmp_path / "runs")          # stderr is not a terminal
    assert code == 0 and "launch: step" not in err


def test_launch_says_which_roles_ran_under_an_emulator(tmp_path, example_roles):
    """The mixed star: owners 0 and 2 are AArch64 executables, run under qemu-aarch64 here
    (issue 46: the demo never said so)."""
    require_tool("qemu-aarch64")
    code, out, err = alphac("launch", example_roles / "lsq_adam_mixed", "--steps", "2",
                            "--records", tmp_path / "runs")
    assert code == 0 and "launch: owner.0, owner.2 ran as aarch64 executables under qemu-aarch64 " \
        "(this host is x86_64)" in err, err
    code, out, err = alphac("launch", example_roles / "lsq_adam_star", "--steps", "2",
                            "--records", tmp_path / "runs")
    assert code == 0 and " ran as " not in err, err


def test_ckpt_show_of_a_missing_checkpoint_is_one_line():
    code, out, err = alphac("ckpt", "show", "/nonexistent-ckpt")
    assert code == 1 and out == "" and err.startswith("alphac: error: ") and err.count("\n") == 1
    assert "[Errno" not in err and "No such file" in err


def test_a_deployment_builds_without_ptxas_when_no_role_needs_a_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("ALPHAC_PTXAS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    shutil.copy(example("lsq_adam"), tmp_path / "mine.alpha")
    monkeypatch.chdir(tmp_path)
    code, _, err = alphac("build", "mine.alpha", "--deployment", "lsq_adam_tree", "-o", "dep")
    assert code == 0, err


def test_build_all_shows_progress_when_asked(tmp_path, monkeypatch):
    (tmp_path / "examples").mkdir()
    shutil.copy(example("scalar_regression"), tmp_path / "examples" / "scalar_regression.alpha")
    monkeypatch.chdir(tmp_path)
    code, out, err = alphac("build-all", "--out", "b", "--progress", "always")
    assert code == 0, err
    import re
    steps = [tuple(map(int, m)) for m in re.findall(r"build-all: \[(\d+)/(\d+)\] ", err)]
    n = steps[0][1]
    assert steps == [(k, n) for k in range(1, n + 1)] and n > 1, err
    code, out, err = alphac("build-all", "--out", "c")            # stderr is not a terminal
    assert code == 0 and "build-all: [" not in err


def test_the_launcher_does_not_import_the_compiler():
    """`alphac launch` starts roles that are already built: importing the launcher must not load
    the compiler's front end, its math library or the shrink rule (about 130 ms before this test),
    only what a run needs; `--shrink` imports the rule when it is asked for."""
    import subprocess
    import sys
    code = ("import sys, alphac.tools.launch; print(sorted(m for m in sys.modules if m.startswith("
            "('alphac.types', 'alphac.math', 'alphac.ir', 'alphac.parse', 'alphac.tools.shrink'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
