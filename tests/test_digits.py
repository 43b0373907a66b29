"""The real data set example, examples/digits_mlp.alpha (a 64-32-10 MLP on scikit-learn's digits,
full batch over 1500 images, Adam): its data are the same bytes every time; its executables on
both ISAs, its deployments' roles and its checkpoints give the reference interpreter's bits; the
figures examples/data/digits_eval.py reports from a printed state are `alphac eval`'s."""
import importlib.util
import os
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


def state(text: str) -> dict[str, str]:
    return dict(line.split() for line in text.splitlines())


def test_the_data_are_the_same_bytes_every_time(tmp_path):
    if not os.environ.get("CI"):
        pytest.importorskip("sklearn")
    script = DATA / "make_data.py"
    r = subprocess.run([sys.executable, script, "--out", tmp_path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = subprocess.run([sys.executable, script, "--list", "--out", DATA], cwd=ROOT,
                            capture_output=True, text=True).stdout.split()
    written = sorted(p.name for p in tmp_path.iterdir())
    assert [Path(p).name for p in listed] == written and len(written) == 31
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
    x, y = np.load(DATA / "digits_x_train.npy"), np.load(DATA / "digits_y_test.npy")
    assert x.shape == (1500, 64) and x.dtype == "<f8" and y.shape == (297,) and 0 <= x.min() <= x.max() <= 1
    w1 = np.load(DATA / "digits_w1.npy")
    assert w1.shape == (32, 64) and np.abs(w1).max() < 1 / 8


@pytest.fixture(scope="module")
def exes(tmp_path_factory) -> dict[str, Path]:
    from alphac.build import build_learner
    from alphac.driver import compile_file
    lr = compile_file(EXAMPLE).learner
    out = {}
    for target in ("x86_64", "aarch64"):
        out[target] = tmp_path_factory.mktemp("digits") / f"digits.{target}"
        out[target].write_bytes(build_learner(lr, target).elf)
        out[target].chmod(0o755)
    return out


@pytest.fixture(scope="module")
def interpreted() -> dict[int, str]:
    """`alphac run examples/digits_mlp.alpha` for 0 and 3 steps."""
    out = {}
    for steps in (0, 3):
        code, out[steps], err = alphac("run", EXAMPLE, "--steps", steps)
        assert code == 0, err
    return out


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_executable_equals_the_interpreter(exes, interpreted, target):
    if target == "aarch64":
        require_tool("qemu-aarch64")
    for steps, want in interpreted.items():
        r = run_exe(exes[target], "--steps", steps, target=target)
        assert r.returncode == 0 and r.stdout == want, (steps, r.stderr)
    init = state(interpreted[0])                          # the loaded initial weights
    assert init["W1[3,5]"] == struct.pack(">d", np.load(DATA / "digits_w1.npy")[3, 5]).hex()
    assert init["mW1[0,0]"] == "0" * 16 and len(init) == 3 * (32 * 64 + 32 + 10 * 32 + 10) + 2


def test_checkpointed_on_x86_64_after_3_and_resumed_on_aarch64_for_2_equals_5(exes, tmp_path):
    require_tool("qemu-aarch64")
    three = run_exe(exes["x86_64"], "--steps", 3, "--checkpoint", tmp_path / "ck")
    assert three.returncode == 0, three.stderr
    five = run_exe(exes["x86_64"], "--steps", 5).stdout
    resumed = run_exe(exes["aarch64"], "--steps", 2, "--resume", tmp_path / "ck", target="aarch64")
    assert resumed.returncode == 0 and resumed.stdout == five != three.stdout, resumed.stderr


def test_the_reported_figures_are_alphac_evals(exes, tmp_path):
    """digits_eval.py's numpy accuracy on a printed state = `alphac eval`'s on its checkpoint
    (the first 40 held-out images), and the mean losses agree to rounding."""
    spec = importlib.util.spec_from_file_location("digits_eval", DATA / "digits_eval.py")
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    r = run_exe(exes["x86_64"], "--steps", 20, "--checkpoint", tmp_path / "ck")
    p = ev.read_state(r.stdout)
    x, y = np.load(DATA / "digits_x_test.npy")[:40], np.load(DATA / "digits_y_test.npy")[:40]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    code, out, err = alphac("eval", EXAMPLE, "--checkpoint", tmp_path / "ck", "--format", "json",
                            "--data", f"x={tmp_path / 'x.npy'}", "--data", f"y={tmp_path / 'y.npy'}")
    assert code == 0, err
    import json
    got = json.loads(out)
    z = np.tanh(x @ p["W1"].T + p["b1"]) @ p["W2"].T + p["b2"]
    m = z.max(axis=1, keepdims=True)
    loss = np.mean((m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0] - z[np.arange(40), y.astype(int)])
    assert got["samples"] == 40 and got["correct"] == int((z.argmax(axis=1) == y).sum())
    assert abs(got["mean_loss"] - loss) <= 1e-12 * abs(loss)


def launch(dep_dir: Path, tmp_path: Path, **kw):
    from alphac.tools.launch import launch as run
    cwd = os.getcwd()
    os.chdir(ROOT)                                   # roles.json names its source from the root
    try:
        return run(dep_dir, records=tmp_path / "runs", deadline_ms=20000, **kw)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def roles(tmp_path_factory) -> Path:
    """Every deployment of the example, built: DIR/DEPLOYMENT/ROLE, roles.json, MANIFEST.json."""
    from alphac.artifacts import build_deployment
    out = tmp_path_factory.mktemp("digits-roles")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for dep in DEPLOYMENTS:
            build_deployment("examples/digits_mlp.alpha", dep, out / dep)
    finally:
        os.chdir(cwd)
    return out


@pytest.fixture(scope="module")
def plans() -> dict[str, str]:
    """Each deployment's plan for 2 steps in the interpreter (filled by the test below)."""
    return {}


@pytest.mark.parametrize("dep", DEPLOYMENTS)
def test_deployment_roles_equal_the_plan_in_the_interpreter(roles, plans, dep, tmp_path):
    if dep == "digits_mixed":
        require_tool("qemu-aarch64")
    rec = launch(roles / dep, tmp_path, steps=2)
    assert rec["passed"], rec["roles"]
    code, plans[dep], err = alphac("run", EXAMPLE, "--deployment", dep, "--steps", 2)
    assert code == 0 and rec["published"] == plans[dep], err
    # one split and one tree: every deployment is the star's run, bit for bit
    assert len(set(plans.values())) == 1


def test_star_checkpointed_after_3_and_resumed_for_2_equals_5(roles, tmp_path):
    five = launch(roles / "digits_star", tmp_path, steps=5)
    a = launch(roles / "digits_star", tmp_path, steps=3, checkpoint=tmp_path / "ck")
    b = launch(roles / "digits_star", tmp_path, steps=2, resume=tmp_path / "ck")
    assert five["passed"] and a["passed"] and b["passed"], b["roles"]
    assert b["published"] == five["published"] != a["published"]


def test_the_readme_figures_are_the_demos(roles, tmp_path):
    """README.md's figures are what `make demo` shows (digits_star, 300 steps): step 300's mean
    loss as the progress line and `alphac plot` write it (the loss the step starts from), and
    after its update the training loss and the held-out count digits_eval.py computes."""
    import re
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"Step 300's mean loss over the 1500 training images is (\d\.\d+).*?After step 300's "
                     r"update the training loss is (\d\.\d+).*?and (\d+) of the 297 held-out", readme, re.S)
    assert said, "README.md no longer states the digits figures as this test reads them"
    rec = launch(roles / "digits_star", tmp_path, steps=300)
    assert rec["passed"] and rec["loss"][-1]["step"] == 300
    assert f"{float(rec['loss'][-1]['decimal']):.6f}" == said[1]
    spec = importlib.util.spec_from_file_location("digits_eval", DATA / "digits_eval.py")
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    loss, accuracy = ev.figures(ev.read_state(rec["published"]))
    assert f"{loss:.6f}" == said[2] and round(accuracy * 297) == int(said[3])
