"""The real data set example, examples/digits_mlp.alpha (a 64-32-10 MLP on scikit-learn's digits,
full batch over 1500 images, Adam): its data are reproducible; its executables on both ISAs, its
deployments' roles and its checkpoints give the reference interpreter's bits.

The interpreter takes tens of seconds a step on 1500 images, so the comparisons with it run on
the same learner on its first 15 images (`small`: the example's text, its shares scaled by 1/100,
its data cut in a .npy of its own); the example itself is run by the executables, against each
other. `ALPHAC_DIGITS_FULL=1` also compares the example's executable with the interpreter (slow).
"""
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backend import run_exe
from conftest import EXAMPLES, ROOT, alphac, require_tool

EXAMPLE = EXAMPLES / "digits_mlp.alpha"
DATA = EXAMPLES / "data"
DEPLOYMENTS = ["digits_star", "digits_tree", "digits_star_zero3", "digits_mixed"]
N = 15                                   # images in the small learner: 1500 / 100


def build(src: Path, target: str, out: Path) -> Path:
    from alphac.build import build_learner
    from alphac.driver import compile_file
    out.write_bytes(build_learner(compile_file(src).learner, target).elf)
    out.chmod(0o755)
    return out


def state(text: str) -> dict[str, str]:
    return dict(line.split() for line in text.splitlines())


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """The example on its first N images: the same code, its shares scaled by N/1500."""
    d = tmp_path_factory.mktemp("digits-small")
    (d / "data").mkdir()
    for f in DATA.glob("digits_*.npy"):
        a = np.load(f)
        np.save(d / "data" / f.name, a[:N] if f.name.endswith("_train.npy") else a)
    text = re.sub(r"(\d+)\.\.(\d+)", lambda m: f"{int(m[1]) * N // 1500}..{int(m[2]) * N // 1500}",
                  EXAMPLE.read_text())
    assert "owner[0] = 0..2, owner[1] = 2..6, owner[2] = 6..9, owner[3] = 9..15" in text
    (d / "digits_mlp.alpha").write_text(text)
    return d / "digits_mlp.alpha"


def test_the_data_are_the_same_bytes_every_time(tmp_path):
    if not os.environ.get("CI"):
        pytest.importorskip("sklearn")
    script = DATA / "make_data.py"
    r = subprocess.run([sys.executable, script, "--out", tmp_path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = subprocess.run([sys.executable, script, "--list", "--out", DATA], cwd=ROOT,
                            capture_output=True, text=True).stdout.split()
    written = sorted(p.name for p in tmp_path.iterdir())
    assert [Path(p).name for p in listed] == written and len(written) == 12
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
    x, y = np.load(DATA / "digits_x_train.npy"), np.load(DATA / "digits_y_test.npy")
    assert x.shape == (1500, 64) and x.dtype == "<f8" and y.shape == (297,) and 0 <= x.min() <= x.max() <= 1
    w1 = np.load(DATA / "digits_w1.npy")
    assert w1.shape == (32, 64) and np.abs(w1).max() < 1 / 8


@pytest.fixture(scope="module")
def interpreted(small):
    """`alphac run` of the small learner for 0 and 3 steps."""
    out = {}
    for steps in (0, 3):
        code, out[steps], err = alphac("run", small, "--steps", steps)
        assert code == 0, err
    return out


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_small_executable_equals_the_interpreter(small, interpreted, target, tmp_path):
    if target == "aarch64":
        require_tool("qemu-aarch64")
    exe = build(small, target, tmp_path / "digits")
    for steps, want in interpreted.items():
        r = run_exe(exe, "--steps", steps, target=target)
        assert r.returncode == 0 and r.stdout == want, (steps, r.stderr)


def test_the_example_on_both_isas_and_resumed_across_them(tmp_path):
    """The 1500-image example: 0 steps print the loaded initial weights; x86-64 = AArch64 (a
    second a step under qemu); 3 steps checkpointed on x86-64 and resumed on AArch64 for 2 = 5
    straight."""
    require_tool("qemu-aarch64")
    x86 = build(EXAMPLE, "x86_64", tmp_path / "digits.x86_64")
    arm = build(EXAMPLE, "aarch64", tmp_path / "digits.aarch64")
    init = state(run_exe(x86, "--steps", 0).stdout)
    w1 = np.load(DATA / "digits_w1.npy")
    assert init["W1[3,5]"] == struct.pack(">d", w1[3, 5]).hex() and init["mW1[0,0]"] == "0" * 16
    assert len(init) == 3 * (32 * 64 + 32 + 10 * 32 + 10) + 2          # params, m, v; p1, p2
    one = run_exe(arm, "--steps", 1, target="aarch64")
    assert one.returncode == 0 and one.stdout == run_exe(x86, "--steps", 1).stdout != "\n".join(init)
    three = run_exe(x86, "--steps", 3, "--checkpoint", tmp_path / "ck")
    assert three.returncode == 0, three.stderr
    five = run_exe(x86, "--steps", 5).stdout
    resumed = run_exe(arm, "--steps", 2, "--resume", tmp_path / "ck", target="aarch64")
    assert resumed.returncode == 0 and resumed.stdout == five != three.stdout, resumed.stderr
    if os.environ.get("ALPHAC_DIGITS_FULL"):
        code, want, _ = alphac("run", EXAMPLE, "--steps", 1)
        assert code == 0 and run_exe(x86, "--steps", 1).stdout == want


def launch(dep_dir: Path, tmp_path: Path, **kw):
    from alphac.tools.launch import launch as run
    cwd = os.getcwd()
    os.chdir(dep_dir.parent.parent)                 # roles.json names its source from there
    try:
        return run(dep_dir, records=tmp_path / "runs", deadline_ms=20000, **kw)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def small_roles(small):
    """Every deployment of the small learner, built: DIR/build/DEPLOYMENT/..."""
    from alphac.artifacts import build_deployment
    cwd = os.getcwd()
    os.chdir(small.parent)
    try:
        for dep in DEPLOYMENTS:
            build_deployment(small.name, dep, Path("build") / dep)
    finally:
        os.chdir(cwd)
    return small.parent / "build"


@pytest.fixture(scope="module")
def plans(small):
    """Each deployment's plan for 2 steps in the interpreter (`alphac run --deployment`)."""
    return {}


@pytest.mark.parametrize("dep", DEPLOYMENTS)
def test_small_deployment_roles_equal_the_plan_in_the_interpreter(small, small_roles, plans, dep, tmp_path):
    if dep == "digits_mixed":
        require_tool("qemu-aarch64")
    rec = launch(small_roles / dep, tmp_path, steps=2)
    assert rec["passed"], rec["roles"]
    code, plans[dep], err = alphac("run", small, "--deployment", dep, "--steps", 2)
    assert code == 0 and rec["published"] == plans[dep], err
    # one split and one tree: every deployment is the star's run, bit for bit
    assert len(set(plans.values())) == 1


def test_small_star_checkpointed_after_3_and_resumed_for_2_equals_5(small_roles, tmp_path):
    five = launch(small_roles / "digits_star", tmp_path, steps=5)
    a = launch(small_roles / "digits_star", tmp_path, steps=3, checkpoint=tmp_path / "ck")
    b = launch(small_roles / "digits_star", tmp_path, steps=2, resume=tmp_path / "ck")
    assert five["passed"] and a["passed"] and b["passed"], b["roles"]
    assert b["published"] == five["published"] != a["published"]
