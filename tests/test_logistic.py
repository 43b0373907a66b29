"""examples/logistic.alpha: logistic regression on the breast-cancer set with shuffled minibatches
(issue 16): both ISAs and the star's roles equal the interpreter, a resume in the middle of an
epoch continues the order, and the trained model classifies the held-out rows."""
import json
import os

import pytest

from alphac.build import build_learner
from alphac.driver import compile_file
from alphac.ir import interp
from backend import run_exe
from conftest import ROOT, alphac, example

DATA = ROOT / "examples" / "data"


@pytest.fixture(scope="module")
def learner():
    return compile_file(example("logistic")).learner


def test_the_example_declares_shuffled_minibatches(learner):
    assert (learner.nsamples, learner.batch, learner.shuffle, learner.batches) == (469, 32, 569, 15)


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
def test_both_isas_and_a_resume_mid_epoch_equal_the_interpreter(learner, target, tmp_path):
    exe = tmp_path / f"logistic.{target}"
    exe.write_bytes(build_learner(learner, target).elf)
    os.chmod(exe, 0o755)
    want = interp.format_state(learner, interp.run(learner, 20))      # epoch 1, batch 5
    r = run_exe(exe, "--steps", 20, target=target)
    assert r.returncode == 0 and r.stdout == want
    ck = tmp_path / "ck"
    assert run_exe(exe, "--steps", 12, "--checkpoint", ck, target=target).returncode == 0
    r = run_exe(exe, "--resume", ck, "--steps", 8, target=target)
    assert r.returncode == 0 and r.stdout == want


def test_the_star_equals_its_plan_and_classifies_the_held_out_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)                           # roles.json names its source from the root
    roles, ck = tmp_path / "roles", tmp_path / "ck"
    assert alphac("build", "examples/logistic.alpha", "--deployment", "logistic_star", "-o", roles)[0] == 0
    code, out, err = alphac("launch", roles, "--epochs", 20, "--checkpoint", ck, "--records",
                            tmp_path / "runs")
    assert code == 0, err
    assert out == alphac("run", "examples/logistic.alpha", "--deployment", "logistic_star",
                         "--steps", 300)[1]
    mid = tmp_path / "mid"                            # 12 + checkpoint + 8 = 20, mid-epoch
    assert alphac("launch", roles, "--steps", 12, "--checkpoint", mid, "--records", tmp_path / "runs")[0] == 0
    code, out, err = alphac("launch", roles, "--steps", 8, "--resume", mid, "--records", tmp_path / "runs")
    assert code == 0 and out == alphac("run", "examples/logistic.alpha", "--deployment",
                                       "logistic_star", "--steps", 20)[1], err
    code, out, err = alphac("eval", "examples/logistic.alpha", "--checkpoint", ck, "--data",
                            f"x={DATA / 'cancer_x_test.npy'}", "--data",
                            f"y={DATA / 'cancer_y_test.npy'}", "--labels", "y", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["samples"] == 100 and report["step"] == 300
    assert report["correct"] >= 95                     # measured: 98 of 100
