"""As a new user: alphac built as a wheel, installed with numpy alone into a fresh virtual
environment outside the repository, used from a folder of the user's own.

What it does: copies the package's sources to a temporary folder and builds a wheel there
(`pip wheel --no-deps`), creates a venv in tmp (no system site packages), installs the wheel
(`--no-deps`) and numpy into it, and then, from a project folder holding a learner of its own
(an examples folder of its own: `mine.alpha`, its data in two `.npy` files, and the
reference GPU host), runs that
venv's `alphac`: check, run, build for x86_64 and aarch64 (both executables run, the AArch64 one
under qemu-aarch64, and print what `alphac run` prints), verify, `--emit ptx` (ptxas assembles
it), a GPU owner build, build-all, and `--emit asm` without capstone (a one-line error, exit 1).

Requires: pip able to reach the package registry (numpy; pip's cache is reused), ptxas and
qemu-aarch64 (`require_tool`: in CI their absence fails the test), an x86-64 host.
"""
from __future__ import annotations

import ast
import os
import re
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, require_tool

from alphac import manifest

MINE = str(Path("examples", "mine.alpha"))      # in the user's folder, not the repository's


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


def pip_env() -> dict[str, str]:
    """This environment (proxies, pip's cache and index settings) without what would let the
    repository or this venv leak into the new one."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_TARGET", "PIP_PREFIX")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with the wheel and numpy installed, and nothing else."""
    if platform.machine() != "x86_64":
        pytest.fail("this test runs x86-64 executables natively; run it on an x86-64 host")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"                      # the sources, with Python's caches as a tree has them
    shutil.copytree(ROOT / "alphac", src / "alphac")
    (src / "alphac" / "__pycache__").mkdir(exist_ok=True)
    (src / "alphac" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"a cache")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    r = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src],
            env=pip_env())
    assert r.returncode == 0, r.stderr
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before   # no build/, no egg-info
    (wheel,) = (tmp / "dist").glob("alphac-*.whl")
    import zipfile
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "__pycache__" in n or n.endswith(".pyc")]
    env = tmp / "venv"
    r = run([sys.executable, "-m", "venv", "--without-pip", env], env=pip_env())
    assert r.returncode == 0, r.stderr
    python = env / "bin" / "python"
    r = run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
             "--disable-pip-version-check", "--no-deps", wheel], env=pip_env())
    assert r.returncode == 0, r.stderr
    r = run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
             "--disable-pip-version-check", "numpy"], env=pip_env())
    assert r.returncode == 0, f"pip could not install numpy into the venv: {r.stderr}"
    return env


@pytest.fixture(scope="module")
def user(venv, tmp_path_factory):
    """(run alphac, the project folder): the venv's alphac, from a folder of the user's own,
    with an environment that names neither the repository nor the test's venv."""
    ptxas = require_tool("ptxas")
    home = tmp_path_factory.mktemp("home")
    proj = tmp_path_factory.mktemp("newcomer")          # `alphac init`'s project, and a GPU host
    r = run([venv / "bin" / "alphac", "init", proj], cwd=proj, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    shutil.copy(ROOT / "examples" / "h200.gpuhost", proj / "examples" / "h200.gpuhost")
    path = [str(venv / "bin"), str(Path(ptxas).parent), "/usr/bin", "/bin"]
    env = {"PATH": os.pathsep.join(path),
           "HOME": str(home), "LC_ALL": "C.UTF-8", "ALPHAC_PTXAS": ptxas}

    def alphac(*args):
        return run([venv / "bin" / "alphac", *args], cwd=proj, env=env)
    return alphac, proj


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r.stdout


def test_the_wheel_holds_every_compiler_file_and_needs_only_numpy(venv):
    code = ("import alphac, importlib.metadata as md; from alphac import manifest; "
            "print(alphac.__file__); print(manifest.compiler_digest()); "
            "print(sorted(d.metadata['Name'] for d in md.distributions()))")
    lines = ok(run([venv / "bin" / "python", "-c", code], cwd=venv, env={"PATH": "/usr/bin:/bin"}))
    where, digest, dists = lines.splitlines()
    assert where.startswith(str(venv)) and not where.startswith(str(ROOT))
    assert digest == manifest.compiler_digest(ROOT / "alphac")       # every file shipped
    assert dists == "['alphac', 'numpy']"


def test_every_import_is_the_standard_library_numpy_or_a_declared_extra():
    """Also the imports inside functions, which no command above may reach: by reading them."""
    allowed = set(sys.stdlib_module_names) | {"alphac", "numpy", "capstone"}   # capstone: [listing]
    found = {}
    for f in (ROOT / "alphac").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for n in names:
                found.setdefault(n.split(".")[0], f.relative_to(ROOT).as_posix())
    assert {n: f for n, f in found.items() if n not in allowed} == {}
    assert "numpy" in found and "capstone" in found


def test_a_newcomer_checks_runs_builds_and_verifies(user):
    alphac, proj = user
    ok(alphac("check", MINE))
    want = ok(alphac("run", MINE, "--steps", "7"))
    assert want.startswith("w[0] ") and len(want.splitlines()) == 6
    ok(alphac("build", MINE, "-o", "mine"))
    ok(alphac("build", MINE, "--target", "aarch64", "-o", "mine.a64"))
    assert ok(run([proj / "mine", "--steps", "7"], cwd=proj)) == want     # its data: examples/*.npy
    qemu = require_tool("qemu-aarch64")
    assert ok(run([qemu, proj / "mine.a64", "--steps", "7"], cwd=proj)) == want
    assert "every hash matches" in ok(alphac("verify", "mine.manifest.json"))


def test_a_newcomer_builds_for_the_gpu_and_emits(user):
    alphac, proj = user
    ok(alphac("build", MINE, "--emit", "ptx", "-o", "mine.ptx"))
    r = run([require_tool("ptxas"), "-arch=sm_90",
             "--disable-optimizer-constants", "mine.ptx", "-o", "mine.cubin"], cwd=proj)
    assert r.returncode == 0, r.stderr
    ok(alphac("build", MINE, "--target", "x86_64+sm_90",
              "--gpu-host", "examples/h200.gpuhost", "-o", "mine.gpu"))
    assert (proj / "mine.gpu").stat().st_size > 0 and (proj / "mine.gpu.manifest.json").exists()
    assert "kernel owner_sum:" in ok(alphac("build", MINE, "--emit", "cubin-info"))
    assert "up to date) and build/MANIFEST.json" in ok(alphac("build-all"))
    r = alphac("build", MINE, "--emit", "asm")
    assert r.returncode == 1 and r.stdout == "" and r.stderr == (
        "alphac: error: --emit asm needs the disassembler capstone, an optional dependency: "
        "pip install 'alphac[listing]' (or pip install capstone)\n")


def test_a_newcomer_launches_a_deployment_traces_it_and_exports_the_checkpoint(venv, user):
    """The issue's path: a deployment built with one command, launched, decimal output, a trace
    written, the checkpoint exported and read back by numpy with the printed bits."""
    import json
    import struct
    alphac, proj = user
    ok(alphac("build", MINE, "--deployment", "mine_star", "-o", "dep"))
    hexed = ok(alphac("launch", "dep", "--steps", "4", "--records", "runs", "--checkpoint", "ck"))
    assert hexed == ok(alphac("run", MINE, "--steps", "4", "--deployment", "mine_star"))
    decimal = ok(alphac("run", MINE, "--steps", "4", "--deployment", "mine_star", "--format", "decimal"))
    bits = lambda v: f"{struct.unpack('<Q', struct.pack('<d', float(v)))[0]:016x}"
    assert [f"{l.split()[0]} {bits(l.split()[1])}" for l in decimal.splitlines()] == hexed.splitlines()
    record = next(proj.glob("runs/*/record.json"))
    ok(alphac("verify-record", record))
    ok(alphac("trace", record, "-o", "trace.json"))
    assert {e["args"]["name"] for e in json.loads((proj / "trace.json").read_text())["traceEvents"]
            if e["ph"] == "M"} == {"coordinator", "owner.0", "owner.1"}
    ok(alphac("ckpt", "export", "ck", "-o", "model.npz", "--learner", MINE))
    code = ("import numpy as np, struct\n"
            "z = np.load('model.npz')\n"
            "for name in ('w', 'm', 'v'):\n"
            "    for k, x in enumerate(z[name]):\n"
            "        print(f'{name}[{k}]', struct.pack('>d', x).hex())\n")
    got = ok(run([venv / "bin" / "python", "-c", code], cwd=proj, env={"PATH": "/usr/bin:/bin"}))
    assert sorted(got.splitlines()) == sorted(hexed.splitlines())


def readme_script() -> str:
    """The first block of README.md's "Using it": its commands, in order, comments left out."""
    section = (ROOT / "README.md").read_text().split("\n## Using it\n")[1].split("\n## ")[0]
    block = section.split("\n\n    ")[1].split("\n\n")[0]
    lines = [re.sub(r"\s+# .*", "", line[4:] if line.startswith("    ") else line)
             for line in ("    " + block).splitlines()]
    return "\n".join(line for line in lines if line.strip())


def test_the_readmes_commands_run_as_a_script_from_an_empty_folder(venv, tmp_path):
    """README.md's "Using it", as a user copies it: a bash script, every command checked, from an
    empty folder, with the wheel's `alphac` and nothing of the repository."""
    script = readme_script()
    assert script.startswith("alphac init ") and "alphac build-all\nalphac launch build/roles/" in script
    ptxas = require_tool("ptxas")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": os.pathsep.join([str(venv / "bin"), str(Path(ptxas).parent), "/usr/bin", "/bin"]),
           "HOME": str(tmp_path), "LC_ALL": "C.UTF-8"}
    r = run(["bash", "-euo", "pipefail", "-x", "-c", script], cwd=empty, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "equals the reference interpreter: yes" in r.stderr
    first = empty / "first"
    assert (first / "loss.svg").read_text().count("<polyline") == 1       # one run, resumed
    assert (first / "model.npz").is_file() and (first / "build" / "MANIFEST.json").is_file()
    assert "samples: 3" in r.stdout


TUTORIAL_BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)


def run_tutorial(work: Path, env: dict) -> str:
    """docs/tutorial.md's blocks, in order, in the empty folder `work` (each `sh` block with
    `bash -e`, each `file=NAME` block written as NAME; the page is the one place the steps
    live); the standard output."""
    commands, out = [], ""
    for info, body in TUTORIAL_BLOCK.findall((ROOT / "docs" / "tutorial.md").read_text()):
        if "file=" in info:
            (work / info.split("file=")[1]).write_text(body)
        elif info == "sh":
            p = subprocess.run(["bash", "-ec", body], cwd=work, env=env, capture_output=True, text=True,
                               timeout=300)
            assert p.returncode == 0 and "Traceback" not in p.stderr, \
                f"{body}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
            commands, out = commands + body.splitlines(), out + p.stdout
    for needed in ("alphac check", "alphac run", "alphac build mine.alpha --deployment",
                   "alphac launch three --steps 50 --checkpoint", "alphac eval", "alphac ckpt export",
                   "alphac export-metrics", "alphac trace"):
        assert any(c.startswith(needed) for c in commands), needed
    assert len((work / "loss.jsonl").read_text().splitlines()) == 50 and "accuracy: " in out
    return out


def test_the_tutorial_runs_from_the_wheel(venv, tmp_path):
    """docs/tutorial.md (issue 46), run as written from an empty folder with the wheel's `alphac`
    and `python`; what the page says happened: the resumed run is 60 steps of the plan."""
    import json
    from alphac import api
    empty = tmp_path / "empty"
    empty.mkdir()
    run_tutorial(empty, {"PATH": os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"]),
                         "HOME": str(tmp_path), "LC_ALL": "C.UTF-8"})
    second = json.loads((empty / "runs" / "three-0002" / "record.json").read_text())
    compiled, plans = api.deployments(empty / "mine.alpha", "three")
    assert second["passed"] and second["published"] == api.run(compiled, 60, plan=plans["three"])
